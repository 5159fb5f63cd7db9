"""The tree engines: brute-force partial dependence of scikit-learn tree models without
predicting every grid copy.

Two engines give the numbers of predicting every copy (up to floating-point
reassociation, ~1e-15 relative):

* **tree-exact** (FastPD; Liu et al. 2025, the "interventional" tree walk): for a set S
  of grid features, the PD at a grid cell ``v`` of an identity-link ensemble is::

      sum_i w_i f(v, x_C^(i)) = init * sum_i w_i + sum_t sum_leaf value_leaf * [v in box_S(leaf)] * W_S(leaf)

  where ``W_S(leaf)`` is the weight of the rows whose other features (C) fall in the
  leaf's box.  :meth:`FlatTrees.leaf_weight_sets` computes ``W_S`` of every requested
  item (all features of a 1-way request, pairs) per partition in ONE walk of every row
  through every tree: the walk follows the row's branch everywhere and, at a split on a
  target feature, also the other branch, remembering the set of targets where it left
  the row's branches (a leaf reached that way counts for the items holding that set); a
  sum per (tree, leaf) and weight set (the rows' weights, and one column per bootstrap
  trial), merged by addition.  :func:`cell_sums` then walks each tree once per grid cell
  (the cell's branch at a split on S, both elsewhere).  Cost: rows x trees x (depth +
  the leaves a row reaches through target splits) for all items together, plus cells x
  nodes, instead of rows x cells x trees x depth.  Exact only where the response is linear in the trees' sum (the
  average of a transform is not the transform of the average), i.e. regressors with
  the identity link, decision functions, and forests' class probabilities.
* **tree-interval** (any tree model, any response, every row's curve): a tree's
  prediction, as a function of the grid features, only changes where a grid value takes
  another branch at one of that tree's splits on them; so each tree is evaluated once
  per class of grid values that take the same branches (usually a handful), with the
  model's own compiled tree traversal, per row; then the model's link.

Both follow scikit-learn's node semantics exactly: ``x <= threshold`` (float32 for
``sklearn.tree`` models), NaN to the node's ``missing_go_to_left`` branch, and
HistGradientBoosting's categorical splits (the raw left-category bitset; an unknown or
negative category goes the missing-value way), as its ``predictor.py`` walks them.  A
HistGradientBoosting model fitted on a DataFrame with categorical columns has a
``_preprocessor`` (an ordinal encoder); the engine encodes the rows and the grid with it.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Sequence

import numba
import numpy as np
import pandas as pd

__all__ = ["TreeEnsemble", "FlatTrees", "tree_ensemble_for", "TREE_CELLS", "leaf_weights", "cell_sums", "walk_slots"]

#: response cells (rows x grid cells x channels) held at once by the tree engine
TREE_CELLS = 1 << 22

#: rows walked together through one tree by tree-exact's level-by-level walk
LEVEL_BLOCK = 2048
#: ... when the rows carry trial counts: a leaf's group of rows sums its counts into
#: every set's weight, so larger groups (fewer of them) cost less per row (the PD's
#: bands, docs/benchmarks.md); the sums are whole numbers, so the block size leaves
#: their bits as they are
LEVEL_BLOCK_COUNTS = 4096


# ---------------------------------------------------------------------------------
# compiled walks (scikit-learn's node semantics)


@numba.njit(cache=True, nogil=True)
def _left(x, nd, thr, mgl, iscat, bsrow, kfrow, rawbits, knownbits):
    """Does value ``x`` take the left branch at node ``nd``? (sklearn's ``_tree.pyx`` and
    HistGradientBoosting's ``_predictor.pyx``)."""
    if np.isnan(x):
        return mgl[nd] != 0
    if iscat[nd] != 0:
        if x < 0:
            return mgl[nd] != 0
        c = np.int64(x) & 255 if x < 2147483648.0 else 0  # (uint8_t)data_val
        if (rawbits[bsrow[nd], c >> 5] >> np.uint32(c & 31)) & np.uint32(1):
            return True
        k = kfrow[nd]
        if k >= 0 and (knownbits[k, c >> 5] >> np.uint32(c & 31)) & np.uint32(1):
            return False
        return mgl[nd] != 0
    return x <= thr[nd]


@numba.njit(cache=True, nogil=True, inline="always")
def _push(h_nd, h_sl, h_a, h_n, k, node, state, start, count):
    """Queue the group of ``count`` rows from ``start`` at ``node`` in walk ``state``
    (nothing when it is empty); returns the next free slot."""
    if count == 0:
        return k
    h_nd[k] = node
    h_sl[k] = state
    h_a[k] = start
    h_n[k] = count
    return k + 1


@numba.njit(cache=True, nogil=True, inline="always")
def _sum_rows(M, cur, a, L, acc):
    """``acc`` = the sum of the rows ``M[cur[r]]``, ``a <= r < a + L`` (in that order)."""
    acc[:] = 0
    for r in range(a, a + L):
        mr = M[cur[r]]
        for s in range(acc.shape[0]):
            acc[s] += mr[s]


#: the even and the odd bytes of a 64-bit word, each in a 16-bit lane
_LANES = np.uint64(0x00FF00FF00FF00FF)
#: trial counts summed as 16-bit lanes of 64-bit words (:func:`count_words`): at most
#: this many trials (four words)
WORD_TRIALS = 32


@numba.njit(cache=True, nogil=True, inline="always")
def _add_lanes(x, even, odd):
    """``even`` + the even bytes of word ``x``, ``odd`` + its odd bytes (16-bit lanes)."""
    return even + (x & _LANES), odd + ((x >> np.uint64(8)) & _LANES)


@numba.njit(cache=True, nogil=True, inline="always")
def _sum_words(C8, cur, a, L, ol):
    """``ol[1 + s] +=`` the rows ``C8[cur[r]]``'s trial-``s`` counts summed over
    ``a <= r < a + L``: every row's counts are 8 a word (:func:`count_words`), the even and
    the odd bytes added as four 16-bit lanes each, in registers (a lane's sum stays
    below 2^16: the caller's bound), then each trial's lane added to ``ol`` -- whole
    numbers, so the sums of :func:`_sum_rows`, to the bit."""
    W = C8.shape[1]
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = np.uint64(0)
    for r in range(a, a + L):
        row = cur[r]
        a0, a1 = _add_lanes(C8[row, 0], a0, a1)
        if W > 1:
            a2, a3 = _add_lanes(C8[row, 1], a2, a3)
        if W > 2:
            a4, a5 = _add_lanes(C8[row, 2], a4, a5)
        if W > 3:
            a6, a7 = _add_lanes(C8[row, 3], a6, a7)
    for s in range(ol.shape[0] - 1):
        q = 2 * (s >> 3) + (s & 1)
        acc = a0 if q == 0 else a1 if q == 1 else a2 if q == 2 else a3 if q == 3 else \
            a4 if q == 4 else a5 if q == 5 else a6 if q == 6 else a7
        ol[s + 1] += float((acc >> np.uint64(16 * ((s & 7) >> 1))) & np.uint64(0xFFFF))


def count_words(C: np.ndarray, block: int) -> np.ndarray:
    """The (rows x trials) uint8 counts ``C`` as (rows x words) uint64, 8 trials a word
    (zero bytes after the last), for :func:`_sum_words`; or an empty array when a sum of
    ``block`` rows' counts could reach 2^16 in a lane, or with more than
    ``WORD_TRIALS`` trials (the walk then sums the bytes one by one)."""
    n, T = C.shape
    if n == 0 or T == 0 or T > WORD_TRIALS or int(C.max()) * block >= 1 << 16:
        return np.zeros((0, 1), np.uint64)
    words = (T + 7) // 8
    padded = np.zeros((n, 8 * words), np.uint8)
    padded[:, :T] = C
    return padded.view(np.uint64)


@numba.njit(cache=True, nogil=True)
def _leaf_weights(roots, feat, thr, left, right, mgl, iscat, bsrow, kfrow, rawbits, knownbits, tbit, trans,
                         XT, W, C, unit, block, out, C8):
    """One walk of every row through every tree for every requested PD item at once.

    A walk's state is a *slot*: the set of target features at whose splits the walk took
    the branch the row does not take (``trans[slot, tbit[f]]``: the slot after leaving the
    row's branch at a split on target ``f``, -1 when no item's features hold that set).
    At a leaf the row's weights (one per weight set, ``W[i]``) go to ``out[leaf, slot]``;
    an item's ``W_S`` is then the sum of the slots that are subsets of its features.

    The walk goes level by level over a block of rows and one tree: the rows reaching a
    node in a slot are a *group* (a segment of an index buffer); a split partitions a
    group's rows into its two children without a branch per row, and at a split on a
    target feature the two parts also go to the other child in the next slot (sharing
    their segment).  At a leaf the group's weights are summed (its size, with ``unit``
    weights; with counts ``C`` (rows x trials, uint8; ``W`` empty), set 0's weights are
    1 and set t's are column t - 1 of ``C``: whole numbers, summed exactly, so the same
    sums as their float64 columns; ``C8``, when not empty, the same counts as words,
    :func:`count_words`, summed 8 at a time).  ``XT``: the rows transposed (features x rows)."""
    n = XT.shape[1]
    S = out.shape[2]
    T = C.shape[1]
    counts = C.shape[0] > 0
    words = C8.shape[0] > 0
    acc = np.zeros(S)
    cnt = np.zeros(T, np.int64)
    gcap = 64
    g_nd = np.empty(gcap, np.int64)
    g_sl = np.empty(gcap, np.int64)
    g_a = np.empty(gcap, np.int64)
    g_n = np.empty(gcap, np.int64)
    h_nd = np.empty(gcap, np.int64)
    h_sl = np.empty(gcap, np.int64)
    h_a = np.empty(gcap, np.int64)
    h_n = np.empty(gcap, np.int64)
    icap = 4 * block
    cur = np.empty(icap, np.int32)
    nxt = np.empty(icap, np.int32)
    for b0 in range(0, n, block):
        b1 = min(n, b0 + block)
        for t in range(roots.shape[0]):
            if cur.shape[0] < b1 - b0:
                cur = np.empty(2 * (b1 - b0), np.int32)
            for r in range(b1 - b0):
                cur[r] = b0 + r
            g_nd[0] = roots[t]
            g_sl[0] = 0
            g_a[0] = 0
            g_n[0] = b1 - b0
            ng = 1
            while ng > 0:
                need = 0
                ngn = 0
                for g in range(ng):
                    if feat[g_nd[g]] >= 0:
                        need += g_n[g]
                        ngn += 4
                if nxt.shape[0] < need:
                    nxt = np.empty(2 * need, np.int32)
                if h_nd.shape[0] < ngn:
                    h_nd = np.empty(2 * ngn, np.int64)
                    h_sl = np.empty(2 * ngn, np.int64)
                    h_a = np.empty(2 * ngn, np.int64)
                    h_n = np.empty(2 * ngn, np.int64)
                p = 0
                k = 0
                for g in range(ng):
                    nd = g_nd[g]
                    sl = g_sl[g]
                    a = g_a[g]
                    L = g_n[g]
                    f = feat[nd]
                    if f < 0:
                        if unit:
                            out[nd, sl, 0] += L
                        elif words:
                            ol = out[nd, sl]
                            ol[0] += L
                            _sum_words(C8, cur, a, L, ol)
                        elif counts:
                            _sum_rows(C, cur, a, L, cnt)
                            ol = out[nd, sl]
                            ol[0] += L
                            for s in range(T):
                                ol[s + 1] += cnt[s]
                        else:
                            _sum_rows(W, cur, a, L, acc)
                            ol = out[nd, sl]
                            for s in range(S):
                                ol[s] += acc[s]
                        continue
                    lo = p
                    hi = p + L - 1
                    if iscat[nd] == 0:
                        th = thr[nd]
                        mg = mgl[nd] != 0
                        for r in range(a, a + L):
                            i = cur[r]
                            x = XT[f, i]
                            gl = (x <= th) | (mg & (x != x))
                            nxt[lo] = i
                            nxt[hi] = i
                            lo += gl
                            hi -= 1 - gl
                    else:
                        for r in range(a, a + L):
                            i = cur[r]
                            gl = _left(XT[f, i], nd, thr, mgl, iscat, bsrow, kfrow, rawbits, knownbits)
                            nxt[lo] = i
                            nxt[hi] = i
                            lo += gl
                            hi -= 1 - gl
                    nl = lo - p
                    k = _push(h_nd, h_sl, h_a, h_n, k, left[nd], sl, p, nl)
                    k = _push(h_nd, h_sl, h_a, h_n, k, right[nd], sl, p + nl, L - nl)
                    b = tbit[f]
                    if b >= 0:
                        ns = trans[sl, b]
                        if ns >= 0:  # the other branch too, in the state that disagrees on f
                            k = _push(h_nd, h_sl, h_a, h_n, k, right[nd], ns, p, nl)
                            k = _push(h_nd, h_sl, h_a, h_n, k, left[nd], ns, p + nl, L - nl)
                    p += L
                cur, nxt = nxt, cur
                g_nd, h_nd = h_nd, g_nd
                g_sl, h_sl = h_sl, g_sl
                g_a, h_a = h_a, g_a
                g_n, h_n = h_n, g_n
                ng = k


@numba.njit(cache=True, nogil=True)
def _cell_sums(roots, feat, thr, left, right, mgl, iscat, bsrow, kfrow, rawbits, knownbits, s_pos, value, W,
               cells, stack, out):
    S = W.shape[1]
    acc = np.zeros(S)
    for c in range(cells.shape[0]):
        acc[:] = 0.0
        for t in range(roots.shape[0]):
            stack[0] = roots[t]
            top = 1
            while top > 0:
                top -= 1
                nd = stack[top]
                while True:
                    f = feat[nd]
                    if f < 0:
                        v = value[nd]
                        for s in range(S):
                            acc[s] += v * W[nd, s]
                        break
                    d = s_pos[f]
                    if d < 0:
                        stack[top] = right[nd]
                        top += 1
                        nd = left[nd]
                    elif _left(cells[c, d], nd, thr, mgl, iscat, bsrow, kfrow, rawbits, knownbits):
                        nd = left[nd]
                    else:
                        nd = right[nd]
        for s in range(S):
            out[c, s] = acc[s]


def walk_slots(items: Sequence[Sequence[int]]):
    """The walk's states for PD ``items`` (each a tuple of internal target features):
    ``(tbit, trans, members)`` -- ``tbit`` maps a feature to its bit, ``trans`` the slot
    transitions of :func:`_leaf_weights`, ``members[k]`` the slots summed into item k's
    ``W_S`` (slot 0, the row's own branches everywhere, is in every item)."""
    feats = sorted({int(f) for it in items for f in it})
    bit = {f: b for b, f in enumerate(feats)}
    masks = [sum(1 << bit[int(f)] for f in set(it)) for it in items]
    subsets = {0}
    for m in masks:
        sub = m
        while sub:
            subsets.add(sub)
            sub = (sub - 1) & m
    order = sorted(subsets, key=lambda m: (bin(m).count("1"), m))
    slot = {m: k for k, m in enumerate(order)}
    trans = np.full((len(order), max(1, len(feats))), -1, dtype=np.int64)
    for m, k in slot.items():
        for b in range(len(feats)):
            trans[k, b] = slot.get(m | (1 << b), -1)
    tbit = np.full(max(feats) + 1 if feats else 1, -1, dtype=np.int64)
    for f, b in bit.items():
        tbit[f] = b
    members = [[slot[m] for m in order if m & ~mk == 0] for mk in masks]
    return tbit, trans, members


class FlatTrees:
    """The trees of one output channel of a :class:`TreeEnsemble`, concatenated into flat
    node arrays for the compiled walks (leaves have ``feat == -1``; ``value`` is the
    leaf value times the tree's scale and the channel's sign)."""

    def __init__(self, ens: "TreeEnsemble", channel: int, sign: float):
        parts, roots, off, bs_off = [], [], 0, 0
        raw_bits = []
        for i, t in enumerate(ens.trees):
            if t.channel != channel:
                continue
            if t.kind == "sk":
                tr = t.obj
                leaf = tr.children_left == -1
                feat = np.where(leaf, -1, tr.feature).astype(np.int64)
                thr = tr.threshold.astype("float64")
                left = np.where(leaf, 0, tr.children_left).astype(np.int64) + off
                right = np.where(leaf, 0, tr.children_right).astype(np.int64) + off
                mg = np.asarray(getattr(tr, "missing_go_to_left", np.zeros(len(leaf))), dtype=np.uint8)
                cat = np.zeros(len(leaf), dtype=np.uint8)
                bsr = np.zeros(len(leaf), dtype=np.int64)
            else:
                nd = t.obj.nodes
                leaf = nd["is_leaf"] == 1
                feat = np.where(leaf, -1, nd["feature_idx"]).astype(np.int64)
                thr = nd["num_threshold"].astype("float64")
                left = np.where(leaf, 0, nd["left"]).astype(np.int64) + off
                right = np.where(leaf, 0, nd["right"]).astype(np.int64) + off
                mg = nd["missing_go_to_left"].astype(np.uint8)
                cat = (nd["is_categorical"] & ~leaf).astype(np.uint8)
                bsr = nd["bitset_idx"].astype(np.int64) + bs_off
                rb = np.asarray(t.obj.raw_left_cat_bitsets, dtype=np.uint32).reshape(-1, 8)
                raw_bits.append(rb)
                bs_off += len(rb)
            vals = ens.node_values(i) * sign
            parts.append((feat, thr, left, right, mg, cat, bsr, np.where(leaf, vals, 0.0)))
            roots.append(off)
            off += len(leaf)
        cols = [np.ascontiguousarray(np.concatenate(c)) for c in zip(*parts)]
        self.feat, self.thr, self.left, self.right, self.mgl, self.iscat, self.bsrow, self.value = cols
        self.roots = np.asarray(roots, dtype=np.int64)
        self.rawbits = np.ascontiguousarray(np.concatenate(raw_bits) if raw_bits else np.zeros((1, 8), np.uint32))
        n_feat = int(max(ens.n_features, self.feat.max() + 1 if len(self.feat) else 1))
        if ens.hgb_aux is not None and self.iscat.any():
            kcb, fmap = ens.hgb_aux
            self.knownbits = np.ascontiguousarray(np.asarray(kcb, dtype=np.uint32).reshape(-1, 8))
            fm = np.asarray(fmap, dtype=np.int64)
            self.kfrow = np.where(self.iscat == 1, fm[np.maximum(self.feat, 0)], -1).astype(np.int64)
        else:
            self.knownbits = np.zeros((1, 8), np.uint32)
            self.kfrow = np.full(len(self.feat), -1, dtype=np.int64)
        self.n_features = n_feat
        self.init = float(ens.init[channel]) * sign
        self.float32 = ens.float32
        self.n_nodes = len(self.feat)
        self.stack = max(2, _max_depth(self.left, self.right, self.feat, self.roots) + 2)

    def _args(self):
        return (self.roots, self.feat, self.thr, self.left, self.right, self.mgl, self.iscat, self.bsrow,
                self.kfrow, self.rawbits, self.knownbits)

    def cast(self, X: np.ndarray) -> np.ndarray:
        """Values as the model compares them (float32 for ``sklearn.tree``), in float64."""
        X = np.asarray(X, dtype="float64")
        return X.astype(np.float32).astype("float64") if self.float32 else X

    def leaf_weights(self, X: np.ndarray, targets, weights) -> np.ndarray:
        """``W_S``: per node, the weight of the rows of ``X`` whose features other than
        ``targets`` fall in the node's box (non-zero on leaves only)."""
        w = np.ones(len(X)) if weights is None else np.asarray(weights, dtype="float64")
        return self.leaf_weight_sets(X, [tuple(targets)], w[:, None])[0][:, 0]

    def leaf_weight_sets(self, X: np.ndarray, items, W: np.ndarray | None, counts: np.ndarray | None = None) -> list:
        """``W_S`` of every item (a tuple of internal target features) for every weight
        set (the columns of ``W``, rows x sets), in ONE walk of every row through every
        tree: per item an array (nodes, sets).  ``counts`` (rows x trials, uint8) instead
        of ``W``: the sets whose weights are 1 and those counts (the same sums)."""
        X = self.cast(X)
        if counts is not None:
            C = np.ascontiguousarray(counts, dtype=np.uint8)
            W = np.zeros((0, 1 + C.shape[1]))
        else:
            W = np.ascontiguousarray(W, dtype="float64")
            C = np.zeros((0, 0), np.uint8)
        n, S = X.shape[0], W.shape[1]
        tbit, trans, members = walk_slots(items)
        if len(tbit) < self.n_features:
            tbit = np.concatenate([tbit, np.full(self.n_features - len(tbit), -1, dtype=np.int64)])
        out = np.zeros((self.n_nodes, trans.shape[0], S))
        if n and self.n_nodes:
            unit = counts is None and S == 1 and bool((W == 1.0).all())
            block = LEVEL_BLOCK if counts is None else LEVEL_BLOCK_COUNTS
            _leaf_weights(*self._args(), tbit, trans, np.ascontiguousarray(X.T), W, C, unit, block, out,
                          count_words(C, block))
        res = []
        for mem in members:
            acc = out[:, mem[0], :].copy()
            for k in mem[1:]:
                acc += out[:, k, :]
            res.append(acc)
        return res

    def cell_sums(self, W: np.ndarray, wsum, targets, cells: np.ndarray) -> np.ndarray:
        """``sum_i w_i f(cell, x_C^(i))`` for every row of ``cells`` (one column per
        target); ``W`` (nodes,) or (nodes, sets) with ``wsum`` a float or one per set:
        then the result is (sets, cells)."""
        cells = np.ascontiguousarray(self.cast(np.asarray(cells, dtype="float64").reshape(len(cells), -1)))
        s_pos = np.full(max(self.n_features, max(targets) + 1), -1, dtype=np.int64)
        for d, f in enumerate(targets):
            s_pos[f] = d
        W = np.asarray(W, dtype="float64")
        one = W.ndim == 1
        W2 = np.ascontiguousarray(W.reshape(len(W), -1))
        out = np.zeros((len(cells), W2.shape[1]))
        if len(cells) and self.n_nodes:
            _cell_sums(*self._args(), s_pos, self.value, W2, cells, np.empty(self.stack, np.int64), out)
        out = out.T + self.init * np.asarray(wsum, dtype="float64").reshape(-1, 1)
        return out[0] if one else out


def _max_depth(left, right, feat, roots) -> int:
    depth = 0
    frontier = np.asarray(roots, dtype=np.int64)
    while frontier.size:
        k = frontier[feat[frontier] >= 0]
        if not k.size:
            break
        depth += 1
        frontier = np.concatenate([left[k], right[k]])
    return depth


def leaf_weights(flat: FlatTrees, X, targets, weights) -> np.ndarray:
    return flat.leaf_weights(X, targets, weights)


def cell_sums(flat: FlatTrees, W, wsum, targets, cells) -> np.ndarray:
    return flat.cell_sums(W, wsum, targets, cells)


class _LinkInverse:
    def __init__(self, link):
        self.link = link

    def __call__(self, raw2d):
        return np.asarray(self.link.inverse(raw2d[:, 0]), dtype="float64")


class _Proba:
    def __init__(self, loss, column):
        self.loss = loss
        self.column = column

    def __call__(self, raw2d):
        return np.asarray(self.loss.predict_proba(raw2d), dtype="float64")[:, self.column]


class _Raw:
    def __init__(self, column, negate):
        self.column = column
        self.negate = negate

    def __call__(self, raw2d):
        out = raw2d[:, self.column]
        return -out if self.negate else out


@dataclass
class _Tree:
    kind: str  # "sk" (sklearn Tree object) | "hgb" (TreePredictor)
    obj: Any
    channel: int
    scale: float
    out: int  # output column of the sklearn Tree's values


class TreeEnsemble:
    """A scikit-learn tree model, seen as ``response = transform(init + sum_t scale_t * tree_t(x))``.

    ``linear`` models (regressors with the identity link, forests' class
    probabilities) are averaged tree by tree without per-row matrices.
    """

    def __init__(self, name, trees, n_channels, init, float32, transform, linear, hgb_aux=None, n_features=0,
                 encoder=None):
        self.name = name
        self.n_features = int(n_features)
        # HistGradientBoosting's _preprocessor: (the fitted ColumnTransformer, the internal
        # position of each input column, per input column its categories or None)
        self.encoder = encoder
        self.trees = trees
        self.n_channels = int(n_channels)
        self.init = np.asarray(init, dtype="float64").reshape(-1)
        self.float32 = bool(float32)
        self.transform = transform
        self.linear = bool(linear)
        self.hgb_aux = hgb_aux
        self._cache: dict = {}

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_cache"] = {}
        return state

    # -- the model's own input encoding (identity unless HistGradientBoosting has a _preprocessor)

    def position(self, j: int) -> int:
        """The internal feature index of the model's input column ``j``."""
        return j if self.encoder is None else int(self.encoder[1][j])

    def matrix(self, inputs, X64=None) -> np.ndarray:
        """The rows as the trees read them: ``X64`` (the float columns), or the model's
        ``_preprocessor`` applied to the input frame."""
        if self.encoder is None:
            return X64
        return np.ascontiguousarray(self.encoder[0].transform(inputs), dtype="float64")

    def grid_codes(self, j: int, values) -> np.ndarray:
        """Grid values of input column ``j`` as the trees read them (a category's
        ordinal code; NaN for a missing or unknown category, as the encoder does)."""
        cats = None if self.encoder is None else self.encoder[2][j]
        if cats is None:
            v = np.asarray(values)
            if v.dtype == object:
                v = pd.to_numeric(pd.Series(v), errors="coerce").to_numpy(dtype="float64", na_value=np.nan)
            return np.asarray(v, dtype="float64")
        vals = np.asarray(values, dtype=object)
        known = pd.Index([c for c in cats if not pd.isna(c)], dtype=object)
        idx = known.get_indexer(pd.Index(vals, dtype=object))
        return np.where((idx >= 0) & ~pd.isna(vals), idx, np.nan).astype("float64")

    # -- tree-exact (FastPD): which channel, and its flat arrays

    @property
    def exact(self):
        """``(channel, sign)`` when the response is linear in one channel's tree sum, else None."""
        if self.transform is None and self.linear and self.n_channels == 1:
            return 0, 1.0
        if isinstance(self.transform, _Raw):
            return self.transform.column, (-1.0 if self.transform.negate else 1.0)
        return None

    def flat(self) -> FlatTrees:
        key = ("flat",)
        ft = self._cache.get(key)
        if ft is None:
            channel, sign = self.exact
            ft = self._cache[key] = FlatTrees(self, channel, sign)
        return ft

    def split_kinds(self, f: int) -> tuple[bool, bool]:
        """(any categorical split on internal feature ``f``, any numeric split on it)."""
        key = ("kinds", f)
        out = self._cache.get(key)
        if out is None:
            cat = num = False
            for t in self.trees:
                if t.kind == "hgb":
                    nd = t.obj.nodes
                    on = (nd["is_leaf"] == 0) & (nd["feature_idx"] == f)
                    cat |= bool(np.any(nd["is_categorical"][on]))
                    num |= bool(np.any(nd["is_categorical"][on] == 0))
                else:
                    num |= bool(np.any((t.obj.children_left != -1) & (t.obj.feature == f)))
            out = self._cache[key] = (cat, num)
        return out

    def _grid_classes(self, i: int, f: int, cmp: np.ndarray) -> np.ndarray:
        """Per grid value (as compared), an id such that equal ids take the same branch
        at every split of tree ``i`` on ``f`` (NaN, categorical bitsets, thresholds)."""
        t = self.trees[i]
        if t.kind == "sk":
            tr = t.obj
            sel = np.flatnonzero((tr.children_left != -1) & (tr.feature == f))
            if not sel.size:
                return np.zeros(len(cmp), dtype=np.intp)
            thr = tr.threshold[sel]
            mg = np.asarray(getattr(tr, "missing_go_to_left", np.zeros(tr.node_count, dtype=np.uint8)))[sel] != 0
            nan = np.isnan(cmp)
            dec = np.where(nan[None, :], mg[:, None], cmp[None, :] <= thr[:, None])
        else:
            nd = t.obj.nodes
            sel = np.flatnonzero((nd["is_leaf"] == 0) & (nd["feature_idx"] == f))
            if not sel.size:
                return np.zeros(len(cmp), dtype=np.intp)
            ft = self.flat_all(i)
            dec = np.empty((len(sel), len(cmp)), dtype=bool)
            for r, k in enumerate(sel):
                for c, x in enumerate(cmp):
                    dec[r, c] = _left(x, k, ft[0], ft[1], ft[2], ft[3], ft[4], ft[5], ft[6])
        _, inv = np.unique(dec.T, axis=0, return_inverse=True)
        return np.asarray(inv, dtype=np.intp).reshape(-1)

    def flat_all(self, i: int):
        """Tree ``i``'s node arrays for :func:`_left` (HistGradientBoosting trees)."""
        key = ("hnodes", i)
        out = self._cache.get(key)
        if out is None:
            nd = self.trees[i].obj.nodes
            cat = nd["is_categorical"].astype(np.uint8)
            if self.hgb_aux is not None and cat.any():
                kcb, fmap = self.hgb_aux
                kb = np.ascontiguousarray(np.asarray(kcb, dtype=np.uint32).reshape(-1, 8))
                kf = np.where(cat == 1, np.asarray(fmap, dtype=np.int64)[nd["feature_idx"].astype(np.int64)], -1)
            else:
                kb, kf = np.zeros((1, 8), np.uint32), np.full(len(nd), -1, dtype=np.int64)
            rb = np.asarray(self.trees[i].obj.raw_left_cat_bitsets, dtype=np.uint32).reshape(-1, 8)
            if not len(rb):
                rb = np.zeros((1, 8), np.uint32)
            out = (nd["num_threshold"].astype("float64"), nd["missing_go_to_left"].astype(np.uint8), cat,
                   nd["bitset_idx"].astype(np.int64), kf.astype(np.int64), np.ascontiguousarray(rb), kb)
            self._cache[key] = out
        return out

    def thresholds(self, i: int, f: int) -> np.ndarray:
        key = ("thr", i, f)
        thr = self._cache.get(key)
        if thr is None:
            t = self.trees[i]
            if t.kind == "sk":
                tr = t.obj
                internal = tr.children_left != -1
                thr = np.unique(tr.threshold[internal & (tr.feature == f)])
            else:
                nodes = t.obj.nodes
                sel = (nodes["is_leaf"] == 0) & (nodes["feature_idx"] == f) & (nodes["is_categorical"] == 0)
                thr = np.unique(nodes["num_threshold"][sel].astype("float64"))
            self._cache[key] = thr
        return thr

    def _values(self, i: int) -> np.ndarray:
        key = ("val", i)
        v = self._cache.get(key)
        if v is None:
            t = self.trees[i]
            v = np.ascontiguousarray(t.obj.value[:, 0, t.out], dtype="float64") * t.scale
            self._cache[key] = v
        return v

    def tree_predict(self, i: int, Xw: np.ndarray) -> np.ndarray:
        t = self.trees[i]
        if t.kind == "sk":
            return self._values(i)[t.obj.apply(Xw)]
        kcb, fmap = self.hgb_aux
        return t.obj.predict(Xw, kcb, fmap, 1)

    # -- leaf ids and the x-range of every leaf (for the 1-way sweep)

    def leaf_ids(self, i: int, Xw: np.ndarray) -> np.ndarray:
        t = self.trees[i]
        if t.kind == "sk":
            return t.obj.apply(Xw)
        key = ("ids", i)
        p = self._cache.get(key)
        if p is None:
            from sklearn.ensemble._hist_gradient_boosting.predictor import TreePredictor

            nodes = t.obj.nodes.copy()
            nodes["value"] = np.arange(len(nodes), dtype="float64")
            p = TreePredictor(nodes, t.obj.binned_left_cat_bitsets, t.obj.raw_left_cat_bitsets)
            self._cache[key] = p
        kcb, fmap = self.hgb_aux
        return p.predict(Xw, kcb, fmap, 1).astype(np.intp)

    def node_values(self, i: int) -> np.ndarray:
        t = self.trees[i]
        if t.kind == "sk":
            return self._values(i)
        key = ("hval", i)
        v = self._cache.get(key)
        if v is None:
            v = np.asarray(t.obj.nodes["value"], dtype="float64")
            self._cache[key] = v
        return v

    def leaf_ranges(self, i: int, f: int):
        """Per node, the range ``[lo, hi]`` of threshold-interval indices of feature ``f``
        (``#thresholds < x``) whose rows reach the node."""
        key = ("rng", i, f)
        out = self._cache.get(key)
        if out is None:
            thr = self.thresholds(i, f)
            t = self.trees[i]
            if t.kind == "sk":
                tr = t.obj
                left, right, feat, th = tr.children_left, tr.children_right, tr.feature, tr.threshold
                leaf = left == -1
            else:
                nd = t.obj.nodes
                left, right = nd["left"].astype(np.intp), nd["right"].astype(np.intp)
                feat, th, leaf = nd["feature_idx"], nd["num_threshold"], nd["is_leaf"] == 1
            n_nodes = len(left)
            lo = np.zeros(n_nodes, dtype=np.intp)
            hi = np.full(n_nodes, len(thr), dtype=np.intp)
            frontier = np.array([0], dtype=np.intp)
            while frontier.size:  # level by level, vectorised (deep forests have many nodes)
                k = frontier[~leaf[frontier]]
                if not k.size:
                    break
                L, R = np.asarray(left[k], dtype=np.intp), np.asarray(right[k], dtype=np.intp)
                a, b = lo[k], hi[k]
                on = np.asarray(feat[k]) == f
                j = np.searchsorted(thr, np.asarray(th[k], dtype="float64"), side="left")
                lo[L] = a
                hi[L] = np.where(on, np.minimum(b, j), b)
                lo[R] = np.where(on, np.maximum(a, j + 1), a)
                hi[R] = b
                frontier = np.concatenate([L, R])
            out = (lo, hi)
            self._cache[key] = out
        return out

    def _sweep(self, Xw, f, cmp_sorted, put_sorted, w, rows_mode, D, Dw):
        """1-way grid (sorted): add every tree's contribution as difference arrays over the grid.

        Each row is evaluated once per *leaf* it visits as x sweeps the grid (not once per
        threshold interval): after landing in a leaf, it jumps to the first grid interval
        outside the leaf's x-range.
        """
        n = Xw.shape[0]
        G = len(cmp_sorted)
        const = np.zeros((self.n_channels, n)) if rows_mode else None
        const_sum = 0.0
        allrows = None
        for i, t in enumerate(self.trees):
            thr = self.thresholds(i, f)
            if len(thr) == 0:
                v = self.tree_predict(i, Xw)
                if rows_mode:
                    const[t.channel] += v
                else:
                    const_sum += float(v @ w) if w is not None else float(v.sum())
                continue
            iv = np.searchsorted(thr, cmp_sorted, side="left")
            u, first = np.unique(iv, return_index=True)
            nu = len(u)
            gbound = np.r_[first, G]  # grid start of run j, and G at the end (distinct values)
            lo, hi = self.leaf_ranges(i, f)
            run_end = np.searchsorted(u, hi, side="right")  # per node: first run beyond its range
            vals = self.node_values(i)
            # every row, at the first run
            Xw[:, f] = put_sorted[first[0]]
            leaf = self.leaf_ids(i, Xw)
            end = run_end[leaf]
            v = vals[leaf]
            if rows_mode:
                if allrows is None:
                    allrows = np.arange(n)
                D[t.channel, gbound[0], :] += v
                D[t.channel, gbound[end], allrows] -= v
            else:
                wv = v * w if w is not None else v
                Dw[gbound[0]] += wv.sum()
                Dw[gbound] -= np.bincount(end, weights=wv, minlength=nu + 1)
            active = np.flatnonzero(end < nu)
            cur = end[active]
            # then only the rows that leave their leaf, each from the run where it left
            while active.size:
                Xa = np.take(Xw, active, axis=0)
                Xa[:, f] = put_sorted[first[cur]]
                leaf = self.leaf_ids(i, Xa)
                end = run_end[leaf]
                v = vals[leaf]
                if rows_mode:
                    D[t.channel, gbound[cur], active] += v
                    D[t.channel, gbound[end], active] -= v
                else:
                    wv = v * w[active] if w is not None else v
                    Dw[gbound] += (np.bincount(cur, weights=wv, minlength=nu + 1)
                                   - np.bincount(end, weights=wv, minlength=nu + 1))
                keep = end < nu
                active = active[keep]
                cur = end[keep]
        return const, const_sum

    def curves(self, X64: np.ndarray, targets: Sequence[int], grids: Sequence[np.ndarray], weights, need_rows: bool,
               points: np.ndarray | None = None):
        """Response of every row of ``X64`` with ``targets`` set to every grid cell.

        Returns the (weighted) sums over rows, shape ``cells``, when the model is linear
        and ``need_rows`` is false; else the response matrix, shape ``cells + (n,)``.
        ``points`` (``(cells, len(targets))`` indices into the grids): the cells are
        those points, not the cartesian grid (shape ``(len(points),)`` [+ ``(n,)``]).
        """
        if len(targets) == 1 and not self.split_kinds(targets[0])[0] and not np.isnan(
                np.asarray(grids[0], dtype="float64")).any():
            out = self._curves_1d(X64, targets[0], grids[0], weights, need_rows)
            return out if points is None else out[np.asarray(points)[:, 0]]
        return self._curves_combos(X64, targets, grids, weights, need_rows, points)

    def _curves_1d(self, X64, f, grid, weights, need_rows):
        n = X64.shape[0]
        g = np.asarray(grid, dtype="float64")
        G = len(g)
        order = np.argsort(g, kind="stable")
        gs = g[order]
        if self.float32:
            Xw = np.ascontiguousarray(X64, dtype=np.float32)
            if Xw is X64:
                Xw = Xw.copy()
            cmp_sorted = gs.astype(np.float32).astype("float64")
            put_sorted = gs.astype(np.float32)
        else:
            Xw = np.array(X64, dtype="float64", order="C", copy=True)
            cmp_sorted = put_sorted = gs
        rows_mode = need_rows or not self.linear
        K = self.n_channels
        w = None if weights is None else np.asarray(weights, dtype="float64")
        if rows_mode:
            D = np.zeros((K, G + 1, n))
            const, _ = self._sweep(Xw, f, cmp_sorted, put_sorted, w, True, D, None)
            raw = np.cumsum(D, axis=1)[:, :G, :]
            raw += (const + self.init[:, None])[:, None, :]
            inv = np.empty(G, dtype=np.intp)
            inv[order] = np.arange(G)
            raw = raw[:, inv, :]
            if self.transform is None:
                return raw[0]
            r2 = np.moveaxis(raw, 0, -1).reshape(-1, K)
            return np.asarray(self.transform(r2), dtype="float64").reshape(G, n)
        Dw = np.zeros(G + 1)
        _, const_sum = self._sweep(Xw, f, cmp_sorted, put_sorted, w, False, None, Dw)
        wsum = float(w.sum()) if w is not None else float(n)
        acc_sorted = np.cumsum(Dw)[:G]
        acc = np.empty(G)
        acc[order] = acc_sorted
        return acc + (const_sum + self.init[0] * wsum)

    def _curves_combos(self, X64, targets, grids, weights, need_rows, points=None):
        """Several target features (or categorical splits / NaN grid values): each tree once
        per combination of classes of grid values taking the same branches (at the
        ``points`` only, when given: indices into the grids, one column per target)."""
        n = X64.shape[0]
        shape = tuple(len(g) for g in grids) if points is None else (len(points),)
        pts = None if points is None else np.asarray(points, dtype=np.intp).reshape(len(points), len(targets))
        if self.float32:
            Xw = np.ascontiguousarray(X64, dtype=np.float32)
            if Xw is X64:
                Xw = Xw.copy()
            cmp = [np.asarray(g, dtype="float64").astype(np.float32).astype("float64") for g in grids]
            put = [np.asarray(g, dtype="float64").astype(np.float32) for g in grids]
        else:
            Xw = np.array(X64, dtype="float64", order="C", copy=True)
            cmp = [np.asarray(g, dtype="float64") for g in grids]
            put = cmp
        rows_mode = need_rows or not self.linear
        K = self.n_channels
        if rows_mode:
            raw = np.zeros((K,) + shape + (n,))
            const = np.zeros((K, n))
        else:
            acc = np.zeros(shape)
            const_sum = 0.0
        w = None if weights is None else np.asarray(weights, dtype="float64")

        def reduce(v):
            return float(v @ w) if w is not None else float(v.sum())

        for i, t in enumerate(self.trees):
            firsts, invs = [], []
            for d, f in enumerate(targets):
                iv = self._grid_classes(i, f, cmp[d])
                _, first, inv = np.unique(iv, return_index=True, return_inverse=True)
                firsts.append(first)
                invs.append(inv.reshape(-1))
            ushape = tuple(len(fi) for fi in firsts)
            if all(u == 1 for u in ushape):
                for d, f in enumerate(targets):
                    Xw[:, f] = put[d][firsts[d][0]]
                v = self.tree_predict(i, Xw)
                if rows_mode:
                    const[t.channel] += v
                else:
                    const_sum += reduce(v)
                continue
            if rows_mode:
                V = np.empty(ushape + (n,))
            else:
                S = np.empty(ushape)
            for combo in np.ndindex(*ushape):
                for d, f in enumerate(targets):
                    Xw[:, f] = put[d][firsts[d][combo[d]]]
                v = self.tree_predict(i, Xw)
                if rows_mode:
                    V[combo] = v
                else:
                    S[combo] = reduce(v)
            if pts is not None:  # the classes of each point's values
                at = tuple(inv[pts[:, d]] for d, inv in enumerate(invs))
            else:
                at = np.ix_(*invs) if len(invs) > 1 else invs[0]
            if rows_mode:
                raw[t.channel] += V[at]
            else:
                acc += S[at]
        if not rows_mode:
            wsum = float(w.sum()) if w is not None else float(n)
            return acc + (const_sum + self.init[0] * wsum)
        raw += (const + self.init[:, None]).reshape((K,) + (1,) * len(shape) + (n,))
        if self.transform is None:
            return raw[0]
        r2 = np.moveaxis(raw, 0, -1).reshape(-1, K)
        return np.asarray(self.transform(r2), dtype="float64").reshape(shape + (n,))


def tree_ensemble_for(model, method: str, column, negate: bool, classifier: bool,
                      numeric_inputs: bool = True) -> TreeEnsemble | None:
    """The :class:`TreeEnsemble` of a supported scikit-learn model, else None.
    ``numeric_inputs``: every input column is numeric (else only a HistGradientBoosting
    model with its own ``_preprocessor`` qualifies)."""
    try:
        from sklearn.ensemble._forest import BaseForest
        from sklearn.ensemble._gb import BaseGradientBoosting
        from sklearn.ensemble._hist_gradient_boosting.gradient_boosting import BaseHistGradientBoosting
        from sklearn.tree import BaseDecisionTree
    except ImportError:  # pragma: no cover
        return None
    name = type(model).__name__
    if not numeric_inputs and not isinstance(model, BaseHistGradientBoosting):
        return None
    try:
        if isinstance(model, BaseHistGradientBoosting):
            encoder = _hgb_encoder(model)
            if encoder is False:
                return None
            if not numeric_inputs and encoder is None:
                return None
            K = int(model.n_trees_per_iteration_)
            trees = [_Tree("hgb", p, k, 1.0, 0) for preds in model._predictors for k, p in enumerate(preds)]
            init = np.asarray(model._baseline_prediction, dtype="float64").reshape(-1)
            aux = model._bin_mapper.make_known_categories_bitsets()
            transform, linear = _transform_for(model, classifier, method, column, negate, K)
            if transform is False:
                return None
            return TreeEnsemble(name, trees, K, init, False, transform, linear, aux, model.n_features_in_, encoder)
        if isinstance(model, BaseGradientBoosting):
            if model.init not in (None, "zero"):
                return None
            K = model.estimators_.shape[1]
            lr = float(model.learning_rate)
            trees = [_Tree("sk", model.estimators_[i, k].tree_, k, lr, 0)
                     for i in range(model.estimators_.shape[0]) for k in range(K)]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                init = np.asarray(model._raw_predict_init(np.zeros((1, model.n_features_in_), dtype=np.float32)),
                                  dtype="float64").reshape(-1)
            transform, linear = _transform_for(model, classifier, method, column, negate, K)
            if transform is False:
                return None
            return TreeEnsemble(name, trees, K, init, True, transform, linear, n_features=model.n_features_in_)
        if isinstance(model, (BaseForest, BaseDecisionTree)):
            if getattr(model, "n_outputs_", 1) != 1:
                return None
            ests = list(model.estimators_) if isinstance(model, BaseForest) else [model]
            if classifier:
                if method != "predict_proba" or column is None:
                    return None
                out = column
            else:
                if method != "predict":
                    return None
                out = 0
            scale = 1.0 / len(ests)
            trees = [_Tree("sk", e.tree_, 0, scale, out) for e in ests]
            return TreeEnsemble(name, trees, 1, np.zeros(1), True, None, True, n_features=model.n_features_in_)
    except AttributeError:  # an unexpected scikit-learn internals layout: use predict
        return None
    return None


def _transform_for(model, classifier, method, column, negate, K):
    """(transform, linear) for boosting models; transform False means unsupported."""
    if classifier:
        if method == "predict_proba":
            return _Proba(model._loss, column), False
        if method == "decision_function":
            col = 0 if K == 1 else column
            if K == 1 and not negate:
                return None, True
            return _Raw(col, negate), False
        return False, False
    if method != "predict":
        return False, False
    link = getattr(getattr(model, "_loss", None), "link", None)
    from sklearn._loss.link import IdentityLink

    if link is None or isinstance(link, IdentityLink) or not hasattr(model, "_baseline_prediction"):
        return None, True
    return _LinkInverse(link), False


def _hgb_encoder(model):
    """None (no ``_preprocessor``: the trees read the input columns as they are), the
    triple :attr:`TreeEnsemble.encoder`, or False for a layout this code does not know."""
    ct = getattr(model, "_preprocessor", None)
    if ct is None:
        return None
    try:
        n_in = int(ct.n_features_in_)
        order, cats = [], [None] * n_in
        for name, trans, cols in ct.transformers_:
            cols = np.asarray(cols)
            idx = np.arange(n_in)[cols] if cols.dtype == bool else cols.astype(int)
            if name == "remainder" and trans == "drop" and not len(idx):
                continue
            if name == "encoder":
                for j, c in zip(idx, trans.categories_):
                    cats[int(j)] = np.asarray(c, dtype=object)
            elif name != "numerical":
                return False
            order.extend(int(j) for j in idx)
        if sorted(order) != list(range(n_in)):
            return False
        pos = np.empty(n_in, dtype=np.intp)
        pos[np.asarray(order, dtype=np.intp)] = np.arange(n_in)
        return ct, pos, cats
    except (AttributeError, TypeError, ValueError):
        return False
