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

This module reconciles the schema and applies the widening; the files and their footers
are :mod:`daskpd._data.lake_footers`, the content checks :mod:`daskpd._data.lake_checks`.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pyarrow as pa

from .._errors import DataError
from .lake_footers import FileFooter, list_parquet_files, read_footers

__all__ = ["LakeSchema", "reconcile", "inspect_lake", "pandas_dtype", "apply_widening"]

log = logging.getLogger("daskpd.data")


def _short(names: Sequence[str], limit: int = 5) -> str:
    names = [str(n) for n in names]
    if len(names) > limit:
        return ", ".join(names[:limit]) + f", ... ({len(names)} files in all)"
    return ", ".join(names)


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


def pandas_dtype(t: pa.DataType, fallback=None):
    """The pandas dtype a widened arrow type is cast to (as dask reads such a column)."""
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
