"""The comparison figure (:func:`daskpd.compare`): StratPD (CatStratPD), FPD, ALE and the
marginal plot of one feature on one axes, vertically aligned; a numeric feature's as
curves, a categorical feature's as points per category (one marker per method, side by
side), never a line between categories.  matplotlib is imported only when drawing.
"""
from __future__ import annotations

import numpy as np

from ._base import SEPARATE_BARS, get_axes, label_categories, unnamed_note

__all__ = ["plot_comparison"]

# distinct hues (blue, red, purple, green, orange), apart also for the common colour deficiencies
# through the line styles and markers
_STYLE = {
    "StratPD": dict(color="#1f4e8c", lw=2.5, ls="-"),
    "CatStratPD": dict(color="#1f4e8c", lw=2.5, ls="-"),
    "FPD": dict(color="#c0392b", lw=2, ls="--"),
    "ALE": dict(color="#8e44ad", lw=2, ls="-."),
    "marginal (y)": dict(color="#2ca02c", lw=1.5, ls=":", marker="o", ms=3),
    "marginal (prediction)": dict(color="#ff7f0e", lw=1.2, ls=":", marker="s", ms=2),
}
_EXTRA = ["#8c564b", "#17becf", "#7f7f7f", "#bcbd22"]


_MARKERS = {"StratPD": "o", "CatStratPD": "o", "FPD": "s", "ALE": "D", "marginal (y)": "^",
            "marginal (prediction)": "v"}


def _plot_comparison_categories(res, ax, align, title):
    """A categorical feature: every method's value per category as points (one marker
    and colour per method), side by side at each category; categories in the order of
    the first curve's value."""
    al = res.aligned(align)
    order = res.category_order(align)
    ax = get_axes(ax, figsize=(8, 5.2))
    pos = {c: i for i, c in enumerate(order)}
    few = len(order) <= SEPARATE_BARS
    width = 0.7 / max(1, len(al)) if few else 0.0
    for i, (name, (lab, y)) in enumerate(al.items()):
        st = _STYLE.get(name, dict(color=_EXTRA[i % len(_EXTRA)]))
        x = np.array([pos[c] for c in lab], dtype=float) + (i - (len(al) - 1) / 2) * width
        ax.plot(x, y, ls="none", marker=_MARKERS.get(name, "P"), ms=6 if few else 3, color=st["color"],
                alpha=0.9, label=name)
    ax.axhline(0, color="#bbb", lw=0.6)
    hidden = label_categories(ax, np.arange(len(order)), order)
    ax.set_xlim(-0.6, len(order) - 0.4)
    ax.set_xlabel(res.feature + unnamed_note(hidden))
    what = {"auto": "centred over the common categories", "mean": "centred over the common categories",
            "left": "0 at the first common category", None: "as computed"}[align]
    ax.set_ylabel(f"effect on {res.target or 'prediction'}\n({what})")
    ax.set_title(title if title is not None else f"{res.feature}: CatStratPD vs FPD vs ALE vs marginal")
    ax.legend(loc="best", fontsize="small")
    return ax


def plot_comparison(res, ax=None, *, align="auto", title=None):
    """All curves on one axes, vertically aligned (see :func:`daskpd.model._compare.align_curves`);
    a categorical feature's as points per category."""
    if getattr(res, "kind", "numeric") != "numeric":
        return _plot_comparison_categories(res, ax, align, title)
    ax = get_axes(ax, figsize=(7, 4.5))
    al = res.aligned(align)
    for i, (name, (x, y)) in enumerate(al.items()):
        st = dict(_STYLE.get(name, dict(color=_EXTRA[i % len(_EXTRA)], lw=1.5, ls="-")))
        ax.plot(x, y, label=name, **st)
    ax.axhline(0, color="#bbb", lw=0.6)
    ax.set_xlabel(res.feature)
    what = {"auto": "aligned at the common left end", "left": "aligned at the common left end", "mean": "centred",
            None: "as computed"}[align]
    ax.set_ylabel(f"effect on {res.target or 'prediction'}\n({what})")
    ax.set_title(title if title is not None else f"{res.feature}: StratPD vs FPD vs ALE vs marginal")
    ax.legend(loc="best", fontsize="small")
    return ax
