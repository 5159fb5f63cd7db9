"""PD variance (Greenwell et al., seed 002): the formulas, the linear-model result
|beta|/sqrt(12), interaction ~0 for additive models and > 0 for x1*x2, plots, bad input."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.linear_model import LinearRegression

import daskpd
from daskpd import DataError
from daskpd.model._variance import importance_of, interaction_of


pytestmark = pytest.mark.usefixtures("one_openmp_thread")


@pytest.fixture(scope="module")
def uniform():
    rng = np.random.default_rng(0)
    n = 20_000
    X = pd.DataFrame(rng.uniform(size=(n, 3)), columns=["x1", "x2", "x3"])
    return X, rng


def test_linear_model_importance_is_abs_beta_over_sqrt12(uniform):
    X, rng = uniform
    beta = np.array([3.0, -2.0, 0.5])
    y = X.to_numpy() @ beta + rng.normal(0, 0.1, len(X))
    m = LinearRegression().fit(X, y)
    res = daskpd.pd_variance(m, X, percentiles=(0, 1))  # the full range: |beta| / sqrt(12)
    assert res.method == "importance" and res.features == ["x1", "x2", "x3"]
    # PD = b * grid + const on a 100-point grid over [min, max]: std(ddof=1) of an evenly
    # spaced grid = range * sqrt(G (G + 1) / 12) / (G - 1)
    G = 100
    expected = np.abs(m.coef_) * (X.max() - X.min()).to_numpy() * np.sqrt(G * (G + 1) / 12) / (G - 1)
    np.testing.assert_allclose(res.values, expected, rtol=1e-9)
    np.testing.assert_allclose(res.values, np.abs(beta) / np.sqrt(12), rtol=0.03)  # seed 002, up to sampling
    assert [f for f, _ in res.ranking()] == ["x1", "x2", "x3"]
    # the value is exactly std(ddof=1) of the PD curve
    assert res.values[0] == pytest.approx(np.std(res.pd["x1"].average, ddof=1), rel=1e-12)


def test_categorical_importance_is_range_over_4():
    rng = np.random.default_rng(1)
    n = 3_000
    df = pd.DataFrame({"x": rng.uniform(size=n), "g": rng.choice(["a", "b", "c"], n)})
    f = lambda d: (d["x"] + d["g"].map({"a": 0.0, "b": 2.0, "c": 1.0})).to_numpy()  # noqa: E731
    res = daskpd.pd_variance(f, df, ["x", "g"])
    assert res.values[1] == pytest.approx((2.0 - 0.0) / 4)
    assert importance_of(np.array([1.0, 5.0, 3.0]), "categorical") == pytest.approx(1.0)
    assert importance_of(np.array([1.0, 5.0, 3.0]), "numeric") == pytest.approx(2.0)


def test_interaction_formula_matches_seed002():
    """Mean of SD_i[imp_j(f(x_i, .))] and SD_j[imp_i(f(., x_j))], std with ddof=1."""
    rng = np.random.default_rng(2)
    pd2 = rng.normal(size=(6, 4))
    v, (a, b), (cj, ci) = interaction_of(pd2, ("numeric", "numeric"))
    assert a == pytest.approx(np.std([np.std(row, ddof=1) for row in pd2], ddof=1))
    assert b == pytest.approx(np.std([np.std(col, ddof=1) for col in pd2.T], ddof=1))
    assert v == pytest.approx((a + b) / 2)
    v2, (a2, _), _ = interaction_of(pd2, ("numeric", "categorical"))
    assert a2 == pytest.approx(np.std([(row.max() - row.min()) / 4 for row in pd2], ddof=1))


def test_interaction_near_zero_for_additive_and_positive_for_product(uniform):
    X, _ = uniform
    Xs = X.iloc[:4_000]
    additive = lambda d: (d["x1"] + 2 * d["x2"] ** 2 - d["x3"]).to_numpy()  # noqa: E731
    product = lambda d: (d["x1"] * d["x2"] + d["x3"]).to_numpy()  # noqa: E731
    add = daskpd.pd_variance(additive, Xs, measure="interaction")
    assert add.features == [("x1", "x2"), ("x1", "x3"), ("x2", "x3")]
    assert np.all(add.values < 1e-12)
    prod = daskpd.pd_variance(product, Xs, ["x1", "x2", "x3"], measure="interaction", percentiles=(0, 1))
    inter = dict(zip(prod.features, prod.values))
    # x1*x2 on a 20-point grid of ~[0, 1]: SD_i(x_i * SD(grid)) = SD(grid)^2 = G (G+1) / (12 (G-1)^2)
    assert inter[("x1", "x2")] == pytest.approx(20 * 21 / (12 * 19 ** 2), rel=0.01)
    assert inter[("x1", "x3")] < 1e-12 and inter[("x2", "x3")] < 1e-12
    assert prod.ranking()[0][0] == ("x1", "x2")


def test_boosted_model_on_dask_partitions_and_plots(tmp_path, uniform):
    import dask.dataframe as dd

    X, rng = uniform
    Xs = X.iloc[:3_000]
    y = Xs.x1 * Xs.x2 * 4 + Xs.x3 + rng.normal(0, 0.05, len(Xs))
    m = HistGradientBoostingRegressor(max_iter=30, random_state=0).fit(Xs, y)
    imp = daskpd.pd_variance(m, dd.from_pandas(Xs, npartitions=3), grid_resolution=20)
    inter = daskpd.pd_variance(m, Xs, [("x1", "x2"), ("x2", "x3")], measure="interaction", grid_resolution=8)
    assert inter.values[0] > 5 * inter.values[1]
    # the artists, not the file size (tick-label overlap: test_plotting.py)
    ax = imp.plot()
    np.testing.assert_allclose(sorted(p.get_width() for p in ax.patches), np.sort(imp.values))
    assert len(imp.plot(kind="detailed")) == 3
    ax = inter.plot()
    assert [t.get_text() for t in ax.get_yticklabels()] == ["x1 x x2", "x2 x x3"]
    detail = inter.plot(kind="detailed")
    assert len(detail) == 6 and detail[0].get_title().startswith("inter(x1,x2)")
    f = inter.to_frame()
    assert list(f.columns) == ["feature_1", "feature_2", "interaction", "importance_2_given_1",
                               "importance_1_given_2"]
    out = inter.to_parquet(tmp_path / "inter.parquet")
    np.testing.assert_allclose(pd.read_parquet(out).interaction, inter.values)


@pytest.mark.parametrize("kwargs, match", [
    (dict(measure="both"), "measure must be one of"),
    (dict(features="x1"), "non-empty list"),
    (dict(features=[("x1", "x2")]), "every entry must be a column name"),
    (dict(features=["x1"], measure="interaction"), "at least two features"),
    (dict(features=[("x1", "x1")], measure="interaction"), "two different columns"),
    (dict(features=["nope"]), "'nope' not found"),
    (dict(grid_resolution=1), "grid_resolution must be"),
])
def test_bad_input(uniform, kwargs, match):
    X, _ = uniform
    m = LinearRegression().fit(X.iloc[:100], X.x1.iloc[:100])
    with pytest.raises(DataError, match=match):
        daskpd.pd_variance(m, X.iloc[:200], **kwargs)


def test_constant_feature_is_refused(uniform):
    X, _ = uniform
    Xc = X.iloc[:200].assign(x3=1.0)
    m = LinearRegression().fit(Xc, Xc.x1)
    with pytest.raises(DataError, match="constant"):
        daskpd.pd_variance(m, Xc)
