"""Declarative parameter validation, in the style of scikit-learn's ``_param_validation``.

Every public function states its parameters' constraints once, next to its signature::

    @validate_params({
        "data": [NO_VALIDATION],
        "min_samples_leaf": [Interval(Integral, 1, None, closed="left")],
        "max_bins": [Interval(Integral, 2, None, closed="left"), None],
        "tree_method": [StrOptions("hist", "exact")],
        "progress": [Boolean(), None],
        ...
    })
    def stratpd(data, ..., *, min_samples_leaf=15, ...): ...

A value is valid when it satisfies ANY constraint of its list.  Otherwise
:class:`~daskpd._errors.InvalidParameterError` names the function, the parameter, what
was expected and what was given (``stratpd: parameter min_samples_leaf must be an
integer >= 1; got 0``).  Valid values are normalised by the constraint they satisfy
(numpy integers become ``int``, numpy booleans ``bool``, a percentile pair a tuple of
floats), so the function body and the recorded parameters see plain Python values.
The constraints are those of :mod:`daskpd._constraints`; a decorated call's warnings
are re-issued at the caller's line (:mod:`daskpd._caller_warnings`).

The constraints stay introspectable: :func:`get_constraints` returns them (the job spec
schema in :mod:`daskpd.job.spec` is derived from them and from the signatures).

Checks that need the data (a column exists, a grid names a requested feature) stay in
the functions; they raise :class:`~daskpd._errors.DataError` or, when the fault is the
parameter's, ``InvalidParameterError``.
"""
from __future__ import annotations

import functools
import inspect

import numpy as np

from ._caller_warnings import warnings_at_callers_line
from ._constraints import NO_VALIDATION, make_constraint
from ._errors import InvalidParameterError

__all__ = ["validate_params", "validate_parameter", "get_constraints"]


def _describe(constraints) -> str:
    parts = [str(c) for c in constraints]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " or " + parts[-1]


def validate_parameter(name: str, value, constraints, caller: str | None = None):
    """``value`` normalised by the first constraint it satisfies; else
    :class:`InvalidParameterError` naming ``caller``, ``name`` and what was expected."""
    constraints = [make_constraint(c) for c in constraints]
    for c in constraints:
        if c.is_satisfied_by(value):
            return c.convert(value)
    where = f"{caller}: " if caller else ""
    hints = [h for h in (c.hint(name, value) for c in constraints) if h]
    raise InvalidParameterError(f"{where}parameter {name} must be {_describe(constraints)}; got {_short(value)}"
                                + (f". {hints[0]}" if hints else ""))


def _short(value) -> str:
    """A value for an error message: arrays and frames by their shape, never their contents."""
    kind = type(value).__module__.split(".")[0]
    if kind in ("pandas", "dask") and hasattr(value, "shape"):
        label = getattr(value, "name", None)
        shape = value.shape
        n = "?" if not isinstance(shape[0], int) else f"{shape[0]:,}"
        what = f"a {kind} {type(value).__name__} ({n} rows" + (f" x {shape[1]} columns" if len(shape) > 1 else "")
        return what + (f", name {label!r})" if label is not None else ")")
    if isinstance(value, np.ndarray) and value.size > 8:
        return f"a numpy array of shape {value.shape} (dtype {value.dtype})"
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def validate_params(parameter_constraints: dict, *, signature_of=None):
    """Decorate a function whose parameters are ALL listed in ``parameter_constraints``
    (``NO_VALIDATION`` for those checked elsewhere, e.g. ``data`` or ``model``).

    The listing is checked against the signature when the function is defined, so a new
    parameter cannot go unvalidated.  The constraints are kept on the wrapper (see
    :func:`get_constraints`); ``inspect.signature`` of the wrapper is the function's.
    ``signature_of``: a thin front end taking ``**kwargs`` borrows the signature (and
    the defaults) of the function it forwards to, and is validated as that one.
    """

    def decorator(func):
        sig = inspect.signature(signature_of if signature_of is not None else func)
        names = [p.name for p in sig.parameters.values()
                 if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        if set(names) != set(parameter_constraints):
            missing = sorted(set(names) - set(parameter_constraints))
            extra = sorted(set(parameter_constraints) - set(names))
            raise TypeError(f"validate_params({func.__qualname__}): constraints missing for {missing}, "
                            f"given for unknown parameters {extra}")
        compiled = {k: (None if v == NO_VALIDATION else [make_constraint(c) for c in v])
                    for k, v in parameter_constraints.items()}
        caller = func.__name__

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            try:
                bound = sig.bind(*args, **kwargs)
            except TypeError as exc:
                raise TypeError(_bind_error(caller, sig, args, exc)) from None
            bound.apply_defaults()
            arguments = bound.arguments
            with warnings_at_callers_line():
                for name, cons in compiled.items():
                    if cons is not None:
                        arguments[name] = validate_parameter(name, arguments[name], cons, caller)
                if "data" not in arguments:
                    return func(*bound.args, **bound.kwargs)
                # every public function enters here: a damaged data page of a parquet path,
                # found only while computing, is reported with the file's name; the call's
                # ``progress`` is the setting of every computation it runs (None: the
                # enclosing call's), its stages numbered from 1
                from ._data.lake_checks import damaged_files_named
                from ._engine.progress import progress_call, reporting

                with damaged_files_named(arguments["data"], arguments.get("storage_options")), progress_call(), \
                        reporting(arguments.get("progress")):
                    return func(*bound.args, **bound.kwargs)

        wrapper.__daskpd_constraints__ = compiled
        if signature_of is not None:
            wrapper.__signature__ = sig
        return wrapper

    return decorator


def _bind_error(caller: str, sig: inspect.Signature, args: tuple, exc: TypeError) -> str:
    """The message of a call that does not fit the signature: too many positional
    arguments names the positional parameters and the keyword-only ones to pass by name
    (``stratpd(df, "y", "x1")``); any other mismatch is Python's message (an unknown
    keyword names it)."""
    positional = [p.name for p in sig.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(args) <= len(positional) or any(p.kind is p.VAR_POSITIONAL for p in sig.parameters.values()):
        return f"{caller}(): {exc}"
    required = [p.name for p in sig.parameters.values() if p.kind is p.KEYWORD_ONLY and p.default is p.empty]
    by_name = f"then {', '.join(required)} by name" if required else "the others by name"
    return (f"{caller}() takes {len(positional)} positional argument{'s' if len(positional) != 1 else ''} "
            f"({', '.join(positional)}; {by_name}); got {len(args)}")


def get_constraints(func) -> dict:
    """``{parameter: [Constraint, ...] or None}`` of a function decorated with
    :func:`validate_params` (None: not validated by the decorator)."""
    try:
        return dict(func.__daskpd_constraints__)
    except AttributeError:
        raise TypeError(f"{getattr(func, '__qualname__', func)!r} is not decorated with validate_params") from None
