"""CatStratPD's system from the buckets of leaves (:mod:`daskpd._strat.categorical_buckets`):
the buckets' summaries folded into the right-hand side, diagonal and groups
(:func:`fold_summaries`), solved directly from the explicit ``G`` (:func:`solve_explicit`)
or by Jacobi-preconditioned conjugate gradients whose products are a round of one task
per bucket (:func:`cg_sets`, :func:`solve_buckets`).  Sums are folded in virtual-bucket
order, so the result does not depend on how many buckets the reduction used.
"""
from __future__ import annotations

import numba
import numpy as np

from .._engine import scheduler
from .._engine.progress import reporting
from .._engine.sums import Table
from .._engine.tree_fold import fold_tree
from .categorical_gram import LeafSums, gram_link
from .categorical_gram_solve import solve_gram
from .categorical_products import bucket_products
from .categorical_solve import CG_MAXITER, Effects, ground, number_groups, uf_find, uf_flatten, uf_join
from .virtual import N_VIRTUAL

__all__ = ["fold_summaries", "solve_explicit", "cg_sets", "fold_products", "solve_buckets"]


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


def solve_buckets(refs: list, setups: list, K: int, *, local: bool = False) -> list:
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
        with reporting(False):  # a CG round: too short and too many to show
            (GP,) = scheduler.compute(delayed(fold_products, pure=True)(tasks, K, active_))
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
            with reporting(False):
                (state,) = scheduler.compute(state)
        e = solve_explicit(state, su, K)
        out.append(_effects(su, e.effect, "cg+" + e.solver))
    return out
