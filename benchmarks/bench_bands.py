#!/usr/bin/env python
"""The cost of trials and their bands, and how often the bands cover the truth.

    .venv/bin/python benchmarks/bench_bands.py --rows 1e7 [--trials 20] [--workers 2 | --workers 0 [--sync]]
        [--memory-limit 2.5GiB] [--grid 20] [--workdir DIR] [--breakdown] [--repeat N] [--one-tree]
    .venv/bin/python benchmarks/bench_bands.py --coverage [--seeds 40] [--n 3000] [--coverage-trials 100]
        [--designs all | NAME,...] [--schemes honest,one-tree] [--no-models]

**Cost.** Writes ``--rows`` rows of :class:`daskpd.datasets.Lake` as parquet files of
500,000 rows into ``--workdir`` (default: ``daskpd-bench`` under the system's temporary
directory, or ``$DASKPD_BENCH_DIR``; reused when already there), then in a fresh
process with a ``LocalCluster(n_workers=W, threads_per_worker=1, memory_limit=...)`` on
127.0.0.1 (every process warmed up first: imports and numba kernels loaded) times, in
this order:

* StratPD/CatStratPD curves and importances of every feature
  (``daskpd.strat_curves_and_importances(lake, target="y", categorical_features=["k5000"],
  n_trials=T)``), T = 1 then ``--trials``;
* a 3-feature Friedman PD (x1, x3, x5; ``grid_resolution=--grid``) of a
  ``HistGradientBoostingRegressor`` (50 trees) fitted on 100,000 rows of the lake's
  numeric columns, ``n_trials`` = 1 then ``--trials``;

and prints the wall times and the ratio trials / one (the goal: at most 1.5x), and the
CPU seconds of the driver and every worker process over each call (robust on a busy
machine, where the wall times mostly measure the other processes).  ``--workers 0``
runs on dask's threads (2) instead of a cluster, and ``--workers 0 --sync`` on dask's
synchronous scheduler (one thread, the same kernels): the trials' cost in the kernels
alone, without parallelism, transfers or spill.  ``--grid 0`` skips the PD.  ``--breakdown`` (a cluster run) also prints, for the importances, the tasks'
compute and transfer seconds and output bytes per task group (the task key without its
token and numbers: ``daskpd-strat-map``, ``daskpd-strat-combine``, ``daskpd-fit``,
``bucket_products``, ...), the driver's CPU, the workers' CPU outside the tasks and the
bytes dask's spill wrote to disk.
``--repeat N`` runs each setting N times, alternating n_trials = 1 and ``--trials`` (a
drift of the machine's speed hits both), and reports the fastest run of each (with its
CPU and breakdown); every run's wall time is printed too.

**Coverage** (``--coverage``, in memory, dask's threads): over ``--seeds`` data sets of
``--n`` rows from generators with a known truth (``benchmarks/coverage_designs.py``:
StratPD and CatStratPD on discrete, codependent and continuous stratifying columns, a
feature with no effect, and the Friedman PD, ICE average, ALE and marginal means of a
fixed model), how often the 90 % band holds the truth, whether its width is right, the
estimate's slope on the truth (shrinkage), and how often a flat truth is called flat;
for each T in ``--coverage-trials`` and each of ``--schemes``.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

from bench_lake import write_lake  # the same lake, in the same cache directory

HERE = os.path.dirname(os.path.abspath(__file__))
PD_FEATURES = ["x1", "x3", "x5"]


def numeric_columns():
    from daskpd.datasets import Lake

    return [f for f in Lake.features if f not in Lake.categorical]


def task_group(key) -> str:
    """A task's group in the breakdown: its key without the graph's token and the
    bucket / partition / set numbers (a feature's index, ``f3``, is kept)."""
    name = key[0] if isinstance(key, tuple) else str(key)
    words = [w for w in name.split("-") if w and not w.isdigit() and not re.fullmatch(r"[0-9a-f]{8,}", w)]
    return "-".join(words) or name


def breakdown(records) -> dict:
    """``{group: [tasks, compute s, transfer s, output MiB]}`` of a task stream's records."""
    out = {}
    for r in records:
        g = out.setdefault(task_group(r["key"]), [0, 0.0, 0.0, 0.0])
        g[0] += 1
        for ss in r.get("startstops", ()):
            if ss["action"] == "compute":
                g[1] += ss["stop"] - ss["start"]
            elif ss["action"] == "transfer":
                g[2] += ss["stop"] - ss["start"]
        g[3] += (r.get("nbytes") or 0) / 2 ** 20
    return out


def child(path: str, workers: int, memory_limit: str, trials: int, grid: int, fit_rows: int,
          breakdown_tasks: bool = False, warmup: bool = True, repeat: int = 1, sync: bool = False,
          honest: bool = True) -> dict:
    import glob
    import warnings

    import pandas as pd
    from distributed import Client, LocalCluster
    from sklearn.ensemble import HistGradientBoostingRegressor

    import daskpd
    from daskpd.datasets import Lake

    warnings.simplefilter("ignore")
    cols = numeric_columns()
    fit = Lake(random_state=1).frame(fit_rows)
    model = HistGradientBoostingRegressor(max_iter=50, random_state=0).fit(fit[cols], fit["y"])
    client = cluster = None
    if workers:
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, memory_limit=memory_limit, processes=True,
                               host="127.0.0.1", dashboard_address=None)
        client = Client(cluster)
    else:  # --workers 0: dask's threads, or (--sync) its synchronous scheduler
        import dask

        if sync:
            dask.config.set(scheduler="sync")
        else:
            dask.config.set(scheduler="threads", num_workers=2)
    rec = {"workers": workers, "memory_limit": memory_limit, "trials": trials, "grid": grid, "sync": sync,
           "honest": honest}
    # warm up every process (imports, numba kernels), on two files
    first = sorted(glob.glob(os.path.join(path, "*.parquet")))[:2]
    small = pd.concat([pd.read_parquet(f) for f in first]).head(20_000)
    for t in sorted({1, 2, trials}) if warmup else ():  # the many-trial kernels (rows carrying hashes) too
        daskpd.strat_curves_and_importances(small, target="y", categorical_features=["k5000"], n_trials=t,
                                            progress=False, sample_size=5_000, honest=honest)
        daskpd.partial_dependence(model, small[cols], PD_FEATURES, grid_resolution=5, n_trials=t, progress=False)
    def cpu(split=False):
        """CPU seconds of this process and of every worker process so far."""
        own = time.process_time()
        others = sum(client.run(time.process_time).values()) if client is not None else 0.0
        return (own, others) if split else own + others

    def spilled() -> float:
        """MiB the workers have written to disk so far (dask's spill: its digests)."""
        def _bytes(dask_worker):  # nested: pickled by value
            return sum(v for k, v in dask_worker.digests_total.items()
                       if "disk-write" in str(k) and "bytes" in str(k))

        return sum(client.run(_bytes).values()) / 2 ** 20 if client is not None else 0.0

    def strat(t):
        m = {}
        s0 = spilled()
        t0, (d0, w0) = time.perf_counter(), cpu(split=True)
        if breakdown_tasks and client is not None:
            from distributed import get_task_stream

            with get_task_stream(client) as ts:
                res = daskpd.strat_curves_and_importances(path, target="y", categorical_features=["k5000"],
                                                          n_trials=t, progress=False, honest=honest)
            m["tasks"] = breakdown(ts.data)
        else:
            res = daskpd.strat_curves_and_importances(path, target="y", categorical_features=["k5000"], n_trials=t,
                                                      progress=False, honest=honest)
        m["s"] = time.perf_counter() - t0
        d1, w1 = cpu(split=True)
        m["cpu"], m["driver_cpu"], m["workers_cpu"] = (d1 - d0) + (w1 - w0), d1 - d0, w1 - w0
        m["buckets"] = next(iter(res.curves.values())).params.get("n_buckets")
        m["spilled_MiB"] = spilled() - s0
        return m

    def pd_(t):
        t0, c0 = time.perf_counter(), cpu()
        daskpd.partial_dependence(model, path, PD_FEATURES, grid_resolution=grid, n_trials=t, progress=False,
                                  columns=cols)
        return {"s": time.perf_counter() - t0, "cpu": cpu() - c0}

    # the settings alternate (1, trials, 1, trials, ...): a drift of the machine's speed
    # hits both; each setting keeps its fastest run (the least disturbed)
    for key, run, label in (("strat", strat, "importances"), ("pd", pd_, "partial_dependence"))[:2 if grid else 1]:
        best = {}
        for rep in range(repeat):
            for t in (1, trials):
                m = run(t)
                rec.setdefault(f"{key}_{t}_runs_s", []).append(m["s"])
                if t not in best or m["s"] < best[t]["s"]:
                    best[t] = m
                print(f"# {label}, n_trials={t}: {m['s']:.1f} s", file=sys.stderr, flush=True)
        for t, m in best.items():
            rec.update({f"{key}_{t}_{k}": v for k, v in m.items()})
    if client is not None:
        client.close()
        cluster.close()
    return rec


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=float, default=1e7)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--workers", type=int, default=2, help="worker processes of the LocalCluster (0: dask's threads)")
    ap.add_argument("--memory-limit", default="2.5GiB")
    ap.add_argument("--sync", action="store_true",
                    help="with --workers 0: dask's synchronous scheduler (one thread) instead of its threads")
    ap.add_argument("--grid", type=int, default=20, help="grid_resolution of the 3-feature PD (0: no PD)")
    ap.add_argument("--one-tree", action="store_true",
                    help="the importances with honest=False (one tree a feature, stratx's), to compare the cost")
    ap.add_argument("--fit-rows", type=float, default=1e5)
    ap.add_argument("--workdir", default=os.environ.get("DASKPD_BENCH_DIR", os.path.join(tempfile.gettempdir(),
                                                                                        "daskpd-bench")))
    ap.add_argument("--coverage", action="store_true", help="measure the bands' coverage instead of their cost")
    ap.add_argument("--seeds", type=int, default=40)
    ap.add_argument("--n", type=float, default=3000)
    ap.add_argument("--coverage-trials", default="100")
    ap.add_argument("--designs", default="all",
                    help="comma-separated design names of benchmarks/coverage_designs.py (default: all)")
    ap.add_argument("--schemes", default="honest,one-tree", help="honest (default trees), one-tree (stratx's), or both")
    ap.add_argument("--no-models", action="store_true", help="skip the model-based curves")
    ap.add_argument("--breakdown", action="store_true",
                    help="also print the importances' task time per task group (a cluster run: --workers >= 1)")
    ap.add_argument("--no-warmup", action="store_true",
                    help="skip the warm-up (a quick check of the script: its times then include compiling the kernels)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs of each setting, alternating 1 and --trials; the fastest of each is reported")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.sync and a.workers:
        ap.error("--sync runs without a cluster: use it with --workers 0")
    print(f"# {os.cpu_count()} cores, command: {' '.join([sys.argv[0], *(argv or sys.argv[1:])])}", flush=True)
    if a.coverage:
        from coverage_designs import coverage

        designs = None if a.designs == "all" else [d.strip() for d in a.designs.split(",")]
        schemes = tuple({"honest": True, "one-tree": False}[s.strip()] for s in a.schemes.split(","))
        recs = coverage(a.seeds, int(a.n), [int(t) for t in a.coverage_trials.split(",")], designs, schemes,
                        models=not a.no_models, log=lambda r: print("#", json.dumps(r, default=str), flush=True))
        print(f"\n{a.seeds} seeds x {int(a.n):,} rows; coverage of the nominal 90 % band at the positions with a band "
              "of nonzero width; z sd: sd of (estimate - truth) / band std (1: the band's width is right); slope: "
              "the estimate regressed on the truth, pooled over seeds (each seed centred; median of the seeds' own "
              "slopes); flat: share of seeds whose summary says NOT distinguishable from flat")
        print("\n| curve | design | trees | trials | coverage | z sd | slope (median of seeds) | flat | s |")
        print("|---|---|---|---|---|---|---|---|---|")
        for r in recs:
            trees = {True: "honest", False: "one tree", None: "-"}[r["honest"]]
            sep = "" if r["separable"] else " (continuous strata)"
            print(f"| {r['curve']} | {r['design']}{sep} | {trees} | {r['trials']} | {r['coverage']:.3f} | "
                  f"{r['z_sd']:.2f} | {r['pooled_slope']:.3f} ({r['slope']:.3f}) | "
                  f"{r['flat_rate']:.2f} | {r['seconds']:.0f} |")
        return 0
    if a.child:
        print(json.dumps(child(**json.loads(a.child))), flush=True)
        return 0
    os.makedirs(a.workdir, exist_ok=True)
    rows = int(a.rows)
    path = write_lake(rows, a.workdir)
    args = {"path": path, "workers": a.workers, "memory_limit": a.memory_limit, "trials": a.trials, "grid": a.grid,
            "fit_rows": int(a.fit_rows), "breakdown_tasks": a.breakdown, "warmup": not a.no_warmup,
            "repeat": int(a.repeat), "sync": a.sync, "honest": not a.one_tree}
    out = subprocess.run([sys.executable, __file__, "--child", json.dumps(args)], stdout=subprocess.PIPE, text=True)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        print("failed (its errors are above):", "\n".join(out.stdout.strip().splitlines()[-8:]))
        return 1
    r = json.loads(lines[-1])
    print(json.dumps(r), flush=True)
    T = a.trials
    where = (f"{a.workers} workers x {a.memory_limit}" if a.workers
             else "dask's synchronous scheduler (1 thread)" if a.sync else "dask's threads (2)")
    if a.repeat > 1:
        where += f", fastest of {a.repeat} alternating runs"
    where += ", one tree a feature (honest=False)" if a.one_tree else ", honest trees"
    print(f"\n| {rows:,} rows, {where} | n_trials=1 s | n_trials={T} s | ratio | CPU s, 1 -> {T} | CPU ratio |")
    print("|---|---|---|---|---|---|")
    for key, what in (("strat", "importances of every feature (StratPD/CatStratPD)"),
                      ("pd", f"Friedman PD, 3 features, grid {a.grid}"))[:2 if a.grid else 1]:
        w1, wT, c1, cT = r[f"{key}_1_s"], r[f"{key}_{T}_s"], r[f"{key}_1_cpu"], r[f"{key}_{T}_cpu"]
        print(f"| {what} | {w1:.1f} | {wT:.1f} | {wT / w1:.2f}x | {c1:.1f} -> {cT:.1f} | {cT / c1:.2f}x |")
    if a.repeat > 1:
        for key in ("strat", "pd")[:2 if a.grid else 1]:
            print(f"# {key}: every run's wall s, n_trials=1: {', '.join(f'{v:.1f}' for v in r[f'{key}_1_runs_s'])}; "
                  f"n_trials={T}: {', '.join(f'{v:.1f}' for v in r[f'{key}_{T}_runs_s'])}")
    if f"strat_{T}_tasks" in r:
        print_breakdown(r, T)
    return 0


def print_breakdown(r: dict, T: int) -> None:
    """The importances' task time per group, n_trials=1 against ``T``; the driver's CPU and
    the workers' CPU outside the tasks' compute."""
    one, many = r["strat_1_tasks"], r[f"strat_{T}_tasks"]
    print(f"\n| task group | tasks | compute s, 1 -> {T} | + s | transfer s, 1 -> {T} | output MiB, 1 -> {T} |")
    print("|---|---|---|---|---|---|")
    rows = sorted(set(one) | set(many), key=lambda g: -(many.get(g, [0, 0.0])[1] - one.get(g, [0, 0.0])[1]))
    z = [0, 0.0, 0.0, 0.0]
    for g in rows:
        a, b = one.get(g, z), many.get(g, z)
        print(f"| {g} | {a[0]} -> {b[0]} | {a[1]:.2f} -> {b[1]:.2f} | {b[1] - a[1]:+.2f} | {a[2]:.2f} -> {b[2]:.2f} | "
              f"{a[3]:.1f} -> {b[3]:.1f} |")
    c1, cT = (sum(v[1] for v in d.values()) for d in (one, many))
    print(f"| all tasks | | {c1:.2f} -> {cT:.2f} | {cT - c1:+.2f} | | |")
    for key, what in (("driver_cpu", "driver CPU"), ("workers_cpu", "workers' CPU")):
        a, b = r[f"strat_1_{key}"], r[f"strat_{T}_{key}"]
        print(f"| {what} | | {a:.2f} -> {b:.2f} | {b - a:+.2f} | | |")
    a, b = r["strat_1_workers_cpu"] - c1, r[f"strat_{T}_workers_cpu"] - cT
    print(f"| workers' CPU outside the tasks' compute | | {a:.2f} -> {b:.2f} | {b - a:+.2f} | | |")
    a, b = r.get("strat_1_spilled_MiB", 0.0), r.get(f"strat_{T}_spilled_MiB", 0.0)
    print(f"| spilled to disk by the workers (MiB) | | {a:.0f} -> {b:.0f} | {b - a:+.0f} | | |")


if __name__ == "__main__":
    sys.exit(main())
