"""tests/stratx_compat.py reproduces stratx 0.5 on its own unit cases, given the same leaves.

The leaves are computed here the way stratx gets them (a scikit-learn tree on the single
stratifying column; daskpd's histogram tree with its leaves renumbered in scikit-learn's
preorder gives the same), the per-(leaf, key) sums with pandas; the expected outputs are
stratx's (tests/_strat/test_stratx_cases.py::EXPECTED, from tests/make_stratx_expected.py).
The two numeric cases whose feature is constant (``slopes_unsupported_ignored``,
``fd_one_uniq_x``: stratx returns an empty curve, daskpd.stratpd refuses a constant
feature) are not among the numeric cases here: there is nothing to integrate.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.tree import DecisionTreeRegressor

import daskpd
from daskpd._strat.histtree import HistTree
from stratx_compat import preorder_leaf_rank, stratx_integrate, stratx_merge_categorical
from test_stratx_cases import CASES, EXPECTED


def leaves_of(case, tree_method):
    X = case["df"][case["stratify_on"]].to_numpy(dtype="float64")
    y = case["df"][case["target"]].to_numpy(dtype="float64")
    if tree_method == "exact":
        t = DecisionTreeRegressor(min_samples_leaf=case["min_samples_leaf"], random_state=0)
        return t.fit(X.astype("float32"), y).apply(X.astype("float32"))
    t = HistTree(min_samples_leaf=case["min_samples_leaf"]).fit(X, y)
    return preorder_leaf_rank(t.children_left_, t.children_right_)[t.apply(X)]


CATEGORICAL = [n for n, c in CASES.items() if c["kind"] == "categorical"]
NUMERIC = [n for n, c in CASES.items() if c["kind"] == "numeric" and len(EXPECTED[n]["x"]) > 1]


@pytest.mark.parametrize("tree_method", ["exact", "hist"])
@pytest.mark.parametrize("name", CATEGORICAL)
def test_categorical_merge_reproduces_stratx(name, tree_method):
    case, want = CASES[name], EXPECTED[name]
    df = case["df"]
    g = pd.DataFrame({"leaf": leaves_of(case, tree_method), "cat": df[case["feature"]].to_numpy(),
                      "y": df[case["target"]].to_numpy(dtype="float64")})
    s = g.groupby(["leaf", "cat"]).y.agg(["size", "sum"]).reset_index()
    K = int(df[case["feature"]].max()) + 1
    avg, count = stratx_merge_categorical(s.leaf, s.cat, s["size"], s["sum"], K)
    cats = np.asarray(want["categories"])
    eff = avg[cats] - np.nanmin(avg[cats])
    np.testing.assert_allclose(eff, want["effect"], rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(count[cats], want["count"])


@pytest.mark.parametrize("name", NUMERIC)
def test_numeric_integration_reproduces_stratx_from_daskpd_slopes(name):
    case, want = CASES[name], EXPECTED[name]
    res = daskpd.stratpd(case["df"], target=case["target"], feature=case["feature"], features=case["stratify_on"],
                         min_samples_leaf=case["min_samples_leaf"], min_slopes_per_x=1, tree_method="exact",
                         max_bins=None, honest=False)
    pd_, kept = stratx_integrate(res.x, res.slope, res.slope_count, case["min_slopes_per_x"])
    np.testing.assert_array_equal(res.x[kept], want["pdpx"])
    np.testing.assert_allclose(pd_[kept], want["pdpy"], rtol=1e-12, atol=1e-12)


def test_integration_rules_on_the_issue_example():
    # x in {0,1,2} in one stratum, {10,11,12} in the other, y = x^2 + 100 z (issue 13):
    # stratx stays flat over [2, 10), and keeps every position
    x = np.array([0, 1, 2, 10, 11, 12.0])
    slope = np.array([1, 3, np.nan, 21, 23, np.nan])
    count = np.array([1, 1, 0, 1, 1, 0])
    pd_, kept = stratx_integrate(x, slope, count, 1)
    np.testing.assert_allclose(pd_, [0, 1, 4, 4, 25, 48])
    assert kept.all()
    # under min_slopes_per_x: NaN slopes are flat steps; a run of them keeps only its first position
    pd_, kept = stratx_integrate(np.arange(5.0), np.array([1, 3, 5, 7, np.nan]), np.array([3, 2, 2, 3, 0]), 3)
    np.testing.assert_allclose(pd_, [0, 1, 1, 1, 8])
    np.testing.assert_array_equal(kept, [True, True, False, True, True])
