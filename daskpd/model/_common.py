"""What the model family's modules share, one level below them.

The methods (:mod:`.fpd`, :mod:`.ice`, :mod:`.ale`, :mod:`.ale2d`, :mod:`.marginal`,
:mod:`.variance`) and the modules that compose them (:mod:`.multi`, :mod:`.compare`,
:class:`daskpd.plotting.PartialDependenceDisplay`) take these from here rather than from
one another:

* scikit-learn's readings of a request: the default ``method`` that remembers it was
  not passed (:data:`DEFAULT_METHOD`) and the warning when scikit-learn's ``"auto"``
  would have used tree recursion (:func:`warn_method`); every class of a multi-class
  classifier, or every output of a multi-output regressor, when no target class is
  given (:func:`all_classes`);
* the pieces of the binned kernels (ALE 1-D and 2-D, the marginal plot): mergeable
  per-bin statistics (:class:`BinStats`), the row counters of an ALE partial
  (:data:`ROW_COUNTS`), a partition's model inputs for some rows (:func:`input_rows`)
  and the codes of categorical levels (:func:`level_codes`).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .._errors import InvalidParameterError, SklearnDifferenceWarning
from ._predictor import Predictor, is_classifier

__all__ = ["DEFAULT_METHOD", "DefaultMethod", "auto_recursion", "warn_method", "regression_outputs", "all_classes",
           "response_label", "show_class", "response_note", "class_columns", "is_class_output", "require_class", "BinStats", "ROW_COUNTS",
           "input_rows", "level_codes"]


# ---------------------------------------------------------------------------------
# scikit-learn's readings


class DefaultMethod(str):
    """A default that remembers it was not passed (``method``: daskpd's default differs
    from scikit-learn's, and only then is there something to warn about)."""


#: partial_dependence's default method: "brute" (scikit-learn's default is "auto")
DEFAULT_METHOD = DefaultMethod("brute")


def auto_recursion(model) -> bool:
    """scikit-learn's rule for method='auto'."""
    from sklearn.ensemble import RandomForestRegressor
    from sklearn.ensemble._gb import BaseGradientBoosting
    from sklearn.ensemble._hist_gradient_boosting.gradient_boosting import BaseHistGradientBoosting
    from sklearn.tree import DecisionTreeRegressor

    if isinstance(model, BaseGradientBoosting):
        return model.init is None
    return isinstance(model, (BaseHistGradientBoosting, DecisionTreeRegressor, RandomForestRegressor))


def warn_method(method, pred: Predictor, weight, kind) -> None:
    """daskpd's default method is brute; scikit-learn's "auto" would use tree recursion here."""
    if not isinstance(method, DefaultMethod) or kind != "average" or weight is not None or pred.method == "call":
        return
    if not auto_recursion(pred.model):
        return
    clf = pred.kind == "classifier"
    warnings.warn(
        f"partial_dependence: method defaults to 'brute' here (the average of {type(pred.model).__name__}'s "
        f"predictions over the rows of data); scikit-learn's default method='auto' uses tree recursion for this "
        f"model, which averages over the training data through the trees' node weights"
        + (" and explains the decision function instead of predict_proba" if clf else "")
        + ", so the numbers can differ. Pass method='brute' to keep daskpd's reading without this warning, or "
        + ("method='recursion', response='decision_function'" if clf else "method='auto'")
        + " for scikit-learn's.", SklearnDifferenceWarning, stacklevel=4)


def regression_outputs(model, response):
    """The output columns of a multi-output regressor (scikit-learn's ``n_outputs_``, or a
    2-D ``coef_``), one PD each as scikit-learn gives; None for one output."""
    if response not in ("auto", "predict"):
        return None
    n = getattr(model, "n_outputs_", None)
    if n is None:
        coef = getattr(model, "coef_", None)
        n = coef.shape[0] if coef is not None and np.ndim(coef) == 2 else 1
    return list(range(int(n))) if int(n) > 1 else None


def all_classes(model, response, target_class, pred_probe=None):
    """The classes of a multi-class classifier when no ``target_class`` is given:
    scikit-learn's reading, one PD per class (``n_outputs`` = the number of classes)."""
    if target_class is not None:
        return None
    if response == "predict" and is_classifier(model):
        return None

    try:
        if not is_classifier(model):
            return regression_outputs(model, response)
        classes = getattr(model, "classes_", None)
    except Exception:  # noqa: BLE001 - an unfitted model: resolve_predictor says so
        return None
    if classes is None or np.ndim(classes) != 1 or len(classes) <= 2:
        return None
    return list(np.asarray(classes))


def show_class(v) -> str:
    """A class label as messages write it: ``'yes'``, ``2`` (numpy scalars as Python's)."""
    return repr(v.item() if isinstance(v, np.generic) else v)


def require_class(model, response, target_class, caller: str, *, any_output: bool = False) -> None:
    """The functions that explain one response need ``target_class`` for a multi-class
    classifier (``partial_dependence`` gives every class instead, as scikit-learn);
    ``any_output``: for any model with several outputs (:func:`daskpd.model_curves`,
    whose every method explains one response)."""
    classes = all_classes(model, response, target_class)
    if classes and any_output:
        raise InvalidParameterError(f"{caller}: parameter target_class is required for a model with several outputs: "
                                    f"one of [{', '.join(map(show_class, classes))}] (every method here explains one "
                                    "response)")
    if classes and is_classifier(model):
        raise InvalidParameterError(
            f"{caller}: parameter target_class is required for a multi-class classifier: one of "
            f"[{', '.join(map(show_class, classes))}] (the "
            f"class whose {'probability' if response in ('auto', 'predict_proba') else 'decision function'} is "
            "explained); daskpd.partial_dependence gives every class at once")


def _classes_of(res):
    model = (getattr(res, "params", None) or {}).get("model") or {}
    return model.get("classes")


def response_label(response, target_class, classes=None) -> str:
    """What a result explains, in words: ``P[class = 'yes']``, ``decision function of
    class 'yes'``; empty for a regressor's prediction or a function's output."""
    if response == "predict_proba":
        return f"P[class = {show_class(target_class)}]"
    if response == "decision_function":
        if classes is not None and len(classes) == 2:
            return f"decision function towards class {show_class(target_class)}"
        return f"decision function of class {show_class(target_class)}"
    return ""


def response_note(res) -> str:
    """A summary line naming a classifier's response; for a binary classifier, that it is
    the positive class (``classes_[1]``, scikit-learn's) or the other one."""
    label = response_label(getattr(res, "response", None), getattr(res, "target_class", None), _classes_of(res))
    if not label:
        return ""
    classes = _classes_of(res)
    tc = getattr(res, "target_class", None)
    if classes is not None and len(classes) == 2:
        which = ("the positive class, classes_[1]; target_class= for the other" if tc == classes[1]
                 else "the negative class, classes_[0], given as target_class")
        return f"\n  response: {label} ({which}; classes {classes})"
    return f"\n  response: {label}" + (f" (classes {classes})" if classes is not None else "")


def is_class_output(res) -> bool:
    """Whether a result's outputs are a classifier's classes (else a regressor's outputs)."""
    return getattr(res, "response", None) in ("predict_proba", "decision_function")


def class_columns(res, n: int) -> dict:
    """A ``target_class`` column (``n`` rows) for a result that explains a class."""
    if getattr(res, "response", None) not in ("predict_proba", "decision_function"):
        return {}
    labels = np.empty(n, dtype=object)
    labels[:] = [getattr(res, "target_class", None)] * n
    return {"target_class": labels}


# ---------------------------------------------------------------------------------
# mergeable per-bin statistics and the binned kernels' pieces


@dataclass
class BinStats:
    """Per-bin weight, row count, mean and sum of squared deviations (weighted)."""

    w: np.ndarray
    n: np.ndarray
    mean: np.ndarray
    m2: np.ndarray

    @classmethod
    def of(cls, idx: np.ndarray, values: np.ndarray, w: np.ndarray | None, nbins: int) -> "BinStats":
        ww = np.ones(len(idx)) if w is None else w
        W = np.bincount(idx, weights=ww, minlength=nbins)
        N = np.bincount(idx, minlength=nbins).astype("float64")
        S = np.bincount(idx, weights=ww * values, minlength=nbins)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(W > 0, S / np.where(W > 0, W, 1), 0.0)
        M2 = np.bincount(idx, weights=ww * (values - mean[idx]) ** 2, minlength=nbins)
        return cls(W, N, mean, M2)

    @staticmethod
    def merge(a: "BinStats", b: "BinStats") -> "BinStats":
        w = a.w + b.w
        safe = np.where(w > 0, w, 1)
        d = b.mean - a.mean
        mean = np.where(w > 0, a.mean + d * b.w / safe, 0.0)
        m2 = a.m2 + b.m2 + np.where(w > 0, d * d * a.w * b.w / safe, 0.0)
        return BinStats(w, a.n + b.n, mean, m2)

    @classmethod
    def merge_all(cls, parts):
        out = parts[0]
        for p in parts[1:]:
            out = cls.merge(out, p)
        return out

    def std(self) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.w > 0, np.sqrt(self.m2 / np.where(self.w > 0, self.w, 1)), np.nan)


#: the row counters of an ALE partial (1-D and 2-D), summed across partitions
ROW_COUNTS = ("n_rows", "n_used", "n_missing", "n_outside")


def input_rows(ctx, rows):
    """The model inputs of the partition's ``rows`` (a frame or an array, as the predictor takes)."""
    base = ctx.inputs()
    return base.iloc[rows] if ctx.plan.predictor.as_frame else base[rows]


def level_codes(s: pd.Series, levels: np.ndarray) -> np.ndarray:
    """Position of every value of ``s`` in ``levels`` (-1: missing, or not a level)."""
    idx = pd.Index(pd.Series(levels, dtype=object))
    vals = s.astype(object) if isinstance(s.dtype, pd.CategoricalDtype) else s
    codes = idx.get_indexer(pd.Index(vals.to_numpy(dtype=object)))
    codes[s.isna().to_numpy()] = -1
    return codes
