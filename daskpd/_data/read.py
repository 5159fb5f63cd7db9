"""Any input -> a dask DataFrame of the needed columns, with clear errors.

Inputs: a :class:`pandas.DataFrame` (becomes a dask DataFrame of ``chunk_rows``-row
partitions and runs through the same kernels), a :class:`dask.dataframe.DataFrame`, a
path, glob, directory (hive-partitioned or not) or fsspec URL of parquet files, a list
of parquet paths, a ``.csv`` path, or :func:`read_csv`'s :class:`CsvSource` (CSV with
reader options).  Only the requested columns are read (the projection is pushed into
the parquet reader); parquet files are checked first (:mod:`daskpd._data.lake`).
Filters apply to every source: pushed into the parquet reader, applied row-wise to CSV
(:mod:`daskpd._data.filters`); columns are named by their text (:mod:`daskpd._data.columns`).
"""
from __future__ import annotations

import glob as _glob
import os
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Sequence

import numpy as np
import pandas as pd

from .._errors import DataError
from .columns import check_columns, named, short_list
from .filters import apply_filters, filter_columns
from .gather import file_reader, read_gathered, usable
from .lake import apply_widening, inspect_lake, reconcile
from .lake_footers import list_parquet_files

__all__ = ["CHUNK_ROWS", "CsvSource", "read_csv", "load", "open_frame", "project", "ARROW_TO_PANDAS",
           "PartitionOptions", "lake_file_reader", "lake_stamps"]

#: rows per partition when a pandas DataFrame is handed in
CHUNK_ROWS = 1_000_000


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
#: numeric column copied into one 2-D block per dtype (~20 % less read CPU and far fewer
#: page faults on the lake benchmark's partitions).
ARROW_TO_PANDAS = MappingProxyType({"split_blocks": True})


class PartitionOptions(dict):
    """The ``arrow_to_pandas`` options of one ``read_parquet`` call, safe to share.

    dask hands the one dict it is given to every partition of the read; each partition
    stores its types mapper in it, and the next partition takes the stored one as the
    user's own mapper and wraps it again.  Every partition read in a process was one
    call deeper than the last (a ``RecursionError`` after about a thousand files).
    These options never offer a stored mapper back, so each partition builds the same
    flat one; they pickle and tokenize as the options alone.
    """

    _OWN = "types_mapper"

    def get(self, key, default=None):
        return default if key == self._OWN else super().get(key, default)

    def options(self) -> dict:
        return {k: v for k, v in self.items() if k != self._OWN}

    def __reduce__(self):
        return (type(self), (self.options(),))

    def __dask_tokenize__(self):
        return ("daskpd-arrow-to-pandas", sorted(self.options().items()))


#: fewer files than this are a partition each, whatever their size (the tasks' overhead
#: matters only for many files)
GATHER_MIN_FILES = 64


def grouping(lake, partition_bytes: int | None) -> dict:
    """``read_parquet`` options that gather small files into partitions of about
    ``partition_bytes`` (uncompressed, as the footers count them): dask's
    ``aggregate_files`` with adaptive row-group splitting.  ``{}`` (one partition per
    file, dask's default) for fewer than :data:`GATHER_MIN_FILES` files, files that hold
    at least a quarter of ``partition_bytes`` on average, or files whose schemas differ
    (dask would join their tables before daskpd widens their types)."""
    files = lake.files
    if not partition_bytes or len(files) < GATHER_MIN_FILES:
        return {}
    first = files[0].layout
    if any(f.layout is not first for f in files):  # one layout: the same columns and types
        return {}
    mean = sum(f.data_bytes for f in files) / len(files)
    if mean * 4 > partition_bytes:
        return {}
    return {"aggregate_files": True, "split_row_groups": "adaptive", "blocksize": int(partition_bytes)}


def _open_parquet(paths, storage_options, filters, label, partition_bytes=None):
    """(the lazy frame of every column, the lake's footers).  Every file's footer is read
    first (a damaged file is named); the filter columns must agree across the files now,
    the other columns when a projection reads them (:func:`project`).  Small files are
    gathered into partitions (:func:`grouping`) planned from those footers
    (:mod:`daskpd._data.gather`); other lakes are read by ``dask.dataframe.read_parquet``."""
    import dask.dataframe as dd

    lake = inspect_lake(paths, filter_columns(filters), storage_options, survey=True)
    gather = grouping(lake, partition_bytes)
    hive = not stored_keys(lake)
    options = {**gather, **({} if hive else {"dataset": {"partitioning": None}}), **_categories(lake)}
    try:
        ddf = None
        if gather:
            import fsspec

            first = paths if isinstance(paths, str) else paths[0]
            fs, _ = fsspec.core.url_to_fs(first, **(storage_options or {}))
            if usable(lake, paths, fs):
                ddf = read_gathered(lake, paths, fs, filters, gather["blocksize"], ARROW_TO_PANDAS, hive=hive,
                                    categories="categories" not in options)
        if ddf is None:
            ddf = dd.read_parquet(paths, storage_options=storage_options, filters=filters,
                                  arrow_to_pandas=PartitionOptions(ARROW_TO_PANDAS), **options)
    except (OSError, ValueError, TypeError) as exc:  # pyarrow errors subclass these
        raise DataError(f"could not read parquet data from {label}: {type(exc).__name__}: {exc}") from exc
    return named(ddf, label), lake


def lake_file_reader(data, lake, storage_options=None, filters=None):
    """``(reader, files, keep)`` reading the lake's files one by one into the frames the
    lake's partitions hold (:func:`daskpd._data.gather.file_reader`: the gathered reader,
    which makes what ``dask.dataframe.read_parquet`` makes), or a string saying why the
    lake cannot be read so: files of more than one schema, files dask reads otherwise
    (:func:`daskpd._data.gather.usable`), a filter the reader leaves to dask."""
    import fsspec

    paths = [os.fspath(p) for p in data] if isinstance(data, (list, tuple)) else \
        _expand_glob(os.fspath(data), storage_options)
    first = paths if isinstance(paths, str) else paths[0]
    fs, _ = fsspec.core.url_to_fs(first, **(storage_options or {}))
    layout = lake.files[0].layout
    if any(f.layout is not layout for f in lake.files):
        return "the files have more than one schema"
    if not usable(lake, paths, fs):
        return "the lake holds a _metadata file, a stored pandas index or files without a parquet extension"
    options = _categories(lake)
    got = file_reader(lake, paths, fs, filters, ARROW_TO_PANDAS, hive=not stored_keys(lake),
                      categories="categories" not in options)
    return got if got is not None else "a filter names a column the files lack, or hive keys are stored in the files"


def lake_stamps(data, storage_options=None) -> dict:
    """``{path: (size, stamp)}`` of a parquet source's files as the lake reader lists them
    (the stamp: the modification time, or the ETag / checksum the store reports)."""
    paths = [os.fspath(p) for p in data] if isinstance(data, (list, tuple)) else [os.fspath(data)]
    out = {}
    for p in paths:
        _, files = list_parquet_files(p, storage_options)
        out.update({name: (size, stamp) for name, size, stamp in files})
    return out


def stored_keys(lake) -> list[str]:
    """The hive keys of the lake's directories (``key=value``) when the files store
    them as columns too (polars' hive writer does): the files' column is read, and the
    directories are not parsed (their values are the same; parsing them too makes
    the key two columns of different types).  ``[]`` when no key is stored."""
    path = lake.files[0].path.replace("\\", "/")
    keys = [seg.split("=", 1)[0] for seg in path.split("/")[:-1] if "=" in seg and not seg.startswith("=")]
    if keys and all(k in lake.types for k in keys):
        return keys
    return []


def _categories(lake) -> dict:
    """dask reads the columns a file's pandas metadata calls categorical as categoricals,
    and fails ("Not all columns are categoricals") when a writer stored such a column as
    plain strings (fastparquet does): then every column is read as it is stored."""
    schema = lake.files[0].schema
    try:
        meta = schema.pandas_metadata or {}
    except (ValueError, TypeError):  # pragma: no cover - unreadable pandas metadata
        return {}
    cats = [c.get("name") for c in meta.get("columns", []) if c.get("pandas_type") == "categorical"]
    import pyarrow as pa

    if any(n in schema.names and not pa.types.is_dictionary(schema.field(n).type) for n in cats):
        return {"categories": []}
    return {}


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


def _open_csv(path, options, storage_options, filters):
    import dask.dataframe as dd

    _check_local_path(path)
    opts = {"blocksize": "64MB", **(options or {})}
    try:
        ddf = named(dd.read_csv(path, storage_options=storage_options, **opts), repr(path))
    except DataError:
        raise
    except (OSError, ValueError, TypeError) as exc:
        raise DataError(f"could not read data from {path!r}: {type(exc).__name__}: {exc}") from exc
    return apply_filters(ddf, filters, repr(path))


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


def open_frame(data, *, storage_options: dict | None = None, filters=None, partition_bytes: int | None = None):
    """``(frame, lake, label)``: ``data`` opened once, every column lazily.

    ``frame`` is the pandas DataFrame itself (not copied) or a lazy dask DataFrame;
    ``lake`` the parquet files' footers (:class:`daskpd._data.lake.LakeSchema`) or None;
    ``label`` how messages name the input.  Column names are text
    (:func:`column_names`).  Filters apply to every source but an in-memory frame.
    ``partition_bytes``: small parquet files are gathered into partitions of about this
    size (:func:`grouping`; None: a partition per file).
    """
    import dask.dataframe as dd

    if isinstance(data, pd.DataFrame):
        return named(data), None, "data"
    if isinstance(data, dd.DataFrame):
        return named(data), None, "data"
    if isinstance(data, (str, os.PathLike)):
        path = os.fspath(data)
        _check_local_path(path)
        if _is_csv(path):
            return _open_csv(path, None, storage_options, filters), None, repr(path)
        ddf, lake = _open_parquet(_expand_glob(path, storage_options), storage_options, filters, repr(path),
                                  partition_bytes)
        return ddf, lake, repr(path)
    if isinstance(data, CsvSource):
        return _open_csv(data.path, data.options, storage_options, filters), None, repr(data.path)
    if isinstance(data, (list, tuple)) and data and all(isinstance(p, (str, os.PathLike)) for p in data):
        paths = [os.fspath(p) for p in data]
        for p in paths:
            _check_local_path(p)
        label = f"the parquet files {short_list(paths, 5)}"
        ddf, lake = _open_parquet(paths, storage_options, filters, label, partition_bytes)
        return ddf, lake, label
    raise DataError(
        "data must be a pandas DataFrame, a dask DataFrame, a path/glob/URL of parquet "
        f"(or .csv) files, or daskpd.read_csv(path, **options); got {type(data).__name__}"
    )


def project(frame, lake, columns: Sequence[str] | None, *, label: str = "data", chunk_rows: int = CHUNK_ROWS,
            agree=None):
    """The dask DataFrame of ``columns`` (all when None) of an opened input.

    A pandas frame becomes ``chunk_rows``-row partitions.  For parquet, the columns read
    must be in every file with types that go together (a DataError names the column and
    the files otherwise) and safe widenings are cast (:mod:`daskpd._data.lake`); dask
    pushes the selection into the reader, so other columns are never read.  ``agree``:
    the files whose types are reconciled (default: ``lake``'s; some of a lake's files
    are read with the types of the whole lake).
    """
    import dask.dataframe as dd

    if columns is not None:
        columns = list(dict.fromkeys(map(str, columns)))  # ordered, unique, names as text
    if lake is not None:
        if columns is None:  # every column of every file, and the hive keys
            columns = list(dict.fromkeys([*lake.types, *map(str, frame.columns)]))
        agreed = reconcile((agree or lake).files, columns, lake.display.get)
        check_columns(frame.columns, columns, source=label)
        frame = frame[columns]
        return apply_widening(frame, agreed)
    if columns is not None:
        check_columns(frame.columns, columns, source=label)
        frame = frame[columns]
    if isinstance(frame, pd.DataFrame):
        nparts = max(1, int(np.ceil(len(frame) / max(1, chunk_rows))))
        return dd.from_pandas(frame, npartitions=nparts, sort=False)
    return frame


def load(data, columns: Sequence[str] | None = None, *, storage_options: dict | None = None, filters=None,
         chunk_rows: int = CHUNK_ROWS, partition_bytes: int | None = None):
    """:func:`open_frame` then :func:`project`: a dask DataFrame of ``columns`` of
    ``data`` (all when None)."""
    frame, lake, label = open_frame(data, storage_options=storage_options, filters=filters,
                                    partition_bytes=partition_bytes)
    return project(frame, lake, columns, label=label, chunk_rows=chunk_rows)
