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
from daskpd._strat.numeric import bucket_sums, curve_from_sums, sweep
from daskpd._strat.scan import FeatureScan, StratScan, leaf_numbering
from daskpd._strat.trees import bin_edges
from reference import reference_stratpd


def fin(leaf, x, y, m=1):
    """The numeric finish on given leaves (one bucket), with the scan's own kernels."""
    leaf, x, y = (np.asarray(a) for a in (leaf, x, y))
    x, y = x.astype(float), y.astype(float)
    coder = KeyCoder("numeric", values=np.unique(x))
    fs = FeatureScan("x", "numeric", [], None, coder, None, int(leaf.max()) + 1)
    job = StratScan(target="y", features=[fs], encoder=FeatureEncoder([], {}),
                    finish_options={"min_slopes_per_x": m})
    table = group_sums(leaf, coder.encode(pd.Series(x)), np.column_stack([np.ones_like(y), y]))
    res = curve_from_sums(fs, [bucket_sums(table, fs, 1, counters=(len(y), 0, 0))], job)
    from daskpd._strat.numeric import empty_curve_message

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
    return df, leaf_size, m, cuts, max_bins


def _scan(df, tree, max_bins, m, n_buckets=1, n_trials=0):
    edges = bin_edges(df.x.to_numpy(), max_bins) if max_bins else None
    coder = KeyCoder("numeric", edges=edges) if edges is not None else KeyCoder("numeric", values=np.unique(df.x))
    index, n_leaves = leaf_numbering(tree, 0, 0)
    fs = FeatureScan("x", "numeric", ["a", "b"], tree, coder, index, n_leaves)
    return StratScan(target="y", features=[fs], encoder=FeatureEncoder.fit(df, ["a", "b", "x"]), n_trials=n_trials,
                     weight_columns=["x", "a", "b", "y"], n_buckets=n_buckets, expected_rows=len(df),
                     finish_options={"min_slopes_per_x": m})


@pytest.mark.filterwarnings("ignore:StratPD for feature")
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(datasets(), st.sampled_from([1, 2, 4, 16]))
def test_dask_equals_reference(case, n_buckets):
    df, leaf_size, m, cuts, max_bins = case
    tree = DecisionTreeRegressor(min_samples_leaf=leaf_size, random_state=0).fit(df[["a", "b"]].to_numpy("float32"), df.y)
    job = _scan(df, tree, max_bins, m, n_buckets)
    ddf = _random_partitions(df, cuts)
    (out,) = run_pass(ddf, [job], fan_in=2)
    res = out["x"]

    leaf = tree.apply(df[["a", "b"]].to_numpy("float32"))
    coder = job.features[0].coder
    bins = None if not coder.binned else coder.encode(df.x).astype(float)
    ref = reference_stratpd(df.x, df.y, leaf, m, bins=bins)
    np.testing.assert_allclose(res.x, ref["x"], rtol=1e-12)
    np.testing.assert_array_equal(res.slope_count, ref["slope_count"])
    np.testing.assert_array_equal(res.count, ref["count"])
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


def test_scan_sums_x_only_for_binned_features():
    """Exact-valued x is its own key and a category has no x: only a binned feature's
    table carries sum_x (in every trial's set too); the curves are unchanged by it."""
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
        job = StratScan(target="y", features=feats, encoder=enc, n_trials=n_trials, weight_columns=list(df.columns),
                        expected_rows=n)
        piece = job.combine([job.map(PartitionContext(df))])
        assert [f.stats_per_set for f in feats] == [2, 3, 2]
        for f in feats:
            assert piece.tables[f.feature].values.shape[1] == f.stats_per_set * (1 + n_trials)
    # the binned feature's sum_x is its rows' sum of x, per bin
    z = piece.tables["z"]
    np.testing.assert_allclose(np.bincount(z.key, weights=z.values[:, 2]),
                               df.groupby(zc.encode(df.z)).z.sum().to_numpy())
    # the 2-column table gives the same curve as the hand-made one
    (out,) = run_local([df], [StratScan(target="y", features=feats[:1], encoder=enc, expected_rows=n,
                                        finish_options={"min_slopes_per_x": 1})])
    np.testing.assert_array_equal(out["x"].pd, fin(np.zeros(n, int), df.x, df.y).pd)
