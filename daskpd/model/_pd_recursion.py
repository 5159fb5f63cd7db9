"""``method="recursion"``: which models have it, the method a request resolves to
(:func:`resolve_pd_method`), and the average delegated to the estimator's own
``_compute_partial_dependence_recursion`` (:func:`recursion_average`).
"""
from __future__ import annotations


import numpy as np

from .._errors import DataError
from ._common import auto_recursion
from ._predictor import Predictor

__all__ = ["recursion_average", "resolve_pd_method"]


def _recursion_supported(model) -> bool:
    from sklearn.ensemble import RandomForestRegressor
    from sklearn.ensemble._gb import BaseGradientBoosting
    from sklearn.ensemble._hist_gradient_boosting.gradient_boosting import BaseHistGradientBoosting
    from sklearn.tree import DecisionTreeRegressor

    return isinstance(model, (BaseGradientBoosting, BaseHistGradientBoosting, DecisionTreeRegressor,
                              RandomForestRegressor))


def recursion_average(pred: Predictor, features, grids) -> np.ndarray:
    from sklearn.utils.extmath import cartesian

    model = pred.model
    idx = np.asarray([pred.columns.index(f) for f in features], dtype=np.intp)
    grid = cartesian([np.asarray(g, dtype="float64") for g in grids])
    try:
        avg = model._compute_partial_dependence_recursion(grid, idx)
    except NotImplementedError as exc:
        raise DataError(f"method='recursion' is not available for this model: {exc}") from None
    avg = np.asarray(avg, dtype="float64")
    if avg.ndim == 1:
        avg = avg.reshape(1, -1)
    if pred.kind == "classifier" and len(pred.classes) > 2:
        row = pred.column
    else:
        row = 0
    out = avg[row]
    if pred.negate:
        out = -out
    return out.reshape([len(g) for g in grids])


def resolve_pd_method(method, pred: Predictor, kinds, items, weight) -> str:
    """``method`` (brute / recursion / auto) checked against the model, weights and kinds: brute or recursion."""
    """Resolve method='auto' and check method='recursion' is applicable."""
    feats = {f for it in items for f in it}
    if method == "auto":
        ok = (weight is None and pred.method != "call" and auto_recursion(pred.model)
              and (pred.kind == "regressor" or pred.method == "decision_function")
              and all(kinds[f] == "numeric" for f in feats))
        return "recursion" if ok else "brute"
    if method == "recursion":
        if pred.method == "call" or not _recursion_supported(pred.model):
            raise DataError("method='recursion' needs one of scikit-learn's GradientBoostingClassifier/Regressor, "
                            "HistGradientBoostingClassifier/Regressor, DecisionTreeRegressor or "
                            f"RandomForestRegressor; got {type(pred.model).__name__}. Use method='brute'.")
        if weight is not None:
            raise DataError("method='recursion' averages over the training data and cannot use sample_weight; "
                            "use method='brute'")
        if pred.kind == "classifier" and pred.method != "decision_function":
            raise DataError("with method='recursion' a classifier's response is its decision function; pass "
                            "response='decision_function' (or use method='brute' for probabilities)")
        cats = [f for f in feats if kinds[f] != "numeric"]
        if cats:
            raise DataError(f"method='recursion' supports numeric features only; {cats} are categorical")
    return method
