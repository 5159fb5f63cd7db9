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

from .._engine.repeats import repeats_text
from .base import CurveResult

__all__ = ["StratPDResult", "interval_slopes", "FEW_SLOPES_RULES", "DEFAULT_FEW_SLOPES", "DEFAULT_BAND", "band_settings",
           "trial_band", "flat_within_band", "band_is_flat", "band_columns", "band_note", "repeats_note", "anchored_trials"]

#: what an interval with 0 < slope_count < min_slopes_per_x contributes (see :func:`interval_slopes`)
FEW_SLOPES_RULES = ("interpolate", "flat")
DEFAULT_FEW_SLOPES = "interpolate"


#: the default percentile interval of a curve's trials (a 90 % band)
DEFAULT_BAND = (0.05, 0.95)


def band_settings(finish_options: dict, n_sets: int) -> dict:
    """The band's settings a StratPD/CatStratPD result's ``params`` record, from the
    scan's finish options (:func:`daskpd._stratpd.trial_args`): none without trials, so
    the params of ``n_trials=1`` are those of a run without bands."""
    if n_sets <= 1:
        return {}
    return {k: finish_options[k] for k in ("band", "bootstrap", "subsample_size", "row_id") if k in finish_options}


def trial_band(trials, band=DEFAULT_BAND, anchor: int | None = None) -> dict:
    """The summary band of a curve's trial curves (``trials``: ``(T, positions...)``).

    ``anchor``: the position the curve is 0 at (StratPD's first supported position,
    CatStratPD's lowest category); every trial is shifted to 0 there first, and a trial
    with no value there is left out.  Returns ``{"std", "lo", "hi", "n"}`` per position:
    the standard deviation over trials (ddof=1), the ``band`` percentiles (numpy's
    linear interpolation) and the number of trials with a value; NaN where fewer than
    two trials have one.
    """
    T = np.asarray(trials, dtype="float64")
    if anchor is not None and T.size:
        flat = T.reshape(len(T), -1)
        flat = flat - flat[:, [int(anchor)]]  # a trial without the anchor becomes all NaN
        T = flat.reshape(T.shape)
    n = np.isfinite(T).sum(axis=0) if T.size else np.zeros(T.shape[1:], dtype=int)
    with warnings.catch_warnings():  # positions with < 2 trials: NaN, quietly
        warnings.simplefilter("ignore", RuntimeWarning)
        std = np.nanstd(T, axis=0, ddof=1) if len(T) > 1 else np.full(T.shape[1:], np.nan)
        lo, hi = (np.nanquantile(T, q, axis=0) if len(T) else np.full(T.shape[1:], np.nan) for q in band)
    few = n < 2
    for a in (std, lo, hi):
        a[few] = np.nan
    return {"std": std, "lo": lo, "hi": hi, "n": n}


def flat_within_band(pd_values, lo, hi) -> bool | None:
    """Whether the band is wider than the curve's range: the widest interval of the band
    is at least ``max(pd) - min(pd)`` over the positions that have one.  Then the band
    could hold a flat line as well as the curve, and the curve is not distinguishable
    from flat.  None when no position has a band."""
    y = np.asarray(pd_values, dtype="float64")
    lo, hi = np.asarray(lo, dtype="float64"), np.asarray(hi, dtype="float64")
    ok = np.isfinite(lo) & np.isfinite(hi) & np.isfinite(y)
    if not ok.any():
        return None
    return bool(np.max(hi[ok] - lo[ok]) >= np.max(y[ok]) - np.min(y[ok]))


def band_is_flat(res) -> bool:
    """``res.band()`` could hold a flat line (:func:`flat_within_band`); False without one."""
    b = res.band()
    return b is not None and bool(flat_within_band(res.pd, b["lo"], b["hi"]))


def band_columns(b: dict | None) -> dict:
    """The frame columns of a band: ``pd_std``, ``pd_lo``, ``pd_hi`` (empty without one)."""
    if b is None:
        return {}
    return {"pd_std": b["std"], "pd_lo": b["lo"], "pd_hi": b["hi"]}


def anchored_trials(trials_pd, anchor: int | None) -> np.ndarray | None:
    """Trial curves (trials, positions) shifted to 0 at position ``anchor`` (a curve's
    own zero; unshifted when None); None without trials."""
    if trials_pd is None:
        return None
    T = np.asarray(trials_pd, dtype="float64")
    return T - T[:, [anchor]] if anchor is not None else T


def band_note(res) -> str:
    """The summary's words about a curve's band (``res.band()``): its level and trials,
    and the flat flag; empty without a band."""
    b = res.band()
    if b is None:
        return ""
    band, n_trials, pd_values = res.params.get("band", DEFAULT_BAND), res.n_trials, res.pd
    level = f"{100 * (band[1] - band[0]):.0f}%"
    note = f"\n  {level} band over {n_trials} trials"
    if flat_within_band(pd_values, b["lo"], b["hi"]):
        note += f": NOT distinguishable from flat (the {level} band is wider than the curve's range)"
    return note + repeats_note(res.params)


def repeats_note(params: dict) -> str:
    """The summary's line when rows repeat in the columns the trial weights are drawn
    from (``params["row_repeats"]``: :func:`daskpd._engine.repeats.repeats_text`)."""
    text = repeats_text(params.get("row_repeats"))
    return f"\n  {text}" if text else ""


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

    # -- trials and their band (n_trials > 1)

    @property
    def trials_supported(self) -> np.ndarray | None:
        """``(n_trials, len(x))``: where each trial's curve is estimated."""
        return None if self.trials_pd is None else np.isfinite(self.trials_pd)

    def _anchor(self) -> int | None:
        sup = np.flatnonzero(self.supported & np.isfinite(self.pd))
        return int(sup[0]) if len(sup) else None

    def trial_curves(self) -> np.ndarray | None:
        """The trial curves shifted to 0 at this curve's first supported position (as
        ``pd`` is; NaN for a trial not supported there); None without trials."""
        return anchored_trials(self.trials_pd, self._anchor())

    def band(self) -> dict | None:
        """``{"std", "lo", "hi", "n"}`` over the trials at every position (see
        :func:`trial_band`; ``params["band"]`` the percentiles), None with fewer than 2 trials."""
        if self.trials_pd is None or len(self.trials_pd) < 2:
            return None
        return trial_band(self.trials_pd, tuple(self.params.get("band", DEFAULT_BAND)), anchor=self._anchor())

    def is_flat(self) -> bool:
        """Whether the band could hold a flat line (:func:`flat_within_band`; the plot then
        draws the curve on the target's scale); False without a band."""
        return band_is_flat(self)

    def __repr__(self) -> str:
        sup = int(self.supported.sum())
        return (f"StratPDResult(feature={self.feature!r}, target={self.target!r}, positions={len(self.x)}, "
                f"supported={sup}, leaves={self.n_leaves}, rows={self.n_rows}, ignored={self.n_ignored}, "
                f"binned={self.binned})")

    def curve(self) -> dict:
        extra = {"slope": self.slope, "slope_count": self.slope_count.astype("int64"),
                 **band_columns(self.band())}
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
        return "\n".join(lines) + band_note(self)

    @property
    def n_trials(self) -> int:
        """Trials run (1: the curve alone, no band)."""
        return 1 if self.trials_pd is None else len(self.trials_pd)

    def intervals(self):
        """``(used, defined)`` per interval [x_i, x_{i+1}): the slope the curve was
        integrated with, and whether the interval has one (False: a flat step); see
        :func:`interval_slopes`, with this curve's ``min_slopes_per_x`` and ``few_slopes``."""
        return interval_slopes(self.x, self.slope, self.slope_count, int(self.params.get("min_slopes_per_x", 5)),
                               self.params.get("few_slopes", DEFAULT_FEW_SLOPES))

    def plot(self, ax=None, **kwargs):
        from ..plotting.strat import plot_stratpd

        return plot_stratpd(self, ax=ax, **kwargs)
