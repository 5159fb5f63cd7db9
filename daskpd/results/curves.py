"""The model-free numeric curve: :class:`StratPDResult` (CatStratPD's is
:class:`daskpd._strat.categorical.CatStratPDResult`; the model family's live next to
their functions in :mod:`daskpd.model`).  All are :class:`~daskpd.results.base.CurveResult`.

:func:`interval_slopes` is StratPD's rule for the slope of every interval between two
positions; it lives here, with the result, because both the finish that integrates the
curve (:mod:`daskpd._strat.numeric`) and the plot that draws its flat steps
(:meth:`StratPDResult.intervals`) read a curve by it.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

from .base import CurveResult

__all__ = ["StratPDResult", "interval_slopes", "FEW_SLOPES_RULES", "DEFAULT_FEW_SLOPES"]

#: what an interval with 0 < slope_count < min_slopes_per_x contributes (see :func:`interval_slopes`)
FEW_SLOPES_RULES = ("interpolate", "flat")
DEFAULT_FEW_SLOPES = "interpolate"


def interval_slopes(ux, slope, slope_count, min_slopes_per_x, few_slopes=DEFAULT_FEW_SLOPES):
    """The slope used over every interval [x_i, x_{i+1}) and whether it has one.

    Returns ``(used, defined)``: ``used`` is the mean slope where ``slope_count >=
    min_slopes_per_x``; where no leaf slope covers x_i (count 0) it is 0 and the interval
    is undefined (a flat step: nothing in the data says how y moves there); where a few
    cover it (0 < count < min_slopes_per_x) and it lies between two valid intervals, it is
    the valid neighbours' slope interpolated linearly in x (``"interpolate"``, defined) or 0
    (``"flat"``, undefined, stratx 0.5).  Few-slope intervals before the first or after the
    last valid one are undefined under either rule.  The last position starts no interval.
    """
    if few_slopes not in FEW_SLOPES_RULES:
        raise ValueError(f"few_slopes must be one of {FEW_SLOPES_RULES}; got {few_slopes!r}")
    ux = np.asarray(ux, dtype="float64")
    c = np.asarray(slope_count)
    valid = c >= min_slopes_per_x
    valid[-1:] = False  # no interval starts at the last position
    used = np.where(valid, slope, 0.0)
    defined = valid.copy()
    if few_slopes == "interpolate":
        k = np.flatnonzero(valid)
        if len(k) > 1:
            few = (c > 0) & ~valid
            few[:k[0]] = False
            few[k[-1]:] = False
            i = np.flatnonzero(few)
            if len(i):
                used[i] = np.interp(ux[i], ux[k], np.asarray(slope)[k])
                defined[i] = True
    return used, defined


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
        """A few lines of at most about 100 characters: the curve, its support, where the rows went."""
        sup = self.supported
        lo, hi = (np.nanmin(self.pd[sup]), np.nanmax(self.pd[sup])) if sup.any() else (np.nan, np.nan)
        sc = self.params.get("support") or {}
        lines = [f"{self.feature}: {int(sup.sum())}/{len(self.x)} x positions supported, pd range "
                 f"[{lo:.4g}, {hi:.4g}]{' [binned]' if self.binned else ''}"]
        if sc.get("empty_intervals") or sc.get("few_slope_intervals"):
            lines.append(f"  {sc.get('unsupported_inside', 0)} unsupported inside the curve; flat over "
                         f"{sc.get('empty_intervals', 0)} intervals no leaf slope covers")
            lines.append(f"  {sc.get('few_slope_intervals', 0)} intervals with fewer than "
                         f"{self.params.get('min_slopes_per_x')} slopes: {sc.get('few_slopes_interpolated', 0)} "
                         "interpolated")
        lines.append(f"  {self.n_leaves} leaves; rows used {self.n_used:,} of {self.n_rows:,}; ignored "
                     f"{self.n_ignored:,} in single-x leaves")
        lines.append(f"  dropped {self.n_missing_x:,} missing x, {self.n_bad_y:,} missing/inf y")
        return "\n".join(lines)

    def intervals(self):
        """``(used, defined)`` per interval [x_i, x_{i+1}): the slope the curve was
        integrated with, and whether the interval has one (False: a flat step); see
        :func:`interval_slopes`, with this curve's ``min_slopes_per_x`` and ``few_slopes``."""
        return interval_slopes(self.x, self.slope, self.slope_count, int(self.params.get("min_slopes_per_x", 5)),
                               self.params.get("few_slopes", DEFAULT_FEW_SLOPES))

    def plot(self, ax=None, **kwargs):
        from ..plotting.strat import plot_stratpd

        return plot_stratpd(self, ax=ax, **kwargs)
