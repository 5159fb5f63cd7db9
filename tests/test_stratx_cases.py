"""Conformance with the reference: stratx 0.5's own numeric and categorical unit cases.

The inputs are in ``tests/stratx_unit_cases.py`` (stratx's ``testing/*.py`` cases as pandas
frames, with the reference's parameters; that module's docstring says how each case gets
the same stratification as stratx).  ``EXPECTED`` below are the outputs of the REFERENCE
(stratx 0.5), not of daskpd, produced with

    bash benchmarks/setup_stratx.sh old
    ~/.cache/daskpd-bench/stratx-old/bin/python benchmarks/stratx_unit_cases.py

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
"""
from __future__ import annotations

import numpy as np
import pytest

import daskpd
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


def test_every_case_has_a_reference_output():
    assert set(EXPECTED) == set(CASES)


@pytest.mark.parametrize("tree_method", TREE_METHODS)
@pytest.mark.parametrize("name", NUMERIC)
def test_numeric_case_matches_stratx(name, tree_method):
    case, want = CASES[name], EXPECTED[name]
    res = daskpd.stratpd(case["df"], case["target"], case["feature"], features=case["stratify_on"],
                         min_samples_leaf=case["min_samples_leaf"], min_slopes_per_x=case["min_slopes_per_x"],
                         tree_method=tree_method, max_bins=None)
    x = np.asarray(want["x"], dtype=float)
    np.testing.assert_array_equal(res.x, x)
    np.testing.assert_array_equal(res.slope_count, want["slope_count"])
    np.testing.assert_allclose(res.slope, want["slope"], rtol=1e-12, atol=1e-12, equal_nan=True)
    np.testing.assert_array_equal(res.supported, np.isin(x, want["pdpx"]),
                                  err_msg=f"supported positions differ from stratx's pdpx {want['pdpx']}")
    np.testing.assert_allclose(res.pd[res.supported], want["pdpy"], rtol=1e-12, atol=1e-9)
    assert res.n_ignored == want["ignored"]


@pytest.mark.parametrize("tree_method", TREE_METHODS)
@pytest.mark.parametrize("name", CATEGORICAL)
def test_categorical_case_matches_stratx(name, tree_method):
    case, want = CASES[name], EXPECTED[name]
    res = daskpd.catstratpd(case["df"], case["target"], case["feature"], features=case["stratify_on"],
                            min_samples_leaf=case["min_samples_leaf"], tree_method=tree_method)
    np.testing.assert_array_equal(np.asarray(res.categories, dtype="int64"), want["categories"])
    np.testing.assert_array_equal(res.count, want["count"])
    np.testing.assert_allclose(res.pd, want["effect"], rtol=1e-9, atol=1e-9)
