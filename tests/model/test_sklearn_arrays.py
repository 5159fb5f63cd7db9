"""scikit-learn's X: numpy and dask arrays, integer column indices and feature_names, in
every model-based function and the Display.  An array gives the numbers of the
equivalent DataFrame (bit for bit: it becomes that DataFrame), and scikit-learn's on the
same array; errors name the parameter."""
from __future__ import annotations

import warnings

import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.inspection import partial_dependence as sk_pd

import daskpd
from daskpd import DataError, InvalidParameterError

NAMES = ["a", "b", "c", "d"]


@pytest.fixture(scope="module")
def xy():
    rng = np.random.default_rng(7)
    X = rng.normal(size=(1500, 4))
    X[:, 3] = rng.integers(0, 4, 1500)  # a small discrete column (categorical by index below)
    y = X[:, 0] ** 2 + X[:, 1] * X[:, 2] + 0.5 * X[:, 3] + rng.normal(scale=0.1, size=1500)
    return X, y


@pytest.fixture(scope="module")
def model(xy):
    X, y = xy
    return HistGradientBoostingRegressor(max_iter=15, random_state=0).fit(X, y)  # fitted without names


def _calls(model, y):
    """Every model-based function, called the scikit-learn way (indices), and what to compare."""
    q = dict(progress=False)
    return {
        "partial_dependence": lambda X, **k: daskpd.partial_dependence(model, X, 1, method="brute", grid_resolution=9,
                                                                      **k, **q).average,
        "partial_dependence 2-way": lambda X, **k: daskpd.partial_dependence(model, X, (1, 2), method="brute",
                                                                            grid_resolution=5, **k, **q).average,
        "ice": lambda X, **k: daskpd.ice(model, X, 0, grid_resolution=7, n_lines=9, **k, **q).lines,
        "ale": lambda X, **k: next(iter(daskpd.ale(model, X, [0], bins=8, **k, **q).values())).ale,
        "pd_variance": lambda X, **k: daskpd.pd_variance(model, X, [0, 1], grid_resolution=6, **k, **q).values,
        "marginal": lambda X, t=y, **k: daskpd.marginal(X, 0, target=t, model=model, bins=6, **k, **q).y_mean,
        "compare": lambda X, t=y, **k: daskpd.compare(model, X, 2, target=t, grid_resolution=8, bins=6,
                                                      stratpd=False, **k, **q).to_frame()["value"].to_numpy(),
        "h_statistic": lambda X, **k: daskpd.h_statistic(model, X, [(0, 1), (1, 2)], features=[1], n_points=40,
                                                         **k, **q).to_frame()["h2"].to_numpy(),
    }


@pytest.mark.parametrize("name", ["partial_dependence", "partial_dependence 2-way", "ice", "ale", "pd_variance",
                                  "marginal", "compare", "h_statistic"])
def test_array_equals_the_dataframe(xy, model, name):
    X, y = xy
    call = _calls(model, y)[name]
    frame = pd.DataFrame(X, columns=[f"x{i}" for i in range(4)])  # scikit-learn's default names
    want = np.asarray(call(frame))
    np.testing.assert_array_equal(np.asarray(call(X)), want)  # numpy: the same DataFrame, bit for bit
    named = np.asarray(call(X, feature_names=NAMES))
    np.testing.assert_array_equal(named, want)
    # a dask array: the dask DataFrame of the same row blocks, bit for bit
    Xd = da.from_array(X, chunks=(400, 2))
    ddf = dd.from_dask_array(Xd.rechunk({1: -1}), columns=[f"x{i}" for i in range(4)])
    if name in ("marginal", "compare"):  # the target: a column of the dask DataFrame
        yd = da.from_array(y, chunks=400)
        ddf = ddf.assign(y=dd.from_dask_array(yd))
        np.testing.assert_array_equal(np.asarray(call(Xd, t=yd)), np.asarray(call(ddf, t="y")))
    else:
        np.testing.assert_array_equal(np.asarray(call(Xd)), np.asarray(call(ddf)))
    np.testing.assert_allclose(np.asarray(call(Xd)), want, rtol=0, atol=1e-12)


def test_names_indices_and_sklearns_numbers(xy, model):
    X, y = xy
    r = daskpd.partial_dependence(model, X, [1, (0, 2)], feature_names=NAMES, method="brute", grid_resolution=6,
                                  progress=False)
    assert list(r) == ["b", ("a", "c")]  # results are named by feature_names
    assert r["b"].to_frame()["feature"].iloc[0] == "b"
    for ours, feats in ((r["b"], [1]), (r[("a", "c")], [(0, 2)])):
        sk = sk_pd(model, X, feats, method="brute", grid_resolution=6)
        for u, v in zip(ours["grid_values"], sk["grid_values"]):
            np.testing.assert_array_equal(u, v)
        np.testing.assert_allclose(ours["average"], sk["average"], rtol=0, atol=1e-12)
    # a model fitted on a DataFrame names an array's columns itself
    named_model = HistGradientBoostingRegressor(max_iter=5, random_state=0).fit(pd.DataFrame(X, columns=NAMES), y)
    assert daskpd.ice(named_model, X, 2, n_lines=3, progress=False).feature == "c"
    # indices count a DataFrame's columns too, as in scikit-learn
    frame = pd.DataFrame(X, columns=NAMES)
    assert daskpd.ale(named_model, frame, 3, progress=False).feature == "d"
    h = daskpd.h_statistic(model, X, [(1, 2)], features=[0], feature_names=NAMES, n_points=30, progress=False)
    assert h.pairs == [("b", "c")] and h.features == ["a"]
    # a list of indices is separate 1-way PDs here: warned as a list of names is
    with pytest.warns(daskpd.SklearnDifferenceWarning, match="ONE 2-way"):
        daskpd.partial_dependence(model, X, [0, 1], method="brute", grid_resolution=4, progress=False)


def test_categorical_features_and_grid_by_index(xy, model):
    X, _ = xy
    q = dict(method="brute", progress=False)
    by_name = daskpd.partial_dependence(model, X, 3, categorical_features=["x3"], **q)
    assert by_name.kinds == ("categorical",) and len(by_name.grid_values[0]) == 4
    for form in ([3], np.array([False, False, False, True])):
        r = daskpd.partial_dependence(model, X, 3, categorical_features=form, **q)
        assert r.kinds == ("categorical",)
        np.testing.assert_array_equal(r.average, by_name.average)
    sk = sk_pd(model, X, [3], categorical_features=[3], method="brute")
    np.testing.assert_allclose(by_name["average"], sk["average"], rtol=0, atol=1e-12)
    g = daskpd.partial_dependence(model, X, 0, grid={0: [-1.0, 0.0, 1.0]}, **q)
    np.testing.assert_array_equal(g.grid_values[0], [-1.0, 0.0, 1.0])
    with pytest.raises(InvalidParameterError, match="categorical_features: a boolean mask needs one entry per column"):
        daskpd.partial_dependence(model, X, 3, categorical_features=[True, False], **q)


def test_target_and_weights_as_values(xy, model):
    X, y = xy
    frame = pd.DataFrame(X, columns=NAMES)
    q = dict(model=model, bins=5, progress=False)
    m1 = daskpd.marginal(frame.assign(y=y), "a", target="y", **q)
    m2 = daskpd.marginal(frame, "a", target=y, **q)  # a DataFrame and y values
    m3 = daskpd.marginal(frame, "a", target=pd.Series(y, name="price"), **q)
    np.testing.assert_array_equal(m1.y_mean, m2.y_mean)
    np.testing.assert_array_equal(m1.y_mean, m3.y_mean)
    assert m2.target == "y" and m3.target == "price"
    w = np.linspace(0.5, 2, len(y))
    Xd = da.from_array(X, chunks=(500, 4))
    wd = daskpd.partial_dependence(model, Xd, 0, sample_weight=da.from_array(w, chunks=500), method="brute",
                                   grid_resolution=5, progress=False)
    wn = daskpd.partial_dependence(model, X, 0, sample_weight=w, method="brute", grid_resolution=5, progress=False)
    np.testing.assert_allclose(wd.average, wn.average, rtol=0, atol=1e-12)
    md = daskpd.marginal(Xd, 0, target=da.from_array(y, chunks=500), model=model, bins=5, progress=False)
    np.testing.assert_allclose(md.y_mean, daskpd.marginal(X, 0, target=y, **{**q, "model": model}).y_mean,
                               rtol=0, atol=1e-12)


def test_errors_name_the_parameter(xy, model):
    X, y = xy
    q = dict(progress=False)
    with pytest.raises(InvalidParameterError, match=r"parameter data: an array must be 2-D .* shape \(1500,\)"):
        daskpd.partial_dependence(model, X[:, 0], 0, **q)
    with pytest.raises(InvalidParameterError, match=r"parameter features: column index 4 is out of range: data has "
                                                    r"4 columns \(indices 0 to 3\)"):
        daskpd.partial_dependence(model, X, 4, **q)
    with pytest.raises(InvalidParameterError, match="parameter feature: column index 9"):
        daskpd.ice(model, X, 9, **q)
    with pytest.raises(InvalidParameterError, match="parameter feature_names has 3 names but data has 4 columns"):
        daskpd.ale(model, X, 0, feature_names=["a", "b", "c"], **q)
    with pytest.raises(InvalidParameterError, match="parameter feature_names repeats"):
        daskpd.ale(model, X, 0, feature_names=["a", "a", "c", "d"], **q)
    with pytest.raises(InvalidParameterError, match="parameter feature_names names the columns of an array"):
        daskpd.ale(model, pd.DataFrame(X), 0, feature_names=NAMES, **q)
    with pytest.raises(InvalidParameterError, match=r"parameter target: values must be one per row of data \(1,500\)"):
        daskpd.marginal(X, 0, target=y[:10], **q)
    with pytest.raises(InvalidParameterError, match="the Series' index differs from data's"):
        daskpd.marginal(pd.DataFrame(X), 0, target=pd.Series(y, index=np.arange(len(y)) + 5), **q)
    with pytest.raises(InvalidParameterError, match="values can be given only with in-memory data"):
        daskpd.marginal(dd.from_pandas(pd.DataFrame(X, columns=NAMES), npartitions=2), "a", target=y, **q)
    with pytest.raises(DataError, match="'e' not found in data"):
        daskpd.partial_dependence(model, X, "e", feature_names=NAMES, **q)


def test_display_takes_an_array(xy, model):
    import matplotlib

    matplotlib.use("Agg")
    from sklearn.inspection import PartialDependenceDisplay as SkDisplay

    from daskpd.plotting import PartialDependenceDisplay

    X, _ = xy
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", daskpd.SklearnDifferenceWarning)
        for Xin in (X, da.from_array(X, chunks=(500, 4))):
            ours = PartialDependenceDisplay.from_estimator(model, Xin, [0, (1, 2)], feature_names=NAMES,
                                                           grid_resolution=7, method="brute", progress=False)
            theirs = SkDisplay.from_estimator(model, X, [0, (1, 2)], feature_names=NAMES, grid_resolution=7,
                                              method="brute")
            assert [a.get_xlabel() for a in ours.axes_.ravel()] == [a.get_xlabel() for a in theirs.axes_.ravel()]
            for u, v in zip(ours.pd_results, theirs.pd_results):
                np.testing.assert_allclose(u["average"], v["average"], rtol=0, atol=1e-12)
    import matplotlib.pyplot as plt

    plt.close("all")


def test_dask_array_on_a_cluster(client, xy, model):
    X, y = xy
    Xd = da.from_array(X, chunks=(500, 4))
    local = daskpd.ale(model, X, 1, bins=6, progress=False)
    dist = daskpd.ale(model, Xd, 1, bins=6, progress=False)
    np.testing.assert_allclose(dist.ale, local.ale, rtol=0, atol=1e-12)


def test_pipeline_with_a_column_transformer_on_an_array(xy):
    """A Pipeline whose ColumnTransformer selects columns by index, fitted on a numpy
    array: every function takes the array and indices, with scikit-learn's numbers."""
    from sklearn.compose import ColumnTransformer
    from sklearn.inspection import PartialDependenceDisplay as SkDisplay
    from sklearn.linear_model import Ridge
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, SplineTransformer

    from daskpd.plotting import PartialDependenceDisplay

    X, y = xy
    pipe = make_pipeline(ColumnTransformer([("oh", OneHotEncoder(handle_unknown="ignore"), [3]),
                                            ("spline", SplineTransformer(n_knots=6), [0, 1, 2])]), Ridge(alpha=1e-3))
    pipe.fit(X, y)
    q = dict(progress=False, method="brute")
    r = daskpd.partial_dependence(pipe, X, [0, 3], categorical_features=[3], grid_resolution=8, **q)
    for f, ours in zip((0, 3), r.values()):
        sk = sk_pd(pipe, X, [f], categorical_features=[3], grid_resolution=8, method="brute")
        np.testing.assert_array_equal(ours["grid_values"][0], sk["grid_values"][0])
        np.testing.assert_allclose(ours["average"], sk["average"], rtol=0, atol=1e-10)
    assert r["x3"].engine == "predict" and r["x3"].kinds == ("categorical",)
    ice = daskpd.ice(pipe, X, 0, grid_resolution=6, n_lines=None, progress=False)
    ind = sk_pd(pipe, X, [0], grid_resolution=6, method="brute", kind="individual")["individual"][0]
    np.testing.assert_allclose(ice.lines, ind, rtol=0, atol=1e-10)
    ale = daskpd.ale(pipe, X, 3, categorical_features=[3], progress=False)
    assert ale.kind == "categorical" and len(ale.x) == 4
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", daskpd.SklearnDifferenceWarning)
        ours = PartialDependenceDisplay.from_estimator(pipe, X, [1, (0, 2)], feature_names=NAMES, grid_resolution=6,
                                                       progress=False)
    theirs = SkDisplay.from_estimator(pipe, X, [1, (0, 2)], feature_names=NAMES, grid_resolution=6)
    for u, v in zip(ours.pd_results, theirs.pd_results):
        np.testing.assert_allclose(u["average"], v["average"], rtol=0, atol=1e-10)
    plt.close("all")
