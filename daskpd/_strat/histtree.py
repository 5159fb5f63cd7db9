"""A histogram-binned regression tree used only to *stratify* rows.

StratPD needs, per feature x, a partition of the rows into leaves of a regression tree
of y on every other feature; it never predicts with the tree.  scikit-learn's
``DecisionTreeRegressor`` (exact splits: a sort per node and feature) dominated
``importances`` (one fit per feature); ``HistGradientBoostingRegressor(max_iter=1)``
grows a histogram tree, but its grower is Python per node and its leaf ids are not
public API.  So this module grows the same kind of tree LightGBM and scikit-learn's HGB grow, with
the one thing StratPD needs -- ``apply`` -- in numba:

* each input column is cut into at most ``max_bins`` bins on the fitting sample (all
  distinct values when there are at most ``max_bins`` of them, so the tree is *exact* on
  such columns; otherwise quantile midpoints, as scikit-learn's ``_BinMapper``:
  :mod:`daskpd._strat.histbins`); the stratifying trees use
  :func:`~daskpd._strat.histbins.auto_max_bins` (one bin per value up to 65,535); a missing value
  has a bin of its own and each split learns which side missing values go to;
* the tree is grown depth-first to full size, like ``DecisionTreeRegressor`` with
  only ``min_samples_leaf`` set: a node is split when it holds >= 2 * min_samples_leaf
  rows, y is not constant in it, and a split leaving >= min_samples_leaf rows on each
  side exists; the split maximises the reduction in squared error (the first best
  feature / threshold wins ties, so the tree is deterministic);
* thresholds are stored as raw values (the middle of the empty gap between the node's
  rows on either side: scikit-learn's midpoint on exact columns), so ``apply`` needs no
  binning and puts every fitting row in the leaf it was fitted in.

Cost: O(rows x columns x depth) byte reads for the histograms plus O(occupied bins)
per node and column for the scans.  Its time against the exact tree is measured by
``benchmarks/bench_tree.py`` (figures in docs/benchmarks.md).
"""
from __future__ import annotations

import numpy as np

try:  # numba is a declared dependency; the import is guarded only to give a clear error
    import numba
except ImportError as exc:  # pragma: no cover
    raise ImportError("daskpd.histtree needs numba (pip install numba)") from exc

from .histbins import MAX_TREE_BINS, MAX_TREE_BINS_LIMIT, bin_columns

__all__ = ["HistTree", "apply_routed"]


_DEBRUIJN = np.uint64(0x03F79D71B4CB0A89)
_DEBRUIJN_INDEX = np.array([
    0, 1, 48, 2, 57, 49, 28, 3, 61, 58, 50, 42, 38, 29, 17, 4,
    62, 55, 59, 36, 53, 51, 43, 22, 45, 39, 33, 30, 24, 18, 12, 5,
    63, 47, 56, 27, 60, 41, 37, 16, 54, 35, 52, 21, 44, 32, 23, 11,
    46, 26, 40, 15, 34, 20, 31, 10, 25, 14, 19, 9, 13, 8, 7, 6], dtype=np.int64)


@numba.njit(cache=True, nogil=True, inline="always")
def _split_gain(ls, lc, total, m, msl):
    """Sum of squares explained by a cut with ``lc`` rows (sum ``ls``) on the left of
    ``m`` (sum ``total``); -inf when a side has fewer than ``msl`` rows."""
    rc = m - lc
    if lc < msl or rc < msl:
        return -np.inf
    rs = total - ls
    return ls * ls / lc + rs * rs / rc


@numba.njit(cache=True, nogil=True, inline="always")
def _bit_index(low):
    """Position of the single set bit of ``low`` (uint64), by de Bruijn multiplication."""
    return _DEBRUIJN_INDEX[(low * _DEBRUIJN) >> np.uint64(58)]


@numba.njit(cache=True, nogil=True)
def _list_bins(occ, occw, out):
    """Write the bins set in the bitmap ``occ`` (whose non-zero words ``occw`` marks) to
    ``out`` in ascending order; returns how many there are."""
    one = np.uint64(1)
    k = 0
    for ti in range(occw.shape[0]):
        tw = occw[ti]
        while tw != 0:
            tlow = tw & (~tw + one)
            tw ^= tlow
            wi = (ti << 6) + _bit_index(tlow)
            w = occ[wi]
            while w != 0:
                low = w & (~w + one)
                w ^= low
                out[k] = (wi << 6) + _bit_index(low)
                k += 1
    return k


@numba.njit(cache=True, nogil=True)
def _grow(B, y, msl, miss):
    """Grow the tree on binned B (n x p uint16, code ``miss`` = missing).  Returns node arrays.

    feature[k] = -1 for a leaf; split: bin <= cut[k] (non-missing) goes left,
    missing goes left iff miss_left[k]; nxt[k] is the node's next occupied bin after
    cut[k] (-1: none, every non-missing row goes left).
    """
    n, p = B.shape
    max_nodes = 2 * (n // max(msl, 1)) + 1
    feature = np.full(max_nodes, -1, np.int64)
    cut = np.zeros(max_nodes, np.int64)
    nxt = np.zeros(max_nodes, np.int64)
    miss_left = np.zeros(max_nodes, np.bool_)
    left = np.full(max_nodes, -1, np.int64)
    right = np.full(max_nodes, -1, np.int64)
    count = np.zeros(max_nodes, np.int64)
    W = B.copy()  # rows are moved so that every node's rows are contiguous (sequential reads)
    yw = y.copy()
    # histograms; invariant: all zero between nodes (each node clears what it touched).
    # occ: a bitmap of each column's occupied bins, so that scans and clears jump from one
    # occupied bin to the next instead of walking every bin of the column's range
    hs = np.zeros((p, miss + 1))
    hc = np.zeros((p, miss + 1), np.int64)
    n_words = (miss >> 6) + 1
    occ = np.zeros((p, n_words), np.uint64)
    # occw: a bitmap of occ's non-zero words, so that a small node of a column of many bins
    # (65,535: 1,024 words) visits its few occupied words, not all of them
    n_top = (n_words >> 6) + 1
    occw = np.zeros((p, n_top), np.uint64)
    # each column's occupied bins of the node, ascending (listed once for the scan and the clear)
    listed = np.empty((p, min(n, miss + 1)), np.int64)
    n_listed = np.zeros(p, np.int64)
    one = np.uint64(1)
    # depth-first stack of (node, start, end)
    stack = np.empty((max_nodes, 3), np.int64)
    stack[0, 0] = 0
    stack[0, 1] = 0
    stack[0, 2] = n
    top = 1
    n_nodes = 1
    while top > 0:
        top -= 1
        node = stack[top, 0]
        start = stack[top, 1]
        end = stack[top, 2]
        m = end - start
        count[node] = m
        if m < 2 * msl:
            continue
        # one pass over the node's rows: histograms, occupied bins, y range
        ymin = np.inf
        ymax = -np.inf
        total = 0.0
        for k in range(start, end):  # rows of the node are contiguous in W / yw
            v = yw[k]
            total += v
            if v < ymin:
                ymin = v
            if v > ymax:
                ymax = v
            for j in range(p):
                b = W[k, j]
                hs[j, b] += v
                hc[j, b] += 1
                wi = b >> 6
                occ[j, wi] |= one << np.uint64(b & 63)
                occw[j, wi >> 6] |= one << np.uint64(wi & 63)
        best = -np.inf
        bj = -1
        bcut = 0
        bmiss = False
        bmc = 0
        bk = 0  # the cut's place in its column's list of occupied bins
        for j in range(p):
            n_listed[j] = _list_bins(occ[j], occw[j], listed[j])
        if ymin < ymax:  # y constant: a leaf
            for j in range(p):
                ms = hs[j, miss]
                mc = hc[j, miss]
                ls = 0.0
                lc = 0
                for k in range(n_listed[j]):
                    b = listed[j, k]
                    if b >= miss:  # the missing-value bin: not a cut
                        break
                    ls += hs[j, b]
                    lc += hc[j, b]
                    if lc > m - msl:  # this and every further cut leave < msl rows on the right
                        break
                    # missing values right, then left (a cut scores only with >= msl rows each side)
                    g = _split_gain(ls, lc, total, m, msl)
                    if g > best:
                        best = g
                        bj = j
                        bcut = b
                        bk = k
                        bmiss = False
                        bmc = mc
                    if mc > 0:
                        g = _split_gain(ls + ms, lc + mc, total, m, msl)
                        if g > best:
                            best = g
                            bj = j
                            bcut = b
                            bk = k
                            bmiss = True
                            bmc = mc
        bnext = -1  # the next occupied bin after the cut (-1: every non-missing row goes left)
        if bj >= 0 and bk + 1 < n_listed[bj] and listed[bj, bk + 1] < miss:
            bnext = listed[bj, bk + 1]
        for j in range(p):  # restore the all-zero invariant
            for k in range(n_listed[j]):
                b = listed[j, k]
                hs[j, b] = 0.0
                hc[j, b] = 0
                occ[j, b >> 6] = 0
            for ti in range(n_top):
                occw[j, ti] = 0
        if bj < 0:
            continue
        # partition rows start..end-1 of W / yw: left block first (in-place, deterministic)
        a = start
        z = end - 1
        while a <= z:
            b = W[a, bj]
            go_left = bmiss if b == miss else b <= bcut
            if go_left:
                a += 1
            else:
                for j in range(p):
                    t = W[a, j]
                    W[a, j] = W[z, j]
                    W[z, j] = t
                tv = yw[a]
                yw[a] = yw[z]
                yw[z] = tv
                z -= 1
        feature[node] = bj
        cut[node] = bcut
        nxt[node] = bnext
        # no missing value of this column in the node: new ones go to the larger child (right on a tie, as scikit-learn)
        miss_left[node] = bmiss if bmc > 0 else (a - start) > (end - a)
        left[node] = n_nodes
        right[node] = n_nodes + 1
        n_nodes += 2
        # push right then left: the left child is grown first
        stack[top, 0] = right[node]
        stack[top, 1] = a
        stack[top, 2] = end
        top += 1
        stack[top, 0] = left[node]
        stack[top, 1] = start
        stack[top, 2] = a
        top += 1
    return (feature[:n_nodes], cut[:n_nodes], nxt[:n_nodes], miss_left[:n_nodes], left[:n_nodes],
            right[:n_nodes], count[:n_nodes])


#: rows descending at once in :func:`_apply`
_LANES = 8


@numba.njit(cache=True, nogil=True)
def _apply(X, thr, meta, leaf_map, fold, roots):
    """``leaf_map[leaf node]`` of every row.  Node k: ``thr[k]``, ``meta[k]`` = (column in X,
    or -1 for a leaf) << 32 | (2 * left child + missing-goes-left); the right child is
    the left child + 1.  Row i descends from node ``roots[fold[i]]`` (several trees'
    nodes in one array: :class:`daskpd._strat.trees.HonestTrees`), or from ``roots[0]``
    when ``fold`` is empty.

    ``_LANES`` rows descend at once, one level each per round and without branching on
    the comparison, so that their independent descents overlap; a lane whose row reaches
    its leaf takes the next row at once (rows' depths differ; blocks of rows kept in
    lockstep until their deepest row was done took 0.272 s against 0.220 s for the lake
    benchmark's ten trees on 500,000 rows).  Nodes are two
    flat arrays (16 bytes a node), which keeps more of the tree in cache than one
    (threshold, column, child) row of floats.
    """
    n = X.shape[0]
    routed = fold.shape[0] > 0
    out = np.empty(n, leaf_map.dtype)
    ks = np.zeros(_LANES, np.int64)
    rows = np.full(_LANES, -1, np.int64)
    nxt = 0
    active = 0
    for r in range(_LANES):
        if nxt < n:
            rows[r] = nxt
            ks[r] = roots[fold[nxt]] if routed else roots[0]
            nxt += 1
            active += 1
    while active > 0:
        for r in range(_LANES):
            i = rows[r]
            if i < 0:
                continue
            k = ks[r]
            mt = meta[k]
            c = mt >> 32
            if c >= 0:
                v = X[i, c]
                code = mt & 0xFFFFFFFF
                go = np.int64((v <= thr[k]) | (np.isnan(v) & ((code & 1) == 1)))
                ks[r] = (code >> 1) + 1 - go
            else:  # a leaf: this lane takes the next row
                out[i] = leaf_map[k]
                if nxt < n:
                    rows[r] = nxt
                    ks[r] = roots[fold[nxt]] if routed else roots[0]
                    nxt += 1
                else:
                    rows[r] = -1
                    active -= 1
    return out


_NO_FOLD = np.zeros(0, np.uint8)
_ROOT = np.zeros(1, np.int64)


def apply_routed(X, thr, meta, leaf_map, fold, roots) -> np.ndarray:
    """:func:`_apply` over several trees' concatenated nodes, row i from ``roots[fold[i]]``."""
    return _apply(X, thr, meta, leaf_map, np.ascontiguousarray(fold, dtype=np.uint8),
                  np.ascontiguousarray(roots, dtype=np.int64))


class HistTree:
    """A fully grown, histogram-binned regression tree of y on X; only ``apply`` is offered.

    Parameters
    ----------
    min_samples_leaf : int
        Each leaf holds at least this many fitting rows.
    max_bins : int, default 1023
        Bins per column (2..65535); missing values get a bin of their own (code max_bins).
    """

    def __init__(self, min_samples_leaf: int = 1, max_bins: int = MAX_TREE_BINS):
        if not 2 <= int(max_bins) <= MAX_TREE_BINS_LIMIT:
            raise ValueError(f"max_bins must be in [2, {MAX_TREE_BINS_LIMIT}]; got {max_bins!r}")
        self.min_samples_leaf = int(min_samples_leaf)
        self.max_bins = int(max_bins)

    def fit(self, X, y) -> "HistTree":
        B, bins = bin_columns(X, self.max_bins)
        return self.fit_binned(B, bins, y)

    def fit_binned(self, B: np.ndarray, bins: list, y) -> "HistTree":
        """Fit on columns already binned by :func:`bin_columns` (shared by many trees)."""
        B = np.ascontiguousarray(B, dtype=np.uint16)
        y = np.ascontiguousarray(y, dtype="float64")
        if B.ndim != 2 or len(B) != len(y) or B.shape[1] != len(bins):
            raise ValueError(f"B must be 2-D with len(y) rows and len(bins) columns; got {B.shape}, "
                             f"{y.shape}, {len(bins)}")
        if not np.isfinite(y).all():
            raise ValueError("y must be finite")
        feature, cut, nxt, miss_left, left, right, count = _grow(B, y, self.min_samples_leaf, self.max_bins)
        threshold = np.full(len(feature), np.nan)
        for j in np.unique(feature[feature >= 0]):  # one vectorised call per column, not one per node
            k = np.flatnonzero(feature == j)
            threshold[k] = bins[j].thresholds(cut[k], nxt[k])
        self.n_features_in_ = B.shape[1]
        self.feature_ = feature
        self.threshold_ = threshold
        self.missing_left_ = miss_left
        self.children_left_ = left
        self.children_right_ = right
        self.n_node_samples_ = count
        return self

    @property
    def node_count(self) -> int:
        return len(self.feature_)

    def get_n_leaves(self) -> int:
        return int((self.feature_ < 0).sum())

    def get_depth(self) -> int:
        depth = np.zeros(self.node_count, np.int64)
        for k in range(self.node_count):  # children always have larger ids than parents
            if self.feature_[k] >= 0:
                depth[self.children_left_[k]] = depth[self.children_right_[k]] = depth[k] + 1
        return int(depth.max())

    def apply(self, X, columns=None, leaf_map=None) -> np.ndarray:
        """Leaf (node) id of every row of X (int64), or ``leaf_map[node]`` when given.

        ``columns``: positions in X of the tree's input columns (default: X is exactly
        the tree's columns), so that a wider table needs no column-subset copy.
        """
        X = np.asarray(X, dtype="float64")
        if X.ndim != 2:
            raise ValueError(f"X must be 2-D; got shape {X.shape}")
        if columns is None:
            if X.shape[1] != self.n_features_in_:
                raise ValueError(f"X must have {self.n_features_in_} columns; got shape {X.shape}")
            columns = np.arange(self.n_features_in_)
        columns = np.asarray(columns, dtype=np.int64)
        if len(columns) != self.n_features_in_ or (len(columns) and not 0 <= columns.min() <= columns.max() < X.shape[1]):
            raise ValueError(f"columns must give {self.n_features_in_} positions in X's {X.shape[1]} columns")
        if leaf_map is None:
            leaf_map = np.arange(self.node_count, dtype=np.int64)
        return _apply(X, self.threshold_, self.node_meta(columns), leaf_map, _NO_FOLD, _ROOT)

    def check_columns(self, X, columns) -> tuple:
        """``(X as float64, columns)`` checked as :meth:`apply` checks them."""
        X = np.asarray(X, dtype="float64")
        if X.ndim != 2:
            raise ValueError(f"X must be 2-D; got shape {X.shape}")
        if columns is None:
            columns = np.arange(self.n_features_in_)
        columns = np.asarray(columns, dtype=np.int64)
        if len(columns) != self.n_features_in_ or (len(columns) and not 0 <= columns.min() <= columns.max() < X.shape[1]):
            raise ValueError(f"columns must give {self.n_features_in_} positions in X's {X.shape[1]} columns")
        return X, columns

    def node_meta(self, columns: np.ndarray) -> np.ndarray:
        """The nodes as :func:`_apply` reads them: (column in X, or -1 for a leaf) << 32 |
        (2 * left child + missing-goes-left), for the tree's inputs at ``columns`` of X."""
        col = np.where(self.feature_ >= 0, columns[np.maximum(self.feature_, 0)], -1).astype(np.int64)
        return (col << 32) | (2 * np.maximum(self.children_left_, 0) + self.missing_left_).astype(np.int64)
