"""StratPD plots."""
from __future__ import annotations

import numpy as np

from . import _ax, count_bars


def plot_stratpd(res, ax=None, *, show_segments: bool = True, show_counts: bool = True, color="#1f4e8c",
                 segment_color="#9ab", title: str | None = None):
    """The curve; optionally a sample of per-leaf slope segments and the rows per x.

    Segments are drawn from the curve's value at their left end with the leaf's slope,
    so their fan shows how much the leaves disagree.  Counts go on a twin axis as
    separate light bars in the bottom quarter of the axes.
    """
    ax = _ax(ax)
    sup = res.supported & np.isfinite(res.pd)
    x, y = res.x[sup], res.pd[sup]
    if show_segments and res.segments and len(res.segments.get("slope", [])):
        x0, x1, s = res.segments["x0"], res.segments["x1"], res.segments["slope"]
        base = np.interp(x0, x, y) if len(x) else np.zeros_like(x0)
        from matplotlib.collections import LineCollection

        segs = np.stack([np.c_[x0, base], np.c_[x1, base + s * (x1 - x0)]], axis=1)
        ax.add_collection(LineCollection(segs, colors=segment_color, linewidths=0.6, alpha=0.5,
                                         label="leaf slopes (sample)"))
    ax.plot(x, y, "-", color=color, lw=2, marker="." if len(x) < 60 else None, label="StratPD")
    if show_counts and len(res.x):
        # separate bars in the bottom quarter (a step outline beyond 400 positions)
        count_bars(ax, res.x, res.count, label="rows per bin" if res.binned else "rows per x")
    if len(y):
        pad = 0.1 * (np.nanmax(y) - np.nanmin(y) or 1.0)
        ax.set_ylim(np.nanmin(y) - pad, np.nanmax(y) + pad)
        ax.set_xlim(res.x.min(), res.x.max())
    ax.set_xlabel(res.feature)
    ax.set_ylabel(f"partial dependence of {res.target}")
    ax.set_title(title if title is not None else f"StratPD: {res.target} vs {res.feature}")
    return ax
