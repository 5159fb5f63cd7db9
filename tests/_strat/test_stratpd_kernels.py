"""Hand-checkable finalize cases, and the dask scan against the plain reference."""
from __future__ import annotations

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.tree import DecisionTreeRegressor

from daskpd._data.encode import FeatureEncoder, KeyCoder
from daskpd._engine.plan import PartitionContext, run_local, run_pass
from daskpd._engine.sums import group_sums
from daskpd._strat.numeric import bucket_sums
from daskpd._strat.numeric_curve import curve_from_sums, sweep
from daskpd._strat.scan import FeatureScan, StratScan, leaf_numbering
from daskpd._strat.options import FinishOptions
from daskpd._strat.trees import bin_edges
from reference import reference_stratpd


def fin(leaf, x, y, m=1, few_slopes="interpolate"):
    """The numeric finish on given leaves (one bucket), with the scan's own kernels."""
    leaf, x, y = (np.asarray(a) for a in (leaf, x, y))
    x, y = x.astype(float), y.astype(float)
    coder = KeyCoder("numeric", values=np.unique(x))
    fs = FeatureScan("x", "numeric", [], None, coder, None, int(leaf.max()) + 1)
    job = StratScan(target="y", features=[fs], encoder=FeatureEncoder([], {}),
                    finish_options=FinishOptions(min_slopes_per_x=m, few_slopes=few_slopes))
    table = group_sums(leaf, coder.encode(pd.Series(x)), np.column_stack([np.ones_like(y), y]))
    res = curve_from_sums(fs, [bucket_sums(table, fs, 1, counters=(len(y), 0, 0))], job)
    from daskpd._strat.numeric_curve import empty_curve_message

    msg = empty_curve_message(res, m)
    if msg:
        import warnings

        warnings.warn(msg, UserWarning)
    return res


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
    # no leaf slope over [2, 5): a flat step (stratx 0.5); x=2 closes [1, 2), x=5 opens [5, 6)
    np.testing.assert_allclose(r.pd, [0, 1, 1, -1])
    np.testing.assert_array_equal(r.supported, [True, True, True, True])
    assert np.isnan(r.slope[1])
    assert r.params["support"]["empty_intervals"] == 1


def test_issue_example_no_invented_slope():
    """Issue 13: x in {0,1,2} in one stratum and {10,11,12} in the other, y = x^2 + 100 z:
    no slope over [2, 10) (stratx 0.5: pd 0, 1, 4, 4, 25, 48)."""
    x = [0, 1, 2, 10, 11, 12]
    r = fin([0, 0, 0, 1, 1, 1], x, [v * v + 100 * (v >= 10) for v in x])
    np.testing.assert_array_equal(r.slope_count, [1, 1, 0, 1, 1, 0])
    np.testing.assert_allclose(r.pd, [0, 1, 4, 4, 25, 48])
    assert r.supported.all()


def test_single_x_leaf_between_is_ignored_and_counted():
    leaf = [0, 0, 1, 1, 1, 1, 2, 2]
    x = [1, 2, 3, 3, 3, 3, 4, 5]
    y = [1, 2, 7, 8, 9, 10, 5, 7]
    r = fin(leaf, x, y)
    assert r.n_ignored == 4 and r.n_used == 4 and r.n_leaves == 3
    np.testing.assert_array_equal(r.x, [1, 2, 3, 4, 5])
    np.testing.assert_array_equal(r.slope_count, [1, 0, 0, 1, 0])
    np.testing.assert_array_equal(r.count, [1, 1, 4, 1, 1])
    # slopes 1 over [1,2) and 2 over [4,5); nothing covers [2, 4): flat, and x=3 -- inside
    # the run of positions without a slope -- is unsupported (stratx drops it)
    np.testing.assert_array_equal(r.supported, [True, True, False, True, True])
    np.testing.assert_allclose(r.pd, [0, 1, np.nan, 1, 3])
    sc = r.params["support"]
    assert sc["empty_intervals"] == 2 and sc["unsupported_inside"] == 1
    assert "1 unsupported inside" in r.summary()


def test_few_slopes_interpolated_or_flat():
    """Strata covering x 0..4 twice and {0,1}, {3,4} once; y = x^2: counts [3, 2, 2, 3, 0].
    With min_slopes_per_x=3 the few-slope intervals [1, 3) take the slope interpolated
    in x between 1 (at x=0) and 7 (at x=3) -- 3 and 5, the truth here (even spacing) -- or
    stay flat as stratx 0.5 (pd 0, 1, 1, 8)."""
    leaf = [0] * 5 + [1] * 5 + [2, 2, 3, 3]
    x = [0, 1, 2, 3, 4] * 2 + [0, 1, 3, 4]
    y = [v * v for v in x]
    r = fin(leaf, x, y, m=3)
    np.testing.assert_array_equal(r.slope_count, [3, 2, 2, 3, 0])
    np.testing.assert_allclose(r.pd, [0, 1, 4, 9, 16])
    assert r.supported.all()
    assert r.params["few_slopes"] == "interpolate"
    assert r.params["support"]["few_slopes_interpolated"] == 2
    f = fin(leaf, x, y, m=3, few_slopes="flat")
    np.testing.assert_array_equal(f.supported, [True, True, False, True, True])
    np.testing.assert_allclose(f.pd, [0, 1, np.nan, 1, 8])
    assert f.params["support"]["few_slope_intervals"] == 2 and f.params["support"]["few_slopes_interpolated"] == 0


def test_interpolation_uses_x_not_the_index():
    """Uneven x (0, 1, 3, 4): valid slopes 1 at x=0 and 7 at x=3, a few-slope interval
    at x=1 takes 1 + (7 - 1) * (1 - 0) / (3 - 0) = 3 (the truth for y = x^2 is 4: the
    interpolation is exact for quadratics only on even spacing)."""
    leaf = [0] * 4 + [1] * 4 + [2, 2, 3, 3]
    x = [0, 1, 3, 4] * 2 + [0, 1, 3, 4]
    r = fin(leaf, x, [v * v for v in x], m=3)
    np.testing.assert_array_equal(r.slope_count, [3, 2, 3, 0])
    np.testing.assert_allclose(r.pd, [0, 1, 1 + 3 * 2, 1 + 3 * 2 + 7])


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
    # a huge slope over [0, 1), nothing over [1, 2), then slopes 0.1 and 0.3 over [2, 3)
    add = np.array([1e17, 0.0, 0.4, 0.0])
    sub = np.array([0.0, 1e17, 0.0, 0.4])
    mean, c = sweep(add, sub, np.array([1, 0, 2, 0]), np.array([0, 1, 0, 2]))
    np.testing.assert_array_equal(c, [1, 0, 2, 0])
    assert mean[2] == pytest.approx(0.2, rel=1e-15)


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
    few_slopes = draw(st.sampled_from(["interpolate", "flat"]))
    return df, leaf_size, m, cuts, max_bins, few_slopes


def _scan(df, tree, max_bins, m, n_buckets=1, n_trials=0, few_slopes="interpolate"):
    edges = bin_edges(df.x.to_numpy(), max_bins) if max_bins else None
    coder = KeyCoder("numeric", edges=edges) if edges is not None else KeyCoder("numeric", values=np.unique(df.x))
    index, n_leaves = leaf_numbering(tree, 0, 0)
    fs = FeatureScan("x", "numeric", ["a", "b"], tree, coder, index, n_leaves)
    return StratScan(target="y", features=[fs], encoder=FeatureEncoder.fit(df, ["a", "b", "x"]), n_trials=n_trials,
                     n_buckets=n_buckets, expected_rows=len(df),
                     finish_options=FinishOptions(min_slopes_per_x=m, few_slopes=few_slopes))


@pytest.mark.filterwarnings("ignore:StratPD for feature")
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(datasets(), st.sampled_from([1, 2, 4, 16]))
def test_dask_equals_reference(case, n_buckets):
    df, leaf_size, m, cuts, max_bins, few_slopes = case
    tree = DecisionTreeRegressor(min_samples_leaf=leaf_size, random_state=0).fit(df[["a", "b"]].to_numpy("float32"), df.y)
    job = _scan(df, tree, max_bins, m, n_buckets, few_slopes=few_slopes)
    ddf = _random_partitions(df, cuts)
    (out,) = run_pass(ddf, [job], fan_in=2)
    res = out["x"]

    leaf = tree.apply(df[["a", "b"]].to_numpy("float32"))
    coder = job.features[0].coder
    bins = None if not coder.binned else coder.encode(df.x).astype(float)
    ref = reference_stratpd(df.x, df.y, leaf, m, bins=bins, few_slopes=few_slopes, edges=coder.edges)
    np.testing.assert_allclose(res.x, ref["x"], rtol=1e-12)
    np.testing.assert_array_equal(res.slope_count, ref["slope_count"])
    np.testing.assert_array_equal(res.count, ref["count"])
    np.testing.assert_array_equal(res.supported, ref["supported"])
    np.testing.assert_allclose(res.pd, ref["pd"], rtol=1e-9, atol=1e-9 * (1 + np.nanmax(np.abs(ref["pd"]), initial=0)))
    assert res.n_ignored == ref["ignored"]
    assert res.n_leaves == ref["n_leaves"]


def test_in_memory_kernels_equal_dask_and_every_bucket_count_to_the_bit():
    rng = np.random.default_rng(5)
    n = 3000
    df = pd.DataFrame({"x": rng.integers(0, 50, n).astype(float), "a": rng.normal(size=n), "b": rng.normal(size=n)})
    df["y"] = df.x ** 1.5 + df.a + rng.normal(size=n)
    tree = DecisionTreeRegressor(min_samples_leaf=5, random_state=0).fit(df[["a", "b"]].to_numpy("float32"), df.y)
    chunks = [df.iloc[i:i + 700] for i in range(0, n, 700)]
    ddf = dd.from_map(lambda i: df.iloc[i:i + 700], list(range(0, n, 700)), meta=df.iloc[:0])
    curves = []
    for nb in (1, 2, 8, 64):
        for max_bins in (None, 20):
            job = _scan(df, tree, max_bins, 1, n_buckets=nb, n_trials=2)
            (local,) = run_local(chunks, [job], fan_in=2)
            (remote,) = run_pass(ddf, [job], fan_in=2)
            for a, b in ((local["x"], remote["x"]),):
                np.testing.assert_array_equal(a.pd, b.pd)
                np.testing.assert_array_equal(a.trials_pd, b.trials_pd)
            curves.append((max_bins, local["x"]))
    for max_bins in (None, 20):
        same = [c for mb, c in curves if mb == max_bins]
        for c in same[1:]:  # the bucket count does not change a bit
            np.testing.assert_array_equal(c.pd, same[0].pd)
            np.testing.assert_array_equal(c.x, same[0].x)
            np.testing.assert_array_equal(c.trials_pd, same[0].trials_pd)
            np.testing.assert_array_equal(c.slope, same[0].slope)


def test_one_task_level_adds_the_same_bits_as_a_tree_of_tasks():
    """fan_in=8 (a task per arithmetic level) and fan_in=64 (one task adding every level
    itself, as the scan does when its map outputs are small): 20 partitions, the same
    bits, numeric and binned, with trials, locally and on dask."""
    rng = np.random.default_rng(8)
    n = 4000
    # few leaves and positions: every (leaf, x) cell gets rows from many partitions, so
    # the order in which partials are added shows in the bits
    df = pd.DataFrame({"x": rng.integers(0, 40, n) / 3.0, "a": rng.normal(size=n), "b": rng.normal(size=n)})
    df["y"] = np.sqrt(df.x) + df.a * df.b + rng.normal(size=n) / 7.0
    tree = DecisionTreeRegressor(min_samples_leaf=300, random_state=0).fit(df[["a", "b"]].to_numpy("float32"), df.y)
    chunks = [df.iloc[i:i + 200] for i in range(0, n, 200)]
    ddf = dd.from_map(lambda i: df.iloc[i:i + 200], list(range(0, n, 200)), meta=df.iloc[:0])
    assert len(chunks) == 20
    differs = False
    for max_bins in (None, 20):
        job = _scan(df, tree, max_bins, 1, n_buckets=4, n_trials=2)
        (tree8,) = run_local(chunks, [job], fan_in=8)
        (one_local,) = run_local(chunks, [job], fan_in=64, arity=8)
        (one_dask,) = run_pass(ddf, [job], fan_in=64, arity=8)
        (other,) = run_local(chunks, [job], fan_in=2)  # another arithmetic: may differ in the last bits
        for c in (one_local["x"], one_dask["x"]):
            np.testing.assert_array_equal(c.pd, tree8["x"].pd)
            np.testing.assert_array_equal(c.x, tree8["x"].x)
            np.testing.assert_array_equal(c.trials_pd, tree8["x"].trials_pd)
        np.testing.assert_allclose(other["x"].pd, tree8["x"].pd, rtol=1e-9, atol=1e-9)
        differs |= not np.array_equal(other["x"].pd, tree8["x"].pd)
    assert differs, "the data should make the order of the sums show in the bits"
    with pytest.raises(ValueError, match="power of arity"):
        run_local(chunks, [job], fan_in=20, arity=8)


def test_raw_rows_kept_up_the_tree_give_the_same_bits_for_every_bucket_count_and_task_layout():
    """Merges covering fewer partitions than ``group_from`` keep a feature's rows raw;
    the choice depends on the partitions covered only, so 1, 4 or 64 buckets, a task per
    arithmetic level or one task for all, in memory or on dask: the same bits."""
    from dataclasses import replace

    from daskpd._engine.plan import PartitionContext
    from daskpd._engine.rows import Rows
    from daskpd._engine.sums import Table

    rng = np.random.default_rng(21)
    n = 4000
    df = pd.DataFrame({"x": rng.integers(0, 60, n).astype(float), "a": rng.normal(size=n), "b": rng.normal(size=n)})
    df["y"] = np.log1p(df.x) + df.a - df.b + rng.normal(size=n)
    tree = DecisionTreeRegressor(min_samples_leaf=20, random_state=0).fit(df[["a", "b"]].to_numpy("float32"), df.y)
    chunks = [df.iloc[i:i + 200] for i in range(0, n, 200)]
    ddf = dd.from_map(lambda i: df.iloc[i:i + 200], list(range(0, n, 200)), meta=df.iloc[:0])
    first = None
    for nb in (1, 4, 64):
        job = replace(_scan(df, tree, None, 1, n_buckets=nb, n_trials=2), expected_rows=200, group_from={"x": 5})
        maps = [job.map(PartitionContext(c)) for c in chunks[:5]]
        assert isinstance(maps[0].tables["x"], Rows)  # the maps ship rows
        assert isinstance(job.combine(maps[:4]).tables["x"], Rows)  # 4 partitions: still raw
        assert isinstance(job.combine(maps).tables["x"], Table)  # 5: grouped
        runs = [run_local(chunks, [job], fan_in=4, arity=4), run_local(chunks, [job], fan_in=64, arity=4),
                run_pass(ddf, [job], fan_in=64, arity=4)]
        for (res,) in runs:
            c = res["x"]
            first = first or c
            np.testing.assert_array_equal(c.pd, first.pd)
            np.testing.assert_array_equal(c.x, first.x)
            np.testing.assert_array_equal(c.trials_pd, first.trials_pd)
            np.testing.assert_array_equal(c.count, first.count)
    grouped = replace(job, group_from={})  # grouping at every level: the same curve up to rounding
    (res,) = run_local(chunks, [grouped], fan_in=4, arity=4)
    np.testing.assert_allclose(res["x"].pd, first.pd, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("with_x", [False, True])
def test_rows_cut_while_concatenated_equal_concatenated_then_cut(with_x):
    """``Rows.concat_split`` (what a combine that keeps rows raw does before cutting its
    output) gives exactly the pieces of ``Rows.concat(...).split(...)``: the same rows,
    in the same order, with the same dtypes."""
    from daskpd._engine.rows import Rows

    rng = np.random.default_rng(5)
    lo, hi = 40, 140  # the parts hold the leaves of one bucket, 40 <= leaf < 140
    bounds = np.array([40, 47, 90, 90, 140])  # an empty run in the middle
    parts = []
    for n in [0, 500, 37, 1200]:
        parts.append(Rows(rng.integers(lo, hi, n).astype(np.uint16), rng.integers(0, 900, n).astype(np.uint16),
                          rng.normal(size=n), rng.normal(size=n) if with_x else None))
    got = Rows.concat_split(parts, bounds)
    want = Rows.concat(parts).split(bounds)
    assert len(got) == len(want) == 4 and len(got[2]) == 0
    for g, e in zip(got, want):
        for field in ("leaf", "key", "y", "x"):
            a, b = getattr(g, field), getattr(e, field)
            assert (a is None) == (b is None), field
            if a is not None:
                assert a.dtype == b.dtype, field
                np.testing.assert_array_equal(a, b)
    assert sum(len(g) for g in got) == 1737


@pytest.mark.parametrize("few_slopes", ["interpolate", "flat"])
def test_gaps_and_few_slopes_are_bit_identical_across_buckets_and_schedulers(few_slopes):
    """Flat steps over uncovered intervals and interpolated / flat few-slope intervals:
    the same bits with 1, 3 or 64 buckets, locally or on dask, trials included."""
    rng = np.random.default_rng(13)
    # dense 0..29, sparse 30..44, dense 45..59, nothing in 60..69, then 70..79 only in their own
    # strata (b high): with min_slopes_per_x=20, [59, 70) has no slope and [70, 71) a few
    x = np.r_[rng.integers(0, 30, 1200), rng.integers(30, 45, 25), rng.integers(45, 60, 1000),
              rng.integers(70, 80, 300)].astype(float)
    n = len(x)
    a = rng.normal(size=n) + 0.05 * x
    b = (x >= 70).astype(float) * 10 + rng.normal(size=n)
    df = pd.DataFrame({"x": x, "a": a, "b": b, "y": np.sqrt(x) * 3 + a + b + rng.normal(size=n)})
    tree = DecisionTreeRegressor(min_samples_leaf=8, random_state=0).fit(df[["a", "b"]].to_numpy("float32"), df.y)
    df = df.sample(frac=1.0, random_state=1).reset_index(drop=True)
    chunks = [df.iloc[i:i + 600] for i in range(0, n, 600)]
    ddf = dd.from_map(lambda i: df.iloc[i:i + 600], list(range(0, n, 600)), meta=df.iloc[:0])
    first = None
    for nb in (1, 3, 64):
        job = _scan(df, tree, None, 20, n_buckets=nb, n_trials=2, few_slopes=few_slopes)
        (local,) = run_local(chunks, [job], fan_in=2)
        (remote,) = run_pass(ddf, [job], fan_in=2)
        for c in (local["x"], remote["x"]):
            first = first or c
            np.testing.assert_array_equal(c.pd, first.pd)
            np.testing.assert_array_equal(c.supported, first.supported)
            np.testing.assert_array_equal(c.trials_pd, first.trials_pd)
            assert c.params["support"] == first.params["support"]
    sc = first.params["support"]
    # the data has what the test is about
    assert sc["empty_intervals"] > 0 and sc["few_slope_intervals"] > 0
    assert sc["few_slopes_interpolated"] == (sc["few_slope_intervals"] if few_slopes == "interpolate" else 0)
    leaf = tree.apply(df[["a", "b"]].to_numpy("float32"))
    ref = reference_stratpd(df.x, df.y, leaf, 20, few_slopes=few_slopes)
    np.testing.assert_array_equal(first.supported, ref["supported"])
    np.testing.assert_allclose(first.pd, ref["pd"], rtol=1e-12, atol=1e-9)


def test_scan_sums_x_only_for_binned_features():
    """Exact-valued x is its own key and a category has no x: only a binned feature's
    table carries sum_x; trials add nothing to the tables (they resample leaves, in the
    finish); the curves are unchanged by it."""
    rng = np.random.default_rng(11)
    n = 2000
    df = pd.DataFrame({"x": rng.integers(0, 40, n).astype(float), "z": rng.normal(size=n),
                       "c": rng.choice(list("abcd"), n), "a": rng.normal(size=n)})
    df["y"] = df.x + 2 * df.z + (df.c == "b") + df.a + rng.normal(size=n)
    enc = FeatureEncoder.fit(df, ["x", "z", "c", "a"])
    zc = KeyCoder("numeric", edges=bin_edges(df.z.to_numpy(), 20))
    feats = [FeatureScan("x", "numeric", ["a"], None, KeyCoder("numeric", values=np.unique(df.x)), None, 1),
             FeatureScan("z", "numeric", ["a"], None, zc, None, 1),
             FeatureScan("c", "categorical", ["a"], None, KeyCoder("categorical", values=np.array(list("abcd"),
                                                                                                   dtype=object)),
                         None, 1)]
    for n_trials in (0, 3):
        job = StratScan(target="y", features=feats, encoder=enc, n_trials=n_trials, expected_rows=n)
        piece = job.combine([job.map(PartitionContext(df))])
        assert [f.stats_per_set for f in feats] == [2, 3, 2]
        for f in feats:
            assert piece.tables[f.feature].values.shape[1] == f.stats_per_set
    # the binned feature's sum_x is its rows' sum of x, per bin
    z = piece.tables["z"]
    np.testing.assert_allclose(np.bincount(z.key, weights=z.values[:, 2]),
                               df.groupby(zc.encode(df.z)).z.sum().to_numpy())
    # the 2-column table gives the same curve as the hand-made one
    (out,) = run_local([df], [StratScan(target="y", features=feats[:1], encoder=enc, expected_rows=n,
                                        finish_options=FinishOptions(min_slopes_per_x=1))])
    np.testing.assert_array_equal(out["x"].pd, fin(np.zeros(n, int), df.x, df.y).pd)


def test_few_slopes_is_validated_and_recorded():
    import daskpd
    from daskpd import DataError

    rng = np.random.default_rng(2)
    df = pd.DataFrame({"x": rng.integers(0, 20, 400).astype(float), "a": rng.normal(size=400)})
    df["y"] = df.x + df.a
    for bad in ("linear", None, 1):
        with pytest.raises(DataError, match="parameter few_slopes must be one of 'interpolate', 'flat'"):
            daskpd.stratpd(df, target="y", feature="x", few_slopes=bad)
        with pytest.raises(DataError, match="parameter few_slopes"):
            daskpd.importances(df, target="y", few_slopes=bad)
    assert daskpd.stratpd(df, target="y", feature="x", few_slopes="flat").params["few_slopes"] == "flat"
    from daskpd._importance import strat_curves_and_importances

    imp = strat_curves_and_importances(df, target="y", few_slopes="flat")
    assert imp.params["few_slopes"] == "flat" and imp.curves["x"].params["few_slopes"] == "flat"


def _assert_same_bits(a, b, where="result"):
    """Two finished buckets equal to the bit, recursively (dicts, lists, dataclasses, arrays)."""
    import dataclasses

    assert type(a) is type(b), where
    if dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            _assert_same_bits(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for k in a:
            _assert_same_bits(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (u, v) in enumerate(zip(a, b)):
            _assert_same_bits(u, v, f"{where}[{i}]")
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape, where
        assert a.tobytes() == b.tobytes(), where
    else:
        assert a == b, where


@pytest.mark.parametrize("max_bins", [None, 20])
def test_last_merge_hands_raw_rows_to_the_finish_without_concatenating_them(max_bins):
    """``StratScan.combine_finish`` (the last merge of a bucket) gives the finish the
    parts' raw rows as a list instead of their concatenation: exactly what
    ``finish_bucket(combine(...))`` gives, to the bit, with trials."""
    from dataclasses import replace

    from daskpd._engine.rows import Rows

    rng = np.random.default_rng(31)
    n = 3000
    df = pd.DataFrame({"x": rng.integers(0, 45, n) / 2.0, "a": rng.normal(size=n), "b": rng.normal(size=n)})
    df["y"] = np.sin(df.x) + df.a * df.b + rng.normal(size=n) / 5.0
    tree = DecisionTreeRegressor(min_samples_leaf=40, random_state=0).fit(df[["a", "b"]].to_numpy("float32"), df.y)
    chunks = [df.iloc[i:i + 300] for i in range(0, n, 300)]
    job = replace(_scan(df, tree, max_bins, 1, n_buckets=1, n_trials=2), expected_rows=300, group_from={"x": 50})
    maps = [job.map(PartitionContext(c)) for c in chunks]
    merged = job.combine(maps, 0)
    assert isinstance(merged.tables["x"], Rows)  # 10 partitions < group_from: the rows stay raw to the finish
    _assert_same_bits(job.combine_finish(maps, 0), job.finish_bucket(merged, 0))
    grouped = replace(job, group_from={"x": 5})  # grouped by the last merge itself: the same path as before
    _assert_same_bits(grouped.combine_finish(maps, 0), grouped.finish_bucket(grouped.combine(maps, 0), 0))


def test_tree_fold_of_the_trials_does_not_depend_on_how_the_virtual_buckets_are_cut():
    """The trials' per-(virtual bucket, key) sums folded by the fixed tree: one bucket
    holding every virtual bucket, aligned powers of two, uneven runs: the same bits; a
    virtual bucket shared by two buckets is added up first (bucket order), then folded."""
    from daskpd._engine.tree_fold import TreeNodes, _merge_sorted, fold_tree, tree_nodes

    rng = np.random.default_rng(3)
    V, K, m = 128, 40, 3
    rows = [(v, k) for v in range(V) if v % 9 != 4 for k in np.sort(rng.choice(K, rng.integers(1, 15), replace=False))]
    vb, key = np.array([r[0] for r in rows]), np.array([r[1] for r in rows])
    vals = rng.normal(size=(len(rows), m)) * 10.0 ** rng.integers(-8, 8, size=(len(rows), 1))

    def fold(bounds):
        parts = [tree_nodes(vb[(vb >= a) & (vb < z)], key[(vb >= a) & (vb < z)], vals[(vb >= a) & (vb < z)], a, z, V)
                 for a, z in zip(bounds[:-1], bounds[1:])]
        return fold_tree(parts, K, m, V), parts

    one, parts = fold([0, V])
    assert len(parts[0].level) == 1 and parts[0].level[0] == 7  # the root, completed by the one bucket
    for bounds in ([0, 64, V], list(range(0, V + 1, 16)), list(range(V + 1)), [0, 37, 100, V], [0, 1, 2, 127, V]):
        got, parts = fold(bounds)
        np.testing.assert_array_equal(got, one)
    seq = np.zeros((K, m))
    np.add.at(seq, key, vals)
    np.testing.assert_allclose(one, seq, rtol=1e-12, atol=1e-12 * np.abs(vals).max())
    assert np.array_equal(fold_tree([TreeNodes.root(one, V)], K, m, V), one)
    # virtual bucket 50 split between two buckets: its two parts are added first
    s = np.flatnonzero(vb == 50)
    cut = s[len(s) // 2]
    lo_part = tree_nodes(vb[:cut], key[:cut], vals[:cut], 0, 51, V, shared_hi=True)
    hi_part = tree_nodes(vb[cut:], key[cut:], vals[cut:], 50, V, V, shared_lo=True)
    k50, x50 = _merge_sorted(key[s[0]:cut], vals[s[0]:cut], key[cut:s[-1] + 1], vals[cut:s[-1] + 1])
    order = np.argsort(k50, kind="stable")
    whole = np.r_[np.flatnonzero(vb < 50), np.flatnonzero(vb > 50)]
    ref = fold_tree([tree_nodes(np.r_[vb[whole[vb[whole] < 50]], np.full(len(k50), 50), vb[whole[vb[whole] > 50]]],
                                np.r_[key[whole[vb[whole] < 50]], k50[order], key[whole[vb[whole] > 50]]],
                                np.r_[vals[whole[vb[whole] < 50]], x50[order], vals[whole[vb[whole] > 50]]], 0, V, V)],
                    K, m, V)
    np.testing.assert_array_equal(fold_tree([lo_part, hi_part], K, m, V), ref)


def test_packed_counts_take_the_bits_the_bucket_needs():
    """The finish packs a (position, set)'s rows and present groups into one 64-bit word,
    split where the bucket's rows need it: rows of 2**41 each count exactly and leave the
    segments' starts and ends as rows of 1 do; a bucket whose rows and leaves cannot share
    64 bits is refused with a clear error, never wrapped around."""
    rng = np.random.default_rng(2)
    leaf = np.repeat(np.arange(300), 6)
    x = rng.integers(0, 40, len(leaf)).astype(float)
    y = rng.normal(size=len(leaf))
    coder = KeyCoder("numeric", values=np.unique(x))
    fs = FeatureScan("x", "numeric", [], None, coder, None, 300)
    code = coder.encode(pd.Series(x))
    one = bucket_sums(group_sums(leaf, code, np.column_stack([np.ones_like(y), y])), fs, 1)
    big = float(2 ** 41)
    heavy = bucket_sums(group_sums(leaf, code, np.column_stack([np.full_like(y, big), y * big])), fs, 1)
    np.testing.assert_array_equal(heavy.count[0], np.bincount(code, minlength=coder.n_keys) * big)
    np.testing.assert_array_equal(heavy.starts, one.starts)
    np.testing.assert_array_equal(heavy.ends, one.ends)
    assert one.starts.sum() == one.ends.sum() > 0
    with pytest.raises(ValueError, match="too large for StratPD's finish"):
        bucket_sums(group_sums(leaf, code, np.column_stack([np.full_like(y, 2.0 ** 60), y])), fs, 1)
    with pytest.raises(ValueError, match="whole numbers"):
        bucket_sums(group_sums(leaf, code, np.column_stack([np.full_like(y, 0.5), y])), fs, 1)


@pytest.mark.parametrize("binned", [False, True])
def test_each_trial_of_the_finish_is_the_reference_of_its_leaf_draw(binned):
    """The finish's one pass gives every trial the plain reference's curve of that
    trial's draw of the leaves (each leaf's segments counted its Poisson weight times,
    on the curve's own support: :func:`reference.reference_leaf_trial`); with leaves of
    more (leaf, position) groups than the pass reads at once
    (:data:`daskpd._strat.numeric.CHUNK`), so a leaf's state crosses chunks, a leaf
    holding a single position, and a run of positions that only a few leaves reach."""
    from daskpd._strat.leafboot import weights_of_leaves
    from daskpd._strat.numeric import CHUNK
    from reference import reference_leaf_trial

    rng = np.random.default_rng(11)
    n, T, L = 6000, 6, 12
    leaf = np.sort(rng.integers(0, L, n))
    if binned:  # ~300 bins
        grid = np.linspace(0, 10, 301)
        coder = KeyCoder("numeric", edges=grid[1:-1])
        xv = rng.uniform(0, 10, n)
    else:
        xv = np.round(rng.uniform(0, 10, n), 2)  # ~1,000 distinct positions
        coder = KeyCoder("numeric", values=np.unique(xv))
    xv[leaf == 3] = xv[leaf == 3][0]  # a leaf of a single position (no slope)
    far = leaf >= 10  # two leaves reach past 10: a few slopes there
    xv[far] += 2.0 * rng.random(far.sum())
    if not binned:
        xv = np.round(xv, 2)
        coder = KeyCoder("numeric", values=np.unique(xv))
    y = 0.7 * xv + rng.normal(size=n) + leaf
    key = coder.encode_float(xv)
    fs = FeatureScan("x", "numeric", [], None, coder, None, L)
    assert fs.binned == binned
    assert max(len(np.unique(key[leaf == lf])) for lf in range(L)) > 2 * CHUNK
    job = StratScan(target="y", features=[fs], encoder=FeatureEncoder([], {}), n_trials=T, random_state=7,
                    finish_options=FinishOptions(min_slopes_per_x=3, few_slopes="interpolate"))
    vals = np.column_stack([np.ones(n), y, xv]) if binned else np.column_stack([np.ones(n), y])
    table = group_sums(leaf, key, vals)
    res = curve_from_sums(fs, [bucket_sums(table, fs, T + 1, counters=(n, 0, 0), random_state=7)], job)
    W = weights_of_leaves("x", np.arange(L), T, 7)
    assert (W == 0).any() and (W > 1).any()
    edges = coder.edges if binned else None
    ref0 = reference_stratpd(xv, y, leaf, 3, bins=key.astype(float) if binned else None, edges=edges)
    np.testing.assert_allclose(res.pd, ref0["pd"], rtol=1e-9, atol=1e-9, equal_nan=True)
    for t in range(T):
        ref = reference_leaf_trial(xv, y, leaf, W[:, t], 3, bins=key.astype(float) if binned else None, edges=edges)
        np.testing.assert_allclose(res.x, ref["x"], rtol=1e-12)
        np.testing.assert_allclose(res.trials_pd[t], ref["pd"], rtol=1e-9, atol=1e-9, equal_nan=True)
        np.testing.assert_array_equal(np.isfinite(res.trials_pd[t]), np.isfinite(res.pd))
    # a trial's rows per position: its leaves' rows, each times the leaf's weight
    np.testing.assert_array_equal(res.set_counts[1:], np.stack([np.bincount(key, W[leaf, t], coder.n_keys)
                                                                for t in range(T)])[:, np.unique(key)])
