"""StratPD plots."""
from __future__ import annotations

import numpy as np

from ._base import count_bars, get_axes, value_label
from .bands import draw_band, flat_limits


def plot_stratpd(res, ax=None, *, show_segments: bool = True, show_counts: bool = True, color="#1f4e8c",
                 segment_color="#9ab", title: str | None = None, show_band: bool = True,
                 show_trials: bool = False):
    """The curve; optionally a sample of per-leaf slope segments and the rows per x.

    The curve is solid over the intervals that have a slope and a dashed flat step over
    those that have none (no leaf slope covers them, or fewer than ``min_slopes_per_x``
    under ``few_slopes="flat"``): the data say nothing about how y moves there.
    Segments are drawn from the curve's value at their left end with the leaf's slope,
    so their fan shows how much the leaves disagree (a steep one as a short tick, at most
    ``SEGMENT_RISE`` of the value axis high).  Counts go on a twin axis as
    separate light bars in the bottom quarter of the axes.  A result with trials
    (``n_trials > 1``) gets its band shaded (``show_band``) and, with ``show_trials``,
    every trial's curve (stratx's ``show_all_pdp``), faint.  A curve whose band could hold
    a flat line is drawn on a value axis spanning at least ``FLAT_SPAN`` (2) standard
    deviations of the target (``params["target_std"]``), not zoomed onto its wiggles.
    """
    ax = get_axes(ax)
    sup = res.supported & np.isfinite(res.pd)
    x, y = res.x[sup], res.pd[sup]
    solid, gaps = curve_pieces(res)
    marker = "." if len(x) < 60 else None
    for k, (a, b) in enumerate(solid):
        ax.plot(res.x[a:b + 1][sup[a:b + 1]], res.pd[a:b + 1][sup[a:b + 1]], "-", color=color, lw=2, marker=marker,
                label="StratPD" if k == 0 else None)
    for k, (a, b) in enumerate(gaps):
        ax.plot([res.x[a], res.x[b]], [res.pd[a], res.pd[b]], "--", color=color, lw=1.2, alpha=0.7,
                label="no slope (flat step)" if k == 0 else None)
    drawn = draw_band(ax, res, res.x, color=color, show_band=show_band, show_trials=show_trials, where=sup)
    if drawn is not None and len(drawn[0]):
        y = np.concatenate([y, drawn[0], drawn[1]])  # the limits below cover the band
    if show_counts and len(res.x):
        # separate bars in the bottom quarter (a step outline beyond 400 positions)
        count_bars(ax, res.x, res.count, label="rows per bin" if res.binned else "rows per x")
    if len(y):
        pad = 0.1 * (np.nanmax(y) - np.nanmin(y) or 1.0)
        # a curve its band cannot tell from flat: on the scale of the target's spread
        lo, hi = flat_limits(res, np.nanmin(y) - pad, np.nanmax(y) + pad)
        ax.set_ylim(lo, hi)
        ax.set_xlim(res.x.min(), res.x.max())
        if show_segments and res.segments and len(res.segments.get("slope", [])):
            _segments(ax, res.segments, x, res.pd[sup], SEGMENT_RISE * (hi - lo), segment_color)
    ax.set_xlabel(res.feature)
    ax.set_ylabel(value_label(res))
    ax.set_title(title if title is not None else f"StratPD: {res.target} vs {res.feature}")
    return ax


#: a leaf slope segment rises at most this share of the value axis: a steep slope over a
#: narrow interval is drawn as a short tick in its direction, not a streak across the axes
SEGMENT_RISE = 0.05


def _segments(ax, segments, x, y, max_rise: float, color) -> None:
    """The sample of leaf slope segments, each from the curve's value at its left end with
    its leaf's slope, over its interval or until it has risen ``max_rise``."""
    from matplotlib.collections import LineCollection

    x0, x1, s = (np.asarray(segments[k], dtype="float64") for k in ("x0", "x1", "slope"))
    base = np.interp(x0, x, y) if len(x) else np.zeros_like(x0)
    with np.errstate(divide="ignore", invalid="ignore"):
        reach = np.where(np.abs(s) > 0, max_rise / np.abs(s), np.inf)
    end = x0 + np.minimum(x1 - x0, reach)
    segs = np.stack([np.c_[x0, base], np.c_[end, base + s * (end - x0)]], axis=1)
    ax.add_collection(LineCollection(segs, colors=color, linewidths=0.6, alpha=0.5, label="leaf slopes (sample)",
                                     zorder=1))


def curve_pieces(res):
    """``(solid, gaps)``: runs ``(a, b)`` of position indices joined by intervals with a
    slope, and the flat steps ``(a, b)`` from a supported position across intervals
    without one to the next supported position."""
    sup = np.asarray(res.supported & np.isfinite(res.pd))
    idx = np.flatnonzero(sup)
    if len(idx) == 0:
        return [], []
    _, defined = res.intervals()
    solid, gaps = [], []
    start = idx[0]
    for a, b in zip(idx[:-1], idx[1:]):
        if b == a + 1 and defined[a]:
            continue
        solid.append((start, a))
        gaps.append((a, b))
        start = b
    solid.append((start, idx[-1]))
    return solid, gaps
