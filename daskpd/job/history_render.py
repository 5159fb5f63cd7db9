"""The drawing of :mod:`daskpd.job.history`: the curves and the importance of a job
across runs (matplotlib, imported when drawing) and the history directory
(``history.html``, ``drift.parquet``, ``drift.json``, ``plots/``) that
:func:`write_history` writes.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from ..plotting import label_categories, new_figure, pyplot
from ..results.base import write_parquet
from . import history_newold
from .report import embed_png, esc, html_table, page
from .store import commit, rmtree, safe_name
from .history_curves import categorical_points, is_categorical, numeric_points
from .history_runs import Run
from .history_stats import RANKED_BY, History, importance_shares, rank_rows, write_summary


#: the newest run's colour (strong); older runs are drawn in OLD_COLOR, fading with age
NEWEST_COLOR = "#c0392b"
PREVIOUS_COLOR = "#1f4e8c"
OLD_COLOR = "#7f8c8d"
#: smallest font of the history plots
FONT = 8


def run_styles(n: int) -> list[dict]:
    """Line styles of ``n`` runs, oldest first: the newest in a strong red on top, the
    previous one in blue, older ones grey and fainter the older they are."""
    out = []
    for i in range(n):
        if i == n - 1:
            out.append(dict(color=NEWEST_COLOR, alpha=1.0, lw=2.6, zorder=4))
        elif i == n - 2:
            out.append(dict(color=PREVIOUS_COLOR, alpha=0.9, lw=1.6, zorder=3))
        else:
            age = (n - 2 - i) / max(1, n - 2)  # 0 (just before the previous run) .. 1 (oldest)
            out.append(dict(color=OLD_COLOR, alpha=0.6 - 0.45 * age, lw=1.1, zorder=2))
    return out


def _run_label(run_id: str) -> str:
    """A run id on two lines when it is a timestamp (``20260101T020000Z``), so it fits horizontally."""
    if "T" in run_id and run_id.split("T", 1)[0].isdigit():
        d, t = run_id.split("T", 1)
        return f"{d}\nT{t}"
    return run_id


def _plot_feature(runs: list[Run], method: str, feature: str, path: Path, subtitle: str = "") -> None:
    fig = feature_figure(runs, method, feature, subtitle)
    fig.savefig(path, dpi=100)
    pyplot().close(fig)


def feature_figure(runs: list[Run], method: str, feature: str, subtitle: str = ""):
    """One curve across ``runs`` (oldest first): the newest in a strong colour on top, the
    previous one in blue, older ones grey and fading; categories in the newest run's
    order, at most 30 named; labels >= 8 pt, horizontal where they fit."""
    n = len(runs)
    styles = run_styles(n)
    fig, ax = new_figure(figsize=(8, 4.4))
    cat = False
    order = None
    for i, r in enumerate(runs):
        d = r.curves[(r.curves["method"] == method) & (r.curves["feature"] == feature)]
        if not len(d):
            continue
        st = styles[i]
        label = f"{r.run_id} (newest)" if i == n - 1 else (f"{r.run_id} (previous)" if i == n - 2 else r.run_id)
        if is_categorical(d):
            cat = True
            if order is None:
                order = _cat_order(runs[-1], method, feature, None) or list(categorical_points(d).index)
            s = categorical_points(d)
            s = s - s.mean() if len(s) else s
            y = s.reindex(order).to_numpy()
            ms = (5 if i == n - 1 else 3.5) if len(order) <= 40 else (3 if i == n - 1 else 2)
            ax.plot(np.arange(len(order)), y, "o", ms=ms, color=st["color"], alpha=st["alpha"], zorder=st["zorder"],
                    label=label)
        else:
            x, y = numeric_points(d)
            ax.plot(x, y, "-", label=label, **st)
    if cat:
        hidden = label_categories(ax, np.arange(len(order)), order) if order else 0
        more = f"; \u2026 and {hidden:,} more not named" if hidden else ""
        ax.set_xlabel(f"{feature}: {len(order):,} categories, sorted by the newest run's effect{more}", fontsize=9)
        ax.set_ylabel("partial dependence (mean-centred)", fontsize=9)
    else:
        ax.set_xlabel(feature, fontsize=9)
        ax.set_ylabel("partial dependence", fontsize=9)
    ax.tick_params(labelsize=FONT)
    ax.set_title(f"{method}: {feature} across {n} run(s)" + (f"\n{subtitle}" if subtitle else ""), fontsize=10)
    if n <= 12:
        handles, labels = ax.get_legend_handles_labels()
        ax.legend(handles[::-1], labels[::-1], fontsize=FONT, loc="best", title="newest first", title_fontsize=FONT)
    return fig


def _cat_order(run: Run, method: str, feature: str, fallback) -> list[str]:
    d = run.curves[(run.curves["method"] == method) & (run.curves["feature"] == feature)]
    s = categorical_points(d) if len(d) else fallback
    if s is None or not len(s):
        return []
    return list(s.sort_values(kind="stable").index)


#: the importance-across-runs plot draws at most this many features (the largest in the newest run)
MAX_IMPORTANCE_LINES = 10


def _plot_importance(runs: list[Run], method: str, path: Path, features=None) -> bool:
    fig = importance_figure(runs, method, features)
    if fig is None:
        return False
    fig.savefig(path, dpi=100)
    pyplot().close(fig)
    return True


def importance_figure(runs: list[Run], method: str, features=None):
    """Each feature's share of the importance across ``runs`` (the 10 largest in the newest
    run), run ids horizontal (timestamps on two lines) and thinned to what fits; None
    when no run has the ``method`` table."""
    rows = []
    for r in runs:
        for f, v in importance_shares(r.importances, method).items():
            if features is None or f in features:
                rows.append((r.run_id, f, v))
    if not rows:
        return None
    df = pd.DataFrame(rows, columns=["run_id", "feature", "share"]).pivot(index="run_id", columns="feature",
                                                                         values="share")
    df = df.reindex([r.run_id for r in runs])
    latest = df.iloc[-1].fillna(-np.inf).sort_values(ascending=False, kind="stable")
    cols = list(latest.index[:MAX_IMPORTANCE_LINES])
    fig, ax = new_figure(figsize=(8, 4.4))
    x = np.arange(len(df))
    import matplotlib as mpl

    cmap = mpl.colormaps["tab10"]
    for k, f in enumerate(cols):
        ax.plot(x, df[f].to_numpy(), "-o", ms=3.5, lw=1.6, color=cmap(k % 10), label=str(f))
    ax.axvline(x[-1], color=NEWEST_COLOR, lw=1, alpha=0.5, zorder=0)
    # run ids horizontal (timestamps on two lines), as many as fit side by side, the newest always
    labels = [_run_label(str(i)) for i in df.index]
    width_px = 0.75 * 8 * 100
    per = max(len(line) for lab in labels for line in lab.split("\n")) * 0.6 * FONT * 100 / 72 + 10
    label_categories(ax, x, labels, max_labels=max(2, int(width_px // per)))
    for t in ax.get_xticklabels():
        t.set_rotation(0)
    ax.set_xlabel("run (newest at the right)", fontsize=9)
    ax.set_ylabel("share of total importance", fontsize=9)
    ax.tick_params(labelsize=FONT)
    more = f" (the {len(cols)} largest; \u2026 and {df.shape[1] - len(cols)} more)" if df.shape[1] > len(cols) else ""
    ax.set_title(f"{method}: importance across runs{more}", fontsize=10)
    ax.legend(fontsize=FONT, loc="center left", bbox_to_anchor=(1.01, 0.5), title="newest run's order",
              title_fontsize=FONT)
    return fig


def write_history(h: History, out_dir: Path, last: int) -> Path:
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.parent / f".{out_dir.name}.tmp-{os.getpid()}"
    rmtree(tmp)
    (tmp / "plots").mkdir(parents=True)
    try:
        write_parquet(h.table, tmp / "drift.parquet")
        write_summary(h, tmp / "drift.json")
        shown = h.runs[-last:]
        parts = [f"<h1>daskpd history: {esc(h.job_dir.name)}</h1>",
                 f"<p class=\"meta\">{len(h.runs)} run(s): {esc(h.runs[0].run_id)} &hellip; "
                 f"{esc(h.runs[-1].run_id)}; plots show the last {len(shown)}; drift threshold {h.threshold:g}, "
                 f"level {h.alpha:g} per curve{' (from ' + esc(h.levels_by) + ')' if h.levels_by else ''}</p>"]
        latest = h.latest_pair()
        parts.append("<h2>Drift, last two runs</h2>")
        if len(latest):
            parts.append(f"<p class=\"meta\">Sorted by {esc(RANKED_BY)}.</p>")
            cols = ["method", "feature", "importance", "importance_change", "curve_distance", "curve_max",
                    "support_overlap", "drift", "noise_source", "z", "z_crit", "drift_sig", "status", "cause"]
            parts.append(html_table(latest[cols].reset_index(drop=True)))
        else:
            parts.append("<p>Only one run: nothing to compare yet.</p>")
        parts.append("<p class=\"meta\">drift = max(curve distance, curve max, |importance change|, "
                     "1 - support overlap), raw; z: the largest change in units of its noise (noise_source: "
                     "the curves' bands, else the importance's trials, else the rows per point); drift_sig: the "
                     "part of the drift beyond the noise (z &gt; z_crit, Bonferroni); drifted = drift_sig &gt; "
                     "threshold; noisy = raw drift above the threshold with no noise estimate; cause: data, "
                     "refit (the stratifying trees were refitted) or data+refit; see docs/jobs.md.</p>")
        parts.append(history_newold.html_section(h.runs[-1], h.new_vs_old, h.new_vs_old_points, tmp / "plots"))
        if h.pin_note:
            parts.append(f"<p class=\"meta\">No pinned run: {esc(h.pin_note)}.</p>")
        if h.pinned is not None and len(h.against):
            parts.append(f"<h2>Against run {esc(h.pinned.run_id)} (from {esc(h.pinned_by)})</h2>")
            parts.append(html_table(rank_rows(h.against)[["method", "feature", "curve_distance", "curve_max", "drift",
                                                           "noise_source", "z", "z_crit", "drift_sig", "status",
                                                           "cause"]].reset_index(drop=True)))
        parts.append("<h2>Importance across runs</h2>")
        for m in ("importances", "pd_variance"):
            fn = tmp / "plots" / f"importance-{m}.png"
            if _plot_importance(shown, m, fn, h.features):
                parts.append(embed_png(fn, f"{m} across runs"))
        parts.append("<h2>Curves across runs</h2>")
        parts.append(f"<p class=\"meta\">In the order of the drift table: {esc(RANKED_BY)} between the last "
                     "two runs.</p>")
        for m, f, sub in h.section_order(shown):
            fn = tmp / "plots" / f"{safe_name(m)}-{safe_name(f)}.png"
            _plot_feature(shown, m, f, fn, sub)
            parts.append(f"<h3>{esc(m)}: {esc(f)}</h3>" + embed_png(fn, f"{m} {f} across runs"))
        if len(h.table):
            parts.append("<h2>All consecutive pairs</h2>")
            parts.append("<p class=\"meta\">The main columns; drift.parquet has every column.</p>")
            cols = ["run_id", "prev_run_id", "method", "feature", "importance_change", "curve_distance", "curve_max",
                    "support_overlap", "drift", "noise_source", "z", "z_crit", "drift_sig", "status", "cause"]
            parts.append(html_table(h.table[cols].reset_index(drop=True), max_rows=500))
        (tmp / "history.html").write_text(page(f"daskpd history: {h.job_dir.name}", "\n".join(parts)),
                                          encoding="utf-8")
        commit(tmp, out_dir)
        tmp = None
    finally:
        if tmp is not None:
            rmtree(tmp)
    return out_dir
