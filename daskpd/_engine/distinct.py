"""A column's distinct values, capped: the home of the complete vocabularies pass 1 collects.

:func:`distinct_capped` gives a partition's sorted distinct non-missing values, or None
beyond a cap (integers, booleans and floats by one compiled hash-set scan of their
bits); :func:`union_capped` merges partitions' values under the same cap;
:func:`sort_labels` sorts labels as pandas does (mixed types by type name, then text).
"""
from __future__ import annotations

import numba
import numpy as np
import pandas as pd

__all__ = ["distinct_capped", "union_capped", "sort_labels"]


@numba.njit(cache=True, nogil=True)
def _distinct_bits(bits, cap):
    """Distinct int64 values of ``bits`` in first-seen order; (values, overflowed).  The
    hash table starts small and doubles as values arrive (a table sized for ``cap`` up
    front would cost more to allocate than the scan)."""
    size = 1024
    mask = size - 1
    table = np.empty(size, np.int64)
    used = np.zeros(size, np.bool_)
    out = np.empty(min(cap, bits.shape[0]) + 1, np.int64)
    n = 0
    for i in range(bits.shape[0]):
        b = bits[i]
        h = ((b * np.int64(-7046029254386353131)) >> np.int64(17)) & mask
        while used[h] and table[h] != b:
            h = (h + 1) & mask
        if not used[h]:
            if n == cap:
                return out[:n], True
            out[n] = b
            n += 1
            if 2 * n > size:  # grow and re-insert
                size *= 2
                mask = size - 1
                table = np.empty(size, np.int64)
                used = np.zeros(size, np.bool_)
                for j in range(n):
                    g = ((out[j] * np.int64(-7046029254386353131)) >> np.int64(17)) & mask
                    while used[g]:
                        g = (g + 1) & mask
                    used[g] = True
                    table[g] = out[j]
            else:
                used[h] = True
                table[h] = b
    return out[:n], False


def distinct_capped(s: pd.Series, cap: int):
    """Sorted distinct non-missing values of ``s`` (numpy array), or None beyond ``cap``."""
    if len(s) == 0:
        return np.asarray(s.dropna().to_numpy())[:0]
    dtype = s.dtype
    if isinstance(dtype, np.dtype) and dtype.kind in "iub":
        vals, over = _distinct_bits(s.to_numpy().astype(np.int64, copy=False), cap)
        return None if over else np.sort(vals.astype(dtype))
    if isinstance(dtype, np.dtype) and dtype.kind == "f":
        x = s.to_numpy()
        x = x[~np.isnan(x)] + 0.0
        vals, over = _distinct_bits(x.view(np.int64), cap)
        return None if over else np.sort(vals.view(np.float64))
    u = pd.unique(s.dropna())
    if len(u) > cap:
        return None
    return sort_labels(np.asarray(u, dtype=object) if not isinstance(u, np.ndarray) else u)


def sort_labels(values) -> np.ndarray:
    """Labels sorted as pandas sorts them; mixed types by (type name, text) instead."""
    arr = np.asarray(values)
    try:
        return np.asarray(pd.Index(arr).sort_values(), dtype=arr.dtype if arr.dtype != object else object)
    except TypeError:
        keyed = sorted(arr.tolist(), key=lambda v: (type(v).__name__, str(v)))
        return np.asarray(keyed, dtype=object)


def union_capped(parts, cap: int):
    if any(p is None for p in parts):
        return None
    parts = [p for p in parts if len(p)]
    if not parts:
        return None if False else np.asarray([])
    if all(p.dtype.kind in "iufb" for p in parts):
        u = np.unique(np.concatenate(parts))
    else:
        u = sort_labels(pd.unique(np.concatenate([np.asarray(p, dtype=object) for p in parts])))
    return None if len(u) > cap else u
