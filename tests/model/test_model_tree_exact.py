"""The tree engines on every split kind: HistGradientBoosting's categorical splits (with its
own ordinal encoder, unknown and missing categories), missing-value branches, NaN grid
points, 2-way PD and PD variance -- equal to predicting every copy (scikit-learn's
``partial_dependence(method="brute")``, or daskpd's ``engine="predict"``) to 1e-9; the
per-leaf weights merged across partitions equal the one-partition result (on a real
cluster: tests/model/test_model_fpd.py::test_real_cluster_pd_ice_ale_equal_local)."""
from __future__ import annotations

import warnings

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from sklearn.ensemble import (
    HistGradientBoostingClassifier, HistGradientBoostingRegressor, RandomForestRegressor,
)
from sklearn.inspection import partial_dependence as sk_pd
from sklearn.linear_model import LinearRegression

import daskpd
from daskpd.model._pd_engine import engine_notice
from daskpd.model._predictor import resolve_predictor
from daskpd.model._tree_engine import tree_ensemble_for

TOL = 1e-9
COLORS = ["red", "green", "blue", "black", "white", "grey"]

pytestmark = pytest.mark.usefixtures("one_openmp_thread")


@pytest.fixture(scope="module")
def cat_data():
    """Two numeric columns (b with 3% NaN) and a pandas categorical with missing values;
    the response depends on the category non-monotonically (categorical splits)."""
    rng = np.random.default_rng(11)
    n = 1_500
    X = pd.DataFrame({"a": rng.uniform(size=n), "b": rng.uniform(size=n),
                      "col": pd.Categorical(rng.choice(COLORS, n), categories=COLORS)})
    X.loc[rng.random(n) < 0.05, "col"] = np.nan
    eff = X.col.map(dict(zip(COLORS, [0.0, 2.0, -1.0, 3.0, 0.5, 1.5]))).astype(float).fillna(4.0)
    y = 3 * X.a + np.sin(6 * X.b.fillna(0.2)) + eff * X.a + rng.normal(0, 0.1, n)
    X.loc[rng.random(n) < 0.03, "b"] = np.nan  # below the grid's upper percentile: b's grid gets a NaN point
    return X, y


@pytest.fixture(scope="module")
def cat_models(cat_data):
    X, y = cat_data
    reg = HistGradientBoostingRegressor(max_iter=25, max_leaf_nodes=15, random_state=0).fit(X, y)
    clf = HistGradientBoostingClassifier(max_iter=15, max_leaf_nodes=15, random_state=0).fit(X, y > np.median(y))
    return reg, clf


def _sk(model, X, res, **kw):
    """scikit-learn's brute force on daskpd's grid (its own grid cannot hold a str category
    column with missing values)."""
    feats = list(res.features)
    return sk_pd(model, X, feats, method="brute", categorical_features=["col"],
                 custom_values=dict(zip(feats, res.grid_values)), **kw)["average"][0]


def test_hgb_categorical_splits_exact_1way_2way_equal_sklearn_brute(cat_data, cat_models):
    X, _ = cat_data
    reg, _ = cat_models
    assert any(p.nodes["is_categorical"].any() for ps in reg._predictors for p in ps)
    res = daskpd.partial_dependence(reg, X, ["col", "a", ("a", "col"), ("col", "b")], grid_resolution=6)
    for key in ["col", "a", ("a", "col"), ("col", "b")]:
        assert res[key].engine == "tree-exact"
        np.testing.assert_allclose(res[key].average, _sk(reg, X, res[key]), rtol=0, atol=TOL)
    assert res["col"].params["engine"]["engine"] == "tree-exact"
    assert res["col"].params["engine"]["rows"] == len(X)


def test_hgb_categorical_probabilities_interval_engine_equal_sklearn(cat_data, cat_models):
    X, _ = cat_data
    _, clf = cat_models
    res = daskpd.partial_dependence(clf, X, ["col", ("col", "a")], grid_resolution=5)
    assert res["col"].engine == "tree-interval"  # a probability is not linear in the trees' sum
    for key in ["col", ("col", "a")]:
        np.testing.assert_allclose(res[key].average, _sk(clf, X, res[key]), rtol=0, atol=TOL)
    dec = daskpd.partial_dependence(clf, X, ("a", "col"), grid_resolution=5, response="decision_function")
    assert dec.engine == "tree-exact"
    np.testing.assert_allclose(dec.average, _sk(clf, X, dec, response_method="decision_function"), rtol=0, atol=TOL)


def test_unknown_and_missing_categories_and_nan_grid_points_follow_the_models_branches(cat_data, cat_models):
    """Grid cells with a NaN (missing) or an unseen category take the missing-value branch,
    as HistGradientBoosting's predictor does: both engines equal ``predict`` on every copy."""
    X, _ = cat_data
    reg, clf = cat_models
    Xs = X.iloc[:300].reset_index(drop=True)
    for model in (reg, clf):
        method = "predict" if model is reg else "predict_proba"
        pred = resolve_predictor(model, list(X.columns), X.dtypes, response=method,
                                 target_class=None if model is reg else True)
        tree = pred.tree
        codes = tree.grid_codes(2, np.array(["blue", "purple", np.nan, "red"], dtype=object))
        assert np.isnan(codes[1]) and np.isnan(codes[2])
        b_grid = np.array([0.1, np.nan, 0.7])
        cells = [(c, b) for c in ["blue", "purple", np.nan, "red"] for b in b_grid]
        Xt = tree.matrix(Xs)
        want = np.array([pred.predict(Xs.assign(col=pd.Categorical([c] * len(Xs), categories=COLORS + ["purple"]),
                                                b=b)).sum() for c, b in cells])
        targets = [tree.position(2), tree.position(1)]
        got = tree.curves(Xt, targets, [codes, b_grid], None, need_rows=True).sum(axis=-1).reshape(-1)
        np.testing.assert_allclose(got, want, rtol=0, atol=TOL)
        if model is reg:
            flat = tree.flat()
            W = flat.leaf_weights(Xt, targets, None)
            grid = np.array([[cc, bb] for cc in codes for bb in b_grid])
            np.testing.assert_allclose(flat.cell_sums(W, len(Xs), targets, grid), want, rtol=0, atol=TOL)


def test_missing_value_branches_forest_and_hgb(cat_data):
    """Rows with NaN in a non-grid feature follow each node's missing_go_to_left; a grid
    over the NaN feature uses its finite values."""
    X, y = cat_data
    Xn = X[["a", "b"]].copy()
    models = [RandomForestRegressor(8, max_depth=6, random_state=0).fit(Xn, y),
              HistGradientBoostingRegressor(max_iter=15, random_state=0).fit(Xn, y)]
    grid = {"b": np.array([0.05, 0.3, 0.6, 0.95])}
    for m in models:
        res = daskpd.partial_dependence(m, Xn, ["a", "b", ("a", "b")], grid_resolution=7, grid=grid)
        assert {r.engine for r in res.values()} == {"tree-exact"}
        np.testing.assert_allclose(res["a"].average, sk_pd(m, Xn, ["a"], method="brute", grid_resolution=7)
                                   ["average"][0], rtol=0, atol=TOL)
        for key in ("b", ("a", "b")):
            slow = daskpd.partial_dependence(m, Xn, key, grid_resolution=7, grid=grid, engine="predict")
            np.testing.assert_allclose(res[key].average, slow.average, rtol=0, atol=TOL)


def test_pd_variance_on_the_tree_engine_equals_predict(cat_data, cat_models):
    X, _ = cat_data
    reg, _ = cat_models
    imp = daskpd.pd_variance(reg, X, ["a", "col"], grid_resolution=8)
    imp_slow = daskpd.pd_variance(reg, X, ["a", "col"], grid_resolution=8, engine="predict")
    assert imp.params["engine"]["engine"] == "tree-exact" and imp_slow.params["engine"]["engine"] == "predict"
    np.testing.assert_allclose(imp.values, imp_slow.values, rtol=0, atol=TOL)
    inter = daskpd.pd_variance(reg, X, [("a", "col"), ("a", "b")], measure="interaction", grid_resolution=6,
                               percentiles=(0.0, 0.9))
    for pair in [("a", "col"), ("a", "b")]:
        np.testing.assert_allclose(inter.pd[pair].average, _sk(reg, X, inter.pd[pair]), rtol=0, atol=TOL)


def test_weighted_and_partitioned_leaf_weights_merge_exactly(cat_data, cat_models):
    X, _ = cat_data
    reg, _ = cat_models
    w = np.random.default_rng(3).uniform(0.1, 2.0, len(X))
    Xw = X.assign(w=w)
    one = daskpd.partial_dependence(reg, Xw, ("a", "col"), grid_resolution=5, sample_weight="w")
    parts = daskpd.partial_dependence(reg, dd.from_pandas(Xw, npartitions=4), ("a", "col"), grid_resolution=5,
                                      sample_weight="w")
    np.testing.assert_allclose(parts.average, one.average, rtol=0, atol=TOL)
    np.testing.assert_allclose(one.average, _sk(reg, X, one, sample_weight=w), rtol=0, atol=TOL)


@pytest.mark.parametrize("T, top", [(20, 4), (3, 1), (32, 6), (20, 16), (33, 4)])
def test_trial_counts_summed_as_words_or_bytes_equal_their_float_weights(cat_data, cat_models, T, top):
    """The walk sums the trials' uint8 counts 8 at a time in 16-bit lanes of words when
    a block's sums cannot reach 2^16 (here: counts up to 15, at most 32 trials), else
    byte by byte (a count of 16, or 33 trials); both give every set's leaf weights of
    the float64 weight sets to the bit (whole numbers)."""
    from daskpd.model._tree_kernels import LEVEL_BLOCK_COUNTS, count_words

    X, _ = cat_data
    reg, _ = cat_models
    pred = resolve_predictor(reg, list(X.columns), X.dtypes, response="predict", target_class=None)
    flat, Xt = pred.tree.flat(), pred.tree.matrix(X)
    rng = np.random.default_rng(T + top)
    C = rng.integers(0, top + 1, (len(X), T)).astype(np.uint8)
    C[len(X) // 2, T - 1] = top  # the largest count is there
    words = count_words(C, LEVEL_BLOCK_COUNTS)
    assert (len(words) > 0) == (top <= 15 and T <= 32)
    items = [(pred.tree.position(0),), (pred.tree.position(2),), (pred.tree.position(0), pred.tree.position(1))]
    W = np.column_stack([np.ones(len(X)), C.astype(np.float64)])
    got = flat.leaf_weight_sets(Xt, items, None, counts=C)
    want = flat.leaf_weight_sets(Xt, items, W)
    for g, w in zip(got, want):
        assert g.shape == w.shape == (flat.n_nodes, T + 1) and g.tobytes() == w.tobytes()
        assert g[:, 1:].sum() > 0


def test_brute_force_notice_warns_with_advice_above_the_threshold(cat_data, cat_models):
    X, y = cat_data
    lin = LinearRegression().fit(X[["a"]], y)
    pred = resolve_predictor(lin, ["a"], X.dtypes)
    with pytest.warns(UserWarning, match="brute force calls the model on 2.0e\\+08 rows.*reduce grid_resolution"):
        params, label = engine_notice("partial_dependence", pred, [("a",)], {"a": np.arange(100.0)},
                                      {"a": "numeric"}, 2_000_000, stacklevel=2)
    assert params["model_calls"] == 2 * 10 ** 8 and "engine predict" in label
    reg, _ = cat_models
    pred = resolve_predictor(reg, list(X.columns), X.dtypes)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # the exact engine calls no model: no warning
        params, label = engine_notice("partial_dependence", pred, [("a", "col")], {"a": np.arange(1000.0),
                                      "col": np.array(COLORS, dtype=object)}, {"a": "numeric", "col": "categorical"},
                                      10 ** 6, stacklevel=2)
    assert params["model_calls"] == 0 and "engine tree-exact" in label and "6.0e+09" in label
    assert tree_ensemble_for(lin, "predict", None, False, False) is None
