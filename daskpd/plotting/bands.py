"""Drawing a curve's uncertainty: the band of its bootstrap trials, and the trials.

Every curve result with trials (``n_trials > 1``) has ``band()`` -- ``{"std", "lo",
"hi", "n"}`` per position -- and ``trial_curves()`` or ``trials_pd``.  The plot
functions call these helpers after drawing the curve: a shaded interval by default,
every trial's curve on request (``show_trials=True``, stratx's ``show_all_pdp``).
"""
from __future__ import annotations

import numpy as np

__all__ = ["band_label", "draw_band", "draw_band_bars", "trials_of", "flat_limits", "is_flat", "thin_curve",
           "FLAT_SPAN", "TRIAL_POINTS"]

#: a curve not distinguishable from flat (a flat line fits its simultaneous band) is drawn on a value axis spanning at least
#: this many standard deviations of the target (``params["target_std"]``): a zoom onto its
#: wiggles would make noise look like an effect
FLAT_SPAN = 2.0
#: trial curves are drawn through at most this many points (their mean over equal slices
#: of the x range): adjacent positions a hair apart would draw a trial's jumps as
#: vertical streaks
TRIAL_POINTS = 150


def band_label(res) -> str:
    lo, hi = res.params.get("band", (0.05, 0.95))
    return f"{100 * (hi - lo):.0f}% band ({res.n_trials} trials)"


def trials_of(res):
    """The trial curves as drawn: aligned on the curve's anchor when the result says how."""
    fn = getattr(res, "trial_curves", None)
    return fn() if fn is not None else getattr(res, "trials_pd", None)


def is_flat(res) -> bool:
    """Whether ``res`` is not distinguishable from flat (the summary's line: a flat line
    fits its simultaneous band): the result's own ``is_flat()``."""
    fn = getattr(res, "is_flat", None)
    return bool(fn()) if fn is not None else False


def flat_limits(res, lo: float, hi: float) -> tuple[float, float]:
    """The value axis ``(lo, hi)`` of a curve, widened when it is not distinguishable from flat
    to span at least ``FLAT_SPAN`` standard deviations of the target (``params["target_std"]``;
    a model-based curve without it: of the model's response, ``params["response_std"]``),
    about its middle."""
    params = getattr(res, "params", None) or {}
    std = params.get("target_std") or params.get("response_std")
    if not std or not np.isfinite(std) or not is_flat(res):
        return lo, hi
    span = FLAT_SPAN * float(std)
    if hi - lo >= span:
        return lo, hi
    mid = (lo + hi) / 2
    return mid - span / 2, mid + span / 2


def thin_curve(x, y, n_points: int = TRIAL_POINTS):
    """``(x, y)`` through at most ``n_points`` points: the mean of the finite points in
    each of ``n_points`` equal slices of the x range (all points when fewer)."""
    x, y = np.asarray(x, dtype="float64"), np.asarray(y, dtype="float64")
    m = np.isfinite(x) & np.isfinite(y)
    x, y = x[m], y[m]
    if len(x) <= n_points or x[-1] <= x[0]:
        return x, y
    k = np.minimum(((x - x[0]) / (x[-1] - x[0]) * n_points).astype(int), n_points - 1)
    n = np.bincount(k, minlength=n_points)
    has = n > 0
    return (np.bincount(k, x, n_points)[has] / n[has]), (np.bincount(k, y, n_points)[has] / n[has])


def draw_band(ax, res, x, *, color, show_band: bool = True, show_trials: bool = False, where=None):
    """A shaded ``band()`` over numeric positions ``x`` (only where ``where`` is True, and
    the band finite); with ``show_trials``, every trial curve as a faint line through at
    most ``TRIAL_POINTS`` points (:func:`thin_curve`).  Nothing when ``res`` has no
    trials.  Returns the (lo, hi) drawn, or None."""
    b = res.band() if hasattr(res, "band") else None
    if b is None:
        return None
    x = np.asarray(x, dtype="float64")
    ok = np.isfinite(b["lo"]) & np.isfinite(b["hi"])
    if where is not None:
        ok &= np.asarray(where, dtype=bool)
    if show_trials:
        T = trials_of(res)
        label = "trials"
        for t in T:
            m = np.isfinite(t) if where is None else np.isfinite(t) & np.asarray(where, dtype=bool)
            tx, ty = thin_curve(x[m], t[m])
            if len(tx) > 1:  # a trial without values here draws nothing
                ax.plot(tx, ty, "-", color=color, lw=0.6, alpha=0.18, label=label)
                label = None
    if show_band and ok.any():
        ax.fill_between(x, np.where(ok, b["lo"], np.nan), np.where(ok, b["hi"], np.nan), color=color, alpha=0.2,
                        lw=0, label=band_label(res))
    return b["lo"][ok], b["hi"][ok]


def draw_band_bars(ax, res, pos, order=None, *, color, horizontal: bool = False, show_trials: bool = False):
    """The band of categorical effects as an interval per category at ``pos`` (``order``:
    which category sits at each position); with ``show_trials``, every trial's effect
    as a dot.  Nothing when ``res`` has no trials."""
    b = res.band() if hasattr(res, "band") else None
    if b is None:
        return None
    idx = np.arange(len(pos)) if order is None else np.asarray(order)
    lo, hi = b["lo"][idx], b["hi"][idx]
    ok = np.isfinite(lo) & np.isfinite(hi)
    pos = np.asarray(pos, dtype="float64")
    if show_trials:
        T = trials_of(res)[:, idx]
        P = np.broadcast_to(pos, T.shape)
        a, v = (T, P) if horizontal else (P, T)
        ax.plot(a.ravel(), v.ravel(), ".", color=color, ms=2, alpha=0.3, label="trials")
    line = ax.hlines if horizontal else ax.vlines
    line(pos[ok], lo[ok], hi[ok], color=color, lw=2.2, alpha=0.55, label=band_label(res))
    return lo[ok], hi[ok]
