"""Drawing a curve's uncertainty: the band of its bootstrap trials, and the trials.

Every curve result with trials (``n_trials > 1``) has ``band()`` -- ``{"std", "lo",
"hi", "n"}`` per position -- and ``trial_curves()`` or ``trials_pd``.  The plot
functions call these helpers after drawing the curve: a shaded interval by default,
every trial's curve on request (``show_trials=True``, stratx's ``show_all_pdp``).
"""
from __future__ import annotations

import numpy as np

__all__ = ["band_label", "draw_band", "draw_band_bars", "trials_of"]


def band_label(res) -> str:
    lo, hi = res.params.get("band", (0.05, 0.95))
    return f"{100 * (hi - lo):.0f}% band ({res.n_trials} trials)"


def trials_of(res):
    """The trial curves as drawn: aligned on the curve's anchor when the result says how."""
    fn = getattr(res, "trial_curves", None)
    return fn() if fn is not None else getattr(res, "trials_pd", None)


def draw_band(ax, res, x, *, color, show_band: bool = True, show_trials: bool = False, where=None):
    """A shaded ``band()`` over numeric positions ``x`` (only where ``where`` is True, and
    the band finite); with ``show_trials``, every trial curve as a thin line.  Nothing
    when ``res`` has no trials.  Returns the (lo, hi) drawn, or None."""
    b = res.band() if hasattr(res, "band") else None
    if b is None:
        return None
    x = np.asarray(x, dtype="float64")
    ok = np.isfinite(b["lo"]) & np.isfinite(b["hi"])
    if where is not None:
        ok &= np.asarray(where, dtype=bool)
    if show_trials:
        T = trials_of(res)
        for k, t in enumerate(T):
            m = np.isfinite(t) if where is None else np.isfinite(t) & np.asarray(where, dtype=bool)
            ax.plot(x[m], t[m], "-", color=color, lw=0.5, alpha=0.25, label="trials" if k == 0 else None)
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
