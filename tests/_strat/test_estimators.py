"""The model-free estimator protocol (daskpd._strat.estimator): the registry, each
estimator's finish through the protocol against the public functions, bit for bit, and
the error of a saved state whose kind no estimator has."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import daskpd
from daskpd import DataError, ScanState
from daskpd._strat.catstratpd_estimator import CatStratPDEstimator
from daskpd._strat.estimator import ModelFreeEstimator
from daskpd._strat.estimators import ESTIMATORS, estimator_named, estimator_of_method, method_of
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
    assert set(ESTIMATORS) == {"numeric", "categorical"}
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
