#!/usr/bin/env python
"""Small files: all-feature importances on the same rows stored as many small files and as few.

    .venv/bin/python benchmarks/bench_small_files.py --rows 1e7 --files 10000,20
        [--workers 2] [--memory-limit 2.5GiB] [--repeat 1] [--workdir DIR]

Writes ``--rows`` rows of :class:`daskpd.datasets.Lake` (ten features) once per file
count into ``--workdir`` (default: ``daskpd-bench`` under the system's temporary
directory, or ``$DASKPD_BENCH_DIR``; reused when already there), with the same rows in
each layout, then starts one ``LocalCluster(n_workers=W, threads_per_worker=1,
memory_limit=...)`` on 127.0.0.1 and times ``daskpd.strat_curves_and_importances(lake,
target="y", categorical_features=["k5000"])`` on each layout (``--repeat`` rounds, the layouts
alternated within a round), after a warm-up request on a small lake.  Prints one line per
call (seconds, partitions read, passes) and a table with each layout's time against the
fewest files' time, and how far apart the importance tables are.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings


def write_layout(rows: int, files: int, workdir: str, chunk_rows: int) -> str:
    """``rows`` rows of the Lake generator in ``files`` files.  The generator draws chunks
    of ``chunk_rows`` rows (the same for every layout, so every layout holds the same
    rows); a file holds consecutive chunks."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from daskpd.datasets import Lake

    path = os.path.join(workdir, f"lake-{rows}-{files}files-{chunk_rows}")
    if os.path.isdir(path):
        return path
    t0 = time.perf_counter()
    tmp = path + ".tmp"
    os.makedirs(tmp, exist_ok=True)
    gen = Lake(random_state=0)
    gen.chunk_rows = chunk_rows
    per_file = -(-rows // chunk_rows) // files or 1
    writer, i = None, -1
    for k, chunk in enumerate(gen.chunks(rows)):
        if k % per_file == 0 and (i + 1) < files:
            if writer is not None:
                writer.close()
            i += 1
            table = pa.Table.from_pandas(chunk, preserve_index=False)
            writer = pq.ParquetWriter(os.path.join(tmp, f"part-{i:05d}.parquet"), table.schema)
            writer.write_table(table)
        else:
            writer.write_table(pa.Table.from_pandas(chunk, preserve_index=False))
    writer.close()
    os.rename(tmp, path)
    print(f"# wrote {rows:,} rows as {i + 1:,} files to {path} in {time.perf_counter() - t0:.0f} s",
          file=sys.stderr, flush=True)
    return path


def run(path: str):
    import daskpd

    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = daskpd.strat_curves_and_importances(path, target="y", categorical_features=["k5000"], progress=False)
    return time.perf_counter() - t0, res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=float, default=1e7)
    ap.add_argument("--files", default="10000,20", help="file counts, comma-separated (the last is the reference)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--memory-limit", default="2.5GiB")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--workdir", default=os.environ.get("DASKPD_BENCH_DIR",
                                                        os.path.join(tempfile.gettempdir(), "daskpd-bench")))
    args = ap.parse_args(argv)
    rows = int(args.rows)
    counts = [int(float(c)) for c in args.files.split(",")]
    os.makedirs(args.workdir, exist_ok=True)
    chunk = -(-rows // max(counts))
    paths = {c: write_layout(rows, c, args.workdir, chunk) for c in counts}
    warm = write_layout(20_000, 4, args.workdir, 5_000)

    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=args.workers, threads_per_worker=1, memory_limit=args.memory_limit,
                      host="127.0.0.1", dashboard_address=None, processes=True) as cluster, Client(cluster):
        run(warm)
        times = {c: [] for c in counts}
        tables = {}
        for r in range(args.repeat):
            for c in (counts if r % 2 == 0 else counts[::-1]):
                secs, res = run(paths[c])
                times[c].append(secs)
                tables[c] = res.table
                print(f"files={c} round={r + 1} seconds={secs:.2f} partitions={res.n_partitions} "
                      f"passes={res.n_passes}", flush=True)
    ref = counts[-1]
    cols = ["importance", "impact", "pd_variance"]
    print(f"\n{rows:,} rows, {args.workers} workers x 1 thread, {args.memory_limit}; "
          f"daskpd.strat_curves_and_importances(lake, target='y', categorical_features=['k5000'])\n")
    print("| files | rows per file | seconds (best) | vs " + f"{ref:,} files | max |importance difference| |")
    print("|---:|---:|---:|---:|---:|")
    for c in counts:
        diff = float((tables[c][cols] - tables[ref][cols].loc[tables[c].index]).abs().max().max())
        print(f"| {c:,} | {-(-rows // c):,} | {min(times[c]):.2f} | {min(times[c]) / min(times[ref]):.2f}x | "
              f"{diff:.1e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
