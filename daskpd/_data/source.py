"""Any input -> one :class:`Dataset`: opened once, its schema known, columns projected.

A request opens its input once (:func:`open_dataset`): a parquet source is listed, every
file's footer is read (:mod:`daskpd._data.lake`) and ONE lazy
``dask.dataframe.read_parquet`` frame is made of it.  Everything the request needs to
know before computing (column names, dtypes, kinds, the hive keys) comes from that, and
the columns it reads are selected from the same frame (:meth:`Dataset.project`; dask
pushes the selection into the parquet reader, and only the columns read must agree
across the files).  A pandas DataFrame is not copied: only the projected columns become
a dask DataFrame.
"""
from __future__ import annotations

import os
from typing import Sequence

import numpy as np
import pandas as pd

from .gather import plan
from .hive import partition_keys
from .kinds import kind_of
from .lake import pandas_dtype, reconcile
from .lake_footers import footer_stamp
from .columns import check_columns
from .read import CHUNK_ROWS, lake_file_reader, lake_stamps, open_frame, project
from .tables import lake_of, open_table, table_groups, table_source

__all__ = ["Dataset", "open_dataset", "spread_chunk_rows"]


def spread_chunk_rows(n_rows: int) -> int:
    """Rows per partition for an in-memory frame, enough partitions to use every core."""
    ncores = os.cpu_count() or 1
    return int(min(1_000_000, max(25_000, -(-n_rows // (2 * ncores)))))


class Dataset:
    """One opened input: its columns, dtypes and kinds, and :meth:`project`.

    ``frame`` is the pandas DataFrame (in-memory input) or the lazy dask DataFrame of all
    columns (any other input); ``lake`` the parquet files' footers, or None; ``label``
    names the input in error messages; ``hive_keys`` are the ``key=value`` directory
    names of a parquet lake.
    """

    def __init__(self, frame, label: str = "data", *, lake=None, hive_keys: Sequence[str] = (),
                 spread: bool = False, positions: Sequence[str] | None = None):
        self.frame = frame
        self.lake = lake
        self.label = label
        self.hive_keys = [k for k in hive_keys if k in set(map(str, frame.columns))]
        self.spread = spread  # pandas input: partitions sized to use every core
        dtypes = frame.dtypes.copy()
        dtypes.index = [str(c) for c in dtypes.index]
        if lake is not None:
            # the type every file's values widen to (dask's meta is the first file's), and
            # the columns the first file lacks (they cannot be read: lake.conflicts says why)
            known = {c: pandas_dtype(t, fallback=dtypes.get(c, np.dtype(object))) if c not in lake.conflicts
                     else dtypes.get(c, np.dtype(object)) for c, t in lake.types.items()}
            dtypes = pd.Series({**known, **{c: t for c, t in dtypes.items() if c not in known}}, dtype=object)
        self.dtypes: pd.Series = dtypes
        self.columns: list[str] = list(dtypes.index)
        #: the columns an integer index names (scikit-learn's ``features=[0]``): the
        #: input's own columns, without those daskpd added (weights, a target given as values)
        self.positions: list[str] = list(self.columns if positions is None else positions)
        #: a parquet lake's ``(data, storage_options, filters)`` as opened (:meth:`file_reader`)
        self.source: tuple | None = None
        #: a Delta / Iceberg table's snapshot (:class:`daskpd._data.tables.TableSnapshot`), or None
        self.table = None
        self._files = None  # a table's (reader, files, keep)
        self._agree = None  # the lake whose files' types a restricted dataset keeps (:meth:`restrict`)

    @property
    def is_pandas(self) -> bool:
        return isinstance(self.frame, pd.DataFrame)

    def kind(self, column: str) -> str:
        """The column's kind (:func:`daskpd._data.kinds.kind_of`), from its stored type
        when the files say more than the dtype (a nested parquet column reads as object)."""
        return kind_of(self.dtypes[column], None if self.lake is None else self.lake.types.get(column))

    def type_name(self, column: str) -> str:
        """The column's type as messages name it: the files' type when known."""
        if self.lake is not None and column in self.lake.types:
            return str(self.lake.types[column])
        return str(self.dtypes[column])

    def conflict(self, column: str) -> str | None:
        """Why ``column`` cannot be read (missing from some files, types that do not go
        together), or None."""
        return None if self.lake is None else self.lake.conflicts.get(column)

    def partial(self, column: str) -> bool:
        """Whether some of the lake's files lack ``column``."""
        return self.lake is not None and column in self.lake.partial

    def read_schema(self, columns: Sequence[str]):
        """The lake's schema reconciled over ``columns`` (the widenings a projection
        casts; a DataError as :meth:`project` raises it), or None for other inputs."""
        if self.lake is None:
            return None
        return reconcile(self.lake.files, columns, self.lake.display.get)

    def file_reader(self):
        """A parquet lake read one file at a time (:func:`daskpd._data.read.lake_file_reader`:
        ``(reader, files, keep)``), or a string saying why it cannot be."""
        if self._files is not None:
            return self._files
        if self.lake is None or self.source is None:
            return "the input is not a parquet lake"
        data, storage_options, filters = self.source
        return lake_file_reader(data, self.lake, storage_options, filters)

    def file_stamps(self) -> dict:
        """A parquet lake's ``{path: (size, stamp)}`` (:func:`daskpd._data.read.lake_stamps`,
        listed now), each stamp with the checksum of the file's footer as this dataset
        read it (:func:`daskpd._data.lake_footers.footer_stamp`); a table's from its snapshot (a
        table's data files are never rewritten in place)."""
        if self.table is not None:
            return {f["path"]: (f["size"], f["stamp"]) for f in self.table.stamps()}
        if self.source is None:
            return {}
        data, storage_options, _ = self.source
        digests = {f.path: f.digest for f in self.lake.files} if self.lake is not None else {}
        return {p: (size, footer_stamp(stamp, digests.get(p, "")))
                for p, (size, stamp) in lake_stamps(data, storage_options).items()}

    def check(self, columns: Sequence[str], what: str = "") -> None:
        """:class:`~daskpd.DataError` naming every column of ``columns`` the input lacks."""
        check_columns(self.columns, columns, source=self.label + (f" ({what})" if what else ""))

    def with_column(self, name: str, values) -> "Dataset":
        """A pandas input with one more column (e.g. weights given as an array)."""
        return Dataset(self.frame.assign(**{name: values}), self.label, spread=self.spread, positions=self.positions)

    def project(self, columns: Sequence[str] | None):
        """The dask DataFrame of ``columns`` (all if None), without opening the input again."""
        chunk = spread_chunk_rows(len(self.frame)) if self.is_pandas and self.spread else CHUNK_ROWS
        return project(self.frame, self.lake, columns, label=self.label, chunk_rows=chunk, agree=self._agree)

    def restrict(self, paths, partition_bytes: int | None = None) -> "Dataset":
        """The same input restricted to the files ``paths`` (an incremental night's new
        files), read by the same reader: the same columns with the same types (a hive
        key a categorical over every value of the whole lake, a table's partition
        columns, the widenings of the whole lake).  A lake that cannot be read file by
        file (:meth:`file_reader` says why) opens ``paths`` as a lake of their own, read
        with the whole lake's widenings."""
        import dask.dataframe as dd


        want = {str(p).split("://", 1)[-1] for p in paths}
        got = self.file_reader()
        if isinstance(got, str):
            data, storage_options, filters = self.source
            ds = open_dataset([str(p) for p in paths], storage_options=storage_options, filters=filters,
                              partition_bytes=partition_bytes)
            keys = {c: self.dtypes[c] for c in self.hive_keys if c in ds.frame.columns}
            if keys:  # the keys' categories: every value of the whole lake
                ds.frame = ds.frame.astype(keys)
            ds._agree, ds.hive_keys, ds.dtypes, ds.columns = self.lake, self.hive_keys, self.dtypes, self.columns
            return ds
        reader, files, keep = got
        chosen = [f for f in files if f.path.split("://", 1)[-1] in want and (keep is None or f.path in keep)]
        groups = table_groups(chosen) if self.table is not None or not partition_bytes else \
            plan(chosen, partition_bytes)
        meta = reader.meta(list(reader.schema.names))
        frame = dd.from_map(reader, groups, meta=meta, divisions=None, label="read-new-files",
                            enforce_metadata=False) if groups else dd.from_pandas(meta, npartitions=1, sort=False)
        ds = Dataset(frame, self.label, lake=lake_of(self.lake, chosen), hive_keys=self.hive_keys)
        ds.source, ds.table, ds._files, ds._agree = self.source, self.table, (reader, chosen, None), self.lake
        ds.dtypes, ds.columns = self.dtypes, self.columns
        return ds


def open_dataset(data, *, storage_options=None, filters=None, spread: bool = False,
                 partition_bytes: int | None = None) -> Dataset:
    """Open ``data`` once (see the module docstring); a :class:`Dataset` is returned as is.
    ``partition_bytes``: small parquet files are gathered into partitions of about this
    size (:func:`daskpd._data.read.grouping`)."""
    if isinstance(data, Dataset):
        return data
    table = table_source(data, storage_options)
    if table is not None:
        frame, lake, snap, files = open_table(table, storage_options, filters)
        ds = Dataset(frame, snap.name, lake=lake, spread=spread)
        ds.table, ds._files = snap, files
        return ds
    frame, lake, label = open_frame(data, storage_options=storage_options, filters=filters,
                                    partition_bytes=partition_bytes)
    keys = partition_keys(data, storage_options) if lake is not None else []
    ds = Dataset(frame, label, lake=lake, hive_keys=keys, spread=spread)
    if lake is not None:
        ds.source = (data, storage_options, filters)
    return ds
