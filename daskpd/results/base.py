"""One result format: the frame head, the JSON conversion and the atomic parquet writer.

Every result object (a curve, a table of importances, a comparison) is a :class:`Result`:
``to_frame()`` gives a tidy pandas DataFrame, ``metadata()`` a JSON-able dict, and
``to_parquet()`` writes the frame with the metadata in the parquet schema (key
``daskpd``), atomically (a temporary file in the same directory, then one rename).

Curves share one head (:data:`CURVE_HEAD`): ``feature, kind, x | category, pd, count,
supported, n_rows`` -- ``x`` (float) for a numeric feature, ``category`` (the labels as
given) for a categorical one -- followed by the method's own columns.  Importance tables
share :data:`TABLE_HEAD`: ``feature, kind, importance, rank``.  The job runner writes its
tables straight from these frames.

This module also holds the package's one ``json.dumps(default=...)`` converter
(:func:`json_default`), the one NaN-safe cleaner (:func:`json_clean`) and the one
temp-and-rename helper for files (:func:`atomic_path`), which the one atomic parquet
writer (:func:`write_table_atomic`, local paths and fsspec URLs) uses.
"""
from __future__ import annotations

import abc
import contextlib
import datetime as _dt
import errno as _errno
import json
import os
import shutil
from typing import Iterator

import numpy as np
import pandas as pd

from .._errors import DataError

__all__ = ["Result", "CurveResult", "CURVE_HEAD", "TABLE_HEAD", "curve_frame", "table_frame", "json_default",
           "json_clean", "dump_json", "atomic_path", "write_parquet", "write_table_atomic", "with_metadata",
           "METADATA_KEY", "OutputError", "OUTPUT_FAULTS", "output_error"]

#: the leading columns of every curve frame (``x`` or ``category``, never both)
CURVE_HEAD = ("feature", "kind", "x", "category", "pd", "count", "supported", "n_rows")
#: the leading columns of every importance table
TABLE_HEAD = ("feature", "kind", "importance", "rank")
#: the parquet schema metadata key holding :meth:`Result.metadata`
METADATA_KEY = b"daskpd"


# ------------------------------------------------------------------ JSON
def json_default(o):
    """``json.dumps(default=...)``: numpy scalars/arrays, dates, and anything else as text."""
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (_dt.date, _dt.datetime, _dt.time)):
        return o.isoformat()
    return str(o)  # paths and anything else: their text


def json_clean(o):
    """A JSON-safe copy: dict keys as text, tuples as lists, numpy as Python, dates as ISO
    text, NaN/inf as None (``allow_nan=False`` then holds)."""
    if isinstance(o, dict):
        return {str(k): json_clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [json_clean(v) for v in o]
    if isinstance(o, np.ndarray):
        return [json_clean(v) for v in o.tolist()]
    if isinstance(o, np.generic):
        o = o.item()
    if isinstance(o, (_dt.date, _dt.datetime, _dt.time)):
        return o.isoformat()
    if isinstance(o, float) and not np.isfinite(o):
        return None
    return o


def dump_json(obj, indent: int | None = 2) -> str:
    """Strict JSON text of ``obj`` (cleaned by :func:`json_clean`), newline-terminated."""
    return json.dumps(json_clean(obj), indent=indent, default=json_default, allow_nan=False) + "\n"


# ------------------------------------------------------------------ atomic files
#: the errnos of an output that cannot be written (as opposed to a bug or a missing directory)
OUTPUT_FAULTS = frozenset({_errno.EROFS, _errno.EACCES, _errno.EPERM, _errno.ENOSPC, _errno.EFBIG, _errno.EDQUOT})

_HINTS = {_errno.EROFS: "choose a writable {instead}",
          _errno.EACCES: "choose a {instead} you may write to, or fix its permissions",
          _errno.EPERM: "choose a {instead} you may write to, or fix its permissions",
          _errno.ENOSPC: "free some space or choose another {instead}",
          _errno.EDQUOT: "free some space (quota) or choose another {instead}",
          _errno.EFBIG: "raise the file-size limit (ulimit -f) or choose another {instead}"}


class OutputError(OSError):
    """An output could not be written: a read-only file system (``EROFS``), permission
    denied (``EACCES``/``EPERM``), a full disk or quota (``ENOSPC``/``EDQUOT``) or a file
    larger than allowed (``EFBIG``).  ``str()`` is one line naming the path, the reason
    and what to do; ``errno`` and ``filename`` are those of the OS error."""

    def __init__(self, err: int, path, detail: str = "", instead: str = "location", suffix: str = ""):
        path = os.fspath(path)
        super().__init__(err, os.strerror(err), path)
        reason = os.strerror(err)
        reason = reason[:1].lower() + reason[1:]
        hint = _HINTS.get(err, "choose another {instead}").format(instead=instead)
        self.message = (f"cannot write to {path}: {reason} ({_errno.errorcode.get(err, err)})"
                        f"{' ' + detail if detail else ''}; {hint}{' ' + suffix if suffix else ''}")

    def __str__(self) -> str:
        return self.message

    def __reduce__(self):  # picklable although __init__ differs from OSError's
        return (_rebuild_output_error, (self.errno, self.filename, self.message))


def _rebuild_output_error(err, path, message):
    e = OutputError(err, path)
    e.message = message
    return e


def output_error(exc: BaseException, path, **kwargs) -> OutputError | None:
    """``exc`` as an :class:`OutputError` naming ``path`` when it is an output fault
    (:data:`OUTPUT_FAULTS`), else None (raise the original)."""
    if isinstance(exc, OSError) and exc.errno in OUTPUT_FAULTS:
        return OutputError(exc.errno, path, **kwargs)
    return None


@contextlib.contextmanager
def atomic_path(path) -> Iterator[str]:
    """Yield a temporary path next to ``path``; on success rename it onto ``path``.

    A reader sees the old file or the new one, never half of one; on an error the
    temporary file (or directory) is removed and ``path`` is untouched.  (A directory
    can replace only a missing or empty one; run directories use
    :func:`daskpd.job.store.commit`.)
    """
    path = os.fspath(path)
    head, name = os.path.split(path)
    tmp = os.path.join(head, f".{name}.tmp-{os.getpid()}")
    _remove(tmp)  # a leftover of an earlier process with this pid
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        _remove(tmp)


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


# ------------------------------------------------------------------ parquet
def with_metadata(table, meta: dict | None, key: bytes = METADATA_KEY):
    """``table`` (a pyarrow Table) with ``meta`` as JSON under ``key`` in its schema."""
    if meta is None:
        return table
    m = dict(table.schema.metadata or {})
    m[key] = dump_json(meta, indent=None).encode()
    return table.replace_schema_metadata(m)


def write_parquet(frame: pd.DataFrame, path, metadata: dict | None = None,
                  storage_options: dict | None = None, **kwargs) -> str:
    """Write ``frame`` (no index) with ``metadata`` in the schema, atomically (see
    :func:`write_table_atomic`; ``path`` may be an fsspec URL); return the path."""
    import pyarrow as pa

    table = with_metadata(pa.Table.from_pandas(frame, preserve_index=False), metadata)
    return write_table_atomic(table, path, storage_options=storage_options, **kwargs)


def write_table_atomic(table, path, storage_options: dict | None = None, **kwargs) -> str:
    """``pyarrow.parquet.write_table`` to a temporary name beside ``path``, then a move:
    one rename for a local path or ``file://`` URL (:func:`atomic_path`), the
    filesystem's ``mv`` for any other fsspec URL (``memory://``, ``s3://`` ...).  The
    temporary file is removed if anything fails; a local path that cannot be written (a
    read-only or full disk, permission denied) raises :class:`OutputError` naming it, and
    an existing file there is left as it was.  Returns ``path``."""
    import pyarrow.parquet as pq

    path = os.fspath(path)
    if "://" not in path:
        try:
            with atomic_path(path) as tmp:
                pq.write_table(table, tmp, **kwargs)
        except OutputError:
            raise
        except OSError as exc:  # pyarrow's OSErrors carry the errno but no file name
            err = output_error(exc, path)
            if err is None:
                raise
            raise err from exc
        return path
    import fsspec

    fs, root = fsspec.core.url_to_fs(path, **(storage_options or {}))
    if isinstance(fs, fsspec.implementations.local.LocalFileSystem):  # file://: a local, atomic rename
        write_table_atomic(table, root, **kwargs)
        return path
    head, name = root.rsplit("/", 1) if "/" in root else ("", root)
    tmp = f"{head}/.{name}.tmp-{os.getpid()}" if head else f".{name}.tmp-{os.getpid()}"
    try:
        with fs.open(tmp, "wb") as fh:
            pq.write_table(table, fh, **kwargs)
        if fs.exists(root):
            fs.rm(root)
        fs.mv(tmp, root)
    except BaseException:
        with contextlib.suppress(Exception):
            if fs.exists(tmp):
                fs.rm(tmp)
        raise
    return path


# ------------------------------------------------------------------ the frame heads
def curve_frame(feature, kind: str, positions, pd_values, *, count=None, supported=None, n_rows: int = 0,
                extra: dict | None = None) -> pd.DataFrame:
    """The tidy frame of one curve: :data:`CURVE_HEAD` (``x`` or ``category`` by ``kind``)
    then ``extra`` (the method's own columns, in order)."""
    y = np.asarray(pd_values, dtype="float64")
    n = len(y)
    cols = {"feature": np.full(n, feature, dtype=object), "kind": np.full(n, kind, dtype=object)}
    if kind == "numeric":
        cols["x"] = np.asarray(positions, dtype="float64")
    elif isinstance(positions, (pd.Index, pd.Series)):
        cols["category"] = positions.array  # the labels with their dtype
    else:
        labels = np.empty(n, dtype=object)
        labels[:] = list(positions)
        cols["category"] = labels
    cols["pd"] = y
    cols["count"] = np.full(n, np.nan) if count is None else np.asarray(count)
    cols["supported"] = np.isfinite(y) if supported is None else np.asarray(supported, dtype=bool)
    cols["n_rows"] = np.full(n, int(n_rows), dtype="int64")
    for k, v in (extra or {}).items():
        if v is not None:
            cols[k] = v
    return pd.DataFrame(cols)


def table_frame(features, kinds, importance, extra: dict | None = None, rank=None) -> pd.DataFrame:
    """An importance table: :data:`TABLE_HEAD` then ``extra``, in the given row order;
    ``rank`` 1 is the largest importance (ties: first listed; NaN last), unless the
    ranks are given."""
    imp = np.asarray(importance, dtype="float64")
    if rank is None:
        order = pd.Series(imp).sort_values(ascending=False, kind="stable", na_position="last").index.to_numpy()
        rank = np.empty(len(imp), dtype="int64")
        rank[order] = np.arange(1, len(imp) + 1)
    rank = np.asarray(rank, dtype="int64")
    cols = {"feature": list(features), "kind": list(kinds), "importance": imp, "rank": rank}
    for k, v in (extra or {}).items():
        cols[k] = v
    return pd.DataFrame(cols)


# ------------------------------------------------------------------ the base classes
class Result(abc.ABC):
    """A small result: ``to_frame()``, ``metadata()``, ``to_parquet()`` (atomic)."""

    @abc.abstractmethod
    def to_frame(self) -> pd.DataFrame:
        """A tidy pandas DataFrame of the result."""

    def metadata(self) -> dict:
        return {}

    def to_parquet(self, path, storage_options: dict | None = None, **kwargs) -> str:
        """Write :meth:`to_frame` to ``path`` with :meth:`metadata` in the schema (key
        ``daskpd``): a local path or an fsspec URL (``file://``, ``memory://``, ``s3://``
        ...), written to a temporary name next to it, then moved into place; nothing is
        left behind on failure.  A local path that cannot be written raises
        :class:`OutputError` (an ``OSError``) naming it.  Returns the path."""
        frame = self.to_frame()
        try:
            return write_parquet(frame, path, self.metadata(), storage_options=storage_options, **kwargs)
        except (TypeError, ValueError) as exc:  # pyarrow cannot store mixed-type labels
            if "category" not in frame or frame["category"].dtype != object:
                raise
            raise DataError(f"cannot write the category labels of {getattr(self, 'feature', '?')!r} to parquet "
                            f"({exc}); they mix types -- cast the column to str first") from exc


class CurveResult(Result):
    """A curve of one feature: ``to_frame()`` starts with :data:`CURVE_HEAD`.

    Subclasses define :meth:`curve` (positions, pd, count, supported, their own
    columns) and have ``feature``, ``kind`` and ``n_rows``.
    """

    feature: str
    kind: str
    n_rows: int

    @abc.abstractmethod
    def curve(self) -> dict:
        """``{"positions", "pd", "count", "supported", "extra"}`` (count/supported may be None)."""

    def to_frame(self) -> pd.DataFrame:
        c = self.curve()
        return curve_frame(self.feature, self.kind, c["positions"], c["pd"], count=c.get("count"),
                           supported=c.get("supported"), n_rows=self.n_rows, extra=c.get("extra"))

    def summary(self) -> str:
        """One line: positions or categories, the range of the curve, the rows."""
        f = self.to_frame()
        y = f["pd"].to_numpy()
        ok = np.isfinite(y)
        what = "categories" if self.kind == "categorical" else "positions"
        rng = f"[{np.min(y[ok]):.4g}, {np.max(y[ok]):.4g}]" if ok.any() else "[nan, nan]"
        return f"{self.feature}: {len(f)} {what}, range {rng}" + (f", {self.n_rows:,} rows" if self.n_rows else "")
