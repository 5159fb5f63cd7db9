"""The map/reduce core: pure pandas/numpy partition kernels and their combine.

``strat_map(partition, plan)`` turns one partition into, for every requested feature,
per-(leaf, x-key) sums ``[n, sum_y]`` (plus ``[w, sum_wy]`` per bootstrap trial) and a few
row counters.  A binned numeric feature also sums x in every set (``[n, sum_y, sum_x]``:
the finalize places each leaf's bin at its own mean x); for an exact-valued x the key is
x itself and for a category x has no value, so those tables carry no x column (a third
less memory and traffic in the scan, measured in docs/importances.md).
``strat_combine(list)`` merges such partial aggregates.  Both are plain functions on
pandas/numpy objects; :func:`map_reduce` wires them into one dask graph (one task per
partition, then a tree of combines), and the in-memory reference path calls the very
same functions.

Sums are of float64 in a fixed order (rows in partition order, partitions in a fixed
tree), so a given partitioning gives bit-identical results on every scheduler; two
different partitionings agree to floating-point reassociation (~1e-15 relative).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from .histtree import HistTree
from .io import FeatureEncoder, as_float

__all__ = [
    "GroupSums",
    "group_sums",
    "combine_group_sums",
    "StratSpec",
    "StratPlan",
    "FeatureAgg",
    "strat_map",
    "strat_combine",
    "map_reduce",
    "bootstrap_weights",
]

# columns of GroupSums.values within one statistics set (set 0: plain; set t: trial t's weights)
N, SUM_Y, SUM_X = 0, 1, 2


@dataclass
class GroupSums:
    """Sums of ``values`` per distinct (leaf, key), sorted by leaf then key."""

    leaf: np.ndarray  # int64
    key: np.ndarray  # float64 (x values or bin numbers) or object (categories)
    values: np.ndarray  # float64, shape (len(leaf), n_stats)

    def __len__(self) -> int:
        return len(self.leaf)

    @property
    def nbytes(self) -> int:
        return int(self.leaf.nbytes + self.values.nbytes + getattr(self.key, "nbytes", 0))


def group_sums(leaf: np.ndarray, key, values: np.ndarray, *, sorted_runs: bool = False) -> GroupSums:
    """Group rows by (leaf, key) and sum ``values`` (2-D) per group.

    ``key`` may be float (NaN never reaches here for numeric features), int, or object
    (category labels).  The output is sorted by leaf, then key (keys sorted with
    pandas' ordering; a NaN key, if any, sorts last).  ``sorted_runs``: the rows are a
    concatenation of runs each already sorted that way (merging partial aggregates), so
    a stable sort merges the runs instead of sorting from scratch (3x faster for two
    runs); the groups and their sums are the same either way.
    """
    leaf = np.asarray(leaf, dtype="int64")
    values = np.asarray(values, dtype="float64")
    if values.ndim == 1:
        values = values[:, None]
    if len(leaf) == 0:
        return GroupSums(leaf, np.asarray(key)[:0], values[:0])
    codes, uniques = pd.factorize(key, sort=True, use_na_sentinel=False)
    k = max(1, len(uniques))
    combined = leaf * k + codes
    if sorted_runs:
        order = np.argsort(combined, kind="stable")
        srt = combined[order]
        first = np.empty(len(srt), dtype=bool)
        first[0] = True
        np.not_equal(srt[1:], srt[:-1], out=first[1:])
        uniq = srt[first]
        inverse = np.empty(len(srt), dtype="int64")
        inverse[order] = np.cumsum(first) - 1
    else:
        uniq, inverse = np.unique(combined, return_inverse=True)
    out = np.empty((len(uniq), values.shape[1]), dtype="float64")
    for j in range(values.shape[1]):
        out[:, j] = np.bincount(inverse, weights=values[:, j], minlength=len(uniq))
    uniques = np.asarray(uniques)
    return GroupSums(uniq // k, uniques[uniq % k], out)


def combine_group_sums(parts: Sequence[GroupSums]) -> GroupSums:
    parts = [p for p in parts if p is not None]
    if len(parts) == 1:
        return parts[0]
    nonempty = [p for p in parts if len(p)] or parts[:1]
    leaf = np.concatenate([p.leaf for p in nonempty])
    key = _concat_keys([p.key for p in nonempty])
    values = np.concatenate([p.values for p in nonempty], axis=0)
    return group_sums(leaf, key, values, sorted_runs=True)


def _concat_keys(keys):
    if len({k.dtype for k in keys}) == 1:  # e.g. int64 category codes stay int64 (exact, fast)
        return np.concatenate(keys)
    if all(k.dtype.kind in "fiub" for k in keys):
        return np.concatenate([k.astype("float64", copy=False) for k in keys])
    return np.concatenate([k.astype(object) for k in keys])


# ---------------------------------------------------------------------------------
# the StratPD / CatStratPD partition kernel


@dataclass
class StratSpec:
    """What the kernel needs for one feature: its stratifying tree and its keys."""

    feature: str
    kind: str  # "numeric" | "categorical"
    other: list[str]  # the tree's input columns, in order
    tree: object | None  # fitted HistTree or DecisionTreeRegressor, or None (a single stratum)
    edges: np.ndarray | None = None  # bin edges for a binned numeric feature
    nan_as_level: bool = False  # categorical: missing values form their own level

    def leaves(self, X: np.ndarray, columns=None) -> np.ndarray:
        """Leaf of every row of X (``columns``: positions of the tree's inputs in X; default all)."""
        if self.tree is None or (X.shape[1] if columns is None else len(columns)) == 0:
            return np.zeros(X.shape[0], dtype="int64")
        if isinstance(self.tree, HistTree):  # thresholds on float64 values; reads the columns in place
            return self.tree.apply(X, columns)
        if columns is not None:
            X = X[:, columns]
        return self.tree.apply(X.astype("float32")).astype("int64")

    def keys(self, x: np.ndarray) -> np.ndarray:
        """Row keys: the x value, or the bin number when binned."""
        if self.edges is None:
            return x
        b = np.searchsorted(self.edges, x, side="right") - 1
        return np.clip(b, 0, len(self.edges) - 2).astype("float64")


@dataclass
class StratPlan:
    target: str
    specs: list[StratSpec]
    encoder: FeatureEncoder
    n_trials: int = 0  # bootstrap trials riding the scan (0: none)
    random_state: int = 0
    weight_columns: list[str] = field(default_factory=list)  # hashed for the weights
    trial_fraction: float | None = None  # None: Poisson(1) bootstrap; f: Bernoulli(f) subsample (0/1 weights)

    @property
    def columns(self) -> list[str]:
        cols = [self.target]
        for s in self.specs:
            cols.append(s.feature)
            cols.extend(s.other)
        return list(dict.fromkeys(cols))


@dataclass
class FeatureAgg:
    """Partial (or complete) aggregate of one feature."""

    sums: GroupSums
    n_rows: int = 0  # rows seen
    n_missing_x: int = 0  # rows dropped: x missing (or +-inf)
    n_bad_y: int = 0  # rows dropped: y missing or +-inf (x present)
    stats_per_set: int = 3  # columns per statistics set: [n, sum_y] or [n, sum_y, sum_x]

    @property
    def n_sets(self) -> int:
        """Statistics sets in ``sums.values``: 1 (plain) + the bootstrap trials."""
        v = self.sums.values
        return v.shape[1] // self.stats_per_set if v.ndim == 2 else 0

    def column(self, stat: int, stats_set: int = 0) -> np.ndarray:
        """One statistic (N, SUM_Y or SUM_X) of one statistics set, per group."""
        if stat >= self.stats_per_set:
            raise ValueError(f"this aggregate has {self.stats_per_set} statistics per set; no column {stat}")
        return self.sums.values[:, self.stats_per_set * stats_set + stat]


#: P(K <= k) for K ~ Poisson(1), k = 0..24 (scipy.stats is not imported for this: ~0.5 s)
_POISSON1_CDF = np.minimum(np.cumsum([np.exp(-1.0) / math.factorial(k) for k in range(25)]), 1.0)


def bootstrap_weights(df: pd.DataFrame, columns: Sequence[str], n_trials: int, random_state: int,
                      fraction: float | None = None) -> np.ndarray:
    """Poisson(1) bootstrap weights, shape (len(df), n_trials).

    With ``fraction``, 0/1 subsampling weights instead: a row is in trial t's subsample
    with probability ``fraction`` (same keyed hash, so also partition-invariant).

    Each row's weight is a function of its content and the seed only (a keyed hash of
    the row), so the weights do not depend on how the data is partitioned.
    """
    cdf = _POISSON1_CDF
    out = np.empty((len(df), n_trials), dtype="float64")
    content = pd.util.hash_pandas_object(df[list(columns)], index=False).to_numpy()  # hashed once
    for t in range(n_trials):
        h = keyed_hash(content, random_state, salt=t + 1)  # == row_hash(df[columns], random_state, t + 1)
        u = (h >> np.uint64(11)).astype("float64") * (1.0 / 9007199254740992.0)
        out[:, t] = (u < fraction) if fraction is not None else np.searchsorted(cdf, u, side="right")
    return out


def _mix64(z: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a bijective scramble of uint64 values."""
    z = z.astype("uint64", copy=True)
    with np.errstate(over="ignore"):
        z ^= z >> np.uint64(30)
        z *= np.uint64(0xBF58476D1CE4E5B9)
        z ^= z >> np.uint64(27)
        z *= np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    return z


def row_hash(df: pd.DataFrame, random_state: int, salt: int = 0) -> np.ndarray:
    """A pseudo-random uint64 per row that depends only on the row's content and the seed.

    pandas' row hash ignores its ``hash_key`` for numeric columns, so the seed is mixed
    in here: ``mix64(hash(row) + mix64(seed, salt))``.
    """
    return keyed_hash(pd.util.hash_pandas_object(df, index=False).to_numpy(), random_state, salt)


def keyed_hash(h: np.ndarray, random_state: int, salt: int) -> np.ndarray:
    """``mix64(h + mix64(seed, salt))`` for content hashes ``h`` (uint64)."""
    seed = _mix64(np.array([(int(random_state) & 0xFFFFFFFF) << 20 | (int(salt) & 0xFFFFF)], dtype="uint64"))[0]
    with np.errstate(over="ignore"):
        return _mix64(h + seed)


def strat_map(df: pd.DataFrame, plan: StratPlan) -> dict[str, FeatureAgg]:
    """Partition -> {feature: FeatureAgg}: all features' aggregates in one pass."""
    y = as_float(df[plan.target])
    y_ok = np.isfinite(y)
    X = plan.encoder.transform(df)
    col_index = {c: j for j, c in enumerate(plan.encoder.columns)}
    W = None
    if plan.n_trials:
        W = bootstrap_weights(df, plan.weight_columns or plan.columns, plan.n_trials, plan.random_state,
                              getattr(plan, "trial_fraction", None))
    out = {}
    for spec in plan.specs:
        if spec.kind == "numeric":
            xall = as_float(df[spec.feature])
            x_ok = np.isfinite(xall)
        else:
            xall = df[spec.feature]
            x_ok = np.ones(len(df), bool) if spec.nan_as_level else xall.notna().to_numpy()
            if isinstance(xall.dtype, np.dtype) and xall.dtype.kind in "iufb":
                xall = xall.to_numpy()  # numeric codes: factorized natively, much faster than objects
            else:
                xall = xall.to_numpy(dtype=object) if xall.dtype != object else xall.to_numpy()
        ok = x_ok & y_ok
        sel = slice(None) if ok.all() else ok  # a view, not a copy, when every row counts
        leaf = spec.leaves(X[sel], [col_index[c] for c in spec.other])
        yy = y[sel]
        if spec.kind == "numeric":
            xx = xall[sel]
            key = spec.keys(xx)
        else:
            key = xall[sel]
        with_x = spec.kind == "numeric" and spec.edges is not None  # only binned x needs its sums
        stats = [np.ones_like(yy), yy] + ([xx] if with_x else [])
        if W is not None:
            w = W[sel]
            for t in range(plan.n_trials):
                stats += [w[:, t], w[:, t] * yy] + ([w[:, t] * xx] if with_x else [])
        out[spec.feature] = FeatureAgg(
            sums=group_sums(leaf, key, np.column_stack(stats)),
            n_rows=len(df),
            n_missing_x=int((~x_ok).sum()),
            n_bad_y=int((x_ok & ~y_ok).sum()),
            stats_per_set=3 if with_x else 2,
        )
    return out


def strat_combine(parts: Sequence[dict[str, FeatureAgg]]) -> dict[str, FeatureAgg]:
    parts = list(parts)
    out = {}
    for feat in parts[0]:
        aggs = [p[feat] for p in parts]
        out[feat] = FeatureAgg(
            sums=combine_group_sums([a.sums for a in aggs]),
            n_rows=sum(a.n_rows for a in aggs),
            n_missing_x=sum(a.n_missing_x for a in aggs),
            n_bad_y=sum(a.n_bad_y for a in aggs),
            stats_per_set=aggs[0].stats_per_set,
        )
    return out


# ---------------------------------------------------------------------------------
# wiring kernels into a dask graph


def map_reduce(ddf, map_fn: Callable, combine_fn: Callable, *args, split_every: int = 8, name: str = "daskpd"):
    """One lazy graph: ``map_fn(partition, *args)`` per partition, tree of ``combine_fn``.

    ``args`` are wrapped in a single delayed object each, so that (e.g.) fitted trees
    are shipped to the workers once, not once per task.  Returns a Delayed.
    """
    from dask import delayed
    from dask.delayed import Delayed

    parts = ddf.to_delayed(optimize_graph=True)
    dargs = [a if isinstance(a, Delayed) or type(a).__name__ == "Future" else delayed(a, pure=True, traverse=False)
             for a in args]
    level = [delayed(map_fn, pure=True)(p, *dargs, dask_key_name=f"{name}-map-{i}-{p.key[-1] if isinstance(p.key, tuple) else p.key}")
             for i, p in enumerate(parts)]
    depth = 0
    while len(level) > 1:
        depth += 1
        level = [delayed(combine_fn, pure=True)(level[i:i + split_every]) for i in range(0, len(level), split_every)]
    if not level:
        raise ValueError("the data has no partitions")
    return level[0]
