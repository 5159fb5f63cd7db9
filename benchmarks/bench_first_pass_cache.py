#!/usr/bin/env python
"""The first pass cached per file: a job that refits every night, with and without the cache.

    .venv/bin/python benchmarks/bench_first_pass_cache.py --rows 1e7 [--append 1e6] [--workers 2]
        [--memory-limit 2.5GiB] [--workdir DIR] [--tiny]

Writes ``--rows`` rows of :class:`daskpd.datasets.Lake` (the ten-feature lake of
``bench_lake.py`` and ``bench_nightly.py``, parquet files of 500,000 rows; reused when
already in ``--workdir``), links them into a fresh lake directory, starts
``LocalCluster(n_workers=W, threads_per_worker=1, memory_limit=...)`` and, after a
warm-up, times ``daskpd.job.run_job`` on a job computing the importances and every curve
with the trees fitted on every run (a full run every night):

1. **first night, cache on**: every file read in pass 1, the cache written;
2. **first night, plain**: the same run without the cache;
3. ``--append`` rows are appended as two new files;
4. **next night, cache on**: pass 1 reads the two new files only (the scan reads all);
5. **next night, plain**: pass 1 and the scan read every file.

Prints each run's pass-1 time (``sample_s``) and total, the ratios, the cache's size, and
checks that the cached runs' tables equal the plain runs' bit for bit.  ``--tiny``:
20,000 rows and 4,000 appended on an in-process cluster (the test of the script).  Each
line printed is one JSON record; a table follows.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_nightly import TARGET, append, base_lake, link_lake, nightly_args, start_cluster  # noqa: E402  the same lake

SPEC = """
name = "{name}"
target = "y"
categorical = ["k5000"]
[source]
path = "{lake}"
[output]
plots = false
report = false
[run]
first_pass_cache = {cache}
"""


def main(argv=None):
    a = nightly_args(__doc__, argv)
    rows, extra = int(a.rows), int(a.append)
    base = base_lake(a)

    import pandas as pd

    import daskpd
    from daskpd.job import run_job

    cluster, client = start_cluster(a)
    run_root = tempfile.mkdtemp(prefix="first-pass-", dir=a.workdir)
    try:
        lake = os.path.join(run_root, "lake")
        link_lake(base, lake)
        out = os.path.join(run_root, "runs")

        def spec(cache: bool) -> str:
            p = os.path.join(run_root, f"job-{cache}.toml")
            with open(p, "w") as fh:
                fh.write(SPEC.format(name="cached" if cache else "plain", lake=lake, cache=str(cache).lower()))
            return p

        # warm-up: imports and numba kernels in every process, the files in the page cache (not for --tiny)
        if not a.tiny:
            first = sorted(os.path.join(base, f) for f in os.listdir(base) if f.endswith(".parquet"))[:2]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                daskpd.strat_curves_and_importances(pd.concat([pd.read_parquet(f) for f in first]).head(20_000),
                                                    target=TARGET, categorical_features=["k5000"], progress=False,
                                                    sample_size=5_000)
                daskpd.strat_curves_and_importances(lake, target=TARGET, categorical_features=["k5000"],
                                                    features=["x1"], progress=False)

        def timed(step, cache, run_id):
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                final = run_job(spec(cache), scheduler=cluster.scheduler_address, output=out, run_id=run_id,
                                progress=False, out=False, log=False)
            wall = time.perf_counter() - t0
            m = json.loads(open(os.path.join(final, "manifest.json")).read())
            rec = {"step": step, "wall_s": round(wall, 3), "first_pass_s": m["model_free_phases_s"]["sample_s"],
                   "cache": m.get("first_pass_cache"), "timings": m["timings_s"],
                   "phases": m.get("model_free_phases_s", {})}
            print(json.dumps(rec), flush=True)
            return final, rec

        recs, dirs = {}, {}
        dirs["c1"], recs["c1"] = timed("first night, cache on (cache written)", True, "night1")
        dirs["p1"], recs["p1"] = timed("first night, plain", False, "night1")
        t0 = time.perf_counter()
        new = append(lake, extra)
        print(f"# appended {extra:,} rows as {len(new)} files in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        dirs["c2"], recs["c2"] = timed(f"next night (+{extra:,} rows), cache on", True, "night2")
        dirs["p2"], recs["p2"] = timed(f"next night (+{extra:,} rows), plain", False, "night2")

        same = True
        for night in ("1", "2"):
            for name in ("curves.parquet", "importances.parquet"):
                got = pd.read_parquet(os.path.join(dirs["c" + night], name))
                want = pd.read_parquet(os.path.join(dirs["p" + night], name))
                same = same and got.equals(want)

        print(f"\n{rows:,} rows + {extra:,} appended; {a.workers or 'in-process'} worker(s)"
              f"{'' if not a.workers else ' x ' + a.memory_limit}; the trees refitted on every run\n")
        print("| run | pass 1 s | total s | files read in pass 1 |")
        print("|---|---:|---:|---|")
        for k in ("c1", "p1", "c2", "p2"):
            r = recs[k]
            c = r["cache"]
            read = f"{c['misses']} of {c['hits'] + c['misses']}" if c else "all"
            print(f"| {r['step']} | {r['first_pass_s']:.2f} | {r['wall_s']:.2f} | {read} |")
        c2 = recs["c2"]["cache"]
        print(f"\nnext night, cache on / plain: pass 1 {recs['c2']['first_pass_s'] / recs['p2']['first_pass_s']:.3f}, "
              f"total {recs['c2']['wall_s'] / recs['p2']['wall_s']:.3f}")
        print(f"first night, cache on / plain (writing the cache): total {recs['c1']['wall_s'] / recs['p1']['wall_s']:.3f}")
        print(f"cache on disk: {c2['bytes'] / 2 ** 20:.1f} MiB ({c2['bytes']:,} bytes, {c2['hits'] + c2['misses']} files)")
        print(f"tables with the cache equal the plain runs' bit for bit: {same}")
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20  # KiB -> GiB (Linux)
        print(f"driver peak RSS: {peak:.2f} GiB")
    finally:
        client.close()
        cluster.close()
        shutil.rmtree(run_root, ignore_errors=True)


if __name__ == "__main__":
    main()
