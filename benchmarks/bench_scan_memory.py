#!/usr/bin/env python
"""Where the memory of one importances request goes: peak RSS per phase (sample pass, tree
fits, scan) on dask's threads, for the p = 10 ``mixed`` table of bench_importances.py.

    .venv/bin/python benchmarks/bench_scan_memory.py [--n 1e7] [--trials 1,5] [--split-every auto]
        [--workdir DIR]

The data is ``bench_importances.py``'s ``mixed`` table (8 numeric + 2 categorical
features, files of 500,000 rows, written chunk by chunk into ``--workdir``, a temporary
directory by default; reused when already there).  Each (trials, split_every) setting
runs in its own fresh process on dask's threaded scheduler:
``daskpd.strat_curves_and_importances(data, target="y", categorical_features=["c2"],
n_trials=T)`` after a warm-up on 2,000 rows, while a thread samples the process RSS
every 50 ms.  The samples are split into phases by the call's own ``timings`` (sample
pass, then tree fits, then the scan and finish), and the peak of each phase is printed
with the reduction's fan-in and bucket count (the curves' ``params``).

``--trials``: ``n_trials`` values (1: one estimate, no bootstrap trial).
``--split-every``: the dask config ``daskpd.split-every`` (the reduction's fan-in;
``auto``, the default, leaves it unset).
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


def bench_importances():
    sys.path.insert(0, HERE)
    import bench_importances as bi

    return bi


def child(data: str, n_trials: int, split_every: str) -> dict:
    import dask
    import psutil

    from daskpd import strat_curves_and_importances

    bi = bench_importances()
    proc = psutil.Process()
    samples, stop = [], threading.Event()

    def sampler():
        while not stop.is_set():
            samples.append((time.perf_counter(), proc.memory_info().rss))
            time.sleep(0.05)

    kw = dict(categorical_features=["c2"], progress=False)
    config = {"scheduler": "threads"}
    if split_every != "auto":
        config["daskpd.split-every"] = int(split_every)
    with dask.config.set(config):
        strat_curves_and_importances(bi.chunk(999, 2_000), target="y", **kw)  # warm-up, off the clock
        rss0 = proc.memory_info().rss
        th = threading.Thread(target=sampler, daemon=True)
        th.start()
        t0 = time.perf_counter()
        res = strat_curves_and_importances(data, target="y", n_trials=n_trials, **kw)
        t_end = time.perf_counter()
        stop.set()
        th.join()
    t = res.timings
    bounds = {"sample": (t0, t0 + t["sample_s"])}
    bounds["fit"] = (bounds["sample"][1], bounds["sample"][1] + t["fit_s"])
    bounds["scan"] = (bounds["fit"][1], t_end)
    peaks = {k: max((m for ts, m in samples if a <= ts <= b), default=0) for k, (a, b) in bounds.items()}
    params = next(iter(res.curves.values())).params
    return {"n_trials": n_trials, "split_every": split_every, "seconds": t_end - t0, "timings": t,
            "rss_before": rss0, "peak": peaks, "n_rows": res.n_rows, "n_partitions": res.n_partitions,
            "fan_in": params.get("fan_in"), "n_buckets": params.get("n_buckets"),
            "importance": {f: round(float(v), 5) for f, v in res.table["importance"].items()}}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=float, default=1e7)
    p.add_argument("--trials", default="1,5", help="comma-separated n_trials values (1: no bootstrap trial)")
    p.add_argument("--split-every", default="auto",
                   help="comma-separated reduction fan-ins (dask config daskpd.split-every; auto: the default)")
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
    data = bi.write_data(os.path.join(a.workdir, f"mixed_{n}"), n, min(n, bi.CHUNK), "mixed")
    gib = 2.0 ** 30
    print(f"data: {data} ({n:,} rows); load average at start {os.getloadavg()[0]:.1f}")
    print("| trials | split_every | seconds | sample / fit / scan s | RSS before GiB | peak RSS GiB: sample | fit "
          "| scan | fan-in / buckets |")
    print("|---:|---:|---:|---|---:|---:|---:|---:|---:|")
    failed = 0
    for nt in (int(v) for v in a.trials.split(",")):
        for se in (v.strip() for v in a.split_every.split(",")):
            out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", json.dumps([data, nt, se])],
                                 capture_output=True, text=True)
            if out.returncode:
                failed += 1
                print(f"| {nt} | {se} | failed: {out.stderr.strip()[-300:]} |")
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            t, pk = r["timings"], r["peak"]
            print(f"| {nt} | {se} | {r['seconds']:.1f} | {t['sample_s']:.1f} / {t['fit_s']:.1f} / {t['scan_s']:.1f} "
                  f"| {r['rss_before'] / gib:.2f} | {pk['sample'] / gib:.2f} | {pk['fit'] / gib:.2f} "
                  f"| {pk['scan'] / gib:.2f} | {r['fan_in']} / {r['n_buckets']} |", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
