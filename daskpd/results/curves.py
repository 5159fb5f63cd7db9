"""The model-free numeric curve: :class:`StratPDResult` (CatStratPD's is
:class:`daskpd._strat.categorical.CatStratPDResult`; the model family's live next to
their functions in :mod:`daskpd.model`).  All are :class:`~daskpd.results.base.CurveResult`.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

from .base import CurveResult

__all__ = ["StratPDResult"]


@dataclass(repr=False)
class StratPDResult(CurveResult):
    """StratPD partial dependence of ``target`` on numeric ``feature``.

    Arrays are indexed by the distinct x positions (distinct values, or bins placed at
    their mean x when the feature was binned):

    ``x``            position
    ``pd``           partial dependence, 0 at the leftmost supported x; NaN outside support
    ``slope``        average slope over [x_i, x_{i+1}) (NaN when fewer than min_slopes_per_x)
    ``slope_count``  number of leaf slopes averaged over [x_i, x_{i+1})
    ``count``        rows at this x (all leaves)
    ``supported``    pd is estimated here (the interval starting or ending at x has a slope)

    ``params["support"]`` counts, inside the curve, the intervals no leaf slope covers
    (flat steps), those with fewer than min_slopes_per_x slopes (and how many of them were
    interpolated) and the positions left unsupported.
    """

    feature: str
    target: str
    x: np.ndarray
    pd: np.ndarray
    slope: np.ndarray
    slope_count: np.ndarray
    count: np.ndarray
    supported: np.ndarray
    n_rows: int  # rows read
    n_used: int  # rows in leaves with >= 2 distinct x
    n_ignored: int  # rows in leaves with a single x (they carry no slope)
    n_missing_x: int
    n_bad_y: int
    n_leaves: int
    binned: bool
    params: dict = field(default_factory=dict)
    segments: dict = field(default_factory=dict)  # a sample of per-leaf slope segments
    trials_pd: np.ndarray | None = None  # (n_trials, len(x)) when bootstrap trials were run
    set_counts: np.ndarray | None = None  # (1 + n_trials, len(x)): rows (trial weight) per position

    kind = "numeric"

    def __repr__(self) -> str:
        sup = int(self.supported.sum())
        return (f"StratPDResult(feature={self.feature!r}, target={self.target!r}, positions={len(self.x)}, "
                f"supported={sup}, leaves={self.n_leaves}, rows={self.n_rows}, ignored={self.n_ignored}, "
                f"binned={self.binned})")

    def curve(self) -> dict:
        extra = {"slope": self.slope, "slope_count": self.slope_count.astype("int64")}
        if self.trials_pd is not None and len(self.trials_pd) > 1:
            with warnings.catch_warnings():  # positions supported in < 2 trials: NaN, quietly
                warnings.simplefilter("ignore", RuntimeWarning)
                extra["pd_std"] = np.nanstd(self.trials_pd, axis=0, ddof=1)
        return {"positions": self.x, "pd": self.pd, "count": self.count, "supported": self.supported,
                "extra": extra}

    def metadata(self) -> dict:
        return {
            "method": "stratpd", "feature": self.feature, "target": self.target, "n_rows": self.n_rows,
            "n_used": self.n_used, "n_ignored": self.n_ignored, "n_missing_x": self.n_missing_x,
            "n_bad_y": self.n_bad_y, "n_leaves": self.n_leaves, "binned": self.binned, "params": self.params,
        }

    def summary(self) -> str:
        sup = self.supported
        lo, hi = (np.nanmin(self.pd[sup]), np.nanmax(self.pd[sup])) if sup.any() else (np.nan, np.nan)
        sc = self.params.get("support") or {}
        inside = ""
        if sc.get("empty_intervals") or sc.get("few_slope_intervals"):
            inside = (f" ({sc.get('unsupported_inside', 0)} unsupported inside the curve; flat over "
                      f"{sc.get('empty_intervals', 0)} intervals no leaf slope covers, "
                      f"{sc.get('few_slope_intervals', 0)} with fewer than "
                      f"{self.params.get('min_slopes_per_x')} slopes: "
                      f"{sc.get('few_slopes_interpolated', 0)} interpolated)")
        return (f"{self.feature}: {int(sup.sum())}/{len(self.x)} x positions supported{inside}, pd range "
                f"[{lo:.4g}, {hi:.4g}], {self.n_leaves} leaves, rows used {self.n_used:,} of {self.n_rows:,} "
                f"(ignored {self.n_ignored:,} in single-x leaves, dropped {self.n_missing_x:,} missing x, "
                f"{self.n_bad_y:,} missing/inf y){' [binned]' if self.binned else ''}")

    def plot(self, ax=None, **kwargs):
        from ..plotting.strat import plot_stratpd

        return plot_stratpd(self, ax=ax, **kwargs)
