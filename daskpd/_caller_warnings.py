"""Warnings of a public call, re-issued at the caller's line: the home of where
daskpd's warnings point.

:func:`warnings_at_callers_line` is entered by every public function
(:func:`daskpd._validation.validate_params`).
"""
from __future__ import annotations

import contextlib
import contextvars
import os
import sys
import warnings

__all__ = ["warnings_at_callers_line"]


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
