"""Shared machinery of the model-based family.

* **Model adapter** (:class:`Predictor`): a fitted model (anything with ``predict`` /
  ``predict_proba`` / ``decision_function``, a scikit-learn estimator, or a plain
  function of a DataFrame) becomes a function ``rows -> float64 response``, with the
  class of interest selected for classifiers.  A model's input columns are
  ``model.feature_names_in_`` when it has them, else the ``columns=`` argument.
* **Stacked prediction** (:meth:`Predictor.predict_copies`): the rows of a partition are
  replicated once per grid value (or per bin edge) and predicted in a few big calls,
  in memory-bounded batches of at most ``batch_rows`` stacked rows.
* **Tree engine** (:class:`TreeEnsemble`): for scikit-learn tree models (decision
  trees, random forests, extra trees, gradient boosting, histogram gradient boosting)
  the *brute-force* result is computed without predicting every grid copy.  A tree's
  prediction, as a function of the grid feature, is piecewise constant between the
  thresholds that tree uses on that feature; so each tree is evaluated once per
  threshold interval that holds a grid value (usually a handful), with the model's own
  compiled tree traversal, and the per-tree results are summed.  The numbers are those
  of predicting every copy, up to floating-point reassociation (~1e-15 relative).
* **Column summaries and exact order statistics** (:func:`summarize`,
  :func:`order_statistics`): distinct values (when few), counts and ranges in one pass;
  exact quantiles by histogram refinement (a pass over the feature columns per level,
  usually two), never by collecting a column on the driver.
* **Grids**: scikit-learn's ``_grid_from_X`` rule on the whole data set (distinct values
  when fewer than ``grid_resolution``, else ``grid_resolution`` equally spaced points
  between the ``percentiles`` computed exactly as ``scipy.stats.mstats.mquantiles``).
* **Job runner** (:func:`run_jobs`): several jobs (PD items, ICE, ALE, marginal) share
  ONE pass of the engine (:mod:`daskpd._engine.plan`); each job's partial knows how to
  combine itself.
"""
from __future__ import annotations

import numbers
import os
import warnings
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pandas as pd

from .._engine import scheduler
from .._engine.plan import Job, build_pass
from .._strat.pipeline import check_int  # one definition, shared with the model-free API
from ..io import DataError, as_float, check_columns, kind_of, load

__all__ = [
    "Predictor", "TreeEnsemble", "resolve_predictor", "tree_ensemble_for",
    "ColumnSummary", "summarize", "order_statistics", "mquantile_ranks", "type1_ranks",
    "pd_grid", "run_jobs", "PartitionContext", "open_data", "ModelJob",
    "check_int", "check_choice", "check_percentiles", "check_features", "check_weight", "model_available",
    "DEFAULT_BATCH_ROWS",
]

#: stacked rows per model call (rows x grid copies), bounds the memory of a batch
DEFAULT_BATCH_ROWS = 1 << 20
#: response cells (rows x grid cells x channels) held at once by the tree engine
_TREE_CELLS = 1 << 22
#: distinct values kept per numeric column in the summary pass
MAX_UNIQUE = 1024
#: distinct levels allowed for a categorical column
MAX_LEVELS = 10_000


# ---------------------------------------------------------------------------------
# validation


def check_choice(name: str, value, choices: Sequence[str]):
    if not isinstance(value, str) or value not in choices:
        raise DataError(f"parameter {name} must be one of {', '.join(map(repr, choices))}; got {value!r}")
    return value


def check_percentiles(percentiles) -> tuple[float, float]:
    """As scikit-learn: a pair (lo, hi) in [0, 1] with lo < hi."""
    try:
        lo, hi = percentiles
        lo, hi = float(lo), float(hi)
    except (TypeError, ValueError):
        raise DataError(f"parameter percentiles must be a pair of numbers (lo, hi) in [0, 1]; got {percentiles!r}") from None
    if not (0.0 <= lo <= 1.0 and 0.0 <= hi <= 1.0):
        raise DataError(f"parameter percentiles values must be in [0, 1]; got {percentiles!r}")
    if lo >= hi:
        raise DataError(f"parameter percentiles: percentiles[0] must be strictly less than percentiles[1]; got {percentiles!r}")
    return lo, hi


def check_features(features, available: Sequence[str], *, allow_pairs: bool, name: str = "features"):
    """Normalise ``features`` to (items, single).

    ``items`` is a list of tuples of column names (1-tuples for 1-way, 2-tuples for
    2-way).  ``single`` tells whether the caller passed one item (a str, or a pair when
    pairs are allowed) rather than a list.
    """
    def one(item):
        if isinstance(item, str):
            return (item,)
        if allow_pairs and isinstance(item, (tuple, list)) and len(item) == 2 and all(isinstance(c, str) for c in item):
            if item[0] == item[1]:
                raise DataError(f"parameter {name}: a 2-way pair needs two different columns; got {tuple(item)!r}")
            return tuple(item)
        what = "a column name or a pair (tuple) of column names" if allow_pairs else "a column name (str)"
        raise DataError(f"parameter {name}: each entry must be {what}; got {item!r}")

    if isinstance(features, str):
        items, single = [one(features)], True
    elif allow_pairs and isinstance(features, tuple) and len(features) == 2 and all(isinstance(c, str) for c in features):
        items, single = [one(features)], True
    elif isinstance(features, (list, tuple)) and len(features) > 0:
        items, single = [one(f) for f in features], False
    else:
        raise DataError(f"parameter {name} must be a column name or a non-empty list of them; got {features!r}")
    dup = [it for i, it in enumerate(items) if it in items[:i]]
    if dup:
        raise DataError(f"parameter {name} lists {dup[0]!r} more than once")
    check_columns(available, [c for it in items for c in it], source="data")
    return items, single


def check_weight(sample_weight, data, columns_available: Sequence[str]):
    """Validate ``sample_weight``: None, a column name, or (pandas input) an array.

    Returns ``(data, weight_column_or_None)``; an array is attached to a copy of the
    pandas DataFrame as a column.
    """
    if sample_weight is None:
        return data, None
    if isinstance(sample_weight, str):
        check_columns(columns_available, [sample_weight], source="data (sample_weight)")
        return data, sample_weight
    if isinstance(data, pd.DataFrame):
        w = np.asarray(sample_weight)
        if w.ndim != 1 or len(w) != len(data):
            raise DataError(f"parameter sample_weight: an array must have one weight per row ({len(data)}); "
                            f"got shape {w.shape}")
        if w.dtype.kind not in "fiub":
            raise DataError(f"parameter sample_weight: weights must be numbers; got dtype {w.dtype}")
        w = w.astype("float64")
        if not np.isfinite(w).all() or (w < 0).any():
            raise DataError("parameter sample_weight: weights must be finite and >= 0")
        if w.sum() <= 0:
            raise DataError("parameter sample_weight: the weights sum to 0")
        name = "__daskpd_weight__"
        return data.assign(**{name: w}), name
    raise DataError("parameter sample_weight must be None or the name of a weight column (an array is accepted "
                    f"only when data is a pandas DataFrame); got {type(sample_weight).__name__}")


def model_available(model, columns, available: Sequence[str], reserved: Sequence) -> list:
    """The columns the model may take as inputs: ``available`` without ``reserved`` (the
    weight column, a marginal plot's target) -- unless the model names them among its
    inputs (``columns=`` or ``feature_names_in_``): a weight column may also be a model
    input, as with scikit-learn's ``sample_weight``.  A model that names no columns takes
    every available one, so the reserved columns stay out of that default."""
    declared = columns if columns is not None else getattr(model, "feature_names_in_", None)
    declared = set() if declared is None or isinstance(declared, str) else {str(c) for c in declared}
    return [c for c in available if c not in reserved or c in declared]


def open_data(data, columns, *, storage_options=None, filters=None):
    """:func:`daskpd.io.load`, with pandas inputs cut into enough partitions to use every core."""
    if isinstance(data, pd.DataFrame):
        ncores = os.cpu_count() or 1
        chunk = int(min(1_000_000, max(25_000, -(-len(data) // (2 * ncores)))))
        return load(data, columns, chunk_rows=chunk)
    return load(data, columns, storage_options=storage_options, filters=filters)


def data_columns(data, storage_options=None, filters=None) -> list[str]:
    """The column names of ``data`` (reads only the schema for parquet)."""
    if isinstance(data, pd.DataFrame):
        return [str(c) for c in data.columns]
    return [str(c) for c in load(data, None, storage_options=storage_options, filters=filters).columns]


# ---------------------------------------------------------------------------------
# the model adapter


def _is_sklearn_estimator(model) -> bool:
    return hasattr(model, "get_params") and hasattr(model, "fit")


def _is_classifier(model) -> bool:
    try:
        from sklearn.base import is_classifier

        if is_classifier(model):
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
                "response": self.response, "target_class": _jsonable(self.target_class), "columns": self.columns,
                "tree_engine": self.tree is not None}

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


def _jsonable(v):
    if isinstance(v, np.generic):
        return v.item()
    return v


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


def resolve_predictor(model, available: Sequence[str], dtypes: pd.Series | None = None, *, columns=None,
                      response="auto", target_class=None, engine: str = "auto") -> Predictor:
    """Validate ``model`` / ``columns`` / ``response`` / ``target_class`` up front."""
    check_choice("response", response, ("auto", "predict", "predict_proba", "decision_function"))
    check_choice("engine", engine, ("auto", "tree", "predict"))
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
    if columns is not None:
        if isinstance(columns, str) or not isinstance(columns, (list, tuple, pd.Index)) or len(columns) == 0:
            raise DataError(f"parameter columns must be a non-empty list of column names; got {columns!r}")
        columns = [str(c) for c in columns]
        if len(set(columns)) != len(columns):
            raise DataError("parameter columns has duplicate names")
    names = getattr(model, "feature_names_in_", None)
    if names is not None:
        names = [str(c) for c in names]
        if columns is not None and columns != names:
            raise DataError(f"parameter columns {columns} differs from the model's feature_names_in_ {names}; "
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
            raise DataError(f"parameter columns has {len(columns)} names but the model expects {n_in} features")
    check_columns(available, columns, source="data (the model's input columns)")

    as_frame = is_function or names is not None or not _is_sklearn_estimator(model)
    if not as_frame and dtypes is not None:
        bad = [c for c in columns if c in dtypes.index and kind_of(dtypes[c]) == "categorical"]
        if bad:
            raise DataError(f"column{'s' if len(bad) > 1 else ''} {bad} are not numeric, but the model was fitted "
                            "on a numeric array (no feature_names_in_); fit it on a DataFrame or encode them")
    classifier = (not is_function) and _is_classifier(model)
    classes = getattr(model, "classes_", None) if classifier else None
    if classes is not None:
        classes = np.asarray(classes)
        if classes.ndim != 1:
            raise DataError("multi-output classifiers are not supported; wrap the model in a function returning "
                            "one number per row")

    # the response method
    if is_function:
        if response != "auto":
            raise DataError("parameter response applies to model objects; a function's own output is used")
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
            raise DataError(f"parameter response={response!r}, but {type(model).__name__} has no {response} method")
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
                                f"{list(map(_jsonable, classes))}")
        hits = np.flatnonzero(classes == target_class)
        if len(hits) != 1:
            raise DataError(f"parameter target_class={target_class!r} is not one of the model's classes "
                            f"{list(map(_jsonable, classes))}")
        idx = int(hits[0])
        if method == "predict_proba":
            column = idx
        elif len(classes) == 2:
            negate = idx == 0  # binary decision_function scores classes_[1]
        else:
            column = idx
    elif target_class is not None:
        if isinstance(target_class, bool) or not isinstance(target_class, numbers.Integral) or target_class < 0:
            raise DataError("parameter target_class: for a model without classes_ it is the (0-based) column of a "
                            f"2-D output; got {target_class!r}")
        column = int(target_class)
    response_name = method if method != "call" else "function"

    tree = None
    if engine != "predict" and not is_function:
        numeric_ok = dtypes is None or all(kind_of(dtypes[c]) == "numeric" for c in columns if c in dtypes.index)
        tree = tree_ensemble_for(model, method, column, negate) if numeric_ok else None
        if engine == "tree" and tree is None:
            raise DataError(f"engine='tree' needs a scikit-learn tree model (decision tree, random forest, extra "
                            f"trees, gradient boosting, histogram gradient boosting without categorical splits) "
                            f"with numeric input columns; got {type(model).__name__}")
    return Predictor(model, columns, as_frame=as_frame, method=method, column=column, negate=negate, kind=kind,
                     classes=classes, target_class=target_class, response=response_name, tree=tree)


# ---------------------------------------------------------------------------------
# the tree engine


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
        if len(targets) == 1:
            return self._curves_1d(X64, targets[0], grids[0], weights, need_rows)
        return self._curves_combos(X64, targets, grids, weights, need_rows)

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


def tree_ensemble_for(model, method: str, column, negate: bool) -> TreeEnsemble | None:
    """The :class:`TreeEnsemble` of a supported scikit-learn model, else None."""
    try:
        from sklearn.ensemble._forest import BaseForest
        from sklearn.ensemble._gb import BaseGradientBoosting
        from sklearn.ensemble._hist_gradient_boosting.gradient_boosting import BaseHistGradientBoosting
        from sklearn.tree import BaseDecisionTree
    except ImportError:  # pragma: no cover
        return None
    classifier = _is_classifier(model)
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


# ---------------------------------------------------------------------------------
# per-partition context and the job runner


class PartitionContext:
    """What the jobs of one pass share on one partition (computed lazily, once)."""

    def __init__(self, df: pd.DataFrame, plan: "Plan"):
        self.df = df
        self.plan = plan
        self._w = None
        self._w_done = False
        self._inputs = None
        self._X64 = None

    @property
    def n(self) -> int:
        return len(self.df)

    @property
    def weights(self):
        if not self._w_done:
            self._w_done = True
            col = self.plan.weight
            if col is not None:
                w = as_float(self.df[col])
                if len(w) and (not np.isfinite(w).all() or (w < 0).any()):
                    raise DataError(f"sample_weight column {col!r} has missing, infinite or negative values")
                self._w = w
        return self._w

    def wsum(self) -> float:
        w = self.weights
        return float(w.sum()) if w is not None else float(self.n)

    def inputs(self):
        if self._inputs is None:
            self._inputs = self.plan.predictor.inputs(self.df)
        return self._inputs

    def X64(self):
        if self._X64 is None:
            self._X64 = float_matrix(self.df, self.plan.predictor.columns)
        return self._X64


@dataclass
class Plan:
    jobs: list
    predictor: Predictor | None = None
    weight: str | None = None
    batch_rows: int = DEFAULT_BATCH_ROWS


class ModelJob(Job):
    """A model-family job on the engine: ``map`` gets the pass's shared
    :class:`PartitionContext` (the partition's model inputs, decoded once for every
    job); partials combine by their own ``combine``; ``finish`` is the job's, if any."""

    def __init__(self, inner, plan: Plan):
        self.inner = inner
        self.plan = plan

    def map(self, ctx):
        mctx = ctx.cached(("model", id(self.plan)), lambda: PartitionContext(ctx.df, self.plan))
        return self.inner.map(mctx)

    def combine(self, parts, bucket=0):
        return type(parts[0]).combine(list(parts))

    def finish(self, merged):
        fin = getattr(self.inner, "finish", None)
        return fin(merged) if fin is not None else merged


def run_jobs(ddf, plan: Plan, *, progress=None, name="daskpd-model", extra=()):
    """Run every job of ``plan`` in ONE pass (:func:`daskpd._engine.plan.build_pass`);
    returns the list of finished jobs (followed by the results of ``extra`` dask objects,
    computed in the same submission)."""
    jobs = [ModelJob(j, plan) for j in plan.jobs]
    out = scheduler.compute(*build_pass(ddf, jobs, name=name), *extra, progress=progress)
    return list(out[:len(jobs)]), list(out[len(jobs):])


# ---------------------------------------------------------------------------------
# column summaries


@dataclass
class ColumnSummary:
    """One pass over a column: counts, range and (when few) its distinct values."""

    name: str
    kind: str  # "numeric" | "categorical"
    n: int = 0  # non-missing (finite, for numeric) values
    n_missing: int = 0
    vmin: float = np.inf
    vmax: float = -np.inf
    uniques: np.ndarray | None = None  # sorted distinct values (None: more than the cap)
    counts: np.ndarray | None = None  # rows per distinct value

    @classmethod
    def combine(cls, parts: Sequence["ColumnSummary"]) -> "ColumnSummary":
        p0 = parts[0]
        out = cls(p0.name, p0.kind, sum(p.n for p in parts), sum(p.n_missing for p in parts),
                  min(p.vmin for p in parts), max(p.vmax for p in parts))
        if any(p.uniques is None for p in parts):
            return out
        if p0.kind == "numeric":
            vals = np.concatenate([p.uniques for p in parts])
            cnts = np.concatenate([p.counts for p in parts])
            u, inv = np.unique(vals, return_inverse=True)
            if len(u) > MAX_UNIQUE:
                return out
            out.uniques, out.counts = u, np.bincount(inv, weights=cnts, minlength=len(u)).astype("int64")
        else:
            acc: dict = {}
            for p in parts:
                for v, c in zip(p.uniques, p.counts):
                    acc[v] = acc.get(v, 0) + int(c)
            if len(acc) > MAX_LEVELS:
                return out
            u = _sort_levels(list(acc))
            out.uniques = u
            out.counts = np.array([acc[v] for v in u], dtype="int64")
        return out


def _sort_levels(levels: list) -> np.ndarray:
    arr = np.empty(len(levels), dtype=object)
    arr[:] = levels
    try:
        return arr[np.argsort(arr, kind="stable")]
    except TypeError:
        return arr[np.argsort(np.array([str(v) for v in levels]), kind="stable")]


def summarize_column(s: pd.Series, kind: str) -> ColumnSummary:
    name = str(s.name)
    if kind == "numeric":
        v = as_float(s)
        fin = np.isfinite(v)
        vals = v[fin]
        out = ColumnSummary(name, kind, int(fin.sum()), int((~fin).sum()))
        if len(vals):
            out.vmin, out.vmax = float(vals.min()), float(vals.max())
            u, cnt = np.unique(vals, return_counts=True)
            if len(u) <= MAX_UNIQUE:
                out.uniques, out.counts = u, cnt.astype("int64")
        else:
            out.uniques, out.counts = vals, np.zeros(0, dtype="int64")
        return out
    miss = s.isna().to_numpy()
    vc = s[~miss].value_counts(sort=False)
    if isinstance(vc.index.dtype, pd.CategoricalDtype):
        vc = vc[vc > 0]
    out = ColumnSummary(name, kind, int((~miss).sum()), int(miss.sum()))
    if len(vc) <= MAX_LEVELS:
        levels = _sort_levels(list(vc.index.astype(object)))
        out.uniques = levels
        out.counts = vc.reindex(pd.Index(levels, dtype=vc.index.dtype) if not isinstance(
            vc.index.dtype, pd.CategoricalDtype) else pd.CategoricalIndex(levels, dtype=vc.index.dtype)
        ).to_numpy().astype("int64")
    return out


@dataclass
class _Summaries:
    cols: dict

    @classmethod
    def combine(cls, parts):
        return cls({c: ColumnSummary.combine([p.cols[c] for p in parts]) for c in parts[0].cols})


@dataclass
class SummaryJob:
    kinds: dict  # column -> kind

    def map(self, ctx):
        return _Summaries({c: summarize_column(ctx.df[c], k) for c, k in self.kinds.items()})


def summarize(ddf, kinds: dict, *, progress=None) -> dict[str, ColumnSummary]:
    """One pass: a :class:`ColumnSummary` per column in ``kinds``."""
    if not kinds:
        return {}
    (res,), _ = run_jobs(ddf, Plan([SummaryJob(dict(kinds))]), progress=progress, name="daskpd-summary")
    out = res.cols
    for c, s in out.items():
        if s.kind == "categorical" and s.uniques is None:
            raise DataError(f"categorical column {c!r} has more than {MAX_LEVELS:,} distinct levels")
    return out


# ---------------------------------------------------------------------------------
# exact order statistics by histogram refinement


def _edges(lo: float, hi: float, nbins: int) -> np.ndarray:
    return np.linspace(lo, hi, nbins + 1)


@dataclass
class _RefineResult:
    hists: dict  # key -> (counts, vmin, vmax)
    values: dict  # key -> sorted values

    @classmethod
    def combine(cls, parts):
        hists, values = {}, {}
        for key in parts[0].hists:
            hs = [p.hists[key] for p in parts]
            hists[key] = (np.sum([h[0] for h in hs], axis=0), min(h[1] for h in hs), max(h[2] for h in hs))
        for key in parts[0].values:
            values[key] = np.sort(np.concatenate([p.values[key] for p in parts]), kind="mergesort")
        return cls(hists, values)


@dataclass
class RefineJob:
    """Per column: histograms of some value ranges, or the values in some ranges."""

    requests: dict  # column -> list of (key, lo, hi, hi_inclusive, nbins or 0 for "collect")

    def map(self, ctx):
        hists, values = {}, {}
        for col, reqs in self.requests.items():
            v = as_float(ctx.df[col])
            v = np.sort(v[np.isfinite(v)])
            for key, lo, hi, incl, nbins in reqs:
                i0 = np.searchsorted(v, lo, side="left")
                i1 = np.searchsorted(v, hi, side="right" if incl else "left")
                seg = v[i0:i1]
                if nbins == 0:
                    values[key] = seg
                else:
                    idx = np.searchsorted(seg, _edges(lo, hi, nbins), side="left")
                    idx[-1] = len(seg)
                    counts = np.diff(idx).astype("int64")
                    mn, mx = (float(seg[0]), float(seg[-1])) if len(seg) else (np.inf, -np.inf)
                    hists[key] = (counts, mn, mx)
        return _RefineResult(hists, values)


def order_statistics(ddf, summaries: dict[str, ColumnSummary], ranks: dict[str, Sequence[int]], *,
                     progress=None, collect_cap: int = 2_000_000) -> dict[str, dict[int, float]]:
    """Exact order statistics (0-based ``ranks`` among a column's finite values).

    Distinct values from the summary answer directly; otherwise each pass histograms
    the candidate value ranges (up to 4096 equal-width bins) and narrows every rank to
    one bin, until a range holds few enough values to be collected (or a single value).
    Usually two passes over the columns; memory is bounded by ``collect_cap`` values.
    """
    out: dict[str, dict[int, float]] = {}
    pending = []  # [col, rank, lo, hi, incl, below, count]
    for col, rs in ranks.items():
        s = summaries[col]
        rs = sorted({int(r) for r in rs})
        out[col] = {}
        if not rs:
            continue
        if rs[0] < 0 or rs[-1] >= s.n:
            raise ValueError(f"rank out of range for {col!r}: {rs[0]}..{rs[-1]} of {s.n}")
        if s.uniques is not None:
            cum = np.cumsum(s.counts)
            for r in rs:
                out[col][r] = float(s.uniques[np.searchsorted(cum, r, side="right")])
            continue
        for r in rs:
            pending.append([col, r, s.vmin, s.vmax, True, 0, s.n])
    for _ in range(64):
        if not pending:
            return out
        ranges = {}
        for t in pending:
            ranges.setdefault((t[0], t[2], t[3], t[4]), t[6])
        cap = max(4096, collect_cap // max(1, len(ranges)))
        nbins = int(max(256, min(4096, (1 << 21) // max(1, len(ranges)))))
        requests: dict = {}
        keys = {}
        for i, ((col, lo, hi, incl), count) in enumerate(ranges.items()):
            mode = 0 if count <= cap else nbins
            keys[(col, lo, hi, incl)] = (i, mode)
            requests.setdefault(col, []).append((i, lo, hi, incl, mode))
        (res,), _ = run_jobs(ddf, Plan([RefineJob(requests)]), progress=progress, name="daskpd-quantiles")
        nxt = []
        for t in pending:
            col, r, lo, hi, incl, below, count = t
            key, mode = keys[(col, lo, hi, incl)]
            if mode == 0:
                out[col][r] = float(res.values[key][r - below])
                continue
            counts, mn, mx = res.hists[key]
            if mn == mx:
                out[col][r] = mn
                continue
            cum = np.cumsum(counts)
            j = int(np.searchsorted(cum, r - below, side="right"))
            e = _edges(lo, hi, nbins)
            new_below = below + (int(cum[j - 1]) if j > 0 else 0)
            nlo, nhi = float(e[j]), float(e[j + 1])
            nincl = incl and j == nbins - 1
            nxt.append([col, r, nlo, nhi, nincl, new_below, int(counts[j])])
        pending = nxt
    raise RuntimeError("order statistics did not converge")  # pragma: no cover


def mquantile_ranks(n: int, percentiles) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``scipy.stats.mstats.mquantiles`` (alphap=betap=0.4, scikit-learn's grid) as ranks.

    Returns ``(lo_rank, hi_rank, gamma)``: quantile = (1-gamma)*x[lo] + gamma*x[hi].
    """
    p = np.atleast_1d(np.asarray(percentiles, dtype="float64"))
    alphap = betap = 0.4
    m = alphap + p * (1.0 - alphap - betap)
    if n == 1:
        z = np.zeros(len(p), dtype=int)
        return z, z, np.zeros(len(p))
    aleph = n * p + m
    k = np.floor(aleph.clip(1, n - 1)).astype(int)
    gamma = (aleph - k).clip(0, 1)
    return k - 1, k, gamma


def type1_ranks(n: int, K: int) -> np.ndarray:
    """0-based ranks of the type-1 (inverse ECDF) quantiles at k/K, k = 1..K (exact integers)."""
    k = np.arange(1, K + 1, dtype=np.int64)
    return -(-n * k // K) - 1


def type7_ranks(n: int, probs: np.ndarray):
    """Ranks and weights of the linear-interpolation (R type 7, numpy default) quantiles."""
    h = (n - 1) * np.asarray(probs, dtype="float64")
    lo = np.floor(h).astype(np.int64)
    hi = np.minimum(lo + 1, n - 1)
    return lo, hi, h - lo


# ---------------------------------------------------------------------------------
# grids


def custom_grid(feature: str, values, kind: str) -> np.ndarray:
    """Validate a user grid for ``feature``."""
    if kind == "categorical":
        arr = np.asarray(values, dtype=object)
        if arr.ndim != 1 or len(arr) == 0:
            raise DataError(f"parameter grid[{feature!r}] must be a non-empty 1-D list of levels")
        if pd.isna(pd.Series(arr)).any():
            raise DataError(f"parameter grid[{feature!r}] contains missing values")
        return arr
    try:
        arr = np.asarray(values, dtype="float64")
    except (TypeError, ValueError):
        raise DataError(f"parameter grid[{feature!r}] must be numbers (feature {feature!r} is numeric)") from None
    if arr.ndim != 1 or len(arr) == 0:
        raise DataError(f"parameter grid[{feature!r}] must be a non-empty 1-D array; got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise DataError(f"parameter grid[{feature!r}] contains missing or infinite values")
    return arr


def pd_grid_plan(summary: ColumnSummary, kind: str, grid_resolution: int, percentiles):
    """Either the grid (distinct values / levels) or the ranks needed for percentiles."""
    if summary.n == 0:
        raise DataError(f"feature {summary.name!r} has no non-missing values")
    if kind == "categorical":
        return summary.uniques, None
    if summary.uniques is not None and len(summary.uniques) < grid_resolution:
        return summary.uniques, None
    lo, hi, gamma = mquantile_ranks(summary.n, percentiles)
    return None, (lo, hi, gamma)


def pd_grid(name: str, stats: dict[int, float], plan, grid_resolution: int) -> np.ndarray:
    lo, hi, gamma = plan
    xlo = np.array([stats[int(r)] for r in lo])
    xhi = np.array([stats[int(r)] for r in hi])
    emp = (1.0 - gamma) * xlo + gamma * xhi
    if np.allclose(emp[0], emp[1]):
        raise DataError(f"feature {name!r}: percentiles are too close to each other, unable to build the grid; "
                        "choose percentiles that are further apart")
    return np.linspace(emp[0], emp[1], num=grid_resolution, endpoint=True)


def feature_kinds(dtypes: pd.Series, features: Sequence[str], categorical_features=None) -> dict[str, str]:
    """numeric | categorical per feature (datetimes are refused)."""
    cats = set()
    if categorical_features is not None:
        if isinstance(categorical_features, str) or not isinstance(categorical_features, (list, tuple, set)):
            raise DataError("parameter categorical_features must be a list of column names; got "
                            f"{categorical_features!r}")
        cats = {str(c) for c in categorical_features}
        check_columns(list(dtypes.index), sorted(cats), source="data (categorical_features)")
    kinds = {}
    for f in features:
        k = kind_of(dtypes[f])
        if k == "datetime":
            raise DataError(f"feature {f!r} is a datetime ({dtypes[f]}); convert it to a number first")
        kinds[f] = "categorical" if f in cats else k
    return kinds


def build_grids(ddf, features: Sequence[str], kinds: dict, *, grid_resolution: int, percentiles, grid=None,
                progress=None) -> dict[str, np.ndarray]:
    """Grids for ``features``: custom where given, else scikit-learn's rule on all rows."""
    grid = dict(grid or {})
    out = {}
    need = [f for f in features if f not in grid]
    for f in features:
        if f in grid:
            out[f] = custom_grid(f, grid[f], kinds[f])
    if not need:
        return out
    sums = summarize(ddf, {f: kinds[f] for f in need}, progress=progress)
    plans, ranks = {}, {}
    for f in need:
        g, rk = pd_grid_plan(sums[f], kinds[f], grid_resolution, percentiles)
        if g is not None:
            out[f] = g
        else:
            plans[f] = rk
            ranks[f] = list(rk[0]) + list(rk[1])
    if ranks:
        stats = order_statistics(ddf, sums, ranks, progress=progress)
        for f, rk in plans.items():
            out[f] = pd_grid(f, stats[f], rk, grid_resolution)
    return out


def check_grid_arg(grid, features: Sequence[str]) -> dict:
    """``grid``: None, a dict {feature: values}, or (one feature) an array of values."""
    if grid is None:
        return {}
    if isinstance(grid, dict):
        unknown = [k for k in grid if k not in features]
        if unknown:
            raise DataError(f"parameter grid has entries for {unknown}, which are not among the requested features "
                            f"{list(features)}")
        return dict(grid)
    if len(features) == 1:
        return {features[0]: grid}
    raise DataError("parameter grid must be a dict {feature: values} when several features are requested")
