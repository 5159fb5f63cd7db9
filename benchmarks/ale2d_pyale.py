#!/usr/bin/env python
"""Issue 15: the 2-D ALE (numeric x numeric) against PyALE 1.2.0.

    .venv/bin/python benchmarks/ale2d_pyale.py [n_rows ...]

Synthetic data ``y = x1 * x2 + x3 + noise`` (x1 uniform, x2 normal so that the tails leave
quantile cells empty, x3 uniform).  Models: a GradientBoostingRegressor, and a
LinearRegression on ``[x1, x2, x3, x1*x2]`` inside a Pipeline.  Per model and grid size:
the largest |daskpd - PyALE| over the surface, the largest |surface|, the empty cells,
and the seconds of each (daskpd on pandas input: in-memory, one partition per 1e5 rows;
and on 4 dask partitions).  PyALE is the test extra (``pip install PyALE==1.2.0``).
"""
import sys
import time
import warnings

import numpy as np
import pandas as pd

warnings.simplefilter("ignore")


def main(sizes):
    import dask.dataframe as dd
    from PyALE._src.ALE_2D import aleplot_2D_continuous
    from sklearn.ensemble import GradientBoostingRegressor
    from sklearn.linear_model import LinearRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer

    import daskpd

    print("| rows | model | bins | empty cells | max abs diff | max abs ALE | daskpd s | daskpd 4 parts s | PyALE s |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for n in sizes:
        rng = np.random.default_rng(0)
        X = pd.DataFrame({"x1": rng.uniform(-1, 1, n), "x2": rng.normal(0, 1, n), "x3": rng.uniform(0, 1, n)})
        y = X.x1 * X.x2 + X.x3 + rng.normal(0, 0.1, n)
        gbr = GradientBoostingRegressor(n_estimators=60, max_depth=3, random_state=0).fit(X, y)
        add = FunctionTransformer(lambda d: np.c_[d.to_numpy(float), d["x1"].to_numpy() * d["x2"].to_numpy()])
        pipe = make_pipeline(add, LinearRegression()).fit(X, y)
        for name, m in (("GBR", gbr), ("Pipeline(x1*x2, LinearRegression)", pipe)):
            for bins in (10, 40, 100):
                t = time.perf_counter()
                res = daskpd.ale(m, X, ("x1", "x2"), bins=bins)
                t_d = time.perf_counter() - t
                t = time.perf_counter()
                res4 = daskpd.ale(m, dd.from_pandas(X, npartitions=4), ("x1", "x2"), bins=bins)
                t_4 = time.perf_counter() - t
                t = time.perf_counter()
                grid = aleplot_2D_continuous(X, m, ["x1", "x2"], grid_size=bins)
                t_p = time.perf_counter() - t
                assert np.array_equal(res.x, grid.index.to_numpy()) and np.array_equal(res.x2, grid.columns.to_numpy())
                diff = max(np.abs(res.ale - grid.to_numpy()).max(), np.abs(res4.ale - grid.to_numpy()).max())
                print(f"| {n:,} | {name} | {bins} | {int(res.imputed.sum())} | {diff:.1e} | "
                      f"{np.abs(res.ale).max():.3f} | {t_d:.2f} | {t_4:.2f} | {t_p:.2f} |", flush=True)


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [3_000, 100_000])
