"""Any input -> one :class:`Dataset`: the schema read once, the needed columns projected once.

A request opens its input once (:func:`open_dataset`): a parquet path, glob, directory
or URL is opened with ONE ``dask.dataframe.read_parquet`` call (:func:`daskpd.io.load`),
which reads the schema; everything the request needs to know before computing (column
names, dtypes) comes from that, and the columns it reads are selected from the same
lazy frame (:meth:`Dataset.project`; dask pushes the selection into the parquet reader).
A pandas DataFrame is not copied: only the projected columns become a dask DataFrame.
"""
from __future__ import annotations

import os
from typing import Sequence

import pandas as pd

from ..io import CHUNK_ROWS, check_columns, load

__all__ = ["Dataset", "open_dataset", "spread_chunk_rows", "source_label"]


def spread_chunk_rows(n_rows: int) -> int:
    """Rows per partition for an in-memory frame, enough partitions to use every core."""
    ncores = os.cpu_count() or 1
    return int(min(1_000_000, max(25_000, -(-n_rows // (2 * ncores)))))


class Dataset:
    """One opened input: its columns and dtypes, and :meth:`project` to the needed columns.

    ``frame`` is the pandas DataFrame (in-memory input) or the lazy dask DataFrame of all
    columns (any other input).  ``label`` names the input in error messages.
    """

    def __init__(self, frame, label: str = "data", *, spread: bool = False):
        self.frame = frame
        self.label = label
        self.spread = spread  # pandas input: partitions sized to use every core
        dtypes = frame.dtypes.copy()
        dtypes.index = [str(c) for c in dtypes.index]
        self.dtypes: pd.Series = dtypes
        self.columns: list[str] = list(dtypes.index)

    @property
    def is_pandas(self) -> bool:
        return isinstance(self.frame, pd.DataFrame)

    def check(self, columns: Sequence[str], what: str = "") -> None:
        """:class:`~daskpd.io.DataError` naming every column of ``columns`` the input lacks."""
        check_columns(self.columns, columns, source=self.label + (f" ({what})" if what else ""))

    def with_column(self, name: str, values) -> "Dataset":
        """A pandas input with one more column (e.g. weights given as an array)."""
        return Dataset(self.frame.assign(**{name: values}), self.label, spread=self.spread)

    def project(self, columns: Sequence[str] | None):
        """The dask DataFrame of ``columns`` (all if None), without reading the input again."""
        if self.is_pandas:
            chunk = spread_chunk_rows(len(self.frame)) if self.spread else CHUNK_ROWS
            return load(self.frame, columns, chunk_rows=chunk)
        return load(self.frame, columns)


def source_label(data) -> str:
    """How error messages name an input: its path, or "data"."""
    if isinstance(data, Dataset):
        return data.label
    return repr(os.fspath(data)) if isinstance(data, (str, os.PathLike)) else "data"


def open_dataset(data, *, storage_options=None, filters=None, spread: bool = False) -> Dataset:
    """Open ``data`` once (see the module docstring); a :class:`Dataset` is returned as is."""
    if isinstance(data, Dataset):
        return data
    if isinstance(data, pd.DataFrame):
        if len(data.columns) != len(set(map(str, data.columns))):
            load(data, None)  # raises the duplicate-columns DataError
        return Dataset(data, "data", spread=spread)
    return Dataset(load(data, None, storage_options=storage_options, filters=filters), source_label(data),
                   spread=spread)
