#!/usr/bin/env python
"""Feature importances: daskpd vs stratx 0.5, side by side in one run, then 1e7 rows.

    .venv/bin/python benchmarks/bench_importances.py [--n-small 1e5] [--n-large 1e7]
        [--trials 5] [--workdir DIR] [--stratx-new PY] [--stratx-old PY]
        [--stratx-timeout 900] [--stratx-max-memory 8e9] [--skip-stratx] [--skip-large]
        [--out results.json]

Data (p = 10, known generator, written to parquet chunk by chunk -- never the whole
table in memory -- as a directory of files; ``chunk(i)`` depends only on the seed and i):

    x1 ~ U(0,1)              10 * x1
    x2 = x1 + N(0, 0.3)       5 * x2         (codependent with x1)
    x3 ~ U(0,1)               4 * x3**2
    x4 ~ U(-1,1)              3 * |x4|
    x5 ~ {0..20} (ints)       0.25 * x5
    x6 ~ Exp(1)               2 * log1p(x6)
    x7 ~ U(0,1), x8 ~ N(0,1)  no effect
    ``numeric`` data:  x9 ~ {0..4} 1.5 * x9;  x10 = x3 + N(0, 0.2), no effect (codependent with x3)
    ``numeric3`` data: the same, continuous features rounded to 3 decimals instead of 2
    ``mixed`` data:    c1: 6 string levels, effects (0, 3, -2, 1, 4, -1)  (categorical by dtype)
                       c2: 40 integer codes, effects ~ N(0, 1.5)           (declared categorical)
    y = sum of the above + N(0, 0.5)

The continuous features are rounded to 2 decimals (100 to ~750 distinct values), or 3
for ``numeric3`` (1,000 to ~5,700), as measured data: stratx averages slopes in a
(distinct x) x (segments) matrix, so its time and memory grow with the distinct values
(at 1e5 distinct values it needs tens of GB); daskpd bins beyond ``max_bins=1000``.

Runs, each in a fresh subprocess (so each peak RSS is its own), at n = n_small
(a directory of 4 parquet files):

* daskpd ``importances(path, target="y")`` (``categorical_features=["c2"]`` on the mixed data), defaults:
  trees fitted on a 200,000-row sample, i.e. on every row here; dask's threaded
  scheduler on this machine's cores;
* the same with the trees fitted on a 20,000-row sample and ``min_samples_leaf=3`` (so
  that leaves still hold ~15 of the 1e5 rows) -- the setting for speed;
* daskpd defaults with ``--trials`` bootstrap trials (numeric data; one scan all the same);
* daskpd with ``honest=False`` (numeric data, unless ``--skip-stratx``): one tree fitted
  on the sample stratifies every row, stratx's estimator, whose numbers it should
  reproduce;
* stratx 0.5 ``importances(X, y)`` through ``benchmarks/stratx_runner.py``: numeric data
  in the stratx-new venv (stratx's defaults: min_samples_leaf=15, min_slopes_per_x=5); mixed data with ``catcolnames={"c1","c2"}`` in the stratx-old
  venv (its CatStratPD needs numpy < 1.24), under an address-space limit
  (``--stratx-max-memory``) so that a blow-up ends in MemoryError, not in the OOM killer.

stratx's clock covers only its ``importances`` call (data already in memory, numba
warmed up); daskpd's covers the whole call, reading the parquet (twice) included
(imports are warmed up before the clock starts).  Then at n = n_large (mixed data, 20
files of 500,000 rows): daskpd alone, n_trials = 1 and n_trials = ``--trials``.
Partition reads = the tasks that read a partition, counted with a dask Callback: daskpd's
passes read the parquet inside their map tasks (``daskpd-sample-map``, ``daskpd-strat-map``:
one a partition and pass).

Accuracy: each run's normalised importances against the truth (the generator's PD:
numeric, mean over rows of |f(x) - f(min x)|; categorical, mean over rows of |effect -
mean effect|), as the max absolute error and Spearman's rank correlation.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
VENV_ROOT = os.environ.get("STRATX_VENV_ROOT", os.path.expanduser("~/.cache/daskpd-bench"))
STRATX_NEW = os.path.join(VENV_ROOT, "stratx-new", "bin", "python")
STRATX_OLD = os.path.join(VENV_ROOT, "stratx-old", "bin", "python")
NUMERIC = ["x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8"]
FEATURES = {"numeric": NUMERIC + ["x9", "x10"], "numeric3": NUMERIC + ["x9", "x10"], "mixed": NUMERIC + ["c1", "c2"]}
CATEGORICAL = {"numeric": [], "numeric3": [], "mixed": ["c1", "c2"]}
DECIMALS = {"numeric": 2, "numeric3": 3, "mixed": 2}
C1_LEVELS = np.array(["a", "b", "c", "d", "e", "f"])
C1_EFFECT = np.array([0.0, 3.0, -2.0, 1.0, 4.0, -1.0])
C2_EFFECT = np.random.default_rng([0, 42]).normal(0, 1.5, 40)
CHUNK = 500_000
EFFECTS = {"x1": lambda v: 10 * v, "x2": lambda v: 5 * v, "x3": lambda v: 4 * v ** 2,
           "x4": lambda v: 3 * np.abs(v), "x5": lambda v: 0.25 * v, "x6": lambda v: 2 * np.log1p(v),
           "x7": lambda v: 0 * v, "x8": lambda v: 0 * v, "x9": lambda v: 1.5 * v, "x10": lambda v: 0 * v}


# ----------------------------------------------------------------------------- data


def numeric_effect(f, x):
    return EFFECTS[f](np.asarray(x, dtype="float64"))


def chunk(i: int, rows: int, dataset: str = "mixed", seed: int = 0):
    """Rows of chunk ``i``: a function of (dataset, seed, i) only."""
    import pandas as pd

    r = np.random.default_rng([seed, i])
    x1 = r.uniform(0, 1, rows)
    x3 = r.uniform(0, 1, rows)
    cols = {
        "x1": x1,
        "x2": x1 + r.normal(0, 0.3, rows),
        "x3": x3,
        "x4": r.uniform(-1, 1, rows),
        "x5": r.integers(0, 21, rows).astype("int64"),
        "x6": r.exponential(1.0, rows),
        "x7": r.uniform(0, 1, rows),
        "x8": r.normal(0, 1, rows),
    }
    c1 = r.integers(0, 6, rows)
    c2 = r.integers(0, 40, rows)
    if dataset.startswith("numeric"):
        cols["x9"] = r.integers(0, 5, rows).astype("int64")
        cols["x10"] = x3 + r.normal(0, 0.2, rows)  # codependent with x3, no effect of its own
    for f in ("x1", "x2", "x3", "x4", "x6", "x7", "x8", "x10"):  # measured to 2 (or 3) decimals
        if f in cols:
            cols[f] = np.round(cols[f], DECIMALS[dataset])
    y = sum(numeric_effect(f, v) for f, v in cols.items()) + r.normal(0, 0.5, rows)
    df = pd.DataFrame(cols)
    if dataset == "mixed":
        y = y + C1_EFFECT[c1] + C2_EFFECT[c2]
        df["c1"] = pd.array(C1_LEVELS[c1], dtype="str")
        df["c2"] = c2.astype("int64")
    df["y"] = y
    return df


def write_data(path: str, n: int, rows_per_file: int, dataset: str, seed: int = 0) -> str:
    """Directory of parquet files written one chunk at a time (reused if complete)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if os.path.exists(os.path.join(path, "_done")):
        return path
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    for i, start in enumerate(range(0, n, rows_per_file)):
        df = chunk(i, min(rows_per_file, n - start), dataset, seed)
        pq.write_table(pa.Table.from_pandas(df, preserve_index=False), os.path.join(path, f"part-{i:05d}.parquet"))
    open(os.path.join(path, "_done"), "w").close()
    return path


def truth_importances(path: str, dataset: str) -> dict:
    """Normalised true importances on the table at ``path`` (read file by file).

    Numeric: mean over rows of |f(x) - f(min x)| (PD is 0 at the minimum; weighting
    positions by their rows = averaging over rows).  Categorical: mean over rows of
    |effect - plain mean of the effects| (mean-centred, as both implementations do).
    """
    import glob

    import pandas as pd

    feats = FEATURES[dataset]
    num = [f for f in feats if f not in CATEGORICAL[dataset]]
    sums = dict.fromkeys(feats, 0.0)
    files = sorted(glob.glob(os.path.join(path, "*.parquet")))
    mins = dict.fromkeys(num, np.inf)
    for f in files:
        df = pd.read_parquet(f, columns=num)
        for c in num:
            mins[c] = min(mins[c], float(df[c].min()))
    n = 0
    c1c, c2c = C1_EFFECT - C1_EFFECT.mean(), C2_EFFECT - C2_EFFECT.mean()
    for f in files:
        df = pd.read_parquet(f)
        n += len(df)
        for c in num:
            sums[c] += float(np.abs(numeric_effect(c, df[c]) - numeric_effect(c, mins[c])).sum())
        if dataset == "mixed":
            codes = np.searchsorted(C1_LEVELS, df["c1"].to_numpy(dtype=object).astype(str))
            sums["c1"] += float(np.abs(c1c[codes]).sum())
            sums["c2"] += float(np.abs(c2c[df["c2"].to_numpy()]).sum())
    raw = {k: v / n for k, v in sums.items()}
    tot = sum(raw.values())
    return {k: v / tot for k, v in raw.items()}


# ----------------------------------------------------------------------------- runs


def _peak_rss() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def daskpd_child(args) -> dict:
    """Runs inside a fresh process: one daskpd importances call, timed and counted."""
    import dask
    import pandas as pd
    from dask.callbacks import Callback

    import daskpd
    from daskpd import strat_curves_and_importances

    cats = CATEGORICAL[args.dataset]
    # warm up imports (dask, sklearn, pyarrow, scipy) outside the clock, on a tiny table
    strat_curves_and_importances(chunk(999, 2_000, args.dataset), target="y", categorical_features=cats, progress=False)

    counts = {"read": 0, "map": 0}

    class Count(Callback):
        def _pretask(self, key, dsk, state):
            name = str(key[0] if isinstance(key, tuple) else key)
            if name.startswith("daskpd-") and "-map-" in name:  # a pass's task over one partition
                counts["read"] += 1
                counts["map"] += name.startswith("daskpd-strat-map")

    kw = json.loads(args.kwargs)
    rss0 = _peak_rss()
    with dask.config.set(scheduler="threads"), Count():
        t0 = time.perf_counter()
        res = strat_curves_and_importances(args.data, target="y", categorical_features=cats, progress=False, **kw)
        secs = time.perf_counter() - t0
    t = res.table
    return {"ok": True, "seconds": secs, "peak_rss_bytes": _peak_rss(), "rss_before_bytes": rss0,
            "n_rows": res.n_rows, "n_partitions": res.n_partitions, "partition_reads": counts["read"],
            "scan_tasks": counts["map"], "n_passes": res.n_passes, "timings": res.timings,
            "importance": t["importance"].to_dict(),
            "importance_std": (t["importance_std"] if "importance_std" in t else pd.Series(dtype=float)).to_dict(),
            "kind": t["kind"].to_dict(), "kwargs": kw, "daskpd_version": daskpd.__version__}


def run_daskpd(data: str, dataset: str, kwargs: dict, timeout: float) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--data", data, "--dataset", dataset,
           "--kwargs", json.dumps(kwargs)]
    r = _run(cmd, timeout, "daskpd")
    r.setdefault("kwargs", kwargs)
    return r


def run_stratx(py: str, data: str, dataset: str, workdir: str, timeout: float, max_memory: int) -> dict:
    if not os.path.exists(py):
        return {"ok": False, "error": f"stratx venv python not found at {py} (run benchmarks/setup_stratx.sh)"}
    out = os.path.join(workdir, f"stratx_importances_{dataset}.json")
    cmd = [py, os.path.join(HERE, "stratx_runner.py"), "--method", "importances", "--data", data, "--target", "y",
           "--features", ",".join(FEATURES[dataset]), "--max-memory-bytes", str(int(max_memory)), "--out", out]
    if CATEGORICAL[dataset]:
        cmd += ["--catcolumns", ",".join(CATEGORICAL[dataset])]
    r = _run(cmd, timeout, "stratx", json_file=out)
    if r.get("ok"):
        r["importance"] = {row["feature"]: row["Importance"] for row in r["importances"]}
    return r


def _run(cmd, timeout, label, json_file=None) -> dict:
    if json_file and os.path.exists(json_file):
        os.remove(json_file)
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=dict(os.environ, MPLBACKEND="Agg"))
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"timed out after {timeout:.0f} s"}
    wall = time.perf_counter() - t0
    try:
        if json_file:
            with open(json_file) as f:
                r = json.load(f)
        else:
            r = json.loads(p.stdout.strip().splitlines()[-1])
    except (OSError, ValueError, IndexError):
        return {"ok": False, "error": f"{label} exited {p.returncode}: {p.stderr.strip()[-800:]}"}
    r["process_seconds"] = wall
    return r


# ----------------------------------------------------------------------------- report


def accuracy(imp: dict, truth: dict) -> tuple[float, float]:
    from scipy.stats import spearmanr

    feats = [f for f in truth if imp.get(f) is not None and np.isfinite(imp[f])]
    a = np.array([imp[f] for f in feats])
    b = np.array([truth[f] for f in feats])
    return float(np.max(np.abs(a - b))), float(spearmanr(a, b).statistic)


def mib(b):
    return f"{b / 2**20:,.0f}" if b else "-"


#: (result key, dataset, size, label)
RUNS = [
    ("stratx_numeric", "numeric", "small", "stratx 0.5 `importances` (stratx-new venv)"),
    ("daskpd_numeric", "numeric", "small", "daskpd `importances`, defaults"),
    ("daskpd_numeric_sample", "numeric", "small", "daskpd, trees on a 20k-row sample, min_samples_leaf=3"),
    ("daskpd_numeric_trials", "numeric", "small", "daskpd, defaults, bootstrap trials"),
    ("daskpd_numeric_stratx", "numeric", "small", "daskpd, `honest=False` (stratx's estimator)"),
    ("stratx_numeric3", "numeric3", "small", "stratx 0.5 `importances` (stratx-new venv)"),
    ("daskpd_numeric3", "numeric3", "small", "daskpd `importances`, defaults"),
    ("daskpd_numeric3_sample", "numeric3", "small", "daskpd, trees on a 20k-row sample, min_samples_leaf=3"),
    ("stratx_mixed", "mixed", "small", "stratx 0.5 `importances(catcolnames={c1,c2})` (stratx-old venv)"),
    ("daskpd_mixed", "mixed", "small", "daskpd `importances(categorical_features=['c2'])`, defaults"),
    ("daskpd_mixed_sample", "mixed", "small", "daskpd, trees on a 20k-row sample, min_samples_leaf=3"),
    ("daskpd_large", "mixed", "large", "daskpd, defaults"),
    ("daskpd_large_trials", "mixed", "large", "daskpd, defaults, bootstrap trials"),
]


def report(results: dict, cmdline: str) -> str:
    truth = results["truth"]
    lines = [f"Command: `{cmdline}`  "]
    m = results["machine"]
    lines.append(f"Machine: {m['cpus']} CPUs, {m['mem_gib']:.0f} GiB, Python {m['python']}; load average "
                 f"(1/5/15 min) at start {m['load_start']}, at end {m.get('load_end', '?')}.  ")
    lines.append("")
    lines.append("| data | run | n | trials | seconds | stratx / daskpd | peak RSS MiB | partition reads "
                 "(partitions) | max abs err vs truth | Spearman vs truth |")
    lines.append("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |")
    for key, dataset, size, label in RUNS:
        r = results.get(key)
        if r is None:
            continue
        n = results[f"n_{size}"]
        trials = r.get("kwargs", {}).get("n_trials", 1) if key.startswith("daskpd") else 1
        sx = results.get(f"stratx_{dataset}", {}) if size == "small" else {}
        if not r.get("ok"):
            err = str(r.get("error", "?")).replace("|", "/")[:150]
            when = r.get("seconds_until_error")
            lines.append(f"| {dataset} | {label} | {n:,} | {trials} | failed{f' after {when:.1f} s' if when else ''}: "
                         f"{err} | | {mib(r.get('peak_rss_bytes'))} | | | |")
            continue
        err, rho = accuracy(r["importance"], truth[f"{dataset}_{size}"])
        speed = (f"{sx['seconds'] / r['seconds']:.1f}x" if sx.get("ok") and key.startswith("daskpd") else "")
        reads = (f"{r['partition_reads']} ({r['n_partitions']})" if "partition_reads" in r
                 else "(whole table in memory)")
        lines.append(f"| {dataset} | {label} | {n:,} | {trials} | {r['seconds']:.2f} | {speed} | "
                     f"{mib(r['peak_rss_bytes'])} | {reads} | {err:.3f} | {rho:.3f} |")
    lines.append("")
    for dataset in ("numeric", "numeric3", "mixed"):
        cols = [("truth", truth.get(f"{dataset}_small"))]
        for key, ds, size, label in RUNS:
            r = results.get(key, {})
            if ds == dataset and size == "small" and r.get("ok"):
                name = key.replace(f"_{dataset}", "").replace("_", " ")
                cols.append((name, r["importance"]))
        if dataset == "mixed" and results.get("daskpd_large", {}).get("ok"):
            cols.append((f"truth n={results['n_large']:.0e}", truth.get("mixed_large")))
            cols.append((f"daskpd n={results['n_large']:.0e}", results["daskpd_large"]["importance"]))
        cols = [(c, d) for c, d in cols if d]
        if len(cols) < 2:
            continue
        lines.append(f"Normalised importances, `{dataset}` data (sum to 1):")
        lines.append("")
        lines.append("| feature | " + " | ".join(c for c, _ in cols) + " |")
        lines.append("| --- |" + " ---: |" * len(cols))
        for f in FEATURES[dataset]:
            lines.append(f"| {f} | " + " | ".join(f"{d[f]:.4f}" if d.get(f) is not None else "-" for _, d in cols)
                         + " |")
        lines.append("")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n-small", type=float, default=1e5)
    p.add_argument("--n-large", type=float, default=1e7)
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "daskpd-bench-importances"))
    p.add_argument("--stratx-new", default=STRATX_NEW, help="python of the stratx-new venv")
    p.add_argument("--stratx-old", default=STRATX_OLD, help="python of the stratx-old venv")
    p.add_argument("--stratx-timeout", type=float, default=900)
    p.add_argument("--stratx-max-memory", type=float, default=8e9,
                   help="RLIMIT_AS of the stratx process (bytes), so that it fails with MemoryError "
                        "instead of exhausting the machine")
    p.add_argument("--skip-stratx", action="store_true")
    p.add_argument("--skip-large", action="store_true")
    p.add_argument("--out", help="JSON with every run's details")
    # internal: one daskpd run in a child process
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--data", help=argparse.SUPPRESS)
    p.add_argument("--dataset", default="mixed", help=argparse.SUPPRESS)
    p.add_argument("--kwargs", default="{}", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        try:
            r = daskpd_child(a)
        except Exception as e:  # report, do not hide
            import traceback

            r = {"ok": False, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]}
        print(json.dumps(r, default=float))
        return 0

    import psutil

    n_small, n_large = int(a.n_small), int(a.n_large)
    os.makedirs(a.workdir, exist_ok=True)
    results = {"n_small": n_small, "n_large": n_large, "truth": {},
               "machine": {"cpus": os.cpu_count(), "mem_gib": psutil.virtual_memory().total / 2**30,
                           "python": platform.python_version(),
                           "load_start": " ".join(f"{v:.1f}" for v in os.getloadavg())}}
    truth = results["truth"]
    timeout = a.stratx_timeout

    def log(key):
        r = results[key]
        print(f"{key}: {r['seconds']:.2f} s" if r.get("ok") else f"{key}: FAILED {r.get('error')}", file=sys.stderr)

    fast = {"sample_size": 20_000, "min_samples_leaf": 3}
    for dataset in ("numeric", "numeric3", "mixed"):
        path = write_data(os.path.join(a.workdir, f"{dataset}_{n_small}"), n_small, max(1, -(-n_small // 4)), dataset)
        truth[f"{dataset}_small"] = truth_importances(path, dataset)
        runs = {f"daskpd_{dataset}": {}, f"daskpd_{dataset}_sample": fast}
        if dataset == "numeric":
            runs["daskpd_numeric_trials"] = {"n_trials": a.trials}
            if not a.skip_stratx:  # stratx's estimator, next to stratx
                runs["daskpd_numeric_stratx"] = {"honest": False}
        for key, kw in runs.items():
            results[key] = run_daskpd(path, dataset, kw, timeout)
            log(key)
        if not a.skip_stratx:
            py = a.stratx_old if CATEGORICAL[dataset] else a.stratx_new
            results[f"stratx_{dataset}"] = run_stratx(py, path, dataset, a.workdir, timeout, a.stratx_max_memory)
            log(f"stratx_{dataset}")
    if not a.skip_large:
        t0 = time.perf_counter()
        path = write_data(os.path.join(a.workdir, f"mixed_{n_large}"), n_large, CHUNK, "mixed")
        print(f"data n={n_large:,}: {path} ({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
        truth["mixed_large"] = truth_importances(path, "mixed")
        for key, kw in (("daskpd_large", {}), ("daskpd_large_trials", {"n_trials": a.trials})):
            results[key] = run_daskpd(path, "mixed", kw, 4 * timeout)
            log(key)
    results["machine"]["load_end"] = " ".join(f"{v:.1f}" for v in os.getloadavg())
    cmdline = ".venv/bin/python benchmarks/bench_importances.py " + " ".join(
        argv if argv is not None else sys.argv[1:])
    md = report(results, cmdline.strip())
    print(md)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(results, f, indent=1, default=float)
    return 0


if __name__ == "__main__":
    sys.exit(main())
