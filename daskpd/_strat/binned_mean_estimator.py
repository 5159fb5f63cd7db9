"""The binned mean of y per position of a numeric feature (the marginal plot's curve)
as a :class:`~daskpd._strat.estimator.ModelFreeEstimator`: written only against the
protocol, it runs in the model-free scan next to StratPD and CatStratPD (the same map,
merges, kept state, save, load and incremental merge) without an engine module knowing it.

It ignores the strata: a feature's mean y at a position is its rows' ``sum y / n`` over
every leaf (at a binned feature's mean x in the bin).  Run besides StratPD on the same
feature (``estimators=["binned_mean"]``: :func:`daskpd._strat.stratification.extra_scan`) it
has the feature's positions and no tree: its rows fall in ``MIN_UNITS`` parts by row
hash (:data:`daskpd._strat.scan.MIN_UNITS`), the units its trials resample (a Poisson
bootstrap of the parts, :mod:`daskpd._strat.leafboot`: each trial's mean per position,
``trials_pd``, what the new-against-old comparison tests).  A bucket's finish sums its
cells per (virtual bucket, position) and statistics set (:mod:`daskpd._strat.virtual`),
and the aggregate folds them in virtual-bucket order, so the counts are exact and the
sums are the same whatever the bucket count but for the rounding of a virtual bucket
split between two buckets.  It keeps no finish summary: an incremental run merges its
sums and finishes them in full (cheap: one pass over at most ``MIN_UNITS`` x positions
cells).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .._engine.sums import Table
from ..plotting._base import count_bars, get_axes
from ..results.base import CurveResult
from ..results.curves import band_columns, trial_band
from .leafboot import table_leaf_weights
from .numeric_positions import NumericPositions
from .virtual import virtual_of

__all__ = ["BinnedMeanEstimator", "BinnedMeanResult"]

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
    #: (trials, positions): each trial's mean (a bootstrap of the feature's units), or None
    trials_pd: np.ndarray | None = None

    def band(self) -> dict | None:
        """The band of the means from their trials (:func:`~daskpd.results.curves.trial_band`:
        ``std``, ``lo``, ``hi`` per position, the units the trials resample as its
        clusters), or None without two trials."""
        if self.trials_pd is None or len(self.trials_pd) < 2:
            return None
        return trial_band(self.trials_pd, center=self.mean, clusters=self.params.get("band_clusters"))

    def curve(self) -> dict:
        return {"positions": self.x, "pd": self.mean, "count": self.count, "supported": self.count > 0,
                "extra": band_columns(self.band())}

    def __repr__(self) -> str:
        return f"BinnedMeanResult(feature={self.feature!r}, target={self.target!r}, positions={len(self.x)})"

    def metadata(self) -> dict:
        return {"method": "binned_mean", "feature": self.feature, "target": self.target, "kind": self.kind,
                "n_rows": self.n_rows, "n_used": int(np.sum(self.count)), "params": dict(self.params)}

    def plot(self, ax=None, *, target: str | None = None, show_counts: bool = True, **kwargs):
        """The mean of the target per position (a line with markers), the rows per
        position as a strip at the bottom (``show_counts``)."""
        ax = get_axes(ax, figsize=(7, 4.2))
        ax.plot(self.x, self.mean, marker=".", **kwargs)
        ax.set_xlabel(self.feature)
        ax.set_ylabel(f"mean {target or self.target}")
        ax.set_title(f"binned mean of {target or self.target} by {self.feature}")
        if show_counts and len(self.x):
            count_bars(ax, self.x, self.count)
        return ax

    def to_dict(self) -> dict:
        return {"method": "binned_mean", "feature": self.feature, "target": self.target, "n_rows": self.n_rows,
                "x": self.x.tolist(), "mean": self.mean.tolist(), "count": self.count.tolist()}


class BinnedMeanEstimator(NumericPositions):
    """The binned mean of y (see the module docstring; its positions, StratPD's:
    :class:`~daskpd._strat.numeric_positions.NumericPositions`)."""

    name = "binned_mean"
    method = "binned_mean"
    result_type = BinnedMeanResult
    reads_strata = False  # besides StratPD on a feature, its rows are scanned as MIN_UNITS parts by hash

    def finish_bucket(self, scan, index, table, counters, span):
        """``(Table of sums per (virtual bucket, position), counters)``: per statistics
        set (all rows, then each trial: its units' weights times their sums) the
        columns ``[n, sum y(, sum x)]``."""
        fs = scan.features[index]
        P = fs.coder.n_keys
        cols = fs.stats_per_set
        T = int(scan.n_trials)
        if not len(table):
            return Table.empty(cols * (1 + T)), counters
        vals = np.asarray(table.values[:, :cols], dtype="float64")
        if T:  # a bootstrap of the units (the feature's leaves: its rows' parts, by hash)
            w = table_leaf_weights(table, fs.feature, T, scan.random_state)
            w = w[np.asarray(table.leaf, np.int64) - int(table.leaf[0])].astype("float64")
            vals = np.concatenate([vals, *(vals * w[:, [t]] for t in range(T))], axis=1)
        cell = virtual_of(np.asarray(table.leaf, np.int64), fs.n_leaves) * P + np.asarray(table.key, np.int64)
        u, inv = np.unique(cell, return_inverse=True)
        sums = np.column_stack([np.bincount(inv, weights=vals[:, j], minlength=len(u)) for j in range(vals.shape[1])])
        return Table((u // P).astype(np.int32), u % P, sums), counters

    def wire(self, scan, index, merged, node):
        picks = [node("pick", merged[b], index, key=f"binned-mean-{b}-f{index}") for b in range(len(merged))]
        return node("call", index, "final", *picks, key=f"finish-binned-mean-f{index}"), None

    def final(self, scan, index, *parts):
        """The feature's :class:`BinnedMeanResult` from its buckets' sums (folded in
        virtual-bucket order), with ``trials_pd`` when the scan makes trials."""
        fs = scan.features[index]
        P = fs.coder.n_keys
        cols, T = fs.stats_per_set, int(scan.n_trials)
        tabs = [t for t, _ in parts if len(t)]
        counters = next((c for _, c in parts if c is not None), (0, 0, 0))
        sums = np.zeros((P, cols * (1 + T)))
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
            trials = None
            if T:
                tn = sums[:, cols::cols][:, :T].T  # (T, P): each trial's n, then its sum y
                ty = sums[:, cols + 1::cols][:, :T].T
                trials = np.where(tn > 0, ty / np.where(tn > 0, tn, 1.0), np.nan)
        keep = n > 0
        params = {"positions": "bins" if fs.binned else "values", "units": int(fs.n_leaves)}
        if T:
            params["band_clusters"] = int(fs.n_leaves)
        return BinnedMeanResult(fs.feature, scan.target, x[keep], mean[keep], n[keep].astype(np.int64),
                                n_rows=int(counters[0]), params=params,
                                trials_pd=None if trials is None else trials[:, keep])

    def finish_state(self, scan, index, part):
        return self.final(scan, index, part)

