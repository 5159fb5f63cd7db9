#!/usr/bin/env python
"""Friedman's H-statistic: the tree engine vs brute force, the evaluation sample vs the
exact data-point definition, and a peer (pyartemis) on the same numbers.

    .venv/bin/python benchmarks/bench_h_statistic.py [--rows 1e5,1e6] [--brute-rows 2e4] [--points 500]
        [--trees 100] [--accuracy-rows 2000] [--accuracy-points 100,250,500,1000] [--seeds 5] [--population-rows 2e4]
        [--peer /path/to/python-with-pyartemis] [--peer-rows 300]

Data (built here, nothing written but the peer's CSV in a temporary directory): five
uniform columns x1..x5 on (-1, 1), y = x1 + x2 + x1 x3 + sin(3 x4) x5 + noise.

* **Engines**: a ``HistGradientBoostingRegressor(max_iter=--trees, max_depth=5)`` fitted
  on 50,000 rows; ``daskpd.h_statistic`` of every pair (10) and every total (5) at
  ``--points`` evaluation points, over ``--rows`` rows, engine "auto" (the tree-exact walk
  for the PDs, value classes for the totals) against ``engine="predict"`` (brute force:
  ``--points`` predictions per row and statistic).  Brute force is linear in the rows:
  it is timed on ``--brute-rows`` rows and scaled (the factor is printed), and there the
  two engines' H² are compared (max abs difference; goal <= 1e-9).
* **Accuracy of the sample**: on ``--accuracy-rows`` rows of the known function (no
  model: the function itself, brute force), the exact data-point statistic (every row an
  evaluation point) against ``--accuracy-points`` points, over ``--seeds`` seeds
  (``random_state``): mean and max absolute error of H² over the 10 pairs and 5 totals.
  The population's values (``--population-rows`` rows, 1,000 points; analytic
  H²(x1, x3) = 0.25, H²(x4, x5) = 1) are printed for comparison.
* **Peer** (``--peer PYTHON``: an interpreter where ``pyartemis`` is installed; it pins
  numpy < 2 and pandas < 2, so it lives in its own virtualenv): pyartemis 0.1.5's
  ``FriedmanHStatisticMethod`` on ``--peer-rows`` rows of the function (its background
  and evaluation rows are the same rows), against ``daskpd.h_statistic`` with every row
  an evaluation point: the max abs difference of the pairwise and one-vs-all H², and
  both times.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time

import numpy as np
import pandas as pd

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

COLS = ["x1", "x2", "x3", "x4", "x5"]


def f_true(df) -> np.ndarray:
    x = {c: np.asarray(df[c], dtype=float) for c in COLS}
    return x["x1"] + x["x2"] + x["x1"] * x["x3"] + np.sin(3 * x["x4"]) * x["x5"]


def make_data(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(rng.uniform(-1, 1, size=(n, 5)), columns=COLS)


def timed(fn, *a, **kw):
    t0 = time.perf_counter()
    out = fn(*a, **kw)
    return time.perf_counter() - t0, out


def engines(args):
    import daskpd
    from sklearn.ensemble import HistGradientBoostingRegressor
    from threadpoolctl import threadpool_limits

    fit = make_data(50_000, seed=1)
    y = f_true(fit) + np.random.default_rng(2).normal(0, 0.1, len(fit))
    with threadpool_limits(limits=1, user_api="openmp"):
        model = HistGradientBoostingRegressor(max_iter=args.trees, max_depth=5, random_state=0).fit(fit, y)
        X_b = make_data(int(args.brute_rows), seed=3)
        tb, brute = timed(daskpd.h_statistic, model, X_b, n_points=args.points, engine="predict", progress=False)
        tt, tree_b = timed(daskpd.h_statistic, model, X_b, n_points=args.points, progress=False)
        diff = max(np.max(np.abs(brute.h2 - tree_b.h2)), np.max(np.abs(brute.h2_total - tree_b.h2_total)))
        print(f"\nengines: HistGradientBoostingRegressor({args.trees} trees, depth 5), {args.points} points, "
              f"10 pairs + 5 totals")
        print(f"brute force on {int(args.brute_rows):,} rows: {tb:.1f} s; tree engine there: {tt:.2f} s; "
              f"max |H² brute - tree| = {diff:.1e}")
        print("| rows | tree engine (s) | brute force (s, scaled) | ratio | strongest pair | its H² |")
        print("|---|---|---|---|---|---|")
        for n in args.rows:
            X = make_data(int(n), seed=4)
            t, res = timed(daskpd.h_statistic, model, X, n_points=args.points, progress=False)
            scaled = tb * n / args.brute_rows
            (a, b), v = res.ranking()[0]
            print(f"| {int(n):,} | {t:.2f} | {scaled:.1f} ({n / args.brute_rows:g} x {tb:.1f}) | {scaled / t:.1f}x "
                  f"| {a} x {b} | {v:.4f} |")


def accuracy(args):
    import daskpd

    X = make_data(int(args.accuracy_rows), seed=5)
    t, exact = timed(daskpd.h_statistic, f_true, X, n_points=len(X), progress=False)
    big = daskpd.h_statistic(f_true, make_data(int(args.population_rows), seed=6), n_points=1000, progress=False)
    print(f"\naccuracy: {len(X):,} rows of the function, exact data-point statistic ({t:.1f} s, every row a point):")
    print("  exact: " + ", ".join(f"{a} x {b} {v:.4f}" for (a, b), v in exact.ranking()[:2])
          + "; totals " + ", ".join(f"{f} {v:.4f}" for f, v in zip(exact.features, exact.h2_total)))
    print(f"  population ({int(args.population_rows):,} rows, 1,000 points): "
          + ", ".join(f"{a} x {b} {v:.4f}" for (a, b), v in big.ranking()[:2])
          + f"  (analytic H²(x1, x3) = 0.25)")
    print("| points | mean abs error of H² | max abs error | mean time (s) |")
    print("|---|---|---|---|")
    for k in args.accuracy_points:
        errs, times = [], []
        for s in range(args.seeds):
            t, r = timed(daskpd.h_statistic, f_true, X, n_points=int(k), random_state=s, progress=False)
            errs.append(np.r_[r.h2 - exact.h2, r.h2_total - exact.h2_total])
            times.append(t)
        e = np.abs(np.concatenate(errs))
        print(f"| {int(k):,} | {e.mean():.4f} | {e.max():.4f} | {np.mean(times):.2f} |")


PEER = textwrap.dedent("""
    import json, sys, time
    import numpy as np, pandas as pd
    from artemis.interactions_methods.model_agnostic import FriedmanHStatisticMethod
    X = pd.read_csv(sys.argv[1])
    def f(model, df):
        x = {c: df[c].to_numpy(dtype=float) for c in df.columns}
        return x["x1"] + x["x2"] + x["x1"] * x["x3"] + np.sin(3 * x["x4"]) * x["x5"]
    m = FriedmanHStatisticMethod(random_state=0)
    t0 = time.perf_counter()
    m.fit(None, X, n=None, predict_function=f, batchsize=100000)
    t = time.perf_counter() - t0
    ovo = {"|".join(sorted([r["Feature 1"], r["Feature 2"]])): float(r[m.method]) for _, r in m.ovo.iterrows()}
    ova = {r["Feature"]: float(r[m.ova.columns[1]]) for _, r in m.ova.iterrows()}
    print(json.dumps({"time": t, "ovo": ovo, "ova": ova}))
""")


def peer(args):
    import daskpd

    X = make_data(int(args.peer_rows), seed=7)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "rows.csv")
        X.to_csv(path, index=False)
        script = os.path.join(d, "peer.py")
        with open(script, "w") as fh:
            fh.write(PEER)
        p = subprocess.run([args.peer, script, path], capture_output=True, text=True)
        X = pd.read_csv(path)  # the rows pyartemis read, float for float
    if p.returncode != 0:
        print(f"\npeer: pyartemis failed: {p.stderr.strip().splitlines()[-1] if p.stderr.strip() else p.returncode}")
        return
    got = json.loads(p.stdout.strip().splitlines()[-1])
    t, res = timed(daskpd.h_statistic, f_true, X, n_points=len(X), progress=False)
    d_pair = max(abs(v - got["ovo"]["|".join(sorted(p))]) for p, v in zip(res.pairs, res.h2))
    d_tot = max(abs(v - got["ova"][f]) for f, v in zip(res.features, res.h2_total))
    print(f"\npeer: pyartemis 0.1.5 FriedmanHStatisticMethod on {len(X):,} rows (every row an evaluation point):")
    print(f"| tool | time (s) | max abs diff pairwise H² | max abs diff total H² |")
    print("|---|---|---|---|")
    print(f"| pyartemis | {got['time']:.2f} | | |")
    print(f"| daskpd | {t:.2f} | {d_pair:.1e} | {d_tot:.1e} |")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default="1e5,1e6")
    ap.add_argument("--brute-rows", type=float, default=2e4)
    ap.add_argument("--points", type=int, default=500)
    ap.add_argument("--trees", type=int, default=100)
    ap.add_argument("--accuracy-rows", type=float, default=2000)
    ap.add_argument("--accuracy-points", default="100,250,500,1000")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--population-rows", type=float, default=2e4)
    ap.add_argument("--peer", default=None, help="a Python interpreter with pyartemis installed")
    ap.add_argument("--peer-rows", type=float, default=300)
    args = ap.parse_args(argv)
    args.rows = [float(v) for v in args.rows.split(",") if v]
    args.accuracy_points = [float(v) for v in args.accuracy_points.split(",") if v]
    engines(args)
    if args.accuracy_rows > 0:
        accuracy(args)
    if args.peer:
        peer(args)
    else:
        print("\npeer: skipped (--peer PYTHON names an interpreter with pyartemis)")


if __name__ == "__main__":
    main()
