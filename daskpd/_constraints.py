"""The constraints of daskpd's parameters: the home of what a parameter may be.

A :class:`Constraint` is a set of allowed values with a description completing "must
be ..." (``an integer >= 1``), a normalisation to plain Python values and, for common
mistakes, a hint.  :func:`make_constraint` reads the shorthands (None, ``"boolean"``,
``"column"``, ``callable``, a type); the shared constraints of many signatures
(:data:`POSITIVE_INT`, :data:`N_TRIALS`, :data:`IO_CONSTRAINTS`, ...) are defined here
once.  :func:`daskpd._validation.validate_params` checks a call's arguments against
them.
"""
from __future__ import annotations

import difflib
import math
from abc import ABC, abstractmethod
from numbers import Integral, Real

import numpy as np

__all__ = [
    "Constraint", "Interval", "StrOptions", "Boolean", "InstancesOf", "ColumnName", "ColumnNames",
    "Percentiles", "Probabilities", "Callables", "ArrayLike", "ArrayOrColumn", "IO_CONSTRAINTS", "POSITIVE_INT",
    "NON_NEGATIVE_INT", "N_TRIALS", "MAX_TRIALS", "TrialCount", "NoneConstraint", "NO_VALIDATION", "PROGRESS",
    "make_constraint", "is_number",
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
