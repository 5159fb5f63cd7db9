"""A parquet lake, checked before anything is computed.

One pass over the files' footers (metadata only: a few KB a file, read in parallel)
before the data is opened:

* **damaged files** -- empty (0 bytes), truncated, not parquet, corrupt footer -- are a
  :class:`~daskpd.DataError` naming the file and what is wrong with it;
* **the schema is reconciled across the files**: a column missing from some files, or
  stored with types that do not go together (an integer in some files and a string in
  others, a number and a boolean, two time zones, ...), is a ``DataError`` naming the
  column, its types and the files that hold each; nothing is ever split by its storage
  type;
* **safe widenings** are applied, and counted (:attr:`LakeSchema.widened`, logged on the
  ``daskpd.data`` logger and recorded in a job's manifest): integers of different
  widths -> int64; float32/float16 -> float64; integers and floats -> float64 (an int
  column of a day with a missing value is often written as float; values up to 2**53
  are exact); a column that is all-null in some files (pyarrow type ``null``) takes the
  other files' type (integers then become float64, so the nulls are NaN);
  string/large_string/dictionary-of-string -> string; timestamps of different units
  (same time zone) -> nanoseconds.  Every partition is cast to the widened type, so a
  value reads the same whichever file it came from.

Only the columns a computation reads are required to agree (all columns when the caller
does not say which); hive partition columns come from directory names and are left to
the reader.  Footers are cached per (file, size, modification time -- and on a local disk
the inode's change time, which a rewrite moves even when it restores the modification
time), so the public functions that open the same lake twice read them once.  Each
footer keeps the checksum of its bytes (:attr:`FileFooter.digest`): a file's fingerprint
(:func:`footer_stamp`) is its size and modification time / ETag with it, which a rewrite
of the same size whose modification time was restored does not fool.
"""
from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Sequence

import pyarrow as pa

from .._errors import DataError

__all__ = ["FileFooter", "LakeSchema", "list_parquet_files", "read_footers", "reconcile", "inspect_lake",
           "damage_of", "footer_stamp", "footer_digest", "FOOTER_READ"]

log = logging.getLogger("daskpd.data")

_MAGIC = b"PAR1"
#: the bytes read at the end of a file for its footer (pyarrow's default, one read for most footers)
FOOTER_READ = 64 << 10
_CACHE: "OrderedDict[tuple, FileFooter]" = OrderedDict()
_CACHE_LOCK = threading.Lock()
_CACHE_SIZE = 100_000  # footers (a few KB each)
_LAYOUTS: dict = {}  # one object per distinct layout of a file (FileFooter.layout)



def _short(names: Sequence[str], limit: int = 5) -> str:
    names = [str(n) for n in names]
    if len(names) > limit:
        return ", ".join(names[:limit]) + f", ... ({len(names)} files in all)"
    return ", ".join(names)


@dataclass
class FileFooter:
    """One parquet file's footer: its path, size, arrow schema and parquet metadata."""

    path: str
    size: int
    schema: pa.Schema
    metadata: object  # pyarrow.parquet.FileMetaData (row groups and their statistics)
    #: XXH3-64 of the footer's bytes (the thrift metadata, its length and the magic), hex
    digest: str = ""

    @property
    def num_rows(self) -> int:
        return int(self.metadata.num_rows)

    def __getstate__(self):  # the layout is one object per process: not pickled
        return {k: v for k, v in self.__dict__.items() if k != "layout"}

    @functools.cached_property
    def row_groups(self) -> tuple:
        """``((rows, uncompressed bytes), ...)`` of the file's row groups."""
        md = self.metadata
        return tuple((rg.num_rows, rg.total_byte_size) for rg in map(md.row_group, range(md.num_row_groups)))

    @property
    def data_bytes(self) -> int:
        """Uncompressed bytes of the file's row groups, as its footer counts them."""
        return int(sum(b for _, b in self.row_groups))

    @functools.cached_property
    def layout(self) -> tuple:
        """``(names, types, index, nullable)``: the columns and their types, the
        columns holding a stored pandas index (:func:`index_columns`), and which
        columns may hold nulls.  Computed once a footer,
        and one object for all the files whose columns read alike (so that files are
        grouped by the identity of their layout)."""
        schema = self.schema
        key = (tuple(schema.names), tuple(schema.types), frozenset(index_columns(schema)),
               tuple(fld.nullable for fld in schema))
        with _CACHE_LOCK:
            return _LAYOUTS.setdefault(key, key)


class _Names(dict):
    """file path -> how messages name it, worked out when a message asks."""

    def __init__(self, display, paths):
        super().__init__()
        self._display, self._paths = display, paths

    def get(self, path, default=None):
        if path not in self._paths:
            return default
        if path not in self.keys():
            self[path] = self._display(path)
        return super().get(path)

    def __getitem__(self, path):
        got = self.get(path, _Names)
        if got is _Names:
            raise KeyError(path)
        return got

    def __reduce__(self):
        return (dict, ({p: self.get(p) for p in self._paths},))


@dataclass
class LakeSchema:
    """The reconciled schema of a lake's files."""

    files: list[FileFooter]
    types: dict[str, pa.DataType]  # column -> reconciled type (columns of the files, first-seen order)
    widened: dict[str, dict] = field(default_factory=dict)  # column -> {"to": type, "from": {type: n_files}}
    display: dict[str, str] = field(default_factory=dict)  # file path -> how error messages name it
    #: columns outside those checked that do not agree across the files: column -> why
    #: (only with ``survey=True``; such a column fails when it is read)
    conflicts: dict[str, str] = field(default_factory=dict)
    #: of those, the columns some files lack (a column added by later appends)
    partial: set[str] = field(default_factory=set)

    @property
    def num_rows(self) -> int:
        return sum(f.num_rows for f in self.files)


# ------------------------------------------------------------------ listing
def _hidden(rel: str) -> bool:
    return any(part.startswith((".", "_")) for part in rel.replace("\\", "/").split("/") if part)


def list_parquet_files(path: str, storage_options: dict | None = None):
    """``(fs, [(file, size, stamp), ...], display_root)`` of the data files the parquet reader
    reads for ``path`` (a file, a directory -- hidden ``.x`` / ``_x`` entries skipped, as
    pyarrow does -- or a glob)."""
    import fsspec

    fs, root = fsspec.core.url_to_fs(path, **(storage_options or {}))
    if not _is_local(fs):
        fs.invalidate_cache()  # an object store's listings cached earlier in this process may be stale
    if any(c in root for c in "*?["):
        infos = fs.glob(root, detail=True)
        base = ""
    elif fs.isdir(root):
        infos = _find_local(root) if _is_local(fs) else fs.find(root, detail=True)
        base = root.rstrip("/")
    else:
        infos = {root: fs.info(root)}
        base = ""
    files = []
    for name, info in sorted(infos.items()):
        if info.get("type", "file") == "directory":
            continue
        if base:
            rel = name[len(base):].lstrip("/") if name.startswith(base) else name
            if _hidden(rel):
                continue
        stamp = (info.get("mtime") or info.get("ETag") or info.get("etag") or info.get("LastModified")
                 or info.get("last_modified") or info.get("updated") or info.get("created") or "")
        if info.get("ctime_ns"):  # a local file: its inode's change time too, which no rewrite keeps
            stamp = f"{stamp}/{info['ctime_ns']}"
        files.append((name, int(info.get("size") or 0), str(stamp)))
    return fs, files


def _is_local(fs) -> bool:
    import fsspec.implementations.local as local

    return type(fs) is local.LocalFileSystem


def _find_local(root: str) -> dict:
    """``fs.find(root, detail=True)`` of a local directory (what it reports, without
    building fsspec's info of every file: 10,000 files list in a tenth of the time)."""
    out = {}
    todo = [root.rstrip("/") or "/"]
    while todo:
        d = todo.pop()
        with os.scandir(d) as it:
            for e in it:
                path = d.rstrip("/") + "/" + e.name
                if e.is_dir():
                    todo.append(path)
                    continue
                try:
                    st = e.stat()
                except OSError:  # a dangling link: listed as fsspec lists it, with no size
                    out[path] = {"name": path, "size": 0, "type": "other", "mtime": 0}
                    continue
                out[path] = {"name": path, "size": st.st_size, "type": "file", "mtime": st.st_mtime,
                             "ctime_ns": st.st_ctime_ns}
    return out


# ------------------------------------------------------------------ footers
def _printable(exc) -> str:
    return " ".join("".join(ch if ch.isprintable() else " " for ch in str(exc)).split())


def damage_of(fs, path: str, size: int, exc: BaseException | None = None) -> str:
    """What is wrong with a parquet file whose footer cannot be read (a short phrase)."""
    if size == 0:
        return "is empty (0 bytes)"
    if size < 12:
        return f"is truncated or not a parquet file ({size} bytes; a parquet file has at least 12)"
    try:
        with fs.open(path, "rb") as fh:
            head = fh.read(4)
            fh.seek(size - 4)
            tail = fh.read(4)
    except OSError as e:  # pragma: no cover - unreadable file
        return f"cannot be read: {e}"
    if tail != _MAGIC:
        if head == _MAGIC:
            return "is truncated (it starts like a parquet file but does not end with the parquet magic bytes PAR1)"
        return "is not a parquet file (it neither starts nor ends with the parquet magic bytes PAR1)"
    detail = f": {type(exc).__name__}: {_printable(exc)}" if exc is not None else ""
    return f"has a corrupt parquet footer{detail}"


def _read_footer(fs, path: str, size: int) -> FileFooter | str:
    """The footer of one file, read as its last bytes (one read of :data:`FOOTER_READ`
    bytes for most files) and parsed from them, with their checksum; or what is wrong."""
    import pyarrow.parquet as pq
    import xxhash

    if size < 12:
        return damage_of(fs, path, size)
    try:
        with fs.open(path, "rb") as fh:
            footer = _footer_bytes(fh, size)
        if footer is None:
            return damage_of(fs, path, size)
        pf = pq.ParquetFile(pa.BufferReader(footer))
        return FileFooter(path, size, pf.schema_arrow, pf.metadata, xxhash.xxh3_64_hexdigest(footer))
    except (OSError, pa.ArrowException, ValueError, EOFError) as exc:
        return damage_of(fs, path, size, exc)


def _footer_bytes(fh, size: int) -> bytes | None:
    """A parquet file's footer (its thrift metadata, their length and the magic) read
    from the open file ``fh`` of ``size`` bytes; None when it does not end like one."""
    n = min(size, FOOTER_READ)
    fh.seek(size - n)
    tail = fh.read(n)
    length = int.from_bytes(tail[-8:-4], "little") if len(tail) >= 8 else -1
    if tail[-4:] != _MAGIC or not 0 < length <= size - 12:
        return None
    if length + 8 > len(tail):  # a footer larger than the first read
        fh.seek(size - length - 8)
        tail = fh.read(length + 8)
    return tail[-(length + 8):]


def footer_digest(fs, path: str, size: int) -> str:
    """:attr:`FileFooter.digest` of one file read now ("" for a file that is not parquet)."""
    import xxhash

    if size < 12:
        return ""
    try:
        with fs.open(path, "rb") as fh:
            footer = _footer_bytes(fh, size)
    except OSError:
        return ""
    return "" if footer is None else xxhash.xxh3_64_hexdigest(footer)


def footer_stamp(stamp, digest: str) -> str:
    """A file's fingerprint: its modification time / ETag (``stamp``) and the checksum
    of its footer's bytes (:attr:`FileFooter.digest`; ``stamp`` alone without one)."""
    return f"{stamp} footer:{digest}" if digest else str(stamp)


def read_footers(fs, files: list[tuple[str, int, str]], display=None) -> list[FileFooter]:
    """Every file's footer (cached, read in parallel); a damaged file is a ``DataError``
    naming it (all damaged files are named, the first few in full)."""
    display = display or (lambda p: p)
    keys = [(getattr(fs, "protocol", "file") if isinstance(getattr(fs, "protocol", None), str)
             else str(getattr(fs, "protocol", "file")), name, size, stamp) for name, size, stamp in files]
    out: list[FileFooter | str | None] = [None] * len(files)
    todo = []
    with _CACHE_LOCK:
        for i, k in enumerate(keys):
            hit = _CACHE.get(k)
            if hit is not None:
                _CACHE.move_to_end(k)
                out[i] = hit
            else:
                todo.append(i)
    if todo:
        local = "file" in str(getattr(fs, "protocol", "file"))
        workers = min(len(todo), 4 if local else 32)
        if workers <= 1:
            got = [_read_footer(fs, files[i][0], files[i][1]) for i in todo]
        else:
            with ThreadPoolExecutor(workers, thread_name_prefix="daskpd-footer") as ex:
                got = list(ex.map(lambda i: _read_footer(fs, files[i][0], files[i][1]), todo))
        with _CACHE_LOCK:
            for i, g in zip(todo, got):
                out[i] = g
                if isinstance(g, FileFooter):
                    _CACHE[keys[i]] = g
            while len(_CACHE) > _CACHE_SIZE:
                _CACHE.popitem(last=False)
    bad = [(files[i][0], o) for i, o in enumerate(out) if isinstance(o, str)]
    if bad:
        first = "; ".join(f"{display(p)} {what}" for p, what in bad[:3])
        more = f" (and {len(bad) - 3} more damaged files)" if len(bad) > 3 else ""
        n = len(bad)
        raise DataError(f"damaged parquet file{'s' if n > 1 else ''}: {first}{more}; "
                     f"{'remove or rewrite it' if n == 1 else 'remove or rewrite them'} (no data was computed)")
    return out  # type: ignore[return-value]


# ------------------------------------------------------------------ reconciling types
def _family(t: pa.DataType) -> str:
    if pa.types.is_null(t):
        return "null"
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_floating(t):
        return "float"
    if pa.types.is_dictionary(t):
        vt = t.value_type
        return "string" if (pa.types.is_string(vt) or pa.types.is_large_string(vt)) else f"dict<{vt}>"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or getattr(pa.types, "is_string_view", lambda _: False)(t):
        return "string"
    if pa.types.is_timestamp(t):
        return f"timestamp[{t.tz}]"
    return str(t)  # anything else must match exactly


_UNIT_ORDER = {"s": 0, "ms": 1, "us": 2, "ns": 3}


def _widen(types: list[pa.DataType]) -> pa.DataType | None:
    """The one type the distinct ``types`` of a column widen to, or None (incompatible)."""
    fams = {_family(t) for t in types}
    real = [t for t in types if not pa.types.is_null(t)]
    fams.discard("null")
    if not fams:
        return pa.null()
    if fams == {"int"}:
        if any(t == pa.uint64() for t in real) and len(set(real)) > 1:
            return None  # uint64 with anything else has no safe common integer type
        if all(pa.types.is_unsigned_integer(t) for t in real) and any(t == pa.uint64() for t in real):
            return pa.uint64()
        return pa.float64() if len(real) < len(types) else pa.int64()  # nulls in an int column -> NaN
    if fams <= {"int", "float"}:
        return pa.float64()
    if fams == {"string"}:
        return pa.string()
    if len(fams) == 1:
        fam = next(iter(fams))
        if fam.startswith("timestamp["):
            unit = max((t.unit for t in real), key=_UNIT_ORDER.__getitem__)
            return pa.timestamp(unit if len({t.unit for t in real}) == 1 else "ns", tz=real[0].tz)
        if len(set(real)) == 1:
            return real[0]
    return None


def index_columns(schema: pa.Schema) -> set[str]:
    """The columns of a file that hold a stored pandas index (``__index_level_0__``,
    dask's ``__null_dask_index__``, or a named index listed in the pandas metadata)."""
    out = {n for n in schema.names if n == "__null_dask_index__" or
           (n.startswith("__index_level_") and n.endswith("__"))}
    try:
        meta = schema.pandas_metadata or {}
    except (ValueError, TypeError):  # pragma: no cover - unreadable pandas metadata
        meta = {}
    out |= {c for c in meta.get("index_columns", []) if isinstance(c, str)}
    return out


def _agree(c: str, by_index: dict, footers: list[FileFooter], display):
    """``(type, widening or None)`` of column ``c`` held as ``by_index`` ({type: [[file
    index, ...], ...]}, the files of each layout that stores it so); a DataError when a
    file lacks it or its types do not go together."""
    n = len(footers)
    have = sum(len(p) for parts in by_index.values() for p in parts)
    if have < n or len(by_index) > 1:
        by_type = {t: [footers[i].path for i in sorted(j for p in parts for j in p)] for t, parts in by_index.items()}
    else:
        by_type = by_index
    if have < n:
        present = {p for v in by_type.values() for p in v}
        missing = [f.path for f in footers if f.path not in present]
        raise DataError(
            f"column {c!r} is missing from {len(missing)} of the {n} parquet files: "
            f"{_short([display(p) for p in missing])} (it is in {_short([display(p) for p in sorted(present)], 3)}); "
            "every file of a dataset must hold the columns that are read -- rewrite those files, or leave the "
            "column out (exclude it, or list the columns to read)")
    if len(by_type) == 1:
        return next(iter(by_type)), None
    to = _widen(list(by_type))
    if to is None:
        parts = "; ".join(f"{t} in {_short([display(p) for p in ps], 3)}"
                          for t, ps in sorted(by_type.items(), key=lambda kv: -len(kv[1])))
        raise DataError(
            f"column {c!r} has incompatible types across the parquet files: {parts}. Its values would not "
            "compare equal from one file to another (e.g. the integer 3 and the string '3' would be two "
            "categories); rewrite the files with one type for the column")
    return to, {"to": str(to), "from": {str(t): len(ps) for t, ps in by_type.items()}}


def reconcile(footers: list[FileFooter], columns: Sequence[str] | None = None, display=None,
              survey: bool = False) -> LakeSchema:
    """Check that ``columns`` (default: every column of any file) are in every file with
    types that go together; return the reconciled schema (``DataError`` otherwise).
    ``survey``: every other column is reconciled too, without raising: its widened type
    goes to ``types`` and what is wrong with it to ``conflicts``."""
    display = display or (lambda p: p)
    # files with one layout are reconciled once (a lake is usually one or a few layouts)
    layouts: dict[int, tuple] = {}
    for i, f in enumerate(footers):
        lay = f.layout
        got = layouts.get(id(lay))
        if got is None:
            layouts[id(lay)] = (lay, [i])
        else:
            got[1].append(i)
    order: dict[str, None] = {}
    per_idx: dict[str, dict[pa.DataType, list[list[int]]]] = {}
    for (names, types, index, _), idx in layouts.values():
        for name, typ in zip(names, types):
            if name in index:
                continue  # a stored pandas index (the reader makes it the index, not a column)
            order.setdefault(name, None)
            per_idx.setdefault(name, {}).setdefault(typ, []).append(idx)
    per_col: dict[str, dict[pa.DataType, list[list[int]]]] = per_idx
    check = list(order) if columns is None else [c for c in dict.fromkeys(map(str, columns)) if c in order]
    check_set = set(check)
    types: dict[str, pa.DataType] = {}
    widened: dict[str, dict] = {}
    conflicts: dict[str, str] = {}
    partial: set[str] = set()
    n = len(footers)
    for c in order:
        if c not in check_set and not survey:
            continue
        try:
            types[c], widening = _agree(c, per_col[c], footers, display)
        except DataError as exc:
            if c in check_set:
                raise
            conflicts[c] = str(exc)
            if sum(len(p) for parts in per_col[c].values() for p in parts) < n:
                partial.add(c)
            continue
        if widening is not None and c in check_set:
            widened[c] = widening
    for c in order:
        types.setdefault(c, next(iter(per_col[c])))
    if widened:
        log.info("parquet columns widened to one type across the files: %s",
                 "; ".join(f"{c}: {w['from']} -> {w['to']}" for c, w in widened.items()))
    return LakeSchema(files=list(footers), types=types, widened=widened, conflicts=conflicts, partial=partial)


def inspect_lake(path, columns: Sequence[str] | None = None, storage_options: dict | None = None,
                 survey: bool = False) -> LakeSchema:
    """List a parquet source's files (``path``: a file, directory, glob or URL, or a list
    of them), read their footers and reconcile ``columns`` (all when None; see
    :func:`reconcile` for ``survey``)."""
    paths = [os.fspath(p) for p in path] if isinstance(path, (list, tuple)) else [os.fspath(path)]
    fs = None
    files: list = []
    shows = []
    for p in paths:
        fs, fl = list_parquet_files(p, storage_options)
        if not fl:
            raise DataError(f"data path {p!r} holds no parquet files")
        files += fl
        shows.append(_displayer(p, fs, fl))

    def display(f: str) -> str:
        for show in shows:
            d = show(f)
            if d != f:
                return d
        return f

    footers = read_footers(fs, files, display)
    seen: set = set()
    for f in footers:
        if id(f.layout) in seen:
            continue
        seen.add(id(f.layout))
        names = list(f.layout[0])
        if len(set(names)) != len(names):
            dup = sorted({n for n in names if names.count(n) > 1})
            raise DataError(f"parquet file {display(f.path)} has duplicate column names: {', '.join(map(repr, dup))}")
    lake = reconcile(footers, columns, display, survey)
    lake.display = _Names(display, {f.path for f in footers})
    return lake


def _displayer(path: str, fs, files):
    """How messages name a file: the path as the user wrote it (the root, plus the file
    relative to it), or the full path for a single file."""
    import fsspec

    _, root = fsspec.core.url_to_fs(path)
    root = root.rstrip("/")
    if len(files) == 1 and files[0][0].rstrip("/") == root:
        only = files[0][0]
        return lambda p: str(path) if p == only else p

    def show(p: str) -> str:
        if root and p.startswith(root + "/"):
            return os.path.join(str(path).rstrip("/"), p[len(root) + 1:]) if "*" not in str(path) else p
        return p

    return show


# ------------------------------------------------------------------ applying the widening
def pandas_dtype(t: pa.DataType, fallback=None):
    """The pandas dtype a widened arrow type is cast to (as dask reads such a column)."""
    import numpy as np

    if pa.types.is_integer(t):
        return np.dtype(t.to_pandas_dtype())
    if pa.types.is_floating(t):
        return np.dtype("float64")
    if pa.types.is_string(t):
        return _string_dtype()
    if pa.types.is_timestamp(t):
        import pandas as pd

        return pd.DatetimeTZDtype(unit=t.unit, tz=t.tz) if t.tz else np.dtype(f"datetime64[{t.unit}]")
    return fallback


_STRING_DTYPE = None


def _string_dtype():
    global _STRING_DTYPE
    if _STRING_DTYPE is None:
        import dask.dataframe as dd
        import pandas as pd

        _STRING_DTYPE = dd.from_pandas(pd.DataFrame({"a": ["x"]}), npartitions=1).dtypes["a"]
    return _STRING_DTYPE


def apply_widening(ddf, lake: LakeSchema):
    """Cast every widened column of ``ddf`` (so that every partition has the one type)."""
    casts = {}
    for c, w in lake.widened.items():
        if c in ddf.columns:
            dt = pandas_dtype(lake.types[c], fallback=None)
            if dt is not None:
                casts[c] = dt
    return ddf.astype(casts) if casts else ddf


# ------------------------------------------------------------------ content checks (validate --check-data)
def _stats_distinct(lake: LakeSchema, column: str):
    """From the row-group statistics: True (>= 2 distinct values), False (one value or
    none), None (the statistics cannot tell)."""
    seen = None
    for f in lake.files:
        md = f.metadata
        try:
            idx = f.schema.get_field_index(column)
        except KeyError:
            return None
        if idx < 0 or md.num_columns != len(f.schema):  # nested types: leave it to the scan
            return None
        for rg in range(md.num_row_groups):
            col = md.row_group(rg).column(idx)
            st = col.statistics
            if st is None:
                return None
            if st.has_null_count and st.null_count == col.num_values:
                continue  # all null
            if not st.has_min_max:
                return None
            lo, hi = st.min, st.max
            if isinstance(lo, float) and (lo != lo or hi != hi):
                return None
            if lo != hi:
                return True
            if seen is None:
                seen = lo
            elif seen != lo:
                return True
    return False


def _dataset(path, lake: LakeSchema, storage_options):
    import fsspec
    import pyarrow.dataset as ds

    paths = [os.fspath(p) for p in path] if isinstance(path, (list, tuple)) else [os.fspath(path)]
    fs, root = fsspec.core.url_to_fs(paths[0], **(storage_options or {}))
    if len(paths) == 1 and fs.isdir(root):
        return ds.dataset(root, filesystem=fs, format="parquet", partitioning="hive")
    return ds.dataset([f.path for f in lake.files], filesystem=fs, format="parquet")


def check_content(path, lake: LakeSchema, features: Sequence[str], filters=None, storage_options=None,
                  label: str | None = None, skip_unusable: bool = False, dataset=None) -> dict:
    """What a run finds in its sample pass, found ahead: no rows (after ``filters``), a
    feature with no values or a single value.  With ``skip_unusable`` (the run's default
    feature set, which leaves such features out with a note) those features are returned
    as ``{feature: why}`` instead of raised.  Row-group statistics answer first; where
    they cannot, the needed columns are scanned until each feature shows two distinct
    values (so a healthy lake is usually answered from metadata or its first batch)."""
    label = label or repr(path)
    features = [str(f) for f in features]
    if not filters and lake.num_rows == 0:
        raise DataError(f"{label} has no rows")
    unknown = features if filters else [f for f in features if _stats_distinct(lake, f) is not True]
    if not filters and not unknown:
        return {}
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    expr = pq.filters_to_expression(filters) if filters else None
    dset = dataset if dataset is not None else _dataset(path, lake, storage_options)
    cols = [c for c in unknown if c in dset.schema.names]
    if filters and not cols:
        cols = [dset.schema.names[0]]
    rows = 0
    firsts: dict[str, object] = {}
    open_cols = set(c for c in unknown if c in cols)
    for batch in dset.scanner(columns=cols, filter=expr, batch_size=65536).to_batches():
        if batch.num_rows == 0:
            continue
        rows += batch.num_rows
        for c in list(open_cols):
            arr = batch.column(c)
            if pa.types.is_floating(arr.type):
                arr = pc.filter(arr, pc.is_finite(arr))
            arr = arr.drop_null()
            if len(arr) == 0:
                continue
            u = pc.unique(arr)
            if len(u) > 1:
                open_cols.discard(c)
                continue
            v = u[0].as_py()
            if c not in firsts:
                firsts[c] = v
            elif firsts[c] != v:
                open_cols.discard(c)
        if not open_cols and rows:
            break
    if rows == 0:
        raise DataError(f"{label} has no rows" + (" left after source.filters" if filters else ""))
    left_out = {}
    for c in unknown:
        if c in open_cols:
            if skip_unusable:
                left_out[c] = "empty" if c not in firsts else "constant"
                continue
            if c not in firsts:
                raise DataError(f"feature {c!r} has no non-missing values (in the {rows:,} rows read)")
            raise DataError(f"feature {c!r} is constant (every row holds {firsts[c]!r}); its partial dependence is "
                         "undefined -- list it in 'exclude'")
    return left_out


def unreadable_file(path, lake: LakeSchema, columns: Sequence[str] | None, storage_options=None):
    """After a read failed mid-computation (a damaged data page: the footer was fine):
    read each file's ``columns`` in turn and return a ``DataError`` naming the first file
    that cannot be read, or None when every file reads (the failure was elsewhere)."""
    import fsspec
    import pyarrow.parquet as pq

    first = os.fspath(path[0] if isinstance(path, (list, tuple)) else path)
    fs, _ = fsspec.core.url_to_fs(first, **(storage_options or {}))
    for f in lake.files:
        cols = None if columns is None else [c for c in columns if c in f.schema.names]
        try:
            with fs.open(f.path, "rb") as fh:
                pq.ParquetFile(fh).read(columns=cols)
        except (OSError, pa.ArrowException, ValueError, EOFError) as exc:
            return DataError(f"damaged parquet file: {lake.display.get(f.path, f.path)} cannot be read "
                          f"({type(exc).__name__}: {_printable(exc)}); its footer is intact, so a data page "
                          "is damaged -- remove or rewrite it")
    return None


@contextlib.contextmanager
def damaged_files_named(data, storage_options=None, columns=None):
    """Around a computation on ``data``: when it is a parquet path (file, directory, glob
    or URL) and the read fails mid-computation (a damaged data page behind an intact
    footer: the footer checks passed), the error becomes a ``DataError`` naming the file,
    found by reading the files one by one -- only on this failure path."""
    try:
        yield
    except ValueError as exc:
        # dask infers a CSV's dtypes from its first block; a later block that disagrees
        # fails mid-computation with pandas' "Mismatched dtypes"
        if "Mismatched dtypes" not in str(exc):
            raise
        where = repr(os.fspath(getattr(data, "path", data))) if isinstance(data, (str, os.PathLike)) or hasattr(
            data, "path") else "the CSV data"
        raise DataError(f"the CSV file(s) {where} change type part-way (dask guessed each column's type from the "
                     f"first block): {' '.join(str(exc).split())}  Pass the types with daskpd.read_csv(path, dtype={{...}}) as data "
                     "(or source.read_options in a job spec).") from None
    except OSError as exc:
        if not isinstance(data, (str, os.PathLike)) or type(exc).__module__.startswith("distributed"):
            raise
        path = os.fspath(data)
        if path.lower().endswith((".csv", ".csv.gz", ".tsv")):
            raise
        try:
            err = unreadable_file(path, inspect_lake(path, [], storage_options), columns, storage_options)
        except Exception:  # the diagnosis must never hide the original error
            raise exc from None
        if err is None:
            raise
        raise err from None
