"""Column kinds: the one rule, used by every function and by the job runner.

A column's kind comes from its dtype (:func:`kind_of`):

* ``numeric``: integers, unsigned integers, floats, decimals read as floats;
* ``categorical``: strings, object, pandas ``category``, and **booleans**;
* ``datetime``: datetimes (with or without a time zone) and timedeltas;
* ``unsupported``: nested and binary types (struct, list, map, bytes, ...) -- never a
  feature; but keys stored as binary -- UUIDs, fixed-size binary of at most ``KEY_BYTES``
  bytes (:func:`key_type`) -- are categorical: each value a level.  They are identifiers,
  left out of the default features and stratifying columns (:mod:`daskpd._data.suspects`)
  and used only when named.

Booleans are categorical because a two-level column has an effect, not a slope: its
curve is the difference between the levels, and every measure taken from it
(importance, impact, PD variance) must not depend on which level the column calls 1.
As a numeric 0/1 curve, a flag that is true in 1% of the rows would score its
count-weighted importance 99 times lower than the same flag stored negated.  A
function that asks for a number by name (:func:`daskpd.stratpd` on a boolean) still
reads it as 0/1.

A caller may declare any column categorical (integer codes, say).  A datetime feature is
refused with :func:`datetime_message`: a curve over time needs a number (days since an
epoch, the year) or labels the user chooses.
"""
from __future__ import annotations

import pandas as pd
import pyarrow as pa


__all__ = ["kind_of", "is_numeric_like", "is_text", "datetime_message", "unsupported_message", "key_type"]

#: a fixed-size binary column this wide at most holds keys (a UUID: 16, a SHA-256: 32)
KEY_BYTES = 64


def key_type(arrow_type) -> bool:
    """A column of keys by its stored type: a UUID (arrow's ``arrow.uuid`` extension,
    DuckDB's UUID) or fixed-size binary of at most ``KEY_BYTES`` bytes."""
    if arrow_type is None:
        return False
    if isinstance(arrow_type, pa.ExtensionType):
        if getattr(arrow_type, "extension_name", "") in ("arrow.uuid", "uuid"):
            return True
        arrow_type = arrow_type.storage_type
    return pa.types.is_fixed_size_binary(arrow_type) and arrow_type.byte_width <= KEY_BYTES


def _nested(t) -> bool:
    """A nested or binary arrow type (None: not known); keys (:func:`key_type`) are not."""
    if t is None or key_type(t):
        return False
    return (pa.types.is_nested(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t)
            or pa.types.is_fixed_size_binary(t))


def kind_of(dtype, arrow_type=None) -> str:
    """``numeric`` | ``categorical`` | ``datetime`` | ``unsupported`` for a pandas dtype
    (the rule in the module docstring); ``arrow_type``, the type the files store when
    known, tells a nested column (read as object) from a column of strings."""
    if _nested(arrow_type if arrow_type is not None else getattr(dtype, "pyarrow_dtype", None)):
        return "unsupported"
    if isinstance(dtype, pd.CategoricalDtype) or pd.api.types.is_bool_dtype(dtype):
        return "categorical"
    if pd.api.types.is_numeric_dtype(dtype):
        return "numeric"
    if pd.api.types.is_datetime64_any_dtype(dtype) or pd.api.types.is_timedelta64_dtype(dtype):
        return "datetime"
    return "categorical"


def is_numeric_like(dtype) -> bool:
    """Numbers and booleans: the columns that read as float64 (bools as 0/1)."""
    return kind_of(dtype) == "numeric" or pd.api.types.is_bool_dtype(dtype)


def datetime_message(feature: str, dtype) -> str:
    """The one wording for a datetime feature."""
    return (f"feature {feature!r} is a datetime ({dtype}); convert it first: to a number (days since an epoch, the "
            "year) for a curve, or to labels (the year, .dt.strftime) for categories; or leave it out of the features")


def unsupported_message(column: str, dtype, role: str = "feature") -> str:
    """The one wording for a nested or binary column asked for as a feature (or ``role``)."""
    return (f"{role} {column!r} has type {dtype}, which is not a number, a category or a date (a nested or binary "
            f"column cannot be a {role}); extract a scalar column from it, or leave it out")


def is_text(dtype) -> bool:
    """Whether ``dtype`` holds text: object, string, or categories of either."""
    return (pd.api.types.is_object_dtype(dtype) or pd.api.types.is_string_dtype(dtype)
            or (isinstance(dtype, pd.CategoricalDtype)
                and (pd.api.types.is_object_dtype(dtype.categories.dtype)
                     or pd.api.types.is_string_dtype(dtype.categories.dtype))))
