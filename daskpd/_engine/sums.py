"""Keyed sums: the tables every reduction of daskpd is made of.

A :class:`Table` holds sums of some statistics per distinct key ``(leaf, key)``, sorted
by leaf then key: ``leaf`` (int32), ``key`` (int64: a bin number, an order-preserving
code of a float, a category code) and ``values`` (float64, one column per statistic).

* :func:`group_sums` groups rows into a table (a stable LSD radix sort on the packed
  key, then a segmented sum);
* :func:`merge_tables` merges tables (a k-way merge of the sorted runs, summing equal
  keys);
* :func:`reduce_tables` groups several tables, or batches of :class:`Rows` (one
  feature's raw rows: keys and the row's y and x, expanded into the statistics as they
  are summed), into one table: into a dense (leaf, key) grid when
  the keys are codes whose grid is not much larger than the rows (no sort at all),
  else by one of the above.

Both add the rows of a group in their input order (rows in order, then tables in
order), which is what makes a reduction bit-identical on every scheduler: the sum of a
group only depends on which rows (and tables) it is made of and in what order, never on
which other groups share the table.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Sequence

import numba
from dask.sizeof import sizeof
import numpy as np
import pandas as pd

from .rows import Rows

__all__ = ["Table", "group_sums", "merge_tables", "reduce_tables", "float_keys", "keys_to_float"]

_DIGIT = 11  # radix sort digit width (2048 buckets)


@dataclass
class Table:
    """Sums of ``values`` per (leaf, key).

    ``grouped``: one row per distinct (leaf, key), sorted by leaf, then key (the output
    of every function here); otherwise raw rows in any order.
    """

    leaf: np.ndarray  # int32
    key: np.ndarray  # int64
    values: np.ndarray  # float64, shape (len, n_stats)
    grouped: bool = True

    def __len__(self) -> int:
        return len(self.leaf)

    @property
    def nbytes(self) -> int:
        return int(self.leaf.nbytes + self.key.nbytes + self.values.nbytes)

    @classmethod
    def empty(cls, n_stats: int) -> "Table":
        return cls(np.zeros(0, np.int32), np.zeros(0, np.int64), np.zeros((0, n_stats)))

    def leaf_range(self, lo: int, hi: int) -> "Table":
        """The rows with ``lo <= leaf < hi`` of a grouped table (views, no copy)."""
        a, b = np.searchsorted(self.leaf, [lo, hi], side="left")
        return Table(self.leaf[a:b], self.key[a:b], self.values[a:b])


@numba.njit(cache=True, nogil=True, inline="always")
def _add_row(out, g, i, y, x, has_x):
    out[g, 0] += 1.0
    out[g, 1] += y[i]
    if has_x:
        out[g, 2] += x[i]


@numba.njit(cache=True, nogil=True)
def _accumulate_rows(acc, touched, leaves, keys, y, x, has_x, lo, n_keys):
    for i in range(leaves.shape[0]):
        c = (np.int64(leaves[i]) - lo) * n_keys + keys[i]
        touched[c] = True
        _add_row(acc, c, i, y, x, has_x)


@numba.njit(cache=True, nogil=True, inline="always")
def _n_runs(sorted_keys):
    """Number of runs of equal values in ``sorted_keys``."""
    n_runs = 0
    for i in range(sorted_keys.shape[0]):
        if i == 0 or sorted_keys[i] != sorted_keys[i - 1]:
            n_runs += 1
    return n_runs


@numba.njit(cache=True, nogil=True)
def run_starts(sorted_keys):
    """Index of the first element of each run of equal values of ``sorted_keys``."""
    n = sorted_keys.shape[0]
    starts = np.empty(_n_runs(sorted_keys), np.int64)
    q = -1
    for i in range(n):
        if i == 0 or sorted_keys[i] != sorted_keys[i - 1]:
            q += 1
            starts[q] = i
    return starts


@numba.njit(cache=True, nogil=True)
def _segment_rows(sorted_keys, order, y, x, has_x, m):
    n = sorted_keys.shape[0]
    n_groups = _n_runs(sorted_keys)
    keys = np.empty(n_groups, np.int64)
    out = np.zeros((n_groups, m))
    g = -1
    for i in range(n):
        if i == 0 or sorted_keys[i] != sorted_keys[i - 1]:
            g += 1
            keys[g] = sorted_keys[i]
        _add_row(out, g, order[i], y, x, has_x)
    return keys, out


def float_keys(x: np.ndarray) -> np.ndarray:
    """Order-preserving int64 codes of finite floats (-0.0 and 0.0 share a code)."""
    x = np.asarray(x, dtype="float64") + 0.0  # -0.0 -> 0.0
    bits = x.view(np.int64)
    return bits ^ ((bits >> np.int64(63)) & np.int64(0x7FFFFFFFFFFFFFFF))


def keys_to_float(k: np.ndarray) -> np.ndarray:
    """Inverse of :func:`float_keys`."""
    k = np.asarray(k, dtype=np.int64)
    bits = k ^ ((k >> np.int64(63)) & np.int64(0x7FFFFFFFFFFFFFFF))
    return bits.view(np.float64)


@numba.njit(cache=True, nogil=True)
def _radix_sort(packed, nbits):
    """Stable LSD radix sort of non-negative int64 ``packed`` (< 2**nbits): (sorted, order)."""
    n = packed.shape[0]
    idx = np.arange(n)
    k = packed.copy()
    if nbits <= 0 or n < 2:
        return k, idx
    k2 = np.empty_like(k)
    idx2 = np.empty_like(idx)
    mask = (1 << _DIGIT) - 1
    shift = 0
    while shift < nbits:
        counts = np.zeros((1 << _DIGIT) + 1, np.int64)
        for i in range(n):
            counts[((k[i] >> shift) & mask) + 1] += 1
        for d in range(1 << _DIGIT):
            counts[d + 1] += counts[d]
        for i in range(n):
            d = (k[i] >> shift) & mask
            p = counts[d]
            counts[d] = p + 1
            k2[p] = k[i]
            idx2[p] = idx[i]
        k, k2 = k2, k
        idx, idx2 = idx2, idx
        shift += _DIGIT
    return k, idx


@numba.njit(cache=True, nogil=True)
def _segment_sums(sorted_keys, order, values):
    """Distinct sorted keys and the sums of ``values[order]`` rows per key, in order."""
    n = sorted_keys.shape[0]
    m = values.shape[1]
    n_groups = _n_runs(sorted_keys)
    keys = np.empty(n_groups, np.int64)
    out = np.zeros((n_groups, m))
    g = -1
    for i in range(n):
        if i == 0 or sorted_keys[i] != sorted_keys[i - 1]:
            g += 1
            keys[g] = sorted_keys[i]
        r = order[i]
        for j in range(m):
            out[g, j] += values[r, j]
    return keys, out


def _bits(v: int) -> int:
    return int(v).bit_length()


def _pack(leaves: np.ndarray, keys: np.ndarray):
    """``(packed, kbits, decode)``: (leaf, key) packed into one non-negative int64 whose
    order is the (leaf, key) order.  A key range too wide to pack is replaced by the
    ranks of the distinct keys (``decode`` is then the sorted distinct keys, else the
    smallest key)."""
    kmin, kmax = int(keys.min()), int(keys.max())
    lbits = _bits(int(leaves.max()))
    if lbits + _bits(kmax - kmin) <= 62:
        kbits = _bits(kmax - kmin)
        return (leaves.astype(np.int64) << kbits) | (keys - kmin), lbits + kbits, kbits, kmin
    codes, uniq = pd.factorize(keys, sort=True)
    kbits = _bits(len(uniq) - 1)
    return (leaves.astype(np.int64) << kbits) | codes.astype(np.int64), lbits + kbits, kbits, np.asarray(uniq)


def _unpack(packed: np.ndarray, kbits: int, decode):
    lo = packed & ((1 << kbits) - 1) if kbits else np.zeros(len(packed), np.int64)
    key = decode[lo] if isinstance(decode, np.ndarray) else lo + decode
    return (packed >> kbits).astype(np.int32), key.astype(np.int64)


def group_sums(leaf, key, values) -> Table:
    """Group rows by (leaf, key) and sum each column of ``values`` per group.

    ``leaf``: non-negative ints; ``key``: int64 codes (any range).  Rows of a group are
    added in input order.
    """
    leaf = np.asarray(leaf, dtype=np.int64)
    key = np.asarray(key, dtype=np.int64)
    values = np.ascontiguousarray(values, dtype="float64")
    if values.ndim == 1:
        values = values[:, None]
    if len(leaf) == 0:
        return Table.empty(values.shape[1])
    packed, nbits, kbits, decode = _pack(leaf, key)
    sorted_keys, order = _radix_sort(packed, nbits)
    pk, sums = _segment_sums(sorted_keys, order, values)
    return Table(*_unpack(pk, kbits, decode), sums)


@numba.njit(cache=True, nogil=True)
def _merge_runs(packed, values, starts):
    """k-way merge of sorted runs ``packed[starts[j]:starts[j+1]]``, summing the values of
    equal keys; ties are taken run by run (input order within a group)."""
    r = len(starts) - 1
    m = values.shape[1]
    n = packed.shape[0]
    pos = starts[:-1].copy()
    ends = starts[1:].copy()
    top = np.int64(0x7FFFFFFFFFFFFFFF)
    heads = np.empty(r, np.int64)
    for j in range(r):
        heads[j] = packed[pos[j]] if pos[j] < ends[j] else top
    out_k = np.empty(n, np.int64)
    out_v = np.zeros((n, m))
    g = -1
    for _ in range(n):
        best = 0
        bv = heads[0]
        for j in range(1, r):
            if heads[j] < bv:
                best = j
                bv = heads[j]
        i = pos[best]
        if g < 0 or bv != out_k[g]:
            g += 1
            out_k[g] = bv
        for j in range(m):
            out_v[g, j] += values[i, j]
        pos[best] = i + 1
        heads[best] = packed[i + 1] if i + 1 < ends[best] else top
    return out_k[:g + 1].copy(), out_v[:g + 1].copy()


def merge_tables(tables: Sequence[Table]) -> Table:
    """Merge sorted tables, summing the values of equal (leaf, key); inputs in order."""
    tables = [t for t in tables if t is not None]
    if not tables:
        raise ValueError("nothing to merge")
    nonempty = [t for t in tables if len(t)]
    if len(nonempty) <= 1:
        t = nonempty[0] if nonempty else tables[0]
        return Table(t.leaf.copy(), t.key.copy(), t.values.copy())
    leaves = np.concatenate([t.leaf for t in nonempty])
    packed, _, kbits, decode = _pack(leaves, np.concatenate([t.key for t in nonempty]))
    del leaves
    values = np.ascontiguousarray(np.concatenate([t.values for t in nonempty], axis=0))
    starts = np.cumsum([0] + [len(t) for t in nonempty]).astype(np.int64)
    pk, sums = _merge_runs(packed, values, starts)
    return Table(*_unpack(pk, kbits, decode), sums)


#: a dense grid is used when it has at most this many cells per input row
DENSE_CELLS_PER_ROW = 4


_SCRATCH = threading.local()


def scratch_zeros(n: int, m: int, kind: str):
    """A zeroed (n, m) float64 grid (or (n,) bool marks), reusing this thread's buffer:
    on a dask worker a fresh large array costs page faults (glibc maps and unmaps big
    allocations), which take longer than the sums themselves."""
    key = (m, kind)
    cache = getattr(_SCRATCH, "buffers", None)
    if cache is None:
        cache = _SCRATCH.buffers = {}
    buf = cache.get(key)
    size = n * max(m, 1)
    if buf is None or buf.size < size:
        buf = np.zeros(max(size, 1), dtype=np.bool_ if kind == "marks" else np.float64)
        cache[key] = buf
    else:
        buf[:size] = 0
    return buf[:size].reshape((n, m)) if kind in ("grid", "tree") else buf[:size]


@numba.njit(cache=True, nogil=True)
def _accumulate(acc, touched, leaves, keys, values, lo, n_keys):
    m = values.shape[1]
    for i in range(leaves.shape[0]):
        c = (np.int64(leaves[i]) - lo) * n_keys + keys[i]
        touched[c] = True
        for j in range(m):
            acc[c, j] += values[i, j]


@numba.njit(cache=True, nogil=True)
def _emit(acc, touched, lo, n_keys):
    n = 0
    for c in range(touched.shape[0]):
        if touched[c]:
            n += 1
    out_l = np.empty(n, np.int32)
    out_k = np.empty(n, np.int64)
    out_v = np.empty((n, acc.shape[1]))
    g = 0
    for c in range(touched.shape[0]):
        if touched[c]:
            out_l[g] = lo + c // n_keys
            out_k[g] = c % n_keys
            out_v[g, :] = acc[c, :]
            g += 1
    return out_l, out_k, out_v


def dense_grid(cells: int, m: int):
    """``(acc, touched)``: a zeroed (cells, m) float64 grid and its (cells,) marks, for a
    kernel that sums rows into cells ``(leaf - lo) * n_keys + key``; see :func:`grid_table`."""
    return scratch_zeros(cells, m, "grid"), scratch_zeros(cells, 1, "marks")


def grid_table(acc, touched, lo: int, n_keys: int) -> Table:
    """The touched cells of a dense grid as a grouped table (sorted by leaf, then key)."""
    return Table(*_emit(acc, touched, int(lo), int(n_keys)))


def reduce_tables(tables: Sequence, n_keys: int | None = None) -> Table:
    """One grouped table from several tables (raw or grouped) or batches of
    :class:`Rows`, their rows in input order.

    ``n_keys``: the keys are codes in ``[0, n_keys)``; the rows are then summed into a
    dense (leaf, key) grid when it has at most ``DENSE_CELLS_PER_ROW`` cells per row
    (no sorting), else grouped by sorting (a k-way merge when every table is grouped).
    Every path adds a group's rows in the same order, so they give the same bits.
    """
    tables = [t for t in tables if t is not None]
    if not tables:
        raise ValueError("nothing to reduce")
    m = tables[0].n_stats if isinstance(tables[0], Rows) else tables[0].values.shape[1]
    live = [t for t in tables if len(t)]
    if not live:
        return Table.empty(m)
    raw = isinstance(live[0], Rows)
    if len(live) == 1 and live[0].grouped:
        t = live[0]
        return Table(t.leaf.copy(), t.key.copy(), t.values.copy())
    rows = sum(len(t) for t in live)
    if n_keys is not None:
        lo = min(int(t.leaf.min()) for t in live)
        hi = max(int(t.leaf.max()) for t in live)
        cells = (hi - lo + 1) * int(n_keys)
        if cells <= DENSE_CELLS_PER_ROW * rows:
            acc, touched = dense_grid(cells, m)
            for t in live:
                if raw:
                    _accumulate_rows(acc, touched, t.leaf, t.key, *t._args(), lo, int(n_keys))
                else:
                    _accumulate(acc, touched, t.leaf, t.key, np.ascontiguousarray(t.values), lo, int(n_keys))
            return grid_table(acc, touched, lo, n_keys)
    if raw:
        leaf = np.concatenate([t.leaf for t in live]).astype(np.int64)
        packed, nbits, kbits, decode = _pack(leaf, np.concatenate([t.key for t in live]).astype(np.int64))
        del leaf
        sorted_keys, order = _radix_sort(packed, nbits)
        y = np.concatenate([t.y for t in live])
        x = np.concatenate([t.x for t in live]) if live[0].x is not None else y[:0]
        pk, sums = _segment_rows(sorted_keys, order, y, x, live[0].x is not None, m)
        return Table(*_unpack(pk, kbits, decode), sums)
    if all(t.grouped for t in live):
        return merge_tables(live)
    return group_sums(np.concatenate([t.leaf for t in live]), np.concatenate([t.key for t in live]),
                      np.concatenate([t.values for t in live], axis=0))


# dask's memory manager counts these by their arrays (spilling decisions need it)
sizeof.register(Table)(lambda o: o.nbytes)
