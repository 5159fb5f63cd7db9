"""Checks of a lake's content (``daskpd validate --check-data``: :func:`check_content`), and
naming the file behind a read that failed past its intact footer (:func:`unreadable_file`,
:func:`damaged_files_named`).
"""
from __future__ import annotations

import contextlib
import os
from typing import Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from .._errors import DataError

from .lake import LakeSchema, inspect_lake
from .lake_footers import printable

__all__ = ["check_content", "unreadable_file", "damaged_files_named"]


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

    first = os.fspath(path[0] if isinstance(path, (list, tuple)) else path)
    fs, _ = fsspec.core.url_to_fs(first, **(storage_options or {}))
    for f in lake.files:
        cols = None if columns is None else [c for c in columns if c in f.schema.names]
        try:
            with fs.open(f.path, "rb") as fh:
                pq.ParquetFile(fh).read(columns=cols)
        except (OSError, pa.ArrowException, ValueError, EOFError) as exc:
            return DataError(f"damaged parquet file: {lake.display.get(f.path, f.path)} cannot be read "
                          f"({type(exc).__name__}: {printable(exc)}); its footer is intact, so a data page "
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
