"""Friedman & Popescu's H-statistic (daskpd.h_statistic) against ground truth and the plain
reference of tests/reference_hstat.py: known interactions with their analytic values,
any callable (brute force), tree models (the tree engines equal brute force), bootstrap
trials (each trial is the weighted statistic of its draw), a real cluster (the same
numbers as dask's threads), the merged job plan, and bad input."""
from __future__ import annotations

import sys
from pathlib import Path

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

import daskpd
from daskpd import DataError, InvalidParameterError
from daskpd._engine.hashing import bootstrap_counts, content_hash, keyed_hash
from daskpd.model._hstat_pass import H_SALT

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from reference_hstat import reference_h_statistic  # noqa: E402

PAIRS = [("x1", "x2"), ("x1", "x3"), ("x2", "x3")]
TOL = 1e-10


def additive_x13(df):
    """f = x1 + x2 + x1 * x3: x2 interacts with nothing, x1 with x3."""
    return df["x1"].to_numpy() + df["x2"].to_numpy() + df["x1"].to_numpy() * df["x3"].to_numpy()


def uniform_frame(n, seed=0):
    rng = np.random.default_rng(seed)
    return pd.DataFrame({c: rng.uniform(-1, 1, n) for c in ("x1", "x2", "x3")})


def h_of(res, pair=None, feature=None):
    if pair is not None:
        return float(res.h2[res.pairs.index(pair)])
    return float(res.h2_total[res.features.index(feature)])


@pytest.fixture(scope="module")
def trees(one_openmp_thread):
    from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor, RandomForestRegressor

    rng = np.random.default_rng(1)
    n = 80
    X = pd.DataFrame({"x1": rng.uniform(-1, 1, n), "c": pd.Categorical(rng.choice(list("abcd"), n)),
                      "x3": rng.uniform(-1, 1, n)})
    X.loc[:7, "x1"] = np.nan  # missing values go the trees' missing-value way
    y = np.nan_to_num(X.x1) * (X.c.cat.codes - 1.5) + X.x3 + np.sin(3 * X.x3) * np.nan_to_num(X.x1)
    Xn = X.assign(c=X.c.cat.codes.astype(float))
    return {
        "data": X,
        "hgb": HistGradientBoostingRegressor(max_iter=25, categorical_features="from_dtype", random_state=0).fit(X, y),
        "hgb_clf": HistGradientBoostingClassifier(max_iter=15, categorical_features="from_dtype",
                                                  random_state=0).fit(X, y > np.median(y)),
        "rf": (RandomForestRegressor(15, max_depth=6, random_state=0).fit(Xn.fillna(0), y), Xn.fillna(0)),
    }


# ------------------------------------------------------------------ ground truth


def test_known_interactions_exact_on_a_product_design():
    """Every row of a full factorial design of symmetric values v (E v = 0, E v^2 = s2) is an
    evaluation point, so the statistic is the data-point definition over a product
    distribution: H2(x1, x2) = 0, H2(x1, x3) = s2 / (1 + s2), H2_1 = H2_3 = s2 / (2 + s2),
    H2_2 = 0."""
    v = np.array([-1.0, -0.5, 0.0, 0.5, 1.0])
    grid = np.array(np.meshgrid(v, v, v, indexing="ij")).reshape(3, -1).T
    X = pd.DataFrame(grid, columns=["x1", "x2", "x3"])
    s2 = float(np.mean(v ** 2))
    res = daskpd.h_statistic(additive_x13, X, n_points=len(X), progress=False)
    assert res.n_points == res.n_rows == 125
    assert abs(h_of(res, ("x1", "x2"))) < 1e-12 and abs(h_of(res, ("x2", "x3"))) < 1e-12
    assert h_of(res, ("x1", "x3")) == pytest.approx(s2 / (1 + s2), abs=1e-12)
    assert h_of(res, feature="x1") == pytest.approx(s2 / (2 + s2), abs=1e-12)
    assert h_of(res, feature="x3") == pytest.approx(s2 / (2 + s2), abs=1e-12)
    assert abs(h_of(res, feature="x2")) < 1e-12


def test_known_interactions_on_a_sample_of_uniform_rows():
    """x ~ U(-1, 1): H2(x1, x3) = (1/9) / (4/9) = 0.25 and H2_1 = H2_3 = (1/9) / (7/9) = 1/7,
    estimated at 500 points of 6,000 rows."""
    res = daskpd.h_statistic(additive_x13, uniform_frame(6000), progress=False)
    assert res.n_points == 500 and res.n_rows == 6000
    assert h_of(res, ("x1", "x3")) == pytest.approx(0.25, abs=0.04)
    assert h_of(res, feature="x1") == pytest.approx(1 / 7, abs=0.03)
    assert h_of(res, feature="x3") == pytest.approx(1 / 7, abs=0.03)
    assert max(h_of(res, ("x1", "x2")), h_of(res, ("x2", "x3")), h_of(res, feature="x2")) < 1e-20


# ------------------------------------------------------------------ the reference


def test_any_callable_equals_the_reference_with_weights():
    X = uniform_frame(90, seed=3)
    w = np.random.default_rng(4).uniform(0.2, 3.0, len(X))

    def f(df):
        return np.sin(2 * df["x1"].to_numpy()) * df["x2"].to_numpy() + df["x3"].to_numpy() ** 2

    res = daskpd.h_statistic(f, X, n_points=500, sample_weight=w, progress=False)
    assert res.params["engine"]["engine"] == "predict"
    ref = reference_h_statistic(f, X, X, PAIRS, ["x1", "x2", "x3"], w=w, e=w)
    for p in PAIRS:
        assert h_of(res, p) == pytest.approx(ref["pairs"][p], abs=TOL)
    for f_ in ("x1", "x2", "x3"):
        assert h_of(res, feature=f_) == pytest.approx(ref["totals"][f_], abs=TOL)


def test_evaluation_points_are_the_bottom_k_rows_by_keyed_hash():
    """n_points < rows: the points are the rows of smallest keyed hash of the model's
    inputs (any partitioning), the PDs averages over all rows."""
    X = uniform_frame(300, seed=5)
    h = keyed_hash(content_hash(X[["x1", "x2", "x3"]]), 7, H_SALT)
    points = X.iloc[np.sort(np.argsort(h)[:40])]
    ref = reference_h_statistic(additive_x13, X, points, PAIRS, ["x1", "x3"])
    for data in (X, dd.from_pandas(X, npartitions=5)):
        res = daskpd.h_statistic(additive_x13, data, features=["x1", "x2", "x3"], pairs=PAIRS, n_points=40,
                                 random_state=7, progress=False)
        assert res.n_points == 40 and res.n_rows == 300
        for p in PAIRS:
            assert h_of(res, p) == pytest.approx(ref["pairs"][p], abs=TOL)
        for f in ("x1", "x3"):
            assert h_of(res, feature=f) == pytest.approx(ref["totals"][f], abs=TOL)


# ------------------------------------------------------------------ tree models


@pytest.mark.parametrize("name,response", [("hgb", "auto"), ("hgb_clf", "auto"), ("hgb_clf", "decision_function"),
                                           ("rf", "auto")])
def test_tree_engines_equal_brute_force_and_the_reference(trees, name, response):
    model = trees[name]
    X = trees["data"]
    if isinstance(model, tuple):
        model, X = model
    res = daskpd.h_statistic(model, X, n_points=500, response=response, progress=False)
    brute = daskpd.h_statistic(model, X, n_points=500, response=response, engine="predict", progress=False)
    engine = res.params["engine"]["engine"]
    assert engine == ("tree-interval" if (name, response) == ("hgb_clf", "auto") else "tree-exact")
    assert brute.params["engine"]["engine"] == "predict"
    np.testing.assert_allclose(res.h2, brute.h2, atol=TOL)
    np.testing.assert_allclose(res.h2_total, brute.h2_total, atol=TOL)
    if response == "decision_function":
        pf = model.decision_function
    elif hasattr(model, "predict_proba"):
        def pf(d):
            return model.predict_proba(d)[:, 1]
    else:
        pf = model.predict
    cols = list(X.columns)
    ref = reference_h_statistic(pf, X, X, res.pairs, cols)
    np.testing.assert_allclose(res.h2, [ref["pairs"][p] for p in res.pairs], atol=TOL)
    np.testing.assert_allclose(res.h2_total, [ref["totals"][f] for f in res.features], atol=TOL)
    assert res.kinds["c"] == ("categorical" if name != "rf" else "numeric")


# ------------------------------------------------------------------ bootstrap trials


def test_each_trial_is_the_statistic_of_its_weighted_draw(trees):
    """Trial t = the statistic with every row (background and points) weighted by its
    draw; the all-rows H2 is the one without trials."""
    X = uniform_frame(120, seed=6)
    plain = daskpd.h_statistic(additive_x13, X, n_points=500, progress=False)
    res = daskpd.h_statistic(additive_x13, X, n_points=500, n_trials=4, progress=False)
    np.testing.assert_allclose(res.h2, plain.h2, atol=1e-12)
    np.testing.assert_allclose(res.h2_total, plain.h2_total, atol=1e-12)
    C = bootstrap_counts(X, ["x1", "x2", "x3"], 4, 0)
    for t in range(4):
        w = daskpd.h_statistic(additive_x13, X, n_points=500, sample_weight=C[:, t].astype(float), progress=False)
        np.testing.assert_allclose(res.trials_h2[t], w.h2, atol=TOL)
        np.testing.assert_allclose(res.trials_h2_total[t], w.h2_total, atol=TOL)
    f = res.to_frame()
    assert list(f.columns) == ["feature_1", "feature_2", "h2", "h_raw", "statistic", "n_points", "n_rows",
                               "h2_std", "h2_lo", "h2_hi"]
    assert list(f.statistic) == ["pair"] * 3 + ["total"] * 3 and f.feature_2.iloc[3:].isna().all()
    row = f[(f.feature_1 == "x1") & (f.feature_2 == "x3")].iloc[0]
    assert row.h2_std == pytest.approx(np.std(res.trials_h2[:, res.pairs.index(("x1", "x3"))], ddof=1))
    assert "90% band over 4 trials" in res.summary()
    # a tree model: the exact engine carries the trials, equal to the per-row engine's
    model = trees["hgb"]
    a = daskpd.h_statistic(model, trees["data"], n_trials=3, progress=False)
    b = daskpd.h_statistic(model, trees["data"], n_trials=3, engine="predict", progress=False)
    np.testing.assert_allclose(a.trials_h2, b.trials_h2, atol=TOL)
    np.testing.assert_allclose(a.trials_h2_total, b.trials_h2_total, atol=TOL)


# ------------------------------------------------------------------ results, files


def test_frame_matrix_parquet_and_pairs_arguments(tmp_path):
    X = uniform_frame(200, seed=8)
    res = daskpd.h_statistic(additive_x13, X, ["x1", "x3"], progress=False)  # names: every pair of them
    assert res.pairs == [("x1", "x3")] and res.features == ["x1", "x3"]
    f = res.to_frame()
    assert list(f.columns[:3]) == ["feature_1", "feature_2", "h2"] and len(f) == 3
    back = pd.read_parquet(res.to_parquet(tmp_path / "h.parquet"))
    pd.testing.assert_frame_equal(back, f, check_dtype=False)
    m = res.matrix()
    assert m.loc["x1", "x3"] == m.loc["x3", "x1"] == res.h2[0] and np.isnan(m.loc["x1", "x1"])
    only_totals = daskpd.h_statistic(additive_x13, X, [], features=["x2"], progress=False)
    assert only_totals.pairs == [] and only_totals.features == ["x2"]
    no_totals = daskpd.h_statistic(additive_x13, X, [("x2", "x1")], total=False, progress=False)
    assert no_totals.features == [] and list(no_totals.to_frame().statistic) == ["pair"]
    every = daskpd.h_statistic(additive_x13, X, progress=False)  # every pair of the model's inputs
    assert every.pairs == PAIRS and every.features == ["x1", "x2", "x3"]
    assert "HStatisticResult(pairs=3" in repr(every)
    # long names: the summary wraps between entries, every line within ~100 characters
    wide = X.rename(columns=lambda c: f"a_rather_long_feature_name_{c}")
    long = daskpd.h_statistic(lambda d: additive_x13(d.rename(columns=lambda c: c[-2:])), wide, n_points=30,
                              progress=False)
    lines = long.summary().splitlines()
    assert max(map(len, lines)) <= 100 and len(lines) >= 4, lines
    assert sum(line.count(" x a_rather") for line in lines) == 3  # every pair, none cut


# ------------------------------------------------------------------ a real cluster and the merged plan


def test_real_cluster_equals_threads(tmp_path, trees, client):
    """Two `dask worker` processes give the numbers of dask's threads, bit for bit."""
    X = trees["data"]
    path = tmp_path / "data"
    dd.from_pandas(X, npartitions=4).to_parquet(path)
    with _threads():
        local = daskpd.h_statistic(trees["hgb"], str(path), n_trials=3, n_points=100, progress=False)
    remote = daskpd.h_statistic(trees["hgb"], str(path), n_trials=3, n_points=100, progress=False)
    assert len(client.scheduler_info()["workers"]) == 2
    np.testing.assert_array_equal(remote.h2, local.h2)
    np.testing.assert_array_equal(remote.h2_total, local.h2_total)
    np.testing.assert_array_equal(remote.trials_h2, local.trials_h2)


class _threads:
    """dask's threads while a distributed Client is the default: ``scheduler="threads"``."""

    def __enter__(self):
        import dask

        self._cm = dask.config.set(scheduler="threads")
        return self._cm.__enter__()

    def __exit__(self, *exc):
        return self._cm.__exit__(*exc)


def test_merged_plan_and_incremental_partials_equal_the_function():
    from daskpd.model._multi import Increment, model_methods
    from daskpd.model._params import ModelOptions

    X = uniform_frame(400, seed=9)
    opts = ModelOptions(columns=list(X.columns))
    run = model_methods(additive_x13, X, ["x1", "x2", "x3"], {"h_statistic": {"n_points": 50}}, model_options=opts)
    assert run.phases == ["h points", "model"]  # no grid: no summary pass
    one = daskpd.h_statistic(additive_x13, X, n_points=50, progress=False)
    np.testing.assert_array_equal(run.results["h_statistic"].h2, one.h2)
    np.testing.assert_array_equal(run.results["h_statistic"].h2_total, one.h2_total)
    # the layout's points, the rows in two parts: the partials add up to those of all rows
    first = model_methods(additive_x13, X.iloc[:150], ["x1", "x2", "x3"], {"h_statistic": {"n_points": 50}},
                          model_options=opts, increment=Increment(run.layout))
    second = model_methods(additive_x13, X.iloc[150:], ["x1", "x2", "x3"], {"h_statistic": {"n_points": 50}},
                           model_options=opts, increment=Increment(run.layout, first.parts))
    assert second.phases == ["model"]
    np.testing.assert_allclose(second.results["h_statistic"].h2, one.h2, atol=1e-12)
    np.testing.assert_allclose(second.results["h_statistic"].h2_total, one.h2_total, atol=1e-12)
    assert second.results["h_statistic"].n_rows == 400


# ------------------------------------------------------------------ bad input


def test_bad_input_names_what_is_wrong(trees):
    X = uniform_frame(50)
    with pytest.raises(DataError, match="'x9'"):
        daskpd.h_statistic(additive_x13, X, [("x1", "x9")], progress=False)
    with pytest.raises(InvalidParameterError, match="needs two features; got only 'x1'"):
        daskpd.h_statistic(additive_x13, X, ["x1"], progress=False)
    with pytest.raises(InvalidParameterError, match="two different columns"):
        daskpd.h_statistic(additive_x13, X, [("x1", "x1")], progress=False)
    with pytest.raises(InvalidParameterError, match="more than once"):
        daskpd.h_statistic(additive_x13, X, [("x1", "x2"), ("x2", "x1")], progress=False)
    with pytest.raises(InvalidParameterError, match="n_points"):
        daskpd.h_statistic(additive_x13, X, n_points=1, progress=False)
    with pytest.raises(DataError, match="no statistic to compute"):
        daskpd.h_statistic(additive_x13, X, [], total=False, progress=False)
    with pytest.raises(DataError, match="one input column"):
        daskpd.h_statistic(lambda d: d["x1"].to_numpy(), X[["x1"]], features=["x1"], progress=False)
    # a categorical column the model cannot read: the column and the remedy are named
    from sklearn.linear_model import LinearRegression

    lin = LinearRegression().fit(X.to_numpy(), X.x1)
    with pytest.raises(DataError, match="'x2'.*not numeric"):
        daskpd.h_statistic(lin, X.assign(x2=list("ab") * 25), columns=["x1", "x2", "x3"], progress=False)
    # a categorical feature of a model that reads categories: computed, labelled categorical
    res = daskpd.h_statistic(trees["hgb"], trees["data"], [("x1", "c")], progress=False)
    assert res.kinds == {"x1": "numeric", "c": "categorical"} and np.isfinite(res.h2).all()
