"""scikit-learn's grid on a column with missing values, bit for bit (sklearn 1.9's
``_grid_from_X``: np.unique keeps one NaN, mquantiles sorts NaN after every number)."""
import numpy as np
import pandas as pd
import pytest
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.inspection import partial_dependence as sk_partial_dependence

import daskpd
from daskpd import DataError


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 2))
    X[rng.random(600) < 0.03, 0] = np.nan
    y = np.nan_to_num(X[:, 0], nan=-2.0) + X[:, 1]
    coarse = X.copy()
    coarse[:, 0] = np.round(coarse[:, 0] * 2)  # few distinct values: the grid is them, and NaN
    return X, coarse, y


@pytest.mark.parametrize("which, grid_resolution, percentiles, method", [
    ("fine", 10, (0.05, 0.95), "brute"),      # percentiles over all rows, NaN sorted last
    ("fine", 25, (0.0, 0.9), "recursion"),
    ("coarse", 30, (0.05, 0.95), "brute"),    # distinct values + one NaN < grid_resolution
    ("coarse", 30, (0.05, 0.95), "recursion"),
    ("coarse", 14, (0.05, 0.95), "brute"),    # the NaN makes the distinct values reach grid_resolution
])
def test_grid_and_pd_match_sklearn_on_a_column_with_nans(data, which, grid_resolution, percentiles, method):
    X, coarse, y = data
    Xw = X if which == "fine" else coarse
    model = HistGradientBoostingRegressor(max_iter=8, random_state=0).fit(Xw, y)
    ref = sk_partial_dependence(model, Xw, [0], grid_resolution=grid_resolution, percentiles=percentiles,
                                method=method)
    got = daskpd.partial_dependence(model, pd.DataFrame(Xw, columns=["a", "b"]), "a", method=method,
                                    grid_resolution=grid_resolution, percentiles=percentiles, progress=False)
    g_ref, g = ref["grid_values"][0], got.grid_values[0]
    assert g.dtype == g_ref.dtype and g.shape == g_ref.shape
    assert np.array_equal(g, g_ref, equal_nan=True)  # bit for bit, NaN included
    assert np.isnan(g[-1]) == (grid_resolution == 30)  # the NaN is a grid point of its own
    np.testing.assert_allclose(got.average, ref["average"][0], rtol=1e-12, atol=1e-12)


def test_missing_values_reaching_the_percentile_are_an_error_not_a_nan_grid(data):
    X, _, y = data
    X = X.copy()
    X[np.random.default_rng(1).random(len(X)) < 0.1, 0] = np.nan  # ~13% missing > 1 - 0.95
    model = HistGradientBoostingRegressor(max_iter=5).fit(X, y)
    assert np.isnan(sk_partial_dependence(model, X, [0], grid_resolution=10)["grid_values"][0]).all()
    with pytest.raises(DataError, match=r"feature 'a': its missing values, .*lower percentiles\[1\]"):
        daskpd.partial_dependence(model, pd.DataFrame(X, columns=["a", "b"]), "a", grid_resolution=10,
                                  progress=False)


def test_pd_variance_table_is_ranked():
    from sklearn.linear_model import LinearRegression

    rng = np.random.default_rng(0)
    X = pd.DataFrame(rng.uniform(size=(300, 3)), columns=["small", "large", "mid"])
    y = 0.1 * X.small + 3 * X.large + X.mid
    res = daskpd.pd_variance(LinearRegression().fit(X, y), X, grid_resolution=5, progress=False)
    t = res.to_frame()
    assert list(t["feature"]) == ["large", "mid", "small"] and list(t["rank"]) == [1, 2, 3]
    assert t["importance"].is_monotonic_decreasing


def test_compare_makes_partial_dependences_grid_on_a_column_with_nans(data):
    """compare's FPD uses the same grid rule (NaN sorted last in the percentiles, one NaN
    grid point among few distinct values) and the same numbers as partial_dependence."""
    X, coarse, y = data
    for Xw, res in ((X, 10), (coarse, 30)):
        model = HistGradientBoostingRegressor(max_iter=5, random_state=0).fit(Xw, y)
        frame = pd.DataFrame(Xw, columns=["a", "b"])
        want = daskpd.partial_dependence(model, frame, "a", grid_resolution=res, method="brute", progress=False)
        got = daskpd.compare(model, frame, "a", grid_resolution=res, bins=5, progress=False).results["FPD"]
        assert np.array_equal(got.grid_values[0], want.grid_values[0], equal_nan=True)
        assert np.isnan(got.grid_values[0][-1]) == (res == 30)
        np.testing.assert_allclose(got.average, want.average, rtol=1e-12, atol=1e-12)
