#!/usr/bin/env python
"""Driver memory on a real multi-process cluster: curves finished on the workers (what
``importances`` does) against the merged aggregates pulled to the driver and finished
there (what it did before), for the issue's p = 10 "mixed" table.

    .venv/bin/python benchmarks/bench_driver_memory.py [--n 1e7] [--trials 0,5] [--workdir DIR]

Each (trials, mode) runs in its own fresh driver process, with a fresh
``LocalCluster(n_workers=2, threads_per_worker=1, processes=True)``; the driver's RSS
and the sum of the worker processes' RSS are sampled every 50 ms during the call, and
the peaks are printed with the wall time.  Both modes compute the same curves (checked:
equal importances).  The data is ``bench_importances.py``'s ``mixed`` table (reused
when already in ``--workdir``).

"On the workers" is ``daskpd._strat.pipeline.run_strat`` as ``importances`` runs it: each
merged bucket of leaves is finished inside the combine task that merged it, and only
the curves reach the driver.  "On the driver" is the same scan with its merged buckets
(``daskpd._strat.scan.ScanPiece``: the per-(leaf, position) tables) handed back as they
are (``finish_bucket`` the identity, ``reduce`` one list of them), then finished in the
driver process by the scan's own ``finish_bucket`` and ``reduce``: the engine no longer
has that mode, so the script builds it from the same kernels (same bits).
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


def child(data: str, n_trials: int, mode: str) -> dict:
    import psutil
    from distributed import Client, LocalCluster

    from daskpd._engine.plan import Kept
    from daskpd._strat import pipeline
    from daskpd._strat.scan import StratScan
    from daskpd.importance import _curve_arrays, curve_measures

    class PulledScan(StratScan):
        """The scan with its merged buckets handed to the driver unfinished."""

        def finish_bucket(self, piece, bucket):
            return piece

        def reduce(self, merged, node):
            return node("gather_list", *merged, key="pulled")

    def finish_on_driver(run):
        scan = run.scan
        finished = [StratScan.finish_bucket(scan, piece, b) for b, piece in enumerate(run.results)]
        out = StratScan.reduce(scan, finished, lambda method, *args, key: getattr(scan, method)(*args))
        if isinstance(out, Kept):  # the CG rounds run over buckets kept on the workers: no driver form
            many = [scan.features[i].feature for i in out.kept]
            raise SystemExit(f"bench_driver_memory: categorical feature(s) {many} have more than "
                             f"EXPLICIT_MAX_KEYS categories; the driver mode rebuilds only the explicit "
                             f"CatStratPD solve (the 'mixed' table's c1 and c2 have 6 and 40)")
        return out

    kw = dict(kinds={"c2": "categorical"}, min_samples_leaf_for={"c1": 5, "c2": 5}, progress=False,
              n_trials=n_trials, finish_options={"min_slopes_per_x": 5})
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, memory_limit=0,
                      dashboard_address=None) as cluster, Client(cluster):
        me = psutil.Process()
        workers = me.children(recursive=True)  # the worker (and nanny) processes
        peaks = {"driver": 0, "workers": 0}
        stop = threading.Event()

        def sampler():
            while not stop.is_set():
                peaks["driver"] = max(peaks["driver"], me.memory_info().rss)
                tot = 0
                for w in workers:
                    try:
                        tot += w.memory_info().rss
                    except psutil.Error:
                        pass
                peaks["workers"] = max(peaks["workers"], tot)
                time.sleep(0.05)

        rss0 = me.memory_info().rss
        th = threading.Thread(target=sampler, daemon=True)
        th.start()
        t0 = time.perf_counter()
        if mode == "finish":  # curves finished next to the merged aggregates, on a worker
            run = pipeline.run_strat(data, "y", FEATURES, **kw)
            out = run.results
        else:  # the merged aggregates pulled to the driver, curves finished there
            pipeline.StratScan = PulledScan
            try:
                run = pipeline.run_strat(data, "y", FEATURES, **kw)
            finally:
                pipeline.StratScan = StratScan
            out = finish_on_driver(run)
        secs = time.perf_counter() - t0
        stop.set()
        th.join()
    importance = {f: curve_measures(*_curve_arrays(res, 1)[0], run.kinds[f])[0] for f, res in out.items()}
    return {"seconds": secs, "driver_before": rss0, "driver_peak": peaks["driver"],
            "workers_peak": peaks["workers"], "importance": importance}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=float, default=1e7)
    p.add_argument("--trials", default="0,5", help="comma-separated bootstrap trial counts")
    p.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "daskpd-bench-importances"))
    p.add_argument("--child", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        print(json.dumps(child(*json.loads(a.child)), default=float))
        return 0
    sys.path.insert(0, HERE)
    import bench_importances as bi

    n = int(a.n)
    os.makedirs(a.workdir, exist_ok=True)
    data = bi.write_data(os.path.join(a.workdir, f"mixed_{n}"), n, bi.CHUNK, "mixed")
    gib = 2.0 ** 30
    print(f"data: {data} ({n:,} rows); LocalCluster: 2 worker processes x 1 thread; "
          f"load average at start {os.getloadavg()[0]:.1f}")
    print("| trials | curves finished | seconds | driver RSS before GiB | driver peak GiB | workers' peak GiB (sum) |")
    print("|---:|---|---:|---:|---:|---:|")
    for nt in (int(v) for v in a.trials.split(",")):
        got = {}
        for mode in ("driver", "finish"):
            out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", json.dumps([data, nt, mode])],
                                 capture_output=True, text=True)
            if out.returncode:
                print(f"| {nt} | {mode} | failed: {out.stderr.strip()[-300:]} |")
                continue
            r = got[mode] = json.loads(out.stdout.strip().splitlines()[-1])
            where = "on the driver (aggregates pulled)" if mode == "driver" else "on the workers"
            print(f"| {nt} | {where} | {r['seconds']:.1f} | {r['driver_before'] / gib:.2f} "
                  f"| {r['driver_peak'] / gib:.2f} | {r['workers_peak'] / gib:.2f} |", flush=True)
        if len(got) == 2 and got["driver"]["importance"] != got["finish"]["importance"]:
            print(f"WARNING: the two modes' importances differ: {got}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
