"""CatStratPD's least squares from the buckets of leaves, where they were merged.

(:mod:`daskpd._strat.categorical_solve` for the notation.)  Each bucket of a categorical
feature's leaves is turned, on the worker that merged it, into a :class:`CGBucket` (its
leaves holding two or more categories) and a small :class:`BucketSummary` (its terms of
``count``, ``count_used``, ``r``, ``diag(G)``... and a spanning forest of its
categories).  The summaries are folded into the system's right-hand side, diagonal and
groups (:func:`daskpd._strat.categorical_system.fold_summaries`); then

* up to ``EXPLICIT_MAX_KEYS`` categories, ``G`` is summed explicitly by a chain of tasks
  over the buckets (:func:`daskpd._strat.categorical_gram.gram_link`, O(K^2) state) and
  the system solved directly, inside the scan's graph;
* above, the buckets stay on their workers and the driver runs Jacobi-preconditioned
  conjugate gradients in which every product ``G p = sum_l w_l n_l (n_l . p)`` is a round
  of one task per bucket (:func:`daskpd._strat.categorical_system.solve_buckets`,
  products by :mod:`daskpd._strat.categorical_products`): each round moves O(categories)
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

from .._engine.group_sets import chunk_sets, group_inputs, whole_range
from .._engine.sums import Table
from .._engine.tree_fold import TreeNodes, tree_done, tree_out, tree_put, tree_scratch, tree_state
from .leafboot import table_leaf_weights
from .categorical_solve import (forest_link)
from .virtual import N_VIRTUAL, virtual_of

__all__ = ["CGBucket", "BucketSummary", "prepare", "EXPLICIT_MAX_KEYS"]

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
def push_empty(ts, a, z, t_z, top, t_lo, t_hi, sh_lo, sh_hi):
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
                push_empty(ts, max(cur_vb + 1, t_lo), v, t_z, top, t_lo, t_hi, sh_lo, sh_hi)
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
        push_empty(ts, max(cur_vb + 1, t_lo), t_hi, t_z, top, t_lo, t_hi, sh_lo, sh_hi)
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
    cell, cell_vb, cell_code = bucket_cells(np.repeat(b_vb, sizes), b_code, K)
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


def bucket_cells(vb_rows, code, K: int):
    vb_rows = np.asarray(vb_rows, dtype=np.int64)
    return _cell_ids(vb_rows, np.asarray(code, dtype=np.int64), int(K))


# dask's memory manager counts these by their arrays (spilling decisions need it)
sizeof.register(CGBucket)(lambda o: o.nbytes)
sizeof.register(BucketSummary)(lambda o: o.nbytes)
