"""The products ``G p`` of CatStratPD's conjugate gradients on one bucket of leaves
(:class:`~daskpd._strat.categorical_buckets.CGBucket`, kept on the worker that merged
it): every trial set's ``sum_l w_l n_l (n_l . p)``, summed per virtual bucket in their
order by compiled kernels (:func:`bucket_products`).
"""
from __future__ import annotations

import numba
import numpy as np

from .._engine.sums import Table
from .._engine.tree_fold import TreeNodes, tree_done, tree_out, tree_put, tree_scratch, tree_state
from .categorical_buckets import CGBucket, bucket_cells, push_empty
from .virtual import N_VIRTUAL

__all__ = ["bucket_products"]


@numba.njit(cache=True, nogil=True)
def _products(code, n, w, starts, p, cell, n_cells):
    """Per leaf-run: each row's term of G p, w_l n_i (n_l . p), summed into its (virtual
    bucket, category) cell in row order."""
    m = code.shape[0]
    out = np.zeros(n_cells)
    for q in range(starts.shape[0]):
        a = starts[q]
        b = starts[q + 1] if q + 1 < starts.shape[0] else m
        t = 0.0
        for i in range(a, b):
            t += n[i] * p[code[i]]
        t *= w[a]
        for i in range(a, b):
            out[cell[i]] += n[i] * t
    return out


@numba.njit(cache=True, nogil=True, inline="always")
def _leaf_dot(code, n, w, Pt, q, a, b, t):
    """``t[s] = w_q,s (n_q . p_s)`` of leaf-run ``q`` (rows ``a <= i < b``) for every set:
    branch-free over the sets, a set's absent row (n = 0) or leaf (w = 0) adds +-0.0 to
    sums that are never -0.0, which leaves their bits as they are."""
    S = t.shape[0]
    for s in range(S):
        t[s] = 0.0
    for i in range(a, b):
        c = code[i]
        for s in range(S):
            t[s] += n[i, s] * Pt[c, s]
    for s in range(S):
        t[s] *= w[q, s]


@numba.njit(cache=True, nogil=True)
def _block_products(code, n, w, starts, Pt, cell, n_cells):
    """:func:`_products` of every set at once (``Pt``: (categories, sets); a set's absent
    rows and leaves add zeros; an inactive set's column is computed and not used):
    (cells, sets)."""
    m = code.shape[0]
    S = n.shape[1]
    out = np.zeros((n_cells, S))
    t = np.zeros(S)
    for q in range(starts.shape[0]):
        a = starts[q]
        b = starts[q + 1] if q + 1 < starts.shape[0] else m
        _leaf_dot(code, n, w, Pt, q, a, b, t)
        for i in range(a, b):
            ci = cell[i]
            for s in range(S):
                out[ci, s] += n[i, s] * t[s]
    return out


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _block_products_tree(code, n, w, starts, vb, Pt, cell, n_cells, K, tbuf, top, t_lo, t_hi, sh_lo, sh_hi):
    """:func:`_block_products` with set 0's products per cell and the trials' summed per
    (virtual bucket, category) in a scratch that is pushed to the bucket's tree as each
    virtual bucket ends (:func:`~daskpd._engine.tree_fold.tree_done`): the same sums, without
    the (cells x sets) table.  Returns (cells, 1) and the tree's nodes."""
    m = code.shape[0]
    S = n.shape[1]
    out = np.zeros((n_cells, 1))
    acc = np.zeros((K, S - 1))
    touched = np.zeros(K, np.bool_)
    codes = np.empty(K, np.int64)
    nt = 0
    ts = tree_state(K, top, tbuf)
    t_z = t_hi - 1 if sh_hi else t_hi
    t = np.zeros(S)
    cur = -1
    for q in range(starts.shape[0]):
        if vb[q] != cur:
            if cur >= 0:
                _flush_products(acc, touched, codes, nt, cur, ts, t_z, top, t_lo, t_hi, sh_lo, sh_hi)
                nt = 0
            push_empty(ts, max(cur + 1, t_lo), vb[q], t_z, top, t_lo, t_hi, sh_lo, sh_hi)
            cur = vb[q]
        a = starts[q]
        b = starts[q + 1] if q + 1 < starts.shape[0] else m
        _leaf_dot(code, n, w, Pt, q, a, b, t)
        for i in range(a, b):
            out[cell[i], 0] += n[i, 0] * t[0]
            c = code[i]
            if not touched[c]:
                touched[c] = True
                codes[nt] = c
                nt += 1
            for s in range(1, S):
                acc[c, s - 1] += n[i, s] * t[s]
    if cur >= 0:
        _flush_products(acc, touched, codes, nt, cur, ts, t_z, top, t_lo, t_hi, sh_lo, sh_hi)
    push_empty(ts, max(cur + 1, t_lo), t_hi, t_z, top, t_lo, t_hi, sh_lo, sh_hi)
    return out, tree_out(ts)


@numba.njit(cache=True, nogil=True)
def _flush_products(acc, touched, codes, nt, v, ts, t_z, top, t_lo, t_hi, sh_lo, sh_hi):
    for j in range(nt):
        c = codes[j]
        tree_put(ts, c, acc[c], 0)
        acc[c, :] = 0.0
        touched[c] = False
    tree_done(ts, v, t_z, top, (v == t_lo and sh_lo) or (v == t_hi - 1 and sh_hi))


def bucket_products(bucket: CGBucket, P: np.ndarray, active: np.ndarray):
    """``G p`` terms of the bucket for each active set's vector (rows of ``P``): one
    Table(leaf=virtual bucket, key=category, values=one column per set) in
    virtual-bucket order (a bucket made with :class:`CGBlock`), else a list of one
    Table(..., values=[sum]) per set (None for an inactive set)."""
    if bucket.block is not None:
        b = bucket.block
        Pt = np.ascontiguousarray(np.asarray(P, np.float64).T)
        if Pt.shape[1] == 1:
            return Table(b.cell_vb, b.cell_code, _block_products(b.code, b.n, b.w, b.starts, Pt, b.cell,
                                                                 len(b.cell_vb)))
        # set 0's per (virtual bucket, category) cell; the trials' folded by the tree: a
        # round sends (categories x sets) numbers, not (cells x sets)
        lo, hi, shared_lo, shared_hi = b.span
        K = bucket.K
        out, tree = _block_products_tree(b.code, b.n, b.w, b.starts, b.vb, Pt, b.cell, len(b.cell_vb), K,
                                         tree_scratch(K, Pt.shape[1] - 1), N_VIRTUAL.bit_length() - 1,
                                         int(lo), int(hi), bool(shared_lo), bool(shared_hi))
        return Table(b.cell_vb, b.cell_code, out), TreeNodes(*tree)
    out = []
    for st, (code, n, w, starts, vb, _) in enumerate(bucket.sets):
        if not active[st] or not len(code):
            out.append(None)
            continue
        if bucket.cells is not None:
            cell, cell_vb, cell_code = bucket.cells[st]
        else:  # a bucket made without its cells
            cell, cell_vb, cell_code = bucket_cells(np.repeat(vb, np.diff(np.r_[starts, len(code)])), code, bucket.K)
        sums = _products(code, n, w, starts, P[st], cell, len(cell_vb))
        out.append(Table(cell_vb, cell_code, sums[:, None]))
    return out
