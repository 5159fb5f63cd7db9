"""The tree engine: brute-force partial dependence of scikit-learn tree models without
predicting every grid copy.

For decision trees, random forests, extra trees, gradient boosting and histogram
gradient boosting, a tree's prediction, as a function of the grid feature, is piecewise
constant between the thresholds that tree uses on that feature; so each tree is
evaluated once per threshold interval that holds a grid value (usually a handful), with
the model's own compiled tree traversal, and the per-tree results are summed.  The
numbers are those of predicting every copy, up to floating-point reassociation (~1e-15
relative).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

__all__ = ["TreeEnsemble", "tree_ensemble_for", "TREE_CELLS"]

#: response cells (rows x grid cells x channels) held at once by the tree engine
TREE_CELLS = 1 << 22


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

    def __init__(self, name, trees, n_channels, init, float32, transform, linear, hgb_aux=None):
        self.name = name
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
                sel = (nodes["is_leaf"] == 0) & (nodes["feature_idx"] == f)
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

    def curves(self, X64: np.ndarray, targets: Sequence[int], grids: Sequence[np.ndarray], weights, need_rows: bool):
        """Response of every row of ``X64`` with ``targets`` set to every grid cell.

        Returns the (weighted) sums over rows, shape ``cells``, when the model is linear
        and ``need_rows`` is false; else the response matrix, shape ``cells + (n,)``.
        """
        grids = [np.asarray(g, dtype="float64") for g in grids]
        for j, g in enumerate(grids):
            nan = np.isnan(g)
            if nan.any():  # a grid point "missing" (scikit-learn's grid keeps one NaN): the trees route it
                return self._curves_missing(X64, targets, grids, j, nan, weights, need_rows)
        if len(targets) == 1:
            return self._curves_1d(X64, targets[0], grids[0], weights, need_rows)
        return self._curves_combos(X64, targets, grids, weights, need_rows)

    def _curves_missing(self, X64, targets, grids, j, nan, weights, need_rows):
        """:meth:`curves` where grid ``j`` holds NaN: the finite points swept as usual,
        the NaN ones with the column set to NaN, every tree sending it where it learned."""
        rows = need_rows or not self.linear
        n = X64.shape[0]
        out = np.empty((*[len(g) for g in grids], *((n,) if rows else ())))
        view = np.moveaxis(out, j, 0)
        if (~nan).any():
            fin = self.curves(X64, targets, [*grids[:j], grids[j][~nan], *grids[j + 1:]], weights, need_rows)
            view[~nan] = np.moveaxis(np.asarray(fin), j, 0)
        Xn = np.array(X64, dtype="float64", order="C", copy=True)
        Xn[:, targets[j]] = np.nan
        rest = [k for k in range(len(targets)) if k != j]
        if rest:
            at = self.curves(Xn, [targets[k] for k in rest], [grids[k] for k in rest], weights, need_rows)
        else:
            Xw = np.ascontiguousarray(Xn, dtype=np.float32) if self.float32 else Xn
            raw = np.zeros((self.n_channels, n))
            for i, t in enumerate(self.trees):
                raw[t.channel] += self.tree_predict(i, Xw)
            raw += self.init[:, None]
            resp = raw[0] if self.transform is None else np.asarray(self.transform(raw.T), dtype="float64")
            at = resp if rows else (resp @ np.asarray(weights, dtype="float64") if weights is not None
                                    else resp.sum())
        view[nan] = np.asarray(at)[None]
        return out

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

    def _curves_combos(self, X64, targets, grids, weights, need_rows):
        """Several target features: each tree once per combination of threshold intervals."""
        n = X64.shape[0]
        shape = tuple(len(g) for g in grids)
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
                thr = self.thresholds(i, f)
                iv = np.searchsorted(thr, cmp[d], side="left") if len(thr) else np.zeros(len(cmp[d]), dtype=np.intp)
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
            if rows_mode:
                raw[t.channel] += V[np.ix_(*invs)] if len(invs) > 1 else V[invs[0]]
            else:
                acc += S[np.ix_(*invs)] if len(invs) > 1 else S[invs[0]]
        if not rows_mode:
            wsum = float(w.sum()) if w is not None else float(n)
            return acc + (const_sum + self.init[0] * wsum)
        raw += (const + self.init[:, None]).reshape((K,) + (1,) * len(shape) + (n,))
        if self.transform is None:
            return raw[0]
        r2 = np.moveaxis(raw, 0, -1).reshape(-1, K)
        return np.asarray(self.transform(r2), dtype="float64").reshape(shape + (n,))


def tree_ensemble_for(model, method: str, column, negate: bool, classifier: bool) -> TreeEnsemble | None:
    """The :class:`TreeEnsemble` of a supported scikit-learn model, else None."""
    try:
        from sklearn.ensemble._forest import BaseForest
        from sklearn.ensemble._gb import BaseGradientBoosting
        from sklearn.ensemble._hist_gradient_boosting.gradient_boosting import BaseHistGradientBoosting
        from sklearn.tree import BaseDecisionTree
    except ImportError:  # pragma: no cover
        return None
    name = type(model).__name__
    try:
        if isinstance(model, BaseHistGradientBoosting):
            if getattr(model, "_preprocessor", None) is not None:
                return None
            if getattr(model, "is_categorical_", None) is not None and np.any(model.is_categorical_):
                return None
            K = int(model.n_trees_per_iteration_)
            trees = []
            for preds in model._predictors:
                for k, p in enumerate(preds):
                    if np.any(p.nodes["is_categorical"]):
                        return None
                    trees.append(_Tree("hgb", p, k, 1.0, 0))
            init = np.asarray(model._baseline_prediction, dtype="float64").reshape(-1)
            aux = model._bin_mapper.make_known_categories_bitsets()
            transform, linear = _transform_for(model, classifier, method, column, negate, K)
            if transform is False:
                return None
            return TreeEnsemble(name, trees, K, init, False, transform, linear, aux)
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
            return TreeEnsemble(name, trees, K, init, True, transform, linear)
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
            return TreeEnsemble(name, trees, 1, np.zeros(1), True, None, True)
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
