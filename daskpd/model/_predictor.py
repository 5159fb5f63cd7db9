"""The model adapter: a fitted model becomes ``rows -> float64 response``.

Anything with ``predict`` / ``predict_proba`` / ``decision_function`` (a scikit-learn
estimator or pipeline), or a plain function of a DataFrame, becomes a
:class:`Predictor`, with the class of interest selected for classifiers
(:func:`resolve_predictor` checks the model, its input columns and the response up
front).  A model's input columns are ``model.feature_names_in_`` when it has them, else
the ``columns=`` argument.  Stacked prediction (:meth:`Predictor.predict_copies`)
replicates a partition's rows once per grid value and predicts them in a few big calls,
in memory-bounded batches of at most ``batch_rows`` stacked rows.
"""
from __future__ import annotations

import numbers
from typing import Sequence

import numpy as np
import pandas as pd

from .._data.encode import as_float
from .._data.kinds import is_numeric_like, kind_of
from .._errors import DataError, InvalidParameterError
from .._data.columns import check_columns
from ..results.base import json_clean
from ._tree_engine import tree_ensemble_for

__all__ = ["Predictor", "resolve_predictor", "is_classifier", "values_as", "float_matrix", "DEFAULT_BATCH_ROWS"]

#: stacked rows per model call (rows x grid copies), bounds the memory of a batch
DEFAULT_BATCH_ROWS = 1 << 20


def _is_sklearn_estimator(model) -> bool:
    return hasattr(model, "get_params") and hasattr(model, "fit")


def is_classifier(model) -> bool:
    """A scikit-learn classifier, or any model with predict_proba and classes_."""
    try:
        from sklearn.base import is_classifier as sk_is_classifier

        if sk_is_classifier(model):
            return True
    except Exception:  # pragma: no cover - non-sklearn objects
        pass
    return hasattr(model, "predict_proba") and hasattr(model, "classes_")


class Predictor:
    """A model turned into ``rows -> float64 response`` (one number per row).

    Pickled once into the graph (``map_reduce`` wraps it in one delayed object), so the
    model ships to every worker once.
    """

    def __init__(self, model, columns, *, as_frame, method, column, negate, kind, classes,
                 target_class, response, tree=None):
        self.model = model
        self.columns = list(columns)
        self.as_frame = bool(as_frame)
        self.method = method  # "predict" | "predict_proba" | "decision_function" | "call"
        self.column = column  # output column to select from a 2-D output, or None
        self.negate = bool(negate)
        self.kind = kind  # "regressor" | "classifier" | "function"
        self.classes = classes
        self.target_class = target_class
        self.response = response
        self.tree = tree  # TreeEnsemble or None

    def describe(self) -> dict:
        return {"model": type(self.model).__name__ if self.method != "call" else getattr(self.model, "__name__", "function"),
                "response": self.response, "target_class": json_clean(self.target_class), "columns": self.columns,
                "tree_engine": self.tree is not None,
                "classes": None if self.classes is None else json_clean(list(self.classes))}

    # -- inputs

    def inputs(self, df: pd.DataFrame):
        """The model's input for rows ``df``: a DataFrame of its columns, or a float64 matrix."""
        if self.as_frame:
            return df[self.columns]
        return float_matrix(df, self.columns)

    # -- one call

    def call(self, X) -> np.ndarray:
        n = len(X)
        if self.method == "call":
            out = self.model(X)
        else:
            out = getattr(self.model, self.method)(X)
        out = np.asarray(out)
        if out.ndim == 2:
            if self.column is not None:
                if self.column >= out.shape[1]:
                    raise DataError(f"the model's {self.method} returned {out.shape[1]} columns; column "
                                    f"{self.column} (target_class) does not exist")
                out = out[:, self.column]
            elif out.shape[1] == 1:
                out = out[:, 0]
            else:
                raise DataError(f"the model's {self.method} returns {out.shape[1]} columns per row; pass "
                                "target_class= to choose one")
        elif out.ndim != 1:
            raise DataError(f"the model's {self.method} returned an array of shape {out.shape}; expected one "
                            "number per row")
        if len(out) != n:
            raise DataError(f"the model's {self.method} returned {len(out)} values for {n} rows")
        if out.dtype.kind not in "fiub":
            raise DataError(f"the model's {self.method} returns non-numeric values ({out.dtype}, e.g. class labels); "
                            "use response='predict_proba' (classifiers) or a numeric output")
        out = out.astype("float64", copy=False)
        return -out if self.negate else out

    def predict(self, df: pd.DataFrame) -> np.ndarray:
        if len(df) == 0:
            return np.empty(0)
        return self.call(self.inputs(df))

    # -- stacked copies

    def predict_copies(self, base, assignments, n_copies: int, batch_rows: int = DEFAULT_BATCH_ROWS) -> np.ndarray:
        """Predictions of every row of ``base`` under each of ``n_copies`` assignments.

        ``base`` is :meth:`inputs` of some rows; ``assignments`` is a list of
        ``(column, values)`` with ``len(values) == n_copies``: copy ``m`` has ``column``
        set to ``values[m]``.  Returns an ``(n_copies, n_rows)`` array.  Rows and copies
        are stacked copy-major into batches of at most ``batch_rows`` rows.
        """
        n = len(base)
        out = np.empty((n_copies, n))
        if n == 0 or n_copies == 0:
            return out
        rc = max(1, min(n, batch_rows // n_copies))
        cb = max(1, min(n_copies, batch_rows // rc))
        if self.as_frame:
            pos = {c: base.columns.get_loc(c) for c, _ in assignments}
            dtypes = {c: base.dtypes.iloc[pos[c]] for c, _ in assignments}
        else:
            pos = {c: self.columns.index(c) for c, _ in assignments}
        for r0 in range(0, n, rc):
            r1 = min(n, r0 + rc)
            m_rows = r1 - r0
            chunk = base.iloc[r0:r1] if self.as_frame else base[r0:r1]
            for m0 in range(0, n_copies, cb):
                m1 = min(n_copies, m0 + cb)
                mb = m1 - m0
                if self.as_frame:
                    S = chunk.take(np.tile(np.arange(m_rows), mb)).reset_index(drop=True)
                    for c, vals in assignments:
                        S[c] = values_as(np.repeat(np.asarray(vals)[m0:m1], m_rows), dtypes[c])
                else:
                    S = np.tile(chunk, (mb, 1))
                    for c, vals in assignments:
                        S[:, pos[c]] = np.repeat(np.asarray(vals, dtype="float64")[m0:m1], m_rows)
                out[m0:m1, r0:r1] = self.call(S).reshape(mb, m_rows)
        return out

    def predict_rowwise(self, base, copies, batch_rows: int = DEFAULT_BATCH_ROWS) -> np.ndarray:
        """Predictions of every row under each copy, where a copy sets columns per row.

        ``copies`` is a list; each copy is a list of ``(column, values)`` with one value
        per row of ``base`` (an empty list predicts the rows as they are).  Returns an
        ``(len(copies), n_rows)`` array; batches hold at most ``batch_rows`` rows.
        """
        n, M = len(base), len(copies)
        out = np.empty((M, n))
        if n == 0 or M == 0:
            return out
        rc = max(1, min(n, batch_rows // M))
        cols = list(dict.fromkeys(c for cp in copies for c, _ in cp))
        for r0 in range(0, n, rc):
            r1 = min(n, r0 + rc)
            m = r1 - r0
            if self.as_frame:
                chunk = base.iloc[r0:r1]
                S = chunk.take(np.tile(np.arange(m), M)).reset_index(drop=True)
                for c in cols:
                    orig = chunk[c].to_numpy(dtype=object)
                    parts = []
                    for cp in copies:
                        d = dict(cp)
                        parts.append(np.asarray(d[c], dtype=object)[r0:r1] if c in d else orig)
                    S[c] = values_as(np.concatenate(parts), chunk[c].dtype)
            else:
                chunk = base[r0:r1]
                S = np.tile(chunk, (M, 1))
                for i, cp in enumerate(copies):
                    for c, vals in cp:
                        S[i * m:(i + 1) * m, self.columns.index(c)] = np.asarray(vals, dtype="float64")[r0:r1]
            out[:, r0:r1] = self.call(S).reshape(M, m)
        return out


def values_as(values: np.ndarray, dtype):
    """``values`` as a column of ``dtype`` (keeps categories, ints when integral, ...)."""
    if isinstance(dtype, pd.CategoricalDtype):
        return pd.Categorical(values, dtype=dtype)
    if pd.api.types.is_bool_dtype(dtype):
        v = np.asarray(values)
        if v.dtype.kind == "b" or (v.dtype.kind in "fiu" and np.isin(v, [0, 1]).all()):
            return v.astype(bool)
        return v
    if pd.api.types.is_integer_dtype(dtype):
        v = np.asarray(values)
        if v.dtype.kind in "iu":
            return v
        if v.dtype.kind == "f" and np.all(np.isfinite(v)) and np.all(v == np.round(v)):
            return v.astype(np.asarray([], dtype=dtype).dtype if isinstance(dtype, np.dtype) else "int64")
        return v.astype("float64")
    if pd.api.types.is_numeric_dtype(dtype):
        v = np.asarray(values)
        if v.dtype == object:
            return pd.to_numeric(pd.Series(v), errors="coerce").to_numpy(dtype="float64", na_value=np.nan)
        return v.astype("float64")
    try:
        return pd.array(values, dtype=dtype)
    except (TypeError, ValueError):
        return np.asarray(values, dtype=object)


def float_matrix(df: pd.DataFrame, columns: Sequence[str]) -> np.ndarray:
    """Columns of ``df`` as a C-ordered float64 matrix (missing -> NaN)."""
    X = np.empty((len(df), len(columns)), dtype="float64")
    for j, c in enumerate(columns):
        try:
            X[:, j] = as_float(df[c])
        except TypeError:
            raise DataError(f"column {c!r} (dtype {df[c].dtype}) is not numeric, but the model was fitted on a "
                            "numeric array; fit it on a DataFrame (so that it has feature_names_in_) or encode "
                            "the column") from None
    return X


def fitted_estimator(model):
    """The estimator that predicts: a dask-ml wrapper (``ParallelPostFit``,
    ``Incremental``) gives its fitted scikit-learn estimator, so that a tree model
    trained through dask-ml gets the exact tree engine and every model its own
    response methods.  dask-ml's ``predict`` on a pandas partition is the inner
    estimator's ``predict``; daskpd maps it over the partitions itself."""
    if type(model).__module__.startswith("dask_ml.wrappers"):
        inner = getattr(model, "estimator_", None)  # Incremental: the partial-fitted clone
        if inner is None:
            inner = getattr(model, "estimator", None)  # ParallelPostFit: fitted in place
        if inner is not None:
            return inner
    return model


def resolve_predictor(model, available: Sequence[str], dtypes: pd.Series | None = None, *, columns=None,
                      response="auto", target_class=None, engine: str = "auto") -> Predictor:
    """Validate ``model`` / ``columns`` / ``response`` / ``target_class`` up front."""
    model = fitted_estimator(model)
    has = {m: callable(getattr(model, m, None)) for m in ("predict", "predict_proba", "decision_function")}
    is_function = callable(model) and not any(has.values())
    if not is_function and not any(has.values()):
        raise DataError("model must be a fitted model (an object with predict, predict_proba or decision_function) "
                        f"or a function of a pandas DataFrame; got {type(model).__name__}")
    if _is_sklearn_estimator(model):
        from sklearn.exceptions import NotFittedError
        from sklearn.utils.validation import check_is_fitted

        try:
            check_is_fitted(model)
        except NotFittedError:
            raise DataError(f"model {type(model).__name__} is not fitted; call fit first") from None
        except TypeError:  # not an estimator after all
            pass

    # the model's input columns
    if columns is not None:  # a non-empty list of names (validated by the public function)
        columns = [str(c) for c in columns]
        if len(set(columns)) != len(columns):
            raise InvalidParameterError("parameter columns has duplicate names")
    names = getattr(model, "feature_names_in_", None)
    if names is not None:
        names = [str(c) for c in names]
        if columns is not None and columns != names:
            raise InvalidParameterError(f"parameter columns {columns} differs from the model's feature_names_in_ {names}; "
                            "omit columns= (the model's own names are used)")
        columns = names
    elif columns is None:
        n_in = getattr(model, "n_features_in_", None)
        if is_function or n_in is None:
            columns = list(available)
        elif n_in == len(available):
            columns = list(available)
        else:
            raise DataError(f"the model was fitted without feature names and expects {n_in} columns, but data has "
                            f"{len(available)}; pass columns=[...] (the data columns, in the order the model "
                            "expects)")
    else:
        n_in = getattr(model, "n_features_in_", None)
        if n_in is not None and n_in != len(columns):
            raise InvalidParameterError(f"parameter columns has {len(columns)} names but the model expects {n_in} features")
    check_columns(available, columns, source="data (the model's input columns)")

    as_frame = is_function or names is not None or not _is_sklearn_estimator(model)
    if not as_frame and dtypes is not None:
        bad = [c for c in columns if c in dtypes.index and kind_of(dtypes[c]) == "categorical"
               and not is_numeric_like(dtypes[c])]  # booleans are 0/1 to a model
        if bad:
            raise DataError(f"column{'s' if len(bad) > 1 else ''} {bad} are not numeric, but the model was fitted "
                            "on a numeric array (no feature_names_in_); fit it on a DataFrame or encode them")
    classifier = (not is_function) and is_classifier(model)
    classes = getattr(model, "classes_", None) if classifier else None
    if classes is not None:
        classes = np.asarray(classes)
        if classes.ndim != 1:
            raise DataError("multi-output classifiers are not supported; wrap the model in a function returning "
                            "one number per row")

    # the response method
    if is_function:
        if response != "auto":
            raise InvalidParameterError("parameter response applies to model objects; a function's own output is used")
        method = "call"
    elif response == "auto":
        if classifier and has["predict_proba"]:
            method = "predict_proba"
        elif has["predict"]:
            method = "predict"
        elif has["predict_proba"]:
            method = "predict_proba"
        else:
            method = "decision_function"
    else:
        if not has[response]:
            raise InvalidParameterError(f"parameter response={response!r}, but {type(model).__name__} has no {response} method")
        method = response
        if method == "predict" and classifier:
            raise DataError("response='predict' of a classifier gives class labels, whose average is meaningless; "
                            "use response='predict_proba' (or 'decision_function')")

    # the class / output column
    column, negate, kind = None, False, ("function" if is_function else "classifier" if classifier else "regressor")
    if method in ("predict_proba", "decision_function") and classes is not None:
        if target_class is None:
            if len(classes) == 2:
                target_class = classes[1]
            else:
                raise DataError(f"the model has {len(classes)} classes; pass target_class= one of "
                                f"{list(map(json_clean, classes))}")
        hits = np.flatnonzero(classes == target_class)
        if len(hits) != 1:
            import difflib

            near = difflib.get_close_matches(str(target_class), [str(c) for c in classes], n=1)
            raise InvalidParameterError(f"parameter target_class={target_class!r} is not one of the model's classes "
                                        f"{list(map(json_clean, classes))}"
                                        + (f"; did you mean {json_clean(classes[[str(c) for c in classes].index(near[0])])!r}?"
                                           if near else ""))
        idx = int(hits[0])
        if method == "predict_proba":
            column = idx
        elif len(classes) == 2:
            negate = idx == 0  # binary decision_function scores classes_[1]
        else:
            column = idx
    elif target_class is not None:
        if isinstance(target_class, bool) or not isinstance(target_class, numbers.Integral) or target_class < 0:
            raise InvalidParameterError("parameter target_class: for a model without classes_ it is the (0-based) column of a "
                            f"2-D output; got {target_class!r}")
        column = int(target_class)
    response_name = method if method != "call" else "function"

    tree = None
    if engine != "predict" and not is_function:
        numeric_ok = dtypes is None or all(is_numeric_like(dtypes[c]) for c in columns if c in dtypes.index)
        tree = tree_ensemble_for(model, method, column, negate, classifier, numeric_inputs=numeric_ok)
        if engine == "tree" and tree is None:
            raise DataError(f"engine='tree' needs a scikit-learn tree model (decision tree, random forest, extra "
                            f"trees, gradient boosting, histogram gradient boosting) with numeric input columns "
                            f"(or a histogram gradient boosting model fitted on a DataFrame with categorical "
                            f"columns); got {type(model).__name__}")
    return Predictor(model, columns, as_frame=as_frame, method=method, column=column, negate=negate, kind=kind,
                     classes=classes, target_class=target_class, response=response_name, tree=tree)
