"""A parquet lake's files and their footers: listing the files (:func:`list_parquet_files`),
reading every footer once, in parallel and cached (:func:`read_footers`; a damaged file
named: :func:`damage_of`), and a file's fingerprint (:func:`footer_digest`,
:func:`footer_stamp`).  See :mod:`daskpd._data.lake` for what is checked.
"""
from __future__ import annotations

import functools
import os
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq
import xxhash

from .._errors import DataError

__all__ = ["FileFooter", "list_parquet_files", "read_footers", "damage_of", "footer_stamp", "footer_digest", "FOOTER_READ", "index_columns"]


_MAGIC = b"PAR1"


#: the bytes read at the end of a file for its footer (pyarrow's default, one read for most footers)
FOOTER_READ = 64 << 10


_CACHE: "OrderedDict[tuple, FileFooter]" = OrderedDict()


_CACHE_LOCK = threading.Lock()


_CACHE_SIZE = 100_000  # footers (a few KB each)


_LAYOUTS: dict = {}  # one object per distinct layout of a file (FileFooter.layout)


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


def printable(exc) -> str:
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
    detail = f": {type(exc).__name__}: {printable(exc)}" if exc is not None else ""
    return f"has a corrupt parquet footer{detail}"


def _read_footer(fs, path: str, size: int) -> FileFooter | str:
    """The footer of one file, read as its last bytes (one read of :data:`FOOTER_READ`
    bytes for most files) and parsed from them, with their checksum; or what is wrong."""
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
