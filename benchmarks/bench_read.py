#!/usr/bin/env python
"""What reading the lake's partitions costs, by how arrow tables become pandas.

    .venv/bin/python benchmarks/bench_read.py --rows 1e7 --workdir DIR [--repeat 3]

Writes (or reuses) the lake of ``bench_lake.py`` in ``--workdir`` and reads all of its
partitions (the ten features and ``y``) with ``dask.dataframe.read_parquet`` on the
synchronous scheduler in this one process, set up as daskpd sets up a worker: glibc's
mmap threshold at 32 MiB with dask's ``MALLOC_TRIM_THRESHOLD_`` of 64 KiB, pyarrow's
system memory pool, one pyarrow thread.  For each repeat, and each way of converting in
turn (alternated): dask's default ``to_pandas`` (numeric columns consolidated into 2-D
blocks), ``split_blocks`` (a block per column) and ``split_blocks`` with
``self_destruct`` (arrow's buffers freed column by column), it prints the wall and CPU
seconds and the minor page faults of the read.  docs/benchmarks.md, stop 24.
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

VARIANTS = {
    "default": None,
    "split_blocks": {"split_blocks": True},
    "split_blocks, self_destruct": {"split_blocks": True, "self_destruct": True},
}


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def main(argv=None):
    from bench_lake import write_lake

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="1e7")
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    path = write_lake(int(float(args.rows)), args.workdir)

    import dask.dataframe as dd
    import pyarrow as pa

    from daskpd._engine.scheduler import _libc, set_arrow_pool, set_mmap_threshold
    from daskpd.datasets import Lake

    libc = _libc()
    if libc is None or not hasattr(libc, "mallopt"):
        sys.exit("bench_read.py sets up glibc's allocator as in a worker; this C library has no mallopt")
    libc.mallopt(-1, 65536)  # M_TRIM_THRESHOLD, as dask's MALLOC_TRIM_THRESHOLD_ sets it in a worker
    set_mmap_threshold("32MiB")
    set_arrow_pool("system")
    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)
    columns = [*Lake.features, "y"]
    print(f"# {int(float(args.rows)):,} rows, command: {' '.join(sys.argv)}")
    print("| repeat | to_pandas | partitions | wall s | CPU s | page faults (k) |")
    print("|---:|---|---:|---:|---:|---:|")
    for r in range(args.repeat):
        for name, options in VARIANTS.items():
            kw = {"arrow_to_pandas": dict(options)} if options else {}  # dask adds to the dict it is given
            ddf = dd.read_parquet(path, columns=columns, **kw)
            lengths = ddf.map_partitions(len, meta=(None, "int64"))
            f0, t0, c0 = _faults(), time.perf_counter(), time.process_time()
            n = lengths.compute(scheduler="sync")
            wall, cpu, faults = time.perf_counter() - t0, time.process_time() - c0, _faults() - f0
            assert int(n.sum()) == int(float(args.rows)), "read a different number of rows"
            print(f"| {r + 1} | {name} | {ddf.npartitions} | {wall:.2f} | {cpu:.2f} | {faults / 1e3:.0f} |",
                  flush=True)


if __name__ == "__main__":
    main()
