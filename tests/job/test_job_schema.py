"""The job spec's method tables are derived from the library: same names, same defaults,
same checks (the spec once said pvalues_sample_size = 20,000 while the library used
10,000)."""
from __future__ import annotations

import glob
import inspect
import os

import pytest

from daskpd._validation import get_constraints
from daskpd.job.schema import METHOD_FUNCTIONS, MODEL_LEVEL, TOP_LEVEL, library_function, method_params
from daskpd.job.spec import METHODS
from daskpd.job.spec_parse import load_spec

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _toml_form(value):
    """A library default as a TOML spec would write it (None -> false, tuple -> array)."""
    if value is None:
        return False
    if isinstance(value, tuple):
        return list(value)
    return value


def _levels():
    yield from ((m, *spec) for m, spec in METHOD_FUNCTIONS.items())
    yield ("<top>", *TOP_LEVEL)
    yield ("<model>", *MODEL_LEVEL)


def test_every_method_has_its_library_function():
    assert set(METHOD_FUNCTIONS) == set(METHODS)


@pytest.mark.parametrize("level, module, name, keys", list(_levels()))
def test_spec_defaults_and_checks_are_the_library_functions(level, module, name, keys):
    func = library_function(module, name)
    sig = inspect.signature(func)
    constraints = get_constraints(func)
    if level == "<top>":
        from daskpd.job.schema import top_params as tables
    elif level == "<model>":
        from daskpd.job.schema import model_params as tables
    else:
        tables = lambda: method_params()[level]  # noqa: E731
    table = tables()
    assert set(table) == set(keys)
    for key, spec_key in table.items():
        default = sig.parameters[key].default
        assert spec_key.default == default, (level, key)
        # the default, written in TOML, passes the spec's check and comes back as itself
        assert spec_key.check(_toml_form(default)) == (default if default is not None else None), (level, key)
        # a value the library refuses, the spec refuses too
        assert constraints[key] is not None
        for bad in ("not-a-valid-value", -7, 1e9 + 0.5, [1, 2, 3]):
            lib_ok = any(c.is_satisfied_by(bad) for c in constraints[key])
            try:
                spec_key.check(bad)
                spec_ok = True
            except Exception:
                spec_ok = False
            assert spec_ok == lib_ok, (level, key, bad)


def test_the_drifted_default_is_the_librarys():
    from daskpd._importance import strat_curves_and_importances

    lib = inspect.signature(strat_curves_and_importances).parameters["pvalues_sample_size"].default
    assert method_params()["importances"]["pvalues_sample_size"].default == lib == 10_000


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(ROOT, "jobs", "*.toml"))))
def test_shipped_job_specs_are_valid(path):
    spec = load_spec(path, check_files=False)
    for method, params in spec.params.items():
        assert set(params) == set(method_params()[method])
