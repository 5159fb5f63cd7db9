"""daskpd.model._multi: several model-based methods in one merged plan.

The results must equal the public functions' bit for bit, and the passes over the data
are counted by wrapping the engine's real ``build_pass`` (every pass builds one).
"""
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from sklearn.ensemble import HistGradientBoostingRegressor

import daskpd
from daskpd.model._multi import MODEL_METHODS, Increment, model_methods
from daskpd.model._params import ModelOptions, TrialOptions

FEATURES = ["a", "b", "c"]
METHODS = {
    "partial_dependence": {"grid_resolution": 7, "percentiles": (0.05, 0.95)},
    "ice": {"grid_resolution": 5, "percentiles": (0.0, 1.0), "n_lines": 4, "centered": True},
    "ale": {"bins": 6},
    "marginal": {"bins": 5, "binning": "quantile"},
    "pd_variance": {"grid_resolution": 6, "percentiles": (0.0, 1.0)},
}


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(3)
    n = 4_000  # > 1,024 distinct values per column: the grids need exact order statistics
    X = pd.DataFrame({"a": rng.uniform(-1, 1, n), "b": rng.normal(size=n), "c": rng.uniform(0, 5, n),
                      "d": rng.uniform(size=n)})
    y = X.a ** 2 + X.b * X.c + rng.normal(scale=0.1, size=n)
    model = HistGradientBoostingRegressor(max_iter=15, random_state=0).fit(X, y)
    return dd.from_pandas(X.assign(y=y), npartitions=3), model


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
    fa, fb = a.to_frame(), b.to_frame()
    pd.testing.assert_frame_equal(fa, fb, check_exact=True)


def test_equals_the_public_functions_bit_for_bit(data):
    ddf, model = data
    cols = ["a", "b", "c", "d"]
    out = model_methods(model, ddf, FEATURES, METHODS, target="y", model_options=ModelOptions(columns=cols),
                        trial_options=TrialOptions(random_state=4)).results
    assert list(out) == [m for m in MODEL_METHODS if m in METHODS]  # in MODEL_METHODS order
    p = METHODS
    pdp = daskpd.partial_dependence(model, ddf, FEATURES, columns=cols, **p["partial_dependence"])
    ale = daskpd.ale(model, ddf, FEATURES, columns=cols, **p["ale"])
    mar = daskpd.marginal(ddf, FEATURES, target="y", model=model, columns=cols, **p["marginal"])
    var = daskpd.pd_variance(model, ddf, FEATURES, columns=cols, **p["pd_variance"])
    for f in FEATURES:
        _same(out["partial_dependence"][f], pdp[f])
        _same(out["ale"][f], ale[f])
        _same(out["marginal"][f], mar[f])
        ice = daskpd.ice(model, ddf, f, columns=cols, random_state=4, **p["ice"])
        _same(out["ice"][f], ice)
        np.testing.assert_array_equal(out["ice"][f].lines, ice.lines)
        np.testing.assert_array_equal(out["ice"][f].line_index, ice.line_index)
    np.testing.assert_array_equal(out["pd_variance"].values, var.values)
    pd.testing.assert_frame_equal(out["pd_variance"].to_frame(), var.to_frame(), check_exact=True)


def test_three_features_five_methods_three_passes(data, passes):
    ddf, model = data
    run = model_methods(model, ddf, FEATURES, METHODS, target="y",
                        model_options=ModelOptions(columns=["a", "b", "c", "d"]))
    assert run.phases == ["summary", "order statistics", "model"]
    assert passes == ["daskpd-summary", "daskpd-quantiles", "daskpd-model-methods"]
    assert set(run.results) == set(METHODS)


def test_one_by_one_costs_many_more_passes(data, passes):
    """The reference the merged plan is measured against (the job runner's old way)."""
    ddf, model = data
    cols = ["a", "b", "c", "d"]
    p = METHODS
    daskpd.partial_dependence(model, ddf, FEATURES, columns=cols, **p["partial_dependence"])
    daskpd.ale(model, ddf, FEATURES, columns=cols, **p["ale"])
    daskpd.marginal(ddf, FEATURES, target="y", model=model, columns=cols, **p["marginal"])
    daskpd.pd_variance(model, ddf, FEATURES, columns=cols, **p["pd_variance"])
    for f in FEATURES:
        daskpd.ice(model, ddf, f, columns=cols, **p["ice"])
    assert len(passes) == 21, passes  # 4 x 3 (summary, quantiles, pass) + 3 ICE x 3


def test_recursion_needs_no_pass_of_its_own(data, passes):
    ddf, model = data
    run = model_methods(model, ddf, ["a"], {"partial_dependence": {"method": "recursion", "grid_resolution": 5}},
                        model_options=ModelOptions(columns=["a", "b", "c", "d"]))
    assert run.phases == ["summary", "order statistics"] and len(passes) == 2
    ref = daskpd.partial_dependence(model, ddf, "a", columns=["a", "b", "c", "d"], method="recursion",
                                    grid_resolution=5)
    _same(run.results["partial_dependence"]["a"], ref)


def test_unknown_method_is_refused(data):
    ddf, model = data
    with pytest.raises(ValueError, match="unknown model-based method"):
        model_methods(model, ddf, ["a"], {"stratpd": {}}, model_options=ModelOptions(columns=["a", "b", "c", "d"]))


def test_missing_targets_give_the_marginal_plot_its_own_bins(data):
    ddf, model = data
    cols = ["a", "b", "c", "d"]
    holes = ddf.assign(y=ddf.y.where(ddf.a > -0.5))  # a quarter of the targets missing, at low a
    run = model_methods(model, holes, FEATURES, {"marginal": METHODS["marginal"], "ale": METHODS["ale"]},
                        target="y", model_options=ModelOptions(columns=cols))
    assert run.phases == ["summary", "order statistics", "marginal bins", "model"]
    mar = daskpd.marginal(holes, FEATURES, target="y", model=model, columns=cols, **METHODS["marginal"])
    ale = daskpd.ale(model, holes, FEATURES, columns=cols, **METHODS["ale"])
    for f in FEATURES:
        _same(run.results["marginal"][f], mar[f])
        _same(run.results["ale"][f], ale[f])


def test_trials_ride_the_merged_plan_as_in_the_public_functions(data):
    """n_trials > 1: every method's bands from the one pass equal each public function's
    own trials (same weights from the row hash, same finishers)."""
    ddf, model = data
    cols = ["a", "b", "c", "d"]
    tr = {"n_trials": 4, "random_state": 4}
    out = model_methods(model, ddf, FEATURES, METHODS, target="y", model_options=ModelOptions(columns=cols),
                        trial_options=TrialOptions(**tr)).results
    p = METHODS
    pdp = daskpd.partial_dependence(model, ddf, FEATURES, columns=cols, **p["partial_dependence"], **tr)
    ale = daskpd.ale(model, ddf, FEATURES, columns=cols, **p["ale"], **tr)
    mar = daskpd.marginal(ddf, FEATURES, target="y", model=model, columns=cols, **p["marginal"], **tr)
    var = daskpd.pd_variance(model, ddf, FEATURES, columns=cols, **p["pd_variance"], **tr)
    ice = daskpd.ice(model, ddf, "b", columns=cols, **p["ice"], **tr)
    for got, want in ((out["partial_dependence"]["a"], pdp["a"]), (out["ale"]["c"], ale["c"]),
                      (out["marginal"]["b"], mar["b"]), (out["ice"]["b"], ice)):
        assert got.trials_pd.shape[0] == 4
        np.testing.assert_allclose(got.trials_pd, want.trials_pd, rtol=1e-12, atol=1e-12)
        fa, fb = got.to_frame(), want.to_frame()
        assert {"pd_std", "pd_lo", "pd_hi"} <= set(fa.columns)
        pd.testing.assert_frame_equal(fa, fb, rtol=1e-12, atol=1e-12)
    fv = out["pd_variance"].to_frame()
    assert {"importance_std", "importance_lo", "importance_hi"} <= set(fv.columns)
    pd.testing.assert_frame_equal(fv, var.to_frame(), rtol=1e-12, atol=1e-12)
    with pytest.raises(daskpd.DataError, match="recursion"):
        model_methods(model, ddf, ["a"], {"partial_dependence": {"method": "recursion"}},
                      model_options=ModelOptions(columns=cols), trial_options=TrialOptions(**tr))


def test_a_frozen_layout_and_base_partials_add_up_to_the_full_scan(data):
    """Incremental: the plan of the first rows (its grids, bins, ALE's level order) run on
    the appended rows with the first rows' partials added equals one scan of all rows
    under the same layout (bands and ICE's sampled lines included); no summary or
    quantile pass runs under a layout."""
    ddf, model = data
    cols = ["a", "b", "c", "d"]
    frame = ddf.compute()
    old, new = frame.iloc[:2_600], frame.iloc[2_600:]
    kw = {"target": "y", "model_options": ModelOptions(columns=cols),
          "trial_options": TrialOptions(random_state=4, n_trials=3)}
    base = model_methods(model, dd.from_pandas(old, npartitions=2), FEATURES, METHODS, **kw)
    inc = model_methods(model, dd.from_pandas(new, npartitions=2), FEATURES, METHODS,
                        increment=Increment(base.layout, base.parts), **kw)
    assert inc.phases == ["model"]
    full = model_methods(model, dd.from_pandas(frame, npartitions=3), FEATURES, METHODS,
                         increment=Increment(base.layout), **kw)
    for m in ("partial_dependence", "ice", "ale", "marginal"):
        for f in FEATURES:
            a, b = inc.results[m][f], full.results[m][f]
            pd.testing.assert_frame_equal(a.to_frame(), b.to_frame(), rtol=1e-12, atol=1e-12)
            assert a.trials_pd is not None
            np.testing.assert_allclose(a.trials_pd, b.trials_pd, rtol=1e-12, atol=1e-12)
    for f in FEATURES:  # the same rows' lines: the smallest hashes of all rows
        np.testing.assert_allclose(inc.results["ice"][f].lines, full.results["ice"][f].lines, rtol=1e-12)
    pd.testing.assert_frame_equal(inc.results["pd_variance"].to_frame(), full.results["pd_variance"].to_frame(),
                                  rtol=1e-12, atol=1e-12)
    # the layout is the first rows': a scan of all rows without it moves the grids
    free = model_methods(model, dd.from_pandas(frame, npartitions=3), FEATURES, METHODS, **kw)
    assert not np.array_equal(free.results["partial_dependence"]["a"].x, inc.results["partial_dependence"]["a"].x)


def test_the_typed_options_are_the_spec_groups_with_the_public_defaults():
    """TrialOptions holds the TRIALS group, ModelOptions the MODEL and ENGINE groups'
    values a merged plan reads; their defaults are model_curves' own."""
    import inspect
    from dataclasses import fields

    from daskpd.model._params import ENGINE, MODEL, TRIALS

    sig = inspect.signature(daskpd.model_curves).parameters
    assert [f.name for f in fields(TrialOptions)] == list(TRIALS)
    assert {f.name for f in fields(ModelOptions)} - {"filters"} <= set(MODEL) | set(ENGINE)
    for cls in (ModelOptions, TrialOptions):
        for f in fields(cls):
            assert f.default == sig[f.name].default, (cls.__name__, f.name)
