"""CatStratPD's merge: category effects by weighted least squares over leaf deltas.

Within leaf ``l`` the mean y of category ``c`` is ``ybar_lc = s_lc / n_lc``.  The effects
``b`` are the weighted least-squares fit of ``ybar_lc ~ a_l + b_c`` (weights ``n_lc``;
``a_l`` is the leaf's level).  Eliminating the ``a_l`` leaves the normal equations over
the categories only, ``Lap b = r``, with

    Lap = diag(count_used) - G,    G = sum_l n_l n_l' / N_l,
    r_c = sum_l (s_lc - n_lc S_l / N_l),

sums over the leaves holding two or more categories (``n_l``: the leaf's category counts,
``N_l`` and ``S_l`` its rows and sum of y).  On noise-free additive data every leaf's
deltas agree and the fit is exact; with noise it is the count-weighted optimum (the
reference implementation merges leaves one at a time, in leaf order, instead).

Categories connected through shared leaves form a *group*; each group's system is
singular by one constant, so one category per group (its most frequent) is fixed at 0
and the rest is solved.

This module holds what the solvers share, and :func:`solve_table`, the in-memory solver
of a whole (leaf, category) table sorted by leaf (``Lap`` applied matrix-free inside
Jacobi-preconditioned conjugate gradients; a sparse LU of the explicit system for small
systems, or when CG does not converge).  The scan never gathers a table: it solves from
the buckets of leaves where they were merged (:mod:`daskpd._strat.categorical_buckets`).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numba
import numpy as np

from .._engine.sums import group_sums
from .._errors import DataError

__all__ = ["Effects", "solve_table", "solve_effects", "number_groups", "ground", "cg_solve", "direct_solve",
           "pairs_upper", "scatter_upper", "tile_cuts", "grounded_dense", "symmetric_csr", "DIRECT_MAX", "CG_MAXITER",
           "EXPLICIT_BUDGET"]

#: sparse systems with at most this many unknowns are solved directly (sparse LU)
DIRECT_MAX = 3000
#: CG iteration cap before falling back to the direct solve
CG_MAXITER = 3000
#: the explicit G (for the direct solve) is formed only below this many leaf pair terms
EXPLICIT_BUDGET = 40_000_000
#: an explicit G with at most this many categories is a dense array (sparse above)
DENSE_EXPLICIT_MAX = 4096
#: rows and columns of the tiles of a dense G that the scatter updates one at a time
TILE = 1024


@dataclass
class Effects:
    """A solved system (arrays indexed by category code 0..K-1)."""

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
    solver: str  # "none" | "direct" | "cg" | "cg+direct" | "dense" | "cg+dense"


# ---------------------------------------------------------------------------------
# shared pieces


def number_groups(comp, present, count):
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


def ground(group, count_used) -> np.ndarray:
    """The unknowns: categories in leaves with >= 2 categories, minus one per group (the
    one with the most such rows, ties by code)."""
    K = len(group)
    active = count_used > 0
    if not active.any():
        return np.zeros(0, np.int64)
    order = np.lexsort((-count_used, group))  # by group, then most rows first
    order = order[active[order]]
    first = np.r_[True, group[order][1:] != group[order][:-1]]
    grounded = np.zeros(K, bool)
    grounded[order[first]] = True
    return np.flatnonzero(active & ~grounded)


def cg_solve(op, b, d, maxiter):
    """Jacobi-preconditioned conjugate gradients, relative tolerance 1e-13."""
    import scipy.sparse.linalg as sla

    nu = len(b)
    pre = sla.LinearOperator((nu, nu), matvec=lambda v: np.ravel(v) / d, dtype="float64")
    return sla.cg(op, b, rtol=1e-13, atol=0.0, maxiter=maxiter, M=pre)


def warn_cg(nu):
    warnings.warn(f"CatStratPD: conjugate gradients did not converge in {CG_MAXITER} iterations "
                  f"({nu} unknown category effects); the effects are approximate. "
                  "Use solver='direct' or 'auto'.", RuntimeWarning, stacklevel=4)


def direct_solve(A, b):
    """Sparse LU with one step of iterative refinement."""
    import scipy.sparse.linalg as sla

    lu = sla.splu(A.tocsc(), permc_spec="MMD_AT_PLUS_A")
    x = lu.solve(b)
    return x + lu.solve(b - A @ x)


@numba.njit(cache=True, nogil=True)
def pairs_upper(c, n, w, starts):
    """The upper-triangle terms n_i n_j w_l of every leaf (rows ``starts[q]`` on, codes
    ascending within a leaf), as (row, column, value)."""
    total = 0
    for q in range(starts.shape[0]):
        a = starts[q]
        b = starts[q + 1] if q + 1 < starts.shape[0] else c.shape[0]
        total += (b - a) * (b - a + 1) // 2
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
            for j in range(i, b):
                rows[k] = c[i]
                cols[k] = c[j]
                vals[k] = ni * n[j]
                k += 1
    return rows, cols, vals


@numba.njit(cache=True, nogil=True)
def tile_cuts(c, starts, n_tiles, tile):
    """``(ends, cut)`` of leaves whose rows start at ``starts`` (codes ``c`` ascending
    within a leaf): ``ends[q]`` one past leaf q's last row, ``cut[q, t]`` the first row of
    leaf q whose code is in tile ``t`` (of ``tile`` codes) or later."""
    n_leaf = starts.shape[0]
    ends = np.empty(n_leaf, np.int64)
    for q in range(n_leaf):
        ends[q] = starts[q + 1] if q + 1 < n_leaf else c.shape[0]
    cut = np.empty((n_leaf, n_tiles + 1), np.int64)
    for q in range(n_leaf):
        i = starts[q]
        for t in range(n_tiles + 1):
            while i < ends[q] and c[i] < t * tile:
                i += 1
            cut[q, t] = i
    return ends, cut


@numba.njit(cache=True, nogil=True)
def scatter_upper(G, c, n, w, starts, tile):
    """Upper triangle of G += n_l n_l' w_l for each leaf (codes ascending within a leaf),
    tile pair by tile pair of G so that the updates stay in cache."""
    n_leaf = starts.shape[0]
    K = G.shape[0]
    n_tiles = (K + tile - 1) // tile
    _, cut = tile_cuts(c, starts, n_tiles, tile)  # only the cuts (each leaf's rows per tile)
    for ti in range(n_tiles):
        for tj in range(ti, n_tiles):
            for q in range(n_leaf):
                a0, a1 = cut[q, ti], cut[q, ti + 1]
                b0, b1 = cut[q, tj], cut[q, tj + 1]
                if a0 == a1 or b0 == b1:
                    continue
                wl = w[starts[q]]
                for i in range(a0, a1):
                    ni = n[i] * wl
                    ci = c[i]
                    j0 = i if ti == tj else b0
                    for j in range(j0, b1):
                        G[ci, c[j]] += ni * n[j]


@numba.njit(cache=True, nogil=True)
def grounded_dense(G, unknown, count_used):
    """diag(count_used) - G on the unknowns, G given by its upper triangle (one pass)."""
    nu = unknown.shape[0]
    A = np.empty((nu, nu))
    for a in range(nu):
        i = unknown[a]
        for b in range(a, nu):
            j = unknown[b]
            v = -G[i, j] if i <= j else -G[j, i]
            A[a, b] = v
            A[b, a] = v
        A[a, a] += count_used[i]
    return A


def symmetric_csr(rows, cols, vals, K):
    """The symmetric sparse matrix of upper-triangle (row, col, value) terms (duplicates
    summed)."""
    import scipy.sparse as sp

    off = rows != cols
    return sp.csr_matrix((np.r_[vals, vals[off]], (np.r_[rows, cols[off]], np.r_[cols, rows[off]])), shape=(K, K))


# ---------------------------------------------------------------------------------
# the table path


# union-find over category codes, shared by the leaf scan (categorical_buckets) and the
# component labelling here and in categorical_gram: ``parent`` is an int64 array, a root
# is its own parent, and a union always makes the smaller root the parent.


@numba.njit(cache=True, nogil=True)
def uf_find(parent, r):
    """Root of ``r`` (the path is left as it is)."""
    while parent[r] != r:
        r = parent[r]
    return r


@numba.njit(cache=True, nogil=True)
def uf_find_halving(parent, r):
    """Root of ``r``, halving the path on the way."""
    while parent[r] != r:
        parent[r] = parent[parent[r]]
        r = parent[r]
    return r


@numba.njit(cache=True, nogil=True)
def uf_join(parent, r0, c):
    """Join the tree of ``c`` (found with path halving) to the root ``r0``; the smaller
    root becomes the parent.  Returns the root of the joined tree."""
    r1 = uf_find_halving(parent, c)
    if r1 != r0:
        if r1 < r0:
            parent[r0] = r1
            r0 = r1
        else:
            parent[r1] = r0
    return r0


@numba.njit(cache=True, nogil=True)
def forest_link(parent, seen, n_comp, one_root, root, c, s):
    """Link category ``c`` to set ``s``'s tree of the current leaf in the spanning forest
    ``parent`` ((categories, sets), a column per set).  ``root[s]``: the leaf's tree so
    far (-1 at the leaf's first category); ``seen`` marks the categories the set has met
    in its leaves, ``n_comp[s]`` counts their components.  The forest serves only its
    components, so while they are one (rooted at ``one_root[s]``, else -1) a category met
    before is known to be in it without a walk up the forest; else as :func:`uf_join`
    (the smaller root becomes the parent).  Callers test in line whether ``c`` is such a
    category already in the leaf's tree, and call only when it is not: a call for every
    cell and set cost 40% of the bucket finish with 20 trials."""
    if one_root[s] >= 0 and seen[c, s]:
        r1 = one_root[s]
    else:
        if not seen[c, s]:
            seen[c, s] = True
            n_comp[s] += 1
        col = parent[:, s]
        r1 = uf_find(col, c) if root[s] < 0 else uf_find_halving(col, c)
    if root[s] < 0:
        root[s] = r1
    elif r1 != root[s]:
        n_comp[s] -= 1
        root[s] = uf_join(parent[:, s], root[s], r1)
    one_root[s] = root[s] if n_comp[s] == 1 else -1


@numba.njit(cache=True, nogil=True)
def uf_flatten(parent):
    """Point every entry at its root, in place; returns ``parent`` (a label per entry)."""
    for i in range(parent.shape[0]):
        parent[i] = uf_find(parent, i)
    return parent


@numba.njit(cache=True, nogil=True)
def _components(code, starts, K):
    """Connected components of categories linked by sharing a leaf (union-find)."""
    parent = np.arange(K)
    for q in range(starts.shape[0]):
        a = starts[q]
        b = starts[q + 1] if q + 1 < starts.shape[0] else code.shape[0]
        r0 = uf_find(parent, code[a])
        for i in range(a + 1, b):
            r0 = uf_join(parent, r0, code[i])
    return uf_flatten(parent)


@numba.njit(cache=True, nogil=True)
def _gram_matvec(x, code, n, w, starts):
    """G x, G = sum over leaves of w_l n_l n_l' (two passes over the leaves' rows)."""
    out = np.zeros(x.shape[0])
    for q in range(starts.shape[0]):
        a = starts[q]
        b = starts[q + 1] if q + 1 < starts.shape[0] else code.shape[0]
        t = 0.0
        for i in range(a, b):
            t += n[i] * x[code[i]]
        t *= w[a]
        for i in range(a, b):
            out[code[i]] += n[i] * t
    return out


def solve_table(leaf, code, n, s, K: int, *, solver: str = "auto") -> Effects:
    """Effects from a (leaf, category) table sorted by leaf (rows with n > 0; codes
    ascending within a leaf).  See the module docstring."""
    import scipy.sparse as sp
    import scipy.sparse.linalg as sla

    if solver not in ("auto", "direct", "cg"):
        raise DataError(f"parameter solver must be 'auto', 'direct' or 'cg'; got {solver!r}")
    leaf = np.asarray(leaf)
    code = np.asarray(code, dtype=np.int64)
    n = np.asarray(n, dtype="float64")
    s = np.asarray(s, dtype="float64")
    count = np.bincount(code, weights=n, minlength=K)
    sum_y = np.bincount(code, weights=s, minlength=K)
    first = np.flatnonzero(np.r_[True, leaf[1:] != leaf[:-1]]) if len(leaf) else np.zeros(0, np.int64)
    sizes = np.diff(np.r_[first, len(leaf)])
    multi = np.repeat(sizes >= 2, sizes)
    n_ignored = float(n[~multi].sum())
    c, nn, ss = code[multi], n[multi], s[multi]
    lid = np.repeat(np.arange(len(first)), sizes)[multi]
    new_leaf = np.r_[True, lid[1:] != lid[:-1]] if len(lid) else np.zeros(0, bool)
    starts = np.flatnonzero(new_leaf).astype(np.int64)
    lid = np.cumsum(new_leaf) - 1  # leaves holding >= 2 categories, numbered 0..
    N = np.bincount(lid, weights=nn)
    S = np.bincount(lid, weights=ss)
    w = (1.0 / N)[lid] if len(lid) else nn
    count_used = np.bincount(c, weights=nn, minlength=K)
    n_leaves_cat = np.bincount(c, minlength=K)
    r = np.bincount(c, weights=ss - nn * (S / np.where(N > 0, N, 1.0))[lid] if len(lid) else ss, minlength=K)
    present = count > 0
    group = number_groups(_components(c, starts, K) if K else np.zeros(0, np.int64), present, count)
    effect = np.zeros(K)
    used = "none"
    unknown = ground(group, count_used)
    if len(unknown):
        nu = len(unknown)
        b = r[unknown]
        sizes_m = np.diff(np.r_[starts, len(c)]).astype(np.float64)
        terms = float(np.sum(sizes_m * (sizes_m + 1) / 2))

        def explicit(b):
            if K <= DENSE_EXPLICIT_MAX:
                import scipy.linalg

                G = np.zeros((K, K))
                scatter_upper(G, c, nn, w, starts, TILE)
                A = grounded_dense(G, unknown, count_used)
                return scipy.linalg.solve(A, b, assume_a="pos", overwrite_a=True, check_finite=False)
            M = sp.csr_matrix((nn * np.sqrt(w), (lid, c)), shape=(len(starts), K))
            G = (M.T @ M).tocsr()
            return direct_solve((sp.diags(count_used[unknown]) - G[unknown][:, unknown]).tocsc(), b)

        if solver == "direct" or (solver == "auto" and nu <= DIRECT_MAX and terms <= EXPLICIT_BUDGET):
            x, used = explicit(b), "direct"
        else:
            full = np.zeros(K)

            def matvec(v):
                full[unknown] = np.ravel(v)
                return (count_used * full - _gram_matvec(full, c, nn, w, starts))[unknown]

            op = sla.LinearOperator((nu, nu), matvec=matvec, dtype="float64")
            d = (count_used - np.bincount(c, weights=nn * nn * w, minlength=K))[unknown]
            x, info = cg_solve(op, b, d, CG_MAXITER)
            used = "cg"
            if info != 0:
                if solver == "cg":
                    warn_cg(nu)
                else:
                    x, used = explicit(b), "cg+direct"
        effect[unknown] = x
    effect[~present] = np.nan
    return Effects(effect=effect, group=group, count=count, sum_y=sum_y, count_used=count_used,
                   n_leaves_cat=n_leaves_cat, n_ignored=n_ignored, n_leaves=len(first),
                   n_leaves_used=len(starts), n_groups=int(group.max()) + 1 if present.any() else 0, solver=used)


def solve_effects(leaf, cat, n, s, n_categories: int, *, solver: str = "auto") -> Effects:
    """:func:`solve_table` from aligned per-(leaf, category) sums (any leaf ids, any
    order, duplicates summed): the in-memory entry point."""
    leaf = np.asarray(leaf)
    _, lid = np.unique(leaf, return_inverse=True)
    t = group_sums(lid.reshape(-1), np.asarray(cat, dtype=np.int64), np.c_[np.asarray(n, float), np.asarray(s, float)])
    m = t.values[:, 0] > 0
    return solve_table(t.leaf[m], t.key[m], t.values[m, 0], t.values[m, 1], int(n_categories), solver=solver)
