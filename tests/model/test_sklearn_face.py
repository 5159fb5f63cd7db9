"""scikit-learn habits (issue 15, item 3): partial_dependence's kind / Bunch keys and
shapes / keyword aliases / warnings where the two libraries read a call differently,
PartialDependenceDisplay computed by daskpd, and the target-as-values error."""
from __future__ import annotations

import warnings

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor, RandomForestClassifier
from sklearn.inspection import PartialDependenceDisplay as SkDisplay
from sklearn.inspection import partial_dependence as sk_pd
from sklearn.linear_model import LinearRegression

import daskpd
from daskpd import InvalidParameterError, SklearnDifferenceWarning

TOL = 1e-10


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(3)
    X = pd.DataFrame(rng.normal(size=(400, 3)), columns=["a", "b", "c"])
    y = 2 * X.a + X.b ** 2 + 0.5 * X.a * X.c + rng.normal(scale=0.3, size=400)
    y3 = np.digitize(X.a + X.c, [-0.6, 0.6])  # 3 classes
    return X, y, y3


@pytest.fixture(scope="module")
def models(data):
    X, y, y3 = data
    return {
        "reg": HistGradientBoostingRegressor(max_iter=15, random_state=0).fit(X, y),
        "lin": LinearRegression().fit(X, y),
        "clf3": HistGradientBoostingClassifier(max_iter=10, random_state=0).fit(X, y3),
        "rfc3": RandomForestClassifier(8, max_depth=5, random_state=0).fit(X, y3),
    }


def _assert_same_bunch(ours, theirs):
    assert list(ours.keys()) == list(theirs.keys())
    for key in theirs:
        if key == "grid_values":
            assert len(ours[key]) == len(theirs[key])
            for u, v in zip(ours[key], theirs[key]):
                np.testing.assert_array_equal(u, v)
        else:
            assert ours[key].shape == theirs[key].shape, key
            np.testing.assert_allclose(ours[key], theirs[key], rtol=0, atol=TOL)


@pytest.mark.parametrize("name", ["reg", "lin", "clf3", "rfc3"])
@pytest.mark.parametrize("kind", ["average", "individual", "both"])
@pytest.mark.parametrize("features", ["b", ("a", "c")], ids=["1way", "2way"])
def test_equals_sklearn_keys_shapes_values(models, data, name, kind, features):
    X, _, _ = data
    m = models[name]
    sk_features = [features] if isinstance(features, str) else list(features)
    sk = sk_pd(m, X, sk_features, kind=kind, method="brute", grid_resolution=7)
    ours = daskpd.partial_dependence(m, dd.from_pandas(X, npartitions=3), features, kind=kind, method="brute",
                                     grid_resolution=7)
    _assert_same_bunch(ours, sk)
    _assert_same_bunch(ours.to_bunch(), sk)
    assert set(ours) == set(sk)  # iterating gives the keys, as a Bunch


def test_recursion_and_renamed_parameters_equal_sklearn_defaults(models, data):
    """scikit-learn's ``custom_values`` / ``response_method`` are ``grid`` / ``response``
    here, with the same numbers; the scikit-learn names are an unknown keyword."""
    X, _, _ = data
    m = models["reg"]
    sk = sk_pd(m, X, ["a"], custom_values={"a": [-1.0, 0.0, 1.0]})  # sklearn's default: auto -> recursion
    ours = daskpd.partial_dependence(m, X, "a", grid={"a": [-1.0, 0.0, 1.0]}, method="auto")
    assert ours.method == "recursion"
    _assert_same_bunch(ours, sk)
    sk = sk_pd(models["clf3"], X, ["a"], method="brute", response_method="decision_function", grid_resolution=5)
    _assert_same_bunch(daskpd.partial_dependence(models["clf3"], X, "a", method="brute", response="decision_function",
                                                 grid_resolution=5), sk)
    with pytest.raises(TypeError, match=r"^partial_dependence\(\): got an unexpected keyword argument "
                                        r"'response_method'$"):
        daskpd.partial_dependence(m, X, "a", response_method="predict")
    with pytest.raises(TypeError, match=r"^partial_dependence\(\): got an unexpected keyword argument "
                                        r"'custom_values'$"):
        daskpd.partial_dependence(m, X, "a", custom_values={"a": [0.0]})
    with pytest.raises(InvalidParameterError, match="method='recursion' gives only the average"):
        daskpd.partial_dependence(m, X, "a", kind="both", method="recursion")


def test_multiclass_result_keeps_daskpd_face(models, data):
    X, _, _ = data
    m = models["clf3"]
    r = daskpd.partial_dependence(m, X, "a", kind="both", method="brute", grid_resolution=4)
    assert r.outputs == [0, 1, 2] and r.average.shape == (3, 4) and r.individual.shape == (3, 400, 4)
    frame = r.to_frame()
    assert list(frame.columns[:7]) == ["feature", "kind", "x", "pd", "count", "supported", "n_rows"]
    assert frame["target_class"].tolist() == [0] * 4 + [1] * 4 + [2] * 4
    one = r.output(2)
    np.testing.assert_array_equal(one.average, r.average[2])
    single = daskpd.partial_dependence(m, X, "a", method="brute", grid_resolution=4, target_class=2)
    np.testing.assert_allclose(single.average, one.average, rtol=0, atol=TOL)
    assert single["average"].shape == (1, 4) and single.average.shape == (4,)
    ax = r.plot()  # one curve per class (tests/model/test_classifiers.py)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["P[class = 0]", "P[class = 1]", "P[class = 2]"]


def test_a_list_of_names_warns_and_says_how_to_get_the_other_reading(models, data):
    X, _, _ = data
    m = models["lin"]
    with pytest.warns(SklearnDifferenceWarning, match=r"ONE 2-way partial dependence.*\('a', 'b'\)"):
        res = daskpd.partial_dependence(m, X, ["a", "b"], grid_resolution=5)
    assert list(res) == ["a", "b"]
    with pytest.raises(KeyError, match=r"result\['a'\]\['average'\]"):
        res["average"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        quiet = daskpd.partial_dependence(m, X, [("a",), ("b",)], grid_resolution=5)  # explicit 1-way entries
        two = daskpd.partial_dependence(m, X, ("a", "b"), grid_resolution=5)
    assert list(quiet) == ["a", "b"]
    _assert_same_bunch(two, sk_pd(m, X, ["a", "b"], grid_resolution=5))


def test_brute_default_warns_where_sklearn_would_recurse(models, data):
    X, _, _ = data
    with pytest.warns(SklearnDifferenceWarning, match="method='auto' for scikit-learn's"):
        daskpd.partial_dependence(models["reg"], X, "a", grid_resolution=5)
    with pytest.warns(SklearnDifferenceWarning, match="decision function"):
        daskpd.partial_dependence(models["clf3"], X, "a", grid_resolution=5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        daskpd.partial_dependence(models["reg"], X, "a", method="brute", grid_resolution=5)  # explicit: no warning
        daskpd.partial_dependence(models["lin"], X, "a", grid_resolution=5)  # sklearn would use brute too
        daskpd.partial_dependence(models["reg"], X, "a", kind="individual", grid_resolution=5)


# ------------------------------------------------------------------ the display


def test_display_grid_of_features_equals_sklearns(models, data):
    X, _, _ = data
    m = models["reg"]
    features = ["a", "b", ("a", "c"), "c"]
    ours = daskpd.plotting.PartialDependenceDisplay.from_estimator(m, dd.from_pandas(X, npartitions=4), features,
                                                                   grid_resolution=9, method="brute", n_cols=2)
    theirs = SkDisplay.from_estimator(m, X, features, grid_resolution=9, method="brute", n_cols=2)
    assert isinstance(ours, SkDisplay)
    assert ours.axes_.shape == theirs.axes_.shape == (2, 2)
    assert len(ours.figure_.axes) == len(theirs.figure_.axes)  # the bounding axes and the 4 panels
    drawn = [ln for ln in ours.lines_.ravel() if ln is not None]
    assert len(drawn) == 3  # one PD line per 1-way panel
    assert ours.contours_[1, 0] is not None and ours.contours_[0, 0] is None
    for a, b in zip(ours.lines_.ravel(), theirs.lines_.ravel()):
        if a is not None:
            np.testing.assert_allclose(a.get_xdata(), b.get_xdata(), rtol=0, atol=TOL)
            np.testing.assert_allclose(a.get_ydata(), b.get_ydata(), rtol=0, atol=TOL)
    for k in theirs.deciles:  # exact deciles over all rows
        np.testing.assert_allclose(ours.deciles[k], theirs.deciles[k], rtol=0, atol=TOL)
    assert [ax.get_xlabel() for ax in ours.axes_.ravel()] == ["a", "b", "a", "c"]


def test_display_ice_lines_and_multiclass_target(models, data):
    X, _, _ = data
    m = models["reg"]
    D = daskpd.plotting.PartialDependenceDisplay
    d = D.from_estimator(m, X, ["a", "b"], kind="both", subsample=25, grid_resolution=6, random_state=1)
    assert d.lines_.shape == (1, 2, 26)  # 25 ICE lines + the average, per panel
    for ax in d.axes_.ravel():
        assert len(ax.get_lines()) == 26
    avg = daskpd.partial_dependence(m, X, "a", method="brute", grid_resolution=6)
    pd_line = d.lines_[0, 0, -1]
    np.testing.assert_allclose(pd_line.get_ydata(), avg.average, rtol=0, atol=TOL)
    ice = daskpd.ice(m, X, "a", grid_resolution=6, n_lines=25, random_state=1)
    drawn = sorted(tuple(np.round(ln.get_ydata(), 12)) for ln in d.lines_[0, 0, :-1])
    assert drawn == sorted(tuple(np.round(row, 12)) for row in ice.lines)  # the hash-sampled rows
    d = D.from_estimator(m, X, ["a", "c"], kind=["individual", "average"], subsample=0.05, grid_resolution=6,
                         method="brute")
    assert d.lines_.shape == (1, 2, 20)  # ceil(400 * 0.05) lines
    assert len(d.axes_[0, 0].get_lines()) == 20 and len(d.axes_[0, 1].get_lines()) == 1
    with pytest.raises(InvalidParameterError, match="target is required"):
        D.from_estimator(models["clf3"], X, ["a"])
    d = D.from_estimator(models["clf3"], X, ["a", ("a", "b")], target=2, method="brute", grid_resolution=5)
    sk = sk_pd(models["clf3"], X, ["a"], method="brute", grid_resolution=5)
    np.testing.assert_allclose(d.lines_[0, 0].get_ydata(), sk["average"][2], rtol=0, atol=TOL)
    with pytest.raises(InvalidParameterError, match="2-way entries"):
        D.from_estimator(m, X, [("a", "b")], kind="both")


# ------------------------------------------------------------------ target as values


def test_target_given_as_values_names_the_parameter_and_the_fix(data):
    X, y, _ = data
    with pytest.raises(InvalidParameterError) as e:
        daskpd.stratpd(X, target=y, feature="a")
    msg = str(e.value)
    assert "stratpd: parameter target must be a column name" in msg
    assert "a pandas Series (400 rows" in msg and "data.assign(target=values)" in msg
    assert "\n" not in msg  # the values are not printed
    # the model-based marginal plot takes y's values with in-memory data (scikit-learn's y), not with a lake
    with pytest.raises(InvalidParameterError, match="parameter target: values can be given only with in-memory data"):
        daskpd.marginal(dd.from_pandas(X, npartitions=2), "a", target=y.to_numpy())


@pytest.mark.parametrize("make", ["forest", "linear"])
def test_multi_output_regressor_gives_every_output_as_scikit_learn(make):
    from sklearn.ensemble import RandomForestRegressor
    from sklearn.inspection import partial_dependence as sk_pd
    from sklearn.linear_model import LinearRegression

    rng = np.random.default_rng(0)
    X = pd.DataFrame(rng.normal(size=(500, 3)), columns=["a", "b", "c"])
    Y = np.c_[X.a * 2 + X.b, X.b ** 2 - X.c]
    m = (RandomForestRegressor(n_estimators=5, random_state=0) if make == "forest" else LinearRegression()).fit(X, Y)
    ref = sk_pd(m, X, ["a"], kind="average", method="brute", grid_resolution=20)
    r = daskpd.partial_dependence(m, X, "a", grid_resolution=20, method="brute", progress=False)
    assert np.asarray(r["average"]).shape == ref["average"].shape == (2, 20)
    np.testing.assert_allclose(r["average"], ref["average"], rtol=1e-10, atol=1e-10)
    one = daskpd.partial_dependence(m, X, "a", grid_resolution=20, method="brute", target_class=1, progress=False)
    np.testing.assert_allclose(one.average, ref["average"][1], rtol=1e-10, atol=1e-10)
