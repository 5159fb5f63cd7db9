"""Inputs -> a dask DataFrame holding only the needed columns, with clear errors.

Every public entry point accepts ``data`` as one of

* a :class:`pandas.DataFrame` (the in-memory path: it becomes a dask DataFrame of
  ``chunk_rows``-row partitions and runs through the very same kernels);
* a :class:`dask.dataframe.DataFrame`;
* a path, glob, directory (hive-partitioned or not) of parquet files, local or an
  fsspec URL (``s3://...``, ``memory://...``); ``.csv`` / ``.csv.gz`` paths are read
  with :func:`dask.dataframe.read_csv`.

Only the requested columns are read (column projection is pushed into the parquet
reader).  Feature *kinds* are decided here too: ``numeric`` (ints, floats, bools),
``datetime`` (datetimes and timedeltas, used as numbers by the stratifying tree) and
``categorical`` (object, string, category).
"""
from __future__ import annotations

import glob as _glob
import os
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from ._errors import DataError, InvalidParameterError  # their one home; re-exported here

__all__ = [
    "DataError",
    "InvalidParameterError",
    "load",
    "column_kinds",
    "check_columns",
    "FeatureEncoder",
]

#: rows per partition when a pandas DataFrame is handed in
CHUNK_ROWS = 1_000_000


def _short_list(names: Iterable, limit: int = 20) -> str:
    names = [str(n) for n in names]
    if len(names) > limit:
        return ", ".join(names[:limit]) + f", ... ({len(names)} in all)"
    return ", ".join(names)


def _is_url(path: str) -> bool:
    return "://" in path


def _is_csv(path: str) -> bool:
    p = path.lower()
    return p.endswith(".csv") or p.endswith(".csv.gz") or p.endswith(".csv.bz2")


def _check_local_path(path: str) -> None:
    if _is_url(path):
        return
    if any(ch in path for ch in "*?["):
        if not _glob.glob(path):
            raise DataError(f"data path {path!r}: the glob matches no file")
        return
    if not os.path.exists(path):
        raise DataError(f"data path {path!r} does not exist")
    if os.path.isdir(path):
        has_files = any(
            f.endswith((".parquet", ".parq", ".pq")) or not f.startswith(("_", "."))
            for _, _, files in os.walk(path)
            for f in files
        )
        if not has_files:
            raise DataError(f"data path {path!r} is a directory with no parquet files")


def _read_path(path, columns, storage_options, filters):
    import dask.dataframe as dd

    path = os.fspath(path)
    _check_local_path(path)
    try:
        if _is_csv(path):
            ddf = dd.read_csv(path, storage_options=storage_options, blocksize="64MB")
            if columns is not None:
                check_columns(ddf.columns, columns, source=path)
                ddf = ddf[list(columns)]
            return ddf
        # Read the schema first, so that a missing column is reported by name and not
        # as a pyarrow stack trace.
        ddf = dd.read_parquet(_expand_glob(path, storage_options), storage_options=storage_options,
                              filters=filters)
        if columns is not None:
            check_columns(ddf.columns, columns, source=path)
            ddf = ddf[list(columns)]
        return ddf
    except DataError:
        raise
    except (OSError, ValueError, TypeError) as exc:  # pyarrow errors subclass these
        raise DataError(f"could not read data from {path!r}: {type(exc).__name__}: {exc}") from exc


def _expand_glob(path: str, storage_options=None):
    """``path``, or the sorted files its glob matches when it uses ``?`` or ``[...]``
    (dask's parquet reader expands only ``*``); fsspec's glob syntax, local or a URL."""
    if not any(ch in path for ch in "?["):
        return path
    import fsspec

    fs, root = fsspec.core.url_to_fs(path, **(storage_options or {}))
    files = sorted(fs.glob(root))
    if not files:
        raise DataError(f"data path {path!r}: the glob matches no file")
    files = [f for f in files if not fs.isdir(f)] or files
    proto = path.split("://", 1)[0] + "://" if _is_url(path) else ""
    return [proto + f if proto and "://" not in f else f for f in files]


def check_columns(available: Sequence, wanted: Iterable, source: str = "data") -> None:
    """Raise :class:`DataError` naming every wanted column that ``available`` lacks."""
    avail = set(map(str, available))
    missing = [c for c in wanted if str(c) not in avail]
    if missing:
        raise DataError(
            f"column{'s' if len(missing) > 1 else ''} {_short_list(map(repr, missing))} "
            f"not found in {source}; available columns: {_short_list(available)}"
        )


def load(
    data,
    columns: Sequence[str] | None = None,
    *,
    storage_options: dict | None = None,
    filters=None,
    chunk_rows: int = CHUNK_ROWS,
):
    """Return a dask DataFrame of ``data`` restricted to ``columns`` (all if None)."""
    import dask.dataframe as dd

    from ._data.source import Dataset

    if isinstance(data, Dataset):  # a request's opened input: never read again
        data = data.frame
    if columns is not None:
        columns = list(dict.fromkeys(columns))  # ordered, unique
    if isinstance(data, pd.DataFrame):
        if columns is not None:
            check_columns(data.columns, columns)
            data = data[columns]
        if len(data.columns) != len(set(map(str, data.columns))):
            raise DataError("data has duplicate column names")
        nparts = max(1, int(np.ceil(len(data) / max(1, chunk_rows))))
        return dd.from_pandas(data, npartitions=nparts, sort=False)
    if isinstance(data, dd.DataFrame):
        if columns is not None:
            check_columns(data.columns, columns)
            data = data[columns]
        return data
    if isinstance(data, (str, os.PathLike)):
        return _read_path(data, columns, storage_options, filters)
    if isinstance(data, (list, tuple)) and data and all(isinstance(p, (str, os.PathLike)) for p in data):
        for p in data:
            _check_local_path(os.fspath(p))
        try:
            ddf = dd.read_parquet([os.fspath(p) for p in data], storage_options=storage_options, filters=filters)
        except (OSError, ValueError, TypeError) as exc:
            raise DataError(f"could not read parquet files {_short_list(data, 5)}: {exc}") from exc
        if columns is not None:
            check_columns(ddf.columns, columns, source="the parquet files")
            ddf = ddf[list(columns)]
        return ddf
    raise DataError(
        "data must be a pandas DataFrame, a dask DataFrame, or a path/glob/URL of parquet "
        f"(or .csv) files; got {type(data).__name__}"
    )


# column kinds and the encodings live in daskpd._data.encode
from ._data.encode import FeatureEncoder, as_float, column_kinds, kind_of  # noqa: E402
