"""Write a computed run into its (temporary) directory, straight from the shared result
format (:mod:`daskpd.results`): ``curves.parquet`` (every curve's frame, a ``method``
column first), ``importances.parquet`` (every importance table), ``ice.parquet`` (the
ICE lines), ``interactions.parquet`` (the H-statistic's table), plots, and the row counts
and summaries of the manifest.
"""
from __future__ import annotations

import platform
import warnings
from importlib import metadata
from pathlib import Path

import numpy as np
import pandas as pd

from .._data.request import left_out_note
from .._data.suspects import SUSPECT_WHYS
from ..model._ice_result import ICE_COLUMNS as ICE_TABLE
from ..plotting import new_figure, pyplot
from ..results.base import CURVE_HEAD, TABLE_HEAD, write_parquet
from ..results.support import SUPPORT_NOTE
from .execute import RunResult
from .inputs import log_line
from .report import INTERACTIONS_FILE, importance_figure
from .spec import JobSpec
from .store import safe_name

__all__ = ["CURVE_COLUMNS", "IMPORTANCE_COLUMNS", "ICE_COLUMNS", "curves_frame", "importances_frame", "ice_frame",
           "log_comparisons",
           "interactions_frame",
           "write_tables", "write_plots", "curve_figure", "row_stats", "method_title", "print_summary", "versions", "output_bytes"]

#: the leading columns of curves.parquet (the shared curve head; method columns follow)
CURVE_COLUMNS = ["method", *CURVE_HEAD]
#: the leading columns of importances.parquet (the shared table head; measures follow)
IMPORTANCE_COLUMNS = ["method", *TABLE_HEAD]
#: the spec key that keeps the suspect columns in the default sets (the notes' hint)
KEEP_KEY = "keep_suspect = true"
#: the columns of ice.parquet: the one long ICE table (daskpd.model._ice_result), x and category both
ICE_COLUMNS = list(ICE_TABLE)
_TEXT = ("method", "feature", "kind")


def _positions_both(f: pd.DataFrame) -> pd.DataFrame:
    """Both position columns: ``x`` (float, NaN for categories), ``category`` (text, NA for numbers)."""
    f = f.copy()
    f["x"] = f["x"].astype("float64") if "x" in f else np.nan
    f["category"] = f["category"].astype("string") if "category" in f else pd.array([None] * len(f), dtype="string")
    return f


def _concat(frames: list[pd.DataFrame], head: list[str], empty: dict) -> pd.DataFrame:
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype=empty[c]) for c in head})
    df = pd.concat(frames, ignore_index=True, sort=False)
    extra = [c for c in df.columns if c not in head]
    df = df[[c for c in head if c in df.columns] + extra]
    for c in df.columns:
        if c in _TEXT or (c in extra and df[c].dtype == object):
            df[c] = df[c].astype("string")
    return df


def curves_frame(curves: dict) -> pd.DataFrame:
    """The tidy curves table: each curve's own frame, ``method`` first, one row per
    (method, feature, x or category)."""
    frames = []
    for (method, _), r in curves.items():
        f = _positions_both(r.to_frame())
        f.insert(0, "method", method)
        for c in ("pd", "count"):
            f[c] = f[c].astype("float64")
        f["supported"] = f["supported"].astype(bool)
        frames.append(f)
    return _concat(frames, CURVE_COLUMNS, {"method": "string", "feature": "string", "kind": "string",
                                           "x": "float64", "category": "string", "pd": "float64",
                                           "count": "float64", "supported": "bool", "n_rows": "int64"})


def importances_frame(tables: dict) -> pd.DataFrame:
    """Every importance table (``{method: result}``), ``method`` first, rows by rank."""
    frames = []
    for method, r in tables.items():
        t = r.to_frame().sort_values("rank", kind="stable")
        t.insert(0, "method", method)
        frames.append(t)
    return _concat(frames, IMPORTANCE_COLUMNS, {"method": "string", "feature": "string", "kind": "string",
                                                "importance": "float64", "rank": "int64"})


def ice_frame(curves: dict) -> pd.DataFrame | None:
    """The sampled ICE lines of every ICE curve (None when ICE was not run)."""
    frames = [_positions_both(r.lines_frame()) for (method, _), r in curves.items() if method == "ice"]
    if not frames:
        return None
    return _concat(frames, ICE_COLUMNS, {})


def interactions_frame(interactions: dict) -> pd.DataFrame | None:
    """Every interaction table (``{method: result}``), ``method`` first (None when no
    interaction method ran)."""
    frames = []
    for method, r in interactions.items():
        t = r.to_frame()
        t.insert(0, "method", pd.array([method] * len(t), dtype="string"))
        frames.append(t)
    return pd.concat(frames, ignore_index=True) if frames else None


def write_tables(run_dir: Path, res: RunResult, meta: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """curves.parquet, importances.parquet (and ice.parquet, interactions.parquet);
    returns (curves, importances)."""
    curves = curves_frame(res.curves)
    imp = importances_frame(res.tables)
    write_parquet(curves, run_dir / "curves.parquet", meta)
    write_parquet(imp, run_dir / "importances.parquet", meta)
    ice = ice_frame(res.curves)
    if ice is not None:
        write_parquet(ice, run_dir / "ice.parquet", meta)
    inter = interactions_frame(res.interactions)
    if inter is not None:
        write_parquet(inter, run_dir / INTERACTIONS_FILE, meta)
    return curves, imp


def row_stats(res: RunResult) -> dict:
    """Rows read, and each curve's row counts (from its metadata)."""
    per = {}
    n_rows = None
    for (method, feature), r in res.curves.items():
        meta = r.metadata()
        d = {k: int(meta[k]) for k in ("n_rows", "n_used", "n_ignored", "n_missing_x", "n_bad_y", "n_leaves")
             if meta.get(k) is not None}
        if d:
            per[f"{method}:{feature}"] = d
        if method in ("stratpd", "catstratpd"):
            n_rows = int(r.n_rows)
    return {"rows_read": n_rows, "per_curve": per,
            "rows_ignored": {k: v.get("n_ignored", 0) + v.get("n_missing_x", 0) + v.get("n_bad_y", 0)
                             for k, v in per.items()}}


def versions(extra: tuple[str, ...] = ()) -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in ("daskpd", "dask", "distributed", "pandas", "numpy", "scikit-learn", "pyarrow", "fsspec",
                 "matplotlib", *extra):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


#: bytes a run's outputs take at most, per plotted curve (PNG in plots/ and again in report.html) and in all
_BYTES_PER_PLOT = 2 * 256 * 1024
_BYTES_BASE = 4 * 1024 * 1024


def output_bytes(spec: JobSpec, n_features: int) -> int:
    """An upper bound of a run's outputs: plots (and their copies in report.html) per curve."""
    n_curves = n_features * max(1, len(spec.methods))
    per_plot = _BYTES_PER_PLOT if (spec.output.plots or spec.output.report) else 0
    return _BYTES_BASE + n_curves * (per_plot + 64 * 1024)


def write_plots(res: RunResult, imp: pd.DataFrame, plot_dir: Path, spec: JobSpec) -> list[dict]:
    """Write PNGs; return [{file, kind, method, feature, title}] in report order."""
    plt = pyplot()
    plot_dir.mkdir()
    entries = []
    used = set()

    def name_for(stem):
        n, i = stem, 2
        while n in used:
            n, i = f"{stem}-{i}", i + 1
        used.add(n)
        return n + ".png"

    for method in imp["method"].unique() if len(imp) else []:
        t = imp[imp["method"] == method]
        fig = importance_figure(t, title=f"{method_title(method)} ({spec.target})")
        fn = name_for(f"importance-{safe_name(method)}")
        fig.savefig(plot_dir / fn, dpi=100, bbox_inches="tight")
        plt.close(fig)
        entries.append({"file": f"plots/{fn}", "kind": "importance", "method": str(method), "feature": None,
                        "title": f"{method_title(method)}"})
    for method, r in res.interactions.items():
        fig = curve_figure(method, None, r, spec.target)
        fn = name_for(f"interaction-{safe_name(method)}")
        fig.savefig(plot_dir / fn, dpi=100, bbox_inches="tight")
        plt.close(fig)
        entries.append({"file": f"plots/{fn}", "kind": "interaction", "method": method, "feature": None,
                        "title": method_title(method)})
    for (method, feature), r in res.curves.items():
        fig = curve_figure(method, feature, r, spec.target)
        fn = name_for(f"{safe_name(method)}-{safe_name(feature)}")
        fig.savefig(plot_dir / fn, dpi=100, bbox_inches="tight")
        plt.close(fig)
        entries.append({"file": f"plots/{fn}", "kind": "curve", "method": method, "feature": feature,
                        "title": f"{method_title(method)}: {feature}"})
    return entries


def curve_figure(method: str, feature, r, target):
    """The figure of one curve of a run: the result's own ``plot()`` (the plotting
    module's figure, size and constrained layout, count strips and category labels
    fitted), the value axis of a model-based curve naming the job's ``target``.  A
    plotting error gives a figure that says so (the computed results are kept)."""
    plt = pyplot()
    before = set(plt.get_fignums())
    try:
        out = r.plot(**({} if method in ("stratpd", "catstratpd") else {"target": target}))
        return out if hasattr(out, "savefig") else out.figure
    except Exception as exc:  # a plotting bug must not lose the computed results
        for num in set(plt.get_fignums()) - before:
            plt.close(num)
        fig, ax = new_figure(figsize=(7, 4.2))
        ax.text(0.5, 0.5, f"plot failed: {type(exc).__name__}: {exc}", ha="center", va="center",
                transform=ax.transAxes, wrap=True)
        warnings.warn(f"plot of {method} {feature!r} failed: {exc}", RuntimeWarning, stacklevel=3)
        return fig


def method_title(method: str) -> str:
    return {"stratpd": "StratPD", "catstratpd": "CatStratPD", "importances": "StratImpact importance",
            "partial_dependence": "Partial dependence (model)", "ice": "ICE (model)", "ale": "ALE (model)",
            "marginal": "Marginal plot", "pd_variance": "PD-variance importance (model)",
            "h_statistic": "Friedman's H-statistic (model)",
            "binned_mean": "Binned mean of the target (model-free)"}.get(method, method)


def _support_text(row) -> str:
    """A flagged feature's support after its importance (empty when it is supported)."""
    flag = row.get("support")
    if flag is None or pd.isna(flag) or str(flag) == "ok":
        return ""
    return f"  {flag}: {int(row['support_rows']):,} rows used ({float(row['support_share']):.0%} of those with a value)"


def print_summary(out, spec: JobSpec, res: RunResult, imp: pd.DataFrame, manifest: dict, final: Path,
                   pruned: list[str]) -> None:
    p = lambda s="": print(s, file=out)  # noqa: E731
    p(f"job {spec.name}  run {manifest['run_id']}  ({manifest['timings_s']['total']:.1f} s)")
    rows = manifest["rows"].get("rows_read")
    if rows is not None:
        p(f"rows read: {rows:,}   input: {manifest['input']['fingerprint']['n_files']} file(s), "
          f"fingerprint {manifest['input']['fingerprint']['sha256'][:12]}")
    left = manifest.get("skipped_features") or {}
    if left:
        p(f"left out of the default features: {', '.join(f'{f} ({why})' for f, why in left.items())}"
          + (f"; {KEEP_KEY} keeps the suspect ones" if set(left.values()) & set(SUSPECT_WHYS) else ""))
    p()
    for (method, feature), r in res.curves.items():
        p(f"{method:<11} " + r.summary().replace("\n", "\n" + " " * 12))
    for method, r in res.interactions.items():
        p()
        p(f"{method_title(method)}:")
        p("  " + r.summary().replace("\n", "\n  "))
    for method in imp["method"].unique() if len(imp) else []:
        t = imp[imp["method"] == method]
        p()
        p(f"{method_title(method)}" + (" (sorted by importance: mean |PD| weighted by rows):"
                                       if method == "importances" else ":"))
        width = max(len(str(f)) for f in t["feature"])
        for _, row in t.iterrows():
            p(f"  {int(row['rank']):>3}. {str(row['feature']):<{width}}  {row['importance']:.4f}" + _support_text(row))
        if "support" in t.columns and (t["support"].astype(str) != "ok").any():
            p("  " + SUPPORT_NOTE.replace("\n", "\n  "))
    p()
    p(f"wrote {final}")
    if spec.output.report:
        p(f"report: {final / 'report.html'}")
    if pruned:
        p(f"removed {len(pruned)} old run(s) (output.keep = {spec.output.keep}): {', '.join(pruned)}")


def log_comparisons(log, comparisons: list) -> None:
    """One line per new-against-old comparison of the run (:mod:`.newold`) on ``log``:
    what it compared and which curves drifted, where."""
    for c in comparisons:
        ref = c.reference
        if not c.records:
            log_line(log, f"daskpd: {ref.test}: not compared ({ref.skip or 'no curve to compare'})")
            continue
        rows = max((r.rows_new for r in c.records if np.isfinite(r.rows_new)), default=np.nan)
        what = (f"{len(ref.new_files)} new file(s)" + (f", {rows:,.0f} rows" if np.isfinite(rows) else "")
                + f" against run {ref.run_id}")
        drifted = [r for r in c.records if r.status == "drifted"]
        if drifted:
            body = "; ".join(f"{r.method} {r.feature} ({r.where})" for r in drifted)
            log_line(log, f"daskpd: {ref.test} ({what}): {len(drifted)} curve(s) drifted: {body}")
        else:
            log_line(log, f"daskpd: {ref.test} ({what}): no drift in {len(c.records)} curve(s) at level "
                          f"{c.alpha:g}")
        for r in c.records:
            if np.isfinite(r.trials_needed) and r.trials_needed > r.n_trials:
                log_line(log, f"daskpd: warning: {ref.test} {r.method} {r.feature}: {r.n_trials} trials are too few "
                              f"to find a change of {c.threshold:g} of the curve's scale; [history] n_trials = "
                              f"{int(r.trials_needed)} would")


def log_left_out(log, job: str, feats: list[str], stats: dict) -> None:
    """One note each for the features and the stratifying columns the run left out."""
    if stats.get("skipped_features"):
        skipped = stats["skipped_features"]
        log_line(log, "daskpd: note: " + left_out_note(f"job {job!r}", skipped,
                                                       len(feats) - len(set(skipped) & set(feats)),
                                                       "list them in 'features' to use them", keep=KEEP_KEY))
    if stats.get("skipped_stratify_on"):
        left = stats["skipped_stratify_on"]
        log_line(log, "daskpd: note: " + left_out_note(
            f"job {job!r}", left, len(feats) - len(set(left) & set(feats)),
            "list them in 'stratify_on' to use them", keep=KEEP_KEY, what="stratifying columns"))
