"""The library's two error types; both are :class:`ValueError`\\ s.

* :class:`DataError`: the *data* is unusable -- a missing column, a file that cannot be
  read, a target that is not numeric, a constant feature.  The message names the column
  or file.
* :class:`InvalidParameterError`: a *parameter* value is not allowed -- wrong type, out
  of range, an unknown option.  The message names the function, the parameter and what
  was expected (raised by :func:`daskpd._validation.validate_params` and by the few
  checks that need the data, e.g. a grid for a column that is not requested).

``InvalidParameterError`` subclasses ``DataError`` so that code written when both were
one class (``except DataError``) keeps catching parameter errors; catching
``InvalidParameterError`` catches parameter errors only, and no data error is an
``InvalidParameterError``.  It is also a :class:`TypeError`, as scikit-learn's is, since
many parameter errors are wrong types.
"""
from __future__ import annotations

__all__ = ["DataError", "InvalidParameterError", "SklearnDifferenceWarning", "RepeatedRowsWarning"]


class DataError(ValueError):
    """Bad input data: the message names the column or file (parameter errors are the
    subclass :class:`InvalidParameterError`)."""


class InvalidParameterError(DataError, TypeError):
    """A parameter value that is not allowed: the message names the parameter and what
    was expected."""


class SklearnDifferenceWarning(UserWarning):
    """A call that scikit-learn would read differently (e.g. ``features=["x1", "x2"]``:
    two 1-way PDs here, one 2-way PD in ``sklearn.inspection.partial_dependence``).  The
    message names the difference and how to get the other reading; silence them all with
    ``warnings.simplefilter("ignore", daskpd.SklearnDifferenceWarning)``."""


class RepeatedRowsWarning(UserWarning):
    """Bootstrap trials over rows that repeat: rows identical in the columns the trial
    weights are drawn from draw the same weights, so the bands' spread is about
    ``sqrt(row_repeats)`` times a row bootstrap's (the message gives the figure; the
    result's ``params["row_repeats"]`` keeps it)."""
