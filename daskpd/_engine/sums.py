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

__all__ = ["Table", "Rows", "group_inputs", "chunk_sets", "group_sums", "merge_tables",
           "reduce_tables", "float_keys", "keys_to_float", "TreeNodes", "tree_nodes", "fold_tree", "tree_state",
           "tree_put", "tree_done", "tree_out", "tree_scratch", "whole_range"]

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


# ---------------------------------------------------------------------------------
# grouping


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


# ---------------------------------------------------------------------------------
# merging sorted tables


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


# ---------------------------------------------------------------------------------
# dense accumulation

#: a dense grid is used when it has at most this many cells per input row
DENSE_CELLS_PER_ROW = 4

_SCRATCH = threading.local()


def _zeros(n: int, m: int, kind: str):
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
    return _zeros(cells, m, "grid"), _zeros(cells, 1, "marks")


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


@numba.njit(cache=True, nogil=True)
def whole_range(n):
    """``(whole, top)``: whether every value of ``n`` is a whole number >= 0, and the
    largest (one pass; NaN is not whole)."""
    top = 0.0
    for v in n.ravel():
        if not (v >= 0.0 and v == np.floor(v)):
            return False, top
        if v > top:
            top = v
    return True, top


# ---------------------------------------------------------------------------------
# a bucket's groups, for the finishers' one pass over every set


def group_inputs(table: Table, k: int, weights: np.ndarray | None, n_trials: int):
    """A bucket's merged table as the finishers' one-pass kernels read it: ``(vals,
    gw)`` -- the groups' statistics (``k`` a group: ``n``, ``sum y`` and, binned, ``sum
    x``) and each group's leaf bootstrap weights (groups x trials, uint8: the weights of
    the group's leaf, :func:`daskpd._engine.hashing.leaf_weights`, given per leaf of the
    table in ``weights`` (leaves ``table.leaf[0]`` on), None without trials)."""
    vals = np.ascontiguousarray(table.values[:, :k])
    if not n_trials or not len(table):
        return vals, np.zeros((len(table), max(0, int(n_trials))), np.uint8)
    leaf = np.asarray(table.leaf, np.int64)
    return vals, np.ascontiguousarray(weights[leaf - leaf[0]])


@numba.njit(cache=True, nogil=True)
def chunk_sets(g0, m, vals, gw, has_x, cn, cy, cx):
    """Every set's ``(n, sum y, sum x)`` of groups ``g0 <= g < g0 + m`` (the inputs of
    :func:`group_inputs`) into rows ``0 .. m - 1`` of ``cn``, ``cy``, ``cx`` (groups x
    sets): set 0 read from the merged table's row, set t its leaf's trial-t weight times
    set 0's (a leaf drawn ``w`` times counts ``w`` times, rows and sums alike).  ``cx``
    is 0 without x.

    The finishers call it once a chunk of groups, never once a group: a helper taking
    arrays, called (or inlined) in a large kernel's loop, kept numba's reference counts
    of its arrays in that loop (atomic calls every group, most of a numeric finish's
    time with one trial)."""
    S = cn.shape[1]
    for j in range(m):
        g = g0 + j
        n0 = vals[g, 0]
        y0 = vals[g, 1]
        x0 = vals[g, 2] if has_x else 0.0
        cn[j, 0] = n0
        cy[j, 0] = y0
        cx[j, 0] = x0
        for t in range(S - 1):
            wt = float(gw[g, t])
            cn[j, t + 1] = wt * n0
            cy[j, t + 1] = wt * y0
            cx[j, t + 1] = wt * x0


# ---------------------------------------------------------------------------------
# per-(virtual bucket, key) sums folded over the virtual buckets by a fixed binary tree


@dataclass
class TreeNodes:
    """Some columns of per-(virtual bucket, key) sums, folded over the ``n_virtual``
    virtual buckets by a fixed binary tree -- node ``(l, i)`` holds virtual buckets
    ``i 2^l <= v < (i + 1) 2^l`` and is the sum of its two children -- as far as one
    bucket of consecutive virtual buckets can take it: the largest nodes whose virtual
    buckets it holds alone (:func:`tree_nodes`).  :func:`fold_tree` completes the tree
    from every bucket's nodes.  Each node's sums depend only on its virtual buckets, so
    the root does not depend on how the virtual buckets were cut into buckets; and a
    bucket sends (keys x columns) per node instead of (virtual buckets x keys x columns).

    A virtual bucket whose leaves are shared with another bucket (a bucket count that
    does not divide the virtual buckets) is sent as it is (``shared``), and its parts
    are added in bucket order before the tree.  ``starts`` (nodes + 1): each node's rows
    of ``key`` (sorted within a node) and ``values`` (rows x columns)."""

    level: np.ndarray
    index: np.ndarray
    shared: np.ndarray
    starts: np.ndarray
    key: np.ndarray
    values: np.ndarray

    @property
    def nbytes(self) -> int:
        return int(sum(a.nbytes for a in (self.level, self.index, self.shared, self.starts, self.key, self.values)))

    @classmethod
    def root(cls, values: np.ndarray, n_virtual: int) -> "TreeNodes":
        """The whole tree's root holding ``values`` (keys x columns) for every key."""
        values = np.ascontiguousarray(values, dtype=np.float64)
        top = int(n_virtual).bit_length() - 1
        return cls(np.array([top], np.int64), np.zeros(1, np.int64), np.zeros(1, np.bool_),
                   np.array([0, len(values)], np.int64), np.arange(len(values), dtype=np.int64), values)

    def nodes(self):
        for j in range(len(self.level)):
            a, z = self.starts[j], self.starts[j + 1]
            yield int(self.level[j]), int(self.index[j]), bool(self.shared[j]), self.key[a:z], self.values[a:z]


@numba.njit(cache=True, nogil=True)
def _merge_sorted(ka, va, kb, vb):
    """Two nodes' sorted (key, values) rows: a key of both sums its values (``a`` + ``b``),
    a key of one keeps them as they are."""
    na, nb = ka.shape[0], kb.shape[0]
    m = va.shape[1]
    ok = np.empty(na + nb, np.int64)
    ov = np.empty((na + nb, m))
    i = j = g = 0
    while i < na or j < nb:
        if j >= nb or (i < na and ka[i] < kb[j]):
            ok[g] = ka[i]
            ov[g, :] = va[i, :]
            i += 1
        elif i >= na or kb[j] < ka[i]:
            ok[g] = kb[j]
            ov[g, :] = vb[j, :]
            j += 1
        else:
            ok[g] = ka[i]
            for q in range(m):
                ov[g, q] = va[i, q] + vb[j, q]
            i += 1
            j += 1
        g += 1
    return ok[:g], ov[:g]


@numba.njit(cache=True, nogil=True)
def tree_state(n_keys, top, buf):
    """The scratch of one bucket's tree fold (:func:`tree_nodes`), for kernels that push
    their virtual buckets' sums as they make them: the current node dense in ``buf``
    (zeroed (n_keys, m), left zeroed) with its keys' marks and list; the nodes waiting for
    their right sibling, a stack of sorted (key, values) rows (the lowest level on top);
    the emitted nodes (level, index, shared, row starts, keys, values).  Only the current
    node is dense: the rest takes the rows it holds."""
    m = buf.shape[1]
    max_nodes = 2 * top + 4
    return (buf, np.zeros(n_keys, np.bool_), np.empty(n_keys, np.int64), np.zeros(4, np.int64),
            np.empty(top + 1, np.int64), np.empty(top + 1, np.int64), np.zeros(top + 2, np.int64),
            np.empty((top + 1) * n_keys, np.int64), np.empty(((top + 1) * n_keys, m)),
            np.empty(max_nodes, np.int64), np.empty(max_nodes, np.int64), np.zeros(max_nodes, np.bool_),
            np.zeros(max_nodes + 1, np.int64), np.empty(max_nodes * n_keys, np.int64),
            np.empty((max_nodes * n_keys, m)))


@numba.njit(cache=True, nogil=True)
def tree_put(ts, c, src, col0):
    """Key ``c`` of the current virtual bucket's node gets ``src[col0:col0 + m]`` (each
    key once a node)."""
    buf, mark, keys, ctr = ts[0], ts[1], ts[2], ts[3]
    m = buf.shape[1]
    mark[c] = True
    keys[ctr[0]] = c
    ctr[0] += 1
    for q in range(m):
        buf[c, q] = src[col0 + q]


@numba.njit(cache=True, nogil=True)
def _tree_take(ts, out_key, out_val, g, ordered):
    """The current node's rows written at ``out[g:]`` (sorted by key if ``ordered``) and
    cleared; returns their count."""
    buf, mark, keys, ctr = ts[0], ts[1], ts[2], ts[3]
    m = buf.shape[1]
    ks = np.sort(keys[:ctr[0]]) if ordered else keys[:ctr[0]]
    for j in range(ks.shape[0]):
        c = ks[j]
        out_key[g + j] = c
        for q in range(m):
            out_val[g + j, q] = buf[c, q]
            buf[c, q] = 0.0
        mark[c] = False
    ctr[0] = 0
    return ks.shape[0]


@numba.njit(cache=True, nogil=True)
def _tree_emit(ts, level, index, shared):
    ctr, o_lvl, o_idx, o_sh, o_start = ts[3], ts[9], ts[10], ts[11], ts[12]
    n_out = ctr[3]
    g = o_start[n_out]
    o_start[n_out + 1] = g + _tree_take(ts, ts[13], ts[14], g, True)
    o_lvl[n_out] = level
    o_idx[n_out] = index
    o_sh[n_out] = shared
    ctr[3] = n_out + 1


@numba.njit(cache=True, nogil=True)
def tree_done(ts, v, z, top, shared):
    """Virtual bucket ``v``'s node is complete: a shared one is emitted as it is; else it
    is merged with its left sibling when that waits on the stack (their sums: left +
    right; a key of one keeps its values), up the tree as far as the bucket's unshared
    virtual buckets (below ``z``) reach; then it waits for its right sibling, or is
    emitted when that does not come here.  Every virtual bucket of the range is pushed,
    in order, empty ones too."""
    buf, mark, keys, ctr = ts[0], ts[1], ts[2], ts[3]
    st_lvl, st_idx, st_start, pool_key, pool_val = ts[4], ts[5], ts[6], ts[7], ts[8]
    m = buf.shape[1]
    if shared:
        _tree_emit(ts, 0, v, True)
        return
    level = 0
    i = v
    while level < top and (i & 1) == 1 and ctr[1] > 0 and st_lvl[ctr[1] - 1] == level:
        sn = ctr[1] - 1
        for r in range(st_start[sn], st_start[sn + 1]):
            c = pool_key[r]
            if mark[c]:
                for q in range(m):
                    buf[c, q] += pool_val[r, q]
            else:
                mark[c] = True
                keys[ctr[0]] = c
                ctr[0] += 1
                for q in range(m):
                    buf[c, q] = pool_val[r, q]
        ctr[1] = sn
        level += 1
        i >>= 1
    if level < top and (i & 1) == 0 and ((i + 2) << level) <= z:  # its right sibling comes later
        sn = ctr[1]
        st_lvl[sn] = level
        st_idx[sn] = i
        st_start[sn + 1] = st_start[sn] + _tree_take(ts, pool_key, pool_val, st_start[sn], False)
        ctr[1] = sn + 1
    else:
        _tree_emit(ts, level, i, False)


@numba.njit(cache=True, nogil=True)
def tree_out(ts):
    """The emitted nodes: (level, index, shared, row starts, keys, values), copies."""
    n = ts[3][3]
    n_rows = ts[12][n]
    return ts[9][:n].copy(), ts[10][:n].copy(), ts[11][:n].copy(), ts[12][:n + 1].copy(), ts[13][:n_rows].copy(), \
        ts[14][:n_rows].copy()


@numba.njit(cache=True, nogil=True)
def _tree_range(vb, key, values, lo, hi, shared_lo, shared_hi, top, n_keys, buf):
    """:func:`tree_done` of every virtual bucket ``lo <= v < hi`` of a table's rows
    (sorted by virtual bucket, then key; no other rows)."""
    ts = tree_state(n_keys, top, buf)
    z = hi - 1 if shared_hi else hi
    r = 0
    for v in range(lo, hi):
        while r < vb.shape[0] and vb[r] == v:
            tree_put(ts, key[r], values[r], 0)
            r += 1
        tree_done(ts, v, z, top, (v == lo and shared_lo) or (v == hi - 1 and shared_hi))
    return tree_out(ts)


#: a tree fold's scratch up to this size is kept by the thread for the next fold
TREE_SCRATCH_KEPT = 64 << 20


def tree_scratch(n_keys: int, m: int) -> np.ndarray:
    """The zeroed current node of :func:`tree_state` (this thread's buffer, reused when
    small: a large one is not held between folds)."""
    if n_keys * max(m, 1) * 8 > TREE_SCRATCH_KEPT:
        return np.zeros((n_keys, m))
    return _zeros(n_keys, m, "tree")


def tree_nodes(vb, key, values, lo: int, hi: int, n_virtual: int, shared_lo: bool = False,
               shared_hi: bool = False) -> TreeNodes:
    """A bucket's :class:`TreeNodes` from its per-(virtual bucket, key) sums (rows sorted
    by virtual bucket, then key) over the virtual buckets ``lo <= v < hi`` (``shared_lo``
    / ``shared_hi``: the first / last is shared with the bucket before / after)."""
    vb = np.asarray(vb, dtype=np.int64)
    key = np.asarray(key, dtype=np.int64)
    values = np.asarray(values, dtype=np.float64)  # columns of a wider table: read in place, not copied
    m = values.shape[1]
    lo, hi = int(lo), int(hi)
    r0, r1 = np.searchsorted(vb, [lo, hi], side="left")
    n_keys = int(key[r0:r1].max()) + 1 if r1 > r0 else 1
    top = int(n_virtual).bit_length() - 1
    return TreeNodes(*_tree_range(vb[r0:r1], key[r0:r1], values[r0:r1], lo, hi, bool(shared_lo), bool(shared_hi), top,
                                  n_keys, tree_scratch(n_keys, m)))


def _pack_nodes(nodes: list, m: int) -> TreeNodes:
    sizes = [len(n[3]) for n in nodes]
    return TreeNodes(np.array([n[0] for n in nodes], np.int64), np.array([n[1] for n in nodes], np.int64),
                     np.array([n[2] for n in nodes], np.bool_), np.cumsum([0] + sizes).astype(np.int64),
                     np.concatenate([n[3] for n in nodes]) if nodes else np.zeros(0, np.int64),
                     np.concatenate([n[4] for n in nodes], axis=0) if nodes else np.zeros((0, m)))


def fold_tree(parts: Sequence[TreeNodes], n_keys: int, n_cols: int, n_virtual: int) -> np.ndarray:
    """The root of the tree from every bucket's :class:`TreeNodes` (in bucket order), as a
    dense (n_keys, n_cols) array: a node missing (no rows) counts as empty, a node with one
    child is that child."""
    top = int(n_virtual).bit_length() - 1
    nodes, shared = {}, {}
    for part in parts:
        if part is None:
            continue
        for level, i, sh, k, x in part.nodes():
            if sh:
                shared[i] = _merge_sorted(*shared[i], k, x) if i in shared else (k, x)
                continue
            if (level, i) in nodes:
                raise ValueError(f"tree node ({level}, {i}) given twice")
            nodes[level, i] = (k, x)
    for i, kx in shared.items():
        if (0, i) in nodes:
            raise ValueError(f"tree node (0, {i}) given twice")
        nodes[0, i] = kx
    for level in range(top):
        for j in sorted({i >> 1 for (lv, i) in nodes if lv == level}):
            left, right = nodes.pop((level, 2 * j), None), nodes.pop((level, 2 * j + 1), None)
            if (level + 1, j) in nodes:
                raise ValueError(f"tree node ({level + 1}, {j}) given with its children")
            nodes[level + 1, j] = (_merge_sorted(*left, *right) if left is not None and right is not None
                                   else left if left is not None else right)
    out = np.zeros((int(n_keys), int(n_cols)))
    if (top, 0) in nodes:
        k, x = nodes[top, 0]
        out[k] = x
    return out


# dask's memory manager counts these by their arrays (spilling decisions need it)
sizeof.register(TreeNodes)(lambda o: o.nbytes)
sizeof.register(Table)(lambda o: o.nbytes)
sizeof.register(Rows)(lambda o: o.nbytes)
