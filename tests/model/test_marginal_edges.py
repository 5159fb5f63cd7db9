"""Issue 13 (item 5): marginal-plot bins are computed over the rows that are averaged --
with a target, the rows whose target is finite -- not over every row with an x."""
from __future__ import annotations

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

import daskpd
from daskpd._engine.stats import type1_ranks


def _frame(n=4_000, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 10, n)
    y = 2 * x + rng.normal(0, 1, n)
    # y missing mostly at small x (x-dependent missingness), plus a few +-inf
    y[(x < 3) & (rng.uniform(size=n) < 0.8)] = np.nan
    y[:5] = np.inf
    y[5:8] = -np.inf
    return pd.DataFrame({"x": x, "y": y})


def _expected_quantile_bins(df, bins):
    ok = df[np.isfinite(df.y)]
    xs = np.sort(ok.x.to_numpy())
    z = np.unique(xs[[0, *type1_ranks(len(xs), bins)]])
    k = np.clip(np.searchsorted(z, ok.x.to_numpy(), side="left") - 1, 0, len(z) - 2)
    return z, np.bincount(k, minlength=len(z) - 1), ok.groupby(k).y.mean().to_numpy()


@pytest.mark.parametrize("npartitions", [1, 3])
def test_quantile_edges_come_from_rows_with_a_finite_target(npartitions):
    df = _frame()
    res = daskpd.marginal(dd.from_pandas(df, npartitions=npartitions), "x", target="y", bins=10)
    z, counts, means = _expected_quantile_bins(df, 10)
    np.testing.assert_allclose(np.r_[res.lo[:1], res.hi], z)
    np.testing.assert_array_equal(res.count, counts)
    np.testing.assert_allclose(res.y_mean, means, rtol=1e-12)
    # equal-count bins over the averaged rows (10 bins of ~ n_ok / 10), not bins whose
    # rows are mostly dropped
    assert counts.max() - counts.min() <= 1
    n_bad = int((~np.isfinite(df.y)).sum())
    assert res.n_bad_y == n_bad and res.count.sum() == len(df) - n_bad


def test_uniform_edges_and_distinct_values_ignore_rows_without_target():
    df = _frame()
    res = daskpd.marginal(df, "x", target="y", binning="uniform", bins=5)
    ok = df[np.isfinite(df.y)]
    np.testing.assert_allclose(np.r_[res.lo[:1], res.hi], np.linspace(ok.x.min(), ok.x.max(), 6))
    assert res.n_bad_y == int((~np.isfinite(df.y)).sum())
    # few distinct values: a value whose rows all lack y is not a bin; its rows count as bad y
    d = pd.DataFrame({"x": [1.0, 1, 2, 2, 3, 3], "y": [1.0, 2, np.nan, np.nan, 5, 6]})
    r = daskpd.marginal(d, "x", target="y")
    np.testing.assert_array_equal(r.x, [1.0, 3.0])
    np.testing.assert_allclose(r.y_mean, [1.5, 5.5])
    assert r.n_bad_y == 2 and r.n_missing == 0


def test_model_only_uses_every_row_with_an_x():
    df = _frame()

    def f(X):
        return X["x"].to_numpy() * 2.0

    res = daskpd.marginal(df.drop(columns="y"), "x", model=f, bins=10)
    xs = np.sort(df.x.to_numpy())
    z = np.unique(xs[[0, *type1_ranks(len(xs), 10)]])
    np.testing.assert_allclose(np.r_[res.lo[:1], res.hi], z)
    assert res.count.sum() == len(df)
