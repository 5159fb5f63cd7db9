"""What every model-free estimator of a numeric feature shares: its positions (bins, or
the exact values up to :data:`NUMERIC_VALUES_CAP`) and how the scan's map reads them.

StratPD (:mod:`daskpd._strat.stratpd_estimator`) and the binned mean of y
(:mod:`daskpd._strat.binned_mean_estimator`) derive from :class:`NumericPositions`, so the
two read a feature the same way, run on the same feature code it in the same positions,
and are compared new against old on the same few positions (:func:`equal_mass_positions`).
"""
from __future__ import annotations

import numpy as np

from .._data.encode import KeyCoder, as_float
from .._errors import DataError
from .estimator import ModelFreeEstimator
from .trees import bin_edges

__all__ = ["NumericPositions", "NUMERIC_VALUES_CAP", "equal_mass_positions"]

#: a numeric feature keeps its exact values only if it has at most this many in the data
NUMERIC_VALUES_CAP = 1 << 16


def equal_mass_positions(coder: KeyCoder, new_counts: np.ndarray, max_positions: int):
    """``(coder, mapping, xval)``: a numeric feature's positions merged into at most
    ``max_positions`` bins of about equal new-row mass (its exact values kept when it
    has no more), each code's bin (monotone) and each code's x (exact values; None
    when binned)."""
    K = coder.n_keys
    xval = None if coder.binned else np.asarray(coder.values, dtype="float64")
    if K <= max_positions:
        return coder, np.arange(K, dtype=np.int64), xval
    c = np.cumsum(new_counts)
    total = c[-1] if len(c) else 0.0
    if total <= 0:
        cut = np.linspace(0, K, max_positions + 1).round().astype(np.int64)[1:-1]
    else:  # boundaries at equal shares of the new rows
        cut = np.searchsorted(c, total * np.arange(1, max_positions) / max_positions, side="left") + 1
    cut = np.unique(np.clip(cut, 1, K - 1))
    mapping = np.searchsorted(cut, np.arange(K), side="right").astype(np.int64)
    if coder.binned:
        edges = np.asarray(coder.edges, dtype="float64")
        new_edges = np.r_[edges[0], edges[cut], edges[-1]]
    else:
        new_edges = np.r_[-np.inf, (xval[cut - 1] + xval[cut]) / 2, np.inf]
    return KeyCoder("numeric", edges=new_edges), mapping, xval


class NumericPositions(ModelFreeEstimator):
    """The pass-1 and map methods of an estimator of a numeric feature: x as float64,
    its bin (``max_bins`` equal-mass bins of the tree sample) or its exact value."""

    column_kind = "numeric"
    values_cap = NUMERIC_VALUES_CAP

    def sample_values(self, col):
        vals = as_float(col)
        return vals, np.isfinite(vals)

    def coder(self, feature, sample, max_bins, nan_as_level, dtype) -> KeyCoder:
        distinct = sample.distinct.get(feature)
        edges = bin_edges(as_float(sample.frame[feature]), max_bins) if max_bins is not None else None
        if edges is not None:
            return KeyCoder("numeric", edges=edges)
        if distinct is None:
            raise DataError(f"feature {feature!r} has at most max_bins={max_bins} distinct values in the tree "
                            f"sample but more than {NUMERIC_VALUES_CAP:,} in the data; raise sample_size or lower "
                            "max_bins so that it is binned")
        vals = np.asarray(distinct, dtype="float64")
        return KeyCoder("numeric", values=vals[np.isfinite(vals)])

    def read_x(self, fs, s):
        x = as_float(s)
        return np.isfinite(x), x

    def keys(self, fs, s, x, ok, every):
        return fs.coder.encode_float(x if every else x[ok])

    def comparison_positions(self, coder, new_counts, max_positions):
        return equal_mass_positions(coder, new_counts, max_positions)
