#!/usr/bin/env python
"""CatStratPD: daskpd (honest trees and one tree) vs stratx 0.5, side by side in one run.

    .venv/bin/python benchmarks/bench_catstratpd.py [--sizes 1e4,1e5,1e6] [--levels 1000]
        [--schemes honest,one-tree] [--repeat 1] [--seeds 1] [--workdir DIR] [--stratx-python PATH]
        [--stratx-timeout 900] [--out results.json]

For every size it writes one synthetic table (a directory of 4 parquet files) with a
categorical feature ``x`` of ``--levels`` integer codes, codependent with the numeric
``x1``/``x2``, and a known effect per category:

    y = x1**2 + x2 + b[x] + N(0, 1),   x ~ round(levels * x1 / 10 + N(0, 25)) clipped,
    x1 ~ U(0, 10), x2 = x1 + N(0, 0.5), b ~ N(0, 5)

then, in this order, each in a fresh subprocess (so that peak RSS is that run's own):

* daskpd, once per scheme (``--schemes``, both by default; the schemes alternate):
  ``daskpd.catstratpd(path, target="y", feature="x")`` on dask's threaded scheduler (the default
  without a distributed Client), default parameters (min_samples_leaf=5, trees fitted
  on a 200,000-row sample).  ``honest`` is the default (2-fold cross-fitted trees: each
  row is stratified by the tree fitted on the other half of the sample); ``one-tree``
  passes ``honest=False`` (one tree stratifies every row, stratx's estimator).  The time
  covers the whole call, reading the parquet included; imports are done before the
  clock starts.  With ``--repeat N`` each scheme runs N times: the fastest run's
  seconds and the highest peak RSS are shown.
* stratx: ``benchmarks/stratx_runner.py --method catstratpd`` run by the stratx-old
  venv's python (stratx 0.5 + numpy 1.23: its CatStratPD uses ``np.float``, removed in
  numpy 1.24).  It times only the ``cat_partial_dependence`` call (min_samples_leaf=5,
  one tree on all rows); loading the parquet is outside its clock.

Columns: seconds, peak RSS of the process (MiB), and the error of the effects against
the known ``b`` over the categories the run estimates (finite effect): effects are
defined up to a constant, so they are aligned to ``b`` by their mean difference over
those categories (the same as centring both on their means); then RMSE and max abs
error, and the least-squares slope of the estimate on ``b`` (1: no shrinkage).
Categories are weighted equally.  ``--seeds K`` also draws data sets 1 .. K-1 of every
size (the same generator and effects ``b`` seeded by the data set's number, one untimed
run per scheme each) and prints each scheme's mean RMSE over the K data sets, the range
of their slopes, and honest against one-tree data set by data set.  stratx runs once per size; its figures are shown on
each scheme's row, with the speed-up over that scheme.  Make the stratx venv
with ``benchmarks/setup_stratx.sh old``; without it the stratx columns say why.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

from bench_stratpd import SCHEMES, curve_error, fastest, parse_schemes, print_seed_table

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_STRATX = os.path.join(os.environ.get("STRATX_VENV_ROOT", os.path.expanduser("~/.cache/daskpd-bench")),
                              "stratx-old", "bin", "python")


# ----------------------------------------------------------------------------- data


def effects(levels: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng([seed, 99]).normal(0, 5, levels)


def write_data(path: str, n: int, levels: int, seed: int = 0, files: int = 4) -> str:
    import pandas as pd

    if os.path.exists(os.path.join(path, "_done")):
        return path
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    b = effects(levels, seed)
    per = -(-n // files)
    for i in range(files):
        rows = min(per, n - i * per)
        r = np.random.default_rng([seed, i])
        x1 = r.uniform(0, 10, rows)
        x2 = x1 + r.normal(0, 0.5, rows)
        x = np.clip(np.round(levels * x1 / 10 + r.normal(0, 25, rows)), 0, levels - 1).astype("int64")
        y = x1 ** 2 + x2 + b[x] + r.normal(0, 1, rows)
        pd.DataFrame({"x1": x1, "x2": x2, "x": x, "y": y}).to_parquet(os.path.join(path, f"part-{i}.parquet"))
    open(os.path.join(path, "_done"), "w").close()
    return path


def effect_error(codes, est, levels, seed=0) -> dict:
    """RMSE, max abs error and slope of the estimated effects against the known ``b``
    (aligned by their mean difference over the estimated categories)."""
    codes = np.asarray(codes, dtype="int64")
    return curve_error(est, effects(levels, seed)[codes])


# ----------------------------------------------------------------------------- runs


def child_daskpd(path: str, out: str, honest: bool) -> None:
    """Runs in a subprocess: one timed daskpd.catstratpd call."""
    import dask.dataframe  # noqa: F401  (imports outside the clock)
    import scipy.sparse.csgraph  # noqa: F401
    import scipy.sparse.linalg  # noqa: F401
    import sklearn.tree  # noqa: F401

    import daskpd

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    t0 = time.perf_counter()
    res = daskpd.catstratpd(path, target="y", feature="x", honest=honest)
    seconds = time.perf_counter() - t0
    json.dump({"ok": True, "seconds": seconds,
               "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
               "rss_before_call_bytes": before, "categories": [int(c) for c in res.categories],
               "effects": [float(v) for v in res.pd], "n_leaves": res.n_leaves, "n_groups": res.n_groups,
               "n_rows": res.n_rows, "n_used": res.n_used, "solver": res.params.get("solver")}, open(out, "w"))


def _report_path(workdir: str, who: str) -> str:
    """A subprocess's report file, this process's own: two runs sharing ``--workdir`` (the
    data is reused) never read each other's reports."""
    out = os.path.join(workdir, f"{who}-{os.getpid()}.json")
    if os.path.exists(out):
        os.remove(out)
    return out


def _read_report(out: str) -> dict:
    with open(out) as f:
        rep = json.load(f)
    os.remove(out)
    return rep


def run_daskpd(path: str, workdir: str, timeout: float, honest: bool = True) -> dict:
    out = _report_path(workdir, "daskpd")
    cmd = [sys.executable, os.path.abspath(__file__), "--child-daskpd", path, "--child-out", out,
           "--child-honest", str(int(honest))]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"timed out after {timeout:.0f} s"}
    if p.returncode != 0 or not os.path.exists(out):
        return {"ok": False, "error": (p.stderr.strip().splitlines() or ["?"])[-1]}
    return _read_report(out)


def run_stratx(path: str, workdir: str, python: str, timeout: float) -> dict:
    if not os.path.exists(python):
        return {"ok": False, "error": f"no stratx venv at {python} (run benchmarks/setup_stratx.sh old)"}
    out = _report_path(workdir, "stratx")
    cmd = [python, os.path.join(HERE, "stratx_runner.py"), "--method", "catstratpd", "--data", path,
           "--target", "y", "--feature", "x", "--out", out]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"timed out after {timeout:.0f} s"}
    if not os.path.exists(out):
        return {"ok": False, "error": (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1]}
    return _read_report(out)


# ----------------------------------------------------------------------------- main


def fmt_s(r):
    return f"{r['seconds']:.2f}" if r.get("ok") else "failed"


def fmt_mib(r):
    return f"{r['peak_rss_bytes'] / 2**20:,.0f}" if r.get("peak_rss_bytes") else "-"


def fmt_err(r, key, digits=3):
    v = r.get(key)
    return f"{v:.{digits}f}" if r.get("ok") and v is not None and v == v else ""


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="1e4,1e5,1e6", help="comma list of row counts")
    p.add_argument("--levels", type=int, default=1000)
    p.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "daskpd-bench-catstratpd"))
    p.add_argument("--stratx-python", default=DEFAULT_STRATX)
    p.add_argument("--stratx-timeout", type=float, default=900.0, help="seconds per stratx run")
    p.add_argument("--skip-stratx", action="store_true")
    p.add_argument("--schemes", default="honest,one-tree",
                   help="comma list: honest (daskpd's default), one-tree (honest=False)")
    p.add_argument("--repeat", type=int, default=1, help="runs per scheme and size; the fastest is shown")
    p.add_argument("--seeds", type=int, default=1,
                   help="data sets per size (seed 0, 1, ...): the error against the truth over all of them")
    p.add_argument("--out", help="write all measurements as JSON here")
    p.add_argument("--child-daskpd", help=argparse.SUPPRESS)
    p.add_argument("--child-out", help=argparse.SUPPRESS)
    p.add_argument("--child-honest", type=int, default=1, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child_daskpd:
        child_daskpd(a.child_daskpd, a.child_out, bool(a.child_honest))
        return 0

    schemes = parse_schemes(a.schemes)
    sizes = [int(float(s)) for s in a.sizes.split(",") if s.strip()]
    os.makedirs(a.workdir, exist_ok=True)
    rows, errors = [], {}
    for n in sizes:
        path = write_data(os.path.join(a.workdir, f"cat_{n}_{a.levels}"), n, a.levels)
        runs = {name: [] for name in schemes}
        for _ in range(max(1, a.repeat)):  # the schemes alternate, so that load drifts hit both alike
            for name in schemes:
                runs[name].append(run_daskpd(path, a.workdir, timeout=1800, honest=SCHEMES[name]))
        ours = {name: fastest(runs[name]) for name in schemes}
        s = {"ok": False, "error": "skipped"} if a.skip_stratx else run_stratx(path, a.workdir, a.stratx_python,
                                                                                a.stratx_timeout)
        for r in (*ours.values(), s):
            if r.get("ok"):
                r.update(effect_error(r["categories"], r["effects"], a.levels))
        rows.append({"n": n, "levels": a.levels, "daskpd": ours, "stratx": s})
        errors[n] = {name: [effect_error(d["categories"], d["effects"], a.levels) if d.get("ok") else {}]
                     for name, d in ours.items()}
        for seed in range(1, max(1, a.seeds)):  # further data sets: the error only, one untimed run each
            other = write_data(os.path.join(a.workdir, f"cat_{n}_{a.levels}_seed{seed}"), n, a.levels, seed=seed)
            for name in schemes:
                d = run_daskpd(other, a.workdir, timeout=1800, honest=SCHEMES[name])
                errors[n][name].append(effect_error(d["categories"], d["effects"], a.levels, seed=seed)
                                       if d.get("ok") else {})
        line = f"n={n:,}: " + ", ".join(f"daskpd {name} {fmt_s(d)} s" for name, d in ours.items())
        line += f", stratx {fmt_s(s)} s" if s.get("ok") else f", stratx: {s.get('error')}"
        print(line, file=sys.stderr, flush=True)

    print("| rows | levels | scheme | daskpd s | stratx s | speed-up | daskpd peak RSS MiB | stratx peak RSS MiB "
          "| daskpd RMSE | max abs err | slope on truth | leaves | rows used | stratx RMSE |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        s = r["stratx"]
        for name, d in r["daskpd"].items():
            speed = f"{s['seconds'] / d['seconds']:.0f}x" if d.get("ok") and s.get("ok") else "-"
            print(f"| {r['n']:,} | {r['levels']:,} | {name} | {fmt_s(d)} | {fmt_s(s) if s.get('ok') else 'n/a'} "
                  f"| {speed} | {fmt_mib(d)} | {fmt_mib(s)} | {fmt_err(d, 'rmse')} | {fmt_err(d, 'max_err')} "
                  f"| {fmt_err(d, 'slope', 4)} | {d.get('n_leaves', '-')} "
                  f"| {format(d['n_used'], ',') if d.get('ok') else '-'} | {fmt_err(s, 'rmse') or '-'} |")
    if {"honest", "one-tree"} <= set(schemes):
        print("\n# honest / one-tree, within this run")
        print("| rows | seconds | peak RSS | RMSE | max abs err |")
        print("|---:|---:|---:|---:|---:|")
        for r in rows:
            h, o = r["daskpd"]["honest"], r["daskpd"]["one-tree"]
            cells = [f"{h[k] / o[k]:.2f}x" if h.get("ok") and o.get("ok") and o.get(k) else "n/a"
                     for k in ("seconds", "peak_rss_bytes", "rmse", "max_err")]
            print(f"| {r['n']:,} | " + " | ".join(cells) + " |")
    print_seed_table(errors, schemes)
    for r in rows:
        for name, d in r["daskpd"].items():
            if not d.get("ok"):
                print(f"daskpd {name} at n={r['n']:,}: {d.get('error')}")
        if not r["stratx"].get("ok"):
            print(f"stratx at n={r['n']:,}: {r['stratx'].get('error')}")
    if a.out:
        drop = ("categories", "effects", "labels", "effects_centered", "counts", "traceback")
        for r in rows:
            r["daskpd"] = {name: {key: v for key, v in d.items() if key not in drop} for name, d in r["daskpd"].items()}
            r["stratx"] = {key: v for key, v in r["stratx"].items() if key not in drop}
        json.dump({"rows": rows, "python": sys.version.split()[0]}, open(a.out, "w"), indent=1)
    return 0 if all(d.get("ok") for r in rows for d in r["daskpd"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
