"""Sampling and the stratifying trees.

The sample is a *bottom-k sample by keyed row hash*: every row gets a pseudo-random
64-bit number that depends only on its content and ``random_state``
(:func:`pandas.util.hash_pandas_object` with a seed-derived hash key), and the sample
is the ``sample_size`` rows with the smallest numbers.  Each partition keeps its own
bottom k, a tree of combines keeps the overall bottom k.  The result is a uniform
sample without replacement that is the same however the data is partitioned, and it
costs one pass over the needed columns with O(k) memory per task.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from .aggregate import StratSpec, map_reduce, row_hash
from . import histtree
from .histtree import HistTree, bin_columns
from .io import FeatureEncoder, as_float

__all__ = ["sample_map", "sample_combine", "sample_graph", "fit_tree", "fit_spec", "bin_sample", "BinnedSample",
           "TREE_METHODS", "DEFAULT_TREE_METHOD", "bin_edges", "DEFAULT_SAMPLE_SIZE", "DEFAULT_MAX_BINS"]

#: rows used to fit each stratifying tree (all rows when the data has fewer)
DEFAULT_SAMPLE_SIZE = 200_000
#: a numeric feature with more distinct values than this (in the sample) is binned
DEFAULT_MAX_BINS = 1000

_HASH = "__daskpd_hash__"


def sample_map(df: pd.DataFrame, k: int, random_state: int) -> pd.DataFrame:
    h = row_hash(df, random_state, salt=0)
    if len(df) > k:
        keep = np.argpartition(h, k - 1)[:k]
        keep.sort()
        df, h = df.iloc[keep], h[keep]
    out = df.reset_index(drop=True)
    out[_HASH] = h
    return out


def sample_combine(parts: Sequence[pd.DataFrame], k: int) -> pd.DataFrame:
    df = pd.concat(list(parts), ignore_index=True)
    if len(df) > k:
        keep = np.argpartition(df[_HASH].to_numpy(), k - 1)[:k]
        keep.sort()
        df = df.iloc[keep].reset_index(drop=True)
    return df


def _finish(df: pd.DataFrame) -> pd.DataFrame:
    # Order by hash (ties: identical rows, so their order is immaterial) so that the
    # sample and everything fitted on it do not depend on partitioning.
    df = df.sort_values(_HASH, kind="stable").drop(columns=_HASH).reset_index(drop=True)
    return df


def sample_graph(ddf, sample_size: int, random_state: int):
    """Delayed bottom-k sample of ``ddf`` (a pandas DataFrame once computed)."""
    from dask import delayed

    k = int(sample_size)
    combine = functools.partial(sample_combine, k=k)
    return delayed(_finish)(map_reduce(ddf, sample_map, combine, k, random_state, name="daskpd-sample"))


#: how the stratifying trees are grown (see :func:`fit_tree`)
TREE_METHODS = ("hist", "exact")
DEFAULT_TREE_METHOD = "hist"


@dataclass
class BinnedSample:
    """The tree sample's stratifying columns binned once, shared by every feature's tree."""

    columns: list[str]
    B: np.ndarray  # rows with finite y x columns, uint16 bin codes (max_bins: missing)
    bins: list  # each column's daskpd.histtree.ColumnBins
    y: np.ndarray
    max_bins: int

    def subset(self, columns: Sequence[str]):
        pos = {c: i for i, c in enumerate(self.columns)}
        ix = [pos[c] for c in columns]
        return np.ascontiguousarray(self.B[:, ix]), [self.bins[i] for i in ix]


def tree_method_of(tree) -> str | None:
    """"hist", "exact" or None (no tree: a single stratum)."""
    if tree is None:
        return None
    return "hist" if isinstance(tree, HistTree) else "exact"


def bin_sample(sample: pd.DataFrame, target: str, columns: Sequence[str], encoder: FeatureEncoder) -> BinnedSample:
    """Bin the stratifying ``columns`` of the rows of ``sample`` whose target is finite."""
    y = as_float(sample[target])
    ok = np.isfinite(y)
    columns = list(columns)
    X = encoder.transform(sample.loc[ok], columns) if columns else np.empty((int(ok.sum()), 0))
    max_bins = histtree.MAX_TREE_BINS
    B, bins = bin_columns(np.asarray(X, dtype="float64"), max_bins)
    return BinnedSample(columns=columns, B=B, bins=bins, y=y[ok], max_bins=max_bins)


def fit_tree(sample: pd.DataFrame, target: str, other: Sequence[str], encoder: FeatureEncoder,
             min_samples_leaf: int, random_state: int, max_features=1.0, tree_method: str = DEFAULT_TREE_METHOD,
             binned: BinnedSample | None = None):
    """Fit the stratifying tree of y on ``other`` (None if no columns or no rows).

    ``tree_method="hist"`` (default): a :class:`daskpd.histtree.HistTree` -- columns cut
    into at most 1023 bins on the sample (exact for columns with <= 1023 distinct values),
    grown to full size; ``binned`` (from :func:`bin_sample`) avoids re-binning per tree.
    ``"exact"``: scikit-learn's ``DecisionTreeRegressor`` (exact thresholds, as stratx;
    ~4x slower).  Both are grown until leaves hold ``min_samples_leaf`` rows.
    """
    other = list(other)
    if not other:
        return None
    if tree_method == "hist":
        if binned is None:
            binned = bin_sample(sample, target, other, encoder)
        if len(binned.y) == 0:
            return None
        B, bins = binned.subset(other)
        return HistTree(min_samples_leaf=min_samples_leaf, max_bins=binned.max_bins).fit_binned(B, bins, binned.y)
    from sklearn.tree import DecisionTreeRegressor

    y = as_float(sample[target])
    ok = np.isfinite(y)
    X = encoder.transform(sample.loc[ok], other)
    if len(X) == 0:
        return None
    tree = DecisionTreeRegressor(min_samples_leaf=min_samples_leaf, max_features=max_features,
                                 random_state=random_state)
    tree.fit(X.astype("float32"), y[ok])
    return tree


def fit_spec(sample, target, feature, kind, other, encoder, min_samples_leaf, random_state,
             max_bins=None, nan_as_level=False, tree_method=DEFAULT_TREE_METHOD, binned=None) -> StratSpec:
    """Everything the partition kernel needs for ``feature``; runs on a worker."""
    tree = fit_tree(sample, target, other, encoder, min_samples_leaf, random_state, tree_method=tree_method,
                    binned=binned)
    edges = None
    if kind == "numeric" and max_bins is not None:
        edges = bin_edges(as_float(sample[feature]), max_bins)
    return StratSpec(feature=feature, kind=kind, other=list(other), tree=tree, edges=edges,
                     nan_as_level=nan_as_level)


def bin_edges(x: np.ndarray, max_bins: int) -> np.ndarray | None:
    """Bin edges from the sample, or None when x has <= max_bins distinct values.

    Half of the edges are quantiles (resolution where the rows are), half are equally
    spaced between the sample's min and max (resolution in the tails, so the curve
    reaches the extremes instead of stopping at the mean x of a wide end bin).  Edges are
    distinct; the outer edges are -inf/+inf so that values beyond the sample's range fall
    in the first/last bin.  Each bin is placed at the mean x of its rows.
    """
    x = x[np.isfinite(x)]
    if len(x) == 0:
        return None
    if len(np.unique(x)) <= max_bins:
        return None
    n_quantile = max_bins // 2
    qs = np.quantile(x, np.linspace(0, 1, n_quantile + 1)[1:-1], method="linear")
    us = np.linspace(x.min(), x.max(), max_bins - n_quantile + 1)[1:-1]
    inner = np.unique(np.concatenate([qs, us]))
    return np.concatenate([[-np.inf], inner, [np.inf]])
