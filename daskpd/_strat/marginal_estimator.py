"""The binned mean of y per position of a numeric feature (the marginal plot's curve)
as a :class:`~daskpd._strat.estimator.ModelFreeEstimator`: written only against the
protocol, it runs in the model-free scan next to StratPD and CatStratPD (the same map,
merges, kept state, save, load and incremental merge) without an engine module knowing it.

It ignores the strata: a feature's mean y at a position is its rows' ``sum y / n`` over
every leaf (at a binned feature's mean x in the bin).  A bucket's finish sums its cells
per (virtual bucket, position) (:mod:`daskpd._strat.virtual`), and the aggregate folds
them in virtual-bucket order, so the counts are exact and the sums are the same whatever
the bucket count but for the rounding of a virtual bucket split between two buckets.
It keeps no finish summary: an incremental run merges its sums and finishes them in
full (cheap: one pass over the cells).  Trials are not made (the result is set 0's).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .._data.encode import KeyCoder, as_float
from .._engine.sums import Table
from .._errors import DataError
from ..results.base import CurveResult
from .estimator import ModelFreeEstimator
from .trees import bin_edges
from .virtual import virtual_of

__all__ = ["MarginalMeanEstimator", "BinnedMeanResult"]

#: a feature keeps its exact values only if it has at most this many in the data
VALUES_CAP = 1 << 16


@dataclass(repr=False)
class BinnedMeanResult(CurveResult):
    """The mean of ``target`` per position of numeric ``feature`` (``x``: the positions,
    ``mean``: the mean y there, ``count``: its rows)."""

    feature: str
    target: str
    x: np.ndarray
    mean: np.ndarray
    count: np.ndarray
    n_rows: int = 0
    kind: str = "numeric"
    params: dict = field(default_factory=dict)

    def curve(self) -> dict:
        return {"positions": self.x, "pd": self.mean, "count": self.count, "supported": self.count > 0}

    def __repr__(self) -> str:
        return f"BinnedMeanResult(feature={self.feature!r}, target={self.target!r}, positions={len(self.x)})"

    def to_dict(self) -> dict:
        return {"method": "marginal_mean", "feature": self.feature, "target": self.target, "n_rows": self.n_rows,
                "x": self.x.tolist(), "mean": self.mean.tolist(), "count": self.count.tolist()}


class MarginalMeanEstimator(ModelFreeEstimator):
    """The binned mean of y (see the module docstring)."""

    name = "marginal"
    method = "marginal_mean"
    result_type = BinnedMeanResult
    column_kind = "numeric"
    values_cap = VALUES_CAP

    def sample_values(self, col):
        vals = as_float(col)
        return vals, np.isfinite(vals)

    def coder(self, feature, sample, max_bins, nan_as_level, dtype) -> KeyCoder:
        edges = bin_edges(as_float(sample.frame[feature]), max_bins) if max_bins is not None else None
        if edges is not None:
            return KeyCoder("numeric", edges=edges)
        distinct = sample.distinct.get(feature)
        if distinct is None:
            raise DataError(f"feature {feature!r} has more than {VALUES_CAP:,} distinct values; set max_bins")
        vals = np.asarray(distinct, dtype="float64")
        return KeyCoder("numeric", values=vals[np.isfinite(vals)])

    def read_x(self, fs, s):
        x = as_float(s)
        return np.isfinite(x), x

    def keys(self, fs, s, x, ok, every):
        return fs.coder.encode_float(x if every else x[ok])

    def finish_bucket(self, scan, index, table, counters, span):
        """``(Table of sums per (virtual bucket, position), counters)``."""
        fs = scan.features[index]
        P = fs.coder.n_keys
        cols = 3 if fs.binned else 2
        if not len(table):
            return Table.empty(cols), counters
        cell = virtual_of(np.asarray(table.leaf, np.int64), fs.n_leaves) * P + np.asarray(table.key, np.int64)
        u, inv = np.unique(cell, return_inverse=True)
        sums = np.column_stack([np.bincount(inv, weights=table.values[:, j], minlength=len(u)) for j in range(cols)])
        return Table((u // P).astype(np.int32), u % P, sums), counters

    def wire(self, scan, index, merged, node):
        picks = [node("pick", merged[b], index, key=f"marginal-{b}-f{index}") for b in range(len(merged))]
        return node("call", index, "final", *picks, key=f"finish-marginal-f{index}"), None

    def final(self, scan, index, *parts):
        """The feature's :class:`BinnedMeanResult` from its buckets' sums (folded in
        virtual-bucket order)."""
        fs = scan.features[index]
        P = fs.coder.n_keys
        tabs = [t for t, _ in parts if len(t)]
        counters = next((c for _, c in parts if c is not None), (0, 0, 0))
        sums = np.zeros((P, 3 if fs.binned else 2))
        if tabs:
            vb = np.concatenate([t.leaf for t in tabs])
            key = np.concatenate([t.key for t in tabs])
            vals = np.concatenate([t.values for t in tabs])
            order = np.lexsort((key, vb))  # virtual-bucket order: the same fold whatever the buckets
            for j in range(vals.shape[1]):
                sums[:, j] = np.bincount(key[order], weights=vals[order, j], minlength=P)
        n = sums[:, 0]
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(n > 0, sums[:, 1] / n, np.nan)
            x = (np.where(n > 0, sums[:, 2] / n, np.nan) if fs.binned else
                 np.asarray(fs.coder.values, dtype="float64"))
        keep = n > 0
        return BinnedMeanResult(fs.feature, scan.target, x[keep], mean[keep], n[keep].astype(np.int64),
                                n_rows=int(counters[0]), params={"positions": "bins" if fs.binned else "values"})

    def finish_state(self, scan, index, part):
        return self.final(scan, index, part)

