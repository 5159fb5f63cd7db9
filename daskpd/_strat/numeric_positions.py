"""What every model-free estimator of a numeric feature shares: its positions (bins, or
the exact values up to :data:`NUMERIC_VALUES_CAP`) and how the scan's map reads them.

StratPD (:mod:`daskpd._strat.stratpd_estimator`) and the binned mean of y
(:mod:`daskpd._strat.marginal_estimator`) derive from :class:`NumericPositions`, so the
two read a feature the same way and, run on the same feature, code it in the same
positions.
"""
from __future__ import annotations

import numpy as np

from .._data.encode import KeyCoder, as_float
from .._errors import DataError
from .estimator import ModelFreeEstimator
from .trees import bin_edges

__all__ = ["NumericPositions", "NUMERIC_VALUES_CAP"]

#: a numeric feature keeps its exact values only if it has at most this many in the data
NUMERIC_VALUES_CAP = 1 << 16


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
