"""Set up a model-based request: the checks that need the data's columns (features,
weights), then the model and the columns to read (:func:`prepare_model_run`, on the
request's one :class:`~daskpd._data.source.Dataset`).  The parameters' constraints are
in :mod:`daskpd.model._params`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from .._data.options import ReadOptions
from .._data.request import open_request
from .._data.kinds import is_numeric_like
from .._data.source import Dataset
from .._errors import DataError, InvalidParameterError

from ._arrays import WEIGHT_COLUMN, categorical_names, open_model_data, resolve_columns
from ._predictor import Predictor, resolve_predictor

__all__ = ["ModelRun", "prepare_model_run",
           "open_model_data", "check_features", "check_weight", "model_available", "WEIGHT_COLUMN"]

def check_features(features, dataset: Dataset, *, allow_pairs: bool, name: str = "features"):
    """Normalise ``features`` to (items, single).

    ``items`` is a list of tuples of column names (1-tuples for 1-way, 2-tuples for
    2-way).  ``single`` tells whether the caller passed one item (a str, or a pair when
    pairs are allowed) rather than a list.  Integer entries are column indices
    (scikit-learn's ``features=[0]``): they become the names of those columns.
    """
    features = resolve_columns(features, dataset, name)

    def one(item):
        if isinstance(item, str):
            return (item,)
        if isinstance(item, tuple) and len(item) == 1 and isinstance(item[0], str):  # an explicit 1-way entry
            return item
        if allow_pairs and isinstance(item, (tuple, list)) and len(item) == 2 and all(isinstance(c, str) for c in item):
            if item[0] == item[1]:
                raise InvalidParameterError(f"parameter {name}: a 2-way pair needs two different columns; got {tuple(item)!r}")
            return tuple(item)
        what = "a column name or a pair (tuple) of column names" if allow_pairs else "a column name (str)"
        raise InvalidParameterError(f"parameter {name}: each entry must be {what}; got {item!r}")

    if isinstance(features, str):
        items, single = [one(features)], True
    elif allow_pairs and isinstance(features, tuple) and len(features) == 2 and all(isinstance(c, str) for c in features):
        items, single = [one(features)], True
    elif isinstance(features, (list, tuple)) and len(features) > 0:
        items, single = [one(f) for f in features], False
    else:
        raise InvalidParameterError(f"parameter {name} must be a column name or a non-empty list of them; got {features!r}")
    dup = [it for i, it in enumerate(items) if it in items[:i]]
    if dup:
        raise InvalidParameterError(f"parameter {name} lists {dup[0]!r} more than once")
    dataset.check([c for it in items for c in it], f"parameter {name}")
    return items, single


def model_available(model, columns, available: Sequence[str], reserved: Sequence) -> list:
    """The columns the model may take as inputs: ``available`` without ``reserved`` (the
    weight column, a marginal plot's target) -- unless the model names them among its
    inputs (``columns=`` or ``feature_names_in_``): a weight column may also be a model
    input, as with scikit-learn's ``sample_weight``.  A model that names no columns takes
    every available one, so the reserved columns stay out of that default."""
    declared = columns if columns is not None else getattr(model, "feature_names_in_", None)
    declared = set() if declared is None or isinstance(declared, str) else {str(c) for c in declared}
    return [c for c in available if c not in reserved or c in declared]


def check_weight(sample_weight, dataset: Dataset) -> tuple[Dataset, str | None]:
    """Validate ``sample_weight``: None, a column name, or (pandas input) an array.

    Returns ``(dataset, weight_column_or_None)``; an array becomes a column of a copy of
    the pandas DataFrame.
    """
    if sample_weight is None:
        return dataset, None
    if isinstance(sample_weight, str):
        dataset.check([sample_weight], "parameter sample_weight")
        return dataset, sample_weight
    if dataset.is_pandas:
        n = len(dataset.frame)
        w = np.asarray(sample_weight)
        if w.ndim != 1 or len(w) != n:
            raise InvalidParameterError(f"parameter sample_weight: an array must have one weight per row ({n}); "
                                        f"got shape {w.shape}")
        if w.dtype.kind not in "fiub":
            raise InvalidParameterError(f"parameter sample_weight: weights must be numbers; got dtype {w.dtype}")
        w = w.astype("float64")
        if not np.isfinite(w).all() or (w < 0).any():
            raise InvalidParameterError("parameter sample_weight: weights must be finite and >= 0")
        if w.sum() <= 0:
            raise InvalidParameterError("parameter sample_weight: the weights sum to 0")
        return dataset.with_column(WEIGHT_COLUMN, w), WEIGHT_COLUMN
    raise InvalidParameterError("parameter sample_weight must be None or the name of a weight column (an array is "
                                "accepted only when data is a pandas DataFrame); got "
                                f"{type(sample_weight).__name__}")


@dataclass
class ModelRun:
    ddf: object  # the projected dask DataFrame: the model's columns, the features, the weights
    predictor: Predictor
    kinds: dict
    weight: str | None
    dtypes: pd.Series
    dataset: Dataset | None = None  # the request's opened input (all columns)


def prepare_model_run(model, data, features: Sequence[str], *, columns=None, response="auto", target_class=None,
                      engine="auto", sample_weight=None, categorical_features=None, extra_columns=(),
                      read: ReadOptions | None = None, need_model_columns=True, row_id=(),
                      reserved=()) -> ModelRun:
    """Validate the model and the columns against ``data`` (a :class:`Dataset`, or any
    input, then opened here as ``read`` says: :func:`open_model_data`), and project the
    needed columns (and ``row_id``: the trials' columns that tell rows apart).
    ``reserved`` columns (a target) are no model input unless the model names them."""
    ds = open_model_data(data, read)
    ds, wcol = check_weight(sample_weight, ds)
    dtypes = ds.dtypes
    model_avail = model_available(model, columns, ds.columns, [wcol, *reserved])
    pred = resolve_predictor(model, model_avail, dtypes, columns=columns, response=response,
                             target_class=target_class, engine=engine)
    if need_model_columns:
        missing = [f for f in features if f not in pred.columns]
        if missing:
            raise DataError(f"feature{'s' if len(missing) > 1 else ''} {missing} not among the model's input columns "
                            f"{pred.columns}")
    categorical_features = categorical_names(categorical_features, ds)
    kinds = open_request(ds, None, list(features), read=ReadOptions(categorical=categorical_features),
                         model_free=False).kinds
    if wcol is not None and not is_numeric_like(dtypes[wcol]):
        raise DataError(f"sample_weight column {wcol!r} is not numeric (dtype {dtypes[wcol]})")
    ds.check(row_id, "parameter row_id")
    cols = list(dict.fromkeys([*pred.columns, *features, *([wcol] if wcol else []), *extra_columns, *row_id]))
    return ModelRun(ds.project(cols), pred, kinds, wcol, dtypes, ds)
