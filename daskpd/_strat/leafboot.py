"""The model-free curves' trials: a bootstrap of the stratification's leaves.

Given its stratification, a StratPD or CatStratPD curve is a function of per-leaf
statistics, and the leaves hold disjoint rows: they are the independent units of the
estimate.  Trial ``t`` draws every leaf a Poisson(1) weight ``w`` (a leaf drawn ``w``
times counts ``w`` times: its slope segments in StratPD's average at every position,
its terms in CatStratPD's least squares) and finishes the same sums again -- a cluster
bootstrap whose clusters are the leaves.  Unlike a row bootstrap it needs no row to
carry anything through the scan (a leaf's weight is a pure function of its number, the
seed and the feature, :func:`daskpd._engine.hashing.leaf_weights`), and it is right
where a row bootstrap is not: where a leaf holds one row at a position, resampling rows
leaves that row's noise out of the spread.  The band's few-cluster correction
(:func:`daskpd.results.curves.trial_band`) widens it where few leaves carry the curve.
"""
from __future__ import annotations

import numpy as np

from .._engine.hashing import leaf_weights, name_salt

__all__ = ["table_leaf_weights", "weights_of_leaves"]


def weights_of_leaves(feature: str, leaves: np.ndarray, n_trials: int, random_state: int) -> np.ndarray:
    """(len(leaves), n_trials) uint8: the trial weights of a feature's leaves."""
    return leaf_weights(np.asarray(leaves, np.int64), int(n_trials), int(random_state), name_salt(feature))


def table_leaf_weights(table, feature: str, n_trials: int, random_state: int) -> np.ndarray | None:
    """The trial weights of the leaves ``table.leaf[0] .. table.leaf[-1]`` of a grouped
    table (sorted by leaf), one row a leaf; None without trials or rows."""
    if not n_trials or not len(table):
        return None
    lo, hi = int(table.leaf[0]), int(table.leaf[-1])
    return weights_of_leaves(feature, np.arange(lo, hi + 1), n_trials, random_state)
