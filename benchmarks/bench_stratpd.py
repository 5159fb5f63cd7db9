#!/usr/bin/env python
"""StratPD: daskpd.stratpd (honest trees and one tree) vs stratx 0.5 on y = x1^2 + x2 + noise:
wall time, peak memory and the curve's error against the truth.

    .venv/bin/python benchmarks/bench_stratpd.py --sizes 1e4,1e5,1e6,1e7 --stratx-max 1e6
        [--schemes honest,one-tree] [--repeat 1] [--seeds 1]

Data: ``daskpd.datasets.Quadratic(decimals=2, x1_max=10)`` written as parquet files of
250,000 rows into ``--workdir`` (a temporary directory by default; reused when there).
Every measurement runs in a fresh subprocess and reports its own peak resident set size
(``ru_maxrss``) and wall time as JSON, so one run cannot inherit another's memory.  The
reference (stratx) runs through ``stratx_runner.py`` (next to this script) in its own
virtualenv (``setup_stratx.sh``), side by side in the same run; without that virtualenv
its columns say so.  See docs/benchmarks.md.

Schemes (``--schemes``, both by default): ``honest`` is daskpd's default (2-fold
cross-fitted trees: each row is stratified by the tree fitted on the other half of the
tree sample); ``one-tree`` passes ``honest=False`` (one tree fitted on the sample
stratifies every row, stratx's estimator).  Each scheme is measured in its own fresh
subprocess, the schemes alternating within a size; with ``--repeat N`` each is run N
times and the table shows the fastest run's seconds and the highest peak RSS.  stratx
runs once per size; its figures are shown on each scheme's row, with the speed-up over
that scheme.

Error against the truth (``Quadratic.truth``: x1^2), over the curve's supported
positions (finite ``pd``): partial dependence is defined up to a constant, so the curve
is first aligned to the truth by their mean difference over those positions
(``pd - mean(pd - truth)``); then RMSE and max abs error of the aligned curve, and the
slope of the least-squares line of the estimate on the truth (1: no shrinkage; the
alignment does not change it).  Positions are weighted equally.  One data set's error
moves with its realisation: ``--seeds K`` also draws data sets 1 .. K-1 of every size
(``Quadratic(random_state=seed)``, one untimed run per scheme each) and prints each
scheme's mean RMSE over the K data sets, the range of their slopes, and honest against
one-tree data set by data set.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
STRATX_ROOT = Path(os.environ.get("STRATX_VENV_ROOT", Path.home() / ".cache" / "daskpd-bench"))


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def curve_error(estimate, truth) -> dict:
    """Error of a curve against the truth over the positions where both are finite, after
    aligning the curve to the truth by their mean difference there (partial dependence is
    defined up to a constant): RMSE, max abs error, and the least-squares slope of the
    estimate on the truth.  Shared with bench_catstratpd.py."""
    import numpy as np

    e, t = np.asarray(estimate, dtype="float64"), np.asarray(truth, dtype="float64")
    ok = np.isfinite(e) & np.isfinite(t)
    e, t = e[ok], t[ok]
    if len(e) < 2:
        return {"rmse": float("nan"), "max_err": float("nan"), "slope": float("nan"), "positions": int(len(e))}
    d = (e - t) - (e - t).mean()
    tc = t - t.mean()
    return {"rmse": float(np.sqrt(np.mean(d ** 2))), "max_err": float(np.abs(d).max()),
            "slope": float(np.dot(tc, e - e.mean()) / np.dot(tc, tc)), "positions": int(len(e))}


SCHEMES = {"honest": True, "one-tree": False}


def parse_schemes(text: str) -> list[str]:
    names = [s.strip() for s in text.split(",") if s.strip()]
    bad = [s for s in names if s not in SCHEMES]
    if bad or not names:
        raise SystemExit(f"--schemes: expected a comma list of {', '.join(SCHEMES)}; got {text!r}")
    return names


def fastest(reports: list[dict]) -> dict:
    """The fastest successful run's report, with the highest peak RSS of all runs."""
    ok = [r for r in reports if r.get("ok")]
    if not ok:
        return reports[-1]
    best = dict(min(ok, key=lambda r: r["seconds"]))
    best["peak_rss_bytes"] = max(r["peak_rss_bytes"] for r in ok)
    best["runs"] = len(ok)
    return best


def measure_in_subprocess(kind: str, timeout: float = 3600, **kwargs) -> dict:
    """Run ``_measure(kind, **kwargs)`` in a new interpreter; return its JSON report."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "measure", kind, json.dumps(kwargs)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"timeout after {timeout:.0f} s"}
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        return {"ok": False, "error": (out.stderr or out.stdout).strip().splitlines()[-1:] or ["failed"]}
    return json.loads(lines[-1])


def _measure(kind: str, args: dict) -> dict:
    import daskpd

    # Library imports are not part of the measurement (stratx's runner likewise loads
    # its data and warms numba up before its clock starts).
    import dask.dataframe  # noqa: F401
    import pyarrow.parquet  # noqa: F401
    import sklearn.tree  # noqa: F401

    rss0 = _peak_rss_bytes()
    t0 = time.perf_counter()
    if kind == "stratpd":
        res = daskpd.stratpd(args["data"], target=args["target"], feature=args["feature"], progress=False,
                             **args.get("params", {}))
        extra = {"positions": int(len(res.x)), "supported": int(res.supported.sum()), "leaves": res.n_leaves,
                 "n_rows": res.n_rows, "n_used": res.n_used,
                 "binned": res.binned, "timings": res.params.get("timings"), "x": res.x.tolist(), "pd": [None if v != v else v for v in res.pd.tolist()]}
    else:
        raise ValueError(f"unknown measurement {kind!r}")
    secs = time.perf_counter() - t0
    return {"ok": True, "seconds": secs, "peak_rss_bytes": _peak_rss_bytes(), "rss_before_call_bytes": rss0, **extra}


def stratx_python(which: str = "stratx-new") -> Path | None:
    py = STRATX_ROOT / which / "bin" / "python"
    return py if py.exists() else None


def run_stratx(method: str, data: str, target: str, *, which: str = "stratx-new", timeout: float = 1800,
               **opts) -> dict:
    """Run stratx in its own venv through stratx_runner.py (next to this script); JSON report."""
    py = stratx_python(which)
    if py is None:
        return {"ok": False, "error": f"no {which} venv under {STRATX_ROOT} (run benchmarks/setup_stratx.sh)"}
    out_json = Path(data).with_suffix(f".stratx-{method}-{os.getpid()}.json")
    cmd = [str(py), str(HERE / "stratx_runner.py"), "--method", method, "--data", str(data),
           "--target", target, "--out", str(out_json)]
    for k, v in opts.items():
        cmd += [f"--{k.replace('_', '-')}", str(v)]
    env = dict(os.environ, MPLBACKEND="Agg")
    try:
        subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"timeout after {timeout:.0f} s"}
    if not out_json.exists():
        return {"ok": False, "error": "stratx runner wrote no result"}
    rep = json.loads(out_json.read_text())
    out_json.unlink()
    return rep


def _fmt_s(rep):
    return f"{rep['seconds']:.2f}" if rep.get("ok") else "n/a"


def _fmt_mb(rep, key="peak_rss_bytes"):
    return f"{rep[key] / 2**20:,.0f}" if rep.get("ok") and rep.get(key) else "n/a"


def _pd_error(report: dict, gen) -> dict:
    """The curve's error against ``gen``'s truth (:func:`curve_error`) from a measurement."""
    import numpy as np

    if not report.get("ok"):
        return {}
    x = np.array(report["x"], float)
    p = np.array([np.nan if v is None else v for v in report["pd"]], float)
    ok = np.isfinite(p)
    return curve_error(p[ok], gen.truth("x1", x[ok]))


def seed_errors(n: int, seeds: int, workdir: Path, decimals: int, params: dict, schemes: list[str]) -> dict:
    """``{scheme: [error of data set 1, 2, ... seeds - 1]}`` at ``n`` rows: the same
    generator with ``random_state`` = 1 .. seeds - 1, one run per scheme (data set 0 is
    the main table's)."""
    from daskpd.datasets import Quadratic, write_parquet

    out = {name: [] for name in schemes}
    for seed in range(1, seeds):
        gen = Quadratic(random_state=seed, decimals=decimals, x1_max=10.0)
        path = workdir / f"quad-{decimals}-{n}-seed{seed}"
        write_parquet(gen, n, path, rows_per_file=min(n, 250_000), overwrite=False)
        for name in schemes:
            rep = measure_in_subprocess("stratpd", data=str(path), target="y", feature="x1",
                                        params={**params, "honest": SCHEMES[name]})
            out[name].append(_pd_error(rep, gen))
    return out


def print_seed_table(errors: dict, schemes: list[str]) -> None:
    """The error against the truth over several data sets per size (``errors``:
    ``{n: {scheme: [error dicts, data set 0 first]}}``): each scheme's mean RMSE and its
    range, its slopes' range, and honest against one-tree data set by data set."""
    import numpy as np

    if not errors or max(len(v) for e in errors.values() for v in e.values()) < 2:
        return
    both = {"honest", "one-tree"} <= set(schemes)
    print(f"\n# error against the truth over {max(len(v) for e in errors.values() for v in e.values())} "
          "data sets (0, 1, ...: data set 0 is the table above's)")
    head = "| n | scheme | data sets | RMSE, mean (min-max) | slope on truth, min-max |"
    print(head + (" honest / one-tree RMSE, mean (min-max) | data sets with honest <= one-tree |" if both else ""))
    print("|---" * (head.count("|") - 1 + (2 if both else 0)) + "|")
    for n, by in errors.items():
        for name in schemes:
            r = np.array([e.get("rmse", np.nan) for e in by[name]], float)
            s = np.array([e.get("slope", np.nan) for e in by[name]], float)
            line = (f"| {n:,} | {name} | {np.isfinite(r).sum()} | {np.nanmean(r):.4f} ({np.nanmin(r):.4f}-"
                    f"{np.nanmax(r):.4f}) | {np.nanmin(s):.4f}-{np.nanmax(s):.4f} |")
            if both:
                if name == "honest":
                    o = np.array([e.get("rmse", np.nan) for e in by["one-tree"]], float)
                    q = r / o
                    line += (f" {np.nanmean(q):.2f}x ({np.nanmin(q):.2f}-{np.nanmax(q):.2f}) "
                             f"| {int(np.sum(r <= o))} of {int(np.isfinite(q).sum())} |")
                else:
                    line += " | |"
            print(line)


def bench_stratpd(sizes, workdir: Path, decimals: int, stratx_max: float, params: dict,
                  schemes: list[str], repeat: int = 1, seeds: int = 1, errors: dict | None = None) -> list[dict]:
    from daskpd.datasets import Quadratic, write_parquet

    rows = []
    for n in sizes:
        n = int(n)
        gen = Quadratic(random_state=0, decimals=decimals, x1_max=10.0)
        path = workdir / f"quad-{decimals}-{n}"
        t0 = time.perf_counter()
        write_parquet(gen, n, path, rows_per_file=min(n, 250_000), overwrite=False)
        gen_s = time.perf_counter() - t0
        runs = {name: [] for name in schemes}
        for _ in range(repeat):  # the schemes alternate, so that load drifts hit both alike
            for name in schemes:
                runs[name].append(measure_in_subprocess("stratpd", data=str(path), target="y", feature="x1",
                                                        params={**params, "honest": SCHEMES[name]}))
        ref = {"ok": False, "error": "skipped (n > --stratx-max)"}
        if n <= stratx_max:
            ref = run_stratx("stratpd", str(path), "y", feature="x1")
        extra = seed_errors(n, seeds, workdir, decimals, params, schemes) if seeds > 1 else {}
        for name in schemes:
            ours = fastest(runs[name])
            err = _pd_error(ours, gen)
            if errors is not None:
                errors.setdefault(n, {})[name] = [err, *extra.get(name, [])]
            row = {"n": n, "distinct_x": int(10 ** decimals * 10 + 1), "scheme": name, "daskpd_s": _fmt_s(ours),
                   "daskpd_peak_MiB": _fmt_mb(ours), "rmse": _fmt_err(err, "rmse"),
                   "max_err": _fmt_err(err, "max_err"), "slope": _fmt_err(err, "slope", 4),
                   "leaves": ours.get("leaves", "n/a"),
                   "rows_used": f"{ours['n_used']:,}" if ours.get("ok") else "n/a",
                   "stratx_s": _fmt_s(ref), "stratx_peak_MiB": _fmt_mb(ref),
                   "speedup": f"{ref['seconds'] / ours['seconds']:.1f}x" if ref.get("ok") and ours.get("ok") else
                   ("stratx: " + str(ref.get("error", "?"))[:40]),
                   "datagen_s": f"{gen_s:.1f}"}
            rows.append(row)
            print(_row_line(row), flush=True)
            if not ours.get("ok"):
                print(f"# {name} at n={n:,} failed: {ours.get('error')}", flush=True)
    return rows


def _fmt_err(err: dict, key: str, digits: int = 3) -> str:
    v = err.get(key)
    return f"{v:.{digits}f}" if v is not None and v == v else ""


def print_ratios(rows: list[dict], schemes: list[str]) -> None:
    """honest / one-tree per size: seconds, peak MiB, RMSE (ratios within this run)."""
    if not {"honest", "one-tree"} <= set(schemes):
        return
    print("\n# honest / one-tree, within this run")
    print("| n | seconds | peak MiB | RMSE | max err |")
    print("|---|---|---|---|---|")
    by = {(r["n"], r["scheme"]): r for r in rows}
    for n in dict.fromkeys(r["n"] for r in rows):
        h, o = by[(n, "honest")], by[(n, "one-tree")]
        cells = []
        for key in ("daskpd_s", "daskpd_peak_MiB", "rmse", "max_err"):
            try:
                cells.append(f"{float(h[key].replace(',', '')) / float(o[key].replace(',', '')):.2f}x")
            except (ValueError, ZeroDivisionError):
                cells.append("n/a")
        print(f"| {n:,} | " + " | ".join(cells) + " |")


def _row_line(row: dict) -> str:
    return "| " + " | ".join(str(v) for v in row.values()) + " |"


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["measure"]:  # one measurement, in the subprocess started by measure_in_subprocess
        print(json.dumps(_measure(argv[1], json.loads(argv[2]))))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1e4,1e5,1e6,1e7")
    ap.add_argument("--decimals", type=int, default=2, help="x1 ~ U(0,10) rounded: 2 -> 1,001 distinct values")
    ap.add_argument("--stratx-max", type=float, default=1e6, help="largest n to run stratx on (0: never)")
    ap.add_argument("--workdir", default=os.environ.get("DASKPD_BENCH_DIR",
                                                      os.path.join(tempfile.gettempdir(), "daskpd-bench")))
    ap.add_argument("--max-bins", type=int, default=None)
    ap.add_argument("--schemes", default="honest,one-tree",
                    help="comma list: honest (daskpd's default), one-tree (honest=False)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per scheme and size; the fastest is shown")
    ap.add_argument("--seeds", type=int, default=1,
                    help="data sets per size (random_state 0, 1, ...): the error against the truth over all of them")
    a = ap.parse_args(argv)
    schemes = parse_schemes(a.schemes)
    workdir = Path(a.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    sizes = [float(x) for x in a.sizes.split(",")]
    params = {} if a.max_bins is None else {"max_bins": a.max_bins}
    print(f"# daskpd.stratpd vs stratx.partial_dependence; {os.cpu_count()} cores; command: "
          f"benchmarks/bench_stratpd.py {' '.join(argv)}")
    print("| n | distinct x | scheme | daskpd s | daskpd peak MiB | RMSE vs truth | max abs err | slope on truth "
          "| leaves | rows with slopes | stratx s | stratx peak MiB | speed-up | data gen s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    errors = {}
    rows = bench_stratpd(sizes, workdir, a.decimals, a.stratx_max, params, schemes, max(1, a.repeat),
                         max(1, a.seeds), errors)
    print_ratios(rows, schemes)
    print_seed_table(errors, schemes)
    return 0 if all(r["rmse"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
