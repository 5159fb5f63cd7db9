"""Model-based curves of a job with bootstrap trials (``[model] n_trials``): their tables
carry the band, and ``history`` tests them against it -- an unchanged data distribution
is not flagged, a shifted one is (the model fixed, as in a nightly job)."""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from sklearn.tree import DecisionTreeRegressor

from daskpd.job import history as hist
from daskpd.job.outputs import curves_frame, importances_frame
from daskpd.model._multi import model_methods
from daskpd.model._params import ModelOptions, TrialOptions

N, TRIALS = 2000, 20
METHODS = {"partial_dependence": {"grid_resolution": 11, "percentiles": (0.0, 1.0)}, "ale": {"bins": 10},
           "marginal": {"bins": 10, "binning": "quantile"},
           "pd_variance": {"grid_resolution": 11, "percentiles": (0.0, 1.0)}}


def data(seed: int, x2_mean: float = 0.5) -> pd.DataFrame:
    """``y = x1^2 + 2 x1 x2 + N(0, 0.1)``, x1 ~ U(0, 1), x2 ~ U(x2_mean +- 0.5): the PD of
    x1 is ``x1^2 + 2 E[x2] x1``, so moving x2's mean moves x1's curves."""
    rng = np.random.default_rng(seed)
    x1, x2 = rng.uniform(0, 1, N), rng.uniform(x2_mean - 0.5, x2_mean + 0.5, N)
    return pd.DataFrame({"x1": x1, "x2": x2, "y": x1 ** 2 + 2 * x1 * x2 + rng.normal(0, 0.1, N)})


@pytest.fixture(scope="module")
def model():
    d = pd.concat([data(100), data(101, 1.5)])
    return DecisionTreeRegressor(max_depth=10, min_samples_leaf=10, random_state=0).fit(d[["x1", "x2"]], d["y"])


def run(model, seed, x2_mean=0.5) -> hist.Run:
    """A run's tables as a job writes them (the job's own model plan and writers)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = model_methods(model, data(seed, x2_mean), ["x1"], METHODS, target="y",
                            model_options=ModelOptions(columns=["x1", "x2"]),
                            trial_options=TrialOptions(n_trials=TRIALS, random_state=seed)).results
    curves = curves_frame({(m, "x1"): out[m]["x1"] for m in ("partial_dependence", "ale", "marginal")})
    man = {"spec": {"model": {"n_trials": TRIALS}}, "input": {"fingerprint": {"sha256": str(seed)}}}
    return hist.Run(f"seed{seed}", None, man, curves, importances_frame({"pd_variance": out["pd_variance"]}))


def test_model_curves_are_tested_against_their_bands(model):
    a, b, moved = run(model, 1), run(model, 2), run(model, 2, x2_mean=0.8)
    assert {"pd_std", "pd_lo", "pd_hi"} <= set(a.curves.columns)
    assert {"importance_std", "importance_lo", "importance_hi"} <= set(a.importances.columns)
    assert hist.run_trials(a.manifest, "ale") == TRIALS and hist.run_trials(a.manifest) is None
    null = hist.compare(a, b).set_index("method")
    drift = hist.compare(a, moved).set_index("method")
    for m in ("partial_dependence", "ale", "marginal"):
        assert null.loc[m, "noise_source"] == drift.loc[m, "noise_source"] == "band", m
        # the Bonferroni critical value of Student's t with the trials' 19 degrees of freedom
        assert null.loc[m, "z_crit"] > hist.critical_z(len(a.curves), hist.ALPHA)
        assert null.loc[m, "status"] == "ok", (m, null.loc[m, ["z", "z_crit", "drift"]].to_dict())
        assert drift.loc[m, "status"] == "drifted", (m, drift.loc[m, ["z", "z_crit", "drift"]].to_dict())
        assert drift.loc[m, "z"] > 3 * null.loc[m, "z"]
    # the pd_variance table gives the model curves their importance (a share of 1: one feature)
    assert null.loc["ale", "importance"] == pytest.approx(1.0)
