"""Column names, whatever the input: the home of the rule that names a column by its
text (:func:`column_names`, :func:`named`), of the check that wanted columns exist
(:func:`check_columns`) and of its messages (:func:`did_you_mean`, :func:`short_list`).
"""
from __future__ import annotations

import difflib
from typing import Iterable, Sequence

from .._errors import DataError

__all__ = ["column_names", "named", "check_columns", "did_you_mean", "short_list"]


def short_list(names: Iterable, limit: int = 20) -> str:
    names = [str(n) for n in names]
    if len(names) > limit:
        return ", ".join(names[:limit]) + f", ... ({len(names)} in all)"
    return ", ".join(names)


def did_you_mean(missing: Iterable, available: Iterable) -> str:
    """What follows "column ... not found in data": ``. Did you mean 'price'? Available
    columns`` for names close to available ones (difflib's ratio >= 0.6, or the same name
    in another case), else ``; available columns``."""
    avail = [str(a) for a in available]
    lower = {a.lower(): a for a in avail}
    hints = []
    for m in missing:
        m = str(m)
        near = [lower[m.lower()]] if m.lower() in lower else difflib.get_close_matches(m, avail, n=1, cutoff=0.6)
        if near:
            hints.append((m, near[0]))
    if not hints:
        return "; available columns"
    if len(hints) == 1 and len(list(missing)) == 1:
        return f". Did you mean {hints[0][1]!r}? Available columns"
    return ". Did you mean " + ", ".join(f"{near!r} for {m!r}" for m, near in hints) + "? Available columns"


def column_names(columns, what: str = "data") -> list[str]:
    """The rule for column names, whatever the input: a column is named by its text
    (``str(name)``: the integer column 3 is ``'3'``, and ``'3'`` or ``3`` select it); two
    columns with the same text are an error naming them."""
    names = [str(c) for c in columns]
    if len(set(names)) != len(names):
        seen, dup = set(), []
        for c, n in zip(columns, names):
            if n in seen and n not in dup:
                dup.append(n)
            seen.add(n)
        clash = [n for n in dup if sum(1 for c in columns if str(c) == n and not isinstance(c, str)) > 0]
        why = (" (as text: a non-string name such as the integer 3 is the same column as '3')" if clash else "")
        raise DataError(f"{what} has duplicate column names: {short_list(map(repr, dup))}{why}; every column "
                        "needs its own name (rename them)")
    return names


def named(frame, what: str = "data"):
    """``frame`` (pandas or dask) with its columns named by :func:`column_names`."""
    cols = list(frame.columns)
    names = column_names(cols, what)
    if any(not isinstance(c, str) for c in cols):
        frame = frame.rename(columns={c: n for c, n in zip(cols, names) if not isinstance(c, str)})
    return frame


def check_columns(available: Sequence, wanted: Iterable, source: str = "data") -> None:
    """Raise :class:`DataError` naming every wanted column that ``available`` lacks."""
    avail = set(map(str, available))
    missing = [c for c in wanted if str(c) not in avail]
    if missing:
        raise DataError(
            f"column{'s' if len(missing) > 1 else ''} {short_list(map(repr, missing))} "
            f"not found in {source}{did_you_mean(missing, available)}: {short_list(available)}"
        )
