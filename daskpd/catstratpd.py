"""CatStratPD for categorical features: the driver-side finalize and the public function.

The distributed part is the shared pipeline (:func:`daskpd.pipeline.run_strat`): one
stratifying tree fitted on a sample, then ONE scan producing per-(leaf, category) sums
``[n, sum_y]`` (exact; merged by a tree of combines).  Everything below runs on the
driver on those sums, whose size is the number of distinct (leaf, category) pairs.

Merge (seed 000's "merge all leaves' delta vectors", done as one least-squares fit):

1. Within leaf ``l``, the mean y of category ``c`` is ``ybar_lc = sum_y / n``.  Leaves
   holding a single category carry no within-leaf comparison; their rows are counted as
   ignored (they still count towards the category's ``count`` and marginal mean).
2. Fit ``ybar_lc ~ a_l + b_c`` by weighted least squares (weights ``n_lc``).  ``a_l`` is
   the leaf's level, ``b_c`` the category effect.  Eliminating the ``a_l`` leaves the
   normal equations ``Lap b = r`` over categories only, with
   ``Lap = diag(n_c) - M' diag(1/N_l) M`` (``M``: the sparse leaves x categories count
   matrix; a weighted graph Laplacian) and ``r_c = sum_l (s_lc - n_lc * S_l / N_l)``.
   On noise-free additive data every leaf's deltas agree, the residual is zero and the
   fit is exact; with noise it is the count-weighted optimum (stratx instead merges the
   leaves one at a time into a running average, in leaf order).
3. Categories connected through shared leaves form a *group* (a connected component of
   the bipartite leaf-category graph).  Each group's system is singular by one constant:
   one category per group (its most frequent) is fixed at 0 and the rest is solved with
   a sparse direct factorisation (SuperLU) or, for large well-mixed groups, with
   Jacobi-preconditioned conjugate gradients (falling back to the direct solve when CG
   does not converge).  No dense categories x leaves (or categories x categories) matrix
   is ever formed.
4. Groups never seen together in a leaf are placed relative to each other by their
   marginal mean y (as seed 000 / stratx do): each group is shifted so that the
   count-weighted mean of its effects equals the mean y of its rows.  A category seen
   only in single-category leaves is a group of its own, placed at its marginal mean.
5. Finally the whole vector is shifted: by default so that the smallest effect is 0
   (like StratPD, which starts at 0, and stratx's reference category); with
   ``centered=True`` so that the count-weighted mean effect is 0.
"""
from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .aggregate import N, SUM_Y, FeatureAgg
from .io import DataError, load
from .pipeline import check_int, run_strat
from .results import ResultMixin
from .stratify import tree_method_of, DEFAULT_SAMPLE_SIZE, DEFAULT_TREE_METHOD

__all__ = ["catstratpd", "CatStratPDResult", "finalize_categorical", "finish_categorical", "run_categorical",
           "solve_effects", "place_groups"]

#: groups with at most this many unknowns are always solved directly (sparse LU)
DIRECT_MAX = 3000
#: CG iteration cap before falling back to the direct solve
CG_MAXITER = 3000
#: above this many sum_l k_l**2 (work of M' M), the Laplacian is applied matrix-free
EXPLICIT_BUDGET = 40_000_000


# ---------------------------------------------------------------------------------
# the merge


@dataclass
class Effects:
    """Output of :func:`solve_effects` (arrays indexed by category code 0..K-1)."""

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
    solver: str  # "none" | "direct" | "cg" | "cg+direct"


def solve_effects(leaf, cat, n, s, n_categories: int, *, solver: str = "auto") -> Effects:
    """Weighted least squares ``ybar_lc ~ a_l + b_c`` from per-(leaf, category) sums.

    ``leaf`` (any ints), ``cat`` (codes 0..n_categories-1), ``n`` (count or weight) and
    ``s`` (sum of y, or of weight*y) are aligned 1-D arrays, one entry per (leaf,
    category) pair.  ``solver``: ``"auto"`` | ``"direct"`` | ``"cg"``.
    """
    if solver not in ("auto", "direct", "cg"):
        raise DataError(f"parameter solver must be 'auto', 'direct' or 'cg'; got {solver!r}")
    import scipy.sparse as sp
    from scipy.sparse.csgraph import connected_components

    K = int(n_categories)
    leaf = np.asarray(leaf)
    cat = np.asarray(cat, dtype="int64")
    n = np.asarray(n, dtype="float64")
    s = np.asarray(s, dtype="float64")
    m = n > 0
    leaf, cat, n, s = leaf[m], cat[m], n[m], s[m]
    count = np.bincount(cat, weights=n, minlength=K)
    sum_y = np.bincount(cat, weights=s, minlength=K)
    li = _dense_ids(leaf)
    n_leaves = int(li.max()) + 1 if len(li) else 0
    k_l = np.bincount(li, minlength=n_leaves)
    multi = k_l[li] >= 2
    n_ignored = float(n[~multi].sum())

    # pairs in leaves with >= 2 categories, leaves renumbered 0..L2-1
    li2 = _dense_ids(li[multi])
    L2 = int(li2.max()) + 1 if len(li2) else 0
    c2, n2, s2 = cat[multi], n[multi], s[multi]
    N_l = np.bincount(li2, weights=n2, minlength=L2)
    S_l = np.bincount(li2, weights=s2, minlength=L2)
    count_used = np.bincount(c2, weights=n2, minlength=K)
    n_leaves_cat = np.bincount(c2, minlength=K)
    # normal equations over categories: Lap b = r
    r = np.bincount(c2, weights=s2 - n2 * (S_l / N_l)[li2], minlength=K)
    diag = count_used - np.bincount(c2, weights=n2 * n2 / N_l[li2], minlength=K)

    # Lap = diag(count_used) - G with G = M' diag(1/N) M, formed explicitly when cheap
    # enough (work: sum over leaves of k_l**2); else applied matrix-free
    work = float(np.sum(np.bincount(li2, minlength=L2).astype("float64") ** 2))
    G = None
    if work <= EXPLICIT_BUDGET or solver == "direct":
        G = _gram(li2, c2, n2, N_l, L2, K)
        graph = G
    else:  # groups from the bipartite (leaf, category) graph
        graph = sp.csr_matrix((np.ones(len(c2)), (li2, L2 + c2)), shape=(L2 + K, L2 + K))
    # groups: categories connected through shared leaves
    present = count > 0
    _, comp = connected_components(graph, directed=False)
    comp = comp[-K:] if K else comp[:0]
    group = _number_groups(comp, present, count)
    n_groups = int(group.max()) + 1 if present.any() else 0

    effect = np.zeros(K)
    solved = "none"
    active = count_used > 0
    if active.any():
        # ground one category per group: the one with the most rows in multi-category leaves
        order = np.lexsort((-count_used, group))  # by group, then by count_used descending
        order = order[active[order]]
        first = np.r_[True, group[order][1:] != group[order][:-1]]
        grounded = np.zeros(K, bool)
        grounded[order[first]] = True
        unknown = np.flatnonzero(active & ~grounded)
        if len(unknown):
            x, solved = _solve_laplacian(G, (li2, c2, n2, N_l, L2, K), count_used, diag, r, unknown, solver)
            effect[unknown] = x
    effect[~present] = np.nan
    return Effects(effect=effect, group=group, count=count, sum_y=sum_y, count_used=count_used,
                   n_leaves_cat=n_leaves_cat, n_ignored=n_ignored, n_leaves=n_leaves, n_leaves_used=L2,
                   n_groups=n_groups, solver=solved)


def _dense_ids(a):
    """0..m-1 numbering of the distinct values of ``a`` (run lengths when sorted)."""
    if len(a) == 0:
        return np.zeros(0, dtype="int64")
    if np.all(a[1:] >= a[:-1]):
        return np.cumsum(np.r_[False, a[1:] != a[:-1]]).astype("int64")
    return np.unique(a, return_inverse=True)[1].astype("int64")


def _gram(li2, c2, n2, N_l, L2, K):
    """G = M' diag(1/N) M (categories x categories, sparse CSR)."""
    import scipy.sparse as sp

    Mw = sp.csr_matrix((n2 / np.sqrt(N_l[li2]), (li2, c2)), shape=(L2, K))
    return (Mw.T @ Mw).tocsr()


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


def _grounded(G, count_used, unknown):
    import scipy.sparse as sp

    sub = G[unknown][:, unknown]
    return (sp.diags(count_used[unknown]) - sub).tocsc()


def _solve_laplacian(G, pairs, count_used, diag, r, unknown, solver):
    """Solve the grounded system Lap[u, u] x = r[u]; returns (x, solver used)."""
    import scipy.sparse as sp
    import scipy.sparse.linalg as sla

    nu = len(unknown)
    b = r[unknown]
    if solver == "direct" or (solver == "auto" and nu <= DIRECT_MAX):
        return _direct(_grounded(G if G is not None else _gram(*pairs), count_used, unknown), b), "direct"
    if G is not None:
        op = _grounded(G, count_used, unknown)
    else:
        li2, c2, n2, N_l, L2, K = pairs
        M = sp.csr_matrix((n2, (li2, c2)), shape=(L2, K))
        MT = M.T.tocsr()

        def matvec(v):
            full = np.zeros(K)
            full[unknown] = np.ravel(v)
            out = count_used * full - MT @ ((M @ full) / N_l)
            return out[unknown]

        op = sla.LinearOperator((nu, nu), matvec=matvec, dtype="float64")
    d = diag[unknown]
    pre = sla.LinearOperator((nu, nu), matvec=lambda v: np.ravel(v) / d, dtype="float64")
    x, info = sla.cg(op, b, rtol=1e-13, atol=0.0, maxiter=CG_MAXITER, M=pre)
    if info == 0 or solver == "cg":
        if info != 0:
            warnings.warn(f"CatStratPD: conjugate gradients did not converge in {CG_MAXITER} iterations "
                          f"({nu} unknown category effects); the effects are approximate. "
                          "Use solver='direct' or 'auto'.", RuntimeWarning, stacklevel=4)
        return x, "cg"
    A = op if G is not None else _grounded(_gram(*pairs), count_used, unknown)
    return _direct(A, b), "cg+direct"


def _direct(A, b):
    import scipy.sparse.linalg as sla

    lu = sla.splu(A, permc_spec="MMD_AT_PLUS_A")
    x = lu.solve(b)
    x = x + lu.solve(b - A @ x)  # one step of iterative refinement
    return x


def place_groups(effect, group, count, sum_y):
    """Shift each group so that its count-weighted mean effect is its rows' mean y."""
    ok = group >= 0
    out = np.full(len(effect), np.nan)
    if not ok.any():
        return out
    g = group[ok]
    G = int(g.max()) + 1
    cnt = np.bincount(g, weights=count[ok], minlength=G)
    num = np.bincount(g, weights=sum_y[ok] - count[ok] * effect[ok], minlength=G)
    out[ok] = effect[ok] + (num / cnt)[g]
    return out


def _shift(pd_, count, centered):
    ok = np.isfinite(pd_)
    if not ok.any():
        return pd_
    if centered:
        return pd_ - np.sum(pd_[ok] * count[ok]) / np.sum(count[ok])
    return pd_ - np.min(pd_[ok])


# ---------------------------------------------------------------------------------
# the result


@dataclass(repr=False)
class CatStratPDResult(ResultMixin):
    """CatStratPD partial dependence of ``target`` on categorical ``feature``.

    Arrays are indexed like ``categories`` (the labels as given: strings, ints, or a
    pandas Categorical's values; sorted, or in the Categorical's category order; a
    missing-value level, with ``nan_as_level=True``, comes last):

    ``pd``             effect of the category on the target; min 0 (default) or
                       count-weighted mean 0 (``centered=True``)
    ``count``          rows of the category (x and y present), all leaves
    ``count_used``     of those, rows in leaves holding >= 2 categories
    ``n_leaves_cat``   leaves holding the category and at least one other
    ``group``          disjoint group (0 = most rows): categories connected through
                       shared leaves; groups are placed by their marginal mean y
    ``marginal_mean``  mean y of the category's rows (no stratification)
    """

    feature: str
    target: str
    categories: pd.Index
    pd: np.ndarray
    count: np.ndarray
    count_used: np.ndarray
    n_leaves_cat: np.ndarray
    group: np.ndarray
    marginal_mean: np.ndarray
    n_rows: int  # rows read
    n_used: int  # rows in leaves with >= 2 categories
    n_ignored: int  # rows in single-category leaves
    n_missing_x: int  # rows dropped: category missing (unless nan_as_level)
    n_bad_y: int  # rows dropped: y missing or +-inf
    n_leaves: int
    n_leaves_used: int
    n_groups: int
    centered: bool = False
    params: dict = field(default_factory=dict)
    trials_pd: np.ndarray | None = None  # (n_trials, n_categories) when bootstrap trials were run

    kind = "categorical"

    def __repr__(self) -> str:
        return (f"CatStratPDResult(feature={self.feature!r}, target={self.target!r}, "
                f"categories={len(self.categories)}, groups={self.n_groups}, leaves={self.n_leaves}, "
                f"rows={self.n_rows}, ignored={self.n_ignored}, centered={self.centered})")

    def __len__(self) -> int:
        return len(self.categories)

    def to_series(self) -> pd.Series:
        """``pd`` indexed by category label."""
        return pd.Series(self.pd, index=self.categories, name=f"pd_{self.feature}")

    def to_frame(self) -> pd.DataFrame:
        df = pd.DataFrame({
            "feature": self.feature,
            "category": self.categories.array,
            "pd": self.pd,
            "count": self.count,
            "count_used": self.count_used,
            "leaves": self.n_leaves_cat.astype("int64"),
            "group": self.group.astype("int64"),
            "marginal_mean": self.marginal_mean,
        })
        if self.trials_pd is not None and len(self.trials_pd) > 1:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                df["pd_std"] = np.nanstd(self.trials_pd, axis=0, ddof=1)
        return df

    def to_parquet(self, path, **kwargs) -> str:
        try:
            return super().to_parquet(path, **kwargs)
        except (TypeError, ValueError) as exc:  # pyarrow cannot store mixed-type labels
            if not self.categories.dtype == object:
                raise
            raise DataError(f"cannot write the category labels of {self.feature!r} to parquet ({exc}); "
                            "they mix types -- cast the column to str before calling catstratpd") from exc

    def metadata(self) -> dict:
        return {
            "method": "catstratpd", "feature": self.feature, "target": self.target, "n_rows": self.n_rows,
            "n_used": self.n_used, "n_ignored": self.n_ignored, "n_missing_x": self.n_missing_x,
            "n_bad_y": self.n_bad_y, "n_leaves": self.n_leaves, "n_leaves_used": self.n_leaves_used,
            "n_groups": self.n_groups, "n_categories": len(self.categories), "centered": self.centered,
            "params": self.params,
        }

    def summary(self) -> str:
        ok = np.isfinite(self.pd)
        lo, hi = (np.min(self.pd[ok]), np.max(self.pd[ok])) if ok.any() else (np.nan, np.nan)
        big = int(np.sum(self.group == 0)) if self.n_groups else 0
        return (f"{self.feature}: {len(self.categories):,} categories in {self.n_groups:,} disjoint group(s) "
                f"(largest: {big:,} categories), pd range [{lo:.4g}, {hi:.4g}]"
                f"{' (mean-centred)' if self.centered else ''}, {self.n_leaves:,} leaves "
                f"({self.n_leaves_used:,} with >= 2 categories), rows used {self.n_used:,} of {self.n_rows:,} "
                f"(ignored {self.n_ignored:,} in single-category leaves, dropped {self.n_missing_x:,} missing "
                f"{self.feature}, {self.n_bad_y:,} missing/inf {self.target})")

    def plot(self, ax=None, **kwargs):
        """Sorted effects; bars with counts for few categories, a strip for many.

        See :func:`daskpd.plotting.catstrat.plot_catstratpd` for the options
        (``kind='auto'|'bar'|'strip'``, ``top_k``, ``label_k``, ...).
        """
        from .plotting.catstrat import plot_catstratpd

        return plot_catstratpd(self, ax=ax, **kwargs)


# ---------------------------------------------------------------------------------
# finalize


def _labels(keys, dtype):
    """Category codes for the (leaf, key) rows and the labels, ordered, with ``dtype``."""
    # missing labels (NaN, None, pd.NA: one level with nan_as_level) are coded last, after
    # sorting the others (sorting with pd.NA inside would fail)
    codes, uniques = pd.factorize(keys, sort=True)
    codes = np.asarray(codes, dtype="int64")
    uniques = np.asarray(uniques, dtype=object)
    if len(codes) and codes.min() < 0:
        codes = np.where(codes < 0, len(uniques), codes)
        uniques = np.append(uniques, np.array([np.nan], dtype=object))
    cat_dtype = isinstance(dtype, pd.CategoricalDtype) and _known_categories(dtype)
    if cat_dtype:
        pos = dtype.categories.get_indexer(pd.Index(uniques, dtype=object))
        pos = np.where(pos < 0, len(dtype.categories), pos)  # NaN (and strays) last
        order = np.argsort(pos, kind="stable")
        inv = np.empty_like(order)
        inv[order] = np.arange(len(order))
        codes, uniques = inv[codes], uniques[order]
        index = pd.CategoricalIndex(uniques, dtype=dtype)
    elif isinstance(dtype, pd.CategoricalDtype):
        index = pd.CategoricalIndex(uniques)
    else:
        index = _index_with_dtype(uniques, dtype)
    return codes, index


def _known_categories(dtype) -> bool:
    return "__UNKNOWN_CATEGORIES__" not in set(map(str, dtype.categories))


def _index_with_dtype(uniques, dtype):
    if dtype is not None:
        try:
            return pd.Index(pd.array(list(uniques), dtype=dtype))
        except (TypeError, ValueError):
            pass
    return pd.Index(uniques, dtype=object) if len(uniques) else pd.Index([], dtype=object)


def finalize_categorical(agg: FeatureAgg, *, feature: str, target: str, params: dict | None = None,
                         stats_set: int = 0, centered: bool = False, dtype=None, solver: str = "auto",
                         with_trials: bool = True, warn: bool = True) -> CatStratPDResult:
    """Per-(leaf, category) sums -> CatStratPDResult.

    ``stats_set=t`` computes from statistics set ``t`` (0: the plain counts and sums;
    ``t >= 1``: bootstrap trial ``t``'s weights).  With ``stats_set=0`` and trial
    columns present (and ``with_trials``), ``trials_pd`` holds one effect vector per
    trial (NaN for categories a trial does not see), shifted the same way.
    ``dtype``: the feature's pandas dtype, to return labels of the same type.
    ``warn=False``: no warning when no leaf holds two categories (the caller emits it
    where the user sees it; :func:`driver_side`).
    """
    g = agg.sums
    n_sets = agg.n_sets
    stats_set = check_int("stats_set", stats_set, 0)
    if stats_set >= max(n_sets, 1):
        raise DataError(f"parameter stats_set={stats_set} but the aggregate has {n_sets} statistic set(s)")
    codes, index = _labels(g.key, dtype)
    K = len(index)

    def one(t):
        e = solve_effects(g.leaf, codes, agg.column(N, t), agg.column(SUM_Y, t), K, solver=solver)
        pd_ = place_groups(e.effect, e.group, e.count, e.sum_y)
        return _shift(pd_, e.count, centered), e

    pd_, e = one(stats_set)
    trials = None
    if with_trials and stats_set == 0 and n_sets > 1:
        trials = np.vstack([one(t)[0] for t in range(1, n_sets)])
    count = e.count
    if np.all(count == np.round(count)):
        count = count.astype("int64")
        count_used = e.count_used.astype("int64")
    else:
        count_used = e.count_used
    with np.errstate(invalid="ignore", divide="ignore"):
        marginal = np.where(e.count > 0, e.sum_y / np.where(e.count > 0, e.count, 1), np.nan)
    n_used = float(e.count_used.sum())
    p = dict(params or {})
    p["solver"] = e.solver
    res = CatStratPDResult(
        feature=feature, target=target, categories=index, pd=pd_, count=count, count_used=count_used,
        n_leaves_cat=e.n_leaves_cat, group=e.group, marginal_mean=marginal, n_rows=int(agg.n_rows),
        n_used=int(round(n_used)), n_ignored=int(round(e.n_ignored)), n_missing_x=int(agg.n_missing_x),
        n_bad_y=int(agg.n_bad_y), n_leaves=e.n_leaves, n_leaves_used=e.n_leaves_used, n_groups=e.n_groups,
        centered=bool(centered), params=p, trials_pd=trials)
    message = no_shared_leaf_message(res) if warn else None
    if message:
        warnings.warn(message, UserWarning, stacklevel=3)
    return res


# ---------------------------------------------------------------------------------
# the public function


def _feature_dtype(data, feature, storage_options=None, filters=None):
    """The feature's dtype without reading data (None if the column is absent)."""
    import dask.dataframe as dd

    if isinstance(data, (pd.DataFrame, dd.DataFrame)):
        cols = data.columns
    else:
        data = load(data, None, storage_options=storage_options, filters=filters)
        cols = data.columns
    if feature not in [str(c) for c in cols]:
        return None
    return data.dtypes[feature]


def _check_bool(name, value):
    if not isinstance(value, (bool, np.bool_)):
        raise DataError(f"parameter {name} must be True or False; got {value!r}")
    return bool(value)


def no_shared_leaf_message(res: CatStratPDResult) -> str | None:
    """The warning when no leaf compares two categories (None when one does)."""
    if not len(res.categories) or res.n_leaves_used > 0:
        return None
    return (f"CatStratPD for feature {res.feature!r}: no leaf of the stratifying tree holds two or more "
            "categories, so every category is its own group, placed at its marginal mean y: the other columns "
            "separate the categories completely. Raise min_samples_leaf, stratify on fewer columns "
            "(features=...), or give more rows.")


def driver_side(res: CatStratPDResult) -> CatStratPDResult:
    """The warning of a result finished on a worker, emitted where the user sees it."""
    message = no_shared_leaf_message(res)
    if message:
        warnings.warn(message, UserWarning, stacklevel=3)
    return res


def check_category_keys(agg: FeatureAgg, feature: str, dtype) -> None:
    """A float feature's categories must be integral (codes), else it is a numeric feature."""
    if dtype is not None and pd.api.types.is_float_dtype(dtype):
        keys = np.asarray(pd.unique(agg.sums.key), dtype="float64")
        bad = keys[np.isfinite(keys) & (keys != np.round(keys))]
        if len(bad):
            raise DataError(
                f"feature {feature!r} is a float column with non-integer values (e.g. {bad[0]!r}); CatStratPD "
                "treats every distinct value as a category. Use daskpd.stratpd for a numeric feature, or cast "
                "the column to int/str if its values really are category codes.")


def _checked_finish(run, feature: str, *, dtype, centered: bool):
    check_category_keys(run.aggs[feature], feature, dtype)
    return finish_categorical(run, feature, dtype=dtype, centered=centered, warn=False)


def run_categorical(data, target: str, feature: str, *, features=None, min_samples_leaf: int = 5,
                    sample_size: int = DEFAULT_SAMPLE_SIZE, random_state: int = 0, n_trials: int = 0,
                    nan_as_level: bool = False, tree_method: str = DEFAULT_TREE_METHOD, progress=None,
                    storage_options=None, filters=None, finish: bool = False, centered: bool = False):
    """Validate and run the shared pipeline for one categorical feature; returns (run, dtype).

    ``finish=True``: the result (with ``centered``) is finished next to the merged
    aggregate and returned as ``run.finished[feature]``, instead of the aggregate as
    ``run.aggs``.
    """
    if not isinstance(feature, str):
        raise DataError(f"feature must be a column name (str); got {feature!r}")
    if feature == target:
        raise DataError(f"feature {feature!r} is the target; partial dependence of a column on itself is meaningless")
    nan_as_level = _check_bool("nan_as_level", nan_as_level)
    dtype = _feature_dtype(data, feature, storage_options, filters)
    if dtype is not None and (pd.api.types.is_datetime64_any_dtype(dtype) or pd.api.types.is_timedelta64_dtype(dtype)):
        raise DataError(f"feature {feature!r} is a datetime ({dtype}); for CatStratPD convert it to labels first "
                        "(e.g. the year, or .dt.strftime), or use daskpd.stratpd on it as a number")
    finisher = functools.partial(_checked_finish, dtype=dtype, centered=centered) if finish else None
    run = run_strat(data, target, [feature], stratify_on=features, kinds={feature: "categorical"},
                    min_samples_leaf=min_samples_leaf, sample_size=sample_size, max_bins=None,
                    random_state=random_state, n_trials=n_trials, nan_as_level=nan_as_level,
                    tree_method=tree_method, progress=progress, storage_options=storage_options, filters=filters,
                    finish=finisher)
    if not finish:
        check_category_keys(run.aggs[feature], feature, dtype)
    return run, dtype


def finish_categorical(run, feature: str, *, dtype=None, centered: bool = False, solver: str = "auto",
                       warn: bool = True):
    spec = next(s for s in run.plan.specs if s.feature == feature)
    params = {
        "min_samples_leaf": spec.tree.min_samples_leaf if spec.tree is not None else None,
        "tree_method": tree_method_of(spec.tree),
        "tree_leaves": spec.tree.get_n_leaves() if spec.tree is not None else 1,
        "sample_rows": run.sample_rows,
        "stratified_on": spec.other,
        "random_state": run.plan.random_state,
        "n_trials": run.plan.n_trials,
        "nan_as_level": spec.nan_as_level,
    }
    return finalize_categorical(run.aggs[feature], feature=feature, target=run.plan.target, params=params,
                                centered=centered, dtype=dtype, solver=solver, warn=warn)


def catstratpd(
    data,
    target: str,
    feature: str,
    *,
    features=None,
    min_samples_leaf: int = 5,
    centered: bool = False,
    nan_as_level: bool = False,
    n_trials: int = 0,
    sample_size: int = DEFAULT_SAMPLE_SIZE,
    tree_method: str = DEFAULT_TREE_METHOD,
    random_state: int = 0,
    progress=None,
    storage_options: dict | None = None,
    filters=None,
) -> CatStratPDResult:
    """Model-free partial dependence of ``target`` on categorical ``feature`` (CatStratPD).

    Parameters
    ----------
    data : pandas DataFrame, dask DataFrame, or parquet path / glob / directory / URL
    target : str
        Numeric response column.
    feature : str
        The categorical column: strings, object, pandas Categorical, bool, or integer
        codes (any column given here is treated as categories; a float column must hold
        integral values, e.g. integer codes with missing values).
    features : list of str, optional
        Columns the stratifying tree may use (default: every column but target);
        ``feature`` itself is always excluded.
    min_samples_leaf : int, default 5
        Leaf size of the stratifying tree (fitted on the sample).
    centered : bool, default False
        False: the smallest effect is 0 (every effect is "how much more than the
        lowest category").  True: the count-weighted mean effect is 0.
    nan_as_level : bool, default False
        False: rows with a missing category are dropped (counted in ``n_missing_x``).
        True: missing is a level of its own (label NaN, listed last).
    n_trials : int, default 0
        Poisson bootstrap trials riding the same scan; ``trials_pd`` and the
        ``pd_std`` column of ``to_frame()`` then give the effects' spread.
    sample_size : int, default 200,000
        Rows (bottom-k by seeded row hash) used to fit the tree; all rows if fewer.
    tree_method : {"hist", "exact"}, default "hist"
        How the stratifying tree is grown.  "hist": daskpd's histogram tree (columns
        cut into at most 1023 bins on the sample -- exact for columns with at most 1023
        distinct values -- and grown to full size; about 4x faster to fit).  "exact":
        scikit-learn's ``DecisionTreeRegressor`` (exact thresholds, as stratx).
    random_state : int, default 0
        Seeds the sample, the tree and the bootstrap weights.
    progress : bool or None
        Show a progress bar (None: when stderr is a terminal).
    storage_options, filters
        Passed to ``dask.dataframe.read_parquet`` for path inputs.

    Returns
    -------
    CatStratPDResult
        ``to_frame()`` has columns ``feature, category, pd, count, count_used, leaves,
        group, marginal_mean`` (and ``pd_std`` with trials).
    """
    centered = _check_bool("centered", centered)
    run, dtype = run_categorical(data, target, feature, features=features, min_samples_leaf=min_samples_leaf,
                                 sample_size=sample_size, random_state=random_state, n_trials=n_trials,
                                 nan_as_level=nan_as_level, tree_method=tree_method, progress=progress,
                                 storage_options=storage_options, filters=filters, finish=True,
                                 centered=centered)
    return driver_side(run.finished[feature])
