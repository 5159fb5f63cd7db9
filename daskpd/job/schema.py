"""The job spec's parameter tables, derived from the library's signatures and constraints.

A job spec may set a few parameters of each method (``[stratpd] min_samples_leaf =
10``).  Which ones is listed here (:data:`METHOD_FUNCTIONS`); their checks and
defaults are NOT repeated: each comes from the library function the job runner calls --
the default from ``inspect.signature``, the check from the constraints of its
:func:`daskpd._validation.validate_params` decorator -- so the spec cannot drift from
the library.  TOML has no null: where the library accepts None, the spec takes
``false``.

The tables are built on first use (importing the library functions imports numpy and
pandas; ``daskpd.job.spec`` itself stays cheap).
"""
from __future__ import annotations

import datetime as _dt
import functools
import importlib
import inspect
from dataclasses import dataclass
from typing import Any, Callable

from .._validation import get_constraints

__all__ = ["Key", "BadValue", "describe_value", "METHOD_FUNCTIONS", "TOP_LEVEL", "MODEL_LEVEL", "method_params",
           "top_params", "model_params",
           "library_function", "library_key"]


class BadValue(Exception):
    """A value check failed; the message says what was expected."""


@dataclass(frozen=True)
class Key:
    """One key of a spec table: its check (value -> normalised value) and default."""

    check: Callable
    default: Any = None
    required: bool = False


def describe_value(v) -> str:
    """A TOML value as the error messages name it (``integer 0``, ``string 'big'``)."""
    if isinstance(v, bool):
        return f"boolean {str(v).lower()}"
    if isinstance(v, int):
        return f"integer {v}"
    if isinstance(v, float):
        return f"float {v!r}"
    if isinstance(v, str):
        return f"string {v!r}"
    if isinstance(v, list):
        return "an array"
    if isinstance(v, dict):
        return "a table"
    if isinstance(v, (_dt.date, _dt.time)):
        return f"date/time {v.isoformat()}"
    return type(v).__name__


#: method -> (module, function the job runner calls, the parameters a spec may set)
METHOD_FUNCTIONS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "stratpd": ("daskpd._stratpd", "stratpd", ("min_samples_leaf", "min_slopes_per_x", "few_slopes", "max_bins")),
    "catstratpd": ("daskpd._catstratpd", "catstratpd", ("min_samples_leaf", "nan_as_level")),
    "importances": ("daskpd._importance", "strat_curves_and_importances",
                    ("n_trials", "pvalues", "pvalues_n_trials", "pvalues_sample_size")),
    "binned_mean": ("daskpd._importance", "strat_curves_and_importances", ()),
    "partial_dependence": ("daskpd.model._fpd", "partial_dependence", ("grid_resolution", "percentiles", "method")),
    "ice": ("daskpd.model._ice", "ice", ("grid_resolution", "percentiles", "n_lines", "centered")),
    "ale": ("daskpd.model._ale", "ale", ("bins",)),
    "marginal": ("daskpd.model._marginal", "marginal", ("bins", "binning")),
    "pd_variance": ("daskpd.model._variance", "pd_variance", ("grid_resolution", "percentiles")),
    "h_statistic": ("daskpd.model._hstat", "h_statistic", ("n_points", "total")),
}

#: top-level keys shared by every model-free method: taken from stratpd
TOP_LEVEL = ("daskpd._stratpd", "stratpd", ("sample_size", "tree_method", "honest", "random_state",
                                             "keep_suspect"))
#: keys of the [model] table that are a model-based function's parameters (the trials'
#: keys are passed to every model-based method of the job)
MODEL_LEVEL = ("daskpd.model._fpd", "partial_dependence", ("response", "n_trials", "bootstrap", "subsample_size",
                                                            "band", "row_id"))


def library_function(module: str, name: str):
    return getattr(importlib.import_module(module), name)


def _toml_text(constraints) -> str:
    """What the constraints expect, in TOML's words (true/false; false for None)."""
    parts = ["false" if c.is_satisfied_by(None) else "true or false" if c.is_satisfied_by(True) else str(c)
             for c in constraints]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " or " + parts[-1]


def _checker(constraints) -> Callable:
    """A TOML value -> the library's value (``false`` -> None where None is allowed)."""
    allows_none = any(c.is_satisfied_by(None) for c in constraints)
    allows_bool = any(c.is_satisfied_by(True) for c in constraints)
    text = _toml_text(constraints)

    def check(v):
        if v is False and allows_none and not allows_bool:
            return None
        for c in constraints:
            if v is not None and c.is_satisfied_by(v):
                return c.convert(v)
        raise BadValue(f"expected {text}, got {describe_value(v)}")

    check.__doc__ = text
    return check


def library_key(func, name: str) -> Key:
    """The spec key of parameter ``name`` of ``func``: the function's default and its
    declared constraints (TOML-typed)."""
    param = inspect.signature(func).parameters[name]
    if param.default is inspect.Parameter.empty:
        raise TypeError(f"{func.__name__}: parameter {name} has no default; a job spec cannot leave it out")
    constraints = get_constraints(func)[name]
    if constraints is None:
        raise TypeError(f"{func.__name__}: parameter {name} is not validated by its decorator")
    return Key(_checker(constraints), param.default)


@functools.lru_cache(maxsize=None)
def method_params() -> dict[str, dict[str, Key]]:
    """method -> {parameter: Key}, derived from the library (see the module docstring)."""
    out = {}
    for method, (module, name, keys) in METHOD_FUNCTIONS.items():
        func = library_function(module, name)
        out[method] = {k: library_key(func, k) for k in keys}
    return out


def _keys_of(level) -> dict[str, Key]:
    module, name, keys = level
    func = library_function(module, name)
    return {k: library_key(func, k) for k in keys}


@functools.lru_cache(maxsize=None)
def top_params() -> dict[str, Key]:
    """The top-level keys taken from the library (:data:`TOP_LEVEL`)."""
    return _keys_of(TOP_LEVEL)


@functools.lru_cache(maxsize=None)
def model_params() -> dict[str, Key]:
    """The [model] keys taken from the library (:data:`MODEL_LEVEL`)."""
    return _keys_of(MODEL_LEVEL)
