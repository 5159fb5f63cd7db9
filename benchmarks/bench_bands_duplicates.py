#!/usr/bin/env python
"""How the bootstrap bands treat rows that are exact duplicates.

    .venv/bin/python benchmarks/bench_bands_duplicates.py [--rows 20000] [--binary 6] [--trials 200]

daskpd draws a row's trial weights from its content hash (the hashed columns: for a
model's PD the model's input columns; for StratPD/CatStratPD the features and the
target), so that the trials do not depend on the partitioning.  Rows identical in every
hashed column therefore get the same weights in every trial: to the bootstrap they are
one row weighted by their multiplicity, and the spread of the trials grows with it.

For a HistGradientBoostingRegressor (30 trees) fitted on ``--rows`` rows of ``--binary``
binary features (``2^binary`` distinct rows, each repeated about ``rows / 2^binary``
times) and on the same rows plus a continuous feature the model also uses (no two rows
alike), the script prints, at each grid value of the PD of ``b1``, the standard
deviation of daskpd's ``--trials`` trials (``n_trials``, in memory) and that of a
bootstrap drawing every row's Poisson(1) weight independently (numpy, over the model's
predictions on the grid: the same estimator, the weights of a row bootstrap), and the
result's ``params["row_repeats"]`` (how often rows repeat in the hashed columns, measured
in the same pass) with its square root, the spread's predicted factor; and the standard
deviation of daskpd's trials when ``row_id`` names a row number (every row its own
weights: the row bootstrap's spread).
"""
from __future__ import annotations

import argparse
import warnings

import numpy as np
import pandas as pd


def spreads(X: pd.DataFrame, y: np.ndarray, trials: int, seed: int) -> tuple:
    import dask
    from sklearn.ensemble import HistGradientBoostingRegressor

    import daskpd

    model = HistGradientBoostingRegressor(max_iter=30, random_state=0).fit(X, y)
    with dask.config.set(scheduler="sync"):
        res = daskpd.partial_dependence(model, X, "b1", n_trials=trials, random_state=seed, progress=False)
        apart = daskpd.partial_dependence(model, X.assign(row=np.arange(len(X))), "b1", n_trials=trials,
                                          random_state=seed, row_id="row", progress=False)
    grid = np.asarray(res.grid_values[0])
    ours = np.asarray(res.trials_pd).std(axis=0, ddof=1)
    ours_apart = np.asarray(apart.trials_pd).std(axis=0, ddof=1)
    preds = np.column_stack([model.predict(X.assign(b1=v)) for v in grid])
    W = np.random.default_rng(seed).poisson(1.0, (trials, len(X))).astype(np.float64)
    rows = (W @ preds) / W.sum(axis=1, keepdims=True)
    return grid, ours, rows.std(axis=0, ddof=1), res.params["row_repeats"], ours_apart


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=float, default=20_000)
    ap.add_argument("--binary", type=int, default=6, help="binary features (2^binary distinct rows)")
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    n = int(args.rows)
    rng = np.random.default_rng(0)
    X = pd.DataFrame({f"b{j}": rng.integers(0, 2, n) for j in range(args.binary)})
    u = rng.uniform(0.0, 1.0, n)
    y = 2.0 * X["b0"] + X["b1"] * X["b2"] + rng.normal(0.0, 1.0, n)
    print(f"# {n:,} rows, {args.binary} binary features, {args.trials} trials; PD of b1")
    print("| design | distinct rows | b1 | sd of daskpd's trials | sd of an independent row bootstrap | ratio "
          "| row_repeats | its square root | sd with `row_id` (a row number) | its ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, data, target in (("binary features only", X, y), ("plus a continuous feature", X.assign(u=u),
                                                                 y + np.sin(6.0 * u))):
        distinct = len(data.drop_duplicates())
        grid, ours, rows, rep, apart = spreads(data, np.asarray(target), args.trials, args.seed)
        for v, a, b, c in zip(grid, ours, rows, apart):
            print(f"| {name} | {distinct:,} | {v:g} | {a:.4f} | {b:.4f} | {a / b:.1f} | {rep:.4g} | {np.sqrt(rep):.1f} "
                  f"| {c:.4f} | {c / b:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
