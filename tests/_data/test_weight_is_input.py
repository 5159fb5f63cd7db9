"""Issue 13 item 3: a sample_weight column that is also one of the model's inputs.

scikit-learn accepts ``partial_dependence(model, X, f, sample_weight=X["w"])`` where ``w``
is a model input; every model-based daskpd method must accept ``sample_weight="w"`` for
such a column (it used to be refused: "column 'w' not found in data (the model's input
columns)"), give scikit-learn's answer where scikit-learn has one, and give exactly the
answer of the same weights passed as an array.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.inspection import partial_dependence as sk_pd
from sklearn.linear_model import LinearRegression

import daskpd
from daskpd import DataError


pytestmark = pytest.mark.usefixtures("one_openmp_thread")


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(3)
    n = 800
    df = pd.DataFrame({"a": rng.uniform(size=n), "b": rng.normal(size=n), "w": rng.uniform(0.1, 3.0, n)})
    y = np.sin(4 * df.a) * df.w + df.b + rng.normal(0, 0.1, n)
    m = HistGradientBoostingRegressor(max_iter=20, random_state=0).fit(df[["a", "b", "w"]], y)
    return df, y, m


@pytest.mark.parametrize("feature", ["a", "w"])
def test_partial_dependence_equals_sklearn_when_the_weight_is_an_input(data, feature):
    df, _, m = data
    X = df[["a", "b", "w"]]
    sk = sk_pd(m, X, [feature], method="brute", grid_resolution=12, sample_weight=df.w.to_numpy())
    by_column = daskpd.partial_dependence(m, X, feature, grid_resolution=12, sample_weight="w")
    by_array = daskpd.partial_dependence(m, X, feature, grid_resolution=12, sample_weight=df.w.to_numpy())
    np.testing.assert_allclose(by_column.average, sk["average"][0], rtol=0, atol=1e-10)
    np.testing.assert_array_equal(by_column.average, by_array.average)
    assert by_column.weight_sum == pytest.approx(df.w.sum())
    # the weights matter here: unweighted is different
    unweighted = daskpd.partial_dependence(m, X, feature, grid_resolution=12)
    assert np.abs(unweighted.average - by_column.average).max() > 1e-3


def test_ice_ale_marginal_variance_accept_the_weight_as_an_input(data):
    df, _, m = data
    X = df[["a", "b", "w"]]
    warr = df.w.to_numpy()
    for col, arr in [(daskpd.ice(m, X, "a", grid_resolution=10, n_lines=20, sample_weight="w"),
                      daskpd.ice(m, X, "a", grid_resolution=10, n_lines=20, sample_weight=warr))]:
        np.testing.assert_array_equal(col.pd, arr.pd)
        np.testing.assert_array_equal(col.lines, arr.lines)
        assert col.weight_sum == pytest.approx(warr.sum())
    sk = sk_pd(m, X, ["a"], method="brute", grid_resolution=10, sample_weight=warr)
    np.testing.assert_allclose(col.pd, sk["average"][0], atol=1e-10)

    col, arr = (daskpd.ale(m, X, "w", bins=8, sample_weight=w) for w in ("w", warr))
    np.testing.assert_array_equal(col.ale, arr.ale)
    np.testing.assert_array_equal(col.weight, arr.weight)

    col, arr = (daskpd.marginal(X, "a", model=m, bins=6, sample_weight=w) for w in ("w", warr))
    np.testing.assert_array_equal(col.pred_mean, arr.pred_mean)
    np.testing.assert_array_equal(col.weight, arr.weight)
    assert col.weight.sum() == pytest.approx(warr.sum())

    col, arr = (daskpd.pd_variance(m, X, ["a", "w"], grid_resolution=8, sample_weight=w) for w in ("w", warr))
    np.testing.assert_array_equal(col.values, arr.values)


def test_function_model_with_explicit_columns_may_take_the_weight(data):
    df, y, _ = data
    lin = LinearRegression().fit(df[["a", "w"]].to_numpy(), y)
    f = lambda frame: lin.predict(frame[["a", "w"]].to_numpy())  # noqa: E731
    res = daskpd.partial_dependence(f, df, "a", grid_resolution=5, sample_weight="w", columns=["a", "w"])
    sk = sk_pd(lin, df[["a", "w"]].to_numpy(), [0], method="brute", grid_resolution=5,
               sample_weight=df.w.to_numpy())
    np.testing.assert_allclose(res.average, sk["average"][0], atol=1e-10)


def test_a_model_naming_no_columns_still_does_not_get_the_weight(data):
    """A model that declares no inputs takes every available column -- except the weight
    (unchanged): an array-less model fitted on [a, b] works with data [a, b, w]."""
    df, y, _ = data
    lin = LinearRegression().fit(df[["a", "b"]].to_numpy(), y)
    res = daskpd.partial_dependence(lin, df[["a", "b", "w"]], "a", grid_resolution=5, sample_weight="w")
    sk = sk_pd(lin, df[["a", "b"]].to_numpy(), [0], method="brute", grid_resolution=5,
               sample_weight=df.w.to_numpy())
    np.testing.assert_allclose(res.average, sk["average"][0], atol=1e-10)
    # the marginal plot's target is never a model input
    with pytest.raises(DataError, match="'y' not found"):
        daskpd.marginal(df.assign(y=y), "a", target="y", model=lambda fr: fr.a, columns=["a", "y"])
