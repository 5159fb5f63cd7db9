#!/usr/bin/env python
"""Where the memory of one importances request goes: peak RSS per phase, and the size of
the merged per-(leaf, position) aggregates, for the issue's p = 10 "mixed" table.

    .venv/bin/python benchmarks/bench_scan_memory.py [--n 1e7] [--trials 0,5] [--split-every auto]
        [--workdir DIR]

The data is ``bench_importances.py``'s ``mixed`` table (8 numeric + 2 categorical features,
files of 500,000 rows, written chunk by chunk; reused when already in ``--workdir``).
Each (trials, split_every) setting runs in its own fresh process on dask's threads: the
process RSS is sampled every 50 ms during ``daskpd._strat.pipeline.run_strat`` (what
``importances`` runs before its small driver-side finalize), and the peak is reported
per phase (sample pass, tree fits, scan), with the merged aggregates' bytes and groups
(every bucket's merged ``daskpd._engine.sums.Table`` of every feature, added up, as its
last combine hands it to the finish; the buckets are finished one by one, so they are
not all held at once), the reduction's combine fan-in and bucket count, and, from a
dask callback on the threaded scheduler's cache, the most bytes of task results held at
once (``dask.sizeof``; the map and combine outputs are ``daskpd._strat.scan.ScanPiece``)
and how many scan (map) outputs were among them at that moment.

``--split-every`` sets the dask config ``daskpd.split-every`` (the fan-in of the
reduction; ``auto``, the engine's default, leaves it unset: see daskpd._engine.memory).
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
FEATURES = ["x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8", "c1", "c2"]


def child(data: str, n_trials: int, split_every: str) -> dict:
    import dask
    import psutil
    from dask.callbacks import Callback
    from dask.sizeof import sizeof  # ScanPiece (map / combine outputs) is registered in daskpd._strat.scan

    import daskpd._strat.categorical_buckets as catb
    import daskpd._strat.numeric as numeric
    from daskpd._strat import pipeline

    proc = psutil.Process()
    samples, stop = [], threading.Event()

    def sampler():
        while not stop.is_set():
            samples.append((time.perf_counter(), proc.memory_info().rss))
            time.sleep(0.05)

    # the merged tables: each bucket's merged daskpd._engine.sums.Table of each feature, as its
    # last combine hands it to the finish (numeric.bucket_sums / categorical_buckets.prepare)
    merged, lock = {}, threading.Lock()

    def recording(fn, table_of):
        def wrapper(*args, **kwargs):
            table, fs = table_of(args), args[1]
            with lock:
                n, b = merged.get(fs.feature, (0, 0))
                merged[fs.feature] = (n + len(table), b + table.nbytes)
            return fn(*args, **kwargs)
        return wrapper

    numeric.bucket_sums = recording(numeric.bucket_sums, lambda a: a[0])
    catb.prepare = recording(catb.prepare, lambda a: a[0][0])

    held = {"bytes": 0, "maps": 0}

    def held_bytes(cache) -> int:  # each object once (a pick's result is also inside its map's tuple)
        seen, total, todo = set(), 0, list(cache.values())
        while todo:
            v = todo.pop()
            if id(v) in seen:
                continue
            seen.add(id(v))
            if isinstance(v, (tuple, list)):
                todo.extend(v)
            else:
                total += sizeof(v)
        return total

    class Held(Callback):  # results in the scheduler's cache after each task
        def _posttask(self, key, result, dsk, state, worker_id):
            cache = state["cache"]
            total = held_bytes(cache)
            if total > held["bytes"]:
                held["bytes"] = total
                held["maps"] = sum(str(k).startswith("daskpd-strat-map") for k in cache)

    kw = dict(kinds={"c2": "categorical"}, min_samples_leaf_for={"c1": 5, "c2": 5}, progress=False)
    config = {"scheduler": "threads"}
    if split_every != "auto":  # the reduction's fan-in (the engine's default: "auto", see daskpd._engine.memory)
        config["daskpd.split-every"] = int(split_every)
    with dask.config.set(config):
        pipeline.run_strat(bench_importances().chunk(999, 2_000), "y", FEATURES, **kw)  # warm-up, off the clock
        merged.clear()
        rss0 = proc.memory_info().rss
        th = threading.Thread(target=sampler, daemon=True)
        th.start()
        t0 = time.perf_counter()
        with Held():
            run = pipeline.run_strat(data, "y", FEATURES, n_trials=n_trials, **kw)
        t_end = time.perf_counter()
        stop.set()
        th.join()
    t = run.timings
    bounds = {"sample": (t0, t0 + t["sample_s"])}
    bounds["fit"] = (bounds["sample"][1], bounds["sample"][1] + t["fit_s"])
    bounds["scan"] = (bounds["fit"][1], t_end)
    peaks = {k: max((m for ts, m in samples if a <= ts <= b), default=0) for k, (a, b) in bounds.items()}
    rp = run.scan.finish_options["run_params"]
    return {"n_trials": n_trials, "split_every": split_every, "seconds": t_end - t0, "timings": t,
            "rss_before": rss0, "peak": peaks, "agg_bytes": sum(b for _, b in merged.values()),
            "groups": {f: n for f, (n, _) in merged.items()}, "n_partitions": run.n_partitions,
            "fan_in": rp["fan_in"], "n_buckets": rp["n_buckets"],
            "held_bytes": held["bytes"], "held_maps": held["maps"]}


def bench_importances():
    sys.path.insert(0, HERE)
    import bench_importances as bi

    return bi


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=float, default=1e7)
    p.add_argument("--trials", default="0,5", help="comma-separated bootstrap trial counts")
    p.add_argument("--split-every", default="auto",
                   help="comma-separated reduction fan-ins (dask config daskpd.split-every; auto: the engine's)")
    p.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "daskpd-bench-importances"))
    p.add_argument("--child", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        data, nt, se = json.loads(a.child)
        print(json.dumps(child(data, nt, se), default=float))
        return 0
    n = int(a.n)
    bi = bench_importances()
    os.makedirs(a.workdir, exist_ok=True)
    data = bi.write_data(os.path.join(a.workdir, f"mixed_{n}"), n, bi.CHUNK, "mixed")
    gib = 2.0 ** 30
    print(f"data: {data} ({n:,} rows); load average at start {os.getloadavg()[0]:.1f}")
    print("| trials | split_every | seconds | sample / fit / scan s | peak RSS GiB: sample | fit | scan "
          "| merged aggregates GiB | (leaf, position) groups | results held at most GiB (map outputs) "
          "| fan-in / buckets |")
    print("|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for nt in (int(v) for v in a.trials.split(",")):
        for se in (v.strip() for v in a.split_every.split(",")):
            out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", json.dumps([data, nt, se])],
                                 capture_output=True, text=True)
            if out.returncode:
                print(f"| {nt} | {se} | failed: {out.stderr.strip()[-300:]} |")
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            t, pk = r["timings"], r["peak"]
            print(f"| {nt} | {se} | {r['seconds']:.1f} | {t['sample_s']:.1f} / {t['fit_s']:.1f} / {t['scan_s']:.1f} "
                  f"| {pk['sample'] / gib:.2f} | {pk['fit'] / gib:.2f} | {pk['scan'] / gib:.2f} "
                  f"| {r['agg_bytes'] / gib:.2f} | {sum(r['groups'].values()):,} "
                  f"| {r['held_bytes'] / gib:.2f} ({r['held_maps']}) | {r['fan_in']} / {r['n_buckets']} |",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
