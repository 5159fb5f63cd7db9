"""Feature kinds: ``numeric`` or ``categorical`` per requested feature, from the dtypes.

The dtype decides (:func:`daskpd._data.encode.kind_of`: ints, floats and bools are
numeric; object, string and category are categorical); a caller may declare numeric
columns categorical (e.g. integer codes).  A datetime feature is refused with one
message, :func:`datetime_message`: a curve over time needs a number (or, for
CatStratPD, labels) chosen by the user.
"""
from __future__ import annotations

from typing import Sequence

import pandas as pd

from .._errors import DataError
from ..io import check_columns
from .encode import kind_of

__all__ = ["resolve_kinds", "datetime_message"]


def datetime_message(feature: str, dtype) -> str:
    return (f"feature {feature!r} is a datetime ({dtype}); convert it to a number first "
            "(e.g. days since an epoch, or the year)")


def resolve_kinds(dtypes: pd.Series, features: Sequence[str], categorical=None) -> dict[str, str]:
    """``{feature: "numeric" | "categorical"}``; ``categorical`` lists columns to treat as
    categorical whatever their dtype (each must exist); datetimes are refused."""
    cats = set()
    if categorical is not None:
        cats = {str(c) for c in categorical}
        check_columns(list(dtypes.index), sorted(cats), source="data (categorical_features)")
    kinds = {}
    for f in features:
        k = kind_of(dtypes[f])
        if k == "datetime":
            raise DataError(datetime_message(f, dtypes[f]))
        kinds[f] = "categorical" if f in cats else k
    return kinds
