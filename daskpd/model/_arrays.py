"""scikit-learn's ``X``: numpy and dask arrays, integer column indices, ``feature_names``.

scikit-learn's inspection functions take ``X`` as an array or a DataFrame and name the
features by column index or by name.  Every model-based function of daskpd takes the
same, through :func:`open_model_input`, the request's one opening of its input:

* a 2-D numpy array becomes a pandas DataFrame, a 2-D dask array a dask DataFrame (one
  partition per block of rows), their columns named by ``feature_names``, else by the
  model's ``feature_names_in_`` (when it has as many), else scikit-learn's ``x0, x1,
  ...`` (``sklearn.inspection._pd_utils._check_feature_names``).  The frame is then
  exactly the DataFrame a user could have passed: the results are the same numbers;
* a target or weights given as values (``target=y`` of :func:`daskpd.marginal` and
  :func:`daskpd.compare`, ``sample_weight=w`` for a dask array) become columns of that
  frame, row for row;
* :func:`resolve_columns` turns integer indices into the names of those columns, at any
  depth of ``features`` (an index, a pair of indices, a list of them), in
  ``categorical_features`` (also a boolean mask, as scikit-learn's) and in the keys of
  ``grid``.  An index counts the input's own columns, never one daskpd added.
"""
from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral

import numpy as np
import pandas as pd

from .._data.options import AUTO, ReadOptions
from .._data.source import Dataset
from .._errors import InvalidParameterError
from .._constraints import Constraint

__all__ = ["ModelInput", "open_model_input", "open_model_data", "model_read", "resolve_columns", "categorical_names", "grid_names",
           "ColumnOrIndex", "ColumnOrValues", "is_array", "WEIGHT_COLUMN"]

#: the column an array of weights becomes
WEIGHT_COLUMN = "__daskpd_weight__"

#: the name a target given as values takes (unless it is a named Series), as scikit-learn's ``y``
TARGET_COLUMN = "y"


def model_read(storage_options=None, filters=None) -> ReadOptions:
    """How a model-based request reads its input: the public ``storage_options`` and
    ``filters``; pandas input cut into partitions to use every core; small parquet files
    gathered into partitions of the configured size."""
    return ReadOptions(storage_options=storage_options, filters=filters, spread=True, partition_bytes=AUTO)


def open_model_data(data, read: ReadOptions | None = None) -> Dataset:
    """The request's one opening of a table ``data`` (``read``: default :func:`model_read`)."""
    return (model_read() if read is None else read).open(data)


class ColumnOrIndex(Constraint):
    """A column name, or a column's (0-based) index, as scikit-learn's ``features=0``."""

    def is_satisfied_by(self, value) -> bool:
        return (isinstance(value, str) and value != "") or _is_index(value)

    def __str__(self):
        return "a column name (str) or a column index (int)"


class ColumnOrValues(Constraint):
    """A column name, or one value per row (1-D array or Series, for in-memory data)."""

    def is_satisfied_by(self, value) -> bool:
        if isinstance(value, str):
            return value != ""
        return is_array(value) or isinstance(value, (pd.Series, list))

    def __str__(self):
        return "a column name (str) or an array of one value per row"


def _is_index(value) -> bool:
    return isinstance(value, Integral) and not isinstance(value, (bool, np.bool_))


def is_array(value) -> bool:
    """A numpy or dask array (not a DataFrame)."""
    if isinstance(value, np.ndarray):
        return True
    return type(value).__module__.startswith("dask.array") and hasattr(value, "chunks")


@dataclass
class ModelInput:
    """The opened input: ``dataset`` (its ``positions`` are the columns an index names),
    and the ``target`` and ``sample_weight`` as columns when they were given as values."""

    dataset: Dataset
    target: str | None = None
    sample_weight: object = None


def _names(feature_names, model, n: int, caller: str) -> list[str]:
    if feature_names is not None:
        names = [str(c) for c in (feature_names.tolist() if hasattr(feature_names, "tolist") else feature_names)]
        if len(names) != n:
            raise InvalidParameterError(f"{caller}parameter feature_names has {len(names)} names but data has "
                                        f"{n} columns")
        if len(set(names)) != n:
            dup = sorted({c for c in names if names.count(c) > 1})
            raise InvalidParameterError(f"{caller}parameter feature_names repeats {dup}")
        return names
    own = getattr(model, "feature_names_in_", None) if model is not None else None
    if own is not None and len(own) == n:
        return [str(c) for c in own]
    return [f"x{i}" for i in range(n)]


def _values_name(values, taken, default: str) -> str:
    name = values.name if isinstance(values, pd.Series) else None  # (a dask array's name is its key)
    name = name if isinstance(name, str) and name and name not in taken else default
    if name in taken:
        raise InvalidParameterError(f"data already has a column {name!r}; pass target= as the name of a column of "
                                    "data, or rename that column")
    return name


def _vector(values, n, param: str, caller: str, index=None) -> np.ndarray | pd.Series:
    """One value per row: a 1-D numpy array (or, aligned on ``index``, a Series)."""
    if isinstance(values, pd.Series):
        if index is not None and not values.index.equals(index):
            raise InvalidParameterError(f"{caller}parameter {param}: the Series' index differs from data's; pass "
                                        f"values in data's row order (e.g. {param}.to_numpy()) or align them first")
        values = values.to_numpy()
    v = np.asarray(values)
    if v.ndim != 1 or len(v) != n:
        raise InvalidParameterError(f"{caller}parameter {param}: values must be one per row of data ({n:,}); got "
                                    f"shape {v.shape}")
    return v


def _dask_vector(values, X, param: str, caller: str):
    """A 1-D dask array with the row blocks of ``X`` (a numpy vector is cut the same way)."""
    import dask.array as da

    if isinstance(values, pd.Series):
        values = values.to_numpy()
    if isinstance(values, (np.ndarray, list)):
        v = np.asarray(values)
        if v.ndim != 1 or (not np.isnan(X.shape[0]) and len(v) != X.shape[0]):
            raise InvalidParameterError(f"{caller}parameter {param}: values must be one per row of data; got shape "
                                        f"{v.shape}")
        return da.from_array(v, chunks=(X.chunks[0],))
    if not is_array(values) or values.ndim != 1:
        raise InvalidParameterError(f"{caller}parameter {param}: with a dask array as data, give a 1-D dask or "
                                    f"numpy array of one value per row; got {type(values).__name__}")
    if any(np.isnan(c) for c in X.chunks[0]) or any(np.isnan(c) for c in values.chunks[0]):
        raise InvalidParameterError(f"{caller}parameter {param}: the row blocks of data or {param} have unknown "
                                    "sizes; call compute_chunk_sizes() on both first")
    if values.shape[0] != X.shape[0]:
        raise InvalidParameterError(f"{caller}parameter {param}: {values.shape[0]:,} values for {X.shape[0]:,} rows")
    return values.rechunk((X.chunks[0],))


def _from_numpy(X, names, extra: dict) -> pd.DataFrame:
    frame = pd.DataFrame(X, columns=names)
    if X.dtype == object:
        frame = frame.infer_objects()  # numbers stored in an object array are numbers
    return frame.assign(**extra) if extra else frame


def _from_dask(X, names, extra: dict):
    import dask.dataframe as dd

    frame = dd.from_dask_array(X.rechunk({1: -1}), columns=names)
    for name, v in extra.items():  # the same row blocks: the same divisions, so they line up
        frame = frame.assign(**{name: dd.from_dask_array(v)})
    return frame


def open_model_input(data, *, read: ReadOptions | None = None, feature_names=None, model=None, target=None,
                     sample_weight=None, caller: str = "") -> ModelInput:
    """Open ``data`` once (see the module docstring) as ``read`` says (default
    :func:`model_read`); ``caller`` prefixes messages."""
    where = f"{caller}: " if caller else ""
    target_values = target is not None and not isinstance(target, str)
    weight_values = sample_weight is not None and not isinstance(sample_weight, str)
    if is_array(data):
        if data.ndim != 2:
            raise InvalidParameterError(f"{where}parameter data: an array must be 2-D (rows x features), as "
                                        f"scikit-learn's X; got shape {data.shape}")
        names = _names(feature_names, model, data.shape[1], where)
        extra = {}
        dask = not isinstance(data, np.ndarray)
        if target_values:
            target_name = _values_name(target, names, TARGET_COLUMN)
            extra[target_name] = (_dask_vector(target, data, "target", where) if dask
                                  else _vector(target, data.shape[0], "target", where))
            target = target_name
        if weight_values and dask:
            extra[WEIGHT_COLUMN] = _dask_vector(sample_weight, data, "sample_weight", where)
            sample_weight = WEIGHT_COLUMN
        frame = _from_dask(data, names, extra) if dask else _from_numpy(data, names, extra)
        label = f"data (a {'dask' if dask else 'numpy'} array)"
        return ModelInput(Dataset(frame, label, spread=not dask, positions=names), target, sample_weight)
    ds = open_model_data(data, read)
    if feature_names is not None:
        given = [str(c) for c in (feature_names.tolist() if hasattr(feature_names, "tolist") else feature_names)]
        if given != ds.positions:
            raise InvalidParameterError(f"{where}parameter feature_names names the columns of an array; data has its "
                                        f"own column names {ds.positions[:10]}{' ...' if len(ds.positions) > 10 else ''}"
                                        f" (omit feature_names, or pass them in data's order)")
    if target_values:
        if not ds.is_pandas:
            raise InvalidParameterError(
                f"{where}parameter target: values can be given only with in-memory data (a numpy array or a pandas "
                "DataFrame); for a dask DataFrame or parquet, name a column of data")
        name = _values_name(target, ds.columns, TARGET_COLUMN)
        y = _vector(target, len(ds.frame), "target", where, index=ds.frame.index)
        ds = ds.with_column(name, y)
        target = name
    return ModelInput(ds, target, sample_weight)


def _name(value, ds: Dataset, param: str) -> str:
    names = ds.positions
    if 0 <= int(value) < len(names):
        return names[int(value)]
    raise InvalidParameterError(f"parameter {param}: column index {int(value)} is out of range: data has "
                                f"{len(names)} columns (indices 0 to {len(names) - 1})")


def resolve_columns(value, ds: Dataset, param: str = "features"):
    """``value`` with every integer index replaced by its column's name, at any depth
    (lists, tuples, 1-D arrays of them); anything else is left for the caller's checks."""
    if _is_index(value):
        return _name(value, ds, param)
    if isinstance(value, tuple):
        return tuple(resolve_columns(v, ds, param) for v in value)
    if isinstance(value, list):
        return [resolve_columns(v, ds, param) for v in value]
    if isinstance(value, np.ndarray) and value.ndim == 1 and value.dtype.kind in "iuUO":
        return [resolve_columns(v, ds, param) for v in value.tolist()]
    return value


def categorical_names(value, ds: Dataset) -> list[str] | None:
    """``categorical_features`` as column names: names, indices, or a boolean mask with one
    entry per column of data (scikit-learn's three forms)."""
    if value is None:
        return None
    if isinstance(value, (str, Integral)):
        value = [value]
    seq = value.tolist() if hasattr(value, "tolist") else list(value) if isinstance(value, (list, tuple)) else None
    if seq is None:
        raise InvalidParameterError("parameter categorical_features must be a list of column names or indices, or "
                                    f"a boolean mask; got {type(value).__name__}")
    if seq and all(isinstance(v, (bool, np.bool_)) for v in seq):
        if len(seq) != len(ds.positions):
            raise InvalidParameterError(f"parameter categorical_features: a boolean mask needs one entry per column "
                                        f"of data ({len(ds.positions)}); got {len(seq)}")
        return [c for c, m in zip(ds.positions, seq) if m]
    out = []
    for v in seq:
        if isinstance(v, str) and v:
            out.append(v)
        elif _is_index(v):
            out.append(_name(v, ds, "categorical_features"))
        else:
            raise InvalidParameterError(f"parameter categorical_features: each entry must be a column name or "
                                        f"index; got {v!r}")
    ds.check(out, "categorical_features")
    return out


def grid_names(grid, ds: Dataset):
    """``grid``'s keys as column names (an index key names a column, as scikit-learn's
    ``custom_values``); an array (one feature's grid) is left as it is."""
    if not isinstance(grid, dict):
        return grid
    out = {}
    for k, v in grid.items():
        name = _name(k, ds, "grid") if _is_index(k) else k
        if name in out:
            raise InvalidParameterError(f"parameter grid gives column {name!r} twice (by name and by index)")
        out[name] = v
    return out
