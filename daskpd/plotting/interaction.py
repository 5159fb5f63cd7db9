"""The H-statistic's figure: a heat map of the pairwise H² and, beside it, each feature's
total H² as bars on the same rows (:func:`plot_h_statistic`).

Features are ordered by their total H² (strongest first; by their strongest pair when no
total was computed).  At most :data:`~daskpd.plotting._base.MAX_LABELS` features are
drawn (the strongest; the title says how many more); the values are printed in the cells
up to :data:`ANNOTATE` features.  A cell whose pair was not computed is light grey.
"""
from __future__ import annotations

import numpy as np

from ._base import FONT, MAX_LABELS, fit_figure, new_figure, short_label
from .model import response_words

__all__ = ["plot_h_statistic", "ANNOTATE"]

#: the cells carry their value up to this many features
ANNOTATE = 12
_CMAP = "Purples"
_BAR = "#5b3f8c"


def _order(res) -> list:
    m = res.matrix()
    names = list(m.index)
    total = dict(zip(res.features, np.asarray(res.h2_total, dtype=float)))
    strongest = np.nan_to_num(m.max(axis=1, skipna=True).to_numpy(dtype=float), nan=-1.0)
    key = [(-np.nan_to_num(total.get(f, np.nan), nan=-1.0), -s, i) for i, (f, s) in enumerate(zip(names, strongest))]
    return [names[k[2]] for k in sorted(key)]


def plot_h_statistic(res, ax=None, *, top_k: int | None = None, target=None, cmap=_CMAP, annotate=None):
    """Draw ``res`` (an :class:`~daskpd.model._hstat.HStatisticResult`).  ``ax``: the
    heat map goes into it (the totals then are not drawn: pass no ``ax`` for the figure
    with both); returns the heat map's axes.  ``top_k``: the features drawn (default all,
    at most 30)."""
    names = _order(res)
    n_all = len(names)
    k = min(n_all, MAX_LABELS) if top_k is None else max(1, min(n_all, int(top_k)))
    names = names[:k]
    mat = res.matrix().loc[names, names].to_numpy(dtype=float)
    totals = {f: i for i, f in enumerate(res.features)}
    with_totals = ax is None and any(f in totals for f in names)
    created = ax is None
    if created:
        side = max(3.2, 0.42 * k + 1.6)
        widths = [max(2.0, 0.42 * k + 1.2), 2.4] if with_totals else None
        fig, axes = new_figure(1, 2 if with_totals else 1, figsize=(side + (2.6 if with_totals else 0.8), side),
                               **({"gridspec_kw": {"width_ratios": widths}} if widths else {}))
        ax = axes[0] if with_totals else axes
    fig = ax.figure
    import matplotlib

    cm = (matplotlib.colormaps[cmap] if isinstance(cmap, str) else cmap).with_extremes(bad="#eeeeee")
    finite = mat[np.isfinite(mat)]
    vmax = max(float(finite.max()) if finite.size else 1.0, 1e-12)
    im = ax.imshow(np.ma.masked_invalid(mat), cmap=cm, vmin=0.0, vmax=vmax, aspect="equal")
    ax.set_xticks(np.arange(k))
    ax.set_yticks(np.arange(k))
    labels = [short_label(f) for f in names]
    ax.set_xticklabels(labels, rotation=90, fontsize=max(FONT, 9 if k <= 12 else FONT))
    ax.set_yticklabels(labels, fontsize=max(FONT, 9 if k <= 12 else FONT))
    show = (k <= ANNOTATE) if annotate is None else bool(annotate)
    if show:
        for i in range(k):
            for j in range(k):
                v = mat[i, j]
                if np.isfinite(v):
                    ax.text(j, i, f"{v:.2f}" if v >= 0.005 or v == 0 else f"{v:.0e}", ha="center", va="center",
                            fontsize=FONT, color="white" if v > 0.55 * vmax else "#222222")
    cb = fig.colorbar(im, ax=ax, shrink=0.8, pad=0.02)
    cb.set_label("pairwise H²", fontsize=9)
    cb.ax.tick_params(labelsize=FONT)
    more = f"; top {k} of {n_all}" if n_all > k else ""
    of = response_words(res)  # a classifier's class, named
    ax.set_title(f"Friedman's H²{' of ' + of if of else ''}\n({res.n_points:,} points, {res.n_rows:,} rows{more})"
                 if of else f"Friedman's H² ({res.n_points:,} points, {res.n_rows:,} rows{more})", fontsize=10)
    if with_totals:
        bx = axes[1]
        y = np.arange(k)
        vals = np.array([res.h2_total[totals[f]] if f in totals else np.nan for f in names], dtype=float)
        bx.barh(y, np.nan_to_num(vals), color=_BAR, alpha=0.8, height=0.6)
        b = res.band()
        if b is not None:
            lo = np.array([b["total"]["lo"][totals[f]] if f in totals else np.nan for f in names], dtype=float)
            hi = np.array([b["total"]["hi"][totals[f]] if f in totals else np.nan for f in names], dtype=float)
            ok = np.isfinite(lo) & np.isfinite(hi)
            bx.errorbar(vals[ok], y[ok], xerr=[np.maximum(vals[ok] - lo[ok], 0), np.maximum(hi[ok] - vals[ok], 0)],
                        fmt="none", ecolor="#222222", capsize=2, lw=1)
        bx.set_ylim(k - 0.5, -0.5)
        bx.set_yticks(y)
        bx.set_yticklabels([])
        bx.tick_params(axis="x", labelsize=FONT)
        bx.set_xlim(0, max(1e-12, float(np.nanmax(np.r_[vals, 0.0])) * 1.15))
        bx.set_xlabel("total H² (vs. all others)", fontsize=9)
        bx.set_title("total", fontsize=10)
    if created:
        fit_figure(fig)
        if with_totals:  # the bars level with the heat map's rows: its final height, then no more layout
            fig.canvas.draw()
            p, q = ax.get_position(), bx.get_position()
            fig.set_layout_engine("none")
            bx.set_position([q.x0, p.y0, q.width, p.height])
    return ax
