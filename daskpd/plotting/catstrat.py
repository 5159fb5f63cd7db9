"""CatStratPD plots: readable from 2 to 10,000 categories.

* ``kind="bar"``: horizontal bars sorted by effect, each labelled with its row count.
  With more than ``top_k`` (default 30) categories only the ``top_k`` with the most rows
  are drawn (the axis label says so: "... and k more"); names longer than 28 characters
  are cut.
* ``kind="strip"``: every category as a point, sorted by effect (x = rank), point area
  growing with the row count, colour by disjoint group (with a legend of the groups);
  rows per category in the bottom quarter (a twin axis, log when skewed): separate
  light bars up to 60 categories, beyond that one filled step area summing groups of
  consecutive categories (at most one step per 4 pixels); the ``label_k`` lowest and
  highest categories are named.
* ``kind="auto"`` (default): bars up to ``top_k`` categories, the strip beyond.
"""
from __future__ import annotations

import numpy as np

from ._base import FONT, MAX_LABELS, count_bars, get_axes, short_label, value_label
from .bands import draw_band_bars, flat_limits, trials_of

__all__ = ["plot_catstratpd"]


def _label(v) -> str:
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return "NaN"
    try:
        import pandas as pd

        if v is pd.NA:
            return "NaN"
    except ImportError:  # pragma: no cover
        pass
    return str(v)


def plot_catstratpd(res, ax=None, *, kind: str = "auto", top_k: int = MAX_LABELS, label_k: int = 5,
                    show_counts: bool = True, color="#1f4e8c", title: str | None = None, show_band: bool = True,
                    show_trials: bool = False):
    """Draw ``res`` (a CatStratPDResult); returns the matplotlib Axes.  With trials
    (``n_trials > 1``) each category's band is an interval (``show_band``), and
    ``show_trials`` adds every trial's effect as a dot; effects whose bands could hold a
    flat line are drawn on a value axis spanning at least two standard deviations of the
    target (``params["target_std"]``)."""
    if kind not in ("auto", "bar", "strip"):
        raise ValueError(f"kind must be 'auto', 'bar' or 'strip'; got {kind!r}")
    if not isinstance(top_k, (int, np.integer)) or top_k < 1:
        raise ValueError(f"top_k must be a positive integer; got {top_k!r}")
    ok = np.flatnonzero(np.isfinite(res.pd))
    if kind == "auto":
        kind = "bar" if len(ok) <= top_k else "strip"
    labels = np.array([_label(v) for v in res.categories], dtype=object)
    count = np.asarray(res.count, dtype="float64")
    if kind == "bar":
        ax = _bar(res, ax, ok, labels, count, top_k, show_counts, color, show_band, show_trials)
    else:
        ax = _strip(res, ax, ok, labels, count, label_k, show_counts, show_band, show_trials)
    ax.set_title(title if title is not None else
                 f"CatStratPD: {res.target} vs {res.feature}" + (
                     f" ({res.n_groups} disjoint groups)" if res.n_groups > 1 else ""))
    return ax


def _bar(res, ax, ok, labels, count, top_k, show_counts, color, show_band=True, show_trials=False):
    shown = ok
    note = ""
    if len(ok) > top_k:
        shown = ok[np.argsort(-count[ok], kind="stable")[:top_k]]
        note = f" (top {top_k} of {len(ok)} by rows; \u2026 and {len(ok) - top_k:,} more)"
    shown = shown[np.argsort(res.pd[shown], kind="stable")]
    height = max(2.5, 0.28 * len(shown) + 1.0)
    ax = get_axes(ax, figsize=(6.5, height))
    y = np.arange(len(shown))
    vals = res.pd[shown]
    ax.barh(y, vals, color=color, alpha=0.85)
    ax.set_yticks(y)
    ax.set_yticklabels([short_label(t) for t in labels[shown]], fontsize=FONT if len(shown) > 20 else 9)
    ax.axvline(0, color="#444", lw=0.8)
    # the axis holds every bar, band and trial (nothing clipped), with a little room; on the
    # target's scale when the effects are not distinguishable from flat
    ends = [vals, [0.0]]
    b = res.band() if (show_band or show_trials) and hasattr(res, "band") else None
    if b is not None:
        ends += [b["lo"][shown], b["hi"][shown]]
        if show_trials:
            ends.append(np.asarray(trials_of(res))[:, shown].ravel())
    ends = np.concatenate([np.asarray(e, dtype="float64").ravel() for e in ends])
    ends = ends[np.isfinite(ends)]
    lo, hi = float(ends.min()), float(ends.max())
    pad = 0.06 * ((hi - lo) or 1.0)
    ax.set_xlim(*flat_limits(res, lo - pad, hi + pad))
    if show_counts:  # the rows of each category, in a column right of the axes: clear of every bar and band
        right = ax.secondary_yaxis("right")
        right.set_yticks(y)
        right.set_yticklabels([f"n={int(c):,}" if c == int(c) else f"n={c:.3g}" for c in count[shown]],
                              fontsize=FONT, color="#555")
        right.tick_params(axis="y", length=0)
        right.spines["right"].set_visible(False)
    if b is not None:
        draw_band_bars(ax, res, y, shown, color="#c0392b", horizontal=True, show_trials=show_trials)
    ax.set_xlabel(value_label(res, " (mean-centred)" if res.centered else ""))
    ax.set_ylabel(res.feature + note)
    return ax


def _strip(res, ax, ok, labels, count, label_k, show_counts, show_band=True, show_trials=False):
    ax = get_axes(ax, figsize=(9, 4.5))
    order = ok[np.argsort(res.pd[ok], kind="stable")]
    x = np.arange(len(order))
    vals = res.pd[order]
    c = count[order]
    big = 60 if len(order) <= 300 else 25
    size = 3 + big * np.sqrt(c / c.max()) if len(c) and c.max() > 0 else 8
    groups = res.group[order]
    if res.n_groups > 1:
        cmap = _plt_cmap()
        colors = cmap(groups % 10)  # integer input: the colormap's own colours
    else:
        colors = "#1f4e8c"
    if show_counts and len(order):
        # rows per category: separate light bars in the bottom quarter, a log axis when skewed
        count_bars(ax, x, c, label="rows", log=bool(c.max() > 50 * max(1.0, np.median(c))), ranks=True)
    ax.scatter(x, vals, s=size, c=colors, alpha=0.8, linewidths=0)
    if show_band or show_trials:
        drawn = draw_band_bars(ax, res, x, order, color="#c0392b", show_trials=show_trials)
        if drawn is not None and len(vals):  # the value axis: the effects and the band, on the target's
            both = np.concatenate([vals, *drawn])  # scale when not distinguishable from flat
            pad = 0.08 * ((np.nanmax(both) - np.nanmin(both)) or 1.0)
            ax.set_ylim(*flat_limits(res, np.nanmin(both) - pad, np.nanmax(both) + pad))
    if res.n_groups > 1:
        _group_legend(ax, groups, c)
    # name the label_k lowest and highest categories, fanned out so that they do not overlap
    k = min(label_k, len(order) // 2)
    line = dict(arrowstyle="-", lw=0.4, color="#999")
    for j in range(k):
        lo, hi = j, len(order) - 1 - j
        ax.annotate(short_label(labels[order[lo]]), (x[lo], vals[lo]), xytext=(14, 6 + 10 * j), textcoords="offset points",
                    fontsize=FONT, color="#333", ha="left", arrowprops=line)
        ax.annotate(short_label(labels[order[hi]]), (x[hi], vals[hi]), xytext=(-14, -6 - 10 * j), textcoords="offset points",
                    fontsize=FONT, color="#333", ha="right", va="top", arrowprops=line)
    ax.set_xticks([])
    ax.set_xlim(-1, max(1, len(order)))
    ax.set_xlabel(f"{res.feature}: {len(order):,} categories by effect (size: rows)")
    ax.set_ylabel(value_label(res, " (mean-centred)" if res.centered else ""))
    return ax


def _group_legend(ax, groups, count, max_entries: int = 10):
    """One legend entry per disjoint group (its colour, categories and rows); beyond
    ``max_entries`` groups the colours repeat and the last entry says so."""
    from matplotlib.lines import Line2D

    cmap = _plt_cmap()
    ids = np.unique(groups)
    handles = []
    for g in ids[:max_entries - 1] if len(ids) > max_entries else ids:
        m = groups == g
        handles.append(Line2D([], [], ls="", marker="o", ms=6, color=cmap(int(g) % 10),
                              label=f"group {int(g)}: {int(m.sum()):,} cat., {int(count[m].sum()):,} rows"))
    if len(ids) > max_entries:
        rest = len(ids) - (max_entries - 1)
        handles.append(Line2D([], [], ls="", marker="o", ms=6, color="#999",
                              label=f"{rest} more groups (colours repeat)"))
    ax.legend(handles=handles, title="disjoint groups (placed by mean y)", fontsize=FONT,
              title_fontsize=FONT, loc="upper left", framealpha=0.85)


def _plt_cmap():
    import matplotlib

    return matplotlib.colormaps["tab10"]
