"""What every plot of :mod:`daskpd.plotting` draws with: pyplot (imported lazily, with a
non-interactive backend when there is no display), new axes, tick labels that do not
overlap, and rows per position as light bars on a twin axis.  It imports nothing of
daskpd, so every plotting module (and every result's ``plot()``) can use it.
"""
from __future__ import annotations

import numpy as np

__all__ = ["pyplot", "get_axes", "fit_ticklabels", "fit_figure", "count_bars", "COUNT_FRACTION"]


def pyplot():
    """Import pyplot lazily, with a non-interactive backend when there is no display."""
    import os

    import matplotlib

    if not os.environ.get("DISPLAY") and not os.environ.get("MPLBACKEND"):
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def get_axes(ax=None, figsize=(6, 4)):
    """``ax``, or new axes of a new figure of ``figsize`` when it is None."""
    plt = pyplot()
    if ax is None:
        _, ax = plt.subplots(figsize=figsize)
    return ax


def _label_boxes(axis, renderer):
    """Window extents of the visible, non-empty tick labels of ``axis``, in tick order."""
    out = []
    for tick in axis.get_major_ticks():
        lab = tick.label1
        if tick.get_visible() and lab.get_visible() and lab.get_text():
            out.append(lab.get_window_extent(renderer))
    return out


def _overlap(boxes, pad: float = 1.0) -> bool:
    """Do any two of ``boxes`` (consecutive tick labels) overlap, with ``pad`` pixels to spare?"""
    for a, b in zip(boxes[:-1], boxes[1:]):
        if (min(a.x1, b.x1) - max(a.x0, b.x0) > -pad) and (min(a.y1, b.y1) - max(a.y0, b.y0) > -pad):
            return True
    return False


def fit_ticklabels(ax, which: str = "both") -> None:
    """Make the tick labels of ``ax`` not overlap (measured with the renderer).

    Numeric axes get fewer ticks; fixed (categorical) x labels are first turned
    vertical, then thinned to every k-th label; fixed y labels are thinned.  Call it
    after the axes have their final size (after ``tight_layout``).
    """
    from matplotlib.ticker import FixedLocator, MaxNLocator

    fig = ax.figure
    renderer = fig.canvas.get_renderer()
    for name in ("x", "y"):
        if which not in ("both", name):
            continue
        axis = ax.xaxis if name == "x" else ax.yaxis
        if not _overlap(_label_boxes(axis, renderer)):
            continue
        loc = axis.get_major_locator()
        if isinstance(loc, FixedLocator):
            pos = list(axis.get_majorticklocs())
            texts = [t.get_text() for t in axis.get_majorticklabels()]
            if name == "x":
                for t in axis.get_majorticklabels():
                    t.set_rotation(90)
                    t.set_ha("center")
                fig.canvas.draw()
                if not _overlap(_label_boxes(axis, renderer)):
                    continue
            for k in range(2, max(3, len(pos) + 1)):
                keep = list(range(0, len(pos), k))
                axis.set_ticks([pos[i] for i in keep])
                axis.set_ticklabels([texts[i] for i in keep], rotation=90 if name == "x" else 0,
                                    ha="center" if name == "x" else "right")
                fig.canvas.draw()
                if not _overlap(_label_boxes(axis, renderer)):
                    break
        else:
            n = max(2, len(_label_boxes(axis, renderer)) - 1)
            while n >= 2:
                axis.set_major_locator(MaxNLocator(nbins=n, min_n_ticks=2))
                fig.canvas.draw()
                if not _overlap(_label_boxes(axis, renderer)):
                    break
                n -= 1


def fit_figure(fig) -> None:
    """``tight_layout``, then de-overlap every visible axes' tick labels, then lay out again."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "tight_layout not applied": cosmetic
        fig.tight_layout()
        fig.canvas.draw()
        for a in fig.axes:
            if a.get_visible():
                fit_ticklabels(a)
        fig.tight_layout()


#: counts drawn under a curve take at most this fraction of the axes' height
COUNT_FRACTION = 0.25


def count_bars(ax, x, count, *, label: str = "rows", fraction: float = COUNT_FRACTION, edges=None,
               color="#bbb", log: bool = False):
    """Rows per position as light bars on a twin axis, kept in the bottom ``fraction``
    of the axes and apart from each other (never a solid wall behind the curve).

    ``x``: bar centres (bars get 70% of the gap to their nearest neighbour), or
    ``edges`` (len(count) + 1 bin edges: bars get 70% of their bin, centred).  More than
    400 positions: one outline step curve instead of bars.  ``log``: a log count axis
    (bars from half the smallest count).  Returns the twin Axes.
    """
    count = np.asarray(count, dtype="float64")
    tw = ax.twinx()
    ok = np.isfinite(count)
    top = float(np.nanmax(count)) if ok.any() else 0.0
    if edges is not None:
        edges = np.asarray(edges, dtype="float64")
        centre, width = (edges[:-1] + edges[1:]) / 2, 0.7 * np.diff(edges)
    else:
        centre = np.asarray(x, dtype="float64")
        if len(centre) > 1:
            gap = np.diff(centre)
            near = np.minimum(np.r_[gap[0], gap], np.r_[gap, gap[-1]])
            width = 0.7 * near
        else:
            width = np.ones(len(centre))
    pos = count[ok & (count > 0)]
    base = max(0.5, 0.5 * float(pos.min())) if log and len(pos) else 0.0
    h = np.maximum(np.nan_to_num(count), base) - base
    if len(centre) > 400:
        tw.step(centre, h + base, where="mid", color="#999", lw=0.7, alpha=0.8, zorder=0)
    elif len(centre):
        tw.bar(centre, h, bottom=base, width=width, color=color, alpha=0.55, zorder=0, linewidth=0)
    top = top or 1.0
    if log and base > 0 and top > base:
        tw.set_yscale("log")
        tw.set_ylim(base, base * (top / base) ** (1 / fraction))
        ticks = [10.0 ** k for k in range(int(np.ceil(np.log10(base))), int(np.floor(np.log10(top))) + 1)]
        tw.set_yticks(ticks[:: max(1, len(ticks) // 2)] or [top])
        tw.minorticks_off()
    else:
        from matplotlib.ticker import MaxNLocator

        tw.set_ylim(0, top / fraction)
        ticks = MaxNLocator(nbins=2, integer=True).tick_values(0, top)
        tw.set_yticks([t for t in ticks if 0 <= t <= top])
    tw.set_ylabel(label, color="#888")
    tw.yaxis.set_label_coords(1.04, fraction / 2)
    tw.tick_params(axis="y", colors="#888", labelsize=7)
    ax.set_zorder(tw.get_zorder() + 1)
    ax.patch.set_visible(False)
    return tw
