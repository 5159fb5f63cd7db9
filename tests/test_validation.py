"""One declarative parameter validation (daskpd._validation, daskpd._constraints), used by every public function."""
from __future__ import annotations

import inspect
from numbers import Integral, Real

import numpy as np
import pandas as pd
import pytest

import daskpd
from daskpd import DataError, InvalidParameterError
from daskpd._constraints import NO_VALIDATION, Boolean, ColumnNames, Interval, Percentiles, StrOptions
from daskpd._validation import get_constraints, validate_params

PUBLIC = ["stratpd", "catstratpd", "importances", "partial_dependence", "ice", "ale", "marginal", "pd_variance",
          "compare", "model_curves"]


def _public(name):
    if name == "compare":
        from daskpd.model._compare import compare
        return compare
    return getattr(daskpd, name)


def test_error_types():
    assert issubclass(DataError, ValueError) and issubclass(InvalidParameterError, ValueError)
    assert issubclass(InvalidParameterError, TypeError)
    # code written when both were one class keeps catching parameter errors
    assert issubclass(InvalidParameterError, DataError)
    from daskpd import DataError as io_DataError

    assert io_DataError is DataError


@pytest.mark.parametrize("name", PUBLIC + ["strat_curves_and_importances"])
def test_every_public_function_declares_every_parameter(name):
    func = _public(name) if name != "strat_curves_and_importances" else \
        __import__("daskpd._importance", fromlist=["x"]).strat_curves_and_importances
    constraints = get_constraints(func)
    params = [p for p in inspect.signature(func).parameters.values() if p.kind is not p.VAR_KEYWORD]
    assert set(constraints) == {p.name for p in params}
    for p in params:
        cons = constraints[p.name]
        if cons is None or p.default is inspect.Parameter.empty:
            continue
        # every default satisfies its own constraints
        assert any(c.is_satisfied_by(p.default) for c in cons), (name, p.name, p.default)


def test_interval_and_messages():
    i = Interval(Integral, 1, None, closed="left")
    assert str(i) == "an integer >= 1"
    assert i.is_satisfied_by(1) and i.is_satisfied_by(np.int64(3)) and not i.is_satisfied_by(0)
    assert not i.is_satisfied_by(True) and not i.is_satisfied_by(1.0)
    assert type(i.convert(np.int64(3))) is int
    r = Interval(Real, 0, 1, closed="neither")
    assert str(r) == "a number in (0, 1)"
    assert r.is_satisfied_by(0.5) and not r.is_satisfied_by(0) and not r.is_satisfied_by(float("nan"))
    assert str(Interval(Integral, 2, 5, closed="both")) == "an integer in [2, 5]"
    assert str(StrOptions("a", "b")) == "one of 'a', 'b'"
    assert Boolean().is_satisfied_by(np.bool_(True)) and not Boolean().is_satisfied_by(1)
    assert Percentiles().convert([0, 1]) == (0.0, 1.0) and not Percentiles().is_satisfied_by((0.5, 0.5))
    c = ColumnNames(allow_single=True)
    assert c.convert("a") == ["a"] and c.convert(pd.Index(["a", "b"])) == ["a", "b"]
    assert not c.is_satisfied_by([1]) and not ColumnNames().is_satisfied_by("a")


def test_decorator_checks_the_listing_and_names_the_function():
    with pytest.raises(TypeError, match=r"constraints missing for \['b'\]"):
        @validate_params({"a": [int]})
        def f(a, b=1):
            pass

    @validate_params({"a": NO_VALIDATION, "n": [Interval(Integral, 1, None, closed="left"), None]})
    def g(a, *, n=3):
        return n

    assert g(object(), n=np.int64(2)) == 2 and type(g(0, n=np.int64(2))) is int
    assert g(0, n=None) is None
    with pytest.raises(InvalidParameterError, match=r"^g: parameter n must be an integer >= 1 or None; got 0$"):
        g(0, n=0)
    assert inspect.signature(g).parameters["n"].default == 3


@pytest.mark.parametrize("name, kwargs, match", [
    ("stratpd", dict(min_samples_leaf=0), "stratpd: parameter min_samples_leaf must be an integer >= 1; got 0"),
    ("stratpd", dict(max_bins=1), "stratpd: parameter max_bins must be an integer >= 2 or None; got 1"),
    ("catstratpd", dict(centered="yes"), "catstratpd: parameter centered must be True or False; got 'yes'"),
    ("importances", dict(sort_by="x"), "importances: parameter sort_by must be one of 'importance', 'impact', "
                                       "'pd_variance'; got 'x'"),
    ("partial_dependence", dict(engine="gpu"), "partial_dependence: parameter engine must be one of"),
    ("ice", dict(n_lines=0), "ice: parameter n_lines must be an integer >= 1 or None; got 0"),
    ("ale", dict(bins=0), "ale: parameter bins must be an integer >= 1; got 0"),
    ("marginal", dict(binning="x"), "marginal: parameter binning must be one of 'quantile', 'uniform'"),
    ("pd_variance", dict(measure="x"), "pd_variance: parameter measure must be one of 'importance', 'interaction'"),
    ("compare", dict(bins=0), "compare: parameter bins must be an integer >= 1"),
])
def test_parameter_errors_name_function_and_parameter_before_reading_data(name, kwargs, match):
    """Validation comes first: the data argument is never opened for a bad parameter
    (here it is a path that does not exist, which would be a DataError)."""
    func = _public(name)
    data = "/nonexistent/never-read.parquet"
    if name in ("stratpd", "catstratpd"):
        args, kwargs = (data,), dict(kwargs, target="y", feature="x")
    elif name == "importances":
        args, kwargs = (data,), dict(kwargs, target="y")
    elif name == "marginal":
        args = (data, "x")
    elif name in ("ice", "compare"):
        args = (None, data, "x")
    else:
        args = (None, data, "x")
    with pytest.raises(InvalidParameterError) as ei:
        func(*args, **kwargs)
    assert str(ei.value).startswith(match)


def test_a_data_error_is_not_a_parameter_error():
    df = pd.DataFrame({"x": np.arange(50.0), "y": np.ones(50), "s": ["a"] * 50})
    with pytest.raises(DataError) as ei:
        daskpd.stratpd(df, target="s", feature="x")  # a non-numeric target: the data's fault
    assert not isinstance(ei.value, InvalidParameterError)
