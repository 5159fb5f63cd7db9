"""A Delta Lake table's snapshot, through ``deltalake`` (delta-rs).

:func:`snapshot` resolves the table's version (the latest, or one pinned by number or
timestamp) to its active data files, with their partition values typed by the table's
schema, their sizes and row counts; :func:`changes` reads the commits since a kept
version from the table's log (``_delta_log/NNN.json``, newline-delimited JSON actions)
and says in one line why they are not appends only.  Reading the files is
:mod:`daskpd._data.tables`' part.

Deletion vectors (rows deleted without rewriting their file) are applied: the rows each
such file keeps (read by delta-rs) come with the snapshot, and the reader drops the
others.  A table
that maps column names to other physical names (``delta.columnMapping.mode``) is
refused, naming the table and the mode.
"""
from __future__ import annotations

import json
import os
from urllib.parse import unquote

import numpy as np
import pyarrow as pa

from .._errors import DataError

__all__ = ["is_delta_table", "delta_options", "snapshot", "changes"]

#: keys of s3fs's ``storage_options`` -> delta-rs (object_store) options
_S3_KEYS = {"key": "AWS_ACCESS_KEY_ID", "access_key_id": "AWS_ACCESS_KEY_ID", "secret": "AWS_SECRET_ACCESS_KEY",
            "secret_access_key": "AWS_SECRET_ACCESS_KEY", "token": "AWS_SESSION_TOKEN",
            "endpoint_url": "AWS_ENDPOINT_URL", "region_name": "AWS_REGION"}


def _object_store_key(k: str) -> bool:
    return k.isupper() or k.lower().startswith(("aws_", "azure_", "google_"))


def fsspec_options(storage_options: dict | None) -> dict:
    """``storage_options`` without delta-rs' own keys (upper-case ``AWS_...``), for fsspec."""
    return {k: v for k, v in (storage_options or {}).items() if not _object_store_key(k)}


def delta_options(storage_options: dict | None) -> dict:
    """delta-rs' storage options from fsspec's (s3fs: ``key``, ``secret``,
    ``endpoint_url``, ``client_kwargs={"region_name": ...}``, ``anon``); keys already in
    delta-rs' form (``AWS_...``) pass as they are."""
    so = dict(storage_options or {})
    out = {k: str(v) for k, v in so.items() if _object_store_key(k)}
    flat = {**{k: v for k, v in so.items() if not _object_store_key(k)}, **(so.get("client_kwargs") or {})}
    for k, v in flat.items():
        if k in _S3_KEYS and v is not None:
            out.setdefault(_S3_KEYS[k], str(v))
    if flat.get("anon"):
        out.setdefault("AWS_SKIP_SIGNATURE", "true")
    if str(out.get("AWS_ENDPOINT_URL", "")).startswith("http://"):
        out.setdefault("AWS_ALLOW_HTTP", "true")
    if "AWS_ENDPOINT_URL" in out:
        out.setdefault("AWS_REGION", "us-east-1")
    return out


def is_delta_table(path: str, storage_options: dict | None = None) -> bool:
    """Whether ``path`` (a directory or URL) holds a ``_delta_log/`` directory."""
    if any(ch in path for ch in "*?[") or path.lower().endswith((".parquet", ".parq", ".pq", ".csv", ".json")):
        return False
    if "://" not in path or path.startswith("file://"):
        local = path[len("file://"):] if path.startswith("file://") else path
        return os.path.isdir(os.path.join(local, "_delta_log"))
    import fsspec

    try:
        fs, root = fsspec.core.url_to_fs(path, **fsspec_options(storage_options))
        fs.invalidate_cache(root)  # a listing cached by an earlier call in this process may be stale
        return bool(fs.isdir(root.rstrip("/") + "/_delta_log"))
    except Exception:  # an unreachable store: the parquet reader reports it
        return False


def _load(path: str, storage_options, version=None, timestamp=None):
    try:
        from deltalake import DeltaTable
    except ImportError:
        raise DataError(f"{path!r} is a Delta Lake table (it holds _delta_log/); reading one needs deltalake: "
                        "pip install 'daskpd[delta]'") from None
    try:
        dt = DeltaTable(path, storage_options=delta_options(storage_options) or None)
        if version is not None or timestamp is not None:
            dt.load_as_version(version if version is not None else timestamp)
    except Exception as exc:  # deltalake's errors: TableNotFoundError, DeltaError, DeltaProtocolError, ...
        at = f" at version {version}" if version is not None else f" as of {timestamp}" if timestamp else ""
        raise DataError(f"Delta table {path!r}{at} cannot be read: {type(exc).__name__}: "
                        f"{' '.join(str(exc).split())}") from None
    return dt


def _typed(value, typ: pa.DataType):
    """A partition value as the column's type holds it."""
    if value is None:
        return None
    try:
        return pa.scalar(value, typ).as_py()
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        return pa.array([value]).cast(typ)[0].as_py()


def _local(uri: str) -> str:
    """A file's URI as the snapshot's files and its deletion vectors both name it."""
    return uri[len("file://"):] if uri.startswith("file://") else uri


def snapshot(source, storage_options: dict | None) -> dict:
    """The table's snapshot as :func:`daskpd._data.tables.snapshot` assembles it:
    ``location``, ``version``, ``id``, ``schema`` (arrow), ``partition_columns``,
    ``files`` (``(uri, size, rows, stamp, values, keep)``), ``fsspec_options``."""
    path = source.path
    dt = _load(path, storage_options, source.version, source.timestamp)
    version = int(dt.version())
    name = f"Delta table {path!r} (version {version})"
    meta = dt.metadata()
    conf = dict(meta.configuration or {})
    mode = conf.get("delta.columnMapping.mode", "none")
    if mode != "none":
        raise DataError(f"{name} maps its columns to other physical names (delta.columnMapping.mode = {mode!r}); "
                        "daskpd reads the data files' columns by name and does not support column mapping")
    schema = pa.schema(dt.schema().to_arrow())
    parts = list(meta.partition_columns or [])
    adds = pa.table(dt.get_add_actions(flatten=True))
    keep = _deletion_vectors(dt, name)
    root = _local(dt.table_uri.rstrip("/"))
    files = []
    for row in adds.to_pylist():
        rel = unquote(row["path"])
        uri = _local(rel) if "://" in rel else f"{root}/{rel}"
        values = {c: _typed(row.get(f"partition.{c}"), schema.field(c).type) for c in parts}
        mask = keep.get(uri) if keep else None
        rows = row.get("num_records")
        if mask is not None:
            rows = int(mask.sum())
        files.append((uri, int(row["size_bytes"]), None if rows is None else int(rows),
                      f"{row['modification_time']}" + (f"-{len(mask) - rows}" if mask is not None else ""),
                      values, mask))
    return {"name": name, "location": root, "version": version, "id": str(meta.id), "schema": schema,
            "partition_columns": parts, "files": files, "fsspec_options": fsspec_options(storage_options),
            "record": {"format": "delta", "location": root, "id": str(meta.id), "version": version}}


def _deletion_vectors(dt, name: str) -> dict:
    """``{file uri: keep mask}`` of the files with a deletion vector ({} for a table
    without the feature)."""
    features = set(dt.protocol().reader_features or ())
    if "deletionVectors" not in features:
        return {}
    try:
        batches = pa.RecordBatchReader.from_stream(dt.deletion_vectors()).read_all()
    except Exception as exc:
        raise DataError(f"{name}: its deletion vectors cannot be read ({type(exc).__name__}: "
                        f"{' '.join(str(exc).split())}); the rows they delete cannot be left out") from None

    out = {}
    for uri, mask in zip(batches.column("filepath").to_pylist(), batches.column("selection_vector").to_pylist()):
        out[_local(unquote(uri))] = np.asarray(mask, dtype=bool)
    return out


def _commit(fs, root: str, version: int) -> list[dict] | None:
    path = f"{root}/_delta_log/{version:020d}.json"
    try:
        text = fs.cat_file(path).decode("utf-8")
    except FileNotFoundError:
        return None
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def changes(kept: dict, now: dict, storage_options: dict | None) -> str | None:
    """Why the commits after the kept version (``kept``: a snapshot's ``record``) up to
    ``now`` (the snapshot read) are not appends only, in one line; None when they are.
    An append is a commit whose data actions are ``add`` with ``dataChange`` (a blind
    append, or a write in append mode); any ``remove``, a deletion vector, a change of
    the schema or of the partition columns is not."""
    import fsspec

    old, new = int(kept["version"]), int(now["version"])
    if new < old:
        return f"the Delta table is at version {new}, before the version {old} kept (time travel or a restore)"
    if new == old:
        return None
    fs, root = fsspec.core.url_to_fs(now["location"], **fsspec_options(storage_options))
    root = root.rstrip("/")
    fs.invalidate_cache(f"{root}/_delta_log")  # a listing cached earlier in this process may be stale
    schema = None
    for v in range(old + 1, new + 1):
        actions = _commit(fs, root, v)
        if actions is None:
            return (f"the Delta table's log no longer holds commit {v} (log retention removed it): the commits "
                    f"since version {old} cannot be told apart from a rewrite")
        op = next((a["commitInfo"].get("operation") for a in actions if "commitInfo" in a), None)
        what = f"commit {v}" + (f" ({op})" if op else "")
        removed = [a["remove"] for a in actions if "remove" in a]
        added = [a["add"] for a in actions if "add" in a]
        if any(a.get("deletionVector") for a in added):
            return f"Delta {what} deleted rows with deletion vectors since version {old}"
        if removed:
            if not any(r.get("dataChange", True) for r in removed) and not any(a.get("dataChange", True)
                                                                              for a in added):
                return f"Delta {what} compacted {len(removed)} file(s) into {len(added)} since version {old}"
            if added:
                return (f"Delta {what} replaced {len(removed)} file(s) with {len(added)} (an overwrite, update or "
                        f"merge) since version {old}")
            return f"Delta {what} removed {len(removed)} file(s) (a delete) since version {old}"
        for a in actions:
            if "metaData" in a:
                md = a["metaData"]
                if schema is None:
                    schema = _schema_at(fs, root, old, storage_options, kept)
                if md.get("schemaString") is not None and schema is not None and \
                        _fields(json.loads(md["schemaString"])) != schema["fields"]:
                    return f"Delta {what} changed the table's schema since version {old}"
                if schema is not None and list(md.get("partitionColumns") or []) != schema["partition_columns"]:
                    return f"Delta {what} changed the table's partition columns since version {old}"
    return None


def _schema_at(fs, root, version: int, storage_options, kept) -> dict | None:
    """The schema (its fields, as the log writes them) and partition columns of the kept
    version (read through delta-rs: the log may hold a checkpoint there)."""
    try:
        dt = _load(kept["location"], storage_options, version)
    except DataError:
        return None
    meta = dt.metadata()
    return {"fields": _fields(json.loads(dt.schema().to_json())),
            "partition_columns": list(meta.partition_columns or [])}


def _fields(struct: dict) -> list:
    """A schema as the log writes it, reduced to what the data depends on: each field's
    name, type and nullability."""
    return [(f["name"], json.dumps(f["type"], sort_keys=True), bool(f.get("nullable", True)))
            for f in struct.get("fields", [])]
