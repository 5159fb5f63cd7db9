#!/usr/bin/env python
"""What a lake run's workers hold and where its time goes: one importances run, watched.

    .venv/bin/python benchmarks/probe_lake_run.py --rows 1e7 --workdir DIR [--memory-limit 2.5GiB]
        [--heap-trim auto|0] [--every 0.5]

Writes (or reuses) the lake of ``bench_lake.py`` in ``--workdir``, starts a
``LocalCluster`` of 2 worker processes x 1 thread on 127.0.0.1, warms it up, then runs
``daskpd.importances(lake, "y", categorical=["k5000"])``'s computation once and prints:

* **memory**: every ``--every`` seconds, each worker's RSS and dask's managed bytes (the
  difference is what dask calls unmanaged memory, which counts against its spill and
  pause thresholds); then each worker's RSS after the run and after a ``malloc_trim(0)``
  (what the workers' heaps kept but did not use);
* **phases**: per task prefix, from dask's task stream: first start and last stop
  (seconds from the start of the run) and the seconds spent computing, waiting for
  inputs from the other worker (transfer) and reading/writing spilled data (disk),
  summed over the tasks; and the bytes each prefix sent between the workers.

* with ``--profile``: the CPU seconds of every process (the driver, which also runs the
  scheduler, and each worker) over the run, and where the workers' task threads spent
  them -- dask's statistical profiler (``Client.profile``, a sample every 10 ms),
  functions by cumulative and by own time (compiled kernels count in the Python
  function that calls them), with the merges' task levels apart in the phases.

``--heap-trim 0`` turns daskpd's heap trimmer off (``DASK_DASKPD__WORKER_HEAP_TRIM=0``
for the workers) to see the run without it.  The figures of docs/benchmarks.md, stop 21,
come from this script (stops 19-20 used an unpublished version of its phases half).
The polling adds a little load of its own: time the run with ``bench_lake.py``.
"""
from __future__ import annotations

import argparse
import collections
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
GiB = float(1 << 30)


def _worker_memory(dask_worker):
    import psutil

    fast = getattr(dask_worker.data, "fast", None)
    managed = sum(fast.weights.values()) if fast is not None and hasattr(fast, "weights") else 0
    return psutil.Process().memory_info().rss, managed


def _trim(dask_worker):
    import ctypes
    import ctypes.util

    import psutil

    ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
    return psutil.Process().memory_info().rss


def _sent_by_prefix(dask_worker):
    from dask.utils import key_split

    out = collections.Counter()
    for e in dask_worker.transfer_outgoing_log:
        for k, nb in e["keys"].items():
            out[key_split(k)] += nb
    return dict(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=float, default=1e7)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--memory-limit", default="2.5GiB")
    ap.add_argument("--heap-trim", default="auto", help="daskpd.worker-heap-trim for the workers (0: off)")
    ap.add_argument("--every", type=float, default=0.5, help="seconds between memory samples")
    ap.add_argument("--profile", action="store_true", help="CPU seconds per process and the workers' profile")
    ap.add_argument("--top", type=int, default=25, help="functions listed with --profile")
    a = ap.parse_args(argv)
    os.environ["DASK_DASKPD__WORKER_HEAP_TRIM"] = str(a.heap_trim)  # inherited by the worker processes

    sys.path.insert(0, HERE)
    from bench_lake import TARGET, write_lake

    from distributed import Client, LocalCluster, get_task_stream
    from dask.utils import key_split

    import daskpd

    path = write_lake(int(a.rows), a.workdir)
    with LocalCluster(n_workers=2, threads_per_worker=1, memory_limit=a.memory_limit, processes=True,
                      host="127.0.0.1", dashboard_address=None) as cluster, Client(cluster) as client:
        import glob

        import pandas as pd

        warm = pd.read_parquet(sorted(glob.glob(os.path.join(path, "*.parquet")))[0]).head(20_000)
        daskpd.importance.strat_curves_and_importances(warm, TARGET, categorical=["k5000"], progress=False)
        client.run(_trim)
        samples, stop = [], threading.Event()

        def poll():
            while not stop.is_set():
                try:
                    samples.append((time.time(), client.run(_worker_memory)))
                except Exception:  # a worker busy past the timeout: skip the sample
                    pass
                stop.wait(a.every)

        cpu0 = _cpu_seconds(client) if a.profile else None
        t0 = time.time()
        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        with get_task_stream(client) as ts:
            run = daskpd.importance.strat_curves_and_importances(path, TARGET, categorical=["k5000"], progress=False)
        stop.set()
        poller.join()
        t1 = time.time()
        wall = t1 - t0
        if a.profile:
            cpu1 = _cpu_seconds(client)
            time.sleep(1.5)  # the profiler's last cycle reaches the scheduler
            profile = client.profile(start=t0, stop=t1)
        after = client.run(_worker_memory)
        trimmed = client.run(_trim)
        sent = collections.Counter()
        for v in client.run(_sent_by_prefix).values():
            sent.update(v)

    names = sorted(after)
    print(f"# {int(a.rows):,} rows, 2 workers x 1 thread, {a.memory_limit}, worker-heap-trim={a.heap_trim}; "
          f"wall {wall:.1f} s; timings " + ", ".join(f"{k} {v:.1f}" for k, v in run.timings.items()))
    print("\n## memory (GiB): seconds, then per worker RSS / managed")
    for t, s in samples:
        print(f"{t - t0:6.1f}  " + "   ".join(f"{s[w][0] / GiB:5.2f} / {s[w][1] / GiB:5.2f}" for w in names if w in s))
    print("after the run, RSS:  " + "   ".join(f"{after[w][0] / GiB:5.2f}" for w in names))
    print("after malloc_trim(0): " + "   ".join(f"{trimmed[w] / GiB:5.2f}" for w in names))

    print("\n## phases (s from the start; compute / transfer / disk summed over the tasks)")
    ph = collections.defaultdict(lambda: [float("inf"), 0.0, 0.0, 0.0, 0.0, 0])
    for task in ts.data:
        p = ph[_phase(task["key"], key_split)]
        for s in task["startstops"]:
            p[0], p[1] = min(p[0], s["start"]), max(p[1], s["stop"])
            slot = {"compute": 2, "transfer": 3}.get(s["action"], 4)
            p[slot] += s["stop"] - s["start"]
            p[5] += s["action"] == "compute"
    print(f"{'prefix':34s} {'start':>7} {'stop':>7} {'compute':>8} {'transfer':>8} {'disk':>6} {'tasks':>6} {'sent GB':>8}")
    for k, p in sorted(ph.items(), key=lambda kv: kv[1][0]):
        print(f"{k:34s} {p[0] - t0:7.1f} {p[1] - t0:7.1f} {p[2]:8.1f} {p[3]:8.1f} {p[4]:6.1f} {p[5]:6d} "
              f"{sent.get(k, 0) / 1e9:8.2f}")
    print(f"sent between the workers: {sum(sent.values()) / 1e9:.2f} GB")
    if a.profile:
        print(f"\n## CPU seconds over the run ({wall:.1f} s wall, 2 cores: {2 * wall:.1f} core-seconds)")
        for name in cpu1:
            print(f"{name:34s} {cpu1[name] - cpu0.get(name, 0.0):8.1f}")
        _print_profile(profile, a.top)


def _phase(key, key_split) -> str:
    """A task's prefix; a merge's with its task level (``-level0``: the first level)."""
    prefix = key_split(key)
    if prefix.endswith("-combine"):  # <prefix>-<token>-<job>-<level>-<group>-<bucket>
        return f"{prefix}-level{str(key).rsplit('-', 3)[1]}"
    return prefix


def _process_cpu(dask_worker=None):
    import psutil

    t = psutil.Process().cpu_times()
    return t.user + t.system


def _cpu_seconds(client) -> dict:
    out = {"driver (and the scheduler)": _process_cpu()}
    out.update({f"worker {w.rsplit(':', 1)[-1]}": v for w, v in sorted(client.run(_process_cpu).items())})
    return out


def _print_profile(profile: dict, top: int) -> None:
    """Functions of the workers' task threads by cumulative and by own sampled time."""
    own, cumulative = collections.Counter(), collections.Counter()

    def walk(node, above):
        d = node.get("description", {})
        name = f"{os.path.basename(d.get('filename', '?'))}:{d.get('name', '?')}" if isinstance(d, dict) else str(d)
        kids = node.get("children", {}).values()
        own[name] += node["count"] - sum(k["count"] for k in kids)
        if name not in above:  # recursion counted once
            cumulative[name] += node["count"]
        for k in kids:
            walk(k, above | {name})

    total = max(1, profile.get("count", 0))
    for child in profile.get("children", {}).values():
        walk(child, frozenset())
    print(f"\n## the workers' task threads: {total / 100:.1f} s sampled (10 ms a sample)")
    for title, counts in (("cumulative", cumulative), ("own", own)):
        print(f"### by {title} time")
        for name, c in counts.most_common(top):
            print(f"{100 * c / total:5.1f} %  {c / 100:7.1f} s  {name}")


if __name__ == "__main__":
    main()
