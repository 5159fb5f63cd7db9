"""Raw rows of one feature's keyed sums (:class:`Rows`): kept compact until they are
summed (:func:`daskpd._engine.sums.reduce_tables`), and cut into runs of leaves for the
buckets by a stable counting sort.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numba
from dask.sizeof import sizeof
import numpy as np

__all__ = ["Rows"]


@dataclass
class Rows:
    """Raw rows of one feature's keyed sums, compact: ``(leaf, key)``, the row's ``y``
    and ``x`` (None unless x is summed).  Summed, a row adds ``[1, y, x]`` (without the
    ``x`` column when ``x`` is None) -- the layout of the tables."""

    leaf: np.ndarray  # uint16 or int32 (the narrowest that holds the leaves)
    key: np.ndarray  # uint16 or int32 codes
    y: np.ndarray
    x: np.ndarray | None = None
    grouped = False

    def __len__(self) -> int:
        return len(self.leaf)

    @property
    def n_stats(self) -> int:
        return 2 if self.x is None else 3

    @property
    def nbytes(self) -> int:
        return int(self.leaf.nbytes + self.key.nbytes + self.y.nbytes + (0 if self.x is None else self.x.nbytes))

    def _args(self):
        x = self.x if self.x is not None else self.y[:0]
        return self.y, x, self.x is not None

    @classmethod
    def concat(cls, parts: Sequence["Rows"]) -> "Rows":
        """The rows of ``parts``, in order (one batch)."""
        parts = list(parts)
        if len(parts) == 1:
            return parts[0]
        has_x = parts[0].x is not None
        return cls(np.concatenate([p.leaf for p in parts]), np.concatenate([p.key for p in parts]),
                   np.concatenate([p.y for p in parts]), np.concatenate([p.x for p in parts]) if has_x else None)

    def split(self, bounds: np.ndarray) -> list["Rows"]:
        """The rows by runs of leaves ``bounds[b] <= leaf < bounds[b + 1]`` (a stable
        counting sort: rows keep their order within a run)."""
        return [self] if len(bounds) == 2 else _cut_rows([self], bounds)

    @classmethod
    def concat_split(cls, parts: Sequence["Rows"], bounds: np.ndarray) -> list["Rows"]:
        """``Rows.concat(parts).split(bounds)`` without the concatenated copy: every
        part's rows go straight to their run, after the runs' rows of the parts before
        it (the same rows in the same order, so the same bits downstream).  Parts whose
        dtypes differ are concatenated first (numpy's promotion, as ``concat`` does)."""
        parts = list(parts)
        first = parts[0]
        same = all(p.leaf.dtype == first.leaf.dtype and p.key.dtype == first.key.dtype
                   and (p.x is None) == (first.x is None)
                   for p in parts)
        if len(bounds) == 2 or not same:
            return cls.concat(parts).split(bounds)
        return _cut_rows(parts, bounds)


def _cut_rows(parts: list, bounds: np.ndarray) -> list:
    """The rows of ``parts`` (same dtypes), in order, cut into the runs of leaves of
    ``bounds``: a stable counting sort, each part scattered after the parts before it."""
    nb = len(bounds) - 1
    first = parts[0]
    lo = int(bounds[0])
    bucket_of_leaf = (np.searchsorted(bounds, np.arange(lo, bounds[-1]), side="right") - 1).astype(np.int64)
    start = np.zeros(nb + 1, np.int64)
    for p in parts:
        start[1:] += _count_rows(p.leaf, bucket_of_leaf, nb, lo)
    np.cumsum(start, out=start)
    n, has_x = int(start[-1]), first.x is not None
    leaf, key, y = np.empty(n, first.leaf.dtype), np.empty(n, first.key.dtype), np.empty(n, first.y.dtype)
    x = np.empty(n if has_x else 0, first.y.dtype)
    pos = start[:-1].copy()
    for p in parts:
        px = p.x if p.x is not None else p.y[:0]
        _scatter_rows(p.leaf, p.key, p.y, px, has_x, bucket_of_leaf, lo, pos, leaf, key, y, x)

    def cut(arr, a, z):
        # each run owns its memory: runs travel to different tasks, and a worker that
        # spills one must free its bytes (a view would keep the whole array alive)
        return arr[a:z].copy() if nb > 1 else arr[a:z]

    return [Rows(cut(leaf, a, z), cut(key, a, z), cut(y, a, z), cut(x, a, z) if has_x else None)
            for a, z in zip(start[:-1], start[1:])]


@numba.njit(cache=True, nogil=True)
def _count_rows(leaf, bucket_of_leaf, nb, lo):
    count = np.zeros(nb, np.int64)
    for i in range(leaf.shape[0]):
        count[bucket_of_leaf[leaf[i] - lo]] += 1
    return count


@numba.njit(cache=True, nogil=True)
def _scatter_rows(leaf, key, y, x, has_x, bucket_of_leaf, lo, pos, out_l, out_k, out_y, out_x):
    """The rows appended to their runs at ``pos`` (advanced in place)."""
    for i in range(leaf.shape[0]):
        b = bucket_of_leaf[leaf[i] - lo]
        p = pos[b]
        pos[b] = p + 1
        out_l[p] = leaf[i]
        out_k[p] = key[i]
        out_y[p] = y[i]
        if has_x:
            out_x[p] = x[i]


# dask's memory manager counts these by their arrays (spilling decisions need it)
sizeof.register(Rows)(lambda o: o.nbytes)
