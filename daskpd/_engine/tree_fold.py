"""Per-(virtual bucket, key) sums folded over the virtual buckets by a fixed binary tree
(:class:`TreeNodes`): each bucket sends the largest nodes it holds alone
(:func:`tree_nodes`, or pushed by a kernel as it makes them: :func:`tree_state`,
:func:`tree_put`, :func:`tree_done`, :func:`tree_out`), :func:`fold_tree` completes the
tree.  The root does not depend on how the virtual buckets were cut into buckets.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numba
from dask.sizeof import sizeof
import numpy as np

from .sums import scratch_zeros

__all__ = ["TreeNodes", "tree_nodes", "fold_tree", "tree_state", "tree_put", "tree_done", "tree_out", "tree_scratch"]


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
    return scratch_zeros(n_keys, m, "tree")


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
