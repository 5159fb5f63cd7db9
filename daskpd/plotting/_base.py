"""What every plot of :mod:`daskpd.plotting` draws with: pyplot (imported lazily, with a
non-interactive backend when there is no display), new axes, tick labels that do not
overlap, and rows per position as light bars on a twin axis.  It imports nothing of
daskpd, so every plotting module (and every result's ``plot()``) can use it.
"""
from __future__ import annotations

import bisect
import os
import warnings

import numpy as np

__all__ = ["pyplot", "get_axes", "value_label", "new_figure", "fit_ticklabels", "fit_figure", "count_bars", "label_categories",
           "pick_labels", "short_label", "refit_strips", "COUNT_FRACTION", "MAX_LABELS", "MAX_BARS",
           "SEPARATE_BARS", "FONT"]

#: at most this many named categories on an axis (the rest are counted in the axis label)
MAX_LABELS = 30
#: category names longer than this are cut (with an ellipsis)
MAX_LABEL_CHARS = 28
#: the smallest font size of any text a plot draws
FONT = 8
#: a count strip of more positions is drawn as one filled step area, not separate bars
SEPARATE_BARS = 60
#: a count strip has at most this many steps (fewer on narrow axes: one per 5 pixels)
MAX_BARS = 200


def pyplot():
    """Import pyplot lazily, with a non-interactive backend when there is no display."""
    import matplotlib

    if not os.environ.get("DISPLAY") and not os.environ.get("MPLBACKEND"):
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def value_label(res, suffix: str = "") -> str:
    """The value axis of a model-free curve: "partial dependence of y", saying how a
    boolean target was read."""
    boolean = " (True = 1, False = 0)" if (getattr(res, "params", None) or {}).get("target_boolean") else ""
    return f"partial dependence of {res.target}{boolean}{suffix}"


def new_figure(nrows=1, ncols=1, figsize=(6, 4), **kw):
    """``(fig, axes)`` of a new figure laid out by matplotlib's constrained layout (labels,
    titles, twin axes and colour bars kept apart at draw time)."""
    return pyplot().subplots(nrows, ncols, figsize=figsize, layout="constrained", **kw)


def get_axes(ax=None, figsize=(6, 4)):
    """``ax``, or new axes of a new (constrained-layout) figure of ``figsize`` when it is None."""
    if ax is None:
        _, ax = new_figure(figsize=figsize)
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
            labs = axis.get_majorticklabels()
            texts = [t.get_text() for t in labs]
            size = labs[0].get_fontsize() if labs else None
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
                                    ha="center" if name == "x" else "right", fontsize=size)
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
    """Lay out (the figure's own layout engine, else ``tight_layout``), then de-overlap
    every visible axes' tick labels, then lay out again."""
    engine = fig.get_layout_engine()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "tight_layout not applied": cosmetic
        if engine is None:
            fig.tight_layout()
        fig.canvas.draw()
        refit_strips(fig)
        for a in fig.axes:
            if a.get_visible():
                fit_ticklabels(a)
        if engine is None:
            fig.tight_layout()
        else:
            fig.canvas.draw()


def short_label(text, n: int = MAX_LABEL_CHARS) -> str:
    """``text`` as a string, cut to ``n`` characters with an ellipsis."""
    text = str(text)
    return text if len(text) <= n else text[: n - 1] + "\u2026"


def pick_labels(n: int, priority=None, max_labels: int = MAX_LABELS) -> np.ndarray:
    """Indices (sorted) of at most ``max_labels`` of ``n`` positions to name.

    All of them when ``n <= max_labels``.  Otherwise the positions of highest
    ``priority`` first (e.g. rows or absolute effect; evenly spaced when None), skipping
    any closer than ``n / max_labels`` positions to one already named, so the names are
    spread along the axis and never crowd.
    """
    if n <= max_labels:
        return np.arange(n)
    if priority is None:
        return np.unique(np.round(np.linspace(0, n - 1, max_labels)).astype(int))
    pr = np.nan_to_num(np.asarray(priority, dtype="float64"), nan=-np.inf)
    gap = n / max_labels
    chosen: list[int] = []

    for i in np.argsort(-pr, kind="stable"):
        k = bisect.bisect_left(chosen, i)
        if (k < len(chosen) and chosen[k] - i < gap) or (k > 0 and i - chosen[k - 1] < gap):
            continue
        chosen.insert(k, int(i))
        if len(chosen) == max_labels:
            break
    return np.asarray(chosen, dtype=int)


def label_categories(ax, pos, labels, *, axis: str = "x", priority=None, max_labels: int = MAX_LABELS) -> int:
    """Name at most ``max_labels`` of the categories at ``pos`` on ``ax``'s ``axis``.

    Names are cut to :data:`MAX_LABEL_CHARS` characters, drawn at :data:`FONT` points,
    horizontal when they fit side by side and vertical otherwise (x axis).  Which are
    named: see :func:`pick_labels`.  Returns how many categories are left unnamed (for
    the caller's axis label: "... and k more")."""
    pos = np.asarray(pos)
    fig = ax.figure
    box = ax.get_position()
    along = (box.width * fig.get_figwidth() if axis == "x" else box.height * fig.get_figheight()) * fig.dpi
    # no more names than fit side by side at FONT (vertical on x), with room for layout to narrow the axes
    max_labels = max(1, min(max_labels, int(0.9 * along / (1.2 * FONT * fig.dpi / 72))))
    idx = pick_labels(len(pos), priority, max_labels)
    texts = [short_label(labels[i]) for i in idx]
    target = ax.xaxis if axis == "x" else ax.yaxis
    target.set_ticks(pos[idx] if len(idx) else [])
    if axis == "x":
        vertical = _too_wide(ax, texts)
        target.set_ticklabels(texts, fontsize=FONT, rotation=90 if vertical else 0, ha="center")
    else:
        target.set_ticklabels(texts, fontsize=FONT)
    return len(pos) - len(idx)


def _too_wide(ax, texts) -> bool:
    """Would ``texts``, side by side and horizontal, be wider than the axes allow?"""
    if not texts:
        return False
    fig = ax.figure
    width_px = ax.get_position().width * fig.get_figwidth() * fig.dpi
    char_px = 0.6 * FONT * fig.dpi / 72  # a generous average glyph width
    longest = max(len(t) for t in texts) * char_px
    return longest + 4 > width_px / max(1, len(texts))


def unnamed_note(k: int, by: str | None = None) -> str:
    """`` (... and k more, not named)`` for an axis label; empty when k == 0."""
    if k <= 0:
        return ""
    return f" (named: {'the largest ' + by if by else 'a spread'}; \u2026 and {k:,} more)"


#: counts drawn under a curve take at most this fraction of the axes' height
COUNT_FRACTION = 0.25


def _strip_steps(ax) -> int:
    """Steps a count strip gets on ``ax``: one per 5 pixels of its width before layout
    (layout may narrow the axes: still at most one step per 4 pixels), 20 to MAX_BARS."""
    fig = ax.figure
    width_px = ax.get_position().width * fig.get_figwidth() * fig.dpi
    return int(np.clip(width_px // 5, 20, MAX_BARS))


def count_bars(ax, x, count, *, label: str = "rows", fraction: float = COUNT_FRACTION, edges=None,
               color="#bbb", log: bool = False, ranks: bool = False, max_bars: int | None = None):
    """Rows per position on a twin axis, kept in the bottom ``fraction`` of the axes.

    ``x``: positions, or ``edges`` (len(count) + 1 bin edges).  Up to
    :data:`SEPARATE_BARS` positions: separate light bars (70% of the gap to the nearest
    neighbour, or of the bin), never a solid wall.  More: ONE filled step area, with the
    positions summed into at most ``max_bars`` equal-width bins (default one per 5
    pixels of the axes' width, at most :data:`MAX_BARS`), so a 1,000-bin curve does not
    draw 1,000 hairlines; the count axis label then says what a step holds.  ``ranks``:
    ``x`` are consecutive ranks (categories sorted by effect): steps hold whole groups of
    k categories.  ``log``: a log count axis (from half the smallest count).  The count
    label sits right of its own tick labels (placed by matplotlib at draw time), from the
    bottom of the axes up.  :func:`fit_figure` re-bins a step area whose axes the layout
    narrowed below 4 pixels a step.  Returns the twin Axes.
    """
    count = np.nan_to_num(np.asarray(count, dtype="float64"))
    tw = ax.twinx()
    if edges is not None:
        edges = np.asarray(edges, dtype="float64")
        centre = (edges[:-1] + edges[1:]) / 2
    else:
        centre = np.asarray(x, dtype="float64")
    n = len(centre)
    sedges, h, text = _strip_data(centre, count, edges, ranks, max_bars or _strip_steps(ax), label)
    base = _strip_base(h, log)
    if sedges is not None:
        tw.stairs(np.maximum(h, base), sedges, baseline=base, fill=True, color=color, alpha=0.7, lw=0, zorder=0)
        tw._daskpd_strip = dict(centre=centre, count=count, edges=edges, ranks=ranks, label=label, log=log,
                                fraction=fraction, fixed=max_bars is not None)
    elif n:
        if n > 1:
            gap = np.diff(centre) if edges is None else np.diff(edges)
            width = 0.7 * (np.minimum(np.r_[gap[0], gap], np.r_[gap, gap[-1]]) if edges is None else gap)
        else:
            width = 0.7 * (np.diff(edges) if edges is not None else np.ones(1))
        tw.bar(centre, np.maximum(h, base) - base, bottom=base, width=width, color=color, alpha=0.55, zorder=0,
               linewidth=0)
    _strip_axis(tw, h, base, log, fraction, text)
    ax.set_zorder(tw.get_zorder() + 1)
    ax.patch.set_visible(False)
    return tw


def _strip_data(centre, count, edges, ranks, steps, label):
    """``(step_edges, heights, label)`` of a count strip; ``step_edges`` None: separate bars."""
    n = len(centre)
    if n <= SEPARATE_BARS:
        return None, count, label
    if ranks:
        k = int(np.ceil(n / steps))
        sedges = np.arange(0, n + k, k, dtype="float64") - 0.5
        sedges[-1] = min(sedges[-1], n - 0.5)
        h, _ = np.histogram(np.arange(n), bins=sedges, weights=count)
        return sedges, h, (f"rows per {k} categories" if k > 1 else label)
    if edges is None:
        mid = (centre[:-1] + centre[1:]) / 2
        edges = np.r_[centre[0] - (mid[0] - centre[0]), mid, centre[-1] + (centre[-1] - mid[-1])]
    if n > steps:
        sedges = np.linspace(edges[0], edges[-1], steps + 1)
        h, _ = np.histogram(centre, bins=sedges, weights=count)
        return sedges, h, f"rows per 1/{steps} of the range"
    return edges, count, label


def _strip_base(h, log: bool) -> float:
    pos = h[h > 0]
    return max(0.5, 0.5 * float(pos.min())) if log and len(pos) else 0.0


def _strip_axis(tw, h, base, log, fraction, label) -> None:
    """The count axis: the strip in the bottom ``fraction``, two ticks, the label."""
    top = float(h.max()) if len(h) and h.max() > 0 else 1.0
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
    # the label: right of the count tick labels (matplotlib places x at draw time), from
    # the bottom of the axes up, so it never sits on the tick labels nor on the curve's axis
    tw.set_ylabel(label, color="#666", fontsize=FONT)
    tw.yaxis.label.set_y(0.0)
    tw.yaxis.label.set_horizontalalignment("left")
    tw.tick_params(axis="y", colors="#666", labelsize=FONT)


def refit_strips(fig) -> bool:
    """Re-bin the step-area count strips of ``fig`` whose axes the layout narrowed below 4
    pixels a step (to one step per 5 pixels); call after a draw.  Did any change?"""
    from matplotlib.patches import StepPatch

    changed = False
    for tw in fig.axes:
        info = getattr(tw, "_daskpd_strip", None)
        steps = [p for p in tw.patches if isinstance(p, StepPatch)]
        if not info or info["fixed"] or len(steps) != 1:
            continue
        width = tw.bbox.width
        if len(steps[0].get_data().values) <= max(20, width / 4):
            continue
        n_steps = int(np.clip(width // 5, 20, MAX_BARS))
        sedges, h, text = _strip_data(info["centre"], info["count"], info["edges"], info["ranks"], n_steps,
                                      info["label"])
        if sedges is None:
            continue
        base = _strip_base(h, info["log"])
        steps[0].set_data(np.maximum(h, base), sedges, baseline=base)
        _strip_axis(tw, h, base, info["log"], info["fraction"], text)
        changed = True
    return changed
