"""How a request reads its input: :class:`ReadOptions`.

The public functions keep their keyword parameters (``storage_options``, ``filters``,
``categorical_features``, ``numeric_features``, ``keep_suspect``, ...; a job its keys),
validate them and build these once; :func:`daskpd._data.request.open_request` and the
model-based opening (:func:`daskpd.model._arrays.open_model_input`) read them by
attribute, and :meth:`ReadOptions.open` opens the input
(:func:`daskpd._data.source.open_dataset`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from .._engine.memory import partition_bytes as configured_partition_bytes
from .source import Dataset, open_dataset

__all__ = ["ReadOptions", "AUTO"]

#: :attr:`ReadOptions.partition_bytes`: the configured size (``daskpd.partition-bytes``),
#: looked up when the input is opened
AUTO = "auto"


@dataclass(frozen=True)
class ReadOptions:
    """How an input is opened and which of its columns a request may use, as the public
    parameters (or a job's keys) give them (validated there).  The sequences are kept as
    given: :func:`daskpd._data.request.open_request` checks them against the input."""

    #: fsspec options of a path input (``storage_options``)
    storage_options: Mapping | None = field(default=None, hash=False)
    #: row filters, pushed into the parquet reader (row-wise on CSV; ``filters``)
    filters: object = field(default=None, hash=False)
    #: small parquet files are gathered into partitions of about this many bytes (None:
    #: never; :data:`AUTO`: the configured size, looked up when the input is opened)
    partition_bytes: int | str | None = None
    #: a pandas frame is cut into enough partitions for every core
    spread: bool = False
    #: the only columns the request may use (None: all; a job's ``source.columns``)
    columns: object = field(default=None, hash=False)
    #: columns left out of the default feature and stratifying sets
    exclude: object = field(default=(), hash=False)
    #: columns declared categorical (the public ``categorical_features``)
    categorical: object = field(default=None, hash=False)
    #: columns declared numeric, read as float64 (the public ``numeric_features``)
    numeric: object = field(default=None, hash=False)
    #: columns that tell rows apart for the bootstrap trials (read by the scan only, never
    #: a default feature or stratifying column)
    row_id: object = field(default=None, hash=False)
    #: suspect columns stay in the default sets (with their warnings)
    keep_suspect: bool = False
    #: how messages name the parameters ({"categorical": "key 'categorical'", ...}; the
    #: defaults are the public parameters' names)
    names: Mapping | None = field(default=None, hash=False)

    def open(self, data) -> Dataset:
        """``data`` opened once with these options (a :class:`Dataset` is returned as is)."""
        return open_dataset(data, storage_options=self.storage_options, filters=self.filters, spread=self.spread,
                            partition_bytes=self.resolved_partition_bytes())

    def resolved_partition_bytes(self) -> int | None:
        """:attr:`partition_bytes`, :data:`AUTO` looked up in the configuration."""
        return configured_partition_bytes() if self.partition_bytes == AUTO else self.partition_bytes
