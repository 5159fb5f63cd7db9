"""A scikit-learn tree model as one object (:class:`TreeEnsemble`): its trees, their
channels and scales, the link, and the model's own input encoding; the tree-exact engine
reads it through :meth:`TreeEnsemble.flat`, the tree-interval engine is its
:meth:`~daskpd.model._tree_interval.IntervalCurves.curves`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ._flat_trees import FlatTrees
from ._tree_interval import IntervalCurves

__all__ = ["TreeEnsemble"]


class LinkInverse:
    def __init__(self, link):
        self.link = link

    def __call__(self, raw2d):
        return np.asarray(self.link.inverse(raw2d[:, 0]), dtype="float64")


class Proba:
    def __init__(self, loss, column):
        self.loss = loss
        self.column = column

    def __call__(self, raw2d):
        return np.asarray(self.loss.predict_proba(raw2d), dtype="float64")[:, self.column]


class Raw:
    def __init__(self, column, negate):
        self.column = column
        self.negate = negate

    def __call__(self, raw2d):
        out = raw2d[:, self.column]
        return -out if self.negate else out


@dataclass
class Tree:
    kind: str  # "sk" (sklearn Tree object) | "hgb" (TreePredictor)
    obj: Any
    channel: int
    scale: float
    out: int  # output column of the sklearn Tree's values


class TreeEnsemble(IntervalCurves):
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
        if isinstance(self.transform, Raw):
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

    def _values(self, i: int) -> np.ndarray:
        key = ("val", i)
        v = self._cache.get(key)
        if v is None:
            t = self.trees[i]
            v = np.ascontiguousarray(t.obj.value[:, 0, t.out], dtype="float64") * t.scale
            self._cache[key] = v
        return v

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
