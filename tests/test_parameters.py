"""One name per parameter across the public API: a parameter name shared by several
public functions has one default everywhere (the exceptions are listed here with their
reason, and docs/parameters.md says the same), the grid parameters default to
scikit-learn's, and a former name of a parameter is an unknown keyword."""
from __future__ import annotations

import inspect

import numpy as np
import pandas as pd
import pytest

import daskpd

FUNCTIONS = [n for n in daskpd._API if n[0].islower() and callable(getattr(daskpd, n))
             and not isinstance(getattr(daskpd, n), type)]

#: (parameter, function) -> why its default differs from the other functions'
EXCEPTIONS = {
    ("grid_resolution", "pd_variance"): "None: 100 for measure='importance', 20 for 'interaction' (2-way grids)",
    ("min_samples_leaf", "catstratpd"): "the categorical tree's leaf size: importances' cat_min_samples_leaf",
}


def defaults() -> dict:
    out: dict = {}
    for name in FUNCTIONS:
        for p in inspect.signature(getattr(daskpd, name)).parameters.values():
            if p.default is not inspect.Parameter.empty and p.kind is not p.VAR_KEYWORD:
                out.setdefault(p.name, {})[name] = p.default
    return out


def test_each_shared_parameter_has_one_default():
    drift = {}
    for param, by_fn in defaults().items():
        values = {fn: v for fn, v in by_fn.items() if (param, fn) not in EXCEPTIONS}
        if len({repr(v) for v in values.values()}) > 1:
            drift[param] = values
    assert not drift, f"parameters with several defaults: {drift}"
    d = defaults()
    assert d["min_samples_leaf"]["catstratpd"] == d["cat_min_samples_leaf"]["importances"]
    assert all(fn in d[p] for p, fn in EXCEPTIONS)  # the exceptions still exist


def test_grid_defaults_are_scikit_learns():
    from sklearn.inspection import partial_dependence as sk_pd

    sk = inspect.signature(sk_pd).parameters
    d = defaults()
    assert set(d["percentiles"].values()) == {sk["percentiles"].default}
    assert {v for fn, v in d["grid_resolution"].items() if fn != "pd_variance"} == {sk["grid_resolution"].default}
    # one name per meaning: the model-free functions say categorical_features too, and no function says method
    # for anything but partial_dependence's brute / recursion
    assert {fn for fn in FUNCTIONS if "categorical" in inspect.signature(getattr(daskpd, fn)).parameters} == set()
    assert {fn for fn in FUNCTIONS if "method" in inspect.signature(getattr(daskpd, fn)).parameters} == \
        {"partial_dependence"}


@pytest.fixture(scope="module")
def small():
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"a": rng.integers(0, 20, 400) / 20, "c": rng.integers(0, 3, 400)})
    df["y"] = 2 * df.a + df.c + rng.normal(0, 0.1, 400)
    return df


def test_former_names_are_a_type_error_naming_them(small):
    """One name per parameter and no aliases: a former spelling is an unknown keyword,
    refused before any work with the parameter's name."""
    new = daskpd.importances(small, target="y", categorical_features=["c"], progress=False)
    assert new.loc["c", "kind"] == "categorical"
    former = [
        ("importances", lambda: daskpd.importances(small, target="y", categorical=["c"]), "categorical"),
        ("strat_curves_and_importances",
         lambda: daskpd.strat_curves_and_importances(small, target="y", numeric=["c"]), "numeric"),
        ("fit_stratification", lambda: daskpd.fit_stratification(small, target="y", categorical=["c"]), "categorical"),
        ("pd_variance", lambda: daskpd.pd_variance(None, small[["a", "c"]], method="interaction"), "method"),
        ("partial_dependence", lambda: daskpd.partial_dependence(None, small, "a", custom_values={}), "custom_values"),
        ("partial_dependence", lambda: daskpd.partial_dependence(None, small, "a", response_method="predict"),
         "response_method"),
    ]
    for fn, call, old in former:
        with pytest.raises(TypeError, match=rf"^{fn}\(\): got an unexpected keyword argument '{old}'$"):
            call()
    for fn in FUNCTIONS:  # no public function still lists a former name
        assert not {"categorical", "numeric", "custom_values", "response_method"} & \
            set(inspect.signature(getattr(daskpd, fn)).parameters), fn
    assert not hasattr(daskpd.ICEResult, "pd_frame")  # the PD of an ICE result is to_frame()
