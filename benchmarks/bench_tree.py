#!/usr/bin/env python
"""The stratifying tree: daskpd's histogram tree vs scikit-learn's exact tree.

    .venv/bin/python benchmarks/bench_tree.py [--sizes 1e5,2e5] [--seeds 3] [--workdir DIR]

Part 1, fit time (best of 3, one thread, after a warm-up) of one stratifying tree of y
on 9 columns (x2..x10 of bench_importances' ``numeric3`` data, 3-decimal features),
min_samples_leaf=15, grown to full size:

* ``hist``: daskpd._strat.histtree.HistTree with its default 1,023 bins per column (binning
  included; in the pipeline the columns are binned once per request and shared by every
  feature's tree, so ``hist grow`` -- the grow alone -- is the per-feature cost);
* ``hist auto``: the same with the pipeline's bins (``histtree.auto_max_bins``: one bin
  per distinct value up to 65,535, the default since issue 13; binning included);
* ``exact``: sklearn.tree.DecisionTreeRegressor (float32, as the pipeline fits it);
* ``hgb1``: sklearn HistGradientBoostingRegressor(max_iter=1, learning_rate=1,
  max_leaf_nodes=None, min_samples_leaf=15, l2_regularization=0, early_stopping=False):
  a single histogram tree grown by scikit-learn (its leaf ids are not public API; shown
  for its fit time only).

and the within-leaf sum of squared errors of y (how well the leaves stratify; lower is
better) and the leaf count.

Part 2, what the tree changes in the answer: ``daskpd.importances`` on bench_importances'
numeric, numeric3 and mixed data at n = 1e5 (4 parquet files), ``--seeds`` data seeds,
tree_method "hist" and "exact": wall time and the max absolute error of the normalised
importances against the truth (bench_importances.truth_importances).

Part 3, StratPD on a codependent continuous stratifier (``daskpd.datasets.Quadratic(
decimals=2, x1_max=10)``: x2 = x1 + N(0, 0.5) has ~1e5 distinct values, so the histogram
tree bins it): RMSE of the x1 curve against the truth x1^2 - min^2, at 1e5 and 1e6 rows,
for tree_method "exact" and "hist" with 255, 511, 1023 and 4095 bins per column and with
"auto" bins (the default: ``daskpd._strat.trees.TREE_BINS``, one bin per distinct value
up to 65,535; 1,023 was the default before issue 13).
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


def best_of(fn, k=3):
    out = None
    times = []
    for _ in range(k):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def part1(sizes, workdir):
    import pandas as pd
    from sklearn.ensemble import HistGradientBoostingRegressor
    from sklearn.tree import DecisionTreeRegressor
    from threadpoolctl import threadpool_limits

    from daskpd._strat.histtree import HistTree, auto_max_bins, bin_columns

    def sse(y, leaf):
        return float(((y - pd.Series(y).groupby(leaf).transform("mean")) ** 2).sum())

    print("part 1: one stratifying tree, 9 columns, min_samples_leaf=15, one thread")
    print(f"{'rows':>9} {'method':>10} {'fit s':>8} {'leaves':>7} {'SSE within leaves':>18}")
    HistTree(15).fit(np.random.rand(500, 3), np.random.rand(500))  # numba: load/compile outside the clock
    for n in sizes:
        df = bi.chunk(0, n, "numeric3", seed=0)
        y = df.pop("y").to_numpy()
        X = df.drop(columns=["x1"]).to_numpy("float64")
        with threadpool_limits(1):
            t_h, h = best_of(lambda: HistTree(15).fit(X, y))
            B, bins = bin_columns(X)
            t_g, _ = best_of(lambda: HistTree(15).fit_binned(B, bins, y))
            nb_auto = auto_max_bins(X)
            t_a, a_tree = best_of(lambda: HistTree(15, max_bins=nb_auto).fit(X, y))
            X32 = X.astype("float32")
            t_e, d = best_of(lambda: DecisionTreeRegressor(min_samples_leaf=15, random_state=0).fit(X32, y))
            hgb = HistGradientBoostingRegressor(max_iter=1, learning_rate=1.0, max_leaf_nodes=None, min_samples_leaf=15,
                                                l2_regularization=0.0, early_stopping=False)
            t_b, _ = best_of(lambda: hgb.fit(X, y))
        s_h, s_e, s_a = sse(y, h.apply(X)), sse(y, d.apply(X32)), sse(y, a_tree.apply(X))
        print(f"{n:>9,} {'hist':>10} {t_h:8.3f} {h.get_n_leaves():7,} {s_h:18,.0f}")
        print(f"{n:>9,} {'hist grow':>10} {t_g:8.3f} {'':>7} {'':>18}")
        print(f"{n:>9,} {'hist auto':>10} {t_a:8.3f} {a_tree.get_n_leaves():7,} {s_a:18,.0f}"
              f"   ({nb_auto:,} bins)")
        print(f"{n:>9,} {'exact':>10} {t_e:8.3f} {d.get_n_leaves():7,} {s_e:18,.0f}")
        print(f"{n:>9,} {'hgb1':>10} {t_b:8.3f} {hgb._predictors[0][0].get_n_leaf_nodes():7,} {'':>18}")
        print(f"{'':>9} exact / hist fit time: {t_e / t_h:.1f}x (grow only: {t_e / t_g:.1f}x); "
              f"SSE hist / exact: {s_h / s_e:.3f}")


def part2(seeds, workdir):
    from daskpd.importance import strat_curves_and_importances

    print("\npart 2: importances at n = 1e5, p = 10: time and max |error| of the normalised importances")
    print(f"{'data':>9} {'seed':>4} {'method':>6} {'time s':>7} {'fit s':>6} {'max err':>8}")
    summary = {}
    for ds in ("numeric", "numeric3", "mixed"):
        cats = bi.CATEGORICAL[ds]
        strat_curves_and_importances(bi.chunk(999, 2_000, ds), "y", categorical=cats, progress=False)  # warm-up
        strat_curves_and_importances(bi.chunk(999, 2_000, ds), "y", categorical=cats, progress=False,
                                     tree_method="exact")
        for seed in range(seeds):
            path = bi.write_data(os.path.join(workdir, f"{ds}_1e5_s{seed}"), 100_000, 25_000, ds, seed=seed)
            truth = bi.truth_importances(path, ds)
            for tm in ("hist", "exact"):
                t = time.perf_counter()
                r = strat_curves_and_importances(path, "y", categorical=cats, progress=False, tree_method=tm)
                el = time.perf_counter() - t
                err = max(abs(r.table.loc[f, "importance"] - truth[f]) for f in truth)
                summary.setdefault((ds, tm), []).append((el, err))
                print(f"{ds:>9} {seed:>4} {tm:>6} {el:7.2f} {r.timings['fit_s']:6.2f} {err:8.4f}")
    print("\nmeans over seeds:")
    for ds in ("numeric", "numeric3", "mixed"):
        h, e = np.array(summary[(ds, "hist")]), np.array(summary[(ds, "exact")])
        print(f"  {ds:>9}: time hist {h[:, 0].mean():.2f} s, exact {e[:, 0].mean():.2f} s "
              f"({e[:, 0].mean() / h[:, 0].mean():.1f}x); max err hist {h[:, 1].mean():.4f}, exact {e[:, 1].mean():.4f}")


def part3():
    import daskpd
    from daskpd._strat import trees
    from daskpd.datasets import Quadratic

    print("\npart 3: StratPD of x1 on Quadratic(decimals=2, x1_max=10): RMSE vs truth")
    print(f"{'rows':>9} {'tree':>12} {'time s':>7} {'leaves':>7} {'RMSE':>7}")
    default = trees.TREE_BINS  # "auto": bins per stratifying column chosen from the sample
    for n in (100_000, 1_000_000):
        df = Quadratic(random_state=0, decimals=2, x1_max=10.0).frame(n)
        for tm, nb in (("exact", None), ("hist", 255), ("hist", 511), ("hist", 1023), ("hist", 4095),
                       ("hist", "auto")):
            trees.TREE_BINS = nb or default
            try:
                t = time.perf_counter()
                r = daskpd.stratpd(df, "y", "x1", tree_method=tm, progress=False)
                el = time.perf_counter() - t
            finally:
                trees.TREE_BINS = default
            f = r.to_frame()
            x, p = f["x"].to_numpy(), f["pd"].to_numpy()
            ok = np.isfinite(p)
            rmse = float(np.sqrt(np.mean((p[ok] - (x[ok] ** 2 - x[ok].min() ** 2)) ** 2)))
            label = tm if nb is None else f"hist {nb}"
            print(f"{n:>9,} {label:>12} {el:7.2f} {r.params['tree_leaves']:7,} {rmse:7.4f}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1e5,2e5")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--skip-importances", action="store_true")
    a = ap.parse_args(argv)
    sizes = [int(float(s)) for s in a.sizes.split(",")]
    workdir = a.workdir or os.path.join(tempfile.gettempdir(), "daskpd-bench-tree")
    os.makedirs(workdir, exist_ok=True)
    print(f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores")
    part1(sizes, workdir)
    if not a.skip_importances:
        part2(a.seeds, workdir)
    part3()


if __name__ == "__main__":
    main()
