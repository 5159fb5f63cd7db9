"""Row filters in disjunctive normal form (a list of ``(column, op, value)``, or a list
of such lists): the home of reading them (:func:`filter_groups`, :func:`filter_columns`)
and of applying them row-wise to a dask DataFrame (:func:`apply_filters`: CSV sources;
parquet pushes them into the reader).
"""
from __future__ import annotations

import operator

from .._errors import DataError
from .columns import check_columns

__all__ = ["filter_groups", "filter_columns", "apply_filters"]


def filter_groups(filters):
    if not filters:
        return []
    if isinstance(filters[0], (list, tuple)) and filters[0] and isinstance(filters[0][0], (list, tuple)):
        return [list(g) for g in filters]
    return [list(filters)]


def filter_columns(filters) -> list[str]:
    """The columns ``filters`` (DNF: a list of ``(column, op, value)`` or a list of such
    lists) test, each once."""
    return list(dict.fromkeys(str(c) for group in filter_groups(filters) for c, _, _ in group))


_OPS = {"==": operator.eq, "=": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
        ">": operator.gt, ">=": operator.ge}


def apply_filters(ddf, filters, label: str = "data"):
    """Row-wise DNF ``filters`` on a dask DataFrame (CSV sources; parquet pushes them
    into the reader).  A filter column the frame lacks is a DataError naming it."""
    groups = filter_groups(filters)
    if not groups:
        return ddf
    check_columns(ddf.columns, filter_columns(filters), source=f"{label} (filters)")
    any_mask = None
    for group in groups:
        all_mask = None
        for col, op, val in group:
            s = ddf[str(col)]
            if op == "in":
                m = s.isin(list(val))
            elif op == "not in":
                m = ~s.isin(list(val))
            elif op in _OPS:
                m = _OPS[op](s, val)
            else:
                raise DataError(f"filters: unknown operator {op!r} for column {col!r}; expected one of "
                                f"{', '.join(map(repr, [*_OPS, 'in', 'not in']))}")
            all_mask = m if all_mask is None else (all_mask & m)
        any_mask = all_mask if any_mask is None else (any_mask | all_mask)
    return ddf[any_mask]
