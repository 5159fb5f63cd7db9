"""tree-interval (any tree model, any response, every row's curve): a tree's prediction,
as a function of the grid features, only changes where a grid value takes another branch
at one of that tree's splits on them; so each tree is evaluated once per class of grid
values that take the same branches (usually a handful), with the model's own compiled
tree traversal, per row; then the model's link.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ._tree_kernels import goes_left

__all__ = ["IntervalCurves", "TREE_CELLS"]

#: response cells (rows x grid cells x channels) held at once by the tree engine
TREE_CELLS = 1 << 22


class IntervalCurves:
    """The tree-interval engine, as methods of :class:`~daskpd.model._tree_ensemble.TreeEnsemble`
    (which derives from this class): they read its ``trees``, ``n_channels``, ``init``,
    ``float32``, ``transform``, ``linear``, ``hgb_aux``, ``_cache``, :meth:`split_kinds`
    and :meth:`node_values`."""

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
                    dec[r, c] = goes_left(x, k, ft[0], ft[1], ft[2], ft[3], ft[4], ft[5], ft[6])
        _, inv = np.unique(dec.T, axis=0, return_inverse=True)
        return np.asarray(inv, dtype=np.intp).reshape(-1)

    def flat_all(self, i: int):
        """Tree ``i``'s node arrays for :func:`goes_left` (HistGradientBoosting trees)."""
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
