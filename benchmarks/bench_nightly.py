#!/usr/bin/env python
"""Nightly runs that cost what changed: a full job run, files appended, an incremental rerun.

    .venv/bin/python benchmarks/bench_nightly.py --rows 1e7 [--append 1e6] [--workers 2]
        [--memory-limit 2.5GiB] [--source parquet|delta] [--workdir DIR] [--tiny]

Writes ``--rows`` rows of :class:`daskpd.datasets.Lake` (the ten-feature lake of
``bench_lake.py``, parquet files of 500,000 rows; reused when already in ``--workdir``),
links them into a fresh lake directory, starts ``LocalCluster(n_workers=W,
threads_per_worker=1, memory_limit=...)`` and, after a warm-up (imports and numba kernels
loaded in every process), times ``daskpd.job.run_job`` on a job computing the
importances and every curve (``[run] incremental = true``, ``refit = "never"``):

1. **plain**: a full run that keeps no state (``incremental = false``: today's job);
2. **full**: the first incremental run (no earlier state: a full run that keeps it);
3. ``--append`` rows are appended as two new files;
4. **incremental**: the rerun scans the two files only and adds their sums;
5. **no new files**: the rerun finishes the kept sums again;
6. **incremental, first-pass cache on**: step 4 again from the same state (steps 4 and 5
   removed), with ``first_pass_cache = true``: the rerun also keeps the new files' pass 1
   in the job's first-pass cache, for the next run that fits the trees again.

``--source delta``: the linked files become a Delta Lake table
(``deltalake.convert_to_deltalake``: a log whose first commit adds them, the files left
as they are), the rows are appended as two commits of one file each
(``deltalake.write_deltalake(mode="append")``), and the job names the table's directory:
the incremental rerun reads the two commits from the table's log.  Step 1 is left out
(it measures the parquet job without a state).

Then checks the incremental run against a full scan of every file under the same
stratification (``daskpd.strat_curves_and_importances(..., stratification=...)``) and
prints the wall times, the ratios to the full run, the differences, the state's size
on disk, what keeping the new files' pass 1 adds to the incremental rerun, and per run
the peak RSS of the driver and of every worker process (sampled every 0.1 s,
``bench_lake.RSSSampler``) with the count of worker processes restarted.  ``--tiny``:
20,000 rows and 4,000 appended on an in-process cluster (the
test of the script).  Each line printed is one JSON record; a table follows.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import warnings

ROWS_PER_FILE = 500_000
TARGET = "y"

SPEC = """
name = "nightly"
target = "y"
categorical = ["k5000"]
[source]
path = "{lake}"
[output]
plots = false
report = false
[run]
incremental = {incremental}
refit = "never"
"""


def write_lake(rows: int, workdir: str, rows_per_file: int) -> str:
    from daskpd.datasets import Lake, write_parquet

    name = f"lake-{rows}" if rows_per_file == ROWS_PER_FILE else f"lake-{rows}-{rows_per_file}"
    path = os.path.join(workdir, name)
    if not os.path.isdir(path):
        t0 = time.perf_counter()
        write_parquet(Lake(random_state=0), rows, path, rows_per_file=rows_per_file, overwrite=False)
        print(f"# wrote {rows:,} rows to {path} in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    return path


def link_lake(base: str, lake: str) -> None:
    os.makedirs(lake)
    for f in sorted(os.listdir(base)):
        if f.endswith(".parquet"):
            try:
                os.link(os.path.join(base, f), os.path.join(lake, f))
            except OSError:
                shutil.copy2(os.path.join(base, f), os.path.join(lake, f))


def append(lake: str, rows: int, source: str = "parquet") -> list[str]:
    """``rows`` new rows of the same lake as two files (chunks the base never wrote); a
    Delta table's as two commits."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from daskpd.datasets import Lake

    gen = Lake(random_state=0)
    out = []
    for j, n in enumerate((rows // 2, rows - rows // 2)):
        table = pa.Table.from_pandas(gen.chunk(90_000 + j, n), preserve_index=False)
        if source == "delta":
            from deltalake import DeltaTable, write_deltalake

            write_deltalake(lake, table, mode="append")
            out.append(f"version {DeltaTable(lake).version()}")
            continue
        p = os.path.join(lake, f"part-9{j:04d}.parquet")
        pq.write_table(table, p)
        out.append(p)
    return out


def nightly_args(description: str, argv=None):
    """The options of the nightly benchmarks (rows, appended rows, cluster, work
    directory; ``--tiny`` for the test suite)."""
    ap = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=float, default=1e7)
    ap.add_argument("--append", type=float, default=1e6, help="rows appended, as two files")
    ap.add_argument("--workers", type=int, default=2, help="worker processes (0: an in-process cluster)")
    ap.add_argument("--memory-limit", default="2.5GiB")
    ap.add_argument("--source", choices=("parquet", "delta"), default="parquet",
                    help="the lake as parquet files, or as a Delta Lake table")
    ap.add_argument("--tiny", action="store_true", help="20,000 rows + 4,000 appended, in-process (a test)")
    ap.add_argument("--workdir", default=os.environ.get("DASKPD_BENCH_DIR", os.path.join(tempfile.gettempdir(),
                                                                                        "daskpd-bench")))
    a = ap.parse_args(argv)
    if a.tiny:
        a.rows, a.append, a.workers = 2e4, 4e3, 0
    return a


def base_lake(a) -> str:
    """The lake of ``a.rows`` rows (written once, then reused)."""
    rows = int(a.rows)
    rows_per_file = ROWS_PER_FILE if rows >= 4 * ROWS_PER_FILE else max(1, rows // 4)
    os.makedirs(a.workdir, exist_ok=True)
    return write_lake(rows, a.workdir, rows_per_file)


def start_cluster(a):
    """``(cluster, client)``: ``a.workers`` worker processes of one thread and
    ``a.memory_limit`` on 127.0.0.1, or one in-process worker of 2 threads."""
    from distributed import Client, LocalCluster

    if a.workers:
        cluster = LocalCluster(n_workers=a.workers, threads_per_worker=1, memory_limit=a.memory_limit, processes=True,
                               host="127.0.0.1", dashboard_address=None)
    else:
        cluster = LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None)
    return cluster, Client(cluster)


def main(argv=None):
    a = nightly_args(__doc__, argv)
    rows, extra = int(a.rows), int(a.append)
    base = base_lake(a)

    import numpy as np
    import pandas as pd

    import daskpd
    from daskpd.job import run_job

    cluster, client = start_cluster(a)
    run_root = tempfile.mkdtemp(prefix="nightly-", dir=a.workdir)
    try:
        lake = os.path.join(run_root, "lake")
        link_lake(base, lake)
        if a.source == "delta":
            from deltalake import convert_to_deltalake

            t0 = time.perf_counter()
            convert_to_deltalake(lake)
            print(f"# the lake's files made a Delta table in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        out = os.path.join(run_root, "runs")

        def spec(incremental: bool) -> str:
            p = os.path.join(run_root, f"job-{incremental}.toml")
            with open(p, "w") as fh:
                fh.write(SPEC.format(lake=lake, incremental=str(incremental).lower()))
            return p

        # warm-up: imports and numba kernels in every process, as in a long-lived cluster (not for --tiny)
        first = [] if a.tiny else sorted(os.path.join(base, f) for f in os.listdir(base) if f.endswith(".parquet"))[:2]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if first:  # and the incremental finish's kernels (a state plus a few rows)
                warm = pd.concat([pd.read_parquet(f) for f in first])
                w = daskpd.strat_curves_and_importances(warm.head(20_000), target=TARGET, categorical_features=["k5000"],
                                                        progress=False, sample_size=5_000, keep_state=True)
                daskpd.strat_curves_and_importances(warm.iloc[20_000:22_000], target=TARGET,
                                                    categorical_features=["k5000"], progress=False,
                                                    stratification=w.stratification, base_state=w.state,
                                                    keep_state=True)

        from bench_lake import RSSSampler

        def timed(step, path, run_id, **kw):
            pids = client.run(os.getpid) if a.workers else {}
            t0 = time.perf_counter()
            with warnings.catch_warnings(), RSSSampler(pids.values()) as rss:
                warnings.simplefilter("ignore")
                final = run_job(path, scheduler=cluster.scheduler_address, output=out, run_id=run_id, progress=False,
                                out=False, log=False, **kw)
            wall = time.perf_counter() - t0
            after = client.run(os.getpid) if a.workers else {}
            gib = {k: round(v / 2 ** 30, 2) for k, v in rss.peak.items()}
            m = json.loads(open(os.path.join(final, "manifest.json")).read())
            sdir = os.path.join(final, "state")
            written = sum(os.stat(os.path.join(d, f)).st_size for d, _, fs in os.walk(sdir) for f in fs
                          if os.stat(os.path.join(d, f)).st_nlink == 1)  # not hard-linked from an earlier run
            rec = {"step": step, "wall_s": round(wall, 3), "mode": m["incremental"]["mode"],
                   "reason": m["incremental"]["reason"], "state_bytes": (m.get("state") or {}).get("bytes"),
                   "state_bytes_written": written,
                   "rows": (m.get("state") or {}).get("n_rows"), "timings": m["timings_s"],
                   "phases": m.get("model_free_phases_s", {}), "first_pass_cache": m.get("first_pass_cache"),
                   "driver_peak_gib": gib.pop("driver"), "worker_peaks_gib": sorted(gib.values(), reverse=True),
                   "workers_restarted": len(set(pids.values()) - set(after.values()))}
            print(json.dumps(rec), flush=True)
            return final, rec

        recs = {}
        if not a.tiny and a.source == "parquet":
            _, recs["plain"] = timed("plain full run (no state kept)", spec(False), "plain")
        full_dir, recs["full"] = timed("full run keeping the state", spec(True), "full")
        t0 = time.perf_counter()
        new = append(lake, extra, a.source)
        what = "commits" if a.source == "delta" else "files"
        print(f"# appended {extra:,} rows as {len(new)} {what} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        inc_dir, recs["incremental"] = timed(f"incremental rerun (+{extra:,} rows, {len(new)} {what})", spec(True),
                                             "incremental")
        _, recs["none"] = timed("rerun, no new files", spec(True), "none")

        # the incremental result against a full scan of every file under the same stratification
        strat = daskpd.Stratification.load(os.path.join(full_dir, "state", "stratification.pkl"))
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            whole = daskpd.strat_curves_and_importances(lake, target=TARGET, categorical_features=["k5000"],
                                                        stratification=strat, progress=False)
        scan_s = time.perf_counter() - t0
        got = pd.read_parquet(os.path.join(inc_dir, "importances.parquet")).set_index("feature")["importance"]
        want = whole.table["importance"]
        imp_diff = float(np.max(np.abs(got.reindex(want.index).to_numpy() - want.to_numpy())))
        curves = pd.read_parquet(os.path.join(inc_dir, "curves.parquet"))
        curve_diff = 0.0
        for f, res in whole.curves.items():
            mine = curves[(curves["feature"] == f)]["pd"].to_numpy(dtype=float)
            theirs = np.asarray(res.pd, dtype=float)
            scale = max(1.0, float(np.nanmax(np.abs(theirs))))
            curve_diff = max(curve_diff, float(np.nanmax(np.abs(mine - theirs))) / scale)
        same_rows = whole.n_rows == recs["incremental"]["rows"] == rows + extra
        check = {"full_scan_under_same_stratification_s": round(scan_s, 3), "importance_max_abs_diff": imp_diff,
                 "curve_max_rel_diff": curve_diff, "rows_equal": bool(same_rows)}
        print(json.dumps(check), flush=True)

        # the same incremental night again, keeping the new files' pass 1 in the first-pass cache
        for r in ("incremental", "none"):
            shutil.rmtree(os.path.join(out, "nightly", r))
        _, recs["cache"] = timed(f"incremental rerun, first-pass cache on (+{extra:,} rows)", spec(True),
                                 "incremental-cache", first_pass_cache=True)

        full = recs["full"]["wall_s"]
        print(f"\n{rows:,} rows + {extra:,} appended ({'a Delta table' if a.source == 'delta' else 'parquet files'}); "
              f"{a.workers or 'in-process'} worker(s)"
              f"{'' if not a.workers else ' x ' + a.memory_limit}\n")
        print("| run | wall s | / full run | mode | driver peak GiB | worker peaks GiB | workers restarted |")
        print("|---|---:|---:|---|---:|---|---:|")
        for k in ("plain", "full", "incremental", "none", "cache"):
            if k not in recs:
                continue
            r = recs[k]
            peaks = " / ".join(f"{v:.2f}" for v in r["worker_peaks_gib"]) or "-"
            print(f"| {r['step']} | {r['wall_s']:.2f} | {r['wall_s'] / full:.3f} | {r['mode']} | "
                  f"{r['driver_peak_gib']:.2f} | {peaks} | {r['workers_restarted']} |")
        print("\nper phase (s): model-free phases, then the job's own")
        for k in ("plain", "full", "incremental", "none", "cache"):
            if k in recs:
                ph = {**recs[k]["phases"], **{f"job_{n}": v for n, v in recs[k]["timings"].items()}}
                print(f"  {k}: " + ", ".join(f"{n} {float(v):.2f}" for n, v in ph.items()))
        mib = recs["incremental"]["state_bytes"] / 2 ** 20
        print(f"\nstate on disk: {mib:.1f} MiB ({recs['incremental']['state_bytes']:,} bytes); written by the "
              f"incremental run (the rest hard-linked): {recs['incremental']['state_bytes_written'] / 2 ** 20:.1f} MiB")
        print(f"incremental equals the full scan under the same stratification: rows {same_rows}, "
              f"importance max |diff| {imp_diff:.1e}, curve max rel diff {curve_diff:.1e}")
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20  # KiB -> GiB (Linux)
        print(f"driver peak RSS over the whole script (the check's full scan included): {peak:.2f} GiB")
        print(f"incremental / full: {recs['incremental']['wall_s'] / full:.3f} (target <= 0.10); "
              f"no new files / full: {recs['none']['wall_s'] / full:.3f} (target <= 0.03)")
        inc, cached = recs["incremental"], recs["cache"]
        print(f"keeping the new files' pass 1 in the first-pass cache: incremental rerun {cached['wall_s']:.2f} s vs "
              f"{inc['wall_s']:.2f} s ({cached['wall_s'] / inc['wall_s']:.3f}x); its phase first_pass_cache_s "
              f"{cached['phases'].get('first_pass_cache_s', float('nan')):.2f} s")
        if "plain" in recs:
            plain = recs["plain"]["wall_s"]
            print(f"against the plain full run: full keeping the state {full / plain:.2f}x, incremental "
                  f"{recs['incremental']['wall_s'] / plain:.3f}, no new files {recs['none']['wall_s'] / plain:.3f}")
    finally:
        client.close()
        cluster.close()
        shutil.rmtree(run_root, ignore_errors=True)


if __name__ == "__main__":
    main()
