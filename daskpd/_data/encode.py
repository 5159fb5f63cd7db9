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

import numba
import numpy as np
import pandas as pd

from .kinds import is_numeric_like, kind_of

__all__ = ["FeatureEncoder", "KeyCoder", "as_float"]


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
        # booleans read as 0/1 for the trees (a level unseen in the sample stays a number)
        kinds = {c: "numeric" if is_numeric_like(t) else kind_of(t) for c, t in sample[columns].dtypes.items()}
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
    _lookup: object = field(default=None, init=False, repr=False, compare=False)

    def _search(self):
        if self._lookup is None:
            if self.edges is not None:
                self._lookup = SortedLookup(self.edges, side="right")
            else:
                self._lookup = SortedLookup(np.asarray(self.values, dtype="float64"), side="left")
        return self._lookup

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

    def encode_float(self, x: np.ndarray) -> np.ndarray:
        """Codes of finite float values of a numeric feature."""
        if self.edges is not None:
            return np.clip(self._search()(x) - 1, 0, len(self.edges) - 2)
        codes = self._search()(x)
        bad = (codes >= len(self.values)) | (self.values[np.minimum(codes, len(self.values) - 1)] != x)
        if bad.any():
            raise ValueError(f"value {x[bad][0]!r} is not among the feature's distinct values")
        return codes

    def encode(self, s: pd.Series) -> np.ndarray:
        """Codes of the values of ``s`` (rows for which :meth:`valid` holds)."""
        if self.kind == "numeric":
            return self.encode_float(as_float(s))
        vals = np.asarray(self.values)
        if vals.dtype.kind in "iuf" and isinstance(s.dtype, np.dtype) and s.dtype.kind in "iuf":
            x = s.to_numpy()
            codes = self._search()(np.where(np.isnan(x), 0.0, x) if x.dtype.kind == "f" else x)
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


# ---------------------------------------------------------------------------------
# fast sorted lookups


@numba.njit(cache=True, nogil=True)
def _lookup(x, sorted_values, grid, lo, scale, right):
    """``np.searchsorted(sorted_values, x, side)`` for finite x, through a grid that
    maps equal-width cells of [lo, hi] to the first index at or after the cell start."""
    n = x.shape[0]
    m = sorted_values.shape[0]
    ng = grid.shape[0]
    out = np.empty(n, np.int64)
    for i in range(n):
        v = x[i]
        g = int((v - lo) * scale)
        if g < 0:
            g = 0
        elif g >= ng:
            g = ng - 1
        k = grid[g]
        if right:
            while k > 0 and sorted_values[k - 1] > v:
                k -= 1
            while k < m and sorted_values[k] <= v:
                k += 1
        else:
            while k > 0 and sorted_values[k - 1] >= v:
                k -= 1
            while k < m and sorted_values[k] < v:
                k += 1
        out[i] = k
    return out


class SortedLookup:
    """``np.searchsorted(values, x, side)`` in O(1) per element (a grid of 4 cells per
    value), for the scan's keys: bins of a binned feature, positions of exact values."""

    def __init__(self, values: np.ndarray, side: str = "left"):
        v = np.asarray(values, dtype="float64")
        self.values = v
        self.right = side == "right"
        fin = v[np.isfinite(v)]
        self.lo = float(fin[0]) if len(fin) else 0.0
        hi = float(fin[-1]) if len(fin) else 1.0
        ng = max(1, 4 * len(v))
        self.scale = ng / (hi - self.lo) if hi > self.lo else 0.0
        starts = self.lo + np.arange(ng) / self.scale if self.scale else np.full(ng, self.lo)
        self.grid = np.searchsorted(v, starts, side=side).astype(np.int64)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return _lookup(np.ascontiguousarray(x, dtype="float64"), self.values, self.grid, self.lo, self.scale,
                       self.right)
