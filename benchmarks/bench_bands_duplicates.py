#!/usr/bin/env python
"""How the trials' bands treat rows that are exact duplicates.

    .venv/bin/python benchmarks/bench_bands_duplicates.py [--rows 20000] [--binary 6] [--trials 200]
        [--strat-rows 6000]

daskpd draws a row's trial weights for the model-based curves from its content hash
(the model's input columns), so that the trials do not depend on the partitioning.  Rows identical in every
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
weights: the row bootstrap's spread).  Then (``--strat-rows``) StratPD, whose trials
resample the stratification's leaves, not rows (duplicates are nothing to them): the
spread of its trials against StratPD rerun on explicit Poisson(1) resamples of the rows.
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


def stratpd_spreads(n: int, trials: int, seed: int) -> tuple:
    """StratPD of ``x1`` over ``n`` rows of two small integer features, a three-level
    category and an integer target (many rows alike): the trials' standard deviation at
    each position (a bootstrap of the leaves), and that of StratPD rerun on ``trials``
    explicit Poisson(1) resamples of the rows (each row its own weight; every rerun fits
    its own trees), every curve shifted to 0 at its first position as the band's trials
    are."""
    import dask

    import daskpd

    rng = np.random.default_rng(3)
    df = pd.DataFrame({"x1": rng.integers(0, 6, n), "x2": rng.integers(0, 4, n), "c": rng.choice(list("pqr"), n)})
    df["y"] = (df.x1 + 2 * df.x2 + (df.c == "q") + rng.integers(0, 2, n)).astype("int64")
    df["row"] = np.arange(n)
    kw = dict(target="y", feature="x1", features=["x1", "x2", "c"], progress=False)
    with dask.config.set(scheduler="sync"):
        ours = daskpd.stratpd(df, n_trials=trials, random_state=seed, **kw)
        draws = np.random.default_rng(seed).poisson(1.0, (trials, n))
        ref = np.vstack([daskpd.stratpd(df.loc[np.repeat(np.arange(n), w)], random_state=seed, **kw).pd
                         for w in draws])
    ref = ref - ref[:, [0]]
    return np.asarray(ours.x), ours.band()["std"], np.nanstd(ref, axis=0, ddof=1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=float, default=20_000)
    ap.add_argument("--binary", type=int, default=6, help="binary features (2^binary distinct rows)")
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--strat-rows", type=float, default=6_000, help="rows of the StratPD table (0: skip it)")
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
    if args.strat_rows:
        m = int(args.strat_rows)
        x, ours, ref = stratpd_spreads(m, args.trials, args.seed)
        print(f"\n# StratPD of x1, {m:,} rows (x1, x2 small integers, c three levels, y an integer), "
              f"{args.trials} trials (a bootstrap of the leaves)")
        print("| x1 | band std of daskpd's trials | sd over explicit row resamples | ratio |")
        print("|---|---|---|---|")
        for v, a, c in zip(x[1:], ours[1:], ref[1:]):  # position 0 is every trial's zero
            print(f"| {v:g} | {a:.4f} | {c:.4f} | {a / c:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
