"""daskpd.model_curves: several model-based methods in one request, one pass.

Its results must be the single public functions' bit for bit (arrays, frames and
recorded parameters), and the passes over the data are counted by wrapping the
engine's real ``build_pass`` (every pass builds one), as in test_model_multi.py.
"""
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from scipy.stats.mstats import mquantiles
from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor

import daskpd
from daskpd import InvalidParameterError

COLS = ["a", "b", "c", "d"]


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(5)
    n = 3_000  # > 1,024 distinct values per column: the grids need exact order statistics
    X = pd.DataFrame({"a": rng.uniform(-1, 1, n), "b": rng.normal(size=n), "c": rng.uniform(0, 5, n),
                      "d": rng.uniform(size=n)})
    y = X.a ** 2 + X.b * X.c + rng.normal(scale=0.1, size=n)
    model = HistGradientBoostingRegressor(max_iter=15, random_state=0).fit(X, y)
    frame = X.assign(y=y, w=rng.uniform(0.2, 3.0, n))
    return dd.from_pandas(frame, npartitions=3), model


@pytest.fixture
def passes(monkeypatch):
    """Names of the passes built (the real build_pass, wrapped where it is bound)."""
    import daskpd._engine.plan as plan
    import daskpd._strat.pipeline as pipeline
    import daskpd._strat.scan_stage as scan_stage
    import daskpd.model._passes as mpasses

    real = plan.build_pass
    names = []

    def counting(ddf, jobs, *, name="daskpd", **shape):
        names.append(name)
        return real(ddf, jobs, name=name, **shape)

    for mod in (plan, mpasses, pipeline, scan_stage):
        monkeypatch.setattr(mod, "build_pass", counting)
    return names


def _same(a, b):
    """The same result: every array, the frame and the recorded parameters."""
    pd.testing.assert_frame_equal(a.to_frame(), b.to_frame(), check_exact=True)
    assert a.params == b.params
    for name in ("average", "lines", "pd", "ale", "grid", "line_index"):
        if hasattr(b, name):
            u, v = np.asarray(getattr(a, name)), np.asarray(getattr(b, name))
            nan = u.dtype.kind == "f" and v.dtype.kind == "f"
            assert np.array_equal(u, v, equal_nan=nan), name


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_pd_ice_pair_and_custom_grid_equal_the_single_functions(data, weighted):
    ddf, model = data
    w = {"sample_weight": "w"} if weighted else {}
    grid = {"c": [0.5, 1.5, 2.5, 4.0]}
    out = daskpd.model_curves(model, ddf, {
        "partial_dependence": {"features": ["a", ("a", "c"), "b"], "grid_resolution": 9, "method": "brute"},
        "ice": {"features": ["b", "c"], "grid_resolution": 6, "n_lines": 7, "centered": True},
    }, grid=grid, columns=COLS, random_state=3, progress=False, **w)
    assert list(out) == ["partial_dependence", "ice"]
    pdp = daskpd.partial_dependence(model, ddf, ["a", ("a", "c"), "b"], grid_resolution=9, method="brute",
                                    grid=grid, columns=COLS, progress=False, **w)
    assert list(out["partial_dependence"]) == list(pdp) == ["a", ("a", "c"), "b"]
    for k in pdp:
        _same(out["partial_dependence"][k], pdp[k])
    assert np.array_equal(out["partial_dependence"][("a", "c")].grid_values[1], grid["c"])
    for f in ("b", "c"):
        ice = daskpd.ice(model, ddf, f, grid_resolution=6, n_lines=7, centered=True, random_state=3,
                         grid=grid if f == "c" else None, columns=COLS, progress=False, **w)
        _same(out["ice"][f], ice)
    if weighted:  # the weights are used: the unweighted average differs
        plain = daskpd.partial_dependence(model, ddf, "a", grid_resolution=9, method="brute", columns=COLS,
                                          progress=False)
        assert not np.array_equal(plain.average, out["partial_dependence"]["a"].average)


def test_weighted_ale_marginal_variance_equal_the_single_functions(data):
    ddf, model = data
    out = daskpd.model_curves(model, ddf, {"ale": {"features": ["a", "c"], "bins": 8},
                                           "marginal": {"features": ["b"], "bins": 6},
                                           "pd_variance": {"features": ["a", "b"], "grid_resolution": 8}},
                              target="y", sample_weight="w", columns=COLS, progress=False)
    ale = daskpd.ale(model, ddf, ["a", "c"], bins=8, sample_weight="w", columns=COLS, progress=False)
    mar = daskpd.marginal(ddf, "b", target="y", model=model, bins=6, sample_weight="w", columns=COLS,
                          progress=False)
    var = daskpd.pd_variance(model, ddf, ["a", "b"], grid_resolution=8, sample_weight="w", columns=COLS,
                             progress=False)
    for f in ("a", "c"):
        _same(out["ale"][f], ale[f])
    _same(out["marginal"]["b"], mar)
    pd.testing.assert_frame_equal(out["pd_variance"].to_frame(), var.to_frame(), check_exact=True)


def test_recursion_equals_the_single_function(data):
    ddf, model = data
    out = daskpd.model_curves(model, ddf, {"partial_dependence": {"features": ["a", ("b", "c")],
                                                                  "method": "recursion", "grid_resolution": 5}},
                              columns=COLS, progress=False)
    ref = daskpd.partial_dependence(model, ddf, ["a", ("b", "c")], method="recursion", grid_resolution=5,
                                    columns=COLS, progress=False)
    for k in ref:
        _same(out["partial_dependence"][k], ref[k])
        assert out["partial_dependence"][k].method == "recursion"


def test_quantiles_are_exact(data):
    ddf, model = data
    probs = np.arange(0.1, 1.0, 0.1)
    out = daskpd.model_curves(model, ddf, {"partial_dependence": ["a", "b"], "ice": ["c"]}, quantiles=probs,
                              columns=COLS, grid={"a": [0.0, 0.5]}, progress=False)
    frame = ddf.compute()
    assert list(out.quantiles) == ["a", "b", "c"]  # a custom grid's feature too
    for f in ("a", "b", "c"):
        np.testing.assert_allclose(out.quantiles[f], mquantiles(frame[f], prob=probs), rtol=0, atol=1e-12)
    assert daskpd.model_curves(model, ddf, {"ice": ["c"]}, columns=COLS, progress=False).quantiles == {}


def test_pd_and_ice_of_three_features_in_one_pass(data, passes):
    ddf, model = data
    out = daskpd.model_curves(model, ddf, {"partial_dependence": ["a", ("a", "c")], "ice": ["b", "c"]},
                              quantiles=[0.1, 0.9], columns=COLS, progress=False)
    assert out.phases == ["summary", "order statistics", "model"]
    assert passes == ["daskpd-summary", "daskpd-quantiles", "daskpd-model-curves"]


def test_custom_grids_everywhere_need_only_the_model_pass(data, passes):
    ddf, model = data
    out = daskpd.model_curves(model, ddf, {"partial_dependence": ["a"], "ice": ["b"]}, columns=COLS,
                              grid={"a": [0.0, 0.5], "b": [-1.0, 1.0]}, progress=False)
    assert out.phases == ["model"] and passes == ["daskpd-model-curves"]


def test_the_single_functions_cost_a_pass_each(data, passes):
    """The reference: the same curves one call at a time."""
    ddf, model = data
    daskpd.partial_dependence(model, ddf, ["a", ("a", "c")], columns=COLS, progress=False)
    daskpd.ice(model, ddf, "b", columns=COLS, progress=False)
    daskpd.ice(model, ddf, "c", columns=COLS, progress=False)
    assert [p for p in passes if p not in ("daskpd-summary", "daskpd-quantiles")] == [
        "daskpd-pd", "daskpd-ice", "daskpd-ice"]


def test_display_with_pd_and_ice_panels_makes_one_pass(data, passes):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ddf, model = data
    daskpd.plotting.PartialDependenceDisplay.from_estimator(
        model, ddf[COLS], ["a", ("a", "c"), "b", "c"], kind=["average", "average", "both", "individual"],
        subsample=10, grid_resolution=6, method="brute")
    plt.close("all")
    assert passes == ["daskpd-summary", "daskpd-quantiles", "daskpd-model-curves"]


def test_display_draws_the_public_functions_arrays(data):
    """Every array the Display draws is the public functions' result on the same inputs,
    bit for bit: partial_dependence's averages and grids, ice's lines and average,
    model_curves' exact deciles."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ddf, model = data
    X = ddf[COLS]
    grid = {"c": [1.0, 2.0, 3.0]}
    d = daskpd.plotting.PartialDependenceDisplay.from_estimator(
        model, X, ["a", ("a", "c"), "b"], kind=["average", "average", "both"], subsample=15, random_state=2,
        grid_resolution=7, method="brute", sample_weight=None, custom_values=grid)
    pds = daskpd.partial_dependence(model, X, [("a",), ("a", "c")], grid_resolution=7, method="brute", grid=grid,
                                    progress=False)
    ice = daskpd.ice(model, X, "b", grid_resolution=7, n_lines=15, random_state=2, progress=False)
    deciles = daskpd.model_curves(model, X, {"partial_dependence": ["a", "c", "b"]}, grid=grid,
                                  quantiles=np.arange(0.1, 1.0, 0.1), progress=False).quantiles
    assert d.feature_names == ["a", "c", "b"]
    for got, want in zip(d.pd_results[:2], pds.values()):
        assert np.array_equal(got["average"], want.average[np.newaxis])
        for g, w in zip(got["grid_values"], want.grid_values):
            assert np.array_equal(g, w)
    b = d.pd_results[2]
    assert np.array_equal(b["grid_values"][0], ice.grid)
    assert np.array_equal(b["individual"][0], ice.lines) and np.array_equal(b["average"][0], ice.pd)
    for i, f in enumerate(["a", "c", "b"]):
        assert np.array_equal(d.deciles[i], deciles[f])
    assert np.array_equal(d.lines_[0, 2, -1].get_ydata(), ice.pd)  # the drawn average line is ice's
    plt.close("all")


def test_weighted_display_equals_the_weighted_functions(data):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ddf, model = data
    frame = ddf.compute()
    X, w = frame[COLS], frame["w"].to_numpy()
    d = daskpd.plotting.PartialDependenceDisplay.from_estimator(
        model, X, ["a", "b"], kind=["average", "both"], subsample=5, grid_resolution=5, method="brute",
        sample_weight=w)
    pdp = daskpd.partial_dependence(model, X, "a", grid_resolution=5, method="brute", sample_weight=w,
                                    progress=False)
    ice = daskpd.ice(model, X, "b", grid_resolution=5, n_lines=5, sample_weight=w, progress=False)
    assert np.array_equal(d.pd_results[0]["average"][0], pdp.average)
    assert np.array_equal(d.pd_results[1]["average"][0], ice.pd)
    plt.close("all")


@pytest.mark.parametrize("kwargs, match", [
    ({"methods": {"stratpd": ["a"]}}, r"parameter methods: unknown method\(s\) \['stratpd'\]"),
    ({"methods": []}, "parameter methods must be a non-empty dict"),
    ({"methods": {"ice": {"n_lines": 3}}}, r"parameter methods\['ice'\] needs its features"),
    ({"methods": {"ice": {"features": ["a"], "bins": 3}}}, r"parameter methods\['ice'\]: unknown parameter\(s\) "
                                                            r"\['bins'\]"),
    ({"methods": {"partial_dependence": {"features": "a", "grid_resolution": 1}}},
     r"parameter methods\['partial_dependence'\]\['grid_resolution'\] must be an int"),
    ({"methods": {"partial_dependence": {"features": "a", "method": "fast"}}},
     r"parameter methods\['partial_dependence'\]\['method'\] must be"),
    ({"methods": {"ice": [("a", "b")]}}, r"parameter methods\['ice'\]\['features'\]: each entry must be"),
    ({"methods": {"h_statistic": ["a"]}}, r"methods\['h_statistic'\]\['features'\] needs at least two"),
    ({"methods": {"ice": ["a"]}, "quantiles": [0.5, 2]}, "parameter quantiles must be"),
    ({"methods": {"ice": ["a"]}, "grid": {"b": [0, 1]}}, r"parameter grid has entries for \['b'\]"),
    ({"methods": {"ale": ["a"]}, "grid": {"a": [0, 1]}}, r"parameter grid has entries for \['a'\]"),
    ({"methods": {"ice": ["a"]}, "grid": [0, 1]}, "parameter grid must be a dict"),
    ({"methods": {"ice": ["a"]}, "target": "y"}, "parameter target is the marginal plot's response"),
    ({"methods": {"ice": ["a"]}, "random_state": -1}, "parameter random_state must be"),
    ({"methods": {"partial_dependence": {"features": "a", "method": "recursion"}}, "n_trials": 3},
     "n_trials > 1"),
])
def test_bad_parameters_are_named(data, kwargs, match):
    ddf, model = data
    kwargs = dict(kwargs)
    with pytest.raises(InvalidParameterError, match=match):
        daskpd.model_curves(model, ddf, kwargs.pop("methods"), columns=COLS, progress=False, **kwargs)


def test_an_unknown_column_is_named(data):
    ddf, model = data
    with pytest.raises(daskpd.DataError, match=r"column 'zz' not found in data \(parameter methods\['ice'\]"):
        daskpd.model_curves(model, ddf, {"ice": ["zz"]}, columns=COLS, progress=False)


def test_a_multi_class_model_needs_target_class(data):
    ddf, _ = data
    frame = ddf.compute()
    clf = HistGradientBoostingClassifier(max_iter=5, random_state=0).fit(
        frame[COLS], np.digitize(frame.a, [-0.3, 0.3]))
    with pytest.raises(InvalidParameterError, match=r"parameter target_class is required .*one of \[0, 1, 2\]"):
        daskpd.model_curves(clf, frame[COLS], {"ice": ["a"]}, progress=False)
    out = daskpd.model_curves(clf, frame[COLS], {"ice": {"features": ["a"], "grid_resolution": 4}},
                              target_class=2, progress=False)
    _same(out["ice"]["a"], daskpd.ice(clf, frame[COLS], "a", grid_resolution=4, target_class=2, progress=False))
    with pytest.raises(InvalidParameterError, match="PartialDependenceDisplay.from_estimator: parameter target is "
                                                    "required"):
        daskpd.plotting.PartialDependenceDisplay.from_estimator(clf, frame[COLS], ["a"])


@pytest.mark.parametrize("kwargs, match", [
    ({"method": "fast"}, "parameter method must be one of"),
    ({"grid_resolution": 1}, "parameter grid_resolution must be an integer >= 2"),
    ({"percentiles": (0.9, 0.1)}, "parameter percentiles must be"),
    ({"custom_values": {"zz": [1.0]}}, r"parameter custom_values has entries for \['zz'\]"),
    ({"custom_values": [1.0, 2.0]}, "parameter custom_values must be a dict"),
])
def test_the_display_names_its_own_parameters(data, kwargs, match):
    """model_curves' checks, in the Display's parameter names (one prefix, the Display's)."""
    ddf, model = data
    with pytest.raises(InvalidParameterError, match=r"^PartialDependenceDisplay\.from_estimator: " + match) as info:
        daskpd.plotting.PartialDependenceDisplay.from_estimator(model, ddf[COLS], ["a", "b"], kind=["average", "both"],
                                                                subsample=5, **kwargs)
    assert "model_curves" not in str(info.value) and "methods[" not in str(info.value)


def test_quantiles_of_the_single_functions_are_model_curves(data):
    """partial_dependence(quantiles=) and ice(quantiles=): each result's own numeric
    features' exact quantiles, the numbers model_curves gives (the same passes)."""
    ddf, model = data
    probs = np.arange(0.1, 1.0, 0.1)
    out = daskpd.model_curves(model, ddf, {"partial_dependence": {"features": ["a", ("a", "b")], "grid_resolution": 5},
                                           "ice": {"features": ["c"], "grid_resolution": 5, "n_lines": 4}},
                              quantiles=probs, columns=COLS, progress=False)
    pdp = daskpd.partial_dependence(model, ddf, ["a", ("a", "b")], grid_resolution=5, quantiles=probs, columns=COLS,
                                    progress=False)
    ice = daskpd.ice(model, ddf, "c", grid_resolution=5, n_lines=4, quantiles=probs, columns=COLS, progress=False)
    frame = ddf.compute()
    for res, feats in ((pdp["a"], ["a"]), (pdp[("a", "b")], ["a", "b"]), (ice, ["c"])):
        assert list(res.quantiles) == feats
        for f in feats:
            np.testing.assert_allclose(res.quantiles[f], mquantiles(frame[f], prob=probs), rtol=0, atol=1e-12)
    theirs = (out["partial_dependence"]["a"], out["partial_dependence"][("a", "b")], out["ice"]["c"])
    for mine, their in zip((pdp["a"], pdp[("a", "b")], ice), theirs):
        _same(mine, their)
        assert {f: v.tolist() for f, v in mine.quantiles.items()} == {f: v.tolist() for f, v in their.quantiles.items()}
    assert daskpd.ice(model, ddf, "c", grid_resolution=5, columns=COLS, progress=False).quantiles is None
    with pytest.raises(InvalidParameterError, match=r"^partial_dependence: parameter quantiles must be a non-empty "
                                                    r"list of probabilities in \[0, 1\]"):
        daskpd.partial_dependence(model, ddf, "a", quantiles=[0.5, 1.5], columns=COLS, progress=False)


@pytest.mark.parametrize("method, name, value", [
    ("partial_dependence", "grid_resolution", 1), ("partial_dependence", "percentiles", (0.9, 0.1)),
    ("partial_dependence", "method", "fast"), ("ice", "n_lines", 0), ("ice", "centered", "yes"), ("ale", "bins", 0),
    ("marginal", "binning", "quantiles"), ("pd_variance", "grid_resolution", 1.5), ("h_statistic", "n_points", 1),
    ("h_statistic", "total", 1),
])
def test_a_method_parameter_is_refused_as_its_function_refuses_it(data, method, name, value):
    """One spec per method: model_curves' methods[m][k] and daskpd.m(k=...) say the same."""
    ddf, model = data
    features = ["a", "b"] if method == "h_statistic" else ["a"]
    with pytest.raises(InvalidParameterError) as mine:
        daskpd.model_curves(model, ddf, {method: {"features": features, name: value}}, columns=COLS, progress=False)
    args = (ddf, features) if method == "marginal" else (model, ddf, features[0] if method == "ice" else features)
    with pytest.raises(InvalidParameterError) as theirs:
        getattr(daskpd, method)(*args, **{name: value}, progress=False)
    expected = str(theirs.value).split(f"parameter {name} ", 1)[1]
    assert str(mine.value) == f"model_curves: parameter methods[{method!r}][{name!r}] {expected}"
