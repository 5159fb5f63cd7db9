"""An Apache Iceberg table's snapshot, through ``pyiceberg``.

The table is named through its catalog (``"ns.table"``; the catalog configured as
pyiceberg configures it: ``~/.pyiceberg.yaml``, ``PYICEBERG_CATALOG__<NAME>__<KEY>``
environment variables, or explicit properties) or given as the path / URL of one of its
metadata JSON files.  :func:`snapshot` resolves the snapshot (the current one, or one
pinned by id or timestamp) to its data files through pyiceberg's scan planning (files
pruned by the filters' partition values and column statistics); :func:`changes` walks
the snapshots since a kept one and says in one line why they are not appends only.
Reading the files is :mod:`daskpd._data.tables`' part.

Position delete files (of merge-on-read deletes, updates and merges) are applied: the
rows they name are dropped when a data file is read.  Equality deletes and deletion
vectors are refused with an error naming the table and a file they apply to; so are
data files that are not parquet.
"""
from __future__ import annotations

import datetime as _dt

import numpy as np

from .._errors import DataError
from .filters import filter_groups

__all__ = ["iceberg_properties", "snapshot", "changes", "field_names"]

#: keys of s3fs's ``storage_options`` -> pyiceberg's FileIO properties
_S3_KEYS = {"key": "s3.access-key-id", "secret": "s3.secret-access-key", "token": "s3.session-token",
            "endpoint_url": "s3.endpoint", "region_name": "s3.region"}


def iceberg_properties(storage_options: dict | None) -> dict:
    """pyiceberg FileIO properties from fsspec's ``storage_options`` (s3fs' keys)."""
    so = dict(storage_options or {})
    flat = {**so, **(so.get("client_kwargs") or {})}
    return {_S3_KEYS[k]: str(v) for k, v in flat.items() if k in _S3_KEYS and v is not None}


def _name(source) -> str:
    return f"Iceberg table {source.table!r}" if source.table else f"Iceberg table {source.metadata!r}"


def _load(source, storage_options):
    try:
        from pyiceberg.catalog import load_catalog
        from pyiceberg.table import StaticTable
    except ImportError:
        raise DataError(f"reading the {_name(source)} needs pyiceberg: pip install 'daskpd[iceberg]'") from None
    props = {**iceberg_properties(storage_options), **(source.properties or {})}
    try:
        if source.table:
            catalog = load_catalog(source.catalog or "default", **props)
            return catalog.load_table(source.table)
        return StaticTable.from_metadata(source.metadata, properties=props)
    except Exception as exc:  # pyiceberg's NoSuchTableError, catalog configuration errors, a missing file ...
        where = f" (catalog {source.catalog or 'default'!r})" if source.table else ""
        raise DataError(f"the {_name(source)}{where} cannot be loaded: {type(exc).__name__}: "
                        f"{' '.join(str(exc).split())}") from None


def _pick(table, source, name: str):
    if source.snapshot_id is not None:
        snap = table.snapshot_by_id(int(source.snapshot_id))
        if snap is None:
            known = ", ".join(str(s.snapshot_id) for s in table.snapshots()[-5:]) or "none"
            raise DataError(f"{name} has no snapshot {source.snapshot_id} (its latest: {known})")
        return snap
    if source.timestamp is not None:
        ts = source.timestamp
        if isinstance(ts, str):
            ts = _dt.datetime.fromisoformat(ts.replace("Z", "+00:00"))
        if isinstance(ts, _dt.datetime):
            if ts.tzinfo is None:
                ts = ts.replace(tzinfo=_dt.timezone.utc)
            ts = int(ts.timestamp() * 1000)
        snap = table.snapshot_as_of_timestamp(int(ts))
        if snap is None:
            raise DataError(f"{name} has no snapshot as of {source.timestamp} (its first is later)")
        return snap
    snap = table.current_snapshot()
    if snap is None:
        raise DataError(f"{name} has no snapshot: no data was ever written to it")
    return snap


def _expression(filters):
    """DNF ``filters`` as a pyiceberg expression for planning (file pruning): ``!=``,
    ``not in`` and comparisons with a missing value keep every file (the rows are
    filtered when read)."""
    from pyiceberg import expressions as ex

    ops = {"==": ex.EqualTo, "<": ex.LessThan, "<=": ex.LessThanOrEqual, ">": ex.GreaterThan,
           ">=": ex.GreaterThanOrEqual}
    groups = []
    for group in filter_groups(filters):
        terms = []
        for col, op, val in group:
            if val is None or (isinstance(val, float) and val != val):
                continue
            if op in ops:
                terms.append(ops[op](str(col), val))
            elif op == "in" and val and all(v is not None for v in val):
                terms.append(ex.In(str(col), set(val)))
        groups.append(ex.And(*terms) if len(terms) > 1 else terms[0] if terms else ex.AlwaysTrue())
    if not groups:
        return ex.AlwaysTrue()
    return ex.Or(*groups) if len(groups) > 1 else groups[0]


def _fs(table, location: str, storage_options):
    import fsspec

    if storage_options:
        return fsspec.core.url_to_fs(location, **storage_options)[0]
    from pyiceberg.io.fsspec import FsspecFileIO

    scheme = location.split("://", 1)[0] if "://" in location else "file"
    return FsspecFileIO(dict(table.io.properties)).get_fs(scheme)


def snapshot(source, storage_options: dict | None, filters=None) -> dict:
    """The table's snapshot as :func:`daskpd._data.tables.snapshot` assembles it."""
    from pyiceberg.io.pyarrow import schema_to_pyarrow
    from pyiceberg.manifest import FileFormat

    table = _load(source, storage_options)
    base = _name(source)
    snap = _pick(table, source, base)
    name = f"{base} (snapshot {snap.snapshot_id})"
    pinned = source.snapshot_id is not None or source.timestamp is not None
    # the current table reads with its current schema (a column renamed since is renamed); a pinned
    # snapshot with the schema it was written with
    schema_id = snap.schema_id if pinned and snap.schema_id is not None else table.metadata.current_schema_id
    schema = table.schemas()[schema_id]
    try:
        try:
            tasks = list(table.scan(snapshot_id=snap.snapshot_id, row_filter=_expression(filters)).plan_files())
        except ValueError as exc:  # a filter column the table lacks: planned unpruned, the reader names it
            if "equality deletes" in str(exc):
                raise
            tasks = list(table.scan(snapshot_id=snap.snapshot_id).plan_files())
    except ValueError as exc:
        if "equality deletes" not in str(exc):
            raise
        raise DataError(f"{name} has equality deletes (of merge-on-read deletes, updates or merges); daskpd applies "
                        "position delete files only: rewrite the table's data files (compaction) or read a snapshot "
                        "from before the deletes (snapshot_id)") from None
    pruned = None
    if not tasks and filters:  # every file pruned: the table's files still say its columns
        tasks, pruned = list(table.scan(snapshot_id=snap.snapshot_id).plan_files()), []
    other = [t.file for t in tasks if t.file.file_format != FileFormat.PARQUET]
    if other:
        raise DataError(f"{name}: data file {other[0].file_path} is {other[0].file_format.name}; daskpd reads "
                        "Iceberg tables of parquet data files only")
    location = table.metadata.location.rstrip("/")
    fs = _fs(table, location, storage_options)
    keep = _position_deletes(tasks, fs, name)
    files = []
    for t in tasks:
        path, n = t.file.file_path, int(t.file.record_count)
        mask = keep.get(path)
        gone = 0 if mask is None else int(n - mask.sum())
        files.append((path, int(t.file.file_size_in_bytes), n - gone, f"{n}" + (f"-{gone}" if gone else ""), {},
                      mask))
    label = source.table or location
    return {"name": name, "location": location, "version": int(snap.snapshot_id), "id": str(table.metadata.table_uuid),
            "schema": schema_to_pyarrow(schema, include_field_ids=False), "partition_columns": [], "files": files,
            "fs": fs, "field_names": field_names(schema), "table": table, "pruned": pruned,
            "record": {"format": "iceberg", "location": location, "table": label,
                       "id": str(table.metadata.table_uuid), "snapshot_id": int(snap.snapshot_id),
                       "schema_id": int(schema_id)}}


def _position_deletes(tasks, fs, name: str) -> dict:
    """``{data file: keep mask}`` of the data files that position delete files apply to
    (each delete file read once: its ``file_path`` and ``pos`` columns); equality
    deletes and deletion vectors (puffin) are refused, naming the table and a file."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from pyiceberg.manifest import DataFileContent, FileFormat

    deletes = {}
    for t in tasks:
        for d in t.delete_files:
            if d.content == DataFileContent.EQUALITY_DELETES or d.file_format != FileFormat.PARQUET:
                what = "equality deletes" if d.content == DataFileContent.EQUALITY_DELETES else \
                    f"deletes stored as {d.file_format.name} (deletion vectors)"
                raise DataError(f"{name}: data file {t.file.file_path} has {what} ({d.file_path}); daskpd applies "
                                "position delete files only: rewrite the table's data files (compaction) or read a "
                                "snapshot from before the deletes (snapshot_id)")
            deletes[d.file_path] = None
    if not deletes:
        return {}
    positions: dict = {}
    for path in deletes:
        with fs.open(fs._strip_protocol(path), "rb") as fh:
            table = pq.read_table(fh, columns=["file_path", "pos"])
        for target in pc.unique(table.column("file_path")).to_pylist():
            pos = table.filter(pc.equal(table.column("file_path"), target)).column("pos").to_numpy()
            positions.setdefault(target, []).append(pos)
    out = {}
    for t in tasks:
        got = positions.get(t.file.file_path)
        if got:
            mask = np.ones(int(t.file.record_count), dtype=bool)
            mask[np.concatenate(got)] = False
            out[t.file.file_path] = mask
    return out


def field_names(schema) -> dict:
    """``{field id: column name}`` of a pyiceberg schema's top-level columns."""
    return {f.field_id: f.name for f in schema.fields}


def changes(kept: dict, now: dict) -> str | None:
    """Why the snapshots after the kept one (``kept``: a snapshot's ``record``) up to
    ``now`` (the snapshot read, with its ``table``) are not appends only, in one line;
    None when they are."""
    from pyiceberg.table.snapshots import ancestors_of

    table, old, new = now["table"], int(kept["snapshot_id"]), int(now["version"])
    if old == new:
        return None
    between = []
    for snap in ancestors_of(table.snapshot_by_id(new), table.metadata):
        if snap.snapshot_id == old:
            break
        between.append(snap)
    else:
        return (f"the Iceberg snapshot {old} kept is not an ancestor of the snapshot {new} read (a rollback, a "
                "branch, or expired snapshots)")
    schema_id = kept.get("schema_id")
    for snap in reversed(between):
        op = snap.summary.operation.value if snap.summary is not None else "unknown"
        if op != "append":
            return f"Iceberg snapshot {snap.snapshot_id} ({op}) since snapshot {old}"
        if schema_id is not None and snap.schema_id is not None and snap.schema_id != schema_id:
            return (f"Iceberg snapshot {snap.snapshot_id} changed the table's schema (schema id {schema_id} -> "
                    f"{snap.schema_id}) since snapshot {old}")
    return None
