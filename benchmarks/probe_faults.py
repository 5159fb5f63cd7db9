#!/usr/bin/env python
"""The workers' page faults and system time over one lake run, for allocator settings.

    .venv/bin/python benchmarks/probe_faults.py --rows 1e7 --workdir DIR [--repeat 4]
        [--arrow-pool system,keep] [--mmap-threshold 32MiB]

Writes (or reuses) the lake of ``bench_lake.py`` in ``--workdir``.  For each repeat and
each value of ``--arrow-pool`` in turn (alternated, so that the machine's drift hits
every setting alike), starts a ``LocalCluster`` of 2 worker processes x 1 thread with
2.5 GiB each on 127.0.0.1 with ``daskpd.worker-arrow-pool`` set to that value, warms it
up, runs ``daskpd.importances(lake, "y", categorical=["k5000"])``'s computation once and
prints its wall time and, for each worker, the minor page faults and the user / system
CPU seconds the run cost it (``getrusage`` before and after), and pyarrow's memory pool
in the workers.  ``--mmap-threshold`` sets ``daskpd.worker-mmap-threshold`` as well.
The figures of docs/benchmarks.md, stop 23, come from this script.
"""
from __future__ import annotations

import argparse
import glob
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _usage():
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_minflt, r.ru_utime, r.ru_stime


def _pool():
    import pyarrow as pa

    return pa.default_memory_pool().backend_name


def one_run(path: str, arrow_pool: str, mmap_threshold: str | None) -> dict:
    import warnings

    import dask
    import pandas as pd
    from distributed import Client, LocalCluster

    import daskpd

    settings = {"daskpd.worker-arrow-pool": arrow_pool}
    if mmap_threshold:
        settings["daskpd.worker-mmap-threshold"] = mmap_threshold
    with dask.config.set(settings), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with LocalCluster(n_workers=2, threads_per_worker=1, memory_limit="2.5GiB", processes=True,
                          host="127.0.0.1", dashboard_address=None) as cluster, Client(cluster) as client:
            warm = pd.read_parquet(sorted(glob.glob(os.path.join(path, "*.parquet")))[0]).head(20_000)
            daskpd.importance.strat_curves_and_importances(warm, "y", categorical=["k5000"], progress=False,
                                                           sample_size=5_000)
            before = client.run(_usage)
            t0 = time.perf_counter()
            daskpd.importance.strat_curves_and_importances(path, "y", categorical=["k5000"], progress=False)
            wall = time.perf_counter() - t0
            after = client.run(_usage)
            pools = sorted(set(client.run(_pool).values()))
    workers = [[b - a for a, b in zip(before[w], after[w])] for w in before]
    return {"wall": wall, "pools": pools, "workers": workers}


def main(argv=None):
    from bench_lake import write_lake

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="1e7")
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--repeat", type=int, default=4)
    ap.add_argument("--arrow-pool", default="system,keep", help="comma-separated daskpd.worker-arrow-pool values")
    ap.add_argument("--mmap-threshold", default=None)
    args = ap.parse_args(argv)
    path = write_lake(int(float(args.rows)), args.workdir)
    pools = [p.strip() for p in args.arrow_pool.split(",") if p.strip()]
    print(f"# {int(float(args.rows)):,} rows, command: {' '.join(sys.argv)}")
    print("| repeat | worker-arrow-pool | pool in the workers | wall s | page faults (M) a worker | user s | system s |")
    print("|---:|---|---|---:|---|---|---|")
    for r in range(args.repeat):
        for pool in pools:
            out = one_run(path, pool, args.mmap_threshold)
            ws = out["workers"]
            print(f"| {r + 1} | {pool} | {', '.join(out['pools'])} | {out['wall']:.1f} | "
                  f"{', '.join(f'{w[0] / 1e6:.2f}' for w in ws)} | {', '.join(f'{w[1]:.1f}' for w in ws)} | "
                  f"{', '.join(f'{w[2]:.1f}' for w in ws)} |", flush=True)


if __name__ == "__main__":
    main()
