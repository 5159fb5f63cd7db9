#!/usr/bin/env python
"""The workers' page faults and system time over one lake run, for worker settings.

    .venv/bin/python benchmarks/probe_faults.py --rows 1e7 --workdir DIR [--repeat 4]
        [--vary NAME=V1,V2,...] [--set NAME=V ...] [--perf EVENT]

Writes (or reuses) the lake of ``bench_lake.py`` in ``--workdir``.  For each repeat and
each value of the varied setting in turn (alternated, so that the machine's drift hits
every value alike), starts a ``LocalCluster`` of 2 worker processes x 1 thread with
2.5 GiB each on 127.0.0.1, warms it up, runs ``daskpd.importances(lake, "y",
categorical=["k5000"])``'s computation once and prints its wall time and, for each
worker, the minor page faults and the user / system CPU seconds the run cost it
(``getrusage`` before and after), and pyarrow's memory pool in the workers.

A setting ``NAME`` is a dask config key when it has a dot (``daskpd.worker-heap-trim``,
``daskpd.worker-arrow-pool``, ...) and otherwise an environment variable of the worker
processes, set through ``distributed.nanny.pre-spawn-environ`` (``MALLOC_TRIM_THRESHOLD_``,
which dask itself sets to 65536).  The default varies ``daskpd.worker-arrow-pool`` over
``system,keep``; ``--arrow-pool`` and ``--mmap-threshold`` are the stop-23 spellings of
``--vary daskpd.worker-arrow-pool=...`` and ``--set daskpd.worker-mmap-threshold=...``.

``--perf EVENT`` (``page-faults``, ``cpu-clock``) also records EVENT with call graphs in
the workers during each run (Linux ``perf``, which must be installed and allowed) and
prints the run's top native symbols, with the share of kernel time, or for page faults
the share that the kernel's copies into fresh buffers (socket and file reads) took.
The figures of docs/benchmarks.md, stops 23 and 24, come from this script.
"""
from __future__ import annotations

import argparse
import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _usage():
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_minflt, r.ru_utime, r.ru_stime


def _pool():
    import pyarrow as pa

    return pa.default_memory_pool().backend_name


def _config(settings: dict) -> dict:
    """dask config for ``settings``: dotted names as they are, the others as the workers'
    environment variables."""
    out = {}
    for name, value in settings.items():
        key = name if "." in name else f"distributed.nanny.pre-spawn-environ.{name}"
        out[key] = value
    return out


def _perf_report(data: str, event: str, top: int = 12) -> list[str]:
    """The top ``top`` (shared object, symbol) rows of a ``perf record`` file, and one
    summary line."""
    rows = subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-children", "--sort", "dso,sym"],
                          capture_output=True, text=True).stdout.splitlines()
    rows = [r.strip() for r in rows if r.strip()[:1].isdigit() and "%" in r.split()[0]]
    out = [f"    {r}" for r in rows[:top]]
    share = lambda pred: sum(float(r.split("%")[0]) for r in rows if pred(r))  # noqa: E731
    if event == "page-faults":
        out.append(f"    kernel copies into fresh buffers (_copy_to_iter): "
                   f"{share(lambda r: '_copy_to_iter' in r):.1f} % of the faults")
    else:
        out.append(f"    kernel: {share(lambda r: '[kernel' in r):.1f} % of the samples; page-fault paths "
                   f"(clear_page*, *page_fault*, *_mm_fault*, do_anonymous_page): "
                   f"{share(lambda r: any(s in r for s in ('clear_page', 'page_fault', 'mm_fault', 'do_anonymous_page'))):.1f} %")
    return out


def one_run(path: str, settings: dict, perf_event: str | None = None) -> dict:
    import warnings

    import dask
    import pandas as pd
    from distributed import Client, LocalCluster

    import daskpd

    with dask.config.set(_config(settings)), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with LocalCluster(n_workers=2, threads_per_worker=1, memory_limit="2.5GiB", processes=True,
                          host="127.0.0.1", dashboard_address=None) as cluster, Client(cluster) as client:
            warm = pd.read_parquet(sorted(glob.glob(os.path.join(path, "*.parquet")))[0]).head(20_000)
            daskpd.importance.strat_curves_and_importances(warm, "y", categorical=["k5000"], progress=False,
                                                           sample_size=5_000)
            perf = report = None
            if perf_event:
                fd, data = tempfile.mkstemp(suffix=".perf")
                os.close(fd)
                pids = ",".join(str(p) for p in sorted(client.run(os.getpid).values()))
                perf = subprocess.Popen(["perf", "record", "-e", perf_event, "-g", "-o", data, "-p", pids],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(1.0)  # perf attaches
            before = client.run(_usage)
            t0 = time.perf_counter()
            daskpd.importance.strat_curves_and_importances(path, "y", categorical=["k5000"], progress=False)
            wall = time.perf_counter() - t0
            after = client.run(_usage)
            if perf is not None:
                perf.send_signal(signal.SIGINT)
                perf.wait()
                report = _perf_report(data, perf_event)
                os.unlink(data)
            pools = sorted(set(client.run(_pool).values()))
    workers = [[b - a for a, b in zip(before[w], after[w])] for w in before]
    return {"wall": wall, "pools": pools, "workers": workers, "perf": report}


def _pair(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def main(argv=None):
    from bench_lake import write_lake

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="1e7")
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--repeat", type=int, default=4)
    ap.add_argument("--vary", type=_pair, default=None, metavar="NAME=V1,V2",
                    help="the setting to alternate and its comma-separated values")
    ap.add_argument("--set", type=_pair, action="append", default=[], metavar="NAME=V",
                    help="a setting held fixed (repeatable)")
    ap.add_argument("--arrow-pool", default=None, help="same as --vary daskpd.worker-arrow-pool=VALUES")
    ap.add_argument("--mmap-threshold", default=None, help="same as --set daskpd.worker-mmap-threshold=VALUE")
    ap.add_argument("--perf", default=None, metavar="EVENT", help="record EVENT in the workers with perf")
    args = ap.parse_args(argv)
    if args.vary and args.arrow_pool:
        ap.error("--vary and --arrow-pool both name the setting to alternate; give one")
    if args.perf and not shutil.which("perf"):
        ap.error("--perf needs Linux perf on the PATH")
    name, values = args.vary or ("daskpd.worker-arrow-pool", args.arrow_pool or "system,keep")
    values = [v.strip() for v in values.split(",") if v.strip()]
    fixed = dict(args.set)
    if args.mmap_threshold:
        fixed["daskpd.worker-mmap-threshold"] = args.mmap_threshold
    if name in fixed:
        ap.error(f"{name} is both varied and set")
    path = write_lake(int(float(args.rows)), args.workdir)
    print(f"# {int(float(args.rows)):,} rows, command: {' '.join(sys.argv)}")
    print(f"| repeat | {name} | pool in the workers | wall s | page faults (M) a worker | user s | system s |")
    print("|---:|---|---|---:|---|---|---|")
    for r in range(args.repeat):
        for value in values:
            out = one_run(path, {**fixed, name: value}, args.perf)
            ws = out["workers"]
            print(f"| {r + 1} | {value} | {', '.join(out['pools'])} | {out['wall']:.1f} | "
                  f"{', '.join(f'{w[0] / 1e6:.2f}' for w in ws)} | {', '.join(f'{w[1]:.1f}' for w in ws)} | "
                  f"{', '.join(f'{w[2]:.1f}' for w in ws)} |", flush=True)
            if out["perf"]:
                print(f"  perf {args.perf}, {name}={value}:")
                print("\n".join(out["perf"]), flush=True)


if __name__ == "__main__":
    main()
