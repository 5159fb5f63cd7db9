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
from .._engine.sums import DENSE_CELLS_PER_ROW, Table, dense_grid, grid_table, group_sums, run_starts
from .categorical_gram import LeafSums, gram_link, solve_gram
from .numeric import set_columns
from .categorical_solve import CG_MAXITER, Effects, ground, number_groups, uf_find, uf_flatten, uf_join
from .virtual import virtual_of

__all__ = ["CGBucket", "BucketSummary", "prepare", "bucket_products", "fold_summaries", "solve_explicit",
           "solve_buckets", "EXPLICIT_MAX_KEYS"]

#: categorical features with at most this many categories are solved from their explicit
#: normal equations (summed over the buckets); above, by conjugate gradients
EXPLICIT_MAX_KEYS = 3000


@dataclass
class CGBucket:
    """One bucket's leaves holding >= 2 categories, per statistics set: rows sorted by
    leaf (``code``, ``n``, ``w`` = 1 / the leaf's rows), ``starts`` (first row of each
    leaf), ``vb`` (each leaf's virtual bucket) and ``leaf`` (each leaf's number)."""

    K: int
    sets: list  # [(code, n, w, starts, vb, leaf)] per set
    # per set: (cell of every row, virtual bucket and category of every cell): the
    # (virtual bucket, category) cells every CG product is summed into, found once
    cells: list | None = None

    @property
    def nbytes(self) -> int:
        return int(sum(sum(a.nbytes for a in st) for st in [*self.sets, *(self.cells or [])]))


@dataclass
class BucketSummary:
    """A bucket's additive terms, per set: ``vectors`` Table(leaf=virtual bucket,
    key=category, values=[count, sum_y, count_used, n_leaves_cat, r, diag]), ``scalars``
    Table(leaf=virtual bucket, key=0, values=[n_ignored, n_leaves, n_leaves_used]), and
    ``forest``: each category's parent in a spanning forest of shared leaves."""

    sets: list  # [(vectors, scalars, forest)] per set
    counters: tuple | None

    @property
    def nbytes(self) -> int:
        return int(sum(v.nbytes + s.nbytes + f.nbytes for v, s, f in self.sets))


@numba.njit(cache=True, nogil=True)
def _leaves(leaf, code, n, s, K):
    """Per leaf: start, size, N, S; per row: r term, diag term, 1 / N (0 if single)."""
    m = leaf.shape[0]
    starts = run_starts(leaf)
    n_leaf = starts.shape[0]
    rterm = np.zeros(m)
    dterm = np.zeros(m)
    w = np.zeros(m)
    multi = np.zeros(n_leaf, np.bool_)
    parent = np.arange(K)
    for q in range(n_leaf):
        a = starts[q]
        b = starts[q + 1] if q + 1 < n_leaf else m
        if b - a < 2:
            continue
        multi[q] = True
        N = 0.0
        S = 0.0
        for i in range(a, b):
            N += n[i]
            S += s[i]
        r0 = uf_find(parent, code[a])
        for i in range(a, b):
            rterm[i] = s[i] - n[i] * (S / N)
            dterm[i] = n[i] * n[i] / N
            w[i] = 1.0 / N
            r0 = uf_join(parent, r0, code[i])
    return starts, multi, rterm, dterm, w, parent


@numba.njit(cache=True, nogil=True)
def _vector_grid(acc, touched, vb, code, n, s, mrow, rterm, dterm, lo, K):
    for i in range(vb.shape[0]):
        c = (vb[i] - lo) * K + code[i]
        touched[c] = True
        acc[c, 0] += n[i]
        acc[c, 1] += s[i]
        acc[c, 2] += n[i] if mrow[i] else 0.0
        acc[c, 3] += 1.0 if mrow[i] else 0.0
        acc[c, 4] += rterm[i]
        acc[c, 5] += dterm[i]


def _vectors(vb, code, n, s, mrow, rterm, dterm, K) -> Table:
    """Per (virtual bucket, category): [count, sum_y, count_used, n_leaves_cat, r, diag]
    -- ``group_sums`` of those six columns, summed straight into a dense grid when it is
    small (no (rows x 6) copy, no sort: the prepare of a 5,000-category bucket spent
    most of its time there); the same additions in the same order, so the same bits."""
    if len(vb) == 0:
        return Table.empty(6)
    lo, hi = int(vb.min()), int(vb.max())
    cells = (hi - lo + 1) * int(K)
    if cells > DENSE_CELLS_PER_ROW * len(vb):
        return group_sums(vb, code, np.column_stack([n, s, np.where(mrow, n, 0.0),
                                                     np.where(mrow, 1.0, 0.0), rterm, dterm]))
    acc, touched = dense_grid(cells, 6)
    _vector_grid(acc, touched, vb, np.asarray(code, np.int64), n, s, mrow, rterm, dterm, lo, int(K))
    return grid_table(acc, touched, lo, K)


def prepare(picked, fs, job):
    """A bucket's merged table of one feature -> (CGBucket, BucketSummary)."""
    table, counters = picked
    K = fs.coder.n_keys
    k = fs.stats_per_set
    buckets, summaries, cells = [], [], []
    leaf_all = table.leaf.astype(np.int64)
    stats = set_columns(table, k, job.n_sets)
    for st in range(job.n_sets):
        n, s, _ = stats(st)
        keep = n > 0
        if keep.all():
            leaf, code = leaf_all, table.key
        else:
            leaf, code, n, s = leaf_all[keep], table.key[keep], n[keep], s[keep]
        starts, multi, rterm, dterm, w, forest = _leaves(leaf, code, n, s, K)
        vb_row = virtual_of(leaf, fs.n_leaves)
        sizes = np.diff(np.r_[starts, len(leaf)])
        mrow = np.repeat(multi, sizes)
        vectors = _vectors(vb_row, code, n, s, mrow, rterm, dterm, K)
        vb_leaf = vb_row[starts] if len(starts) else vb_row[:0]
        scalars = group_sums(vb_leaf, np.zeros(len(starts), np.int64),
                             np.column_stack([np.add.reduceat(np.where(mrow, 0.0, n), starts) if len(starts) else np.zeros(0),
                                              np.ones(len(starts)), multi.astype(float)]))
        summaries.append((vectors, scalars, forest))
        rows = np.flatnonzero(mrow)
        cm, lf = code[rows], leaf[rows]
        mstarts = np.flatnonzero(np.r_[True, lf[1:] != lf[:-1]]).astype(np.int64) if len(rows) else rows
        buckets.append((cm.astype(np.int32), n[rows], w[rows], mstarts, vb_row[rows][mstarts] if len(rows) else rows,
                        lf[mstarts] if len(rows) else rows))
        cells.append(_cells(vb_row[rows], cm, K))
    return CGBucket(K, buckets, cells), BucketSummary(summaries, counters)


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


def bucket_products(bucket: CGBucket, P: np.ndarray, active: np.ndarray) -> list:
    """``G p`` terms of the bucket for each active set's vector (rows of ``P``), as
    Tables(leaf=virtual bucket, key=category, values=[sum]) in virtual-bucket order."""
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


def _union(forests, K):
    parent = np.arange(K)
    for f in forests:
        for c in np.flatnonzero(f != np.arange(K)):
            a, b = c, f[c]
            while parent[a] != a:
                a = parent[a]
            while parent[b] != b:
                b = parent[b]
            if a != b:
                parent[max(a, b)] = min(a, b)
    return uf_flatten(parent)


def fold_summaries(summaries: list, K: int, n_sets: int) -> list:
    """Per set: the folded vectors, scalars, groups and unknowns of the system."""
    setups = []
    for st in range(n_sets):
        vec = [s.sets[st][0] for s in summaries]
        sca = [s.sets[st][1] for s in summaries]
        count, sum_y, count_used, n_leaves_cat, r, diag = (_fold(vec, K, j) for j in range(6))
        present = count > 0
        group = number_groups(_union([s.sets[st][2] for s in summaries], K), present, count)
        setups.append(dict(count=count, sum_y=sum_y, count_used=count_used, n_leaves_cat=n_leaves_cat, r=r,
                           d=count_used - diag, unknown=ground(group, count_used), group=group, present=present,
                           n_ignored=float(_fold(sca, 1, 0)[0]), n_leaves=int(round(_fold(sca, 1, 1)[0])),
                           n_leaves_used=int(round(_fold(sca, 1, 2)[0]))))
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


def solve_buckets(refs: list, setups: list, K: int, *, progress=None) -> list:
    """Effects per set by conjugate gradients whose products are computed where the
    buckets are (``refs``: futures or embedded values, in bucket order); a set on which CG
    does not converge is solved from its explicit G, summed from the same buckets."""
    from dask import delayed

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
        tasks = [delayed(bucket_products, pure=True)(ref, p, active.copy()) for ref in refs]
        parts = scheduler.compute(*tasks, progress=False)
        for st in np.flatnonzero(active):
            su = setups[st]
            u = su["unknown"]
            Gp = _fold([pt[st] for pt in parts], K, 0)
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
    out = []
    for st, su in enumerate(setups):
        if not active[st]:
            out.append(_effects(su, x[st], "cg" if len(su["unknown"]) else "none"))
            continue
        state = None  # not converged: the explicit system, summed from the buckets
        for ref in refs:
            state = delayed(gram_link, pure=True)(state, ref, st)
        (state,) = scheduler.compute(state, progress=False)
        e = solve_explicit(state, su, K)
        out.append(_effects(su, e.effect, "cg+" + e.solver))
    return out


# dask's memory manager counts these by their arrays (spilling decisions need it)
sizeof.register(CGBucket)(lambda o: o.nbytes)
sizeof.register(BucketSummary)(lambda o: o.nbytes)
