"""The model-free numeric curve: :class:`StratPDResult` (CatStratPD's is
:class:`daskpd._strat.categorical.CatStratPDResult`; the model family's live next to
their functions in :mod:`daskpd.model`).  All are :class:`~daskpd.results.base.CurveResult`.

:func:`interval_slopes` is StratPD's rule for the slope of every interval between two
positions; it lives here, with the result, because both the finish that integrates the
curve (:mod:`daskpd._strat.numeric_curve`) and the plot that draws its flat steps
(:meth:`StratPDResult.intervals`) read a curve by it.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

from .._engine.repeats import repeats_text
from ..plotting.strat import plot_stratpd
from .base import CurveResult

__all__ = ["StratPDResult", "interval_slopes", "FEW_SLOPES_RULES", "DEFAULT_FEW_SLOPES", "DEFAULT_BAND", "band_settings",
           "trial_band", "align_trials", "simultaneous_q", "flat_test", "flat_within_band", "band_is_flat",
           "band_columns", "band_note", "boolean_note", "repeats_note", "anchored_trials"]

#: what an interval with 0 < slope_count < min_slopes_per_x contributes (see :func:`interval_slopes`)
FEW_SLOPES_RULES = ("interpolate", "flat")
DEFAULT_FEW_SLOPES = "interpolate"


#: the default band: its lower and upper probabilities (a 90 % band)
DEFAULT_BAND = (0.05, 0.95)


def band_settings(finish_options, n_sets: int, clusters: int | None = None) -> dict:
    """The band's settings a StratPD/CatStratPD result's ``params`` record, from the
    scan's finish options (a :class:`daskpd._strat.options.FinishOptions`; its ``band``
    from :meth:`daskpd._strat.options.Trials.of`): none without trials, so the params of
    ``n_trials=1`` are those of a run without bands.  ``clusters``: the independent
    units the trials resample (StratPD: the leaves holding a slope)."""
    if n_sets <= 1:
        return {}
    out = finish_options.band_params()
    if clusters is not None:
        out["band_clusters"] = int(clusters)
    return out


def align_trials(trials, center, anchor: int | None = None) -> np.ndarray:
    """Trial curves (trials, positions...) shifted onto ``center``: each by its difference
    from ``center`` at position ``anchor`` where it has a value there, else (or with no
    anchor) by its mean difference over the positions where both have one; a trial
    sharing no position with ``center`` stays as it is."""
    T = np.array(trials, dtype="float64", copy=True)
    if T.size == 0 or center is None:
        return T
    flat = T.reshape(len(T), -1)
    c = np.asarray(center, dtype="float64").reshape(-1)
    diff = c[None, :] - flat
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        shift = np.nanmean(diff, axis=1)
    if anchor is not None:
        at = diff[:, int(anchor)]
        shift = np.where(np.isfinite(at), at, shift)
    flat += np.where(np.isfinite(shift), shift, 0.0)[:, None]
    return flat.reshape(T.shape)


#: the fewest degrees of freedom the effective units give a band: with two or three
#: leaves carrying the variance, the error and the spread are the same few leaves' noise
#: and their ratio is bounded (a self-normalised sum), lighter-tailed than Student's t
#: at ``units - 1`` degrees of freedom
MIN_UNITS_DF = 4.0


def trial_band(trials, band=DEFAULT_BAND, *, center=None, align: bool = False, anchor: int | None = None,
               clusters=None, units=None) -> dict:
    """The band of a curve (or of any estimate) from its trials (``trials``: ``(T,
    positions...)``), centred on the estimate ``center`` (the curve the user sees).

    With ``align`` (a curve known up to a constant: StratPD's, CatStratPD's) the trials
    are first aligned on it (:func:`align_trials`: at ``anchor``, the position the curve
    is 0 at by construction, or by their mean difference), so that a trial missing one
    sparse position still counts.  Then, where at least two trials
    have a value, ``std`` is their standard deviation (ddof=1) and the band is
    ``center + q std`` with ``q`` Student's t quantiles of ``band``'s probabilities.
    ``clusters`` (a number, or one per position): the independent units the trials
    resample (the stratification's leaves, for StratPD and CatStratPD); with few of
    them the bootstrap spread is short by ``(m - 1) / m`` and itself uncertain, so
    ``std`` is scaled by ``sqrt(m / (m - 1))`` and the t quantiles take ``min(T, m) - 1``
    degrees of freedom (a small-sample cluster-robust correction); without, ``T - 1``.
    ``units`` (one per position, NaN where unknown): the clusters the spread effectively
    rests on (:mod:`daskpd._strat.bandunits`; fewer than ``clusters`` when a few carry
    most of the variance); the degrees of freedom are then at most ``max(units - 1,``
    :data:`MIN_UNITS_DF` ``)``.
    Returns ``{"std", "lo", "hi", "n"}`` per position, NaN where fewer than two trials
    have a value.
    """
    from scipy.special import stdtrit

    T = np.asarray(trials, dtype="float64")
    shape = T.shape[1:]
    if center is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            center = np.nanmean(T, axis=0) if len(T) else np.full(shape, np.nan)
    center = np.broadcast_to(np.asarray(center, dtype="float64"), shape)
    if align:
        T = align_trials(T, center, anchor)
    n = np.isfinite(T).sum(axis=0) if T.size else np.zeros(shape, dtype=int)
    with warnings.catch_warnings():  # positions with < 2 trials: NaN, quietly
        warnings.simplefilter("ignore", RuntimeWarning)
        std = np.nanstd(T, axis=0, ddof=1) if len(T) > 1 else np.full(shape, np.nan)
    df = np.maximum(n - 1, 1).astype("float64")
    if clusters is not None:
        m = np.broadcast_to(np.asarray(clusters, dtype="float64"), shape)
        with np.errstate(invalid="ignore", divide="ignore"):
            std = std * np.sqrt(np.where(m > 1, m / (m - 1), np.nan))
        df = np.minimum(df, np.maximum(m - 1, 1))
    if units is not None:
        u = np.broadcast_to(np.asarray(units, dtype="float64"), shape)
        df = np.where(np.isfinite(u), np.minimum(df, np.maximum(u - 1, MIN_UNITS_DF)), df)
    lo = center + stdtrit(df, float(band[0])) * std
    hi = center + stdtrit(df, float(band[1])) * std
    few = (n < 2) | ~np.isfinite(center)
    out = {"std": np.where(few, np.nan, std), "lo": np.where(few, np.nan, lo), "hi": np.where(few, np.nan, hi),
           "n": n}
    return out


def simultaneous_q(trials, center, std, level: float, df: float | None = None) -> float:
    """The sup-t critical value of a simultaneous band from the trials (aligned on
    ``center``): over trials, ``max |trial - center| / std`` across the positions with a
    band; its order statistic ``ceil(level (T + 1))`` of T (what a new draw stays below
    with probability ``level``), scaled by Student's t over the normal quantile at
    ``df`` degrees of freedom (the spread itself is estimated: :func:`trial_band`).  NaN
    with fewer than two trials."""
    from scipy.special import ndtri, stdtrit

    T = np.asarray(trials, dtype="float64").reshape(len(trials), -1)
    c = np.asarray(center, dtype="float64").reshape(-1)
    sd = np.asarray(std, dtype="float64").reshape(-1)
    ok = np.isfinite(c) & np.isfinite(sd) & (sd > 0)
    if len(T) < 2 or not ok.any():
        return float("nan")
    with np.errstate(invalid="ignore"):
        z = np.abs(T[:, ok] - c[ok]) / sd[ok]
    m = np.nanmax(np.where(np.isfinite(z), z, -np.inf), axis=1)
    m = np.sort(m[np.isfinite(m)])
    if len(m) < 2:
        return float("nan")
    k = min(len(m), int(np.ceil(level * (len(m) + 1))))
    upper = 0.5 + level / 2
    scale = float(stdtrit(df, upper) / ndtri(upper)) if df is not None and df >= 1 else 1.0
    return float(m[k - 1]) * scale


def flat_within_band(pd_values, lo, hi) -> bool | None:
    """Whether a flat line fits inside the band: ``max(lo) <= min(hi)`` over the
    positions that have one (None when none has).  Given a simultaneous band
    (:func:`flat_test`), the curve is then not distinguishable from flat."""
    y = np.asarray(pd_values, dtype="float64")
    lo, hi = np.asarray(lo, dtype="float64"), np.asarray(hi, dtype="float64")
    ok = np.isfinite(lo) & np.isfinite(hi) & np.isfinite(y)
    if not ok.any():
        return None
    return bool(np.max(lo[ok]) <= np.min(hi[ok]))


def flat_test(res, b: dict | None = None) -> bool | None:
    """Whether ``res``'s curve is not distinguishable from flat: a flat line fits in
    its simultaneous band at the band's level -- ``pd +- q std`` at every position, ``q``
    the sup-t critical value of the trials (:func:`simultaneous_q`), which holds the
    whole of a flat truth with the band's probability (a pointwise band would leave a
    flat truth out somewhere far more often).  None without a band."""
    b = res.band() if b is None else b
    if b is None:
        return None
    band = tuple(res.params.get("band", DEFAULT_BAND))
    trials = res.trial_curves() if hasattr(res, "trial_curves") else res.trials_pd
    clusters = res.params.get("band_clusters")
    df = len(trials) - 1 if clusters is None else min(len(trials) - 1, int(clusters) - 1)
    units = getattr(res, "band_units", None)
    if units is not None and np.isfinite(units).any():  # the band's typical degrees of freedom
        df = min(df, max(float(np.nanmedian(units)) - 1, MIN_UNITS_DF))
    q = simultaneous_q(trials, res.pd, b["std"], band[1] - band[0], df)
    if not np.isfinite(q):
        return None
    return flat_within_band(res.pd, res.pd - q * b["std"], res.pd + q * b["std"])


def band_is_flat(res) -> bool:
    """``res`` is not distinguishable from flat (:func:`flat_test`: a flat line fits its
    simultaneous band; the summary says so); False without a band."""
    return bool(flat_test(res))


def band_columns(b: dict | None) -> dict:
    """The frame columns of a band: ``pd_std``, ``pd_lo``, ``pd_hi`` (empty without one)."""
    if b is None:
        return {}
    return {"pd_std": b["std"], "pd_lo": b["lo"], "pd_hi": b["hi"]}


def anchored_trials(trials_pd, center, anchor: int | None) -> np.ndarray | None:
    """Trial curves (trials, positions) aligned on the curve ``center``
    (:func:`align_trials`); None without trials."""
    if trials_pd is None:
        return None
    return align_trials(trials_pd, center, anchor)


def band_note(res) -> str:
    """The summary's words about a curve's band (``res.band()``): its level, trials and
    where it exists, the flat flag, and for the model-free curves what it holds; empty
    without trials."""
    b = res.band()
    if b is None:
        return ""
    band, n_trials = res.params.get("band", DEFAULT_BAND), res.n_trials
    level = f"{100 * (band[1] - band[0]):.0f}%"
    have = np.isfinite(np.asarray(b["lo"], dtype="float64"))
    shown = np.isfinite(np.asarray(res.pd, dtype="float64"))
    if not have.any():
        return f"\n  no band: fewer than two of the {n_trials} trials have a value anywhere"
    where = "" if have.sum() >= shown.sum() else f" (at {int(have.sum()):,} of {int(shown.sum()):,} positions)"
    note = f"\n  {level} band over {n_trials} trials{where}"
    flat = flat_test(res, b)
    if flat:
        note += ": NOT distinguishable from flat (a flat line fits its simultaneous band)"
    elif flat is None:
        note += ": too few trials to test flatness"
    if type(res).__name__ in ("StratPDResult", "CatStratPDResult"):
        note += "\n  the band: the rows' spread given the strata, not the trees' bias on continuous columns"
    return note + repeats_note(res.params)


def boolean_note(res) -> str:
    """The summary's line for a boolean target (read as 0/1); empty otherwise."""
    if not (getattr(res, "params", None) or {}).get("target_boolean"):
        return ""
    return f"\n  target {res.target!r} is boolean, read as 0/1 (True = 1): pd is the change in the share of True"


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
    # (len(x),) with trials: the leaves the band's spread effectively rests on (its degrees of freedom + 1)
    band_units: np.ndarray | None = None

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
        """The trial curves aligned on this one (0 at its first supported position, as
        ``pd`` is); None without trials."""
        return anchored_trials(self.trials_pd, self.pd, self._anchor())

    def band(self) -> dict | None:
        """``{"std", "lo", "hi", "n"}`` at every position: the band centred on ``pd``
        from the leaf-bootstrap trials (see :func:`trial_band`; ``params["band"]`` its
        probabilities, ``params["band_clusters"]`` the leaves it resamples,
        ``band_units`` the leaves its spread effectively rests on per position), None
        with fewer than 2 trials."""
        if self.trials_pd is None or len(self.trials_pd) < 2:
            return None
        return trial_band(self.trials_pd, tuple(self.params.get("band", DEFAULT_BAND)), center=self.pd, align=True,
                          anchor=self._anchor(), clusters=self.params.get("band_clusters"), units=self.band_units)

    def is_flat(self) -> bool:
        """Whether the curve is not distinguishable from flat (:func:`flat_test`; the plot
        then draws it on the target's scale); False without a band."""
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
        return "\n".join(lines) + boolean_note(self) + band_note(self)

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
        return plot_stratpd(self, ax=ax, **kwargs)
