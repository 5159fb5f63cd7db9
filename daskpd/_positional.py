"""Keyword safety for ``target`` / ``feature``: scikit-learn's ``_deprecate_positional_args``.

``stratpd(df, "carat", "price")`` reads as "carat given price" to one user and "price
given carat" to another.  The public functions take ``target`` and ``feature`` by name;
this release still accepts them positionally, with a :class:`FutureWarning` that writes
out the call to use instead (``stratpd(data, target='carat', feature='price')``), and
daskpd 0.3.0 makes them keyword-only.
"""
from __future__ import annotations

import functools
import inspect
import warnings

__all__ = ["deprecate_positional_args", "renamed_params", "KEYWORD_ONLY_VERSION"]

#: the release in which the deprecated positional arguments become an error
KEYWORD_ONLY_VERSION = "0.3.0"


def deprecate_positional_args(names):
    """Decorate a function whose signature declares ``names`` keyword-only: calls that
    still pass them positionally (in that order, right after the positional parameters)
    work, with a :class:`FutureWarning` naming the call to write instead.

    Keeps ``__wrapped__`` pointing at the undecorated function (as ``validate_params``
    does), ``inspect.signature`` and the parameter constraints of the wrapped function.
    """
    names = tuple(names)

    def decorator(func):
        sig = inspect.signature(func)
        positional = [p.name for p in sig.parameters.values()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        keyword_only = [p.name for p in sig.parameters.values() if p.kind == p.KEYWORD_ONLY]
        if list(names) != keyword_only[:len(names)]:
            raise TypeError(f"deprecate_positional_args({func.__qualname__}): {names} must be the first "
                            f"keyword-only parameters; they are {keyword_only[:len(names)]}")
        caller = func.__name__

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            extra = len(args) - len(positional)
            if extra <= 0:
                return func(*args, **kwargs)
            if extra > len(names):
                raise TypeError(f"{caller}() takes {len(positional)} positional argument"
                                f"{'s' if len(positional) > 1 else ''} (then {', '.join(names)} by name); "
                                f"got {len(args)}")
            given = dict(zip(names, args[len(positional):]))
            twice = [n for n in given if n in kwargs]
            if twice:
                raise TypeError(f"{caller}() got multiple values for argument {twice[0]!r}")
            lead = ", ".join(positional)
            call = ", ".join(f"{n}={v!r}" for n, v in given.items())
            warnings.warn(f"{caller}({lead}, {', '.join(repr(v) for v in given.values())}) passes "
                          f"{' and '.join(given)} by position; write {caller}({lead}, {call}). "
                          f"{'They are' if len(given) > 1 else 'It is'} keyword-only from daskpd "
                          f"{KEYWORD_ONLY_VERSION}.",
                          FutureWarning, stacklevel=2)
            return func(*args[:len(positional)], **given, **kwargs)

        wrapper.__wrapped__ = getattr(func, "__wrapped__", func)
        wrapper.__signature__ = sig
        return wrapper

    return decorator


def renamed_params(renames: dict):
    """Decorate a public function whose parameters were renamed (``{old: new}``, one name
    per parameter across the package): ``old=`` still works, with a
    :class:`FutureWarning` naming the new spelling; ``old`` and ``new`` together are an
    error.  Keeps the decorated function's signature (the new names)."""
    renames = dict(renames)

    def decorator(func):
        caller = func.__name__

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            for old, new in renames.items():
                if old in kwargs:
                    if new in kwargs:
                        raise TypeError(f"{caller}(): pass {new}= only ({old}= is its deprecated name)")
                    warnings.warn(f"{caller}(): parameter {old}= is renamed {new}= (the name every daskpd "
                                  f"function uses); {old}= is removed in daskpd {KEYWORD_ONLY_VERSION}",
                                  FutureWarning, stacklevel=2)
                    kwargs[new] = kwargs.pop(old)
            return func(*args, **kwargs)

        wrapper.__wrapped__ = getattr(func, "__wrapped__", func)
        wrapper.__signature__ = inspect.signature(func)
        wrapper.renamed_params = {**getattr(func, "renamed_params", {}), **renames}
        return wrapper

    return decorator
