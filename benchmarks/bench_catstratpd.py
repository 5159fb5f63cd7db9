#!/usr/bin/env python
"""CatStratPD: daskpd vs stratx 0.5, side by side in one run.

    .venv/bin/python benchmarks/bench_catstratpd.py [--sizes 1e4,1e5,1e6] [--levels 1000]
        [--workdir DIR] [--stratx-python PATH] [--stratx-timeout 900] [--out results.json]

For every size it writes one synthetic table (a directory of 4 parquet files) with a
categorical feature ``x`` of ``--levels`` integer codes, codependent with the numeric
``x1``/``x2``, and a known effect per category:

    y = x1**2 + x2 + b[x] + N(0, 1),   x ~ round(levels * x1 / 10 + N(0, 25)) clipped,
    x1 ~ U(0, 10), x2 = x1 + N(0, 0.5), b ~ N(0, 5)

then, in this order, each in a fresh subprocess (so that peak RSS is that run's own):

* daskpd: ``daskpd.catstratpd(path, "y", "x")`` on dask's threaded scheduler (the
  default without a distributed Client), default parameters (min_samples_leaf=5,
  tree fitted on a 200,000-row sample).  The time covers the whole call, reading the
  parquet included; imports are done before the clock starts.
* stratx: ``benchmarks/stratx_runner.py --method catstratpd`` run by the stratx-old
  venv's python (stratx 0.5 + numpy 1.23: its CatStratPD uses ``np.float``, removed in
  numpy 1.24).  It times only the ``cat_partial_dependence`` call (min_samples_leaf=5,
  one tree on all rows); loading the parquet is outside its clock.

Columns: seconds, peak RSS of the process (MiB), and the RMSE of the mean-centred
effects against the known ``b`` (over categories both estimate).  Make the stratx venv
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


def centred_rmse(codes, est, levels, seed=0) -> float:
    codes = np.asarray(codes, dtype="int64")
    est = np.asarray(est, dtype="float64")
    ok = np.isfinite(est)
    e, t = est[ok], effects(levels, seed)[codes[ok]]
    return float(np.sqrt(np.mean(((e - e.mean()) - (t - t.mean())) ** 2)))


# ----------------------------------------------------------------------------- runs


def child_daskpd(path: str, out: str) -> None:
    """Runs in a subprocess: one timed daskpd.catstratpd call."""
    import dask.dataframe  # noqa: F401  (imports outside the clock)
    import scipy.sparse.csgraph  # noqa: F401
    import scipy.sparse.linalg  # noqa: F401
    import sklearn.tree  # noqa: F401

    import daskpd

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    t0 = time.perf_counter()
    res = daskpd.catstratpd(path, target="y", feature="x")
    seconds = time.perf_counter() - t0
    json.dump({"ok": True, "seconds": seconds,
               "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
               "rss_before_call_bytes": before, "categories": [int(c) for c in res.categories],
               "effects": [float(v) for v in res.pd], "n_leaves": res.n_leaves, "n_groups": res.n_groups,
               "n_rows": res.n_rows, "solver": res.params.get("solver")}, open(out, "w"))


def run_daskpd(path: str, workdir: str, timeout: float) -> dict:
    out = os.path.join(workdir, "daskpd.json")
    if os.path.exists(out):
        os.remove(out)
    cmd = [sys.executable, os.path.abspath(__file__), "--child-daskpd", path, "--child-out", out]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"timed out after {timeout:.0f} s"}
    if p.returncode != 0 or not os.path.exists(out):
        return {"ok": False, "error": (p.stderr.strip().splitlines() or ["?"])[-1]}
    return json.load(open(out))


def run_stratx(path: str, workdir: str, python: str, timeout: float) -> dict:
    if not os.path.exists(python):
        return {"ok": False, "error": f"no stratx venv at {python} (run benchmarks/setup_stratx.sh old)"}
    out = os.path.join(workdir, "stratx.json")
    if os.path.exists(out):
        os.remove(out)
    cmd = [python, os.path.join(HERE, "stratx_runner.py"), "--method", "catstratpd", "--data", path,
           "--target", "y", "--feature", "x", "--out", out]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"timed out after {timeout:.0f} s"}
    if not os.path.exists(out):
        return {"ok": False, "error": (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1]}
    return json.load(open(out))


# ----------------------------------------------------------------------------- main


def fmt_s(r):
    return f"{r['seconds']:.2f}" if r.get("ok") else "failed"


def fmt_mib(r):
    return f"{r['peak_rss_bytes'] / 2**20:,.0f}" if r.get("peak_rss_bytes") else "-"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="1e4,1e5,1e6", help="comma list of row counts")
    p.add_argument("--levels", type=int, default=1000)
    p.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "daskpd-bench-catstratpd"))
    p.add_argument("--stratx-python", default=DEFAULT_STRATX)
    p.add_argument("--stratx-timeout", type=float, default=900.0, help="seconds per stratx run")
    p.add_argument("--skip-stratx", action="store_true")
    p.add_argument("--out", help="write all measurements as JSON here")
    p.add_argument("--child-daskpd", help=argparse.SUPPRESS)
    p.add_argument("--child-out", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child_daskpd:
        child_daskpd(a.child_daskpd, a.child_out)
        return 0

    sizes = [int(float(s)) for s in a.sizes.split(",") if s.strip()]
    os.makedirs(a.workdir, exist_ok=True)
    rows = []
    for n in sizes:
        path = write_data(os.path.join(a.workdir, f"cat_{n}_{a.levels}"), n, a.levels)
        d = run_daskpd(path, a.workdir, timeout=1800)
        s = {"ok": False, "error": "skipped"} if a.skip_stratx else run_stratx(path, a.workdir, a.stratx_python,
                                                                                a.stratx_timeout)
        for r in (d, s):
            if r.get("ok"):
                r["rmse"] = centred_rmse(r["categories"], r["effects"], a.levels)
        rows.append({"n": n, "levels": a.levels, "daskpd": d, "stratx": s})
        line = f"n={n:,}: daskpd {fmt_s(d)} s"
        line += f", stratx {fmt_s(s)} s" if s.get("ok") else f", stratx: {s.get('error')}"
        print(line, file=sys.stderr, flush=True)

    print("| rows | levels | daskpd s | stratx s | speed-up | daskpd peak RSS MiB | stratx peak RSS MiB "
          "| daskpd RMSE | stratx RMSE |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        d, s = r["daskpd"], r["stratx"]
        speed = f"{s['seconds'] / d['seconds']:.0f}x" if d.get("ok") and s.get("ok") else "-"
        print(f"| {r['n']:,} | {r['levels']:,} | {fmt_s(d)} | {fmt_s(s) if s.get('ok') else 'n/a'} | {speed} "
              f"| {fmt_mib(d)} | {fmt_mib(s)} | {d.get('rmse', float('nan')):.3f} "
              f"| {s['rmse']:.3f} |" if s.get("ok") else
              f"| {r['n']:,} | {r['levels']:,} | {fmt_s(d)} | n/a | - | {fmt_mib(d)} | - "
              f"| {d.get('rmse', float('nan')):.3f} | - |")
    for r in rows:
        if not r["stratx"].get("ok"):
            print(f"stratx at n={r['n']:,}: {r['stratx'].get('error')}")
    if a.out:
        for r in rows:
            for k in ("daskpd", "stratx"):
                r[k] = {key: v for key, v in r[k].items() if key not in ("categories", "effects", "labels",
                                                                         "effects_centered", "counts",
                                                                         "traceback")}
        json.dump({"rows": rows, "python": sys.version.split()[0]}, open(a.out, "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
