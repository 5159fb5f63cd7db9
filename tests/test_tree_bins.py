"""Issue 13 (item 4): the histogram tree bins each stratifying column exactly (one bin per
distinct value) up to 65,535 distinct values, so that its leaves are scikit-learn's exact
tree's -- and StratPD curves agree with stratx's -- on tables like california housing
(median_income: 12,928 distinct values)."""
from __future__ import annotations

import numpy as np
import pandas as pd

import daskpd
from daskpd._strat.histtree import MAX_TREE_BINS, MAX_TREE_BINS_LIMIT, auto_max_bins


def test_auto_max_bins():
    rng = np.random.default_rng(0)
    few = rng.integers(0, 50, (1000, 2)).astype(float)
    assert auto_max_bins(few) == MAX_TREE_BINS
    many = np.column_stack([np.arange(5000.0), np.r_[np.full(10, np.nan), np.arange(4990.0)]])
    assert auto_max_bins(many) == 5000
    huge = rng.uniform(size=(70_000, 1))
    assert auto_max_bins(huge) == MAX_TREE_BINS_LIMIT
    assert auto_max_bins(np.empty((0, 3))) == MAX_TREE_BINS


def test_hist_tree_equals_exact_tree_on_a_column_with_5000_values():
    rng = np.random.default_rng(1)
    n = 20_000
    age = rng.integers(1, 53, n).astype(float)
    income = np.round(np.exp(rng.normal(1.3, 0.45, n)), 3)  # ~5,000 distinct values
    rooms = np.round(np.exp(rng.normal(7.5 - 0.01 * age, 0.7)))
    y = 1000 * age + 40_000 * income + 10 * np.sqrt(rooms) + 30_000 * rng.standard_t(3, n)
    df = pd.DataFrame({"age": age, "income": income, "rooms": rooms, "y": y})
    assert df.income.nunique() > 4000 and df.rooms.nunique() > MAX_TREE_BINS
    hist = daskpd.stratpd(df, "y", "age", tree_method="hist")
    exact = daskpd.stratpd(df, "y", "age", tree_method="exact")
    assert hist.n_leaves == exact.n_leaves
    np.testing.assert_array_equal(hist.slope_count, exact.slope_count)
    np.testing.assert_allclose(hist.pd, exact.pd, rtol=1e-9, atol=1e-6, equal_nan=True)
