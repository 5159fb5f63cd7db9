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

This module reads a scikit-learn model into a :class:`~daskpd.model._tree_ensemble.TreeEnsemble`
(:func:`tree_ensemble_for`); tree-exact is :mod:`daskpd.model._flat_trees` with the compiled
walks of :mod:`daskpd.model._tree_kernels`, tree-interval :mod:`daskpd.model._tree_interval`.
"""
from __future__ import annotations

import warnings

import numpy as np

from ._tree_ensemble import LinkInverse, Proba, Raw, Tree, TreeEnsemble

__all__ = ["tree_ensemble_for"]


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
            trees = [Tree("hgb", p, k, 1.0, 0) for preds in model._predictors for k, p in enumerate(preds)]
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
            trees = [Tree("sk", model.estimators_[i, k].tree_, k, lr, 0)
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
            trees = [Tree("sk", e.tree_, 0, scale, out) for e in ests]
            return TreeEnsemble(name, trees, 1, np.zeros(1), True, None, True, n_features=model.n_features_in_)
    except AttributeError:  # an unexpected scikit-learn internals layout: use predict
        return None
    return None


def _transform_for(model, classifier, method, column, negate, K):
    """(transform, linear) for boosting models; transform False means unsupported."""
    if classifier:
        if method == "predict_proba":
            return Proba(model._loss, column), False
        if method == "decision_function":
            col = 0 if K == 1 else column
            if K == 1 and not negate:
                return None, True
            return Raw(col, negate), False
        return False, False
    if method != "predict":
        return False, False
    link = getattr(getattr(model, "_loss", None), "link", None)
    from sklearn._loss.link import IdentityLink

    if link is None or isinstance(link, IdentityLink) or not hasattr(model, "_baseline_prediction"):
        return None, True
    return LinkInverse(link), False


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
