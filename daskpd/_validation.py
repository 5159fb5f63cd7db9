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

The constraints stay introspectable: :func:`get_constraints` returns them (the job spec
schema in :mod:`daskpd.job.spec` is derived from them and from the signatures).

Checks that need the data (a column exists, a grid names a requested feature) stay in
the functions; they raise :class:`~daskpd._errors.DataError` or, when the fault is the
parameter's, ``InvalidParameterError``.
"""
from __future__ import annotations

import contextlib
import contextvars
import difflib
import functools
import inspect
import math
import os
import sys
import warnings
from abc import ABC, abstractmethod
from numbers import Integral, Real

import numpy as np

from ._errors import InvalidParameterError

__all__ = [
    "Constraint", "Interval", "StrOptions", "Boolean", "InstancesOf", "ColumnName", "ColumnNames",
    "Percentiles", "Probabilities", "Callables", "ArrayLike", "ArrayOrColumn", "IO_CONSTRAINTS", "POSITIVE_INT", "NON_NEGATIVE_INT",
    "N_TRIALS", "MAX_TRIALS", "TrialCount", "NoneConstraint", "NO_VALIDATION", "make_constraint", "validate_params",
    "validate_parameter", "get_constraints", "InvalidParameterError",
]

#: the constraint list of a parameter that the decorator leaves alone (data, model, ...)
NO_VALIDATION = "no_validation"


class Constraint(ABC):
    """A set of allowed values: ``is_satisfied_by``, a description, a normalisation."""

    @abstractmethod
    def is_satisfied_by(self, value) -> bool:
        """Whether ``value`` is allowed."""

    @abstractmethod
    def __str__(self) -> str:
        """What is expected, completing "must be ..."."""

    def convert(self, value):
        """The value the function sees (plain Python types)."""
        return value

    def hint(self, name: str, value) -> str | None:
        """What to do instead, when ``value`` looks like a common mistake (or None)."""
        return None

    def __repr__(self):
        return f"<{type(self).__name__}: {self}>"


def _is_int(value) -> bool:
    return isinstance(value, Integral) and not isinstance(value, (bool, np.bool_))


def _is_real(value) -> bool:
    return isinstance(value, Real) and not isinstance(value, (bool, np.bool_))


class Interval(Constraint):
    """Numbers of ``type`` (:class:`numbers.Integral` or :class:`numbers.Real`) in a range.

    ``left`` / ``right`` of None are unbounded; ``closed`` is ``"left"``, ``"right"``,
    ``"both"`` or ``"neither"``.  Booleans are never numbers here, and NaN is in no
    interval.
    """

    def __init__(self, type, left, right, *, closed: str):
        if type not in (Integral, Real):
            raise TypeError("Interval type must be numbers.Integral or numbers.Real")
        if closed not in ("left", "right", "both", "neither"):
            raise ValueError(f"Interval closed must be 'left', 'right', 'both' or 'neither'; got {closed!r}")
        if left is not None and right is not None and right <= left:
            raise ValueError(f"Interval right ({right}) must exceed left ({left})")
        self.type, self.left, self.right, self.closed = type, left, right, closed

    def __contains__(self, value) -> bool:
        if isinstance(value, float) and math.isnan(value):
            return False
        if self.left is not None:
            if value < self.left or (value == self.left and self.closed in ("right", "neither")):
                return False
        if self.right is not None:
            if value > self.right or (value == self.right and self.closed in ("left", "neither")):
                return False
        return True

    def is_satisfied_by(self, value) -> bool:
        ok = _is_int(value) if self.type is Integral else _is_real(value)
        return ok and float(value) in self

    def convert(self, value):
        return int(value) if self.type is Integral else float(value)

    def __str__(self):
        what = "an integer" if self.type is Integral else "a number"
        lo_in = self.closed in ("left", "both")
        hi_in = self.closed in ("right", "both")
        if self.right is None and self.left is not None:
            return f"{what} {'>=' if lo_in else '>'} {self.left}"
        if self.left is None and self.right is not None:
            return f"{what} {'<=' if hi_in else '<'} {self.right}"
        if self.left is None:
            return what
        return f"{what} in {'[' if lo_in else '('}{self.left}, {self.right}{']' if hi_in else ')'}"


class StrOptions(Constraint):
    """One of a few strings (listed in the given order)."""

    def __init__(self, *options: str):
        if not options or not all(isinstance(o, str) for o in options):
            raise TypeError("StrOptions takes one or more strings")
        self.options = tuple(options)

    def is_satisfied_by(self, value) -> bool:
        return isinstance(value, str) and value in self.options

    def __str__(self):
        return "one of " + ", ".join(map(repr, self.options))

    def hint(self, name, value):
        if not isinstance(value, str):
            return None

        near = difflib.get_close_matches(value, self.options, n=1)
        return f"Did you mean {near[0]!r}?" if near else None


class Boolean(Constraint):
    """True or False (Python or numpy booleans; not 0/1)."""

    def is_satisfied_by(self, value) -> bool:
        return isinstance(value, (bool, np.bool_))

    def convert(self, value):
        return bool(value)

    def __str__(self):
        return "True or False"


class NoneConstraint(Constraint):
    def is_satisfied_by(self, value) -> bool:
        return value is None

    def __str__(self):
        return "None"


class InstancesOf(Constraint):
    """Any instance of ``type`` (a type or a tuple of types)."""

    def __init__(self, type, name: str | None = None):
        self.type = type
        self.name = name

    def is_satisfied_by(self, value) -> bool:
        return isinstance(value, self.type)

    def __str__(self):
        if self.name:
            return self.name
        types = self.type if isinstance(self.type, tuple) else (self.type,)
        return "an instance of " + " or ".join(t.__name__ for t in types)


class Callables(Constraint):
    def is_satisfied_by(self, value) -> bool:
        return callable(value)

    def __str__(self):
        return "a callable"


class ColumnName(Constraint):
    """A column name: a non-empty string."""

    def is_satisfied_by(self, value) -> bool:
        return isinstance(value, str) and value != ""

    def __str__(self):
        return "a column name (str)"

    def hint(self, name, value):
        if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
            return None
        return (f"daskpd reads {name} from data by name, so pass the name of a column of data; to use separate "
                f"values (e.g. y in stratpd(X, target=y, feature='x1')), add them to data first: "
                f"data.assign({name}=values), then {name}={name!r}")


class ColumnNames(Constraint):
    """A list (or tuple) of column names; with ``allow_single`` a lone name too (a list of one)."""

    def __init__(self, *, allow_single: bool = False, allow_empty: bool = True):
        self.allow_single = allow_single
        self.allow_empty = allow_empty

    def is_satisfied_by(self, value) -> bool:
        if isinstance(value, str):
            return self.allow_single and value != ""
        if hasattr(value, "tolist") and getattr(value, "ndim", 1) == 1:  # pandas Index, numpy array
            value = value.tolist()
        if isinstance(value, (set, frozenset)):
            value = sorted(value, key=str)
        if not isinstance(value, (list, tuple)):
            return False
        return (self.allow_empty or len(value) > 0) and all(isinstance(v, str) and v for v in value)

    def convert(self, value):
        if isinstance(value, str):
            return [value]
        if isinstance(value, (set, frozenset)):
            return sorted(value)
        return list(value.tolist() if hasattr(value, "tolist") else value)

    def __str__(self):
        what = "a list of column names (str)"
        if not self.allow_empty:
            what = "a non-empty list of column names (str)"
        return ("a column name or " + what) if self.allow_single else what


class Percentiles(Constraint):
    """A pair ``(lo, hi)`` of numbers with ``0 <= lo < hi <= 1`` (scikit-learn's grid)."""

    def is_satisfied_by(self, value) -> bool:
        if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) != 2:
            return False
        lo, hi = value
        return _is_real(lo) and _is_real(hi) and 0.0 <= float(lo) < float(hi) <= 1.0

    def convert(self, value):
        return float(value[0]), float(value[1])

    def __str__(self):
        return "a pair of numbers (lo, hi) with 0 <= lo < hi <= 1"


class Probabilities(Constraint):
    """A non-empty 1-D list of probabilities in [0, 1] (a float array once normalised)."""

    def is_satisfied_by(self, value) -> bool:
        if isinstance(value, (str, bytes, dict)):
            return False
        try:
            q = np.asarray(value, dtype="float64")
        except (TypeError, ValueError):
            return False
        return q.ndim == 1 and len(q) > 0 and bool(np.all((q >= 0) & (q <= 1)))

    def convert(self, value):
        return np.asarray(value, dtype="float64")

    def __str__(self):
        return "a non-empty list of probabilities in [0, 1] (e.g. numpy.arange(0.1, 1.0, 0.1), the deciles)"


_NONE = NoneConstraint()


def make_constraint(c) -> Constraint:
    """A :class:`Constraint` from a constraint or a shorthand: None, "boolean", a type."""
    if isinstance(c, Constraint):
        return c
    if c is None:
        return _NONE
    if c == "boolean":
        return Boolean()
    if c == "column":
        return ColumnName()
    if c is callable:
        return Callables()
    if isinstance(c, type):
        return InstancesOf(c)
    raise TypeError(f"unknown constraint {c!r}")


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


#: whether a public call is running in this context (a call inside it re-emits nothing)
_IN_CALL: contextvars.ContextVar[bool] = contextvars.ContextVar("daskpd_in_call", default=False)
_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
#: third-party notices about their own internals, never about the user's data or call
_INTERNAL_NOTICES = (DeprecationWarning, PendingDeprecationWarning, FutureWarning)


def _callers_frame():
    """The innermost frame outside daskpd (and outside :mod:`contextlib`, whose frames sit
    between a context manager and its user): the user's line."""
    frame = sys._getframe(1)
    while frame is not None and (frame.f_code.co_filename.startswith(_PACKAGE)
                                 or frame.f_code.co_filename == contextlib.__file__):
        frame = frame.f_back
    return frame


@contextlib.contextmanager
def warnings_at_callers_line():
    """Every warning raised during a public call, re-issued at the caller's line.

    A warning from deep inside daskpd (or from dask, pandas or scikit-learn while daskpd
    works for the caller) would otherwise name a daskpd file and line, which tells the
    user nothing and is filtered by module as daskpd's.  The warnings of the call are
    recorded and, when it ends (also by an exception), issued again with the location of
    the first frame outside daskpd, through the caller's filters and once-per-location
    registry.  Third-party ``DeprecationWarning``, ``PendingDeprecationWarning`` and
    ``FutureWarning`` about their own internals are dropped: they say nothing about the
    caller's data.  A public call inside another re-issues nothing itself: the outer one
    does.  (Like :func:`warnings.catch_warnings`, which it uses, this assumes one public
    call at a time per process.)"""
    if _IN_CALL.get():
        yield
        return
    token = _IN_CALL.set(True)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                yield
            finally:
                _IN_CALL.reset(token)
                token = None
    finally:
        if token is not None:
            _IN_CALL.reset(token)
        frame = _callers_frame()
        # daskpd's own notices either name a daskpd file or, issued with a stacklevel,
        # already the caller's: keep those
        ours = (_PACKAGE, *(() if frame is None else (frame.f_code.co_filename,)))
        for w in caught:
            if issubclass(w.category, _INTERNAL_NOTICES) and not str(w.filename).startswith(ours):
                continue
            if frame is None:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
                continue
            g = frame.f_globals
            warnings.warn_explicit(w.message, w.category, frame.f_code.co_filename, frame.f_lineno,
                                   module=g.get("__name__"), registry=g.setdefault("__warningregistry__", {}),
                                   source=w.source)


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


def is_number(value) -> bool:
    """A real number that is not a boolean."""
    return _is_real(value)


# A shorthand used by many signatures.
PROGRESS = ["boolean", None]
#: an integer >= 1 (batch sizes, counts)
POSITIVE_INT = Interval(Integral, 1, None, closed="left")
#: an integer >= 0 (seeds, trial counts)
NON_NEGATIVE_INT = Interval(Integral, 0, None, closed="left")

#: the most bootstrap trials a result may carry: a percentile band wants about 1,000
#: trials at 90 % and a few thousand at 99 % (so that each tail holds tens of trials); the
#: trials' memory grows with their number (every (leaf, position) cell of a scan keeps
#: its sums once per trial, every curve its trial curves), which a run checks before it
#: scans (docs/jobs.md, "Memory (before computing)")
MAX_TRIALS = 10_000


class TrialCount(Interval):
    """A count of bootstrap trials: an integer in [1, :data:`MAX_TRIALS`]."""

    def __init__(self):
        super().__init__(Integral, 1, MAX_TRIALS, closed="both")

    def hint(self, name, value):
        if _is_int(value) and value > MAX_TRIALS:
            return (f"{MAX_TRIALS:,} trials already give a 99 % percentile band tens of trials in each tail, and "
                    "every trial adds the sums of every cell of the scan and a curve per result")
        return None


#: the constraint of every ``n_trials`` parameter
N_TRIALS = TrialCount()


class ArrayLike(Constraint):
    """A 1-D sequence of values (list, tuple, numpy array, pandas Series), not a string."""

    def is_satisfied_by(self, value) -> bool:
        return (hasattr(value, "__len__") and hasattr(value, "__getitem__")
                and not isinstance(value, (str, bytes, dict)))

    def __str__(self):
        return "an array of values"


class ArrayOrColumn(Constraint):
    """A column name, or one value per row (any 1-D array-like that is not a string)."""

    def is_satisfied_by(self, value) -> bool:
        if isinstance(value, str):
            return value != ""
        return hasattr(value, "__len__") and hasattr(value, "__getitem__") and not isinstance(value, (bytes, dict))

    def __str__(self):
        return "the name of a weight column or an array of weights"


#: ``progress``, ``storage_options`` and ``filters``: shared by every public function
IO_CONSTRAINTS = {
    "progress": PROGRESS,
    "storage_options": [dict, None],
    "filters": [list, tuple, None],
}
