"""Hive partition keys of a parquet path (``root/sale_year=2011/part.0.parquet``).

The keys become columns when dask reads the directory; they describe where a file lies
in the lake rather than a property of its rows, and a filter on a key makes it
constant, so the default feature sets leave them out (a feature named explicitly is
still used).
"""
from __future__ import annotations

import os
import re

__all__ = ["partition_keys"]

_SEGMENT = re.compile(r"^([^=/]+)=[^/]*$")


def partition_keys(data, storage_options: dict | None = None) -> list[str]:
    """The ``key=value`` directory names under ``data`` (a path, directory, glob or URL
    of parquet files), in path order; ``[]`` for frames and flat layouts."""
    if not isinstance(data, (str, os.PathLike)):
        return []
    path = os.fspath(data)
    if path.lower().endswith((".csv", ".csv.gz", ".csv.bz2")):
        return []
    try:
        import fsspec

        fs, _, paths = fsspec.get_fs_token_paths(path, storage_options=storage_options or {})
    except Exception:  # an unreadable path is reported by the reader, not here
        return []
    root = fs._strip_protocol(path).rstrip("/")
    if any(ch in root for ch in "*?["):
        root = re.split(r"[*?\[]", root, maxsplit=1)[0].rsplit("/", 1)[0]
    try:
        first = paths[0] if paths and paths[0] != root else None
        if first is None or fs.isdir(first):
            first = _first_file(fs, first or root)
    except Exception:
        return []
    if not first:
        return []
    rel = first[len(root):] if first.startswith(root) else first
    keys = []
    for seg in rel.strip("/").split("/")[:-1]:
        m = _SEGMENT.match(seg)
        if m and m.group(1) not in keys:
            keys.append(m.group(1))
    return keys


def _first_file(fs, directory: str):
    """The first data file under ``directory`` in path order, found by descending into
    the first directory at each level (hidden ``.x`` / ``_x`` entries skipped, as the
    reader skips them), without listing the whole lake."""
    for name in sorted(fs.ls(directory, detail=False)):
        if os.path.basename(name.rstrip("/")).startswith(("_", ".")):
            continue
        if fs.isdir(name):
            found = _first_file(fs, name)
            if found:
                return found
        else:
            return name
    return None
