"""``report.html``: one self-contained page per run, readable offline.

Every image is a PNG embedded as a ``data:`` URI; there is no script, no stylesheet
link and no web font, so the file can be mailed, archived or opened from a USB stick.
All text that comes from the job (names, descriptions, feature names, categories,
paths, the spec itself) is HTML-escaped.
"""
from __future__ import annotations

import base64
import html
import json
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd

from ..plotting.importance import plot_importances
from ..results.base import atomic_path
from ..results.support import SUPPORT_NOTE
from .newold import DRIFT_DIR

__all__ = ["write_report", "rewrite_report", "render_report", "importance_figure", "embed_png", "page", "INTERACTIONS_FILE"]

#: the run's interaction table (the H-statistic's), which the report shows with its plot
INTERACTIONS_FILE = "interactions.parquet"

_CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:0 auto;max-width:1100px;padding:1.2em;
color:#222;background:#fff;line-height:1.4}
h1{font-size:1.5em;margin-bottom:.2em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
h3{margin-bottom:.3em}
table{border-collapse:collapse;margin:.5em 0;font-size:.9em}td,th{border:1px solid #ddd;padding:.25em .6em;
text-align:left;vertical-align:top}th{background:#f4f4f4}td.n{text-align:right;font-variant-numeric:tabular-nums}
.scroll{max-width:100%;overflow-x:auto}.scroll table{font-size:.8em}.scroll td,.scroll th{padding:.2em .4em}
.scroll th{font-weight:600;overflow-wrap:normal}.scroll td{overflow-wrap:anywhere}
img{max-width:100%;height:auto;border:1px solid #eee}
.meta{color:#555}.summary{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:.85em;color:#333}
pre{background:#f7f7f7;padding:.8em;overflow:auto;font-size:.85em}
.curve{margin:1.2em 0 2em 0}.warn{color:#a40}nav a{margin-right:1em}
"""


def esc(value) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def embed_png(path: str | os.PathLike, alt: str) -> str:
    data = Path(path).read_bytes()
    if not data.startswith(b"\x89PNG\r\n\x1a\n"):
        raise ValueError(f"{path} is not a PNG file")
    b64 = base64.b64encode(data).decode("ascii")
    return f'<img src="data:image/png;base64,{b64}" alt="{esc(alt)}">'


def page(title: str, body: str) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            f"<title>{esc(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n{body}\n</body>\n</html>\n")


def _fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, (float, np.floating)):
        if not math.isfinite(v):
            return "" if math.isnan(v) else str(v)
        if v != 0 and (abs(v) >= 1e6 or abs(v) < 1e-3):
            return f"{v:.4g}"
        return f"{v:,.4f}".rstrip("0").rstrip(".") if abs(v) < 1000 else f"{v:,.1f}"
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return f"{int(v):,}"
    return str(v)


def html_table(df: pd.DataFrame, max_rows: int = 200) -> str:
    rows = df.head(max_rows)
    # headers may break at their underscores; the table sits in a box that scrolls
    # sideways rather than widening the page when it still does not fit
    head = "".join(f"<th>{esc(c).replace('_', '_<wbr>')}</th>" for c in rows.columns)
    body = []
    for _, r in rows.iterrows():
        cells = []
        for v in r.tolist():
            num = isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
            cells.append(f"<td class=\"n\">{esc(_fmt(v))}</td>" if num else f"<td>{esc(_fmt(v))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    more = f"<p class=\"meta\">({len(df) - max_rows:,} more rows not shown)</p>" if len(df) > max_rows else ""
    return (f"<div class=\"scroll\"><table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
            f"</div>{more}")


def _kv_table(pairs) -> str:
    return "<table>" + "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in pairs) + "</table>"


def importance_figure(table: pd.DataFrame, title: str = "importance"):
    """The importance chart of a run: the same drawing as ``ImportanceResult.plot()``
    (:func:`daskpd.plotting.importance.plot_importances`: bars coloured by kind, +-1 sd
    error bars from ``importance_std``, values printed), from the run's long table."""
    t = table.drop(columns=[c for c in ("method", "rank") if c in table.columns])
    if "feature" in t.columns:
        t = t.set_index("feature")
    t.index = t.index.astype(str)
    t["importance"] = pd.to_numeric(t["importance"], errors="coerce")
    ax = plot_importances(t, title=title)
    return ax.figure


def band_meta(curve: pd.DataFrame) -> str:
    """The report's words about a curve's bootstrap band, when it has one: the widest
    interval, next to the curve's range (the plot shades the band)."""
    if "pd_lo" not in curve.columns or not curve["pd_lo"].notna().any():
        return ""
    width = float((curve["pd_hi"] - curve["pd_lo"]).max())
    rng = float(curve["pd"].max() - curve["pd"].min())
    return (f"; shaded: the bootstrap band (pd_lo, pd_hi, pd_std columns), widest {_fmt(width)} against a range of "
            f"{_fmt(rng)}")


#: the columns of the report's drift table (RUN/drift/comparisons.parquet has them all)
DRIFT_COLUMNS = ["test", "ref_run_id", "method", "feature", "status", "drift_sig", "z", "z_crit", "mdc", "where",
                 "why"]


def _drift_section(run_dir: Path, drift: list) -> str:
    """The run's new-against-old comparisons (docs/drift.md): what each compared, or why
    it was not made, and one row a curve, drifted curves first."""
    out = ["<h2 id=\"drift\">Drift: new rows against old</h2>"]
    for t in drift:
        if t.get("skipped"):
            out.append(f"<p class=\"meta\">{esc(t.get('test'))}: not made ({esc(t['skipped'])})</p>")
            continue
        verdict = ("<b class=\"warn\">drift</b>: " + esc(", ".join(f"{d['method']} {d['feature']}"
                                                                    for d in t.get("drifted", [])))
                   if t.get("status") == "drift" else "no drift")
        out.append(f"<p>{esc(t.get('test'))}: {esc(t.get('new_files'))} new file(s), {_fmt(t.get('rows_new'))} rows "
                   f"against the {_fmt(t.get('rows_old'))} rows of run {esc(t.get('ref_run_id'))} &mdash; {verdict} "
                   f"<span class=\"meta\">(level {esc(t.get('alpha'))} a comparison, threshold "
                   f"{esc(t.get('threshold'))}, {esc(t.get('n_trials'))} trials)</span></p>")
    path = run_dir / DRIFT_DIR / "comparisons.parquet"
    if path.is_file():
        t = pd.read_parquet(path)
        t = t.assign(_s=(t["status"] != "drifted").astype(int)).sort_values(["_s", "z"], ascending=[True, False])
        out.append(html_table(t[DRIFT_COLUMNS].reset_index(drop=True)))
        out.append("<p class=\"meta\">drifted: a point moved beyond the paired trials' noise (z &gt; z_crit, "
                   "Bonferroni-t over the points, Holm across the curves) by more than the threshold of the "
                   "curve's scale; mdc: the change this test finds with probability 0.8; see docs/drift.md. "
                   "drift/points.parquet holds every position.</p>")
    return "\n".join(out)


def render_report(run_dir: str | os.PathLike, manifest: dict, curves: pd.DataFrame, imp: pd.DataFrame) -> str:
    run_dir = Path(run_dir)
    job, run_id = manifest.get("job"), manifest.get("run_id")
    parts = [f"<h1>daskpd: {esc(job)}</h1>",
             f"<p class=\"meta\">run <b>{esc(run_id)}</b> &middot; target <b>{esc(manifest.get('target'))}</b>"
             f" &middot; finished {esc(manifest.get('finished_at'))}</p>"]
    if manifest.get("description"):
        parts.append(f"<p>{esc(manifest['description'])}</p>")
    plots = manifest.get("plots", [])
    inter_plots = [p for p in plots if p["kind"] == "interaction"]
    drift = manifest.get("drift") or []
    parts.append('<nav>' + ('<a href="#drift">Drift</a>' if drift else '') + '<a href="#importance">Importance</a>'
                 + ('<a href="#interactions">Interactions</a>' if inter_plots else '')
                 + '<a href="#curves">Curves</a><a href="#rows">Rows</a><a href="#run">Run</a>'
                 '<a href="#spec">Spec</a></nav>')

    # -------- overview
    inp = manifest.get("input", {})
    fp = inp.get("fingerprint", {})
    rows = manifest.get("rows", {})
    timings = manifest.get("timings_s", {})
    cl = manifest.get("cluster", {})
    overview = [
        ("methods", ", ".join(manifest.get("spec", {}).get("methods", []))),
        ("features", ", ".join(manifest.get("features", []))),
        ("categorical", ", ".join(manifest.get("categorical", [])) or "none"),
        ("input", inp.get("path")),
        ("filters", json.dumps(inp.get("filters")) if inp.get("filters") else "none"),
        ("input files", f"{fp.get('n_files', '?')} file(s), {_fmt(fp.get('bytes'))} bytes, "
                        f"{fp.get('mode', '')} fingerprint {fp.get('sha256', '')}"),
        ("rows read", _fmt(rows.get("rows_read"))),
        ("duration", f"{timings.get('total', float('nan')):.1f} s"),
        ("cluster", f"{cl.get('kind', '')} {cl.get('scheduler', '')}: {cl.get('n_workers', '?')} workers, "
                    f"{cl.get('threads', '?')} threads"),
    ]
    parts.append("<h2 id=\"overview\">Overview</h2>" + _kv_table(overview))
    if drift:
        parts.append(_drift_section(run_dir, drift))

    # -------- importance
    parts.append("<h2 id=\"importance\">Importance</h2>")
    imp_plots = [p for p in plots if p["kind"] == "importance"]
    if not imp_plots:
        parts.append("<p class=\"meta\">No importance method in this job.</p>")
    else:
        from .._importance_result import MEASURE_SENTENCES

        parts.append("<ul class=\"measures\">" + "".join(f"<li>{esc(v)}</li>" for v in MEASURE_SENTENCES.values())
                     + "</ul>")
    for p in imp_plots:
        parts.append(f"<h3>{esc(p['title'])}</h3>" + embed_png(run_dir / p["file"], p["title"]))
        t = imp[imp["method"] == p["method"]]
        parts.append(html_table(t.drop(columns=["method"]).reset_index(drop=True)))
        if "support" in t.columns and (t["support"].astype(str) != "ok").any():
            parts.append(f"<p class=\"meta\">{esc(SUPPORT_NOTE.replace(chr(10), ' '))}</p>")
    left = manifest.get("skipped_features") or {}
    if left:
        parts.append("<p class=\"meta\">Left out of the default features: "
                     + esc(", ".join(f"{f} ({why})" for f, why in left.items())) + "</p>")

    # -------- interactions (the H-statistic: its plot, summary and table)
    if inter_plots:
        parts.append("<h2 id=\"interactions\">Interactions</h2>")
        table = pd.read_parquet(run_dir / INTERACTIONS_FILE) if (run_dir / INTERACTIONS_FILE).exists() else None
        summ = {s["method"]: s["summary"] for s in manifest.get("summaries", []) if s.get("feature") is None}
        for p in inter_plots:
            parts.append(f"<h3>{esc(p['title'])}</h3>"
                         f"<p class=\"summary\">{esc(summ.get(p['method'], '')).replace(chr(10), '<br>')}</p>"
                         + embed_png(run_dir / p["file"], p["title"]))
            if table is not None:
                parts.append(html_table(table[table["method"] == p["method"]].drop(columns=["method"])
                                        .reset_index(drop=True)))

    # -------- curves
    parts.append("<h2 id=\"curves\">Curves</h2>")
    curve_plots = [p for p in plots if p["kind"] == "curve"]
    by_key = {(s["method"], s["feature"]): s["summary"] for s in manifest.get("summaries", [])}
    if not curve_plots:
        parts.append("<p class=\"meta\">No curves in this job.</p>")
    for p in curve_plots:
        summ = by_key.get((p["method"], p["feature"]), "")
        mine = (curves["method"] == p["method"]) & (curves["feature"] == p["feature"])
        n_points = int(mine.sum())
        parts.append(f"<div class=\"curve\"><h3 id=\"{esc(p['file'])}\">{esc(p['title'])}</h3>"
                     f"<p class=\"summary\">{esc(summ).replace(chr(10), '<br>')}</p>"
                     f"{embed_png(run_dir / p['file'], p['title'])}"
                     f"<p class=\"meta\">{n_points:,} rows in curves.parquet{band_meta(curves[mine])}</p></div>")

    # -------- rows
    parts.append("<h2 id=\"rows\">Rows</h2>")
    per = rows.get("per_curve", {})
    if per:
        df = pd.DataFrame([{"curve": k, **v} for k, v in per.items()])
        df = df.rename(columns={"n_rows": "rows read", "n_used": "used", "n_ignored": "ignored (single-x leaves)",
                                "n_missing_x": "missing x", "n_bad_y": "missing/inf y", "n_leaves": "leaves"})
        parts.append(html_table(df))
    else:
        parts.append("<p class=\"meta\">No row counts recorded.</p>")

    # -------- run
    parts.append("<h2 id=\"run\">Run</h2>")
    parts.append("<h3>Timings (s)</h3>" + _kv_table((k, f"{v:.2f}") for k, v in timings.items()))
    parts.append("<h3>Versions</h3>" + _kv_table(manifest.get("versions", {}).items()))
    extra = [(k, manifest[k]) for k in ("host", "started_at", "finished_at", "model_type") if manifest.get(k)]
    parts.append(_kv_table(extra))

    # -------- spec
    parts.append("<h2 id=\"spec\">Job spec</h2>")
    parts.append(f"<pre>{esc(manifest.get('spec_toml') or json.dumps(manifest.get('spec'), indent=2))}</pre>")
    parts.append("<p class=\"meta\">Generated by daskpd "
                 f"{esc(manifest.get('versions', {}).get('daskpd', ''))}.</p>")
    return page(f"daskpd: {job} / {run_id}", "\n".join(parts))


def write_report(run_dir: str | os.PathLike, manifest: dict, curves: pd.DataFrame, imp: pd.DataFrame) -> Path:
    """Write ``run_dir/report.html`` (the directory is the run's temporary one)."""
    run_dir = Path(run_dir)
    text = render_report(run_dir, manifest, curves, imp)
    path = run_dir / "report.html"
    with atomic_path(path) as tmp:
        Path(tmp).write_text(text, encoding="utf-8")
    return path


def rewrite_report(run_dir: str | os.PathLike, manifest: dict) -> Path:
    """Write ``run_dir/report.html`` again from the run's own tables and ``manifest``: a
    run that reuses an earlier run's results (hard links) describes itself -- its id,
    times and its drift section (no new rows, nothing compared) -- not the run it reuses.
    The linked file is replaced, not written through, so the earlier run's report stays."""
    run_dir = Path(run_dir)
    curves = pd.read_parquet(run_dir / "curves.parquet")
    imp = pd.read_parquet(run_dir / "importances.parquet")
    return write_report(run_dir, manifest, curves, imp)
