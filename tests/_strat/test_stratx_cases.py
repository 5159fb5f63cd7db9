"""Conformance with the reference: stratx 0.5's own numeric and categorical unit cases.

The inputs are in ``tests/stratx_unit_cases.py`` (stratx's ``testing/*.py`` cases as pandas
frames, with the reference's parameters; that module's docstring says how each case gets
the same stratification as stratx).  ``EXPECTED`` below are the outputs of the REFERENCE
(stratx 0.5), not of daskpd, produced with

    bash benchmarks/setup_stratx.sh old
    ~/.cache/daskpd-bench/stratx-old/bin/python tests/make_stratx_expected.py

(stratx 0.5, numpy 1.23.5, python 3.11.7, 2026-11-23; the numeric cases are identical in
stratx-new, numpy 2.4.6).

What is compared
----------------
Numeric (``daskpd.stratpd(..., tree_method=..., max_bins=None)``), on stratx's grid of
distinct x values:

* ``x``: the grid; ``slope_count``: stratx's ``slope_counts_at_x``; ``slope``: stratx's
  ``slope_at_x`` (NaN where fewer than ``min_slopes_per_x`` slopes, and at the last x);
* ``supported`` is True exactly at stratx's ``pdpx`` (stratx keeps x[i] iff the slope at
  x[i] or at x[i-1] is valid: it drops the 2nd and later positions of a run of NaN slopes,
  and x[0] if its slope is NaN), and ``pd`` there equals ``pdpy`` (stratx integrates a NaN
  slope as 0: a flat step across an interval no leaf covers);
* ``n_ignored``: stratx's ``ignored`` (rows in leaves with a single x).

Categorical (``daskpd.catstratpd``): the categories with rows, their effects with the
smallest at 0 (stratx's origin is arbitrary, its tests normalise the same way) and
``count`` (stratx's ``count_per_cat``).

Every case runs with ``tree_method="exact"`` and with the default ``"hist"``: on these
single-column stratifiers both trees are scikit-learn's, leaf for leaf.

Cases that differ from stratx on purpose (``DIFFERS``; docs/stratpd.md and
docs/catstratpd.md say why) are not skipped or xfailed: each is checked for what daskpd
guarantees instead, and ``tests/_strat/test_stratx_compat.py`` shows that stratx's own rule on
the same leaves reproduces the reference output for every one of them.

* ``CONSTANT_FEATURE`` (2 numeric cases, the feature has a single value): stratx returns
  an empty curve with every row ignored; ``daskpd.stratpd`` refuses a constant feature
  with a DataError naming it (issue 2: "constant x" is a bad input that must be reported;
  issue 15 keeps that for a feature named explicitly).  The engine itself, given stratx's
  leaf, returns exactly stratx's empty curve (checked below).
* ``DISJOINT_PLACEMENT`` (6 categorical cases): groups of categories that share no leaf.
  Their relative level is not identified by any leaf; stratx shifts each region by the
  difference of its categories' mean marginal y but adds it to effects whose origin is the
  region's first leaf's lowest category (stratx/partdep.py 617-629), so the placement
  depends on that choice (dj_disjoint_regions: stratx 47/57/67, the marginal truth
  40/50/60).  daskpd places each group so that its count-weighted mean effect matches its
  rows' mean y.  Checked: within every group daskpd's effects equal stratx's up to one
  constant, and the placement rule.
* ``NOISY_MERGE`` (2 categorical cases with noisy leaves): stratx merges leaves greedily in
  leaf order (the result depends on the order); daskpd fits the additive model
  ybar_lc = a_l + b_c by count-weighted least squares.  Checked: daskpd equals a plain
  weighted least-squares fit on the same leaves, and stays within 0.4 of stratx.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import daskpd
from daskpd import DataError
from stratx_unit_cases import all_cases

nan = np.nan

CASES = {c["name"]: c for c in all_cases()}

# fmt: off
# Reference outputs: stratx 0.5 (see the module docstring for the command).
EXPECTED = {
    'strat_binary_one_region': {'x': [60, 65], 'slope_count': [1, 0], 'slope': [-6.0, nan], 'pdpx': [60.0, 65.0], 'pdpy': [0.0, -30.0], 'ignored': 0},
    'strat_one_region': {'x': [100, 101, 102], 'slope_count': [1, 1, 0], 'slope': [1.0, 1.0, nan], 'pdpx': [100.0, 101.0, 102.0], 'pdpy': [0.0, 1.0, 2.0], 'ignored': 0},
    'strat_disjoint_regions': {'x': [100, 101, 102, 200, 201, 202], 'slope_count': [1, 1, 0, 1, 1, 0], 'slope': [1.0, 1.0, nan, -1.0, -1.0, nan], 'pdpx': [100.0, 101.0, 102.0, 200.0, 201.0, 202.0], 'pdpy': [0.0, 1.0, 2.0, 2.0, 1.0, 0.0], 'ignored': 0},
    'strat_disjoint_regions_with_isolated_single_x': {'x': [100, 101, 102, 150, 200, 201, 202], 'slope_count': [1, 1, 0, 0, 1, 1, 0], 'slope': [1.0, 1.0, nan, nan, -1.0, -1.0, nan], 'pdpx': [100.0, 101.0, 102.0, 200.0, 201.0, 202.0], 'pdpy': [0.0, 1.0, 2.0, 2.0, 1.0, 0.0], 'ignored': 3},
    'slopes_2_discrete_records_positive_slope': {'x': [1, 2], 'slope_count': [1, 0], 'slope': [3.0, nan], 'pdpx': [1.0, 2.0], 'pdpy': [0.0, 3.0], 'ignored': 0},
    'slopes_unsupported_ignored': {'x': [5], 'slope_count': [0], 'slope': [nan], 'pdpx': [], 'pdpy': [], 'ignored': 2},
    'slopes_2_discrete_records_negative_slope': {'x': [1, 2], 'slope_count': [1, 0], 'slope': [-3.0, nan], 'pdpx': [1.0, 2.0], 'pdpy': [0.0, -3.0], 'ignored': 0},
    'slopes_sim_2cat_problem': {'x': [1, 2], 'slope_count': [1, 0], 'slope': [30.0, nan], 'pdpx': [1.0, 2.0], 'pdpy': [0.0, 30.0], 'ignored': 0},
    'fd_one_uniq_x': {'x': [1], 'slope_count': [0], 'slope': [nan], 'pdpx': [], 'pdpy': [], 'ignored': 2},
    'fd_just_forward_diff_at_left': {'x': [1, 3], 'slope_count': [1, 0], 'slope': [3.5, nan], 'pdpx': [1.0, 3.0], 'pdpy': [0.0, 7.0], 'ignored': 0},
    'fd_forward_diff_and_one_center': {'x': [1, 3, 4], 'slope_count': [1, 1, 0], 'slope': [3.5, -5.0, nan], 'pdpx': [1.0, 3.0, 4.0], 'pdpy': [0.0, 7.0, 2.0], 'ignored': 0},
    'fd_center_diff': {'x': [1, 3, 4, 7, 13], 'slope_count': [1, 1, 1, 1, 0], 'slope': [0.5, 2.0, 1.0, 0.6666666666666666, nan], 'pdpx': [1.0, 3.0, 4.0, 7.0, 13.0], 'pdpy': [0.0, 1.0, 3.0, 6.0, 10.0], 'ignored': 0},
    'cw_single_leaf': {'categories': [2, 3, 4], 'effect': [0.0, 1.0, 1.5], 'count': [1, 1, 2]},
    'cw_two_leaves': {'categories': [2, 3, 4], 'effect': [0.0, 2.0, 2.0], 'count': [1, 1, 2]},
    'cw_two_leaves_with_2nd_ignored': {'categories': [3, 4], 'effect': [0.0, 1.0], 'count': [1, 3]},
    'cw_three_leaves_no_overlap': {'categories': [2, 3, 4, 5, 6, 7], 'effect': [6.5, 4.5, 3.0, 2.0, 1.0, 0.0], 'count': [1, 1, 1, 1, 1, 1]},
    'cm_single_leaf': {'categories': [0, 1, 2, 4], 'effect': [0.0, 1.0, 2.0, 0.0], 'count': [1, 1, 1, 1], 'leaf_deltas_as_in_test': True},
    'cm_two_leaves_with_one_refcat': {'categories': [0, 1, 2, 3, 4], 'effect': [0.0, 0.9999999999999999, 2.4999999999999996, 1.8333333333333335, 0.16666666666666666], 'count': [2, 2, 2, 1, 1], 'leaf_deltas_as_in_test': True},
    'cm_two_leaves_with_two_refcats': {'categories': [0, 1, 2, 3, 4], 'effect': [0.0, 0.5, 2.5, 2.0, 0.0], 'count': [1, 2, 2, 1, 1], 'leaf_deltas_as_in_test': True},
    'cm_merging_gets_negative_values': {'categories': [0, 1, 2, 3, 4], 'effect': [3.0, 4.0, 5.0, 0.0, 3.0], 'count': [1, 1, 2, 1, 1], 'leaf_deltas_as_in_test': True},
    'cm_two_leaves_with_non_0_and_1_catcodes': {'categories': [2, 3, 4, 5, 6, 7], 'effect': [0.0, 5.0, 0.5, 2.5, 7.0, 0.0], 'count': [1, 1, 2, 2, 1, 1], 'leaf_deltas_as_in_test': True},
    'cm_two_leaves_with_disconnected_2nd_leaf': {'categories': [0, 1, 2, 3, 4], 'effect': [0.0, 1.0, 2.0, 10.5, 13.5], 'count': [1, 1, 5, 3, 2], 'leaf_deltas_as_in_test': True},
    'cm_3_leaves_disconnected_2nd_then_leaf_conn_to_disconnected': {'categories': [0, 1, 2, 3, 4, 5, 6], 'effect': [0.0, 1.0, 11.833333333333334, 14.833333333333334, 14.833333333333334, 4.0, 5.0], 'count': [1, 1, 1, 2, 2, 1, 1], 'leaf_deltas_as_in_test': True},
    'cm_3_leaves_disconnected_2nd_then_leaf_conn_to_first': {'categories': [0, 1, 2, 3, 4, 5, 6], 'effect': [0.0, 1.0, 5.5, 8.5, 8.5, 4.0, 5.0], 'count': [1, 1, 1, 1, 1, 2, 2], 'leaf_deltas_as_in_test': True},
    'cm_3_leaves_with_2nd_incorporated_in_pass_2': {'categories': [0, 1, 2, 3, 4, 5, 6, 7, 8], 'effect': [6.0, 7.0, 0.0, 3.0, 3.0, 10.0, 11.0, 12.0, 4.0], 'count': [1, 1, 1, 1, 2, 2, 2, 1, 1], 'leaf_deltas_as_in_test': True},
    'cm_4state_temperature': {'categories': [0, 1, 2, 3], 'effect': [24.900000000000006, 0.0, 44.97, 39.52333333333333], 'count': [2, 2, 2, 3]},
    'cm_temperature': {'categories': [0, 1, 2, 3, 4], 'effect': [29.044444444444444, 0.0, 33.433703703703706, 26.78718518518519, 23.421481481481482], 'count': [3, 3, 3, 5, 6]},
    'dj_binary_one_region': {'categories': [3, 4], 'effect': [0.0, 30.0], 'count': [1, 1]},
    'dj_one_region': {'categories': [3, 4, 5], 'effect': [0.0, 5.0, 10.0], 'count': [1, 1, 1]},
    'dj_disjoint_regions': {'categories': [1, 2, 3, 5, 6, 7], 'effect': [0.0, 3.0, 6.0, 47.0, 57.0, 67.0], 'count': [1, 1, 1, 1, 1, 1]},
    'dj_disjoint_regions_with_isolated_single_x': {'categories': [1, 2, 3, 4, 5, 6, 7], 'effect': [3.0, 4.0, 5.0, 0.0, 13.0, 12.0, 11.0], 'count': [1, 1, 1, 3, 1, 1, 1]},
    'dj_sawtooth_bulldozer': {'categories': [1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15], 'effect': [6.0, 5.0, 4.0, 8.0, 9.0, 10.0, 2.0, 1.0, 0.0, 12.0, 13.0, 14.0], 'count': [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]},
    'dj_sawtooth_bulldozer_some_negative': {'categories': [1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15], 'effect': [6.0, 5.0, 4.0, 8.0, 9.0, 10.0, 2.0, 1.0, 0.0, 12.0, 13.0, 14.0], 'count': [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]},
}
# fmt: on

TREE_METHODS = ("exact", "hist")
NUMERIC = [n for n, c in CASES.items() if c["kind"] == "numeric"]
CATEGORICAL = [n for n, c in CASES.items() if c["kind"] == "categorical"]

CONSTANT_FEATURE = {"slopes_unsupported_ignored", "fd_one_uniq_x"}
DISJOINT_PLACEMENT = {"cw_three_leaves_no_overlap", "cm_two_leaves_with_disconnected_2nd_leaf",
                      "cm_3_leaves_disconnected_2nd_then_leaf_conn_to_disconnected",
                      "cm_3_leaves_disconnected_2nd_then_leaf_conn_to_first", "dj_disjoint_regions",
                      "dj_disjoint_regions_with_isolated_single_x"}
NOISY_MERGE = {"cm_4state_temperature", "cm_temperature"}
DIFFERS = CONSTANT_FEATURE | DISJOINT_PLACEMENT | NOISY_MERGE


def test_every_case_has_a_reference_output():
    assert set(EXPECTED) == set(CASES)
    assert DIFFERS <= set(CASES)


def _stratpd(case, tree_method):
    return daskpd.stratpd(case["df"], target=case["target"], feature=case["feature"], features=case["stratify_on"],
                          min_samples_leaf=case["min_samples_leaf"], min_slopes_per_x=case["min_slopes_per_x"],
                          tree_method=tree_method, max_bins=None, honest=False)


def _check_numeric(res, want):
    x = np.asarray(want["x"], dtype=float)
    np.testing.assert_array_equal(res.x, x)
    np.testing.assert_array_equal(res.slope_count, want["slope_count"])
    np.testing.assert_allclose(res.slope, want["slope"], rtol=1e-12, atol=1e-12, equal_nan=True)
    np.testing.assert_array_equal(res.supported, np.isin(x, want["pdpx"]),
                                  err_msg=f"supported positions differ from stratx's pdpx {want['pdpx']}")
    np.testing.assert_allclose(res.pd[res.supported], want["pdpy"], rtol=1e-12, atol=1e-9)
    assert res.n_ignored == want["ignored"]


@pytest.mark.parametrize("tree_method", TREE_METHODS)
@pytest.mark.parametrize("name", NUMERIC)
def test_numeric_case_matches_stratx(name, tree_method):
    case, want = CASES[name], EXPECTED[name]
    if name in CONSTANT_FEATURE:
        with pytest.raises(DataError, match=f"feature {case['feature']!r} is constant"):
            _stratpd(case, tree_method)
        _check_numeric(_finish_on_one_leaf(case), want)
        return
    _check_numeric(_stratpd(case, tree_method), want)


def _finish_on_one_leaf(case):
    """StratPD's finish (the scan's own kernels) on one leaf holding every row: what
    stratx's single-leaf tree gives these 2-row tables."""
    from daskpd._data.encode import FeatureEncoder, KeyCoder
    from daskpd._engine.sums import group_sums
    from daskpd._strat.numeric import bucket_sums
    from daskpd._strat.numeric_curve import curve_from_sums
    from daskpd._strat.options import FinishOptions
    from daskpd._strat.scan import FeatureScan, StratScan

    x = case["df"][case["feature"]].to_numpy(dtype="float64")
    y = case["df"][case["target"]].to_numpy(dtype="float64")
    coder = KeyCoder("numeric", values=np.unique(x))
    fs = FeatureScan(case["feature"], "numeric", [], None, coder, None, 1)
    job = StratScan(target=case["target"], features=[fs], encoder=FeatureEncoder([], {}),
                    finish_options=FinishOptions(min_slopes_per_x=case["min_slopes_per_x"]))
    table = group_sums(np.zeros(len(x), "int64"), coder.encode(pd.Series(x)), np.column_stack([np.ones_like(y), y]))
    return curve_from_sums(fs, [bucket_sums(table, fs, 1, counters=(len(y), 0, 0))], job)


def _catstratpd(case, tree_method):
    return daskpd.catstratpd(case["df"], target=case["target"], feature=case["feature"], features=case["stratify_on"],
                             min_samples_leaf=case["min_samples_leaf"], tree_method=tree_method, honest=False)


@pytest.mark.parametrize("tree_method", TREE_METHODS)
@pytest.mark.parametrize("name", CATEGORICAL)
def test_categorical_case_matches_stratx(name, tree_method):
    case, want = CASES[name], EXPECTED[name]
    res = _catstratpd(case, tree_method)
    np.testing.assert_array_equal(np.asarray(res.categories, dtype="int64"), want["categories"])
    np.testing.assert_array_equal(res.count, want["count"])
    if name in DISJOINT_PLACEMENT:
        _check_disjoint_placement(case, res, want)
    elif name in NOISY_MERGE:
        _check_least_squares(case, res, want, tree_method)
    else:
        np.testing.assert_allclose(res.pd, want["effect"], rtol=1e-9, atol=1e-9)


def _check_disjoint_placement(case, res, want):
    frame = res.to_frame()
    group = frame["group"].to_numpy()
    assert len(np.unique(group)) > 1, "the case has disjoint groups"
    diff = res.pd - np.asarray(want["effect"])
    for g in np.unique(group):  # within a group: stratx's effects up to one constant
        np.testing.assert_allclose(diff[group == g], diff[group == g][0], rtol=0, atol=1e-9)
    # daskpd's placement: every group's count-weighted mean effect minus its rows' mean y is
    # the same constant (one more group than stratx's arbitrary origin would give)
    df = case["df"]
    cats = np.asarray(res.categories, dtype="int64")
    offsets = []
    for g in np.unique(group):
        in_g = np.isin(df[case["feature"]].to_numpy(), cats[group == g])
        w = np.asarray(res.count, dtype=float)[group == g]
        offsets.append(np.sum(w * res.pd[group == g]) / w.sum() - df[case["target"]].to_numpy()[in_g].mean())
    np.testing.assert_allclose(offsets, offsets[0], rtol=0, atol=1e-9)


def _check_least_squares(case, res, want, tree_method):
    """daskpd = count-weighted least squares of ybar_lc = a_l + b_c on the same leaves,
    solved plainly here; stratx's greedy merge differs by less than 0.4."""
    from sklearn.tree import DecisionTreeRegressor

    df = case["df"]
    X = df[case["stratify_on"]].to_numpy(dtype="float32")
    y = df[case["target"]].to_numpy(dtype="float64")
    leaf = DecisionTreeRegressor(min_samples_leaf=case["min_samples_leaf"], random_state=0).fit(X, y).apply(X)
    g = pd.DataFrame({"leaf": leaf, "cat": df[case["feature"]].to_numpy(), "y": y})
    s = g.groupby(["leaf", "cat"]).y.agg(["size", "mean"]).reset_index()
    leaves = {v: i for i, v in enumerate(sorted(s.leaf.unique()))}
    cats = sorted(s.cat.unique())
    col = {v: i for i, v in enumerate(cats)}
    A = np.zeros((len(s), len(leaves) + len(cats)))
    A[np.arange(len(s)), [leaves[v] for v in s.leaf]] = 1.0
    A[np.arange(len(s)), [len(leaves) + col[v] for v in s.cat]] = 1.0
    sw = np.sqrt(s["size"].to_numpy(dtype=float))
    coef = np.linalg.lstsq(A * sw[:, None], s["mean"].to_numpy() * sw, rcond=None)[0]
    b = coef[len(leaves):]
    b = b - b.min()  # the system is singular by one constant; effects with the minimum at 0
    np.testing.assert_array_equal(cats, res.categories)
    np.testing.assert_allclose(res.pd - res.pd.min(), b, rtol=0, atol=1e-9)
    assert np.abs(res.pd - np.asarray(want["effect"])).max() < 0.4
