"""Hand-checkable finalize cases, and the dask map/reduce against the plain reference."""
from __future__ import annotations

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.tree import DecisionTreeRegressor

from daskpd.aggregate import (FeatureAgg, StratPlan, StratSpec, combine_group_sums, group_sums, map_reduce,
                              strat_combine, strat_map)
from daskpd.io import FeatureEncoder
from daskpd.stratify import bin_edges
from daskpd.stratpd import average_slopes, finalize_numeric
from reference import reference_stratpd


def agg_of(leaf, x, y):
    leaf, x, y = (np.asarray(a) for a in (leaf, x, y))
    x = x.astype(float)
    y = y.astype(float)
    return FeatureAgg(group_sums(leaf, x, np.column_stack([np.ones_like(y), y, x])), n_rows=len(y))


def fin(leaf, x, y, m=1):
    return finalize_numeric(agg_of(leaf, x, y), feature="x", target="y", binned=False, min_slopes_per_x=m)


def test_one_region():
    r = fin([0] * 5, [1, 1, 2, 2, 3], [1, 3, 4, 4, 10])
    np.testing.assert_array_equal(r.x, [1, 2, 3])
    np.testing.assert_allclose(r.pd, [0, 2, 8])
    np.testing.assert_array_equal(r.slope_count, [1, 1, 0])
    np.testing.assert_array_equal(r.count, [2, 2, 1])
    assert r.n_ignored == 0 and r.n_leaves == 1 and r.n_used == 5


def test_two_disjoint_regions_and_negative_slope():
    # leaf 0 rises by 1 over [1, 2]; leaf 1 falls by 2 over [5, 6]; nothing covers [2, 5)
    r = fin([0, 0, 1, 1], [1, 2, 5, 6], [0, 1, 10, 8])
    np.testing.assert_array_equal(r.slope_count, [1, 0, 1, 0])
    # [2, 5) is inside the supported range: slope interpolated between 1 (at x=1) and -2 (at x=5)
    s_gap = 1 + (-2 - 1) * (2 - 1) / (5 - 1)
    np.testing.assert_allclose(r.pd, [0, 1, 1 + 3 * s_gap, 1 + 3 * s_gap - 2])
    assert np.isnan(r.slope[1])


def test_single_x_leaf_between_is_ignored_and_counted():
    leaf = [0, 0, 1, 1, 1, 1, 2, 2]
    x = [1, 2, 3, 3, 3, 3, 4, 5]
    y = [1, 2, 7, 8, 9, 10, 5, 7]
    r = fin(leaf, x, y)
    assert r.n_ignored == 4 and r.n_used == 4 and r.n_leaves == 3
    np.testing.assert_array_equal(r.x, [1, 2, 3, 4, 5])
    np.testing.assert_array_equal(r.slope_count, [1, 0, 0, 1, 0])
    np.testing.assert_array_equal(r.count, [1, 1, 4, 1, 1])
    # slopes 1 over [1,2) and 2 over [4,5); [2,4) interpolated linearly in x
    s2 = 1 + (2 - 1) * (2 - 1) / (4 - 1)
    s3 = 1 + (2 - 1) * (3 - 1) / (4 - 1)
    np.testing.assert_allclose(r.pd, np.cumsum([0, 1, s2, s3, 2]))


def test_gaps_in_x_use_dx():
    r = fin([0, 0, 0], [0, 1, 10], [0, 2, 20])
    np.testing.assert_allclose(r.pd, [0, 2, 20])


def test_min_slopes_per_x_drops_thin_positions():
    # three leaves cover [0,1); only one covers [1,2)
    leaf = [0, 0, 1, 1, 2, 2, 2]
    x = [0, 1, 0, 1, 0, 1, 2]
    y = [0, 1, 0, 3, 0, 2, 12]
    r = fin(leaf, x, y, m=2)
    np.testing.assert_array_equal(r.slope_count, [3, 1, 0])
    np.testing.assert_allclose(r.pd[:2], [0, 2])  # mean slope (1 + 3 + 2) / 3
    assert np.isnan(r.pd[2]) and not r.supported[2]


def test_empty_curve_warns():
    with pytest.warns(UserWarning, match="min_slopes_per_x"):
        r = fin([0, 0, 1, 1], [1, 2, 1, 2], [0, 1, 0, 1], m=5)
    assert not r.supported.any()


def test_sweep_residue_does_not_leak():
    # a huge slope followed by an uncovered position, then small slopes
    start = np.array([0, 2, 2])
    end = np.array([1, 3, 3])
    slope = np.array([1e17, 0.1, 0.3])
    mean, c = average_slopes(start, end, slope, 4)
    np.testing.assert_array_equal(c, [1, 0, 2, 0])
    assert mean[2] == pytest.approx(0.2, rel=1e-15)


def test_group_sums_is_associative_over_splits():
    rng = np.random.default_rng(1)
    leaf = rng.integers(0, 5, 200)
    key = rng.integers(0, 7, 200).astype(float)
    vals = rng.normal(size=(200, 3))
    whole = group_sums(leaf, key, vals)
    parts = [group_sums(leaf[a:b], key[a:b], vals[a:b]) for a, b in [(0, 13), (13, 90), (90, 200)]]
    merged = combine_group_sums(parts)
    np.testing.assert_array_equal(whole.leaf, merged.leaf)
    np.testing.assert_array_equal(whole.key, merged.key)
    np.testing.assert_allclose(whole.values, merged.values, rtol=1e-13, atol=1e-13)


# --------------------------------------------------------------------------------
# dask (random partitionings) == plain reference, given the same tree


def _random_partitions(df, cuts):
    bounds = [0, *sorted(set(c % len(df) for c in cuts if 0 < c % len(df))), len(df)]
    ranges = [(a, b) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
    return dd.from_map(lambda ab: df.iloc[ab[0]:ab[1]], ranges, meta=df.iloc[:0], enforce_metadata=False)


@st.composite
def datasets(draw):
    n = draw(st.integers(20, 250))
    seed = draw(st.integers(0, 2**31 - 1))
    discrete = draw(st.booleans())
    rng = np.random.default_rng(seed)
    if discrete:
        x = rng.integers(0, draw(st.integers(2, 30)), n).astype(float)
    else:
        x = rng.normal(0, 1, n)
    a = rng.normal(0, 1, n) + 0.5 * x
    b = rng.integers(0, 4, n).astype(float)
    y = np.sin(x) + a + b * x + rng.normal(0, 0.3, n)
    df = pd.DataFrame({"x": x, "a": a, "b": b, "y": y})
    leaf_size = draw(st.integers(1, 12))
    m = draw(st.integers(1, 4))
    cuts = draw(st.lists(st.integers(1, 10_000), max_size=6))
    max_bins = draw(st.sampled_from([None, 6, 25]))
    return df, leaf_size, m, cuts, max_bins


@pytest.mark.filterwarnings("ignore:StratPD for feature")
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(datasets())
def test_dask_equals_reference(case):
    df, leaf_size, m, cuts, max_bins = case
    tree = DecisionTreeRegressor(min_samples_leaf=leaf_size, random_state=0).fit(df[["a", "b"]].to_numpy("float32"), df.y)
    edges = bin_edges(df.x.to_numpy(), max_bins) if max_bins else None
    spec = StratSpec("x", "numeric", ["a", "b"], tree, edges)
    plan = StratPlan("y", [spec], FeatureEncoder.fit(df, ["a", "b", "x"]))
    ddf = _random_partitions(df, cuts)
    agg = map_reduce(ddf, strat_map, strat_combine, plan, split_every=2).compute(scheduler="threads")["x"]
    res = finalize_numeric(agg, feature="x", target="y", binned=edges is not None, min_slopes_per_x=m, params={})

    leaf = tree.apply(df[["a", "b"]].to_numpy("float32"))
    ref = reference_stratpd(df.x, df.y, leaf, m, bins=None if edges is None else spec.keys(df.x.to_numpy()))
    np.testing.assert_allclose(res.x, ref["x"], rtol=1e-12)
    np.testing.assert_array_equal(res.slope_count, ref["slope_count"])
    np.testing.assert_array_equal(res.count, ref["count"])
    np.testing.assert_allclose(res.pd, ref["pd"], rtol=1e-9, atol=1e-9 * (1 + np.nanmax(np.abs(ref["pd"]), initial=0)))
    assert res.n_ignored == ref["ignored"]
    assert res.n_leaves == ref["n_leaves"]


def test_in_memory_kernels_equal_dask_to_the_bit():
    rng = np.random.default_rng(5)
    n = 3000
    df = pd.DataFrame({"x": rng.integers(0, 50, n).astype(float), "a": rng.normal(size=n)})
    df["y"] = df.x ** 1.5 + df.a + rng.normal(size=n)
    tree = DecisionTreeRegressor(min_samples_leaf=20, random_state=0).fit(df[["a"]].to_numpy("float32"), df.y)
    plan = StratPlan("y", [StratSpec("x", "numeric", ["a"], tree)], FeatureEncoder.fit(df, ["a", "x"]))
    chunks = [df.iloc[i:i + 700] for i in range(0, n, 700)]
    local = strat_combine([strat_combine([strat_map(c, plan) for c in chunks[:2]]),
                           strat_combine([strat_map(c, plan) for c in chunks[2:4]]),
                           strat_map(chunks[4], plan)])["x"]
    ddf = dd.from_map(lambda i: df.iloc[i:i + 700], list(range(0, n, 700)), meta=df.iloc[:0])
    remote = map_reduce(ddf, strat_map, strat_combine, plan, split_every=2).compute(scheduler="threads")["x"]
    np.testing.assert_array_equal(local.sums.values, remote.sums.values)
    np.testing.assert_array_equal(local.sums.key, remote.sums.key)


def test_scan_sums_x_only_for_binned_features():
    """Exact-valued x is its own key and a category has no x: only a binned feature's
    table carries sum_x (in every trial's set too); the curves are unchanged by it."""
    rng = np.random.default_rng(11)
    n = 2000
    df = pd.DataFrame({"x": rng.integers(0, 40, n).astype(float), "z": rng.normal(size=n),
                       "c": rng.choice(list("abcd"), n), "a": rng.normal(size=n)})
    df["y"] = df.x + 2 * df.z + (df.c == "b") + df.a + rng.normal(size=n)
    enc = FeatureEncoder.fit(df, ["x", "z", "c", "a"])
    specs = [StratSpec("x", "numeric", ["a"], None), StratSpec("z", "numeric", ["a"], None, bin_edges(df.z.to_numpy(), 20)),
             StratSpec("c", "categorical", ["a"], None)]
    for n_trials in (0, 3):
        aggs = strat_map(df, StratPlan("y", specs, enc, n_trials=n_trials))
        assert [aggs[f].stats_per_set for f in "xzc"] == [2, 3, 2]
        for f in "xzc":
            assert aggs[f].n_sets == 1 + n_trials
            assert aggs[f].sums.values.shape[1] == aggs[f].stats_per_set * (1 + n_trials)
    # the binned feature's sum_x is its rows' sum of x, per bin
    z = aggs["z"]
    np.testing.assert_allclose(np.bincount(z.sums.key.astype(int), weights=z.column(2)),
                               df.groupby(specs[1].keys(df.z.to_numpy())).z.sum().to_numpy())
    with pytest.raises(ValueError, match="no column 2"):
        aggs["x"].column(2)
    # the 2-column table gives the same curve as a hand-made 3-column one
    two = finalize_numeric(aggs["x"], feature="x", target="y", binned=False, min_slopes_per_x=1)
    three = fin(np.zeros(n, int), df.x, df.y)
    np.testing.assert_array_equal(two.pd, three.pd)


def test_merging_sorted_partials_equals_grouping_from_scratch():
    rng = np.random.default_rng(3)
    leaf = rng.integers(0, 50, 5000)
    key = rng.choice(np.array(["u", "v", "w", None], dtype=object), 5000)
    vals = rng.normal(size=(5000, 4))
    cuts = [0, 700, 701, 3000, 5000]
    parts = [group_sums(leaf[a:b], key[a:b], vals[a:b]) for a, b in zip(cuts[:-1], cuts[1:])]
    merged = combine_group_sums(parts)
    whole = group_sums(np.concatenate([p.leaf for p in parts]), np.concatenate([p.key for p in parts]),
                       np.concatenate([p.values for p in parts]))  # same rows, np.unique's path
    np.testing.assert_array_equal(merged.leaf, whole.leaf)
    pd.testing.assert_index_equal(pd.Index(merged.key), pd.Index(whole.key))  # a missing key sorts last in both
    np.testing.assert_array_equal(merged.values, whole.values)
