"""Delta Lake and Apache Iceberg tables as inputs: a snapshot's data files read as a lake.

A table is named by :func:`read_delta` / :func:`read_iceberg` (or, for Delta, by the
path of a directory holding ``_delta_log/``; for Iceberg, by the path of a metadata
JSON).  :func:`snapshot` resolves it -- through ``deltalake`` (:mod:`.delta`) or
``pyiceberg`` (:mod:`.iceberg`) -- to one version of the table: its schema and its
active data files (path, size, rows, the partition values a file does not store, the
rows a deletion vector keeps).  Those files are then a parquet lake like any other:
their footers are read and checked (:mod:`daskpd._data.lake`: a damaged file is named,
the types reconciled), and :func:`open_table` reads them with the lake's reader
(:class:`daskpd._data.gather.GroupReader`), one dask partition per data file, the
columns projected and the filters pushed down (files pruned by their partition values,
row groups by their statistics, then rows).  The columns are the table's, in its
order, with its types for the partition columns; the values of the other columns are
read exactly as the same files read as plain parquet.

:func:`changes` tells an incremental run whether the commits since a kept version only
appended files (:func:`daskpd.job.incremental.plan`).
"""
from __future__ import annotations

import datetime as _dt
import os
from dataclasses import dataclass, field

import pyarrow as pa

from .._errors import DataError
from . import iceberg
from .delta import is_delta_table
from .gather import Group, GroupReader, filter_expression, ordered
from .lake import LakeSchema, reconcile
from .lake_footers import read_footers
from .columns import named
from .filters import filter_columns
from .read import ARROW_TO_PANDAS

__all__ = ["DeltaSource", "IcebergSource", "read_delta", "read_iceberg", "TableSnapshot", "table_source",
           "snapshot", "open_table", "changes", "table_groups", "files_dataset", "lake_of"]


@dataclass(frozen=True)
class DeltaSource:
    """A Delta Lake table (a directory or URL holding ``_delta_log/``) at a version:
    what :func:`read_delta` returns, accepted as ``data`` by every function."""

    path: str
    version: int | None = None
    timestamp: object = None  # an ISO 8601 string or a datetime (UTC when naive)


@dataclass(frozen=True)
class IcebergSource:
    """An Apache Iceberg table at a snapshot: what :func:`read_iceberg` returns."""

    table: str | None = None  # "namespace.table", through the catalog
    metadata: str | None = None  # or the path / URL of a metadata JSON
    catalog: str | None = None  # the catalog's name (default "default")
    properties: dict = field(default_factory=dict)  # the catalog's (and FileIO's) properties
    snapshot_id: int | None = None
    timestamp: object = None


def _check_pin(version_name: str, version, timestamp) -> None:
    if version is not None and timestamp is not None:
        raise DataError(f"give {version_name} or timestamp, not both")
    if version is not None and (isinstance(version, bool) or not isinstance(version, int) or version < 0):
        raise DataError(f"{version_name} must be an integer >= 0, got {version!r}")
    if timestamp is not None and not isinstance(timestamp, (str, _dt.datetime, _dt.date)):
        raise DataError(f"timestamp must be an ISO 8601 string or a datetime, got {timestamp!r}")


def read_delta(path, *, version: int | None = None, timestamp=None) -> DeltaSource:
    """``data`` for any daskpd function: the Delta Lake table at ``path`` (a directory
    or URL holding ``_delta_log/``; ``storage_options`` is the function's own
    parameter), at its latest version, or at ``version`` (a commit number) or
    ``timestamp`` (ISO 8601 string or datetime: the last version committed then).  A
    directory holding ``_delta_log/`` given as a plain path is read the same way, at its
    latest version.  Needs ``deltalake`` (``pip install 'daskpd[delta]'``)."""
    _check_pin("version", version, timestamp)
    return DeltaSource(os.fspath(path), version, timestamp)


def read_iceberg(table: str | None = None, *, metadata=None, catalog: str | None = None,
                 snapshot_id: int | None = None, timestamp=None, **properties) -> IcebergSource:
    """``data`` for any daskpd function: the Apache Iceberg table ``table``
    (``"namespace.table"``) of the pyiceberg catalog ``catalog`` (default
    ``"default"``; configured as pyiceberg configures it -- ``~/.pyiceberg.yaml``,
    ``PYICEBERG_CATALOG__...`` environment variables -- or by ``properties``, e.g.
    ``type="sql", uri="sqlite:///cat.db"``), or the table whose ``metadata`` JSON is given
    (a path or URL); at its current snapshot, or at ``snapshot_id`` or ``timestamp``.
    Needs ``pyiceberg`` (``pip install 'daskpd[iceberg]'``)."""
    if (table is None) == (metadata is None):
        raise DataError("read_iceberg: give the table's name (through its catalog) or the path of its metadata "
                        "JSON (metadata=...), one of the two")
    _check_pin("snapshot_id", snapshot_id, timestamp)
    return IcebergSource(table, None if metadata is None else os.fspath(metadata), catalog,
                         {k: str(v) for k, v in properties.items()}, snapshot_id, timestamp)


def table_source(data, storage_options: dict | None = None):
    """``data`` as a :class:`DeltaSource` / :class:`IcebergSource` when it names a table
    (such an object, a directory holding ``_delta_log/``, a ``*.metadata.json`` path),
    else None."""
    if isinstance(data, (DeltaSource, IcebergSource)):
        return data
    if not isinstance(data, (str, os.PathLike)):
        return None
    path = os.fspath(data)
    if path.endswith(".metadata.json"):
        return IcebergSource(metadata=path)

    return DeltaSource(path) if is_delta_table(path, storage_options) else None


@dataclass
class TableSnapshot:
    """One version of a table: ``format`` ("delta" / "iceberg"), ``name`` (how messages
    name it), ``location``, ``version`` (the Delta version / Iceberg snapshot id),
    ``schema`` (arrow, the table's columns in order), ``partition_columns`` (columns the
    data files do not store), ``files`` (``(uri, size, rows, stamp, values, keep)``),
    ``fs`` (fsspec, for the data files), ``record`` (what a manifest and a kept state
    record of it)."""

    format: str
    name: str
    location: str
    version: int
    schema: pa.Schema
    partition_columns: list
    files: list
    fs: object
    record: dict
    field_names: dict = field(default_factory=dict)  # Iceberg: field id -> column name
    extra: dict = field(default_factory=dict)  # what changes() needs (the loaded Iceberg table)
    storage_options: dict | None = None
    pruned: list | None = None  # the files the filters leave, when planning found none (an empty list)

    def path_of(self, uri: str) -> str:
        return self.fs._strip_protocol(uri)

    def stamps(self) -> list[dict]:
        """The files as a job's fingerprint lists them: ``path`` (the file's URI),
        ``rel`` (relative to the table), ``size``, ``stamp`` and ``rows``."""
        root = self.location.split("://", 1)[-1].rstrip("/") + "/"
        out = []
        for uri, size, rows, stamp, _, _ in self.files:
            bare = uri.split("://", 1)[-1]
            out.append({"path": uri, "rel": bare[len(root):] if bare.startswith(root) else bare, "size": size,
                        "stamp": stamp, "rows": rows})
        return sorted(out, key=lambda f: f["rel"])


def snapshot(source, storage_options: dict | None = None, filters=None) -> TableSnapshot:
    """Resolve ``source`` to one version of the table (see the module docstring)."""
    import fsspec

    if isinstance(source, DeltaSource):
        from . import delta

        got = delta.snapshot(source, storage_options)
        fs = fsspec.core.url_to_fs(got["location"], **got["fsspec_options"])[0]
        fmt = "delta"
    else:

        got = iceberg.snapshot(source, storage_options, filters)
        fs, fmt = got["fs"], "iceberg"
    return TableSnapshot(fmt, got["name"], got["location"], got["version"], got["schema"], got["partition_columns"],
                         got["files"], fs, got["record"], got.get("field_names") or {},
                         {"table": got["table"]} if "table" in got else {}, storage_options, got.get("pruned"))


def changes(kept: dict | None, now: TableSnapshot | None) -> str | None:
    """Why a night cannot add the files of ``now`` to a state kept at ``kept`` (a
    snapshot's ``record``, or None for a plain lake), in one line; None when the
    commits since only appended files (or there are none)."""
    if kept is None and now is None:
        return None
    if kept is None:
        return f"the kept state is of a plain parquet lake, the source is now the {now.name}"
    if now is None:
        return f"the kept state is of a {kept['format'].capitalize()} table, the source is now a plain lake"
    if kept.get("format") != now.format or kept.get("id") != now.record.get("id"):
        return f"the {now.name} is not the table of the kept state (another table id: it was replaced)"
    if now.format == "delta":
        from . import delta

        return delta.changes(kept, now.record | {"location": now.location}, now.storage_options)

    return iceberg.changes(kept, {"version": now.version, **now.extra})


def _check_names(snap: TableSnapshot, footers, display) -> None:
    """An Iceberg data file whose column (by field id) bears another name than the
    table's: the column was renamed, and reading by name would be wrong."""
    if not snap.field_names:
        return
    seen = set()
    for f in footers:
        if id(f.layout) in seen:
            continue
        seen.add(id(f.layout))
        for fld in f.schema:
            fid = (fld.metadata or {}).get(b"PARQUET:field_id")
            want = snap.field_names.get(int(fid)) if fid is not None else None
            if want is not None and want != fld.name:
                raise DataError(f"{snap.name}: data file {display(f.path)} holds column {fld.name!r} (field id "
                                f"{int(fid)}), which the table now calls {want!r}; daskpd reads columns by name and "
                                "does not follow renamed columns: rewrite the table's data files")


def table_groups(files) -> list:
    """One :class:`~daskpd._data.gather.Group` per data file (its row groups with rows)."""
    out = []
    for f in files:
        rgs = tuple(i for i, (rows, _) in enumerate(f.row_groups) if rows)
        if rgs:
            out.append(Group(((f.path, rgs, f.size),)))
    return out


def open_table(source, storage_options: dict | None = None, filters=None):
    """``(frame, lake, snapshot, (reader, files, keep))``: the table's snapshot read
    lazily (every column; see the module docstring).  ``keep``: the files the filters
    leave (None: every file)."""
    import dask
    import dask.dataframe as dd

    snap = snapshot(source, storage_options, filters)
    if not snap.files:
        raise DataError(f"the {snap.name} has no data files")
    root = snap.location.split("://", 1)[-1].rstrip("/") + "/"
    paths = {}
    listing = []
    for uri, size, _, stamp, _, _ in snap.files:
        p = snap.path_of(uri)
        paths[uri] = p
        listing.append((p, size, stamp))

    def display(p: str) -> str:
        bare = p.split("://", 1)[-1]
        return bare[len(root):] if bare.startswith(root) else p

    footers = read_footers(snap.fs, listing, display)
    _check_names(snap, footers, display)
    parts = list(snap.partition_columns)
    stored = [c for c in filter_columns(filters) if c not in parts]
    lake = reconcile(footers, stored, display, survey=True)
    columns = [c for c in snap.schema.names if c in lake.types or c in parts]
    lake.types = {c: (snap.schema.field(c).type if c in parts else lake.types[c]) for c in columns}
    lake.conflicts = {c: v for c, v in lake.conflicts.items() if c in lake.types}
    lake.display = {f.path: display(f.path) for f in footers}
    fields = [pa.field(c, t) for c, t in lake.types.items()]
    missing = [c for c in filter_columns(filters) if c not in lake.types]
    if missing:
        raise DataError(f"filters: column {missing[0]!r} not found in the {snap.name}; its columns: "
                        f"{', '.join(lake.types)}")
    schema = pa.schema(fields, metadata=footers[0].schema.metadata)
    constants = {paths[uri]: values for uri, _, _, _, values, _ in snap.files if values}
    masks = {paths[uri]: keep for uri, _, _, _, _, keep in snap.files if keep is not None}
    convert = dask.config.get("dataframe.convert-string")
    reader = GroupReader(snap.fs, schema, {}, filters, ARROW_TO_PANDAS, True if convert is None else bool(convert),
                         constants=constants, masks=masks)
    files = ordered(lake)
    keep = _pruned(reader, files, filters) if snap.pruned is None else set(snap.pruned)
    groups = table_groups([f for f in files if keep is None or f.path in keep])
    meta = reader.meta(list(schema.names))
    if groups:
        frame = dd.from_map(reader, groups, meta=meta, divisions=None, label=f"read-{snap.format}",
                            enforce_metadata=False)
    else:
        frame = dd.from_pandas(meta, npartitions=1, sort=False)
    return named(frame, snap.name), lake, snap, (reader, files, keep)


def files_dataset(reader: GroupReader, files):
    """The :mod:`pyarrow.dataset` of a table's data files, each with the partition
    values it does not store (its partition expression), in the reader's schema."""
    import pyarrow.dataset as pds

    fmt = pds.ParquetFileFormat()
    fs = reader.arrow_fs()
    frags = [fmt.make_fragment(f.path, filesystem=fs, partition_expression=reader.partition_expression(f.path))
             for f in files]
    return pds.FileSystemDataset(frags, reader.schema, fmt, fs)


def _pruned(reader: GroupReader, files, filters):
    """The files whose partition values the filters leave (None: every file)."""
    if not filters or not reader.constants:
        return None

    dset = files_dataset(reader, files)
    return {frag.path for frag in dset.get_fragments(filter=filter_expression(filters))}


def lake_of(lake: LakeSchema, files) -> LakeSchema:
    """``lake`` restricted to ``files`` (its types and widenings kept)."""
    return LakeSchema(files=list(files), types=lake.types, widened=lake.widened, display=lake.display,
                      conflicts=lake.conflicts, partial=lake.partial)
