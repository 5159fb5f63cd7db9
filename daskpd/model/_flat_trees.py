"""tree-exact (FastPD; Liu et al. 2025, the "interventional" tree walk): the trees of one
output channel as flat node arrays, and the two walks over them.

For a set S of grid features, the PD at a grid cell ``v`` of an identity-link ensemble is::

    sum_i w_i f(v, x_C^(i)) = init * sum_i w_i + sum_t sum_leaf value_leaf * [v in box_S(leaf)] * W_S(leaf)

where ``W_S(leaf)`` is the weight of the rows whose other features (C) fall in the leaf's
box: :meth:`FlatTrees.leaf_weight_sets` computes it for every requested item per partition
in ONE walk of every row through every tree, :meth:`FlatTrees.cell_sums` then walks each
tree once per grid cell (the compiled walks: :mod:`daskpd.model._tree_kernels`).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ._tree_kernels import LEVEL_BLOCK, LEVEL_BLOCK_COUNTS, count_words, walk_cell_sums, walk_leaf_weights

__all__ = ["FlatTrees", "walk_slots", "leaf_weights", "cell_sums"]


def walk_slots(items: Sequence[Sequence[int]]):
    """The walk's states for PD ``items`` (each a tuple of internal target features):
    ``(tbit, trans, members)`` -- ``tbit`` maps a feature to its bit, ``trans`` the slot
    transitions of :func:`walk_leaf_weights`, ``members[k]`` the slots summed into item k's
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
    """The trees of one output channel of ``ens`` (a
    :class:`~daskpd.model._tree_ensemble.TreeEnsemble`), concatenated into flat node arrays
    for the compiled walks (leaves have ``feat == -1``; ``value`` is the leaf value times
    the tree's scale and the channel's sign)."""

    def __init__(self, ens, channel: int, sign: float):
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
            walk_leaf_weights(*self._args(), tbit, trans, np.ascontiguousarray(X.T), W, C, unit, block, out,
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
            walk_cell_sums(*self._args(), s_pos, self.value, W2, cells, np.empty(self.stack, np.int64), out)
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

