"""Encodings: columns as floats for the stratifying trees, and feature values as key codes.

* :class:`FeatureEncoder` turns the stratifying columns of a partition into a float64
  matrix: numbers as they are (datetimes as integer nanoseconds), categories as their
  position among the sorted levels seen in the tree sample (a level the sample did not
  see, and a missing value, become NaN, which the trees route like any missing value).
* :class:`KeyCoder` turns a feature's values into int64 codes ``0..n_keys-1`` in the
  feature's order: the bin of a binned numeric feature, else the position of the value
  among the feature's distinct values in the whole data (collected by the sample pass,
  so every value has a code), with a last code for missing categories when they form a
  level of their own.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

__all__ = ["FeatureEncoder", "KeyCoder", "as_float", "kind_of", "column_kinds"]


def kind_of(dtype) -> str:
    """``numeric`` | ``datetime`` | ``categorical`` for a pandas dtype."""
    if pd.api.types.is_bool_dtype(dtype) or pd.api.types.is_numeric_dtype(dtype):
        if isinstance(dtype, pd.CategoricalDtype):
            return "categorical"
        return "numeric"
    if pd.api.types.is_datetime64_any_dtype(dtype) or pd.api.types.is_timedelta64_dtype(dtype):
        return "datetime"
    return "categorical"


def column_kinds(dtypes: pd.Series) -> dict[str, str]:
    return {str(c): kind_of(t) for c, t in dtypes.items()}


def as_float(values) -> np.ndarray:
    """A numeric, boolean or datetime pandas Series/array as float64 (missing -> NaN)."""
    s = pd.Series(values) if not isinstance(values, pd.Series) else values
    dtype = s.dtype
    if pd.api.types.is_datetime64_any_dtype(dtype) or pd.api.types.is_timedelta64_dtype(dtype):
        out = s.to_numpy(dtype="int64", na_value=np.iinfo("int64").min).astype("float64")
        out[s.isna().to_numpy()] = np.nan
        return out
    if pd.api.types.is_bool_dtype(dtype) or pd.api.types.is_numeric_dtype(dtype):
        return s.to_numpy(dtype="float64", na_value=np.nan)
    raise TypeError(f"not numeric: {dtype}")


def _label_codes(s: pd.Series, index: pd.Index, as_text: bool) -> np.ndarray:
    """Position of every value of ``s`` in ``index`` (-1: absent or missing), computed on
    the distinct values only."""
    codes, uniques = pd.factorize(s, use_na_sentinel=True)
    if as_text:
        uniques = pd.Index(uniques).astype(str)
    pos = index.get_indexer(pd.Index(uniques, dtype=object) if not as_text else uniques)
    out = np.where(codes >= 0, pos[np.maximum(codes, 0)] if len(pos) else -1, -1)
    return out.astype(np.int64)


@dataclass
class FeatureEncoder:
    """Stratifying columns -> float64 matrix (see the module docstring)."""

    columns: list[str]
    kinds: dict[str, str]
    categories: dict[str, pd.Index] = field(default_factory=dict)

    @classmethod
    def fit(cls, sample: pd.DataFrame, columns: Sequence[str]) -> "FeatureEncoder":
        columns = [str(c) for c in columns]
        kinds = column_kinds(sample[columns].dtypes)
        cats = {}
        for c in columns:
            if kinds[c] == "categorical":
                # levels as strings (transform compares as strings too), sorted
                cats[c] = pd.Index(np.sort(sample[c].dropna().astype(str).unique()))
        return cls(columns, kinds, cats)

    def transform(self, df: pd.DataFrame, columns: Sequence[str] | None = None) -> np.ndarray:
        columns = self.columns if columns is None else list(columns)
        out = np.empty((len(df), len(columns)), dtype="float64")
        for j, c in enumerate(columns):
            if self.kinds[c] == "categorical":
                codes = _label_codes(df[c], self.categories[c], as_text=True).astype("float64")
                codes[codes < 0] = np.nan
                out[:, j] = codes
            else:
                out[:, j] = as_float(df[c])
        return out


@dataclass
class KeyCoder:
    """A feature's values -> int64 codes in ``[0, n_keys)`` (see the module docstring).

    ``edges``: bin edges of a binned numeric feature (-inf, ..., +inf); ``values``: the
    sorted distinct values (numbers, or category labels in the feature's order);
    ``nan_level``: missing categories get the last code.
    """

    kind: str  # "numeric" | "categorical"
    edges: np.ndarray | None = None
    values: np.ndarray | None = None
    nan_level: bool = False

    @property
    def binned(self) -> bool:
        return self.edges is not None

    @property
    def n_keys(self) -> int:
        if self.edges is not None:
            return len(self.edges) - 1
        return len(self.values) + (1 if self.nan_level else 0)

    def labels(self) -> np.ndarray:
        """The value of every code (categories: NaN last when ``nan_level``)."""
        if self.edges is not None:
            raise ValueError("a binned feature's positions are placed by the mean x of their rows")
        if self.nan_level:
            return np.append(np.asarray(self.values, dtype=object), np.array([np.nan], dtype=object))
        return self.values

    def valid(self, s: pd.Series) -> np.ndarray:
        """Rows that have a key (numbers: finite; categories: present, or any with nan_level)."""
        if self.kind == "numeric":
            return np.isfinite(as_float(s))
        if self.nan_level:
            return np.ones(len(s), dtype=bool)
        return s.notna().to_numpy()

    def encode(self, s: pd.Series) -> np.ndarray:
        """Codes of the values of ``s`` (rows for which :meth:`valid` holds)."""
        if self.kind == "numeric":
            x = as_float(s)
            if self.edges is not None:
                b = np.searchsorted(self.edges, x, side="right") - 1
                return np.clip(b, 0, len(self.edges) - 2).astype(np.int64)
            codes = np.searchsorted(self.values, x).astype(np.int64)
            bad = (codes >= len(self.values)) | (self.values[np.minimum(codes, len(self.values) - 1)] != x)
            if bad.any():
                raise ValueError(f"value {x[bad][0]!r} is not among the feature's distinct values")
            return codes
        vals = np.asarray(self.values)
        if vals.dtype.kind in "iufb" and isinstance(s.dtype, np.dtype) and s.dtype.kind in "iufb":
            x = s.to_numpy()
            codes = np.searchsorted(vals, x).astype(np.int64)
            miss = np.isnan(x) if x.dtype.kind == "f" else np.zeros(len(x), bool)
            ok = ~miss
            bad = ok & ((codes >= len(vals)) | (vals[np.minimum(codes, len(vals) - 1)] != x))
        else:
            codes = _label_codes(s, pd.Index(vals, dtype=object), as_text=False)
            miss = s.isna().to_numpy()
            bad = (codes < 0) & ~miss
        if bad.any():
            raise ValueError(f"a value of {s.name!r} is not among the levels found by the sample pass")
        if self.nan_level:
            codes = np.where(miss, len(vals), codes)
        return codes
