"""The model-free estimator protocol (daskpd._strat.estimator): the registry, each
estimator's finish through the protocol against the public functions, bit for bit, and
the error of a saved state whose kind no estimator has."""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

import daskpd
from daskpd import DataError, InvalidParameterError, ScanState
from daskpd._strat.catstratpd_estimator import CatStratPDEstimator
from daskpd._strat.estimator import ModelFreeEstimator
from daskpd._engine.plan import run_local
from daskpd._data.encode import as_float
from daskpd._strat.estimators import EXTRA_METHODS, ESTIMATORS, estimator_named, estimator_of_method, extra_kinds, \
    method_of
from daskpd._strat.scan_stage import with_extra
from daskpd._strat.scan import MIN_UNITS
from daskpd._strat.binned_mean_estimator import BinnedMeanEstimator, BinnedMeanResult
from daskpd._strat.stratpd_estimator import StratPDEstimator
from daskpd.results.curves import DEFAULT_FEW_SLOPES


@pytest.fixture(scope="module")
def frame():
    rng = np.random.default_rng(47)
    n = 4000
    df = pd.DataFrame({"x1": rng.normal(size=n), "x2": rng.integers(0, 25, n).astype(float),
                       "c": rng.choice(list("abcdef"), n)})
    df["y"] = df.x1 ** 2 + np.sin(df.x2) + (df.c == "b") * 2.0 + rng.normal(size=n) / 4
    return df


@pytest.fixture(scope="module")
def strat(frame):
    return daskpd.fit_stratification(frame, target="y", features=["x1", "x2", "c"], categorical_features=["c"],
                                     progress=False)


def test_the_registry_resolves_both_kinds_by_their_stored_names():
    assert isinstance(estimator_named("numeric"), StratPDEstimator)
    assert isinstance(estimator_named("categorical"), CatStratPDEstimator)
    assert {"numeric", "categorical"} <= set(ESTIMATORS)
    for name, est in ESTIMATORS.items():
        assert isinstance(est, ModelFreeEstimator) and est.name == name
        assert estimator_of_method(est.method) is est
    assert [estimator_named(k).method for k in ("numeric", "categorical")] == ["stratpd", "catstratpd"]


def test_an_unknown_kind_is_an_error_naming_it():
    with pytest.raises(DataError, match=r"unknown model-free estimator kind 'isotonic' \(feature 'x'\).*'numeric'"):
        estimator_named("isotonic", "feature 'x'")
    with pytest.raises(DataError, match="unknown model-free method 'ale'"):
        estimator_of_method("ale")


def _protocol_finish(state: ScanState, strat, feature: str, finish_options: dict):
    """A feature's result made by its estimator's own methods: a bucket holding every
    leaf (finish_bucket), finished (finish_state)."""
    scan = state.scan_job(strat, finish_options)
    i = [fs.feature for fs in scan.features].index(feature)
    fs = scan.features[i]
    st = state.features[feature]
    part = fs.estimator.finish_bucket(scan, i, st.table, st.counters, scan.virtual_span(fs, 0))
    return fs.estimator.finish_state(scan, i, part)


@pytest.mark.parametrize("n_trials", [1, 4])
def test_stratpd_through_the_protocol_is_stratpd_bit_for_bit(frame, strat, n_trials):
    want = daskpd.stratpd(frame, target="y", feature="x1", stratification=strat, n_trials=n_trials,
                          progress=False)
    state = daskpd.scan_state(frame, strat, features=["x1"], n_trials=n_trials, progress=False)
    opts = {"min_slopes_per_x": 5, "few_slopes": DEFAULT_FEW_SLOPES}
    if n_trials > 1:
        opts["band"] = [0.05, 0.95]
    got = _protocol_finish(state, strat, "x1", opts)
    assert method_of(got) == "stratpd" and got.kind == "numeric"
    pd.testing.assert_frame_equal(got.to_frame(), want.to_frame(), check_exact=True)
    for name in ("x", "pd", "count", "slope", "slope_count"):
        assert np.asarray(getattr(got, name)).tobytes() == np.asarray(getattr(want, name)).tobytes(), name
    if n_trials > 1:
        assert got.trials_pd.tobytes() == want.trials_pd.tobytes()


@pytest.mark.parametrize("n_trials", [1, 4])
def test_catstratpd_through_the_protocol_is_catstratpd_bit_for_bit(frame, strat, n_trials):
    want = daskpd.catstratpd(frame, target="y", feature="c", stratification=strat, n_trials=n_trials,
                             progress=False)
    state = daskpd.scan_state(frame, strat, features=["c"], n_trials=n_trials, progress=False)
    opts = {"centered": False}
    if n_trials > 1:
        opts["band"] = [0.05, 0.95]
    got = _protocol_finish(state, strat, "c", opts)
    assert method_of(got) == "catstratpd" and got.kind == "categorical"
    pd.testing.assert_frame_equal(got.to_frame(), want.to_frame(), check_exact=True)
    assert got.pd.tobytes() == want.pd.tobytes() and np.asarray(got.count).tobytes() == np.asarray(want.count).tobytes()
    if n_trials > 1:
        assert got.trials_pd.tobytes() == want.trials_pd.tobytes()


def test_a_saved_state_records_the_estimators_names_and_refuses_an_unknown_one(frame, strat, tmp_path):
    state = daskpd.scan_state(frame, strat, progress=False)
    state.save(tmp_path / "s")
    meta = json.loads((tmp_path / "s" / "state.json").read_text())
    assert [(f["feature"], f["kind"]) for f in meta["features"]] == \
        [("x1", "numeric"), ("x2", "numeric"), ("c", "categorical")]
    assert not any("positions" in f for f in meta["features"])  # the coder's kind is the estimator's name
    back = ScanState.load(tmp_path / "s")
    assert {f: st.kind for f, st in back.features.items()} == {"x1": "numeric", "x2": "numeric", "c": "categorical"}
    meta["features"][2]["kind"] = "isotonic"
    (tmp_path / "s" / "state.json").write_text(json.dumps(meta))
    with pytest.raises(DataError, match=r"unknown model-free estimator kind 'isotonic' \(scan state .*s', "
                                        r"feature 'c'\)"):
        ScanState.load(tmp_path / "s")


# -- a third estimator written only against the protocol: the binned mean of y ------------


def _reference_mean(df: pd.DataFrame, feature: str, coder) -> pd.DataFrame:
    """The binned mean by pandas: mean y and rows per position code."""
    x, y = as_float(df[feature]), as_float(df["y"])
    ok = np.isfinite(x) & np.isfinite(y)
    return pd.DataFrame({"code": coder.encode_float(x[ok]), "y": y[ok]}).groupby("code")["y"].agg(["mean", "size"])


def _scan(frame, strat, n_buckets: int, extra=()):
    state = daskpd.scan_state(frame.iloc[:10], strat, progress=False)  # only for its scan job (the coders)
    scan = state.scan_job(strat, {"min_slopes_per_x": 5, "few_slopes": DEFAULT_FEW_SLOPES})
    return replace(scan, features=with_extra(strat, scan.features, extra), n_buckets=n_buckets,
                   expected_rows=len(frame) // 5)


def test_a_third_estimator_runs_in_the_same_scan_and_changes_no_other_bit(frame, strat):
    assert isinstance(estimator_named("binned_mean"), BinnedMeanEstimator)
    assert EXTRA_METHODS == ("binned_mean",) and extra_kinds(["binned_mean"]) == ("binned_mean",)
    parts = [frame.iloc[i:i + 800] for i in range(0, len(frame), 800)]
    out = {}
    for B in (1, 4, 3):
        (plain,) = run_local(parts, [_scan(frame, strat, B)])
        (got,) = run_local(parts, [_scan(frame, strat, B, ("binned_mean",))])
        assert list(got) == ["x1", "x2", "c", ("x1", "binned_mean"), ("x2", "binned_mean")]  # the numeric features
        for f in ("x1", "x2", "c"):  # StratPD and CatStratPD in the same scan: the same bits as without it
            pd.testing.assert_frame_equal(got[f].to_frame(), plain[f].to_frame(), check_exact=True)
        out[B] = got[("x2", "binned_mean")]
    res = out[1]
    assert isinstance(res, BinnedMeanResult) and method_of(res) == "binned_mean" and res.n_rows == len(frame)
    coder = strat.scan_of("x2").coder
    ref = _reference_mean(frame, "x2", coder)
    np.testing.assert_array_equal(res.count, ref["size"].to_numpy())
    np.testing.assert_allclose(res.mean, ref["mean"].to_numpy(), rtol=1e-12)
    np.testing.assert_array_equal(res.x, np.asarray(coder.values, dtype="float64")[ref.index.to_numpy()])
    for B in (4, 3):  # the bucket count changes no bit but a split virtual bucket's rounding
        pd.testing.assert_frame_equal(out[B].to_frame(), res.to_frame(), check_exact=B == 4, rtol=1e-14)


def test_the_public_keyword_adds_its_curves_and_changes_no_other_bit(frame):
    kw = dict(target="y", categorical_features=["c"], progress=False, n_trials=4)
    plain = daskpd.strat_curves_and_importances(frame, **kw)
    got = daskpd.strat_curves_and_importances(frame, estimators="binned_mean", **kw)
    pd.testing.assert_frame_equal(got.table, plain.table, check_exact=True)
    for f in plain.curves:
        pd.testing.assert_frame_equal(got.curves[f].to_frame(), plain.curves[f].to_frame(), check_exact=True)
    assert plain.extra_curves == {} and list(got.extra_curves) == ["binned_mean"]
    assert sorted(got.extra_curves["binned_mean"]) == ["x1", "x2"] and got.params["estimators"] == ["binned_mean"]
    res = got.extra_curves["binned_mean"]["x1"]  # binned: the mean of x and of y per bin
    coder = got.stratification.scan_of("x1").coder
    x, y = frame["x1"].to_numpy(), frame["y"].to_numpy()
    ref = pd.DataFrame({"code": coder.encode_float(x), "x": x, "y": y}).groupby("code").agg(["mean", "size"])
    np.testing.assert_array_equal(res.count, ref[("y", "size")].to_numpy())
    np.testing.assert_allclose(res.mean, ref[("y", "mean")].to_numpy(), rtol=1e-12)
    np.testing.assert_allclose(res.x, ref[("x", "mean")].to_numpy(), rtol=1e-12)
    # its trials: a bootstrap of the rows' MIN_UNITS parts, each trial's mean per position
    assert res.trials_pd.shape == (4, len(res.x)) and res.params["band_clusters"] == MIN_UNITS
    sd = np.nanstd(got.extra_curves["binned_mean"]["x2"].trials_pd, axis=0)
    assert (sd > 0).all()  # 25 values of about 160 rows each: every trial moves every mean
    with pytest.raises(InvalidParameterError, match=r"parameter estimators must be a list of some of "
                                                    r"'binned_mean'.*'ale'"):
        daskpd.strat_curves_and_importances(frame, estimators=["ale"], **kw)


def test_a_third_estimator_keeps_merges_saves_loads_and_finishes_incrementally(frame, strat, tmp_path):
    a, b = frame.iloc[:2500], frame.iloc[2500:]
    kw = dict(target="y", categorical_features=["c"], progress=False, stratification=strat, keep_state=True,
              estimators=["binned_mean"])
    sa = daskpd.strat_curves_and_importances(a, **kw).state
    whole = daskpd.strat_curves_and_importances(frame, **kw)
    sa.save(tmp_path / "a")
    meta = json.loads((tmp_path / "a" / "state.json").read_text())
    assert [(f["feature"], f["kind"], f.get("positions")) for f in meta["features"]][3:] == \
        [("x1", "binned_mean", "numeric"), ("x2", "binned_mean", "numeric")]  # the estimator, its positions' kind
    back = ScanState.load(tmp_path / "a")
    assert list(back.features) == list(sa.features) and back.features[("x2", "binned_mean")].summary is None
    night = daskpd.strat_curves_and_importances(b, base_state=back, **kw)
    assert night.state.finish_modes[("x2", "binned_mean")] == "merge"  # it keeps no summary: merged, finished in full
    assert night.state.finish_modes["x1"] == "delta"
    for f in ("x1", "x2"):
        got, want = night.extra_curves["binned_mean"][f], whole.extra_curves["binned_mean"][f]
        np.testing.assert_array_equal(got.count, want.count)
        np.testing.assert_allclose(got.mean, want.mean, rtol=1e-12)
    ref = _reference_mean(frame, "x2", whole.state.features[("x2", "binned_mean")].coder)
    np.testing.assert_array_equal(night.extra_curves["binned_mean"]["x2"].count, ref["size"].to_numpy())
    np.testing.assert_allclose((back + night.new_state).finish(strat)[("x2", "binned_mean")].mean,
                               ref["mean"].to_numpy(), rtol=1e-12)
    # a base state without its sums cannot take a night that asks for it
    plain = daskpd.strat_curves_and_importances(a, **{**kw, "estimators": ()}).state
    with pytest.raises(DataError, match="the states hold different features"):
        daskpd.strat_curves_and_importances(b, base_state=plain, **kw)
