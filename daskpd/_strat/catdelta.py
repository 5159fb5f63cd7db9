"""The incremental finish of a CatStratPD feature: its normal equations kept and updated
by the leaves that appended rows touch.

(:mod:`daskpd._strat.categorical_solve` for the notation.)  Every term of the system --
``count``, ``sum_y``, ``count_used``, ``n_leaves_cat``, ``r``, ``diag(G)``, the rows in
single-category leaves, the leaf counts and ``G = sum_l n_l n_l' / N_l`` -- is a sum over
leaves of the leaf's own term.  A :class:`CatSummary` keeps these sums per statistics set
(``G`` as the upper triangle of a dense array, for up to ``EXPLICIT_MAX_KEYS``
categories).  Appended rows change the terms of the leaves they fall in only: for each
such leaf, its old cells (every category of the leaf, looked up in the kept runs,
memory-mapped) give its old terms, taken off, and its old cells plus the new ones give
its new terms, put on (:func:`apply_cat_delta`); the system is then solved as a full
finish solves it (:func:`effects_of_summary`).

The groups (connected categories) are those of ``G``'s nonzero entries, as the direct
solve finds them: appended rows only add cells to leaves, so a pair of categories that
shared a leaf still does and the groups can only merge.

Above ``EXPLICIT_MAX_KEYS`` categories a feature keeps no summary (its ``G`` is nearly
dense, and appended rows change every pair term of every leaf they touch): it is solved
over its runs, unmerged (:mod:`daskpd._strat.catruns`).  (Conjugate gradients started from the previous run's effects were
tried: they took as many rounds as a cold start -- 10 and 10 at 1e6 rows + 1e5, 14 and
13 at 3e5 + 3e4 on the 5,000-level feature of :class:`daskpd.datasets.Lake` -- since
the Jacobi-preconditioned system converges by ~10x a round and the start's residual
needs one more round of products.)
"""
from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from .._engine.sums import Table, reduce_tables
from .categorical_gram import LeafSums
from .categorical_gram_solve import solve_gram
from .categorical_solve import TILE, scatter_upper
from .leafboot import table_leaf_weights

__all__ = ["CatSummary", "cat_summary", "apply_cat_delta", "effects_of_summary"]

#: the vectors a summary keeps per set, in this order
VECTORS = ("count", "sum_y", "count_used", "n_leaves_cat", "r", "diag")


@dataclass
class CatSummary:
    """Per statistics set: ``vectors`` (sets, 6, K) (:data:`VECTORS`), ``scalars``
    (sets, 3): rows in single-category leaves, leaves with rows, leaves with >= 2
    categories; ``gram`` (sets, K, K) the upper triangle of G."""

    vectors: np.ndarray
    scalars: np.ndarray
    gram: np.ndarray

    @property
    def n_sets(self) -> int:
        return int(self.vectors.shape[0])

    @property
    def K(self) -> int:
        return int(self.vectors.shape[2])

    @property
    def nbytes(self) -> int:
        return int(self.vectors.nbytes + self.scalars.nbytes + self.gram.nbytes)

    def arrays(self) -> dict:
        return {"cat_vectors": self.vectors, "cat_scalars": self.scalars, "cat_gram": self.gram}

    @classmethod
    def from_arrays(cls, z: dict) -> "CatSummary":
        return cls(z["cat_vectors"], z["cat_scalars"], z["cat_gram"])

    def recode(self, kmap, K: int) -> "CatSummary":
        """The summary in the codes of a superset vocabulary (``kmap``: old code -> new
        code; None: the same codes)."""
        if kmap is None:
            return self
        kmap = np.asarray(kmap, np.int64)
        S = self.n_sets
        vec = np.zeros((S, len(VECTORS), K))
        vec[:, :, kmap] = self.vectors
        gram = np.zeros((S, K, K))
        for s in range(S):
            g = self.gram[s]
            new = np.zeros((K, K))
            new[np.ix_(kmap, kmap)] = np.triu(g) + np.triu(g, 1).T
            gram[s] = np.triu(new)
        return CatSummary(vec, self.scalars.copy(), gram)


def _empty(n_sets: int, K: int) -> CatSummary:
    return CatSummary(np.zeros((n_sets, len(VECTORS), K)), np.zeros((n_sets, 3)), np.zeros((n_sets, K, K)))


def _add_terms(summary: CatSummary, table: Table, sign: float, feature: str, random_state: int) -> None:
    """Add ``sign`` times the terms of the leaves of ``table`` (grouped: sorted by leaf,
    then code; its first two statistics: rows, sum of y) to ``summary``, in place: set t
    each leaf's terms times its trial-t weight (the leaf's rows and sum of y scaled by
    it; every term is of degree one in them)."""
    K = summary.K
    leaf = np.asarray(table.leaf, np.int64)
    code = np.asarray(table.key, np.int64)
    weights = table_leaf_weights(table, feature, summary.n_sets - 1, random_state)
    for s in range(summary.n_sets):
        scale = 1.0 if s == 0 else weights[leaf - leaf[0], s - 1].astype(np.float64)
        n = table.values[:, 0] * scale
        m = n > 0
        if not m.any():
            continue
        lf, c, nn, yy = leaf[m], code[m], n[m], (table.values[:, 1] * scale)[m]
        first = np.flatnonzero(np.r_[True, lf[1:] != lf[:-1]])
        sizes = np.diff(np.r_[first, len(lf)])
        N = np.add.reduceat(nn, first)
        Sy = np.add.reduceat(yy, first)
        multi_l = sizes >= 2
        v = summary.vectors[s]
        single = _cat_terms(v, c, nn, yy, first, N, Sy, multi_l, sign, K)
        summary.scalars[s] += sign * np.array([single.sum(), len(first), multi_l.sum()], dtype=np.float64)
        starts, cm, nm, w = _multi_cells(c, nn, first, N, multi_l)
        if len(cm):
            scatter_upper(summary.gram[s], cm, nm, sign * w, starts, TILE)


@numba.njit(cache=True, nogil=True)
def _cat_terms(v, c, nn, yy, first, N, Sy, multi_l, sign, K):
    """``v[j] += sign * bincount(...)`` of the six vectors (:data:`VECTORS`) over the cells
    (leaf ``l``'s from ``first[l]``; ``multi_l``: the leaves of >= 2 categories), each
    position's terms added in the cells' order as bincount adds them; the rows of the
    single-category leaves' cells returned (in order, to be summed as numpy sums)."""
    acc = np.zeros((6, K))
    L = first.shape[0]
    n_single = 0
    for q in range(L):
        if not multi_l[q]:
            n_single += (first[q + 1] if q + 1 < L else c.shape[0]) - first[q]
    single = np.empty(n_single)
    k = 0
    for q in range(L):
        a, b = first[q], (first[q + 1] if q + 1 < L else c.shape[0])
        w = 1.0 / N[q]
        mean = Sy[q] / N[q]
        for i in range(a, b):
            ci = c[i]
            acc[0, ci] += nn[i]
            acc[1, ci] += yy[i]
            if multi_l[q]:
                acc[2, ci] += nn[i]
                acc[3, ci] += 1.0
                acc[4, ci] += yy[i] - nn[i] * mean
                acc[5, ci] += nn[i] * nn[i] * w
            else:
                single[k] = nn[i]
                k += 1
    for j in range(6):
        for ci in range(K):
            v[j, ci] += sign * acc[j, ci]
    return single


def _multi_cells(c, nn, first, N, multi_l):
    """The cells of the leaves of >= 2 categories: the first cell of each such leaf
    among them, their codes, rows and ``1 / N`` of their leaf."""
    sizes = np.diff(np.r_[first, len(c)])
    lid = np.repeat(np.arange(len(first)), sizes)
    multi = multi_l[lid]
    cm, nm, w = c[multi], nn[multi], (1.0 / N)[lid][multi]
    lm = lid[multi]
    starts = np.flatnonzero(np.r_[True, lm[1:] != lm[:-1]]).astype(np.int64) if len(lm) else np.zeros(0, np.int64)
    return starts, cm, nm, w


def cat_summary(table: Table, K: int, n_sets: int, feature: str, random_state: int) -> CatSummary:
    """The summary of a feature's merged (leaf, category) sums."""
    summary = _empty(n_sets, K)
    _add_terms(summary, table, 1.0, feature, random_state)
    return summary


@numba.njit(cache=True, nogil=True)
def _leaf_rows(oleaf, leaves):
    """The rows of a run (sorted by leaf) whose leaf is one of ``leaves`` (sorted)."""
    m = oleaf.shape[0]
    total = 0
    lo = np.empty(leaves.shape[0], np.int64)
    hi = np.empty(leaves.shape[0], np.int64)
    for t in range(leaves.shape[0]):
        a = leaves[t]
        for side in range(2):
            b, e = 0, m
            while b < e:
                mid = (b + e) // 2
                lm = np.int64(oleaf[mid])
                if lm < a or (side == 1 and lm == a):
                    b = mid + 1
                else:
                    e = mid
            if side == 0:
                lo[t] = b
            else:
                hi[t] = b
        total += hi[t] - lo[t]
    out = np.empty(total, np.int64)
    i = 0
    for t in range(leaves.shape[0]):
        for j in range(lo[t], hi[t]):
            out[i] = j
            i += 1
    return out


def _old_cells(runs: list, leaves: np.ndarray, n_values: int) -> list:
    """The kept cells of ``leaves`` in every run (:class:`~daskpd._strat.delta_lookup.RunView`,
    current codes through its ``kmap``), as one grouped table per run."""
    out = []
    for r in runs:
        if not len(r):
            continue
        rows = _leaf_rows(r.leaf, leaves)
        if not len(rows):
            continue
        vals = np.empty((len(rows), n_values))
        for j in range(n_values):
            vals[:, j] = r.column(j)[rows]
        key = r.kmap[np.asarray(r.key[rows], np.int64)]
        leaf = np.asarray(r.leaf[rows], np.int64)
        if len(r.kmap) > 1 and not np.all(np.diff(r.kmap) > 0):  # codes no longer in order: sort again
            order = np.lexsort((key, leaf))
            leaf, key, vals = leaf[order], key[order], vals[order]
        out.append(Table(leaf, key, vals))
    return out


def apply_cat_delta(summary: CatSummary, runs: list, delta: Table, feature: str, random_state: int) -> CatSummary:
    """The summary of the old sums (``runs``, ``summary`` in the current codes) plus
    ``delta`` (grouped, current codes): the touched leaves' old terms off, their new
    terms on."""
    summary = CatSummary(summary.vectors.copy(), summary.scalars.copy(), summary.gram.copy())
    if not len(delta):
        return summary
    leaves = np.asarray(delta.leaf, np.int64)
    leaves = leaves[np.r_[True, leaves[1:] != leaves[:-1]]]  # distinct (a grouped table: in order)
    old = _old_cells(runs, leaves, delta.values.shape[1])
    if old:
        before = old[0] if len(old) == 1 else reduce_tables(old, summary.K)
        _add_terms(summary, before, -1.0, feature, random_state)
        after = reduce_tables([before, delta], summary.K)
    else:
        after = delta
    _add_terms(summary, after, 1.0, feature, random_state)
    return summary


def effects_of_summary(summary: CatSummary, counters=None) -> list:
    """Per set, the :class:`~daskpd._strat.categorical_solve.Effects` of the summary's
    normal equations (direct solves, as a full finish of up to ``EXPLICIT_MAX_KEYS``
    categories)."""
    out = []
    K = summary.K
    for s in range(summary.n_sets):
        v, sc = summary.vectors[s], summary.scalars[s]
        sums = LeafSums(K, v[0].copy(), v[1].copy(), v[2].copy(), v[3].copy(), v[4].copy(),
                        np.asfortranarray(summary.gram[s]), float(sc[0]), int(round(sc[1])), int(round(sc[2])),
                        counters)
        out.append(solve_gram(sums, solver="direct"))
    return out
