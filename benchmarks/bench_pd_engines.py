#!/usr/bin/env python
"""Brute-force partial dependence of tree models: daskpd's tree engine vs scikit-learn and H2O.

    .venv/bin/python benchmarks/bench_pd_engines.py [--rows 1e6] [--ref-rows 5e4] [--ref-rows-2way 1e4]
        [--h2o-rows 2e4] [--h2o-2way] [--trees 100] [--grid 20] [--skip-h2o]

Data (built here, nothing written): ``--rows`` rows of five uniform columns a..e and a
12-level pandas categorical ``cat``; y = 3a + sin(6b) + cd + e^2 + an effect per level of
``cat`` times a, + noise.  Models, fitted on a 50,000-row sample (fit time not counted):

* ``GradientBoostingRegressor(n_estimators=100, max_depth=5)`` on a..e;
* ``HistGradientBoostingRegressor(max_iter=100, max_depth=5)`` on a..e and ``cat``
  (native categorical splits, its own ordinal encoder).

Workloads, on the same 2 cores: a 1-way PD of 3 features x 20 grid values (GBR: a, b, c;
HGB: a, b, cat) and a 2-way PD of (a, b) x (20 x 20), averaged over all ``--rows`` rows
(``method="brute"``: the average of the model's predictions over the rows).

* daskpd: ``daskpd.partial_dependence`` on the in-memory frame (dask's threads, 2
  partitions per core), engine "auto" (tree-exact here);
* scikit-learn ``partial_dependence(method="brute")``: it predicts every row at every grid
  cell, so its time is linear in rows; it is timed on ``--ref-rows`` rows
  (``--ref-rows-2way`` for the 2-way) and scaled to ``--rows`` (the factor is printed),
  with one OpenMP thread (HistGradientBoosting's predict spins badly with two on a busy
  2-core machine: 8x slower in a check before this benchmark);
  On those rows daskpd runs with the same grid: the max abs difference is printed (goal
  <= 1e-9).  ``method="recursion"`` (training-data weights, not the rows; no categorical
  features) is timed where scikit-learn allows it;
* H2O-3 ``partial_plot`` (``pip install h2o``; Java): an H2O GBM with the same
  ntrees/max_depth on the same sample (a different model: times only), ``nbins=20``,
  timed at two sizes (``--h2o-rows`` / 4 and ``--h2o-rows``) and extrapolated linearly to
  ``--rows``; the 2-way grid (400 scorings of the frame) only with ``--h2o-2way``.
  "H2O: not installed" when absent.

Ratios (goals: >= 10x scikit-learn brute, >= 20x H2O partial_plot) are printed at the end;
they are what one run on one machine shows.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np
import pandas as pd

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

LEVELS = [f"L{i:02d}" for i in range(12)]


def make_data(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = pd.DataFrame(rng.uniform(size=(n, 5)), columns=list("abcde"))
    codes = rng.integers(0, len(LEVELS), n)
    X["cat"] = pd.Categorical.from_codes(codes, categories=LEVELS)
    effect = np.sin(np.arange(len(LEVELS)) * 2.1) * 2.0  # not monotone in the level order
    y = (3 * X.a + np.sin(6 * X.b) + X.c * X.d + X.e ** 2 + effect[codes] * X.a
         + rng.normal(0, 0.1, n)).to_numpy()
    return X, y


def timed(fn, *args, **kw):
    t0 = time.perf_counter()
    out = fn(*args, **kw)
    return time.perf_counter() - t0, out


def sk_brute(model, X, features, grids, cats):
    from sklearn.inspection import partial_dependence

    return partial_dependence(model, X, features, method="brute", custom_values=dict(zip(features, grids)),
                              categorical_features=cats or None)["average"][0]


def run_daskpd(model, X, items, grid=None, resolution=20):
    import daskpd

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return daskpd.partial_dependence(model, X, items, grid_resolution=resolution, method="brute",
                                         progress=False, grid=grid)


def h2o_setup(X_fit, y_fit, features, trees):
    try:
        import h2o
        from h2o.estimators import H2OGradientBoostingEstimator
    except ImportError:
        return None
    h2o.init(nthreads=2, max_mem_size="3G", verbose=False)
    h2o.no_progress()
    fr = h2o.H2OFrame(pd.concat([X_fit[features].astype({c: str for c in features if c == "cat"}),
                                 pd.Series(y_fit, name="y", index=X_fit.index)], axis=1))
    if "cat" in features:
        fr["cat"] = fr["cat"].asfactor()
    m = H2OGradientBoostingEstimator(ntrees=trees, max_depth=5, seed=0)
    m.train(x=list(features), y="y", training_frame=fr)
    return m


def h2o_time(model, X, features, cols=None, pairs=None, nbins=20):
    import h2o

    df = X[features].copy()
    if "cat" in features:
        df["cat"] = df["cat"].astype(str)
    fr = h2o.H2OFrame(df)
    if "cat" in features:
        fr["cat"] = fr["cat"].asfactor()
    kw = {"cols": cols} if cols else {"col_pairs_2dpdp": pairs, "cols": []}
    t, _ = timed(model.partial_plot, frame=fr, nbins=nbins, plot=False, **kw)
    h2o.remove(fr)
    return t


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=float, default=1e6)
    ap.add_argument("--ref-rows", type=float, default=5e4)
    ap.add_argument("--ref-rows-2way", type=float, default=1e4)
    ap.add_argument("--h2o-rows", type=float, default=2e4)
    ap.add_argument("--h2o-2way", action="store_true", help="also time H2O on the 2-way grid (long)")
    ap.add_argument("--trees", type=int, default=100, help="trees per model (100; fewer for a smoke run)")
    ap.add_argument("--grid", type=int, default=20, help="grid points per feature (20; fewer for a smoke run)")
    ap.add_argument("--skip-h2o", action="store_true")
    args = ap.parse_args(argv)
    n, nref, nref2 = int(args.rows), int(args.ref_rows), int(args.ref_rows_2way)

    from threadpoolctl import threadpool_limits
    from sklearn.ensemble import GradientBoostingRegressor, HistGradientBoostingRegressor
    import sklearn

    import daskpd

    X, y = make_data(n)
    fit = np.random.default_rng(1).choice(n, min(n, 50_000), replace=False)
    Xf, yf = X.iloc[fit], y[fit]
    num = list("abcde")
    t_fit, gbr = timed(GradientBoostingRegressor(n_estimators=args.trees, max_depth=5, random_state=0).fit, Xf[num], yf)
    hgb = HistGradientBoostingRegressor(max_iter=args.trees, max_depth=5, random_state=0).fit(Xf, yf)
    n_cat_splits = sum(int(p.nodes["is_categorical"].sum()) for ps in hgb._predictors for p in ps)
    print(f"daskpd {daskpd.__version__}, scikit-learn {sklearn.__version__}, {os.cpu_count()} cores; {n:,} rows; "
          f"GBR {args.trees} trees depth 5, HGB {args.trees} trees depth 5 with {n_cat_splits} categorical splits")
    cases = [("GBR", gbr, X[num], ["a", "b", "c"]), ("HGB categorical", hgb, X, ["a", "b", "cat"])]
    h2o_models = {}
    if not args.skip_h2o:
        try:
            import h2o  # noqa: F401
        except ImportError:
            print("H2O: not installed")
        else:
            for name, _, Xc, _ in cases:
                h2o_models[name] = h2o_setup(Xf[Xc.columns.tolist()], yf, Xc.columns.tolist(), args.trees)
    rows = []
    for name, model, Xc, feats in cases:
        cats = [f for f in feats if f == "cat"]
        # warm-up (numba kernels from the cache), on a small slice
        run_daskpd(model, Xc.iloc[:2000], [(feats[0],), (feats[0], feats[1])])
        g = args.grid
        for kind, items, nr in [(f"1-way 3 x {g}", [(f,) for f in feats], nref),
                                (f"2-way {g} x {g}", [("a", "b")], nref2)]:
            t_d, res = timed(run_daskpd, model, Xc, items, resolution=g)
            res = res if isinstance(res, dict) else {items[0]: res}
            engines = sorted({r.engine for r in res.values()})
            # scikit-learn brute on nr rows with daskpd's grid; daskpd on the same rows for the difference
            sub = Xc.iloc[:nr]
            t_sk, diff = 0.0, 0.0
            with threadpool_limits(limits=1, user_api="openmp"):  # its fastest on a shared machine
                for r in res.values():
                    feats_r = list(r.features)
                    t, sk = timed(sk_brute, model, sub, feats_r, r.grid_values, cats if set(cats) & set(feats_r)
                                  else [])
                    t_sk += t
                    mine = run_daskpd(model, sub, tuple(feats_r) if len(feats_r) == 2 else feats_r[0],
                                      grid=dict(zip(feats_r, r.grid_values)))
                    diff = max(diff, float(np.max(np.abs(mine.average - sk))))
            t_sk_full = t_sk * n / nr
            # scikit-learn recursion (numeric features only)
            t_rec = None
            if not any(f == "cat" for it in items for f in it):
                from sklearn.inspection import partial_dependence

                try:
                    t_rec = 0.0
                    for r in res.values():
                        t, _ = timed(partial_dependence, model, Xc.iloc[:1000], list(r.features), method="recursion",
                                     custom_values=dict(zip(r.features, r.grid_values)))
                        t_rec += t
                except (ValueError, NotImplementedError) as exc:  # print why, and go on without it
                    print(f"scikit-learn recursion failed on {name} {kind}: {type(exc).__name__}: {exc}"[:300])
                    t_rec = None
            # H2O partial_plot, two sizes, extrapolated linearly
            t_h2o = None
            hm = h2o_models.get(name)
            if hm is not None and (len(items[0]) == 1 or args.h2o_2way):
                try:
                    cols = [f for it in items for f in it] if len(items[0]) == 1 else None
                    pairs = None if cols else [list(items[0])]
                    sizes = (int(args.h2o_rows) // 4, int(args.h2o_rows))
                    ts = [h2o_time(hm, Xc.iloc[:s], Xc.columns.tolist(), cols, pairs, g) for s in sizes]
                    slope = (ts[1] - ts[0]) / (sizes[1] - sizes[0])
                    t_h2o = ts[1] + slope * (n - sizes[1])
                except Exception as exc:  # noqa: BLE001 - print and go on
                    print(f"H2O partial_plot failed on {name} {kind}: {type(exc).__name__}: {exc}"[:300])
            rows.append((name, kind, "/".join(engines), t_d, t_sk_full, nr, diff, t_rec, t_h2o))
            print(f"{name:16s} {kind:14s} daskpd {t_d:8.2f} s ({'/'.join(engines)}) | sklearn brute {t_sk_full:9.1f} s "
                  f"(timed on {nr:,} rows x{n / nr:.0f}) | max|diff| {diff:.1e}"
                  + (f" | sklearn recursion {t_rec:.3f} s" if t_rec is not None else "")
                  + (f" | H2O partial_plot {t_h2o:8.1f} s" if t_h2o is not None else ""), flush=True)
    print()
    print(f"{'model':16s} {'PD':14s} {'daskpd s':>9s} {'sk brute s':>11s} {'ratio':>7s} {'H2O s':>8s} {'ratio':>7s} "
          f"{'max|diff|':>9s}")
    for name, kind, eng, t_d, t_sk, nr, diff, t_rec, t_h2o in rows:
        h = f"{t_h2o:8.1f} {t_h2o / t_d:6.1f}x" if t_h2o is not None else f"{'-':>8s} {'-':>7s}"
        print(f"{name:16s} {kind:14s} {t_d:9.2f} {t_sk:11.1f} {t_sk / t_d:6.1f}x {h} {diff:9.1e}")
    if h2o_models:
        import h2o

        h2o.cluster().shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
