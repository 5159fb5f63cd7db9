"""The incremental finish of a CatStratPD feature with many categories: conjugate
gradients over the kept runs, unmerged.

(:mod:`daskpd._strat.categorical_solve` for the notation.)  Above ``EXPLICIT_MAX_KEYS``
categories a feature keeps no normal equations (:mod:`daskpd._strat.catdelta`): its
``G = sum_l n_l n_l' / N_l`` has nearly every pair of categories (on the 5,000-level
feature of :class:`daskpd.datasets.Lake`, each of ~32,000 leaves holds hundreds of
categories: every pair shares a leaf about a hundred times at 1e7 rows), and appended
rows change ``N_l`` of every leaf they fall in, hence every pair term of that leaf --
with 1e6 rows appended, every leaf and ~1.5e9 pair terms at 1e7 rows.  Instead the
system is solved from the runs as they are on disk (memory-mapped) plus the new run,
without sorting them into one table:

1. the runs' cells are laid out leaf by leaf in one block (each leaf's cells of run 0,
   then of run 1, ...: positions from per-leaf counts, no sort);
2. one pass over the block, leaf by leaf, adds each leaf's cells of one category
   together (a scratch array over the categories), keeps one cell a category, and sums the leaf's terms of ``count``, ``count_used``,
   ``n_leaves_cat``, ``diag(G)`` and the ``S_l / N_l`` part of ``r`` and the spanning
   forest of its categories (:func:`_merge_leaves`); the terms linear in the cells
   (``sum_y``, the ``s_lc`` part of ``r``) are summed run by run;
3. Jacobi-preconditioned conjugate gradients (the stopping rule and tolerance of the
   scan's, :func:`daskpd._strat.categorical_system.cg_sets`) whose products
   ``G p = sum_l w_l n_l (n_l . p)`` are one pass over the block (:func:`_products`); a
   set on which they do not converge is solved from its explicit G, summed from the
   block.

The result is a full finish of the merged sums up to the conjugate gradients' tolerance
(products and sums are added in another order than the scan adds them).
"""
from __future__ import annotations

import numba
import numpy as np

from .categorical_gram import CHUNK_LEAVES, LeafSums
from .categorical_gram_solve import solve_gram
from .categorical_solve import Effects, forest_link, ground, number_groups, uf_flatten
from .categorical_system import cg_sets
from .delta_lookup import RunView
from .leafboot import weights_of_leaves

__all__ = ["RunsBlock", "runs_block", "effects_of_runs"]


class RunsBlock:
    """A feature's cells, every run's, merged leaf by leaf: ``code`` and ``n`` ((sets,
    cells): float32 when that holds every count exactly) of each leaf's cells, one per
    category, ``starts`` ((leaves + 1): each leaf's first cell), ``w`` ((sets, leaves):
    1 / the leaf's rows in the set, 0 where the set's leaf holds fewer than two
    categories) and each set's system (the dicts of
    :func:`daskpd._strat.categorical_system.fold_summaries`)."""

    def __init__(self, K, code, n, starts, w, setups):
        self.K, self.code, self.n, self.starts, self.w, self.setups = K, code, n, starts, w, setups

    @property
    def nbytes(self) -> int:
        return int(self.code.nbytes + self.n.nbytes + self.starts.nbytes + self.w.nbytes)


@numba.njit(cache=True, nogil=True)
def _place(leaf, key, kmap, ncol, scol, shift, code, n_s, N_s, Sy_s, put_code):
    """A run's cells into the block (cell ``i`` of leaf ``l`` at ``shift[l] + i``), one
    set's rows (``ncol``) into ``n_s``; the leaf's rows and sum of y added up."""
    for i in range(leaf.shape[0]):
        lf = np.int64(leaf[i])
        pos = shift[lf] + i
        if put_code:
            code[pos] = kmap[np.int64(key[i])]
        v = ncol[i]
        n_s[pos] = v
        N_s[lf] += v
        Sy_s[lf] += scol[i]


@numba.njit(cache=True, nogil=True)
def _linear(leaf, key, kmap, scol, multi_s, sum_y_s, rs_s):
    """A run's terms linear in its cells, one set: sum of y, and its part of r in the
    set's leaves holding >= 2 categories."""
    for i in range(leaf.shape[0]):
        c = kmap[np.int64(key[i])]
        v = scol[i]
        sum_y_s[c] += v
        if multi_s[np.int64(leaf[i])]:
            rs_s[c] += v


@numba.njit(cache=True, nogil=True)
def _merge_leaves(code, n, starts, N, SN, K):
    """Leaf by leaf (``starts``: the block's leaf offsets, a leaf's cells of any run in
    any order): each category's cells added together, written back in place (in the
    order of their first cells; the returned offsets), and the leaf's terms summed per
    set.  ``N``, ``SN``
    (leaves, sets): the leaf's rows and ``S_l / N_l``.  Returns the new offsets, ``w``,
    the vectors (K, sets) count, count_used, n_leaves_cat, diag, the ``S_l / N_l`` part of
    ``r`` and multi (leaves, sets; 1 where the set's leaf holds >= 2 categories), the
    scalars (sets, 3) and the forests (sets, K)."""
    L = starts.shape[0] - 1
    S = n.shape[1]
    acc = np.zeros((K, S))
    seen = np.zeros(K, np.bool_)
    touched = np.empty(K, np.int64)
    out_starts = np.empty(L + 1, np.int64)
    w = np.zeros((L, S))
    multi = np.zeros((L, S), np.bool_)
    count = np.zeros((K, S))
    used = np.zeros((K, S))
    nlc = np.zeros((K, S))
    diag = np.zeros((K, S))
    rn = np.zeros((K, S))
    scal = np.zeros((S, 3))
    parent = np.empty((K, S), np.int64)  # category-major: a category's sets share its row
    for c in range(K):
        for s in range(S):
            parent[c, s] = c
    met = np.zeros((K, S), np.bool_)
    n_comp = np.zeros(S, np.int64)
    one_root = np.full(S, -1, np.int64)
    m = np.zeros(S, np.int64)
    r0 = np.empty(S, np.int64)
    o = 0
    for q in range(L):
        out_starts[q] = o
        nt = 0
        for i in range(starts[q], starts[q + 1]):
            c = code[i]
            if not seen[c]:
                seen[c] = True
                touched[nt] = c
                nt += 1
            for s in range(S):
                acc[c, s] += n[i, s]
        keys = touched
        for s in range(S):
            m[s] = 0
        for j in range(nt):
            c = keys[j]
            for s in range(S):
                if acc[c, s] > 0:
                    m[s] += 1
        for s in range(S):
            if m[s] == 0:
                continue
            scal[s, 1] += 1.0
            if m[s] >= 2:
                scal[s, 2] += 1.0
                multi[q, s] = True
                w[q, s] = 1.0 / N[q, s]
            else:
                scal[s, 0] += N[q, s]
        for s in range(S):  # the set's tree of the leaf: rooted at its first category with rows in the set
            r0[s] = -1
        for j in range(nt):
            c = keys[j]
            code[o] = c
            for s in range(S):
                v = acc[c, s]
                n[o, s] = v
                acc[c, s] = 0.0
                if v <= 0:
                    continue
                count[c, s] += v
                if multi[q, s]:
                    used[c, s] += v
                    nlc[c, s] += 1.0
                    diag[c, s] += v * v * w[q, s]
                    rn[c, s] += v * SN[q, s]
                    if one_root[s] < 0 or r0[s] != one_root[s] or not met[c, s]:  # else already in the leaf's tree
                        forest_link(parent, met, n_comp, one_root, r0, c, s)
            seen[c] = False
            o += 1
    out_starts[L] = o
    return out_starts, w, count, used, nlc, diag, rn, multi, scal, np.ascontiguousarray(parent.T)


@numba.njit(cache=True, nogil=True)
def _whole_below(n, m, top):
    """Whether the first ``m`` rows of ``n`` hold whole numbers in [0, top)."""
    for i in range(m):
        for s in range(n.shape[1]):
            v = n[i, s]
            if v < 0 or v >= top or v != np.floor(v):
                return False
    return True


def _per_set(n, m: int, dtype) -> np.ndarray:
    """The first ``m`` rows of ``n`` (cells, sets) as (sets, cells) of ``dtype``."""
    out = np.empty((n.shape[1], m), dtype)
    for s in range(n.shape[1]):
        out[s] = n[:m, s]
    return out


def _set_columns(v: RunView, n_sets: int, feature: str, random_state: int) -> list:
    """Per set, the (rows, sum of y) columns of a run's cells: set 0's, and set t's
    scaled by the cell's leaf's trial-t weight (:mod:`daskpd._strat.leafboot`)."""
    n0, s0 = np.asarray(v.column(0)), np.asarray(v.column(1))
    out = [(n0, s0)]
    if n_sets > 1:
        leaf = np.asarray(v.leaf, np.int64)
        lo = int(leaf[0])
        w = weights_of_leaves(feature, np.arange(lo, int(leaf[-1]) + 1), n_sets - 1, random_state)[leaf - lo]
        out += [(n0 * w[:, t], s0 * w[:, t]) for t in range(n_sets - 1)]
    return out


def runs_block(runs: list, delta, K: int, n_sets: int, feature: str, random_state: int) -> RunsBlock:
    """The :class:`RunsBlock` of the old runs (:class:`~daskpd._strat.delta_lookup.RunView` s,
    current codes through their ``kmap``) and ``delta`` (a grouped Table in the current
    codes, or None), every set (the trials: each leaf's cells times its bootstrap weight)."""
    views = [r for r in runs if len(r)]
    if delta is not None and len(delta):
        views.append(RunView(delta.leaf, delta.key, np.arange(K, dtype=np.int64), lambda j: delta.values[:, j]))
    L = max((int(v.leaf[-1]) + 1 for v in views), default=0)
    counts = [np.bincount(np.asarray(v.leaf), minlength=L) for v in views]
    starts = np.zeros(L + 1, np.int64)
    np.cumsum(np.sum(counts, axis=0) if counts else np.zeros(L, np.int64), out=starts[1:])
    total = int(starts[-1])
    code = np.empty(total, np.int32)
    n = np.empty((total, n_sets))
    N = np.zeros((L, n_sets))
    Sy = np.zeros((L, n_sets))
    before = starts[:-1].copy()  # where each leaf's cells of the next run go
    columns = [_set_columns(v, n_sets, feature, random_state) for v in views]
    for v, cols, cnt in zip(views, columns, counts):
        shift = before - (np.cumsum(cnt) - cnt)
        for s, (ncol, scol) in enumerate(cols):
            _place(v.leaf, v.key, v.kmap, ncol, scol, shift, code, n[:, s], N[:, s], Sy[:, s], s == 0)
        before += cnt
    SN = np.divide(Sy, N, out=np.zeros_like(Sy), where=N > 0)
    new_starts, w, count, used, nlc, diag, rn, multi, scal, parent = _merge_leaves(code, n, starts, N, SN, K)
    m = int(new_starts[-1])
    # what the rounds read, narrowed: codes in 16 bits, rows in float32 when that holds them exactly
    code = code[:m].astype(np.uint16 if K <= 1 << 16 else np.int32)
    n = _per_set(n, m, np.float32 if _whole_below(n, m, 2.0 ** 24) else np.float64)
    w = np.ascontiguousarray(w.T)
    # the terms linear in the cells: sum_y and the s_lc part of r, run by run
    sum_y = np.zeros((K, n_sets))
    rs = np.zeros((K, n_sets))
    for v, cols in zip(views, columns):
        for s, (_, scol) in enumerate(cols):
            _linear(v.leaf, v.key, v.kmap, scol, multi[:, s], sum_y[:, s], rs[:, s])
    setups = []
    for s in range(n_sets):
        cnt = np.ascontiguousarray(count[:, s])
        cu = np.ascontiguousarray(used[:, s])
        present = cnt > 0
        group = number_groups(uf_flatten(parent[s].copy()), present, cnt)
        setups.append(dict(count=cnt, sum_y=np.ascontiguousarray(sum_y[:, s]), count_used=cu,
                           n_leaves_cat=np.ascontiguousarray(nlc[:, s]), r=rs[:, s] - rn[:, s], d=cu - diag[:, s],
                           unknown=ground(group, cu), group=group, present=present, n_ignored=float(scal[s, 0]),
                           n_leaves=int(round(scal[s, 1])), n_leaves_used=int(round(scal[s, 2]))))
    return RunsBlock(K, code, n, new_starts, w, setups)


@numba.njit(cache=True, nogil=True)
def _products(code, n, w, starts, p):
    """G p of one set: per leaf holding >= 2 of its categories (``w`` > 0),
    w_l n_l (n_l . p)."""
    out = np.zeros(p.shape[0])
    for q in range(starts.shape[0] - 1):
        wq = w[q]
        if wq == 0.0:
            continue
        a, b = starts[q], starts[q + 1]
        t = 0.0
        for i in range(a, b):
            t += n[i] * p[code[i]]
        t *= wq
        for i in range(a, b):
            out[code[i]] += n[i] * t
    return out


def _explicit(block: RunsBlock, s: int, su: dict) -> Effects:
    """A set's effects from its explicit G, summed from the block (CG did not converge)."""
    sizes = np.diff(block.starts)
    leaf = np.repeat(np.arange(len(sizes)), sizes)
    keep = (block.w[s][leaf] > 0) & (block.n[s] > 0)
    order = np.lexsort((block.code, leaf))  # codes ascending within a leaf
    order = order[keep[order]]
    lf, c, nn = leaf[order], block.code[order].astype(np.int64), block.n[s][order].astype(np.float64)
    state = LeafSums.empty(block.K)
    if len(lf):
        starts = np.flatnonzero(np.r_[True, lf[1:] != lf[:-1]]).astype(np.int64)
        state.add_gram(c, nn, block.w[s][lf], starts, lf // CHUNK_LEAVES)
    for a in ("count", "sum_y", "count_used", "n_leaves_cat", "r", "n_ignored", "n_leaves", "n_leaves_used"):
        setattr(state, a, su[a])
    return solve_gram(state, solver="direct")


def effects_of_runs(block: RunsBlock) -> list:
    """Per set, the :class:`~daskpd._strat.categorical_solve.Effects` of the block's
    system: conjugate gradients (products over the block), an explicit solve where they
    do not converge."""
    K = block.K
    def products(P, active):
        GP = np.zeros((K, len(active)))
        for s in np.flatnonzero(active):
            GP[:, s] = _products(block.code, block.n[s], block.w[s], block.starts, P[s])
        return GP

    x, active = cg_sets(block.setups, K, products)
    out = []
    for s, su in enumerate(block.setups):
        if active[s]:
            e = _explicit(block, s, su)
            effect, solver = e.effect, "cg+" + e.solver
        else:
            effect, solver = x[s], "cg" if len(su["unknown"]) else "none"
        present = su["present"]
        out.append(Effects(effect=np.where(present, effect, np.nan), group=su["group"], count=su["count"],
                           sum_y=su["sum_y"], count_used=su["count_used"], n_leaves_cat=su["n_leaves_cat"],
                           n_ignored=su["n_ignored"], n_leaves=su["n_leaves"], n_leaves_used=su["n_leaves_used"],
                           n_groups=int(su["group"].max()) + 1 if present.any() else 0, solver=solver))
    return out
