"""Plots of the model-based family: PD (1-way lines / bars, 2-way heatmap or contour),
ICE, ALE (1-D curves, 2-D heatmap or contour), marginal plots, PD variance (summary bars
and detailed panels); the comparison figure is :mod:`daskpd.plotting.comparison`.
matplotlib is imported only when drawing.
"""
from __future__ import annotations

import math

import numpy as np

from ._base import (MAX_LABELS, SEPARATE_BARS, count_bars, fit_figure, get_axes, label_categories, new_figure,
                    short_label, unnamed_note)
from .bands import draw_band, draw_band_bars, flat_limits

__all__ = ["plot_pd", "plot_ice", "plot_ale", "plot_ale2d", "plot_marginal", "plot_pd_variance", "response_words"]

_BLUE = "#1f4e8c"


def _flat_scale(ax, res) -> None:
    """A curve not distinguishable from flat (its ``is_flat()``: a flat line fits its
    simultaneous band) on a value axis spanning at least ``FLAT_SPAN`` standard
    deviations of the target (``params["target_std"]``) or of the model's response
    (``params["response_std"]``), about the drawn limits' middle: a zoom onto its
    wiggles would make noise look like an effect.  Other curves keep their limits."""
    lo, hi = ax.get_ylim()
    new = flat_limits(res, lo, hi)
    if new != (lo, hi):
        ax.set_ylim(*new)


def _target(res, target=None):
    """The target's name: given, or the result's own (``target`` attribute or param), or None."""
    if target is not None:
        return str(target)
    t = getattr(res, "target", None)
    if t is None:
        t = (getattr(res, "params", None) or {}).get("target")
    return None if t is None else str(t)


def _ylabel(res, what="partial dependence", target=None):
    """``what`` of the model's response, naming the target when it is known: e.g.
    "partial dependence of predicted price", "ALE of P[churn = yes]"; a binary
    classifier's positive class (``classes_[1]``) is said to be one."""
    resp = getattr(res, "response", None)
    tc = getattr(res, "target_class", None)
    t = _target(res, target)
    classes = ((getattr(res, "params", None) or {}).get("model") or {}).get("classes")
    positive = " (positive class)" if classes is not None and len(classes) == 2 and tc == classes[1] else ""
    if resp == "predict_proba":
        return (f"{what} of P[{t} = {tc}]" if t else f"{what} of P[class = {tc}]") + positive
    if resp == "decision_function":
        return f"{what} of the decision function" + (f" for {t} = {tc}" if t else f" (class {tc})") + positive
    return f"{what} of predicted {t}" if t else f"{what} of the prediction"


def response_words(res) -> str:
    """A classifier's response as a label ("P[class = yes] (positive class)"); empty otherwise."""
    full = _ylabel(res, "")
    return full[4:] if full.startswith(" of P[") or full.startswith(" of the decision") else ""


def _output_name(res, c) -> str:
    if res.response == "predict_proba":
        return f"P[class = {c}]"
    if res.response == "decision_function":
        return f"class {c}"
    return f"output {c}"


def _plot_outputs(res, ax=None, *, title=None, target=None, kind="auto"):
    """A PD holding every class (or output): 1-way, one curve per class on one axes
    (points for categories, side by side); 2-way, one panel per class."""
    names = [_output_name(res, c) for c in res.outputs]
    if len(res.features) == 2:
        axes = _grid_axes(len(res.outputs), min(3, len(res.outputs)), ax, size=(5.2, 4.4))
        for a, c, name in zip(axes, res.outputs, names):
            plot_pd(res.output(c), ax=a, kind=kind, title=f"2-way PD, {name}", target=target)
        return _tidy(axes)
    cat = res.kinds[0] == "categorical"
    ax = get_axes(ax, figsize=_size(cat))
    x = res.grid_values[0]
    colors = _class_colors(len(res.outputs))
    pos = np.arange(len(x), dtype=float) if cat else np.asarray(x, dtype=float)
    width = 0.7 / len(res.outputs)
    for k, (c, name) in enumerate(zip(res.outputs, names)):
        one = res.output(c)
        y = np.asarray(one.average, dtype=float)
        if cat:
            off = pos + (k - (len(res.outputs) - 1) / 2) * width if len(x) <= SEPARATE_BARS else pos
            ax.plot(off, y, "o", color=colors[k], ms=5 if len(x) <= SEPARATE_BARS else 2.5, label=name)
            draw_band_bars(ax, one, off, color=colors[k])
        else:
            ax.plot(pos, y, "-", color=colors[k], lw=2, label=name)
            draw_band(ax, one, pos, color=colors[k])
    hidden = label_categories(ax, pos, _labels(x)) if cat else 0
    if cat:
        ax.set_xlim(-0.6, len(x) - 0.4)
    ax.set_xlabel(res.features[0] + unnamed_note(hidden))
    what = "class probability" if res.response == "predict_proba" else (
        "decision function" if res.response == "decision_function" else "prediction")
    t = _target(res, target)
    ax.set_ylabel(f"partial dependence of the {what}" + (f" ({t})" if t else ""))
    ax.set_title(title if title is not None else f"PD ({res.method}): {res.features[0]}, "
                 f"{len(res.outputs)} {'classes' if res.response in ('predict_proba', 'decision_function') else 'outputs'}")
    ax.legend(loc="best", fontsize="small", ncol=1 if len(names) <= 8 else 2)
    return ax


def _class_colors(n: int):
    import matplotlib

    cmap = matplotlib.colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


def _baseline(y) -> float:
    """Where categorical bars start: 0 when the bars' range reaches near 0, else the mean.

    Bars from the minimum would give the lowest category no bar at all; bars from 0
    are unreadable when every value is far from 0 (a price of 30,000 +- 500), so then
    the bars show deviations from the mean of the categories (drawn as a line)."""
    y = np.asarray(y, dtype=float)
    y = y[np.isfinite(y)]
    if not len(y):
        return 0.0
    lo, hi = float(y.min()), float(y.max())
    if lo <= 0 <= hi or (hi - lo) >= 0.2 * max(abs(lo), abs(hi)):
        return 0.0
    return float(y.mean())


def _size(categorical: bool):
    """A new figure's size: taller for categories (room for vertical names under the axes)."""
    return (6.5, 5.2) if categorical else (6, 4)


def _labels(values):
    return [str(v) for v in values]


def plot_pd(res, ax=None, *, kind: str = "auto", color=_BLUE, cmap="viridis", levels: int = 12, title=None,
            target=None, show_band: bool = True, show_trials: bool = False):
    """1-way PD: a line (numeric) or points with bars (categorical; bars from 0, or from
    the categories' mean when every value is far from 0); with trials (``n_trials > 1``)
    its band, shaded or as intervals (``show_band``), and every trial with
    ``show_trials``; a curve not distinguishable from flat on the response's scale
    (:func:`_flat_scale`).  2-way PD: ``kind="contour"``
    (filled contours, numeric pairs, the default) or ``"heatmap"``.  ``target`` names the
    target on the value axis."""
    if kind not in ("auto", "line", "heatmap", "contour"):
        raise ValueError(f"kind must be 'auto', 'line', 'heatmap' or 'contour'; got {kind!r}")
    if getattr(res, "outputs", None) is not None:
        return _plot_outputs(res, ax, title=title, target=target, kind=kind)
    if len(res.features) == 1:
        ax = get_axes(ax, figsize=_size(res.kinds[0] == "categorical"))
        x, y = res.grid_values[0], res.average
        if res.kinds[0] == "categorical":
            pos = np.arange(len(x))
            base = _baseline(y)
            many = len(x) > SEPARATE_BARS  # points only: hundreds of bars would be a wall
            if not many:
                ax.bar(pos, np.asarray(y, dtype=float) - base, bottom=base, color=color, alpha=0.35, width=0.6)
            ax.axhline(base, color="#444", lw=0.8, label=None if base == 0 else f"mean of the categories ({base:.6g})")
            ax.plot(pos, y, "o", color=color, ms=2.5 if many else 6)
            hidden = label_categories(ax, pos, _labels(x), priority=np.abs(np.asarray(y, dtype=float) - base))
            ax.set_xlim(-0.6, len(x) - 0.4)
            if show_band or show_trials:
                draw_band_bars(ax, res, pos, color=color, show_trials=show_trials)
            if base != 0:
                ax.legend(loc="best", fontsize="small")
            ax.set_xlabel(res.features[0] + unnamed_note(hidden, "effects"))
        else:
            ax.plot(x, y, "-", color=color, lw=2, marker="." if len(x) < 40 else None)
            draw_band(ax, res, x, color=color, show_band=show_band, show_trials=show_trials)
            ax.set_xlabel(res.features[0])
        _flat_scale(ax, res)
        ax.set_ylabel(_ylabel(res, target=target))
        ax.set_title(title if title is not None else f"PD ({res.method}): {res.features[0]}")
        return ax
    fresh = ax is None
    ax = get_axes(ax, figsize=(7.5, 6.5) if "categorical" in res.kinds else (6, 5))
    g0, g1 = res.grid_values
    Z = np.asarray(res.average)
    numeric = all(k == "numeric" for k in res.kinds)
    if kind == "auto":
        kind = "contour" if numeric and len(g0) > 2 and len(g1) > 2 else "heatmap"
    if kind == "contour" and not numeric:
        raise ValueError("a contour plot needs two numeric features; use kind='heatmap'")
    if kind == "contour":
        cs = ax.contourf(np.asarray(g0, dtype=float), np.asarray(g1, dtype=float), Z.T, levels=levels, cmap=cmap)
        ax.contour(np.asarray(g0, dtype=float), np.asarray(g1, dtype=float), Z.T, levels=levels, colors="k",
                   linewidths=0.4, alpha=0.5)
    else:
        cs = ax.imshow(Z.T, origin="lower", aspect="auto", cmap=cmap, interpolation="nearest")
    ax.figure.colorbar(cs, ax=ax, label=_ylabel(res, target=target))
    if kind == "heatmap":  # named after the colour bar took its width
        for axis, g in ((0, g0), (1, g1)):
            lab = [str(v) if res.kinds[axis] == "categorical" else f"{float(v):.3g}" for v in g]
            label_categories(ax, np.arange(len(g)), lab, axis="xy"[axis])
    ax.set_xlabel(res.features[0])
    ax.set_ylabel(res.features[1])
    ax.set_title(title if title is not None else f"2-way PD: {res.features[0]} x {res.features[1]}")
    if fresh and kind == "heatmap":
        fit_figure(ax.figure)  # names on both axes: thin them where the laid-out axes are too short
    return ax


def plot_ice(res, ax=None, *, max_lines: int | None = None, line_color="#7a8fa6", alpha: float = 0.3,
             color="#c0392b", show_pd: bool = True, title=None, target=None, show_band: bool = True,
             show_trials: bool = False):
    """The sampled ICE curves (thin) and the PD (thick); with trials (``n_trials > 1``)
    the PD's band (``show_band``) and every trial's PD (``show_trials``); a PD not
    distinguishable from flat on the response's scale (:func:`_flat_scale`)."""
    ax = get_axes(ax, figsize=_size(res.kind == "categorical"))
    lines = res.lines if max_lines is None else res.lines[:max_lines]
    cat = res.kind == "categorical"
    x = np.arange(len(res.grid)) if cat else np.asarray(res.grid, dtype=float)
    if len(lines):
        from matplotlib.collections import LineCollection

        segs = np.stack([np.broadcast_to(x, lines.shape), lines], axis=-1)
        ax.add_collection(LineCollection(segs, colors=line_color, linewidths=0.7, alpha=alpha,
                                         label=f"ICE ({len(lines)} rows)"))
        ax.autoscale_view()
    if show_pd:
        ax.plot(x, res.pd, "-", color=color, lw=2.5, label="PD (all rows)")
        if cat and (show_band or show_trials):
            draw_band_bars(ax, res, x, color=color, show_trials=show_trials)
        elif not cat:
            draw_band(ax, res, x, color=color, show_band=show_band, show_trials=show_trials)
    hidden = label_categories(ax, x, _labels(res.grid)) if cat else 0
    if show_pd:
        _flat_scale(ax, res)
    ax.set_xlabel(res.feature + unnamed_note(hidden))
    ax.set_ylabel(_ylabel(res, "centred ICE" if res.centered else "ICE", target=target))
    ax.set_title(title if title is not None else f"{'c-' if res.centered else ''}ICE: {res.feature}")
    ax.legend(loc="best", fontsize="small")
    return ax


def plot_ale(res, ax=None, *, color=_BLUE, show_counts: bool = True, title=None, target=None,
             show_band: bool = True, show_trials: bool = False):
    """ALE curve (numeric: at the bin edges; categorical: per ordered level) and the rows
    per bin; with trials (``n_trials > 1``) its band (``show_band``) and every trial
    (``show_trials``); a curve not distinguishable from flat on the response's scale
    (:func:`_flat_scale`).  A 2-D ALE result is drawn by :func:`plot_ale2d`."""
    if getattr(res, "x2", None) is not None:
        return plot_ale2d(res, ax=ax, title=title, target=target)
    cat = res.kind == "categorical"
    ax = get_axes(ax, figsize=_size(cat))
    x = np.arange(len(res.x)) if cat else np.asarray(res.x, dtype=float)
    if cat:  # a value per level: points on stems from 0 (the rows are the wide grey bars), never a line
        few = len(x) <= SEPARATE_BARS
        if few:
            ax.vlines(x, 0, np.asarray(res.ale, dtype=float), color=color, lw=2, alpha=0.6)
        ax.plot(x, res.ale, "o", color=color, ms=6 if few else 2.5, label="ALE")
    else:
        ax.plot(x, res.ale, "-o" if len(x) < 40 else "-", color=color, lw=2 if len(x) <= SEPARATE_BARS else 1.2,
                ms=4, label="ALE")
    if cat and (show_band or show_trials):
        draw_band_bars(ax, res, x, color=color, show_trials=show_trials)
    elif not cat:
        draw_band(ax, res, x, color=color, show_band=show_band, show_trials=show_trials)
    if show_counts:
        if cat:
            count_bars(ax, x, res.count, label="rows", ranks=True)
        else:
            count_bars(ax, None, res.count[1:], edges=x, label="rows per bin")
    hidden = label_categories(ax, x, _labels(res.x), priority=res.count) if cat else 0
    ax.axhline(0, color="#999", lw=0.6)
    _flat_scale(ax, res)
    ax.set_xlabel(res.feature + unnamed_note(hidden, "rows"))
    ax.set_ylabel(_ylabel(res, "ALE (centred)", target=target))
    ax.set_title(title if title is not None else f"ALE: {res.feature}")
    return ax


def plot_ale2d(res, ax=None, *, kind: str = "contour", cmap="RdBu_r", levels: int = 12, show_empty: bool = True,
               show_rug: bool = True, title=None, target=None):
    """2-D ALE of a numeric pair: ``kind="contour"`` (filled contours over the grid
    points, the default) or ``"heatmap"`` (one patch per grid point, as PyALE); a
    diverging colour map centred on 0.  ``show_empty`` marks the cells that held no rows
    (their effect was imputed from the nearest cell) with an x at the cell centre;
    ``show_rug`` ticks the bin edges on both axes."""
    if kind not in ("heatmap", "contour"):
        raise ValueError(f"kind must be 'heatmap' or 'contour'; got {kind!r}")
    ax = get_axes(ax, figsize=(6.4, 5))
    x0, x1 = np.asarray(res.x, dtype=float), np.asarray(res.x2, dtype=float)
    Z = np.asarray(res.ale, dtype=float)
    from matplotlib.colors import TwoSlopeNorm

    lim = float(np.nanmax(np.abs(Z))) if np.isfinite(Z).any() and np.nanmax(np.abs(Z)) > 0 else 1.0
    norm = TwoSlopeNorm(vcenter=0.0, vmin=-lim, vmax=lim)
    if kind == "contour" and len(x0) > 1 and len(x1) > 1:
        cs = ax.contourf(x0, x1, Z.T, levels=levels, cmap=cmap, norm=norm)
        ax.contour(x0, x1, Z.T, levels=cs.levels, colors="k", linewidths=0.4, alpha=0.5)
    else:
        cs = ax.pcolormesh(x0, x1, Z.T, shading="nearest", cmap=cmap, norm=norm)
    ax.figure.colorbar(cs, ax=ax, label=_ylabel(res, "2-D ALE (centred)", target))
    if show_empty and np.asarray(res.imputed).any():
        ii, jj = np.nonzero(np.asarray(res.imputed)[1:, 1:])
        cx, cy = (x0[ii] + x0[ii + 1]) / 2, (x1[jj] + x1[jj + 1]) / 2
        ax.plot(cx, cy, "x", color="#555", ms=4, mew=0.8, ls="none",
                label=f"no rows ({len(ii)} cells, imputed)")
        ax.legend(loc="upper right", fontsize="small", framealpha=0.8)
    if show_rug:
        ax.plot(x0, np.zeros_like(x0), "|", color="k", ms=6, transform=ax.get_xaxis_transform(), clip_on=False)
        ax.plot(np.zeros_like(x1), x1, "_", color="k", ms=6, transform=ax.get_yaxis_transform(), clip_on=False)
    ax.set_xlabel(res.features[0])
    ax.set_ylabel(res.features[1])
    ax.set_title(title if title is not None else f"2-D ALE: {res.features[0]} x {res.features[1]}")
    return ax


def plot_marginal(res, ax=None, *, show: str = "both", band: bool = True, title=None, target=None,
                  show_band: bool = True):
    """Mean per bin with a +-1 std band: of the target and/or of the prediction; with
    trials (``n_trials > 1``) the bootstrap interval of the bin means the trials are of
    (the target's, else the prediction's) as bars (``show_band``); means not
    distinguishable from flat on the target's (else the response's) scale
    (:func:`_flat_scale`)."""
    if show not in ("both", "y", "prediction"):
        raise ValueError(f"show must be 'both', 'y' or 'prediction'; got {show!r}")
    cat = res.kind == "categorical"
    ax = get_axes(ax, figsize=_size(cat))
    x = np.arange(len(res.x)) if cat else np.asarray(res.x, dtype=float)
    drew = False
    for key, mean, std, color in (("y", res.y_mean, res.y_std, "#27ae60"),
                                  ("prediction", res.pred_mean, res.pred_std, _BLUE)):
        if mean is None or show not in ("both", key):
            continue
        label = f"mean {res.target}" if key == "y" else (f"mean {response_words(res)}" if response_words(res)
                                                          else f"mean predicted {res.target}" if res.target
                                                          else "mean prediction")
        if cat:  # a mean per level: points with their +-1 std, side by side; no line between levels
            off = 0.15 if show == "both" and res.y_mean is not None and res.pred_mean is not None else 0.0
            xs = x + (-off if key == "y" else off) if len(x) <= SEPARATE_BARS else x
            ax.errorbar(xs, mean, yerr=std if band else None, fmt="o", color=color,
                        ms=5 if len(x) <= SEPARATE_BARS else 2.5, elinewidth=1, alpha=0.9, label=label)
        else:
            ax.plot(x, mean, "-o" if len(x) <= SEPARATE_BARS else "-", color=color,
                    lw=2 if len(x) <= SEPARATE_BARS else 1, ms=3, label=label)
            if band:
                ax.fill_between(x, mean - std, mean + std, color=color, alpha=0.15, lw=0)
        if show_band and key == ("y" if res.y_mean is not None else "prediction"):
            draw_band_bars(ax, res, xs if cat else x, color=color)
        drew = True
    if not drew:
        raise ValueError(f"nothing to plot: the result has no {show!r} curve")
    _flat_scale(ax, res)
    hidden = label_categories(ax, x, _labels(res.x), priority=res.count) if cat else 0
    ax.set_xlabel(res.feature + unnamed_note(hidden, "rows"))
    t = _target(res, target)
    pred = response_words(res) or "prediction" if res.pred_mean is not None else None
    what = " / ".join(w for w in (t if res.y_mean is not None else None, pred) if w)
    ax.set_ylabel(f"{what}: mean per bin (+-1 std)")
    ax.set_title(title if title is not None else f"Marginal plot: {res.feature}")
    ax.legend(loc="best", fontsize="small")
    return ax


def _grid_axes(n, n_cols, ax=None, size=(4.4, 3.6)):
    n_cols = max(1, min(n_cols, n))
    n_rows = math.ceil(n / n_cols)
    if ax is not None:
        axes = np.atleast_1d(np.asarray(ax, dtype=object)).ravel()
        if len(axes) < n:
            raise ValueError(f"need {n} axes, got {len(axes)}")
        return axes[:n]
    fig, axes = new_figure(n_rows, n_cols, figsize=(size[0] * n_cols, size[1] * n_rows), squeeze=False)
    axes = axes.ravel()
    for a in axes[n:]:
        a.set_visible(False)
    return axes[:n]


def _tidy(axes):
    """Lay the figure out and keep every panel's tick labels apart."""
    fit_figure(axes[0].figure)
    return axes


def plot_pd_variance(res, ax=None, *, kind: str = "summary", top_k: int | None = None, n_cols: int = 3,
                     color=_BLUE, target=None):
    """``kind="summary"``: horizontal bars, largest first.  ``"detailed"``: importance -> the PD
    of each feature titled with its importance; interaction -> per pair, the 2-way PD and
    the two conditional-importance curves."""
    if kind not in ("summary", "detailed"):
        raise ValueError(f"kind must be 'summary' or 'detailed'; got {kind!r}")
    ranked = res.ranking()
    n_all = len(ranked)
    if top_k is None and kind == "summary" and n_all > MAX_LABELS:
        top_k = MAX_LABELS  # at most ~30 named bars; the title says how many more
    if top_k is not None:
        ranked = ranked[:top_k]
    name = "importance" if res.method == "importance" else "interaction"
    if kind == "summary":
        ax = get_axes(ax, figsize=(6, max(2.5, 0.35 * len(ranked) + 1)))
        labels = [f if isinstance(f, str) else f"{f[0]} x {f[1]}" for f, _ in ranked]
        vals = [v for _, v in ranked]
        y = np.arange(len(vals))
        ax.barh(y, vals, color=color, alpha=0.8)
        ax.set_yticks(y)
        ax.set_yticklabels([short_label(t) for t in labels])
        ax.invert_yaxis()
        t = _target(res, target)
        ax.set_xlabel(f"PD variance {name}" + (f" (units of predicted {t})" if t and name == "importance" else ""))
        more = f" (top {len(ranked)}; \u2026 and {n_all - len(ranked):,} more)" if n_all > len(ranked) else ""
        ax.set_title(f"Feature {name} (PD variance){more}")
        return ax
    if res.method == "importance":
        axes = _grid_axes(len(ranked), n_cols, ax)
        for a, (f, v) in zip(axes, ranked):
            plot_pd(res.pd[f], ax=a, title=f"imp({f}) = {v:.3g}", target=target)
        return _tidy(axes)
    axes = _grid_axes(3 * len(ranked), 3 if n_cols < 3 else 3 * max(1, n_cols // 3), ax)
    idx = {f: i for i, f in enumerate(res.features)}
    for k, (pair, v) in enumerate(ranked):
        i = idx[pair]
        p = res.pd[pair]
        plot_pd(p, ax=axes[3 * k], title=f"inter({pair[0]},{pair[1]}) = {v:.3g}", target=target)
        cond_j, cond_i = res.conditional_values[i]
        a_j, a_i = res.conditional[i]
        for a, (cv, grid, f_var, f_fix, val, kd) in zip(
                axes[3 * k + 1:3 * k + 3],
                ((cond_j, p.grid_values[0], pair[1], pair[0], a_j, p.kinds[0]),
                 (cond_i, p.grid_values[1], pair[0], pair[1], a_i, p.kinds[1]))):
            xs = np.arange(len(grid)) if kd == "categorical" else np.asarray(grid, dtype=float)
            a.plot(xs, cv, "-o" if len(xs) < 40 else "-", color=color, ms=3)
            hidden = label_categories(a, xs, _labels(grid), priority=np.abs(np.asarray(cv, dtype=float))) \
                if kd == "categorical" else 0
            a.set_xlabel(f_fix + unnamed_note(hidden, "values"))
            a.set_ylabel(f"importance of {f_var}")
            a.set_title(f"inter({f_var}|{f_fix}) = {val:.3g}")
    return _tidy(axes)
