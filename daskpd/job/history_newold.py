"""``daskpd history``'s view of the new-against-old comparisons a run made (docs/drift.md).

A nightly run of an incremental job tests its new rows against the rows before them
(:mod:`.newold`) and writes the result into its ``drift/`` directory and its manifest.
:func:`latest` reads the newest run's comparisons; :func:`summary` is their part of
``drift.json``; :func:`format_table` prints them; :func:`html_section` draws them on the
history page (the new rows' curve against the old rows', with the change's simultaneous
band, drifted curves first).  :func:`pinned` names the run that ``--against`` and
``--window`` compare the newest one with (curve against curve, as consecutive runs);
without them, :func:`pinned_by_spec` takes the job spec's ``[history] baseline`` or
``window``.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from .newold import DRIFT_DIR
from .report import embed_png, esc, html_table
from .store import safe_name

__all__ = ["HistoryError", "latest", "summary", "format_table", "html_section", "pinned", "pinned_by_spec",
           "spec_history", "SHOWN_COLUMNS"]


class HistoryError(ValueError):
    """Not a job directory, or too few runs to compare (``daskpd.job.history.HistoryError``)."""


#: the columns printed and shown on the page, in this order
SHOWN_COLUMNS = ["test", "ref_run_id", "method", "feature", "status", "drift", "drift_sig", "z", "z_crit", "mdc",
                 "n_trials", "trials_needed", "rows_new", "rows_old", "where"]
_STATUS = {"drifted": 0, "ok": 1, "untested": 2}


def _read(run_path: Path, name: str) -> pd.DataFrame:
    p = Path(run_path) / DRIFT_DIR / name
    if not p.is_file():
        return pd.DataFrame()
    try:
        return pd.read_parquet(p)
    except (OSError, ValueError) as exc:
        raise HistoryError(f"{p} is unreadable: {exc}") from exc


def latest(run, features=None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the comparisons' table, their points) of ``run`` (a :class:`daskpd.job.history.Run`),
    drifted curves first then by ``z``; empty frames when it made none."""
    t, p = _read(run.path, "comparisons.parquet"), _read(run.path, "points.parquet")
    if features and len(t):
        t = t[t["feature"].isin(list(features))]
        p = p[p["feature"].isin(list(features))] if len(p) else p
    if len(t):
        t = t.assign(_s=t["status"].map(_STATUS).fillna(3), _z=t["z"])
        t = t.sort_values(["_s", "_z", "test", "method", "feature"], ascending=[True, False, True, True, True],
                          na_position="last", kind="stable").drop(columns=["_s", "_z"]).reset_index(drop=True)
    return t, p


def summary(run, table: pd.DataFrame) -> dict:
    """``drift.json``'s ``new_vs_old``: the run, what each comparison compared (its
    manifest record: the reference run, the new files and rows, or why it was not made),
    the counts of each status, the drifted curves with where they moved, and every curve's
    row."""
    tests = (run.manifest or {}).get("drift") or []
    counts = {s: int((table["status"] == s).sum()) if len(table) else 0 for s in _STATUS}
    keys = ["test", "ref_run_id", "method", "feature", "drift_sig", "z", "z_crit", "mdc", "where"]
    drifted = table[table["status"] == "drifted"][keys].to_dict("records") if len(table) else []
    made = [t for t in tests if not t.get("skipped")]
    status = "drift" if counts["drifted"] else ("no-drift" if made else "not-compared")
    return {"run_id": run.run_id, "status": status, "counts": counts, "tests": tests, "drifted": drifted,
            "curves": table.to_dict("records") if len(table) else []}


def format_table(run, table: pd.DataFrame) -> str:
    """The printed section: the comparisons of the newest run, or why there are none."""
    tests = (run.manifest or {}).get("drift") or []
    head = f"new rows against old (run {run.run_id}):"
    if not len(table):
        why = "; ".join(f"{t.get('test')}: {t['skipped']}" for t in tests if t.get("skipped"))
        return f"{head} no comparison" + (f" ({why})" if why else " (not an incremental job, or no earlier run)")
    lines = []
    for t in tests:
        if t.get("skipped"):
            lines.append(f"  {t.get('test')}: not made ({t['skipped']})")
        else:
            lines.append(f"  {t.get('test')}: {t.get('new_files')} new file(s), {t.get('rows_new') or 0:,} rows "
                         f"against the {t.get('rows_old') or 0:,} rows of run {t.get('ref_run_id')} (level "
                         f"{t.get('alpha'):g} a comparison, threshold {t.get('threshold'):g}, {t.get('n_trials')} "
                         "trials)")
    shown = table[SHOWN_COLUMNS].astype({"rows_new": "Int64", "rows_old": "Int64"}, errors="ignore")
    with pd.option_context("display.width", 220, "display.max_columns", 20, "display.max_colwidth", 70):
        body = shown.to_string(index=False, float_format=lambda v: f"{v:.4g}", na_rep="-")
    n = int((table["status"] == "drifted").sum())
    tail = f"{n} curve(s) drifted" if n else "no curve drifted"
    warn = table[np.isfinite(table["trials_needed"].astype(float))
                 & (table["trials_needed"].astype(float) > table["n_trials"].astype(float))]
    for r in warn.itertuples(index=False):
        tail += (f"\nwarning: {r.method} {r.feature}: {r.n_trials} trials are too few for this test; "
                 f"[history] n_trials = {int(r.trials_needed)} would find a change of the threshold")
    return "\n".join([head, *lines, body, tail])


def spec_history(runs: list, spec=None) -> dict:
    """The ``[history]`` table that ``--against`` / ``--window`` / ``--threshold`` /
    ``--alpha`` default to: of ``spec`` (a job spec given instead of the job directory),
    else of the spec the newest run recorded in its manifest; ``{}`` when there is none."""
    if spec is not None:
        h = spec.history
        return {"baseline": h.baseline, "window": h.window, "threshold": h.threshold, "alpha": h.alpha}
    got = ((runs[-1].manifest or {}).get("spec") or {}).get("history") if runs else None
    return got if isinstance(got, dict) else {}


def pinned_by_spec(runs: list, settings: dict) -> tuple:
    """``(run, by, note)``: the run ``[history] baseline`` or ``window`` names (of
    :func:`spec_history`) and the words that say so, or ``(None, by, note)`` with why it
    is not compared (no error: the flags were not given), or ``(None, "", "")``."""
    baseline, window = settings.get("baseline"), settings.get("window")
    if baseline is not None:
        by = f"[history] baseline = {baseline!r} in the job spec"
    elif window is not None:
        by = f"[history] window = {window} in the job spec"
    else:
        return None, "", ""
    try:
        return pinned(runs, baseline, window if baseline is None else None), by, ""
    except HistoryError as exc:
        why = str(exc).split(": ", 1)[1] if ": " in str(exc) else str(exc)
        return None, by, f"{by}: {why}; not compared"


def pinned(runs: list, against: str | None, window: int | None):
    """The run ``--against RUN_ID`` or ``--window N`` (the run N runs before the newest)
    names, or None; a :class:`HistoryError` when there is none."""
    if against is None and window is None:
        return None
    if against is not None and window is not None:
        raise HistoryError("--against and --window: give one or the other")
    if window is not None and (isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 1):
        raise HistoryError(f"--window {window}: expected an integer >= 1 (the run that many runs before the newest)")
    ids = [r.run_id for r in runs]
    if against is not None:
        if against not in ids[:-1]:
            raise HistoryError(f"--against {against!r}: not a complete run before the newest one "
                               f"({ids[-1]}); runs: {', '.join(ids)}")
        return runs[ids.index(against)]
    if window >= len(runs):
        raise HistoryError(f"--window {window}: the job has {len(runs)} complete run(s), so at most "
                           f"--window {len(runs) - 1}")
    return runs[-1 - window]


def _figure(table_row, pts: pd.DataFrame):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 3.0))
    ax_c, ax_d = fig.subplots(1, 2)
    cat = table_row.kind == "categorical"
    at = np.arange(len(pts)) if cat else pts["x"].to_numpy(dtype=float)
    for col, colour, label in (("old", "#1f4e8c", "old rows"), ("new", "#c0392b", "new rows")):
        v, s = pts[col].to_numpy(dtype=float), pts[f"{col}_se"].to_numpy(dtype=float)
        ax_c.plot(at, v, "o-" if not cat else "o", color=colour, label=label, ms=3)
        ax_c.fill_between(at, v - 2 * s, v + 2 * s, color=colour, alpha=0.15, lw=0)
    ch = pts["change"].to_numpy(dtype=float)
    ax_d.axhline(0, color="#7f8c8d", lw=0.8)
    ax_d.fill_between(at, pts["change_lo"].to_numpy(dtype=float), pts["change_hi"].to_numpy(dtype=float),
                      color="#7f8c8d", alpha=0.25, lw=0, step="mid" if cat else None)
    sig = pts["significant"].to_numpy(dtype=bool)
    ax_d.plot(at, ch, "o-" if not cat else "o", color="#2c3e50", ms=3)
    ax_d.plot(at[sig], ch[sig], "o", color="#c0392b", ms=5)
    ax_c.set_title(f"{table_row.feature}: new and old rows (±2 se)", fontsize=8)
    ax_d.set_title("change, simultaneous band", fontsize=8)
    for ax in (ax_c, ax_d):
        ax.tick_params(labelsize=7)
        if cat:
            ax.set_xticks(at)
            ax.set_xticklabels(pts["category"].astype(str).tolist(), rotation=60, fontsize=6)
    ax_c.legend(fontsize=7)
    fig.tight_layout()
    return fig


def html_section(run, table: pd.DataFrame, points: pd.DataFrame, plot_dir: Path) -> str:
    """The history page's section: the table, then each curve's new and old rows' curves
    and the change with its band (drifted curves first)."""
    parts = [f"<h2>New rows against old (run {esc(run.run_id)})</h2>"]
    if not len(table):
        parts.append(f"<p>{esc(format_table(run, table).split(': ', 1)[1])}</p>")
        return "\n".join(parts)
    parts.append("<p class=\"meta\">Each curve of the new rows against the same curve of the rows before them, "
                 "under one stratification, tested point by point against the paired trials' noise "
                 "(Bonferroni-t over the points, Holm across the curves); drifted = a point beyond the band that "
                 "moved by more than the threshold of the curve's scale; see docs/drift.md.</p>")
    parts.append(html_table(table[SHOWN_COLUMNS + ["why"]].reset_index(drop=True)))
    for row in table.itertuples(index=False):
        if not len(points):
            break
        pts = points[(points["test"] == row.test) & (points["method"] == row.method)
                     & (points["feature"] == row.feature)]
        if len(pts) < 2:
            continue
        fn = Path(plot_dir) / f"newold-{safe_name(row.test)}-{safe_name(row.method)}-{safe_name(row.feature)}.png"
        fig = _figure(row, pts)
        fig.savefig(fn, dpi=110)
        parts.append(f"<h3>{esc(row.test)}: {esc(row.method)} {esc(row.feature)} &mdash; {esc(row.status)}</h3>"
                     + (f"<p class=\"meta\">{esc(row.where)}</p>" if row.where else "")
                     + embed_png(fn, f"{row.feature}: new rows against old"))
    return "\n".join(parts)
