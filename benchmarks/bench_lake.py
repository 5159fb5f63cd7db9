#!/usr/bin/env python
"""Lake scale: all-feature importances against the floor, with the memory of every process.

    .venv/bin/python benchmarks/bench_lake.py --rows 1e7 [--workers 2,1] [--threads]
        [--memory-limit 2.5GiB] [--workdir DIR] [--trials 1] [--skip-floor]

Writes ``--rows`` rows of :class:`daskpd.datasets.Lake` (ten features: numeric ones with
101 to ~n distinct values, a 50-level string and a 5,000-level integer categorical) as
parquet files of 500,000 rows into ``--workdir`` (default: ``daskpd-bench`` under the
system's temporary directory, or ``$DASKPD_BENCH_DIR``; reused when already there), then,
for each worker count, in a fresh process:

* starts ``LocalCluster(n_workers=W, threads_per_worker=1, memory_limit=...)`` (worker
  processes, loopback only, no dashboard);
* the **floor**: one read of the same columns plus, per feature, one keyed sum/count
  aggregation of y per partition (``df.groupby(feature)[y].agg(["sum", "count"])``); the
  read is ``dask.dataframe.read_parquet`` with daskpd's own conversion (a block per
  column: ``arrow_to_pandas={"split_blocks": True}``), so that both sides read alike;
* ``daskpd.importances(lake, target="y", categorical_features=["k5000"], keep_suspect=True)``
  with the defaults otherwise (``keep_suspect``: all ten features, as the floor reads them;
  by default x6, an integer with a distinct value in almost every row, is left out as a
  likely identifier);
* samples the RSS of the driver and of every worker process (psutil, every 0.1 s), and
  reports the peaks, worker restarts and the scan's bucket count.

Before the clock starts, every process is warmed up (a 20,000-row request and a floor
on two files): imports and numba kernels are loaded, as in a long-lived cluster.

``--threads`` also runs both on dask's threaded scheduler (no cluster) in a fresh process
(2 threads), for the processes-vs-threads ratio and to check that the importances are
equal on threads and processes.  Each line printed is one JSON record;
a table follows.  Everything listens on 127.0.0.1.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROWS_PER_FILE = 500_000
TARGET = "y"


def write_lake(rows: int, workdir: str) -> str:
    from daskpd.datasets import Lake, write_parquet

    path = os.path.join(workdir, f"lake-{rows}")
    if not os.path.isdir(path):
        t0 = time.perf_counter()
        write_parquet(Lake(random_state=0), rows, path, rows_per_file=ROWS_PER_FILE, overwrite=False)
        print(f"# wrote {rows:,} rows to {path} in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    return path


def _floor_kernel(df, features, target):
    import pandas as pd

    groups = 0
    for f in features:
        g = df.groupby(f, sort=False, observed=True)[target].agg(["sum", "count"])
        groups += len(g)
    return pd.DataFrame({"groups": [groups], "rows": [len(df)]})


def floor(path: str, features, target) -> dict:
    import dask
    import dask.dataframe as dd
    import pandas as pd

    t0 = time.perf_counter()

    ddf = dd.read_parquet(path, columns=[*features, target], arrow_to_pandas={"split_blocks": True})
    meta = pd.DataFrame({"groups": pd.Series([], dtype="int64"), "rows": pd.Series([], dtype="int64")})
    out = ddf.map_partitions(_floor_kernel, features, target, meta=meta).sum()
    (res,) = dask.compute(out)  # on the Client when there is one
    return {"floor_s": time.perf_counter() - t0, "floor_groups": int(res["groups"]), "rows": int(res["rows"])}


class RSSSampler:
    """Peak RSS of the driver and of the given worker pids (children included)."""

    def __init__(self, pids=()):
        import psutil

        self.me = psutil.Process()
        self.pids = list(pids)
        self.peak = {"driver": 0}
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        import psutil

        procs = {}
        while not self._stop.is_set():
            self.peak["driver"] = max(self.peak["driver"], self.me.memory_info().rss)
            for pid in self.pids:
                try:
                    p = procs.setdefault(pid, psutil.Process(pid))
                    self.peak[pid] = max(self.peak.get(pid, 0), p.memory_info().rss)
                except psutil.Error:
                    pass
            time.sleep(0.1)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()


def child(path: str, workers: int, memory_limit: str, n_trials: int, skip_floor: bool,
          mmap_threshold: str | None = None) -> dict:
    import warnings

    import dask

    import daskpd
    from daskpd.datasets import Lake

    features = list(Lake.features)
    rec = {"workers": workers, "memory_limit": memory_limit if workers else None, "n_trials": n_trials}
    client = cluster = None
    if mmap_threshold:  # glibc: allocations below this come from the heap, not fresh mmaps
        from dask.utils import parse_bytes

        dask.config.set({"distributed.nanny.pre-spawn-environ.MALLOC_MMAP_THRESHOLD_": parse_bytes(mmap_threshold)})
        rec["mmap_threshold"] = mmap_threshold
    if workers:
        from distributed import Client, LocalCluster

        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, memory_limit=memory_limit,
                               processes=True, host="127.0.0.1", dashboard_address=None)
        client = Client(cluster)
        pids = list(client.run(os.getpid).values())
        nannies = [w.process.process.pid for w in cluster.workers.values()]
    else:
        dask.config.set(scheduler="threads", num_workers=2)
        pids = []
    # warm up: libraries imported and numba kernels loaded in every process, as in a
    # long-lived cluster (neither the floor nor the call then pays for first use)
    import glob

    import pandas as pd

    first = sorted(glob.glob(os.path.join(path, "*.parquet")))[:2]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        daskpd.strat_curves_and_importances(pd.concat([pd.read_parquet(f) for f in first]).head(20_000),
                                            target=TARGET, categorical_features=["k5000"], progress=False,
                                            sample_size=5_000, keep_suspect=True)
        floor(first, features, TARGET)
    with RSSSampler(pids) as rss_floor:
        if not skip_floor:
            rec.update(floor(path, features, TARGET))
    t0 = time.perf_counter()
    with RSSSampler(pids) as rss, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = daskpd.strat_curves_and_importances(path, target=TARGET, categorical_features=["k5000"],
                                                  n_trials=n_trials, progress=False, keep_suspect=True)
    rec["importances_s"] = time.perf_counter() - t0
    if not skip_floor:
        rec["ratio"] = rec["importances_s"] / rec["floor_s"]
    rec["driver_peak_GiB"] = rss.peak["driver"] / 2 ** 30
    rec["floor_worker_peak_GiB"] = [rss_floor.peak.get(p, 0) / 2 ** 30 for p in pids]
    rec["worker_peak_GiB"] = [rss.peak.get(p, 0) / 2 ** 30 for p in pids]
    rec["timings"] = {k: round(v, 2) for k, v in res.timings.items()}
    rec["n_buckets"] = next(iter(res.curves.values())).params.get("n_buckets")
    rec["fan_in"] = next(iter(res.curves.values())).params.get("fan_in")
    rec["importance"] = {f: round(float(v), 5) for f, v in res.table["importance"].items()}
    if client is not None:
        now = list(client.run(os.getpid).values())
        rec["worker_restarts"] = len(set(now) - set(pids))
        client.close()
        cluster.close()
    return rec


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=float, default=1e7)
    ap.add_argument("--workers", default="2,1", help="worker-process counts, comma separated")
    ap.add_argument("--threads", action="store_true", help="also run on dask's threads (2), no cluster")
    ap.add_argument("--memory-limit", default="2.5GiB")
    ap.add_argument("--trials", type=int, default=1, help="n_trials of importances (1: no trials)")
    ap.add_argument("--skip-floor", action="store_true")
    ap.add_argument("--mmap-threshold", default=None,
                    help="MALLOC_MMAP_THRESHOLD_ for the worker processes (e.g. 64MiB; default: dask's environment)")
    ap.add_argument("--workdir", default=os.environ.get("DASKPD_BENCH_DIR", os.path.join(tempfile.gettempdir(),
                                                                                        "daskpd-bench")))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        args = json.loads(a.child)
        print(json.dumps(child(**args)), flush=True)
        return 0
    os.makedirs(a.workdir, exist_ok=True)
    rows = int(a.rows)
    path = write_lake(rows, a.workdir)
    print(f"# {rows:,} rows, {os.cpu_count()} cores, command: {' '.join([sys.argv[0], *(argv or sys.argv[1:])])}",
          flush=True)
    configs = [int(w) for w in a.workers.split(",") if w.strip()]
    if a.threads:
        configs.append(0)
    recs = []
    for w in configs:
        args = {"path": path, "workers": w, "memory_limit": a.memory_limit, "n_trials": a.trials,
                "skip_floor": a.skip_floor, "mmap_threshold": a.mmap_threshold}
        out = subprocess.run([sys.executable, __file__, "--child", json.dumps(args)], capture_output=True, text=True)
        lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
        if out.returncode != 0 or not lines:
            rec = {"workers": w, "error": (out.stderr or out.stdout).strip().splitlines()[-5:]}
        else:
            rec = json.loads(lines[-1])
        recs.append(rec)
        print(json.dumps(rec), flush=True)
    print("\n| scheduler | floor s | importances s | ratio | worker peak GiB | driver peak GiB | restarts | buckets | task fan-in |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in recs:
        if "error" in r:
            print(f"| {r['workers']} workers | failed: {r['error'][-1] if r['error'] else '?'} |||||")
            continue
        name = f"{r['workers']} x 1 thread, {r['memory_limit']}" if r["workers"] else "threads (2)"
        peaks = ", ".join(f"{v:.2f}" for v in r["worker_peak_GiB"]) or "-"
        print(f"| {name} | {r.get('floor_s', float('nan')):.1f} | {r['importances_s']:.1f} | "
              f"{r.get('ratio', float('nan')):.2f} | {peaks} | {r['driver_peak_GiB']:.2f} | "
              f"{r.get('worker_restarts', '-')} | {r.get('n_buckets')} | {r.get('fan_in')} |")
    by = {r["workers"]: r for r in recs if "error" not in r}
    if 1 in by and 2 in by:
        print(f"\nspeed-up 2 workers vs 1: {by[1]['importances_s'] / by[2]['importances_s']:.2f}x")
    if 0 in by and 2 in by:
        print(f"processes (2) vs threads (2): {by[2]['importances_s'] / by[0]['importances_s']:.2f}x")
    if 0 in by:
        for w in sorted(w for w in by if w):
            same = by[0]["importance"] == by[w]["importance"]
            print(f"importances equal (5 decimals) threads vs {w} worker processes: {same}")
    return 1 if len(by) < len(recs) else 0


if __name__ == "__main__":
    sys.exit(main())
