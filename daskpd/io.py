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
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from ._errors import DataError, InvalidParameterError  # their one home; re-exported here

__all__ = [
    "DataError",
    "InvalidParameterError",
    "load",
    "read_csv",
    "CsvSource",
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


#: how a partition's arrow table becomes pandas: a block per column, instead of every
#: numeric column copied into one 2-D block per dtype (reading the lake benchmark's
#: partitions: ~20 % less CPU and far fewer page faults; benchmarks/bench_read.py).  Read
#: only: dask adds its own options to the dict it is given, so each call passes a copy.
ARROW_TO_PANDAS = MappingProxyType({"split_blocks": True})


def _read_parquet(paths, columns, storage_options, filters, label, agree=None):
    """Read parquet after checking every file's footer and reconciling the schema of the
    columns read (``agree``, else ``columns`` and the filter columns, else all columns);
    see :mod:`daskpd._data.lake`."""
    import dask.dataframe as dd

    from ._data.lake import apply_widening, inspect_lake

    check = None if agree is None else list(map(str, agree))
    if columns is not None and check is None:
        check = list(columns) + [c for group in _filter_groups(filters) for c, _, _ in group]
    lake = inspect_lake(paths, check, storage_options)
    try:
        ddf = dd.read_parquet(paths, storage_options=storage_options, filters=filters,
                              arrow_to_pandas=dict(ARROW_TO_PANDAS))
    except (OSError, ValueError, TypeError) as exc:  # pyarrow errors subclass these
        raise DataError(f"could not read parquet data from {label}: {type(exc).__name__}: {exc}") from exc
    ddf = _named(ddf, label)
    if columns is None:
        # a column missing from the first file (dask takes its schema) is named by the
        # reconciliation above; this is a second guard
        absent = [c for c in (lake.types if check is None else [c for c in check if c in lake.types])
                  if c not in set(ddf.columns)]
        if absent:
            raise DataError(f"column{'s' if len(absent) > 1 else ''} {_short_list(map(repr, absent))} of "
                            f"{label} {'is' if len(absent) == 1 else 'are'} missing from its first file")
    else:
        check_columns(ddf.columns, columns, source=label)
        ddf = ddf[list(columns)]
    return apply_widening(ddf, lake)


def _filter_groups(filters):
    if not filters:
        return []
    if isinstance(filters[0], (list, tuple)) and filters[0] and isinstance(filters[0][0], (list, tuple)):
        return [list(g) for g in filters]
    return [list(filters)]


@dataclass(frozen=True)
class CsvSource:
    """A CSV path (file, glob or URL) with the options of its reader: what
    :func:`read_csv` returns, accepted as ``data`` by every function."""

    path: str
    options: dict = field(default_factory=dict)


#: options of dask's CSV reader that daskpd sets itself
_CSV_OWN = ("storage_options",)


def read_csv(path, **options) -> CsvSource:
    """``data`` for any daskpd function: the CSV file(s) at ``path`` read with
    ``options`` passed to :func:`dask.dataframe.read_csv` (and so to pandas'
    ``read_csv``): ``dtype=``, ``usecols=``, ``sep=``, ``na_values=``, ``parse_dates=``,
    ``blocksize=`` (default 64 MB), ...  ``storage_options`` is the function's own
    parameter.  E.g. ``daskpd.importances(daskpd.read_csv("bulldozer.csv",
    dtype={"fiModelSeries": str}), "SalePrice")``."""
    bad = [k for k in options if k in _CSV_OWN]
    if bad:
        raise DataError(f"read_csv: pass {bad[0]} to the daskpd function, not to read_csv")
    return CsvSource(os.fspath(path), dict(options))


def _read_csv(path, options, columns, storage_options):
    import dask.dataframe as dd

    _check_local_path(path)
    opts = {"blocksize": "64MB", **(options or {})}
    try:
        ddf = _named(dd.read_csv(path, storage_options=storage_options, **opts), repr(path))
    except DataError:
        raise
    except (OSError, ValueError, TypeError) as exc:
        raise DataError(f"could not read data from {path!r}: {type(exc).__name__}: {exc}") from exc
    if columns is not None:
        check_columns(ddf.columns, columns, source=path)
        ddf = ddf[list(columns)]
    return ddf


def _read_path(path, columns, storage_options, filters, agree=None):
    path = os.fspath(path)
    _check_local_path(path)
    if _is_csv(path):
        return _read_csv(path, None, columns, storage_options)
    return _read_parquet(_expand_glob(path, storage_options), columns, storage_options, filters, repr(path), agree)


def column_names(columns, what: str = "data") -> list[str]:
    """The rule for column names, whatever the input: a column is named by its text
    (``str(name)``: the integer column 3 is ``'3'``, and ``'3'`` or ``3`` select it); two
    columns with the same text are an error naming them."""
    names = [str(c) for c in columns]
    if len(set(names)) != len(names):
        seen, dup = set(), []
        for c, n in zip(columns, names):
            if n in seen and n not in dup:
                dup.append(n)
            seen.add(n)
        clash = [n for n in dup if sum(1 for c in columns if str(c) == n and not isinstance(c, str)) > 0]
        why = (" (as text: a non-string name such as the integer 3 is the same column as '3')" if clash else "")
        raise DataError(f"{what} has duplicate column names: {_short_list(map(repr, dup))}{why}; every column "
                        "needs its own name (rename them)")
    return names


def _named(frame, what: str = "data"):
    """``frame`` (pandas or dask) with its columns named by :func:`column_names`."""
    cols = list(frame.columns)
    names = column_names(cols, what)
    if any(not isinstance(c, str) for c in cols):
        frame = frame.rename(columns={c: n for c, n in zip(cols, names) if not isinstance(c, str)})
    return frame


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
    agree: Sequence[str] | None = None,
):
    """Return a dask DataFrame of ``data`` restricted to ``columns`` (all if None).

    Parquet sources are checked first (:mod:`daskpd._data.lake`): every file's footer
    is read (a damaged file is a :class:`DataError` naming it) and the columns in
    ``agree`` (default: ``columns`` and the filter columns; every column when both are
    None) must be in every file with types that go together; safe widenings are cast.
    Column names are text: see :func:`column_names`.
    """
    import dask.dataframe as dd

    from ._data.source import Dataset

    if isinstance(data, Dataset):  # a request's opened input: never read again
        data = data.frame
    if columns is not None:
        columns = list(dict.fromkeys(map(str, columns)))  # ordered, unique, names as text
    if isinstance(data, pd.DataFrame):
        data = _named(data)
        if columns is not None:
            check_columns(data.columns, columns)
            data = data[columns]
        nparts = max(1, int(np.ceil(len(data) / max(1, chunk_rows))))
        return dd.from_pandas(data, npartitions=nparts, sort=False)
    if isinstance(data, dd.DataFrame):
        data = _named(data)
        if columns is not None:
            check_columns(data.columns, columns)
            data = data[columns]
        return data
    if isinstance(data, (str, os.PathLike)):
        return _read_path(data, columns, storage_options, filters, agree)
    if isinstance(data, CsvSource):
        return _read_csv(data.path, data.options, columns, storage_options)
    if isinstance(data, (list, tuple)) and data and all(isinstance(p, (str, os.PathLike)) for p in data):
        paths = [os.fspath(p) for p in data]
        for p in paths:
            _check_local_path(p)
        return _read_parquet(paths, columns, storage_options, filters, f"the parquet files {_short_list(paths, 5)}",
                             agree)
    raise DataError(
        "data must be a pandas DataFrame, a dask DataFrame, a path/glob/URL of parquet "
        f"(or .csv) files, or daskpd.read_csv(path, **options); got {type(data).__name__}"
    )


# column kinds and the encodings live in daskpd._data.encode
from ._data.encode import FeatureEncoder, as_float, column_kinds, kind_of  # noqa: E402
