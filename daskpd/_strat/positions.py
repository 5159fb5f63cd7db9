"""A feature's positions as a vocabulary: the union of two, a table recoded into a
larger one, and the old code -> new code map (:class:`~daskpd._data.encode.KeyCoder`).

Positions are keyed by value -- bin edges (a binned feature keeps its bins), sorted
exact values (a numeric column) or levels (a categorical one) -- so two scans' sums
merge whatever values each saw.  The branches here are on the *positions'* kind (values
or labels), which every model-free estimator shares, never on the estimator.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .._data.encode import KeyCoder
from .._engine.sums import Table
from .._errors import DataError
from .categorical import category_values

__all__ = ["position_labels", "extend_coder", "union_coder", "recode", "code_map"]


def position_labels(coder: KeyCoder) -> np.ndarray:
    """The exact positions of a coder: float64 values, or the levels as objects."""
    return np.asarray(coder.values, dtype="float64" if coder.kind == "numeric" else object)


def extend_coder(coder: KeyCoder, distinct, dtype, feature: str) -> KeyCoder:
    """``coder`` with the values / levels of ``distinct`` (pass 1 over new data) added;
    a binned feature keeps its bins."""
    if coder.binned:
        return coder
    if distinct is None:
        what = "distinct values" if coder.kind == "numeric" else "levels"
        raise DataError(f"feature {feature!r} has too many {what} in the data to extend its stratification's "
                        "positions; refit (a full run)")
    return union_coder(coder, KeyCoder(coder.kind, values=np.asarray(distinct), nan_level=coder.nan_level), dtype)


def union_coder(a: KeyCoder, b: KeyCoder, dtype) -> KeyCoder:
    """The coder of the union of two vocabularies (binned: the same edges)."""
    if a.binned or b.binned:
        if not (a.binned and b.binned and np.array_equal(a.edges, b.edges)):
            raise DataError("the two states bin a feature differently")
        return a
    if a.kind == "numeric":
        va, vb = np.asarray(a.values, "float64"), np.asarray(b.values, "float64")
        vals = va if np.array_equal(va, vb) else np.union1d(va[np.isfinite(va)], vb[np.isfinite(vb)])
        return a if vals is va else KeyCoder("numeric", values=vals)
    la, lb = position_labels(a), position_labels(b)
    if len(la) == len(lb) and all(pd.Index(la, dtype=object) == pd.Index(lb, dtype=object)):
        return a
    both = pd.unique(pd.Index(np.concatenate([la, lb]), dtype=object))
    return KeyCoder("categorical", values=category_values(np.asarray(both, dtype=object), dtype),
                    nan_level=a.nan_level)


def recode(table: Table, old: KeyCoder, new: KeyCoder) -> Table:
    """``table`` (codes of ``old``) with the codes of ``new`` (a superset vocabulary)."""
    if old is new or old.binned:
        return table
    if old.kind == "numeric":
        mapping = np.searchsorted(np.asarray(new.values, "float64"), np.asarray(old.values, "float64"))
    else:
        mapping = pd.Index(position_labels(new), dtype=object).get_indexer(pd.Index(position_labels(old), dtype=object))
        if old.nan_level:
            mapping = np.append(mapping, len(new.values))
    mapping = mapping.astype(np.int64)
    key = mapping[table.key]
    if len(mapping) > 1 and not np.all(np.diff(mapping) > 0):  # not monotone: sort again by (leaf, key)
        order = np.lexsort((key, table.leaf))
        return Table(table.leaf[order], key[order], table.values[order])
    return Table(table.leaf, key, table.values)


def code_map(old: KeyCoder, new: KeyCoder) -> np.ndarray | None:
    """Old code -> new code (a superset vocabulary; increasing), None when the same."""
    if old is new or old.binned:
        return None
    if old.kind == "numeric":
        va, vb = np.asarray(old.values, "float64"), np.asarray(new.values, "float64")
        return None if np.array_equal(va, vb) else np.searchsorted(vb, va).astype(np.int64)
    la, lb = position_labels(old), position_labels(new)
    mapping = pd.Index(lb, dtype=object).get_indexer(pd.Index(la, dtype=object)).astype(np.int64)
    if old.nan_level:
        mapping = np.append(mapping, len(new.values))
    return None if np.array_equal(mapping, np.arange(len(mapping))) and old.n_keys == new.n_keys else mapping
