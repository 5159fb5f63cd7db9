"""Friedman PD (brute, recursion, 2-way): equal to scikit-learn on the same rows and grid,
the tree engine equal to predicting every copy, a real multi-process cluster, bad input."""
from __future__ import annotations

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from sklearn.compose import ColumnTransformer
from sklearn.ensemble import (
    GradientBoostingClassifier, GradientBoostingRegressor, HistGradientBoostingClassifier,
    HistGradientBoostingRegressor, RandomForestClassifier, RandomForestRegressor,
)
from sklearn.inspection import partial_dependence as sk_pd
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder
from sklearn.tree import DecisionTreeRegressor

import daskpd
from daskpd import DataError

TOL = 1e-9


pytestmark = pytest.mark.usefixtures("one_openmp_thread")


def make_data(n=2_000, seed=0, nan=False):
    rng = np.random.default_rng(seed)
    X = pd.DataFrame(rng.uniform(size=(n, 4)), columns=["a", "b", "c", "d"])
    y = 3 * X.a + np.sin(6 * X.b) + X.c * X.d + rng.normal(0, 0.1, n)
    if nan:
        X.loc[rng.random(n) < 0.1, "c"] = np.nan
    return X, y


@pytest.fixture(scope="module")
def reg_data():
    return make_data()


@pytest.fixture(scope="module")
def models(reg_data):
    X, y = reg_data
    yc = (y > np.median(y)).astype(int)
    y3 = np.digitize(y, np.quantile(y, [1 / 3, 2 / 3]))
    return {
        "hgb": HistGradientBoostingRegressor(max_iter=25, random_state=0).fit(X, y),
        "rf": RandomForestRegressor(12, max_depth=7, random_state=0).fit(X, y),
        "gbr": GradientBoostingRegressor(n_estimators=20, max_depth=3, random_state=0).fit(X, y),
        "lin": LinearRegression().fit(X, y),
        "gbc": GradientBoostingClassifier(n_estimators=15, random_state=0).fit(X, yc),
        "hgbc3": HistGradientBoostingClassifier(max_iter=15, random_state=0).fit(X, y3),
        "rfc": RandomForestClassifier(10, max_depth=6, random_state=0).fit(X, yc),
        "logit": LogisticRegression().fit(X, yc),
    }


def _sk(model, X, features, **kw):
    return sk_pd(model, X, list(features), method="brute", **kw)


# ------------------------------------------------------------------ equal to scikit-learn


@pytest.mark.parametrize("name", ["hgb", "rf", "gbr", "lin", "gbc", "rfc", "logit"])
@pytest.mark.parametrize("engine", ["auto", "predict"])
def test_brute_equals_sklearn_1way(models, reg_data, name, engine):
    X, _ = reg_data
    m = models[name]
    sk = _sk(m, X, ["b"], grid_resolution=25)
    res = daskpd.partial_dependence(m, X, "b", grid_resolution=25, engine=engine)
    np.testing.assert_array_equal(res.grid_values[0], sk["grid_values"][0])  # exact percentiles
    np.testing.assert_allclose(res.average, sk["average"][0], rtol=0, atol=TOL)
    expected_engine = ("predict" if engine == "predict" or name in ("lin", "logit") else
                       "tree-interval" if name == "gbc" else "tree-exact")  # gbc: probabilities, a non-linear link
    assert res.engine == expected_engine


@pytest.mark.parametrize("name", ["hgb", "gbc", "rf"])
def test_brute_equals_sklearn_2way_and_several_features_in_one_pass(models, reg_data, name):
    X, _ = reg_data
    m = models[name]
    res = daskpd.partial_dependence(m, X, ["a", ("b", "c"), "d"], grid_resolution=8)
    assert list(res) == ["a", ("b", "c"), "d"]
    sk2 = _sk(m, X, ["b", "c"], grid_resolution=8)
    assert res[("b", "c")].average.shape == (8, 8)
    np.testing.assert_allclose(res[("b", "c")].average, sk2["average"][0], rtol=0, atol=TOL)
    for f in ("a", "d"):
        np.testing.assert_allclose(res[f].average, _sk(m, X, [f], grid_resolution=8)["average"][0], atol=TOL)


def test_multiclass_target_class_and_decision_function(models, reg_data):
    X, _ = reg_data
    m = models["hgbc3"]
    sk = _sk(m, X, ["a"], grid_resolution=10)  # (3 classes, grid)
    for k, cls in enumerate(m.classes_):
        res = daskpd.partial_dependence(m, X, "a", grid_resolution=10, target_class=cls)
        np.testing.assert_allclose(res.average, sk["average"][k], atol=TOL)
    skd = sk_pd(m, X, ["a"], method="brute", grid_resolution=10, response_method="decision_function")
    res = daskpd.partial_dependence(m, X, "a", grid_resolution=10, target_class=2, response="decision_function")
    np.testing.assert_allclose(res.average, skd["average"][2], atol=TOL)
    every = daskpd.partial_dependence(m, X, "a", grid_resolution=10)  # scikit-learn's reading: every class
    assert every.outputs == list(m.classes_) and every.average.shape == (3, 10)
    np.testing.assert_allclose(every["average"], sk["average"], rtol=0, atol=TOL)


def test_binary_negative_class_is_one_minus_positive(models, reg_data):
    X, _ = reg_data
    pos = daskpd.partial_dependence(models["gbc"], X, "a", grid_resolution=10)
    neg = daskpd.partial_dependence(models["gbc"], X, "a", grid_resolution=10, target_class=0)
    np.testing.assert_allclose(pos.average + neg.average, 1.0, atol=1e-12)
    assert pos.response == "predict_proba" and pos.target_class == 1


def test_sample_weight_equals_sklearn_and_is_a_column_or_array(models, reg_data):
    X, _ = reg_data
    w = np.random.default_rng(1).uniform(0, 3, len(X))
    m = models["hgb"]
    sk = _sk(m, X, ["b"], grid_resolution=15, sample_weight=w)
    by_array = daskpd.partial_dependence(m, X, "b", grid_resolution=15, sample_weight=w)
    by_column = daskpd.partial_dependence(m, X.assign(w=w), "b", grid_resolution=15, sample_weight="w")
    np.testing.assert_allclose(by_array.average, sk["average"][0], atol=TOL)
    np.testing.assert_allclose(by_column.average, sk["average"][0], atol=TOL)
    assert by_column.weight_sum == pytest.approx(w.sum())


def test_nan_in_other_features_routed_like_sklearn():
    X, y = make_data(1_500, seed=4, nan=True)
    m = HistGradientBoostingRegressor(max_iter=20, random_state=0).fit(X, y)
    sk = _sk(m, X, ["a"], grid_resolution=12)
    for engine in ("tree", "predict"):
        res = daskpd.partial_dependence(m, X, "a", grid_resolution=12, engine=engine)
        np.testing.assert_allclose(res.average, sk["average"][0], atol=TOL)


def test_numpy_fitted_model_takes_columns_and_custom_grid():
    X, y = make_data(1_200, seed=5)
    m = HistGradientBoostingRegressor(max_iter=15, random_state=0).fit(X.to_numpy(), y)
    grid = np.array([0.9, 0.1, 0.5, 0.33])  # unsorted, as given
    sk = sk_pd(m, X.to_numpy(), [2], method="brute", custom_values={2: grid})
    res = daskpd.partial_dependence(m, X.assign(extra=1.0), "c", grid=grid, columns=["a", "b", "c", "d"])
    np.testing.assert_array_equal(res.grid_values[0], grid)
    np.testing.assert_allclose(res.average, sk["average"][0], atol=TOL)
    with pytest.raises(DataError, match="pass columns="):
        daskpd.partial_dependence(m, X.assign(extra=1.0), "c")


def test_few_distinct_values_use_them_all_and_dask_partitions_agree(models, reg_data):
    X, _ = reg_data
    Xr = X.assign(a=np.round(X.a * 6) / 6)  # 7 distinct values
    m = models["rf"]
    sk = _sk(m, Xr, ["a"], grid_resolution=20)
    res = daskpd.partial_dependence(m, dd.from_pandas(Xr, npartitions=5), "a", grid_resolution=20)
    np.testing.assert_array_equal(res.grid_values[0], np.unique(Xr.a))
    np.testing.assert_allclose(res.average, sk["average"][0], atol=TOL)


def test_categorical_feature_through_a_pipeline_equals_sklearn():
    rng = np.random.default_rng(6)
    n = 1_500
    X = pd.DataFrame({"x": rng.uniform(size=n), "color": rng.choice(["red", "green", "blue"], n)})
    y = X.x * 2 + X.color.map({"red": 0.0, "green": 1.0, "blue": 3.0}) + rng.normal(0, 0.1, n)
    pipe = make_pipeline(ColumnTransformer([("oh", OneHotEncoder(), ["color"])], remainder="passthrough"),
                         LinearRegression()).fit(X, y)
    sk = sk_pd(pipe, X, ["color"], categorical_features=["color"], method="brute")
    res = daskpd.partial_dependence(pipe, X, "color")
    assert res.kinds == ("categorical",)
    assert list(res.grid_values[0]) == list(sk["grid_values"][0])
    np.testing.assert_allclose(res.average, sk["average"][0], atol=TOL)
    both = daskpd.partial_dependence(pipe, X, ("x", "color"), grid_resolution=5)
    assert both.average.shape == (5, 3)
    # categorical PD: blue - red ~ 3
    assert res.average[list(res.grid_values[0]).index("blue")] - res.average[
        list(res.grid_values[0]).index("red")] == pytest.approx(3.0, abs=0.1)


def test_a_plain_function_of_a_dataframe():
    X, _ = make_data(500, seed=7)
    res = daskpd.partial_dependence(lambda df: (2 * df["a"] + df["b"] ** 2).to_numpy(), X, "a",
                                    grid=[0.0, 0.5, 1.0])
    np.testing.assert_allclose(res.average, 2 * np.array([0.0, 0.5, 1.0]) + np.mean(X.b ** 2), atol=1e-12)
    assert res.response == "function" and res.engine == "predict"


# ------------------------------------------------------------------ recursion


@pytest.mark.parametrize("name", ["hgb", "gbr", "rf"])
def test_recursion_equals_sklearn_recursion(models, reg_data, name):
    X, _ = reg_data
    m = models[name]
    sk = sk_pd(m, X, ["b"], method="recursion", grid_resolution=20)
    res = daskpd.partial_dependence(m, X, "b", method="recursion", grid_resolution=20)
    assert res.method == "recursion"
    np.testing.assert_allclose(res.average, sk["average"][0], atol=TOL)
    sk2 = sk_pd(m, X, ["a", "c"], method="recursion", grid_resolution=6)
    res2 = daskpd.partial_dependence(m, X, ("a", "c"), method="recursion", grid_resolution=6)
    np.testing.assert_allclose(res2.average, sk2["average"][0], atol=TOL)


def test_recursion_classifier_decision_function_and_auto(models, reg_data):
    X, _ = reg_data
    m = models["gbc"]
    sk = sk_pd(m, X, ["a"], method="recursion", grid_resolution=10)
    res = daskpd.partial_dependence(m, X, "a", method="recursion", response="decision_function",
                                    grid_resolution=10)
    np.testing.assert_allclose(res.average, sk["average"][0], atol=TOL)
    assert daskpd.partial_dependence(models["hgb"], X, "a", method="auto", grid_resolution=5).method == "recursion"
    assert daskpd.partial_dependence(m, X, "a", method="auto", grid_resolution=5).method == "brute"  # proba
    with pytest.raises(DataError, match="decision function"):
        daskpd.partial_dependence(m, X, "a", method="recursion")


def test_seed003_recursion_differs_from_brute():
    """Seed 003's degenerate example: one point with y=1000, a tree whose right branch rests
    on two training samples.  Recursion weights its two leaves 1/2-1/2 (500); brute force
    sends almost every real x1 to the 1000 leaf (950)."""
    x0 = np.r_[np.linspace(-10, -1, 18), 5.0, 5.0]
    x1 = np.r_[np.linspace(0, 7, 18), 5.0, 10.0]
    y = np.r_[np.zeros(18), 1000.0, 0.0]
    X = pd.DataFrame({"x0": x0, "x1": x1})
    tree = DecisionTreeRegressor(max_depth=2, random_state=0).fit(X, y)
    assert tree.tree_.feature[0] == 0  # the root splits on x0, as in the blog
    rec = daskpd.partial_dependence(tree, X, "x0", method="recursion", grid=[4.0])
    brute = daskpd.partial_dependence(tree, X, "x0", method="brute", grid=[4.0])
    assert rec.average[0] == pytest.approx(500.0)
    assert brute.average[0] == pytest.approx(950.0)
    assert rec.average[0] == pytest.approx(
        sk_pd(tree, X, ["x0"], method="recursion", custom_values={"x0": [4.0]})["average"][0][0])
    assert brute.average[0] == pytest.approx(
        sk_pd(tree, X, ["x0"], method="brute", custom_values={"x0": [4.0]})["average"][0][0])


# ------------------------------------------------------------------ tree engine, big batches


def test_tree_engine_equals_predict_engine_on_many_partitions_and_small_batches(models, reg_data):
    X, _ = reg_data
    ddf = dd.from_pandas(X, npartitions=6)
    for name in ("hgb", "gbc", "rfc"):
        a = daskpd.partial_dependence(models[name], ddf, ["a", ("a", "b")], grid_resolution=7, engine="tree")
        b = daskpd.partial_dependence(models[name], ddf, ["a", ("a", "b")], grid_resolution=7, engine="predict",
                                      batch_rows=333)
        for k in a:
            np.testing.assert_allclose(a[k].average, b[k].average, atol=TOL)


def test_parquet_input_reads_only_needed_columns(tmp_path, models, reg_data):
    X, _ = reg_data
    path = tmp_path / "t.parquet"
    X.assign(junk="x" * 3, w=1.0).to_parquet(path)
    res = daskpd.partial_dependence(models["hgb"], str(path), "a", grid_resolution=10, sample_weight="w")
    np.testing.assert_allclose(res.average, _sk(models["hgb"], X, ["a"], grid_resolution=10)["average"][0],
                               atol=TOL)
    out = res.to_parquet(tmp_path / "pd.parquet")
    back = pd.read_parquet(out)
    np.testing.assert_allclose(back.pd, res.average)


# ------------------------------------------------------------------ a real cluster


@pytest.fixture(scope="module")
def local_ale(models, reg_data):
    """Computed before the (function-scoped) client exists: dask's threads."""
    return daskpd.ale(models["hgb"], reg_data[0], "b")


def test_real_cluster_pd_ice_ale_equal_local(tmp_path, local_ale, client, models, reg_data):
    """Two `dask worker` processes: PD, ICE written from the workers, and ALE."""
    from distributed import get_task_stream

    X, _ = reg_data
    path = tmp_path / "data"
    dd.from_pandas(X, npartitions=4).to_parquet(path)
    m = models["hgb"]
    assert len(client.scheduler_info()["workers"]) == 2
    with get_task_stream(client) as ts:
        pd_remote = daskpd.partial_dependence(m, str(path), ["b", ("a", "b")], grid_resolution=10)
        ice_remote = daskpd.ice(m, str(path), "b", grid_resolution=10, n_lines=None, path=tmp_path / "ice")
        ale_remote = daskpd.ale(m, str(path), "b")
    maps = [t for t in ts.data if "daskpd-pd-map" in str(t["key"])]
    assert len(maps) == 4 and len({t["worker"] for t in ts.data}) == 2
    local = _sk(m, X, ["b"], grid_resolution=10)
    assert pd_remote["b"].engine == pd_remote[("a", "b")].engine == "tree-exact"  # per-leaf weights merged
    np.testing.assert_allclose(pd_remote["b"].average, local["average"][0], atol=TOL)
    np.testing.assert_allclose(pd_remote[("a", "b")].average,
                               _sk(m, X, ["a", "b"], grid_resolution=10)["average"][0], atol=TOL)
    sk_ice = sk_pd(m, X, ["b"], method="brute", grid_resolution=10, kind="individual")["individual"][0]
    np.testing.assert_allclose(ice_remote.lines, sk_ice, atol=TOL)
    written = pd.read_parquet(tmp_path / "ice").sort_values(["partition", "row", "x"])  # the long ICE table
    np.testing.assert_allclose(written.ice.to_numpy().reshape(len(X), -1), sk_ice, atol=TOL)
    np.testing.assert_array_equal(ale_remote.x, local_ale.x)
    np.testing.assert_allclose(ale_remote.ale, local_ale.ale, atol=1e-12)


# ------------------------------------------------------------------ plots


def test_pd_plots_render(tmp_path, models, reg_data):
    X, _ = reg_data
    res = daskpd.partial_dependence(models["hgb"], X, ["a", ("a", "b")], grid_resolution=8)
    # the artists, not the file size (more in test_plotting.py)
    line = res["a"].plot()
    (ln,) = line.get_lines()
    np.testing.assert_allclose(ln.get_xdata(), res["a"].grid_values[0])
    np.testing.assert_allclose(ln.get_ydata(), res["a"].average)
    assert line.get_xlabel() == "a" and line.get_ylabel().startswith("partial dependence of")
    contour = res[("a", "b")].plot()
    assert contour.get_xlabel() == "a" and contour.get_ylabel() == "b" and len(contour.figure.axes) == 2  # colour bar
    heat = res[("a", "b")].plot(kind="heatmap")
    (img,) = heat.get_images()
    np.testing.assert_allclose(img.get_array(), np.asarray(res[("a", "b")].average).T)


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize("kwargs, match", [
    (dict(features="nope"), "'nope' not found"),
    (dict(features=("a", "a")), "two different columns"),
    (dict(features=["a", "a"]), "more than once"),
    (dict(features=9), r"column index 9 is out of range: data has 4 columns"),  # an index: scikit-learn's form
    (dict(features=1.5), "must be a column name"),
    (dict(grid_resolution=1), "grid_resolution must be an integer >= 2"),
    (dict(percentiles=(0.9, 0.1)), r"percentiles must be a pair of numbers \(lo, hi\) with 0 <= lo < hi <= 1"),
    (dict(percentiles=(0, 2)), r"percentiles must be .* 0 <= lo < hi <= 1; got \(0, 2\)"),
    (dict(method="fast"), "method must be one of"),
    (dict(response="predict_log"), "response must be one of"),
    (dict(engine="gpu"), "engine must be one of"),
    (dict(grid={"b": [1, 2]}), "not among the requested features"),
    (dict(grid={"a": [np.nan]}), "missing or infinite"),
    (dict(sample_weight=np.ones(3)), "one weight per row"),
    (dict(sample_weight="zz"), "'zz' not found"),
    (dict(columns=["a", "b"]), "differs from the model's feature_names_in_"),
    (dict(target_class=7), "not one of the model's classes"),
    (dict(batch_rows=0), "batch_rows must be"),
])
def test_bad_parameters_are_named(models, reg_data, kwargs, match):
    X, _ = reg_data
    kw = dict(features="a")
    kw.update(kwargs)
    model = models["gbc"] if "target_class" in kwargs else models["hgb"]
    with pytest.raises(DataError, match=match):
        daskpd.partial_dependence(model, X, **kw)


def test_bad_models_and_methods(models, reg_data):
    X, _ = reg_data
    with pytest.raises(DataError, match="not fitted"):
        daskpd.partial_dependence(HistGradientBoostingRegressor(), X, "a")
    with pytest.raises(DataError, match="must be a fitted model"):
        daskpd.partial_dependence(object(), X, "a")
    with pytest.raises(DataError, match="recursion' needs one of"):
        daskpd.partial_dependence(models["lin"], X, "a", method="recursion")
    with pytest.raises(DataError, match="cannot use sample_weight"):
        daskpd.partial_dependence(models["hgb"], X, "a", method="recursion", sample_weight=np.ones(len(X)))
    with pytest.raises(DataError, match="engine='tree' needs"):
        daskpd.partial_dependence(models["lin"], X, "a", engine="tree")
    with pytest.raises(DataError, match="class labels"):
        daskpd.partial_dependence(models["gbc"], X, "a", response="predict")
    with pytest.raises(DataError, match="negative values"):
        daskpd.partial_dependence(models["hgb"], X.assign(w=-1.0), "a", sample_weight="w")
    with pytest.raises(DataError, match="not among the model's input columns"):
        daskpd.partial_dependence(models["hgb"], X.assign(e=1.0), "e")


# ------------------------------------------------------------------ exact quantiles without collecting


@pytest.mark.parametrize("dist", ["uniform", "lognormal_spike"])
def test_order_statistics_by_histogram_refinement_are_exact(dist):
    from daskpd._engine.stats import order_statistics, summarize

    rng = np.random.default_rng(8)
    n = 30_000
    if dist == "uniform":
        v = rng.uniform(-5, 5, n)
    else:  # heavy tail plus a spike of ties: several refinement levels, then "all equal"
        v = np.r_[rng.lognormal(0, 3, n - 5_000), np.full(5_000, 2.5)]
        rng.shuffle(v)
    v[:7] = np.nan
    ddf = dd.from_pandas(pd.DataFrame({"v": v}), npartitions=5)
    sums = summarize(ddf, {"v": "numeric"})
    assert sums["v"].uniques is None and sums["v"].n == n - 7
    ranks = [0, 1, 17, 8_000, 14_999, 15_000, n - 8]
    got = order_statistics(ddf, sums, {"v": ranks}, collect_cap=500)  # forces histogram passes
    srt = np.sort(v[np.isfinite(v)])
    assert [got["v"][r] for r in ranks] == [srt[r] for r in ranks]
