"""daskpd.compare for a categorical feature: CatStratPD, FPD on the levels, ALE on its
ordered levels and the marginal means per level, from one model pass (plus CatStratPD's
own), each equal to its standalone function, all recovering known category effects; drawn
as points per category, never as a line between categories."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from sklearn.ensemble import HistGradientBoostingRegressor  # noqa: E402

import daskpd  # noqa: E402

EFFECT = {"A": 0.0, "B": 3.0, "C": -2.0, "D": 5.0, "E": 1.0, "F": -4.0}
Q = dict(progress=False)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(11)
    n = 6000
    g = np.array(list(EFFECT))[rng.integers(0, len(EFFECT), n)]
    x = rng.normal(size=n)  # independent of g: every method's per-category effect is EFFECT's (centred)
    y = np.array([EFFECT[c] for c in g]) + np.sin(x) + rng.normal(scale=0.3, size=n)
    X = pd.DataFrame({"g": pd.Categorical(g), "x": x})
    model = HistGradientBoostingRegressor(max_iter=40, categorical_features="from_dtype", random_state=0).fit(X, y)
    return X.assign(y=y), model


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


def test_every_method_per_category_equals_its_function_and_the_truth(data):
    df, m = data
    X = df[["g", "x"]]
    r = daskpd.compare(m, df, "g", target="y", **Q)
    assert r.kind == "categorical" and list(r.curves) == ["CatStratPD", "FPD", "ALE", "marginal (y)",
                                                          "marginal (prediction)"]
    fpd = daskpd.partial_dependence(m, df, "g", columns=["g", "x"], method="brute", **Q)
    ale = daskpd.ale(m, df, "g", columns=["g", "x"], **Q)
    mp = daskpd.marginal(df, "g", target="y", model=m, columns=["g", "x"], **Q)
    cs = daskpd.catstratpd(df, target="y", feature="g", **Q)
    np.testing.assert_array_equal(r.results["FPD"].average, fpd.average)
    np.testing.assert_allclose(r.results["ALE"].ale, ale.ale, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(list(r.results["ALE"].x), list(ale.x))
    np.testing.assert_allclose(r.results["marginal"].y_mean, mp.y_mean, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(r.results["CatStratPD"].pd, cs.pd)
    truth = pd.Series(EFFECT) - np.mean(list(EFFECT.values()))
    for name, (lab, y) in r.aligned().items():  # "auto": centred over the common categories
        got = pd.Series(y, index=lab)[truth.index]
        tol = 0.25 if name.startswith("marginal") else 0.15
        np.testing.assert_allclose(got.to_numpy(), truth.to_numpy(), atol=tol, err_msg=name)
    t = r.to_frame()
    assert list(t.columns) == ["method", "g", "value", "aligned"]
    assert set(t.g) == set(EFFECT) and len(t) == 5 * len(EFFECT)
    left = r.to_frame(align="left")
    first = r.category_order("left")[0]
    assert (left[left.g == first].aligned.abs() < 1e-12).all()
    meas = r.measures().set_index("method")["pd_variance"]
    # a categorical feature's spread is Greenwell's range / 4, the pd_variance importance
    assert meas["FPD"] == pytest.approx(r.results["pd_variance"].values[0], abs=1e-12)
    assert meas["FPD"] == pytest.approx((fpd.average.max() - fpd.average.min()) / 4, abs=1e-12)
    del X


def test_categorical_comparison_drawn_as_points(data):
    from test_plot_geometry import check_axes

    df, m = data
    r = daskpd.compare(m, df, "g", target="y", n_trials=5, **Q)
    assert {"pd_variance_std"} <= set(r.measures().columns)
    ax = r.plot()
    check_axes(ax, categorical="x")
    names = [t.get_text() for t in ax.get_legend().get_texts()]
    assert names == list(r.curves)
    for line in ax.get_lines():
        if line.get_label() in names:
            assert line.get_linestyle() == "None" and line.get_marker() not in ("", "None")  # points, no line
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert ticks == r.category_order()  # ordered by CatStratPD's effect
    cs = pd.Series(*r.aligned()["CatStratPD"][::-1])
    assert list(cs.sort_values().index) == ticks


def test_categorical_ale_and_marginal_plots_draw_no_line_between_levels(data):
    df, m = data
    ale = daskpd.ale(m, df, "g", columns=["g", "x"], **Q)
    ax = ale.plot()
    drawn = [ln for ln in ax.get_lines() if ln.get_label() == "ALE"]
    assert len(drawn) == 1 and drawn[0].get_linestyle() == "None"
    mp = daskpd.marginal(df, "g", target="y", model=m, columns=["g", "x"], **Q)
    ax = mp.plot()
    for ln in ax.get_lines():
        assert ln.get_linestyle() == "None" or len(ln.get_xdata()) <= 2  # points and error bars only


def test_codes_declared_categorical(data):
    """Numeric codes (scikit-learn's arrays): categorical_features makes compare treat them as categories."""
    df, _ = data
    codes = df.g.cat.codes.to_numpy().astype(float)
    X = np.column_stack([codes, df.x.to_numpy()])
    m = HistGradientBoostingRegressor(max_iter=20, categorical_features=[0], random_state=0).fit(X, df.y)
    r = daskpd.compare(m, X, 0, target=df.y.to_numpy(), categorical_features=[0], stratpd=False, **Q)
    assert r.kind == "categorical" and r.feature == "x0" and r.target == "y"
    assert sorted(r.to_frame().x0.unique()) == ["0.0", "1.0", "2.0", "3.0", "4.0", "5.0"]
