"""CatStratPD's merge: category effects by weighted least squares, summed leaf by leaf.

Within leaf ``l`` the mean y of category ``c`` is ``ybar_lc = s_lc / n_lc``.  The effects
``b`` are the weighted least-squares fit of ``ybar_lc ~ a_l + b_c`` (weights ``n_lc``;
``a_l`` is the leaf's level).  Eliminating the ``a_l`` leaves the normal equations over
the categories only, ``Lap b = r``, with

    Lap = diag(count_used) - G,    G = sum_l n_l n_l' / N_l,
    r_c = sum_l (s_lc - n_lc S_l / N_l),

sums over the leaves holding two or more categories (``n_l``: the leaf's category counts,
``N_l`` and ``S_l`` its rows and sum of y).  Every term is a sum over leaves, so the
leaves' buckets add their contributions one after another (:func:`accumulate`) and no
task ever holds a feature's (leaf, category) table; the state is O(K^2) at most (dense
``G`` for up to ``DENSE_MAX_KEYS`` categories, sparse above), whatever the number of rows.

Sums run over leaves in a fixed order, in fixed chunks (virtual buckets, then runs of
``CHUNK_LEAVES`` leaves), so the system is the same bits however the reduction was cut.

:func:`solve` then finds the groups of categories connected through shared leaves,
grounds one category per group (its most frequent) and solves the rest: dense
Cholesky, or sparse LU / Jacobi-preconditioned conjugate gradients for large sparse
systems.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numba
import numpy as np

from .._engine.sums import Table, group_sums

__all__ = ["LeafSums", "accumulate", "solve", "Effects", "solve_effects", "leaf_sums", "DENSE_MAX_KEYS",
           "DIRECT_MAX", "CG_MAXITER"]

#: up to this many categories, G is a dense K x K array (8 K^2 bytes); sparse above
DENSE_MAX_KEYS = 8192
#: leaves per chunk of the Gram sums (a chunk picks BLAS or a scatter by its own shape)
CHUNK_LEAVES = 64
#: a chunk's Gram is one BLAS product when its dense block costs at most this many times
#: the scatter's multiply-adds (BLAS does ~10x more of them per second)
BLAS_FACTOR = 8.0
#: sparse systems with at most this many unknowns are solved directly (sparse LU)
DIRECT_MAX = 3000
#: CG iteration cap before falling back to the direct solve
CG_MAXITER = 3000
#: sparse Gram entries kept uncompacted before they are merged
_COMPACT_AT = 4_000_000


@dataclass
class Effects:
    """Output of :func:`solve` (arrays indexed by category code 0..K-1)."""

    effect: np.ndarray  # WLS effect; 0 at each group's grounded category; NaN where count == 0
    group: np.ndarray  # group id (0 = most rows), -1 where count == 0
    count: np.ndarray  # rows (or bootstrap weight) per category, all leaves
    sum_y: np.ndarray  # sum of y per category, all leaves
    count_used: np.ndarray  # rows in leaves holding >= 2 categories
    n_leaves_cat: np.ndarray  # such leaves the category appears in
    n_ignored: float  # rows in single-category leaves
    n_leaves: int  # leaves with rows
    n_leaves_used: int  # leaves with >= 2 categories
    n_groups: int
    solver: str  # "none" | "dense" | "direct" | "cg" | "cg+direct"


@dataclass
class LeafSums:
    """The least-squares sums of one feature (one statistics set), over some leaves."""

    K: int
    count: np.ndarray
    sum_y: np.ndarray
    count_used: np.ndarray
    n_leaves_cat: np.ndarray
    r: np.ndarray
    gram: object  # dense (K, K) array, or a list of sparse Tables (row, col, value) in order
    n_ignored: float = 0.0
    n_leaves: int = 0
    n_leaves_used: int = 0
    counters: tuple | None = None
    _pending: int = field(default=0, repr=False)

    @classmethod
    def empty(cls, K: int) -> "LeafSums":
        z = lambda: np.zeros(K)  # noqa: E731
        gram = np.zeros((K, K)) if K <= DENSE_MAX_KEYS else []
        return cls(K, z(), z(), z(), z(), z(), gram)

    @property
    def dense(self) -> bool:
        return isinstance(self.gram, np.ndarray)

    @property
    def nbytes(self) -> int:
        g = self.gram.nbytes if self.dense else sum(t.nbytes for t in self.gram)
        return int(g + 5 * 8 * self.K)

    # -- adding leaves ----------------------------------------------------------------

    def add(self, leaf, code, n, s, chunk):
        """Add the leaves of one chunk (rows sorted by leaf; n > 0)."""
        K = self.K
        first = np.flatnonzero(np.r_[True, leaf[1:] != leaf[:-1]])
        sizes = np.diff(np.r_[first, len(leaf)])
        self.count += np.bincount(code, weights=n, minlength=K)
        self.sum_y += np.bincount(code, weights=s, minlength=K)
        self.n_leaves += len(first)
        multi_leaf = sizes >= 2
        multi = np.repeat(multi_leaf, sizes)
        self.n_ignored += float(n[~multi].sum())
        if not multi.any():
            return
        lid = np.repeat(np.arange(len(first)), sizes)[multi]
        c, nn, ss = code[multi], n[multi], s[multi]
        N = np.bincount(lid, weights=nn)
        S = np.bincount(lid, weights=ss)
        keep = N > 0
        self.n_leaves_used += int(np.sum(multi_leaf))
        self.count_used += np.bincount(c, weights=nn, minlength=K)
        self.n_leaves_cat += np.bincount(c, minlength=K)
        self.r += np.bincount(c, weights=ss - nn * (S / np.where(keep, N, 1.0))[lid], minlength=K)
        w = 1.0 / N[lid]
        starts = np.flatnonzero(np.r_[True, lid[1:] != lid[:-1]]).astype(np.int64)
        if self.dense:
            _add_dense(self.gram, c, nn, w, starts)
        else:
            rows, cols, vals = _pairs(c, nn, w, starts)
            self.gram.append(group_sums(rows, cols, vals))
            self._pending += len(vals)
            if self._pending > _COMPACT_AT:
                self.compact()

    def compact(self):
        """Merge the sparse Gram pieces (in order) into one."""
        if self.dense or len(self.gram) <= 1:
            return
        t = group_sums(np.concatenate([g.leaf for g in self.gram]), np.concatenate([g.key for g in self.gram]),
                       np.concatenate([g.values for g in self.gram], axis=0))
        self.gram = [t]
        self._pending = 0

    def fold(self, other: "LeafSums") -> "LeafSums":
        """These sums followed by ``other``'s (a fixed order: the result is canonical)."""
        if other is None:
            return self
        for a in ("count", "sum_y", "count_used", "n_leaves_cat", "r"):
            setattr(self, a, getattr(self, a) + getattr(other, a))
        if self.dense:
            self.gram = self.gram + other.gram
        else:
            self.gram = self.gram + other.gram
            self.compact()
        self.n_ignored += other.n_ignored
        self.n_leaves += other.n_leaves
        self.n_leaves_used += other.n_leaves_used
        self.counters = self.counters or other.counters
        return self

    def gram_csr(self):
        import scipy.sparse as sp

        if self.dense:
            return sp.csr_matrix(self.gram)
        self.compact()
        if not self.gram:
            return sp.csr_matrix((self.K, self.K))
        t = self.gram[0]
        return sp.csr_matrix((t.values[:, 0], (t.leaf.astype(np.int64), t.key)), shape=(self.K, self.K))


@numba.njit(cache=True, nogil=True)
def _scatter(G, c, n, w, starts):
    for q in range(starts.shape[0]):
        a = starts[q]
        b = starts[q + 1] if q + 1 < starts.shape[0] else c.shape[0]
        wl = w[a]
        for i in range(a, b):
            ni = n[i] * wl
            ci = c[i]
            for j in range(a, b):
                G[ci, c[j]] += ni * n[j]


@numba.njit(cache=True, nogil=True)
def _pairs(c, n, w, starts):
    total = 0
    for q in range(starts.shape[0]):
        a = starts[q]
        b = starts[q + 1] if q + 1 < starts.shape[0] else c.shape[0]
        total += (b - a) * (b - a)
    rows = np.empty(total, np.int64)
    cols = np.empty(total, np.int64)
    vals = np.empty(total)
    k = 0
    for q in range(starts.shape[0]):
        a = starts[q]
        b = starts[q + 1] if q + 1 < starts.shape[0] else c.shape[0]
        wl = w[a]
        for i in range(a, b):
            ni = n[i] * wl
            for j in range(a, b):
                rows[k] = c[i]
                cols[k] = c[j]
                vals[k] = ni * n[j]
                k += 1
    return rows, cols, vals


def _add_dense(G, c, n, w, starts):
    """G += sum over the chunk's leaves of n_l n_l' / N_l: one BLAS product when the
    chunk's categories are few enough for a dense (leaves x categories) block, else a
    scatter of the per-leaf outer products.  The choice depends on the chunk only."""
    n_leaf = len(starts)
    pairs = float(np.sum(np.diff(np.r_[starts, len(c)]).astype(np.float64) ** 2))
    u, pos = np.unique(c, return_inverse=True)
    if n_leaf * len(u) * len(u) <= BLAS_FACTOR * pairs:
        lid = np.repeat(np.arange(n_leaf), np.diff(np.r_[starts, len(c)]))
        A = np.zeros((n_leaf, len(u)))
        A[lid, pos] = n * np.sqrt(w)
        G[np.ix_(u, u)] += A.T @ A
    else:
        _scatter(G, c, n, w, starts)


def accumulate(state, table: Table, counters, fs, job, stats_set: int, group: int):
    """Add a bucket's leaves of one group of leaves to ``state`` (None: a new state)."""
    from .scan import bucket_bounds, virtual_of

    K = fs.coder.n_keys
    if state is None:
        state = LeafSums.empty(K)
    if counters is not None and state.counters is None:
        state.counters = counters
    gb = bucket_bounds(fs.n_leaves, job.category_groups())
    t = table.leaf_range(int(gb[group]), int(gb[group + 1]))
    k = fs.stats_per_set
    n = t.values[:, k * stats_set]
    m = n > 0
    leaf = t.leaf[m].astype(np.int64)
    if not len(leaf):
        return state
    code, n, s = t.key[m], n[m], t.values[m, k * stats_set + 1]
    chunk = virtual_of(leaf, fs.n_leaves) * (1 << 40) + leaf // CHUNK_LEAVES
    cut = np.flatnonzero(np.r_[True, chunk[1:] != chunk[:-1], True])
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        for a, b in zip(cut[:-1], cut[1:]):
            state.add(leaf[a:b], code[a:b], n[a:b], s[a:b], chunk[a])
    return state


# ---------------------------------------------------------------------------------
# solving


def _number_groups(comp, present, count):
    """Renumber components: 0 = most rows, ties by smallest category code; -1 if absent."""
    group = np.full(len(comp), -1, dtype="int64")
    if not present.any():
        return group
    uc, inv = np.unique(comp[present], return_inverse=True)
    rows = np.bincount(inv, weights=count[present])
    first = np.full(len(uc), len(comp))
    np.minimum.at(first, inv, np.flatnonzero(present))
    rank = np.empty(len(uc), dtype="int64")
    rank[np.lexsort((first, -rows))] = np.arange(len(uc))
    group[present] = rank[inv]
    return group


def solve(sums: LeafSums, *, solver: str = "auto") -> Effects:
    """Effects from the summed normal equations (see the module docstring).

    ``solver``: ``"auto"`` (dense Cholesky for a dense system; for a sparse one, sparse
    LU up to ``DIRECT_MAX`` unknowns, else conjugate gradients with a direct fallback),
    ``"direct"`` or ``"cg"``.
    """
    from scipy.sparse.csgraph import connected_components

    if solver not in ("auto", "direct", "cg"):
        from ..io import DataError

        raise DataError(f"parameter solver must be 'auto', 'direct' or 'cg'; got {solver!r}")
    K = sums.K
    present = sums.count > 0
    G = sums.gram_csr() if not sums.dense else None
    if sums.dense:
        import scipy.sparse as sp

        off = sums.gram != 0
        graph = sp.csr_matrix(off)
    else:
        graph = G
    _, comp = connected_components(graph, directed=False) if K else (0, np.zeros(0, np.int64))
    group = _number_groups(comp, present, sums.count)
    n_groups = int(group.max()) + 1 if present.any() else 0
    effect = np.zeros(K)
    used = "none"
    active = sums.count_used > 0
    if active.any():
        order = np.lexsort((-sums.count_used, group))  # by group, then most rows first
        order = order[active[order]]
        first = np.r_[True, group[order][1:] != group[order][:-1]]
        grounded = np.zeros(K, bool)
        grounded[order[first]] = True
        unknown = np.flatnonzero(active & ~grounded)
        if len(unknown):
            x, used = _solve(sums, G, unknown, solver)
            effect[unknown] = x
    effect[~present] = np.nan
    return Effects(effect=effect, group=group, count=sums.count, sum_y=sums.sum_y, count_used=sums.count_used,
                   n_leaves_cat=sums.n_leaves_cat, n_ignored=sums.n_ignored, n_leaves=sums.n_leaves,
                   n_leaves_used=sums.n_leaves_used, n_groups=n_groups, solver=used)


def _solve(sums: LeafSums, G, unknown, solver):
    import scipy.sparse as sp
    import scipy.sparse.linalg as sla

    b = sums.r[unknown]
    nu = len(unknown)
    if sums.dense:
        A = -sums.gram[np.ix_(unknown, unknown)]
        A[np.diag_indices(nu)] += sums.count_used[unknown]
        if solver != "cg":
            import scipy.linalg

            return scipy.linalg.solve(A, b, assume_a="pos", overwrite_a=True, check_finite=False), "dense"
        op = sla.aslinearoperator(A)
    else:
        A = (sp.diags(sums.count_used[unknown]) - G[unknown][:, unknown]).tocsc()
        if solver == "direct" or (solver == "auto" and nu <= DIRECT_MAX):
            return _direct(A, b), "direct"
        op = A
    d = np.asarray(A.diagonal() if hasattr(A, "diagonal") else np.diag(A))
    pre = sla.LinearOperator((nu, nu), matvec=lambda v: np.ravel(v) / d, dtype="float64")
    x, info = sla.cg(op, b, rtol=1e-13, atol=0.0, maxiter=CG_MAXITER, M=pre)
    if info == 0 or solver == "cg":
        if info != 0:
            warnings.warn(f"CatStratPD: conjugate gradients did not converge in {CG_MAXITER} iterations "
                          f"({nu} unknown category effects); the effects are approximate. "
                          "Use solver='direct' or 'auto'.", RuntimeWarning, stacklevel=4)
        return x, "cg"
    return _direct(A, b), "cg+direct"


def _direct(A, b):
    import scipy.sparse.linalg as sla

    lu = sla.splu(A, permc_spec="MMD_AT_PLUS_A")
    x = lu.solve(b)
    return x + lu.solve(b - A @ x)  # one step of iterative refinement


def solve_effects(leaf, cat, n, s, n_categories: int, *, solver: str = "auto") -> Effects:
    """:func:`solve` from aligned per-(leaf, category) sums (any leaf ids, any order):
    the in-memory path, with the same kernels as the scan's."""
    return solve(leaf_sums(leaf, cat, n, s, n_categories), solver=solver)


def leaf_sums(leaf, cat, n, s, n_categories: int) -> LeafSums:
    """:class:`LeafSums` of aligned per-(leaf, category) sums (any leaf ids, any order)."""
    leaf = np.asarray(leaf)
    cat = np.asarray(cat, dtype="int64")
    n = np.asarray(n, dtype="float64")
    s = np.asarray(s, dtype="float64")
    _, lid = np.unique(leaf, return_inverse=True)
    t = group_sums(lid.reshape(-1), cat, np.c_[n, s])
    m = t.values[:, 0] > 0
    state = LeafSums.empty(int(n_categories))
    lf, cd, nn, ss = t.leaf[m].astype(np.int64), t.key[m], t.values[m, 0], t.values[m, 1]
    chunk = lf // CHUNK_LEAVES
    cut = np.flatnonzero(np.r_[True, chunk[1:] != chunk[:-1], True])
    for a, b in zip(cut[:-1], cut[1:]):
        state.add(lf[a:b], cd[a:b], nn[a:b], ss[a:b], chunk[a])
    return state
