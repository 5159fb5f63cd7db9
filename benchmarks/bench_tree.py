#!/usr/bin/env python
"""The stratifying tree: daskpd's histogram tree (``tree_method="hist"``, the default) vs
scikit-learn's exact tree (``tree_method="exact"``), through the public API.

    .venv/bin/python benchmarks/bench_tree.py [--sizes 1e5,2e5] [--seeds 3] [--n-importances 1e5]
        [--stratpd-sizes 1e5,1e6] [--skip-importances] [--workdir DIR]

Part 1, fit time: ``daskpd.strat_curves_and_importances`` on ``--sizes`` rows of
bench_importances' ``numeric3`` data (10 features at 3 decimals, 1,000 to ~5,700 distinct
values a column) in memory, once per tree method after a warm-up, on dask's threads.  The
printed fit time is the call's ``timings["fit_s"]``: the ten stratifying trees (each on
the other 9 columns, ``min_samples_leaf=15``, grown to full size, on all rows up to the
200,000-row default sample), two at a time on two cores.  The ratio exact / hist is the
histogram tree's speed-up.

Part 2, what the tree changes in the answer: importances on bench_importances'
``numeric``, ``numeric3`` and ``mixed`` data at ``--n-importances`` rows (4 parquet
files), ``--seeds`` data seeds, both tree methods: wall time and the max absolute error
of the normalised importances against the truth (bench_importances.truth_importances).

Part 3, StratPD on a codependent continuous stratifier (``daskpd.datasets.Quadratic(
decimals=2, x1_max=10)``: x2 = x1 + N(0, 0.5) has ~n distinct values, more than the
histogram tree's 65,535 bins at 1e5 rows and above): RMSE of the x1 curve against the truth
x1^2 - min^2, for both tree methods.

Data is written under ``--workdir`` (a temporary directory by default).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench_importances as bi  # noqa: E402

METHODS = ("hist", "exact")


def part1(sizes):
    import dask

    from daskpd import strat_curves_and_importances

    print("part 1: ten stratifying trees (importances, p = 10, numeric3 data), fit seconds (timings['fit_s'])")
    print(f"{'rows':>9} {'method':>6} {'fit s':>7} {'call s':>7}")
    with dask.config.set(scheduler="threads"):
        warm = bi.chunk(999, 2_000, "numeric3")
        for tm in METHODS:  # imports and numba kernels loaded outside the clock
            strat_curves_and_importances(warm, target="y", progress=False, tree_method=tm)
        for n in sizes:
            df = bi.chunk(0, n, "numeric3", seed=0)
            fit = {}
            for tm in METHODS:
                t = time.perf_counter()
                r = strat_curves_and_importances(df, target="y", progress=False, tree_method=tm)
                el = time.perf_counter() - t
                fit[tm] = r.timings["fit_s"]
                print(f"{n:>9,} {tm:>6} {fit[tm]:7.3f} {el:7.2f}")
            print(f"{'':>9} exact / hist fit time: {fit['exact'] / fit['hist']:.1f}x", flush=True)


def part2(seeds, n, workdir):
    from daskpd import strat_curves_and_importances

    print(f"\npart 2: importances at n = {n:,}, p = 10: time and max |error| of the normalised importances")
    print(f"{'data':>9} {'seed':>4} {'method':>6} {'time s':>7} {'fit s':>6} {'max err':>8}")
    summary = {}
    for ds in ("numeric", "numeric3", "mixed"):
        cats = bi.CATEGORICAL[ds]
        for tm in METHODS:  # warm-up
            strat_curves_and_importances(bi.chunk(999, 2_000, ds), target="y", categorical_features=cats, progress=False,
                                         tree_method=tm)
        for seed in range(seeds):
            path = bi.write_data(os.path.join(workdir, f"{ds}_{n}_s{seed}"), n, max(1, -(-n // 4)), ds, seed=seed)
            truth = bi.truth_importances(path, ds)
            for tm in METHODS:
                t = time.perf_counter()
                r = strat_curves_and_importances(path, target="y", categorical_features=cats, progress=False, tree_method=tm)
                el = time.perf_counter() - t
                err = max(abs(r.table.loc[f, "importance"] - truth[f]) for f in truth)
                summary.setdefault((ds, tm), []).append((el, err))
                print(f"{ds:>9} {seed:>4} {tm:>6} {el:7.2f} {r.timings['fit_s']:6.2f} {err:8.4f}", flush=True)
    print("\nmeans over seeds:")
    for ds in ("numeric", "numeric3", "mixed"):
        h, e = np.array(summary[(ds, "hist")]), np.array(summary[(ds, "exact")])
        print(f"  {ds:>9}: time hist {h[:, 0].mean():.2f} s, exact {e[:, 0].mean():.2f} s "
              f"({e[:, 0].mean() / h[:, 0].mean():.1f}x); max err hist {h[:, 1].mean():.4f}, exact {e[:, 1].mean():.4f}")


def part3(sizes):
    import daskpd
    from daskpd.datasets import Quadratic

    print("\npart 3: StratPD of x1 on Quadratic(decimals=2, x1_max=10): RMSE vs truth")
    print(f"{'rows':>9} {'tree':>6} {'time s':>7} {'leaves':>7} {'RMSE':>7}")
    for n in sizes:
        df = Quadratic(random_state=0, decimals=2, x1_max=10.0).frame(n)
        for tm in METHODS:
            t = time.perf_counter()
            r = daskpd.stratpd(df, target="y", feature="x1", tree_method=tm, progress=False)
            el = time.perf_counter() - t
            f = r.to_frame()
            x, p = f["x"].to_numpy(), f["pd"].to_numpy()
            ok = np.isfinite(p)
            rmse = float(np.sqrt(np.mean((p[ok] - (x[ok] ** 2 - x[ok].min() ** 2)) ** 2)))
            print(f"{n:>9,} {tm:>6} {el:7.2f} {r.n_leaves:7,} {rmse:7.4f}", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1e5,2e5", help="part 1 row counts")
    ap.add_argument("--seeds", type=int, default=3, help="part 2 data seeds")
    ap.add_argument("--n-importances", type=float, default=1e5, help="part 2 row count")
    ap.add_argument("--stratpd-sizes", default="1e5,1e6", help="part 3 row counts")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--skip-importances", action="store_true", help="skip part 2")
    a = ap.parse_args(argv)
    workdir = a.workdir or tempfile.mkdtemp(prefix="daskpd-bench-tree-")
    os.makedirs(workdir, exist_ok=True)
    print(f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores")
    part1([int(float(s)) for s in a.sizes.split(",")])
    if not a.skip_importances:
        part2(a.seeds, int(a.n_importances), workdir)
    part3([int(float(s)) for s in a.stratpd_sizes.split(",")])
    return 0


if __name__ == "__main__":
    sys.exit(main())
