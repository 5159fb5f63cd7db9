"""CatStratPD's summed normal equations solved (:func:`solve_gram`): the connected
groups of categories found, one category grounded per group, and the rest solved -- a
dense system by Cholesky (conjugate gradients above ``DENSE_DIRECT_MAX`` unknowns), a
sparse one by sparse LU (conjugate gradients above ``DIRECT_MAX``).  The sums
themselves are :mod:`daskpd._strat.categorical_gram`'s :class:`LeafSums`.
"""
from __future__ import annotations

import numba
import numpy as np

from .._errors import DataError
from .categorical_gram import LeafSums
from .categorical_solve import (
    CG_MAXITER,
    DIRECT_MAX,
    Effects,
    cg_solve,
    direct_solve,
    ground,
    grounded_dense,
    number_groups,
    uf_find_halving,
    uf_flatten,
    warn_cg,
)

__all__ = ["solve_gram", "DENSE_DIRECT_MAX", "DENSE_CG_MAXITER"]

#: dense systems with at most this many unknowns are solved by Cholesky at once
DENSE_DIRECT_MAX = 1500
#: dense systems above that try this many CG iterations (O(K^2) each) before Cholesky
DENSE_CG_MAXITER = 300


@numba.njit(cache=True, nogil=True)
def _components_dense(G):
    """Connected components of the graph whose edges are the nonzero entries of the
    upper triangle of G (union-find, column by column); a label per row."""
    K = G.shape[0]
    parent = np.arange(K)
    for j in range(K):
        for i in range(j):
            if G[i, j] != 0.0:
                a, b = uf_find_halving(parent, i), uf_find_halving(parent, j)
                if a != b:
                    parent[max(a, b)] = min(a, b)
    return uf_flatten(parent)


def solve_gram(sums: LeafSums, *, solver: str = "auto") -> Effects:
    """Effects from summed normal equations: a dense system by Cholesky up to
    ``DENSE_DIRECT_MAX`` unknowns, else conjugate gradients with a Cholesky fallback; a
    sparse one by sparse LU up to ``DIRECT_MAX`` unknowns, else conjugate gradients with
    an LU fallback (``solver``: "auto", "direct" or "cg")."""
    from scipy.sparse.csgraph import connected_components

    if solver not in ("auto", "direct", "cg"):
        raise DataError(f"parameter solver must be 'auto', 'direct' or 'cg'; got {solver!r}")
    K = sums.K
    present = sums.count > 0
    if sums.dense:
        comp = _components_dense(sums.gram) if K else np.zeros(0, np.int64)
        G = None
    else:
        G = sums.gram_csr()
        comp = connected_components(G, directed=False)[1] if K else np.zeros(0, np.int64)
    group = number_groups(comp, present, sums.count)
    effect = np.zeros(K)
    used = "none"
    unknown = ground(group, sums.count_used)
    if len(unknown):
        x, used = _solve(sums, G, unknown, solver)
        effect[unknown] = x
    effect[~present] = np.nan
    return Effects(effect=effect, group=group, count=sums.count, sum_y=sums.sum_y, count_used=sums.count_used,
                   n_leaves_cat=sums.n_leaves_cat, n_ignored=sums.n_ignored, n_leaves=sums.n_leaves,
                   n_leaves_used=sums.n_leaves_used, n_groups=int(group.max()) + 1 if present.any() else 0,
                   solver=used)


def _solve(sums: LeafSums, G, unknown, solver):
    import scipy.linalg
    import scipy.sparse as sp

    b = sums.r[unknown]
    nu = len(unknown)
    if sums.dense:
        A = grounded_dense(sums.gram, unknown, sums.count_used)
        if solver == "direct" or (solver == "auto" and nu <= DENSE_DIRECT_MAX):
            return scipy.linalg.solve(A, b, assume_a="pos", overwrite_a=True, check_finite=False), "dense"
        x, info = cg_solve(A, b, np.diag(A).copy(), CG_MAXITER if solver == "cg" else DENSE_CG_MAXITER)
        if info == 0 or solver == "cg":
            if info != 0:
                warn_cg(nu)
            return x, "cg"
        return scipy.linalg.solve(A, b, assume_a="pos", overwrite_a=True, check_finite=False), "cg+dense"
    A = (sp.diags(sums.count_used[unknown]) - G[unknown][:, unknown]).tocsc()
    if solver == "direct" or (solver == "auto" and nu <= DIRECT_MAX):
        return direct_solve(A, b), "direct"
    x, info = cg_solve(A, b, A.diagonal(), CG_MAXITER)
    if info == 0 or solver == "cg":
        if info != 0:
            warn_cg(nu)
        return x, "cg"
    return direct_solve(A, b), "cg+direct"
