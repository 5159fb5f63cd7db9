"""Importance plots: horizontal bars with error bars, and a grid of the top-k curves.

Both take an :class:`daskpd.importance.ImportanceResult`; :func:`plot_importances`
also takes a bare importances table (the DataFrame returned by
:func:`daskpd.importances`).  matplotlib is imported only when drawing.
"""
from __future__ import annotations

import math

import numpy as np

from ..results.support import support_order
from ._base import FONT, MAX_LABELS, fit_figure, get_axes, new_figure, short_label

__all__ = ["plot_importances", "plot_curves"]

_COLORS = {"numeric": "#1f4e8c", "categorical": "#c0692b"}


def _table(obj):
    table = getattr(obj, "table", obj)
    if not hasattr(table, "columns") or not hasattr(table, "index"):
        raise TypeError(f"expected an ImportanceResult or an importances DataFrame; got {type(obj).__name__}")
    return table


def plot_importances(result, ax=None, *, column: str = "importance", top_k: int | None = None,
                     error: str | None = "auto", show_values: bool = True, title: str | None = None):
    """Horizontal bars of ``column``, most important at the top.

    ``error``: ``"auto"`` draws ``column + "_std"`` (the trial standard deviation) as
    error bars when present; a column name draws that column; None draws none.
    Bars are coloured by kind (numeric / categorical).  ``top_k`` keeps the largest
    ``top_k`` features; by default all up to 30, else the top 30 (the title says how
    many more).  Names longer than 28 characters are cut.  Returns the Axes.
    """
    table = _table(result)
    if column not in table.columns:
        raise ValueError(f"column {column!r} is not in the importances table; it has {', '.join(map(str, table.columns))}")
    if top_k is not None and (not isinstance(top_k, (int, np.integer)) or isinstance(top_k, bool) or top_k < 1):
        raise ValueError(f"top_k must be a positive integer or None; got {top_k!r}")
    t = support_order(table, column)  # the supported features first, by value
    n_all = len(t)
    if top_k is None and n_all > MAX_LABELS:
        top_k = MAX_LABELS
    if top_k is not None:
        t = t.head(top_k)
    if error == "auto":
        error = f"{column}_std" if f"{column}_std" in t.columns else None
    elif error is not None and error not in t.columns:
        raise ValueError(f"error column {error!r} is not in the importances table")
    n = len(t)
    ax = get_axes(ax, figsize=(6.5, max(2.0, 0.35 * n + 1.0)))
    vals = t[column].to_numpy(dtype="float64")
    pos = np.arange(n)[::-1]  # most important at the top
    kinds = t["kind"].tolist() if "kind" in t.columns else ["numeric"] * n
    colors = [_COLORS.get(k, "#777") for k in kinds]
    xerr = t[error].to_numpy(dtype="float64") if error else None
    # a row without a flag (a model-based measure in a job's table, which has no support) is not flagged
    flags = ([f if isinstance(f, str) else "ok" for f in t["support"].tolist()] if "support" in t.columns
             else ["ok"] * n)
    bars = ax.barh(pos, np.nan_to_num(vals), xerr=xerr, color=colors, ecolor="#333",
                   capsize=3 if xerr is not None else 0, height=0.7)
    for bar, flag in zip(bars, flags):  # a flagged feature's bar is pale and hatched, never like a supported one
        if flag != "ok":
            bar.set_alpha(0.35)
            bar.set_hatch("//")
    ax.set_yticks(pos)
    ax.set_yticklabels([short_label(f) for f in t.index], fontsize=FONT if n > 20 else None)
    if show_values:
        hi = np.nanmax(vals + (np.nan_to_num(xerr) if xerr is not None else 0)) if n else 0
        for p, v, e in zip(pos, vals, xerr if xerr is not None else [None] * n):
            label = "n/a" if not np.isfinite(v) else (f"{v:.3g}" if e is None or not np.isfinite(e) else f"{v:.3g} ± {e:.2g}")
            flag = flags[n - 1 - p]
            label += "" if flag == "ok" else f" ({flag.replace('_', ' ')})"
            ax.text((0 if not np.isfinite(v) else v) + (e if e is not None and np.isfinite(e) else 0) + 0.01 * (hi or 1),
                    p, label, va="center", fontsize=FONT)
        if n and np.isfinite(hi) and hi > 0:
            ax.set_xlim(0, hi * 1.25)
    ax.set_xlabel(column.replace("_", " "))
    present = sorted(set(kinds))
    if len(present) > 1 or set(flags) != {"ok"}:
        from matplotlib.patches import Patch

        handles = [Patch(color=_COLORS.get(k, "#777"), label=k) for k in present] if len(present) > 1 else []
        if set(flags) != {"ok"}:
            handles.append(Patch(facecolor="#bbb", alpha=0.5, hatch="//", label="low / no support (ranked last)"))
        ax.legend(handles=handles, loc="lower right", fontsize=8)
    target = getattr(result, "target", None)
    default = f"StratPD {column.replace('_', ' ')}" + (f" for {target}" if target else "")
    if n_all > n:
        default += f" (top {n}; \u2026 and {n_all - n:,} more)"
    ax.set_title(title if title is not None else default)
    return ax


def plot_curves(result, top_k: int = 6, *, ncols: int = 3, column: str = "importance", figsize=None, **kwargs):
    """A grid of the ``top_k`` most important features' curves (each result's own plot).

    Each panel is titled with the feature and its ``column`` value.  Extra keyword
    arguments go to every curve's ``plot``.  The figure is laid out by matplotlib's
    constrained layout (titles, labels and count axes of neighbouring panels kept apart)
    and its tick labels thinned where they would still overlap.  Returns the matplotlib
    Figure.
    """
    if not hasattr(result, "curves") or not hasattr(result, "table"):
        raise TypeError(f"plot_curves needs an ImportanceResult (with .curves); got {type(result).__name__}")
    for name, v in (("top_k", top_k), ("ncols", ncols)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be a positive integer; got {v!r}")
    table = result.table
    if column not in table.columns:
        raise ValueError(f"column {column!r} is not in the importances table")
    feats = [f for f in support_order(table, column).index if f in result.curves][:top_k]
    n = max(1, len(feats))
    ncols = min(ncols, n)
    nrows = math.ceil(n / ncols)
    fig, axes = new_figure(nrows, ncols, figsize=figsize or (4.6 * ncols, 3.6 * nrows), squeeze=False)
    flat = axes.ravel()
    for ax, f in zip(flat, feats):
        res = result.curves[f]
        res.plot(ax=ax, **kwargs)
        v = table.loc[f, column]
        ax.set_title(f"{short_label(f)} ({column} {v:.3g})", fontsize=10)
    for ax in flat[len(feats):]:
        ax.set_visible(False)
    fit_figure(fig)
    return fig
