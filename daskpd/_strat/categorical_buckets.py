"""CatStratPD's least squares from the buckets of leaves, where they were merged.

(:mod:`daskpd._strat.categorical_solve` for the notation.)  Each bucket of a categorical
feature's leaves is turned, on the worker that merged it, into a :class:`CGBucket` (its
leaves holding two or more categories) and a small :class:`BucketSummary` (its terms of
``count``, ``count_used``, ``r``, ``diag(G)``... and a spanning forest of its
categories).  The summaries are folded into the system's right-hand side, diagonal and
groups (:func:`fold_summaries`); then

* up to ``EXPLICIT_MAX_KEYS`` categories, ``G`` is summed explicitly by a chain of tasks
  over the buckets (:func:`daskpd._strat.categorical_gram.gram_link`, O(K^2) state) and
  the system solved directly, inside the scan's graph;
* above, the buckets stay on their workers and the driver runs Jacobi-preconditioned
  conjugate gradients in which every product ``G p = sum_l w_l n_l (n_l . p)`` is a round
  of one task per bucket (:func:`solve_buckets`): each round moves O(categories)
  numbers, no task holds more than one bucket.  A system on which CG does not converge
  is summed explicitly from the same buckets and solved directly.

Float sums are made per virtual bucket (fixed groups of leaves) and folded in their
order, so the result does not depend on how many buckets the reduction used.
"""
from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
from dask.sizeof import sizeof

from .._engine import scheduler
from .._engine.group_sets import chunk_sets, group_inputs, whole_range
from .._engine.sums import Table
from .._engine.tree_fold import TreeNodes, fold_tree, tree_done, tree_out, tree_put, tree_scratch, tree_state
from .categorical_gram import LeafSums, gram_link, solve_gram
from .leafboot import table_leaf_weights
from .categorical_solve import (CG_MAXITER, Effects, forest_link, ground, number_groups, uf_find, uf_flatten,
                                uf_join)
from .virtual import N_VIRTUAL, virtual_of

__all__ = ["CGBucket", "BucketSummary", "prepare", "bucket_products", "fold_summaries", "solve_explicit",
           "solve_buckets", "cg_sets", "EXPLICIT_MAX_KEYS"]

#: categorical features with at most this many categories are solved from their explicit
#: normal equations (summed over the buckets); above, by conjugate gradients
EXPLICIT_MAX_KEYS = 3000


@dataclass
class CGBlock:
    """Every set's leaves holding >= 2 categories at once: the rows of set 0's such
    leaves, sorted by leaf (``code``; ``n``: (rows, sets) each set's rows or weight, 0
    where the set has none), per leaf ``starts`` (first row), ``w`` ((leaves, sets): 1 /
    the leaf's rows in the set, 0 where the set's leaf holds fewer than 2 categories),
    ``vb`` and ``leaf``; and ``cell`` / ``cell_vb`` / ``cell_code``: each row's (virtual
    bucket, category) cell, numbered in that order (a set's leaves are among set 0's:
    the rows and cells of every set are among these)."""

    code: np.ndarray
    n: np.ndarray
    w: np.ndarray
    starts: np.ndarray
    vb: np.ndarray
    leaf: np.ndarray
    cell: np.ndarray
    cell_vb: np.ndarray
    cell_code: np.ndarray
    # the bucket's virtual buckets (lo, hi, shared_lo, shared_hi): the trials' products
    # are folded over them by the fixed tree (daskpd._engine.tree_fold.tree_nodes)
    span: tuple = (0, N_VIRTUAL, False, False)

    @property
    def nbytes(self) -> int:
        return int(sum(a.nbytes for a in self.__dict__.values() if isinstance(a, np.ndarray)))

    def set_rows(self, st: int) -> tuple:
        """``(code, n, w, starts, vb, leaf)`` of set ``st`` alone (the rows it has, in the
        leaves where it holds >= 2 categories; ``w`` per row)."""
        code, n, w, starts, leaves = _set_rows(self.code, self.n, self.w, self.starts, st)
        return code, n, w, starts, self.vb[leaves], self.leaf[leaves]


@numba.njit(cache=True, nogil=True)
def _set_rows(code, n, w, starts, st):
    """:meth:`CGBlock.set_rows` in one pass: ``(code, n, w, starts, leaves)`` of set
    ``st`` (``leaves``: the block's leaves it keeps)."""
    R = code.shape[0]
    L = starts.shape[0]
    c_s = np.empty(R, code.dtype)
    n_s = np.empty(R, np.float64)
    w_s = np.empty(R, np.float64)
    st_s = np.empty(L, np.int64)
    lv = np.empty(L, np.int64)
    m = 0
    nl = 0
    for q in range(L):
        wl = w[q, st]
        if not wl > 0:
            continue
        st_s[nl] = m
        lv[nl] = q
        nl += 1
        for r in range(starts[q], starts[q + 1] if q + 1 < L else R):
            if n[r, st] > 0:
                c_s[m] = code[r]
                n_s[m] = np.float64(n[r, st])
                w_s[m] = wl
                m += 1
    return c_s[:m].copy(), n_s[:m].copy(), w_s[:m].copy(), st_s[:nl].copy(), lv[:nl].copy()


@dataclass
class CGBucket:
    """One bucket's leaves holding >= 2 categories, per statistics set: rows sorted by
    leaf (``code``, ``n``, ``w`` = 1 / the leaf's rows), ``starts`` (first row of each
    leaf), ``vb`` (each leaf's virtual bucket) and ``leaf`` (each leaf's number); or, as
    :func:`prepare` makes it, every set at once (``block``, :class:`CGBlock`)."""

    K: int
    sets: list | None  # [(code, n, w, starts, vb, leaf)] per set (None: see ``block``)
    # per set: (cell of every row, virtual bucket and category of every cell): the
    # (virtual bucket, category) cells every CG product is summed into, found once
    cells: list | None = None
    block: CGBlock | None = None

    @property
    def nbytes(self) -> int:
        own = 0 if self.block is None else self.block.nbytes
        return int(own + sum(sum(a.nbytes for a in st) for st in [*(self.sets or []), *(self.cells or [])]))

    def set_rows(self, st: int) -> tuple:
        """``(code, n, w, starts, vb, leaf)`` of statistics set ``st``."""
        return self.sets[st] if self.block is None else self.block.set_rows(st)


@dataclass
class BucketSummary:
    """A bucket's additive terms of every set: ``vectors`` Table(leaf=virtual bucket,
    key=category, values=[count, sum_y, count_used, n_leaves_cat, r, diag] of set 0,
    then of set 1, ...), ``scalars`` Table(leaf=virtual bucket, key=0, values=[n_ignored,
    n_leaves, n_leaves_used] per set, likewise), and ``forests`` (sets, categories):
    each category's parent in a spanning forest of the set's shared leaves."""

    vectors: Table
    scalars: Table
    forests: np.ndarray
    counters: tuple | None
    # with trials: ``vectors`` holds set 0's columns; the trials' are folded over the
    # virtual buckets by the fixed tree (daskpd._engine.tree_fold.TreeNodes)
    vector_trials: TreeNodes | None = None

    @property
    def nbytes(self) -> int:
        extra = 0 if self.vector_trials is None else self.vector_trials.nbytes
        return int(self.vectors.nbytes + self.scalars.nbytes + self.forests.nbytes + extra)


@numba.njit(cache=True, nogil=True)
def _flush_rows(acc, touched, codes, nt, vb, out_v, out_c, out_x, n_out, ts, S, t_z, top, t_lo, t_hi, sh_lo, sh_hi):
    """The current virtual bucket's touched categories' sums appended to the output in
    category order (set 0's six columns) and, with trials, pushed to the bucket's tree
    (:func:`~daskpd._engine.tree_fold.tree_done`: the trials' columns); the scratch zeroed.
    Returns the new output length."""
    keys = np.sort(codes[:nt])
    for j in range(nt):
        c = keys[j]
        out_v[n_out] = vb
        out_c[n_out] = c
        out_x[n_out, :] = acc[c, :6]
        if S > 1:
            tree_put(ts, c, acc[c], 6)
        acc[c, :] = 0.0
        touched[c] = False
        n_out += 1
    if S > 1:
        tree_done(ts, vb, t_z, top, (vb == t_lo and sh_lo) or (vb == t_hi - 1 and sh_hi))
    return n_out


@numba.njit(cache=True, nogil=True)
def _push_empty(ts, a, z, t_z, top, t_lo, t_hi, sh_lo, sh_hi):
    """The tree's empty virtual buckets ``a <= v < z`` (it counts every one)."""
    for v in range(a, z):
        tree_done(ts, v, t_z, top, (v == t_lo and sh_lo) or (v == t_hi - 1 and sh_hi))


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _prepare(leaf, code, vb, vals, gw, K, S, tbuf, top, t_lo, t_hi, sh_lo, sh_hi, b_n):
    """One pass over a bucket's (leaf, category) groups, sorted, leaf by leaf, for every
    statistics set at once (set t: the leaf bootstrap's trial t, each leaf's groups
    weighted by its weight ``gw``; a set skips the leaves its weights leave empty).  Per
    leaf and set: N, S (the set's rows and sum of y in the leaf), the r / diag / 1 / N
    terms of its groups when the leaf holds >= 2 of the set's categories, the set's
    spanning forest.  Returns the per-(virtual bucket, category) ``vectors`` and per
    virtual bucket ``scalars`` of every set (:class:`BucketSummary`'s columns), the
    forests, and the rows of set 0's leaves with >= 2 categories (:class:`CGBlock`; their
    counts written into ``b_n``, (groups, sets), whose type holds every count exactly:
    :func:`_count_type`)."""
    G = leaf.shape[0]
    # the largest leaf (in groups): the scratch of one leaf's sums
    big = 0
    run = 0
    for g in range(G):
        if g > 0 and leaf[g] == leaf[g - 1]:
            run += 1
        else:
            run = 1
        if run > big:
            big = run
    ln = np.zeros((big, S))
    ly = np.zeros((big, S))
    lx = np.zeros((big, S))
    N = np.zeros(S)
    Sy = np.zeros(S)
    m = np.zeros(S, np.int64)
    parent = np.empty((K, S), np.int64)  # category-major: a group's sets share its row
    for c in range(K):
        for s in range(S):
            parent[c, s] = c
    root = np.zeros(S, np.int64)
    # the forests' links (forest_link)
    seen = np.zeros((K, S), np.bool_)
    n_comp = np.zeros(S, np.int64)
    one_root = np.full(S, -1, np.int64)
    live = np.empty(S, np.int64)
    acc = np.zeros((K, 6 * S))
    touched = np.zeros(K, np.bool_)
    codes = np.empty(K, np.int64)
    nt = 0
    vec_v = np.empty(G, np.int32)
    vec_c = np.empty(G, np.int64)
    vec_x = np.empty((G, 6))
    # with trials, their columns folded over the virtual buckets t_lo <= v < t_hi by the fixed tree
    ts = tree_state(K if S > 1 else 1, top, tbuf)
    t_z = t_hi - 1 if sh_hi else t_hi
    n_vec = 0
    n_vb = 0
    for g in range(G):
        if g == 0 or vb[g] != vb[g - 1]:
            n_vb += 1
    sca_v = np.empty(n_vb, np.int32)
    sca_x = np.zeros((n_vb, 3 * S))
    q_vb = -1
    # set 0's multi-category leaves: their rows
    b_code = np.empty(G, np.int32)
    n_b = 0
    n_lv = 0
    for g in range(G):
        if g == 0 or leaf[g] != leaf[g - 1]:
            n_lv += 1
    b_w = np.empty((n_lv, S))
    b_start = np.empty(n_lv, np.int64)
    b_vb = np.empty(n_lv, np.int64)
    b_leaf = np.empty(n_lv, np.int64)
    n_bl = 0
    cur_vb = -1
    a = 0
    while a < G:
        z = a + 1
        while z < G and leaf[z] == leaf[a]:
            z += 1
        v = vb[a]
        if v != cur_vb:
            if cur_vb >= 0:
                n_vec = _flush_rows(acc, touched, codes, nt, cur_vb, vec_v, vec_c, vec_x, n_vec, ts, S, t_z, top,
                                    t_lo, t_hi, sh_lo, sh_hi)
                nt = 0
            if S > 1:
                _push_empty(ts, max(cur_vb + 1, t_lo), v, t_z, top, t_lo, t_hi, sh_lo, sh_hi)
            cur_vb = v
            q_vb += 1
            sca_v[q_vb] = v
        for s in range(S):
            N[s] = 0.0
            Sy[s] = 0.0
            m[s] = 0
        chunk_sets(a, z - a, vals, gw, False, ln, ly, lx)
        # without a branch per set: a set's absent group adds a zero (its sums are +-0.0,
        # y being finite) to sums that are never -0.0, which leaves their bits as they are
        for j in range(z - a):
            for s in range(S):
                N[s] += ln[j, s]
                Sy[s] += ly[j, s]
                m[s] += 1 if ln[j, s] > 0 else 0
        # per set: the leaf's scalars; its tree restarts where it holds >= 2 categories
        for s in range(S):
            if m[s] == 0:
                continue
            o = 3 * s
            sca_x[q_vb, o + 1] += 1.0
            if m[s] >= 2:
                sca_x[q_vb, o + 2] += 1.0
                root[s] = -1  # rooted at the set's first category with rows in the leaf
            else:
                for j in range(z - a):
                    if ln[j, s] > 0:
                        sca_x[q_vb, o] += ln[j, s]
        # group by group, every set with rows in it (listed without a branch per set:
        # with trials a group's absence is a coin flip no branch predictor learns), so a
        # category's row of the accumulators and of the forests is read once a group;
        # each set's terms and joins in the same order as set by set
        for j in range(z - a):
            c = code[a + j]
            if not touched[c]:  # every group has set 0's rows
                touched[c] = True
                codes[nt] = c
                nt += 1
            nk = 0
            for s in range(S):
                live[nk] = s
                nk += 1 if ln[j, s] > 0 else 0
            for q in range(nk):
                s = live[q]
                n = ln[j, s]
                e = 6 * s
                acc[c, e] += n
                acc[c, e + 1] += ly[j, s]
                if m[s] >= 2:
                    acc[c, e + 2] += n
                    acc[c, e + 3] += 1.0
                    acc[c, e + 4] += ly[j, s] - n * (Sy[s] / N[s])
                    acc[c, e + 5] += n * n / N[s]
                    if one_root[s] < 0 or root[s] != one_root[s] or not seen[c, s]:  # else already in the leaf's tree
                        forest_link(parent, seen, n_comp, one_root, root, c, s)
                else:
                    acc[c, e + 2] += 0.0
                    acc[c, e + 3] += 0.0
                    acc[c, e + 4] += 0.0
                    acc[c, e + 5] += 0.0
        if m[0] >= 2:
            b_start[n_bl] = n_b
            b_vb[n_bl] = v
            b_leaf[n_bl] = leaf[a]
            for s in range(S):
                b_w[n_bl, s] = 1.0 / N[s] if m[s] >= 2 else 0.0
            n_bl += 1
            for j in range(z - a):
                b_code[n_b] = code[a + j]
                for s in range(S):
                    b_n[n_b, s] = ln[j, s] if ln[j, s] > 0 else 0.0  # exact: a whole count in b_n's range
                n_b += 1
        a = z
    if cur_vb >= 0:
        n_vec = _flush_rows(acc, touched, codes, nt, cur_vb, vec_v, vec_c, vec_x, n_vec, ts, S, t_z, top,
                            t_lo, t_hi, sh_lo, sh_hi)
    if S > 1:
        _push_empty(ts, max(cur_vb + 1, t_lo), t_hi, t_z, top, t_lo, t_hi, sh_lo, sh_hi)
    return (vec_v[:n_vec].copy(), vec_c[:n_vec].copy(), vec_x[:n_vec].copy(), sca_v, sca_x,
            np.ascontiguousarray(parent.T), tree_out(ts),
            b_code[:n_b].copy(), n_b, b_w[:n_bl].copy(), b_start[:n_bl].copy(), b_vb[:n_bl].copy(),
            b_leaf[:n_bl].copy())


def _count_type(table, max_weight: int):
    """The type :func:`_prepare` writes the CG block's counts in: uint16 when every
    (group, set) count -- a group's rows times at most the largest leaf weight -- is a
    whole number below 2^16, else float64.  (Written narrow from the start: a 1e7-row
    bucket of 5,000 categories with 20 trials filled a 100 MB float64 block, faulting its
    pages in, only to narrow it afterwards.)"""
    if not len(table):
        return np.uint16
    whole, top = whole_range(np.ascontiguousarray(table.values[:, 0]))
    return np.uint16 if whole and top * max(1, max_weight) < 2 ** 16 else np.float64


def _narrow(n: np.ndarray) -> np.ndarray:
    """``n`` (a copy) in uint8 / uint16 / float32 when that holds every value exactly."""
    if not n.size:
        return n.astype(np.uint8)
    if n.dtype == np.uint16:
        return n.astype(np.uint8) if int(n.max()) <= np.iinfo(np.uint8).max else n.copy()
    whole, top = whole_range(np.ascontiguousarray(n))
    if not whole:
        return n.copy()
    for dtype in (np.uint8, np.uint16):
        if top <= np.iinfo(dtype).max:
            return n.astype(dtype)
    return n.astype(np.float32) if top < 2 ** 24 else n.copy()


def prepare(picked, fs, job, span=None):
    """A bucket's merged table of one feature -> (CGBucket, BucketSummary), every set in
    one pass (:func:`_prepare`; the trials a bootstrap of the leaves,
    :mod:`daskpd._strat.leafboot`).  ``span``: the bucket's virtual buckets ``(lo, hi,
    shared_lo, shared_hi)`` (None: every one)."""
    table, counters = picked
    span = tuple(span) if span is not None else (0, N_VIRTUAL, False, False)
    K = fs.coder.n_keys
    k = fs.stats_per_set
    leaf = table.leaf.astype(np.int64)
    code = np.asarray(table.key, dtype=np.int64)
    vb = virtual_of(leaf, fs.n_leaves)
    S = int(job.n_sets)
    tbuf = tree_scratch(int(K), 6 * (S - 1)) if S > 1 else np.zeros((1, 1))
    vals, gw = group_inputs(table, k, table_leaf_weights(table, fs.feature, S - 1, job.random_state), S - 1)
    b_n = np.empty((len(leaf), S), _count_type(table, int(gw.max(initial=1))))
    (vv, vc, vx, sv, sx, forests, tree, b_code, n_b, b_w, b_start, b_vb, b_leaf) = _prepare(
        leaf, code, vb, vals, gw, int(K), S, tbuf, N_VIRTUAL.bit_length() - 1, int(span[0]),
        int(span[1]), bool(span[2]), bool(span[3]), b_n)
    b_n = b_n[:n_b]
    sizes = np.diff(np.r_[b_start, len(b_code)])
    cell, cell_vb, cell_code = _cells(np.repeat(b_vb, sizes), b_code, K)
    # the block stays on its worker through the CG rounds: kept in the narrowest type that
    # holds every set's rows exactly (whole numbers: rows, Poisson or 0/1 counts)
    b_n = _narrow(b_n)
    if len(cell_vb) < 2 ** 31:
        cell = cell.astype(np.int32)
    block = CGBlock(b_code, b_n, b_w, b_start, b_vb, b_leaf, cell, cell_vb, cell_code, span)
    # set 0's columns per virtual bucket (folded in their order: the bits of one set), the trials' by the tree
    trials = TreeNodes(*tree) if S > 1 else None
    summary = BucketSummary(Table(vv, vc, vx), Table(sv, np.zeros(len(sv), np.int64), sx), forests, counters, trials)
    return CGBucket(K, None, None, block), summary


@numba.njit(cache=True, nogil=True)
def _cell_ids(vb, code, K):
    """For rows whose ``vb`` is non-decreasing: each row's (vb, code) cell, numbered in
    (vb, code) order, and every cell's vb and code."""
    n = vb.shape[0]
    cell = np.empty(n, np.int64)
    cell_vb = np.empty(n, np.int32)
    cell_code = np.empty(n, np.int64)
    id_of = np.full(K, -1, np.int64)
    touched = np.empty(K, np.int64)
    g = 0
    i = 0
    while i < n:
        cur = vb[i]
        nt = 0
        j = i
        while j < n and vb[j] == cur:
            c = code[j]
            if id_of[c] < 0:
                id_of[c] = 0
                touched[nt] = c
                nt += 1
            j += 1
        keys = np.sort(touched[:nt])
        for a in range(nt):
            id_of[keys[a]] = g
            cell_vb[g] = cur
            cell_code[g] = keys[a]
            g += 1
        for r in range(i, j):
            cell[r] = id_of[code[r]]
        for a in range(nt):
            id_of[keys[a]] = -1
        i = j
    return cell, cell_vb[:g].copy(), cell_code[:g].copy()


def _cells(vb_rows, code, K: int):
    vb_rows = np.asarray(vb_rows, dtype=np.int64)
    return _cell_ids(vb_rows, np.asarray(code, dtype=np.int64), int(K))


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
            _push_empty(ts, max(cur + 1, t_lo), vb[q], t_z, top, t_lo, t_hi, sh_lo, sh_hi)
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
    _push_empty(ts, max(cur + 1, t_lo), t_hi, t_z, top, t_lo, t_hi, sh_lo, sh_hi)
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
            cell, cell_vb, cell_code = _cells(np.repeat(vb, np.diff(np.r_[starts, len(code)])), code, bucket.K)
        sums = _products(code, n, w, starts, P[st], cell, len(cell_vb))
        out.append(Table(cell_vb, cell_code, sums[:, None]))
    return out


def _fold(tables, K, column):
    """Per-category sums of per-virtual-bucket tables, terms in virtual-bucket order."""
    live = [t for t in tables if t is not None and len(t)]
    if not live:
        return np.zeros(K)
    return np.bincount(np.concatenate([t.key for t in live]),
                       weights=np.concatenate([t.values[:, column] for t in live]), minlength=K)


@numba.njit(cache=True, nogil=True)
def _union_rows(F, K):
    """The components of the union of the spanning forests ``F`` (one per row, a parent
    per category), joined forest by forest, category by category; a label per category."""
    parent = np.arange(K)
    for r in range(F.shape[0]):
        for c in range(K):
            if F[r, c] == c:
                continue
            uf_join(parent, uf_find(parent, c), F[r, c])  # the smaller root stays the root
    return uf_flatten(parent)


def _union(forests, K):
    F = np.stack([np.asarray(f, np.int64) for f in forests]) if len(forests) else np.zeros((0, K), np.int64)
    return _union_rows(np.ascontiguousarray(F), int(K))


@numba.njit(cache=True, nogil=True)
def _fold_cols(out, key, values):
    for i in range(key.shape[0]):
        c = key[i]
        for j in range(values.shape[1]):
            out[c, j] += values[i, j]


def _fold_all(tables, K: int, m: int) -> np.ndarray:
    """(K, m): :func:`_fold` of every column at once (the same additions, same order)."""
    out = np.zeros((K, m))
    for t in tables:
        if t is not None and len(t):
            _fold_cols(out, np.asarray(t.key, np.int64), np.ascontiguousarray(t.values))
    return out


def fold_summaries(summaries: list, K: int, n_sets: int) -> list:
    """Per set: the folded vectors, scalars, groups and unknowns of the system."""
    setups = []
    vecs = _fold_all([s.vectors for s in summaries], K, 6)
    if n_sets > 1:
        vecs = np.hstack([vecs, fold_tree([s.vector_trials for s in summaries], K, 6 * (n_sets - 1), N_VIRTUAL)])
    scas = _fold_all([s.scalars for s in summaries], 1, 3 * n_sets)[0]
    for st in range(n_sets):
        count, sum_y, count_used, n_leaves_cat, r, diag = (np.ascontiguousarray(vecs[:, 6 * st + j]) for j in range(6))
        sca = scas[3 * st:3 * st + 3]
        present = count > 0
        group = number_groups(_union([s.forests[st] for s in summaries], K), present, count)
        setups.append(dict(count=count, sum_y=sum_y, count_used=count_used, n_leaves_cat=n_leaves_cat, r=r,
                           d=count_used - diag, unknown=ground(group, count_used), group=group, present=present,
                           n_ignored=float(sca[0]), n_leaves=int(round(sca[1])),
                           n_leaves_used=int(round(sca[2]))))
    return setups


def _effects(su, effect, solver) -> Effects:
    return Effects(effect=np.where(su["present"], effect, np.nan), group=su["group"], count=su["count"],
                   sum_y=su["sum_y"], count_used=su["count_used"], n_leaves_cat=su["n_leaves_cat"],
                   n_ignored=su["n_ignored"], n_leaves=su["n_leaves"], n_leaves_used=su["n_leaves_used"],
                   n_groups=int(su["group"].max()) + 1 if su["present"].any() else 0, solver=solver)


def solve_explicit(state, su: dict, K: int) -> Effects:
    """Effects of one set from its explicit G (a LeafSums summed over the buckets by
    :func:`~daskpd._strat.categorical_gram.gram_link`; None: no leaf) and its folded
    vectors."""
    sums = state if state is not None else LeafSums.empty(K)
    for a in ("count", "sum_y", "count_used", "n_leaves_cat", "r", "n_ignored", "n_leaves", "n_leaves_used"):
        setattr(sums, a, su[a])
    e = solve_gram(sums, solver="direct")
    return _effects(su, e.effect, e.solver)


def cg_sets(setups: list, K: int, products) -> tuple:
    """Jacobi-preconditioned conjugate gradients on every set's grounded system at once
    (relative residual 1e-13, at most ``CG_MAXITER`` rounds): ``products(P, active)``
    gives ``G p`` of each set's search direction (rows of ``P``) as a (K, sets) array
    (the columns of inactive sets are not used).  Returns ``(x, active)``: the solutions
    and which sets did not converge."""
    n_sets = len(setups)
    x = np.zeros((n_sets, K))
    res = np.zeros((n_sets, K))
    z = np.zeros((n_sets, K))
    p = np.zeros((n_sets, K))
    rz = np.zeros(n_sets)
    tol = np.zeros(n_sets)
    active = np.zeros(n_sets, bool)
    for st, su in enumerate(setups):
        u = su["unknown"]
        if len(u):
            res[st, u] = su["r"][u]
            z[st, u] = res[st, u] / su["d"][u]
            p[st] = z[st]
            rz[st] = res[st] @ z[st]
            tol[st] = 1e-13 * np.linalg.norm(res[st])
            active[st] = tol[st] > 0
    iters = 0
    while active.any() and iters < CG_MAXITER:
        iters += 1
        GP = products(p, active.copy())
        for st in np.flatnonzero(active):
            su = setups[st]
            u = su["unknown"]
            Gp = GP[:, st]
            q = np.zeros(K)
            q[u] = su["count_used"][u] * p[st, u] - Gp[u]
            alpha = rz[st] / (p[st] @ q)
            x[st] += alpha * p[st]
            res[st] -= alpha * q
            if np.linalg.norm(res[st]) <= tol[st]:
                active[st] = False
                continue
            z[st, u] = res[st, u] / su["d"][u]
            rz_new = res[st] @ z[st]
            p[st] = z[st] + (rz_new / rz[st]) * p[st]
            rz[st] = rz_new
    return x, active


def fold_products(parts: list, K: int, active: np.ndarray) -> np.ndarray:
    """Every set's ``G p`` as a (K, sets) array from the buckets' :func:`bucket_products`
    (in bucket order): set 0's tables folded per virtual bucket, the trials' tree nodes by
    the fixed tree (or, from a kept state's buckets, each active set's tables)."""
    n_sets = len(active)
    if all(isinstance(pt, (Table, tuple)) for pt in parts):
        # every set's products per bucket: set 0's in one table, the trials' as tree nodes
        GP = _fold_all([pt[0] if isinstance(pt, tuple) else pt for pt in parts], K, 1)
        if n_sets > 1:
            GP = np.hstack([GP, fold_tree([pt[1] for pt in parts], K, n_sets - 1, N_VIRTUAL)])
        return GP
    GP = np.zeros((K, n_sets))
    for st in np.flatnonzero(active):
        GP[:, st] = _fold([pt[st] for pt in parts], K, 0)
    return GP


def solve_buckets(refs: list, setups: list, K: int, *, progress=None, local: bool = False) -> list:
    """Effects per set by conjugate gradients whose products are computed where the
    buckets are (``refs``: futures or embedded values, in bucket order); a set on which CG
    does not converge is solved from its explicit G, summed from the same buckets.
    ``local``: the buckets are values in this process and their products are computed
    here (not shipped to a cluster in every round)."""
    from dask import delayed

    def products(p, active):
        if local:
            return fold_products([bucket_products(ref, p, active) for ref in refs], K, active)
        # the directions once in the graph (not once a bucket), and the buckets' products
        # folded next to them: the driver sends one (sets, K) array and receives one (K, sets)
        p_, active_ = delayed(p, pure=True), delayed(active, pure=True)
        tasks = [delayed(bucket_products, pure=True)(ref, p_, active_) for ref in refs]
        (GP,) = scheduler.compute(delayed(fold_products, pure=True)(tasks, K, active_), progress=False)
        return GP

    x, active = cg_sets(setups, K, products)
    out = []
    for st, su in enumerate(setups):
        if not active[st]:
            out.append(_effects(su, x[st], "cg" if len(su["unknown"]) else "none"))
            continue
        state = None  # not converged: the explicit system, summed from the buckets
        for ref in refs:
            state = gram_link(state, ref, st) if local else delayed(gram_link, pure=True)(state, ref, st)
        if not local:
            (state,) = scheduler.compute(state, progress=False)
        e = solve_explicit(state, su, K)
        out.append(_effects(su, e.effect, "cg+" + e.solver))
    return out


# dask's memory manager counts these by their arrays (spilling decisions need it)
sizeof.register(CGBucket)(lambda o: o.nbytes)
sizeof.register(BucketSummary)(lambda o: o.nbytes)
