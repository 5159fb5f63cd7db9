"""The stratifying trees: fitted on the tree sample, one per feature.

``tree_method="hist"`` (default): :class:`daskpd._strat.histtree.HistTree`, columns binned
on the sample (once per request, shared by every feature's tree): one bin per distinct
value up to 65,535 values (``TREE_BINS = "auto"``), so the tree is the exact one;
``"exact"``: scikit-learn's ``DecisionTreeRegressor``.  Both are grown until leaves hold
``min_samples_leaf`` rows.  :func:`bin_edges` cuts a continuous feature into bins.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from .._data.encode import FeatureEncoder, as_float
from . import histbins
from .histbins import bin_columns
from .histtree import HistTree, apply_routed

__all__ = ["fit_tree", "fit_honest", "HonestTrees", "bin_sample", "BinnedSample", "TREE_METHODS",
           "DEFAULT_TREE_METHOD", "bin_edges", "DEFAULT_SAMPLE_SIZE", "DEFAULT_MAX_BINS", "tree_method_of", "leaf_nodes"]

#: rows used to fit each stratifying tree (all rows when the data has fewer)
DEFAULT_SAMPLE_SIZE = 200_000
#: a numeric feature with more distinct values than this (in the sample) is binned
DEFAULT_MAX_BINS = 1000


#: how the stratifying trees are grown (see :func:`fit_tree`)
TREE_METHODS = ("hist", "exact")
#: bins per stratifying column of the histogram tree: "auto" (one per distinct value up to
#: histbins.MAX_TREE_BINS_LIMIT = 65,535, at least histbins.MAX_TREE_BINS) or an int (the
#: old fixed 1,023)
TREE_BINS = "auto"
DEFAULT_TREE_METHOD = "hist"


@dataclass
class BinnedSample:
    """The tree sample's stratifying columns binned once, shared by every feature's tree."""

    columns: list[str]
    B: np.ndarray  # rows with finite y x columns, uint16 bin codes (max_bins: missing)
    bins: list  # each column's histbins.ColumnBins
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
    if isinstance(tree, HonestTrees):
        return tree_method_of(tree.trees[0])
    return "hist" if isinstance(tree, HistTree) else "exact"


def leaf_nodes(tree) -> np.ndarray:
    """Whether each node of a tree (HistTree, scikit-learn's, or :class:`HonestTrees`:
    their nodes one after the other) is a leaf."""
    if isinstance(tree, HonestTrees):
        return np.concatenate([leaf_nodes(t) for t in tree.trees])
    if hasattr(tree, "feature_"):  # daskpd's HistTree
        return np.asarray(tree.feature_) < 0
    return np.asarray(tree.tree_.children_left) < 0


def _node_count(tree) -> int:
    return tree.node_count if isinstance(tree, HistTree) else int(tree.tree_.node_count)


class HonestTrees:
    """A feature's stratification fitted by 2-fold cross-fitting: ``trees[k]`` was fitted
    on the tree sample's rows of fold k (:func:`daskpd._engine.hashing.fold_of`), and a
    row of fold f is stratified by ``trees[1 - f]``, a tree that never saw it.  The
    nodes are numbered one tree after the other (tree 0's, then tree 1's)."""

    def __init__(self, trees):
        self.trees = tuple(trees)
        counts = [_node_count(t) for t in self.trees]
        self.offsets = np.cumsum([0, *counts])[:-1].astype(np.int64)
        self.node_count = int(sum(counts))

    def get_n_leaves(self) -> int:
        return int(leaf_nodes(self).sum())

    def apply(self, X, columns, leaf_map, fold) -> np.ndarray:
        """``leaf_map[node]`` of every row of X, row i through the tree of the other fold
        than ``fold[i]``."""
        fold = np.asarray(fold, dtype=np.uint8)
        if isinstance(self.trees[0], HistTree):
            X, columns = self.trees[0].check_columns(X, columns)
            metas = []
            for t, o in zip(self.trees, self.offsets):
                m = t.node_meta(columns)
                inner = (m >> np.int64(32)) >= 0
                metas.append(np.where(inner, m + 2 * o, m))  # children numbered in the joint array
            thr = np.concatenate([t.threshold_ for t in self.trees])
            roots = self.offsets[::-1].copy()  # fold 0 -> tree 1, fold 1 -> tree 0
            return apply_routed(X, thr, np.concatenate(metas), leaf_map, fold, roots)
        out = np.empty(len(X), leaf_map.dtype)
        Xc = np.asarray(X)[:, columns].astype("float32")
        for f in (0, 1):
            rows = np.flatnonzero(fold == f)
            if len(rows):
                t = 1 - f
                out[rows] = leaf_map[self.trees[t].apply(Xc[rows]) + self.offsets[t]]
        return out


def bin_sample(sample: pd.DataFrame, target: str, columns: Sequence[str], encoder: FeatureEncoder) -> BinnedSample:
    """Bin the stratifying ``columns`` of the rows of ``sample`` whose target is finite."""
    y = as_float(sample[target])
    ok = np.isfinite(y)
    columns = list(columns)
    X = encoder.transform(sample.loc[ok], columns) if columns else np.empty((int(ok.sum()), 0))
    X = np.asarray(X, dtype="float64")
    # one bin per distinct value whenever a column has at most 65,535 of them in the sample
    # (the tree is then scikit-learn's exact tree, so curves agree with stratx leaf for leaf);
    # 1,023 bins on california's median_income (12,928 values) moved rows between
    # leaves and the housing_median_age curve away from stratx's (correlation 0.92)
    if TREE_BINS == "auto":
        B, bins, max_bins = histbins.bin_columns_auto(X)
    else:
        max_bins = int(TREE_BINS)
        B, bins = bin_columns(X, max_bins)
    return BinnedSample(columns=columns, B=B, bins=bins, y=y[ok], max_bins=max_bins)


def fit_honest(sample: pd.DataFrame, folds: np.ndarray, target: str, other: Sequence[str], encoder: FeatureEncoder,
               min_samples_leaf: int, random_state: int, tree_method: str = DEFAULT_TREE_METHOD,
               binned: tuple | None = None):
    """:class:`HonestTrees`: one tree of y on ``other`` per fold of the sample's rows
    (``folds``: 0 or 1 per row of ``sample``); ``binned``: each fold's rows binned on
    their own (:func:`bin_sample`: a fold's tree is then scikit-learn's exact tree of
    that fold, thresholds between its own values); None if no columns, or a fold has no
    row."""
    if not list(other):
        return None
    trees = []
    for k in (0, 1):
        rows = np.asarray(folds) == k
        t = fit_tree(sample.loc[rows], target, other, encoder, min_samples_leaf, random_state,
                     tree_method=tree_method, binned=None if binned is None else binned[k])
        if t is None:
            return None
        trees.append(t)
    return HonestTrees(trees)


def fit_tree(sample: pd.DataFrame, target: str, other: Sequence[str], encoder: FeatureEncoder,
             min_samples_leaf: int, random_state: int, max_features=1.0, tree_method: str = DEFAULT_TREE_METHOD,
             binned: BinnedSample | None = None):
    """Fit the stratifying tree of y on ``other`` (None if no columns or no rows).

    ``tree_method="hist"`` (default): a :class:`daskpd._strat.histtree.HistTree` --
    columns binned on the sample (one bin per distinct value up to 65,535, so exact on
    such columns), grown to full size; ``binned`` (from :func:`bin_sample`) avoids
    re-binning per tree.  ``"exact"``: scikit-learn's ``DecisionTreeRegressor`` (exact
    thresholds, as the reference implementation).  Both are grown until leaves hold
    ``min_samples_leaf`` rows.
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
