"""Many small parquet files read as a few partitions planned from their footers.

:func:`daskpd._data.lake.inspect_lake` has read every file's footer already; the
partitions are planned from those footers (:func:`plan`: consecutive row groups gathered
up to ``blocksize`` uncompressed bytes, the rule of dask's ``aggregate_files`` with
adaptive row-group splitting) and read with :func:`dask.dataframe.from_map`, one task a
partition (:class:`GroupReader`: each file's row groups of the columns asked for read
with :mod:`pyarrow.parquet`, the hive keys added from the paths; with filters, the
partition's files as one :mod:`pyarrow.dataset` scan with the filter pushed down; then
one arrow -> pandas conversion).  The driver's planning is one loop over the footers:
no footer is parsed a second time on the driver, and the graph has a task a partition.
The frame is what ``dask.dataframe.read_parquet`` makes of the same files: the same
dtypes (strings as dask converts them, hive keys as categoricals over every value of
the key, pandas' categoricals of unknown categories in the meta), the same rows in the
same order, as many partitions, unknown divisions; the column selection is pushed into
the reader.

Only lakes that :func:`daskpd._data.read.grouping` gathers take this path, and among them
only those that dask would read file by file the same way (:func:`usable`); the others
are read by ``dask.dataframe.read_parquet``.
"""
from __future__ import annotations

import hashlib
import operator
from dataclasses import dataclass
from functools import reduce
from typing import Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

from .lake import LakeSchema

__all__ = ["PARQUET_EXTENSIONS", "Group", "GroupReader", "usable", "plan", "filter_expression", "read_gathered",
           "file_reader", "ordered"]

#: the file names dask's parquet reader keeps when it lists a directory
PARQUET_EXTENSIONS = (".parq", ".parquet", ".pq")


@dataclass(frozen=True)
class Group:
    """One partition: ``pieces`` are ``(path, row groups, file size)``."""

    pieces: tuple

    def __dask_tokenize__(self):
        return ("daskpd-parquet-group", _digest(repr(self.pieces)))


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()


def usable(lake: LakeSchema, paths, fs) -> bool:
    """Whether the files read the same way here as by ``dask.dataframe.read_parquet``:
    every file a parquet file by its name, no stored pandas index, no ``_metadata``
    summary file (dask would read the lake through it)."""
    if any(not f.path.endswith(PARQUET_EXTENSIONS) for f in lake.files):
        return False
    if lake.files[0].layout[2]:
        return False
    if not isinstance(paths, str):  # a list of files: dask reads a "_metadata" among them
        return not any(p.rstrip("/").rsplit("/", 1)[-1] == "_metadata" for p in map(str, paths))
    root = fs._strip_protocol(paths)
    if any(ch in root for ch in "*?["):
        return True  # a glob: dask reads the files it matches
    try:
        return not (fs.isdir(root) and fs.exists(root.rstrip("/") + "/_metadata"))
    except OSError:  # pragma: no cover - an unreachable store: dask's reader reports it
        return False


def ordered(lake: LakeSchema) -> list:
    """The files in dask's reading order: natural order of their paths (``part-2``
    before ``part-10``)."""
    from dask.utils import natural_sort_key

    return sorted(lake.files, key=lambda f: natural_sort_key(f.path))


def plan(files, blocksize: int, keep=None) -> list[Group]:
    """Consecutive row groups gathered while their uncompressed bytes stay within
    ``blocksize`` (a row group larger than that is a partition of its own); row groups
    without rows are left out, as dask leaves them.  ``keep``: the paths to read (the
    others are pruned by a filter on the hive keys)."""
    groups: list[list] = []
    current: list = []
    total = 0
    for f in files:
        if keep is not None and f.path not in keep:
            continue
        for i, (rows, size) in enumerate(f.row_groups):
            if not rows:
                continue
            if current and total + size > blocksize:
                groups.append(current)
                current, total = [], 0
            if current and current[-1][0] == f.path:
                current[-1][1].append(i)
            else:
                current.append((f.path, [i]))
            total += size
    if current:
        groups.append(current)
    sizes = {f.path: f.size for f in files}
    return [Group(tuple((path, tuple(rgs), sizes[path]) for path, rgs in g)) for g in groups]


def filter_expression(filters):
    """DNF ``filters`` as a :mod:`pyarrow.dataset` expression, with dask's reading of
    them (``!=`` and ``not in`` keep missing values; ``None``/NaN only with ``is`` /
    ``is not``)."""
    import pyarrow.dataset as pds

    if filters is None:
        return None
    if len(filters) == 0 or any(len(f) == 0 for f in filters):
        raise ValueError("Malformed filters")
    if isinstance(filters[0][0], str):
        filters = [filters]

    def one(col, op, val):
        fld = pds.field(col)
        if val is None or val is np.nan:
            if op == "is":
                return fld.is_null(nan_is_null=True)
            if op == "is not":
                return ~fld.is_null(nan_is_null=True)
            raise ValueError(f'"{(col, op, val)}" is not a supported predicate Please use "is" or "is not" for '
                             "null comparison.")
        ops = {"=": operator.eq, "==": operator.eq, "!=": operator.ne, "<": operator.lt, ">": operator.gt,
               "<=": operator.le, ">=": operator.ge}
        if op in ops:
            expr = ops[op](fld, val)
        elif op == "in":
            expr = fld.isin(val)
        elif op == "not in":
            expr = ~fld.isin(val)
        else:
            raise ValueError(f'"{(col, op, val)}" is not a valid operator in predicates.')
        if op in ("!=", "not in"):
            return fld.is_null(nan_is_null=True) | expr
        return expr

    return reduce(operator.or_, [reduce(operator.and_, [one(*p) for p in conj]) for conj in filters])


def _arrow_fs(fs):
    import pyarrow.fs as pafs

    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    if protocol in ("file", "local"):
        return pafs.LocalFileSystem()
    return pafs.PyFileSystem(pafs.FSSpecHandler(fs))


class GroupReader:
    """Reads one :class:`Group` into the pandas partition ``dask.dataframe.read_parquet``
    would make of it.  Holds no state that a read changes: one reader is shared by every
    partition, and pickles as its options."""

    def __init__(self, fs, schema: pa.Schema, keys: dict, filters, arrow_to_pandas: dict, convert_string: bool,
                 categories: bool = True, constants: dict | None = None, masks: dict | None = None):
        self.fs = fs
        self.schema = schema  # the files' schema, then the hive keys (int32 or string)
        self.keys = keys  # hive key -> every value of it in the lake (a pandas Index)
        self.filters = filters
        self.arrow_to_pandas = dict(arrow_to_pandas)
        self.convert_string = convert_string
        self.categories = categories
        #: path -> {column: value} of the columns a file does not store (a Delta table's
        #: partition columns), typed by ``schema``
        self.constants = constants or {}
        #: path -> the rows a file keeps (a Delta deletion vector, Iceberg position deletes:
        #: a numpy boolean over the file's rows)
        self.masks = masks or {}

    def __dask_tokenize__(self):
        from dask.base import tokenize

        return ("daskpd-gathered-parquet", tokenize(self.fs), self.schema.to_string(),
                [(k, None if v is None else list(v)) for k, v in self.keys.items()], repr(self.filters),
                sorted(self.arrow_to_pandas.items()), self.convert_string, self.categories,
                _digest(repr(sorted(self.constants.items()))) if self.constants else None,
                _digest(repr(sorted((p, _digest(np.packbits(m).tobytes().hex()), len(m))
                                    for p, m in self.masks.items()))) if self.masks else None)

    def arrow_fs(self):
        return _arrow_fs(self.fs)

    def _mapper(self):
        if not self.convert_string:
            return None
        fixed = {pa.string(): pd.StringDtype("pyarrow"), pa.large_string(): pd.StringDtype("pyarrow"),
                 pa.date32(): pd.ArrowDtype(pa.date32()), pa.date64(): pd.ArrowDtype(pa.date64())}

        def mapper(t):
            got = fixed.get(t)
            if got is None and pa.types.is_decimal(t):
                return pd.ArrowDtype(t)
            return got

        return mapper

    def to_pandas(self, table: pa.Table, columns: Sequence[str], categories=None) -> pd.DataFrame:
        opts = {**self.arrow_to_pandas, "use_threads": False, "ignore_metadata": False}
        df = table.to_pandas(categories=categories, types_mapper=self._mapper(), **opts)
        df = df.reset_index(drop=True)
        for k, values in self.keys.items():
            if k in df.columns and values is not None:
                df[k] = pd.Series(pd.Categorical(df[k].values, categories=values), index=df.index)
        return df[list(columns)]

    def meta(self, columns: Sequence[str]) -> pd.DataFrame:
        """The empty frame dask's reader would describe the files with: pandas
        categoricals (from the files' pandas metadata) with unknown categories."""
        from dask.dataframe.utils import clear_known_categories

        cats = [c["name"] for c in (self.schema.pandas_metadata or {}).get("columns", [])
                if self.categories and c.get("pandas_type") == "categorical" and c.get("name") in self.schema.names]
        meta = self.to_pandas(self.schema.empty_table(), columns, categories=cats or None)
        return clear_known_categories(meta, cols=cats) if cats else meta

    def __call__(self, group: Group, columns: Sequence[str] | None = None) -> pd.DataFrame:
        columns = list(self.schema.names) if columns is None else list(columns)
        fs = _arrow_fs(self.fs)
        if self.masks and any(path in self.masks for path, _, _ in group.pieces):
            table = self._masked(group, columns, fs)
        else:
            table = self._scan(group, columns, fs) if self.filters else self._read(group, columns, fs)
        return self.to_pandas(table, columns)

    def _masked(self, group: Group, columns: list, fs) -> pa.Table:
        """Files with deletion vectors: their rows read, the deleted ones dropped, then
        the filters applied to what is left."""
        need = list(dict.fromkeys([*columns, *(c for g in ([self.filters] if self.filters and isinstance(
            self.filters[0][0], str) else (self.filters or [])) for c, _, _ in g)]))
        tables = []
        for piece in group.pieces:
            t = self._read(Group((piece,)), need, fs)
            mask = self.masks.get(piece[0])
            if mask is not None:
                t = t.filter(pa.array(_rows_of(mask, piece, fs), type=pa.bool_()))
            tables.append(t)
        t = tables[0] if len(tables) == 1 else pa.concat_tables(tables, promote_options="permissive")
        if self.filters:
            t = t.filter(filter_expression(self.filters))
        return t.select(columns)

    def _partitioning(self):
        import pyarrow.dataset as pds

        return pds.HivePartitioning(pa.schema([self.schema.field(k) for k in self.keys])) if self.keys else None

    def _constant_names(self) -> list:
        return list(next(iter(self.constants.values()))) if self.constants else []

    def partition_expression(self, path: str, part=None):
        """What the file ``path`` holds in every row of the columns it does not store:
        its hive keys (parsed from the path) or its constants, as an expression."""
        import pyarrow.dataset as pds

        if part is not None:
            return part.parse(path)
        values = self.constants.get(path)
        if not values:
            return None
        terms = [pds.field(k).is_null() if v is None else pds.field(k) == pa.scalar(v, self.schema.field(k).type)
                 for k, v in values.items()]
        return reduce(operator.and_, terms)

    def _read(self, group: Group, columns: list, fs) -> pa.Table:
        """No filters: each file's row groups read with :mod:`pyarrow.parquet` (the
        cheapest read of a small file), the hive keys added from its path."""
        import pyarrow.dataset as pds
        import pyarrow.parquet as pq

        part = self._partitioning()
        consts = self._constant_names()
        stored = [c for c in columns if c not in self.keys and c not in consts]
        tables = []
        for path, rgs, size in group.pieces:
            with fs.open_input_file(path) as fh:
                pf = pq.ParquetFile(fh)
                if len(rgs) == pf.num_row_groups:
                    t = pf.read(columns=stored, use_threads=False)
                else:
                    t = pf.read_row_groups(list(rgs), columns=stored, use_threads=False)
            if part is not None:
                values = pds.get_partition_keys(part.parse(path))
                for k in self.keys:
                    if k in columns:
                        typ = self.schema.field(k).type
                        t = t.append_column(pa.field(k, typ), pa.repeat(pa.scalar(values.get(k), typ), t.num_rows))
            for k, v in self.constants.get(path, {}).items():
                if k in columns:
                    typ = self.schema.field(k).type
                    t = t.append_column(pa.field(k, typ), pa.repeat(pa.scalar(v, typ), t.num_rows))
            tables.append(t)
        if len(tables) == 1:
            return tables[0]
        try:
            return pa.concat_tables(tables)
        except pa.ArrowInvalid:  # the same columns and types, written nullable by some files only
            return pa.concat_tables(tables, promote_options="permissive")

    def _scan(self, group: Group, columns: list, fs) -> pa.Table:
        """Filters: the files as one :mod:`pyarrow.dataset` scan with the filter pushed
        down (row groups skipped by their statistics, then rows)."""
        import pyarrow.dataset as pds

        fmt = pds.ParquetFileFormat()
        part = self._partitioning()
        frags = [fmt.make_fragment(path, filesystem=fs, row_groups=list(rgs), file_size=size,
                                   partition_expression=self.partition_expression(path, part))
                 for path, rgs, size in group.pieces]
        dset = pds.FileSystemDataset(frags, self.schema, fmt, fs)
        return dset.to_table(columns=columns, filter=filter_expression(self.filters), use_threads=False)


def _rows_of(mask, piece, fs) -> list:
    """The part of a file's keep ``mask`` that covers the row groups of ``piece``."""
    import pyarrow.parquet as pq

    path, rgs, _ = piece
    with fs.open_input_file(path) as fh:
        md = pq.ParquetFile(fh).metadata
    if len(rgs) == md.num_row_groups:
        return mask
    starts = np.cumsum([0] + [md.row_group(i).num_rows for i in range(md.num_row_groups)])
    return np.concatenate([mask[starts[i]:starts[i + 1]] for i in rgs])


def file_reader(lake: LakeSchema, paths, fs, filters, arrow_to_pandas: dict, *, hive: bool = True,
                categories: bool = True):
    """``(reader, files, keep)``: the :class:`GroupReader` of ``lake``, its files in dask's
    reading order (:func:`ordered`) and the paths a filter on the hive keys leaves (None:
    every file), or None when a filter names a column the files lack or some hive keys
    are also stored in the files (see :func:`read_gathered`)."""
    import dask
    import pyarrow.dataset as pds

    files = ordered(lake)
    schema = lake.files[0].schema.remove_metadata()
    keys: dict = {}
    found = None
    if hive and any("=" in f.path for f in files):  # hive keys: found as dask's reader finds them
        found = pds.dataset([f.path for f in files], filesystem=_arrow_fs(fs), format="parquet",
                            partitioning="hive")
        part_schema = found.partitioning.schema if found.partitioning is not None else pa.schema([])
        dictionaries = found.partitioning.dictionaries if found.partitioning is not None else None
        if 0 < len(set(part_schema.names) & set(schema.names)) < len(part_schema):
            return None  # some hive keys also stored in the files: dask's reader refuses the lake
        for i, fld in enumerate(part_schema):
            if fld.name in schema.names:
                continue
            schema = schema.append(fld)
            vals = dictionaries[i] if dictionaries else None
            keys[fld.name] = pd.Index(vals.to_pandas()) if vals is not None and len(vals) else None
    schema = schema.with_metadata(lake.files[0].schema.metadata)
    expr = filter_expression(filters) if filters else None
    wanted = set(c for conj in ([filters] if filters and isinstance(filters[0][0], str) else (filters or []))
                 for c, _, _ in conj)
    if wanted - set(schema.names):
        return None  # dask's reader names the column
    keep = None
    if expr is not None and keys and found is not None:
        keep = {f.path for f in found.get_fragments(filter=expr)}
    convert = dask.config.get("dataframe.convert-string")
    reader = GroupReader(fs, schema, keys, filters, arrow_to_pandas, True if convert is None else bool(convert),
                         categories)
    return reader, files, keep


def read_gathered(lake: LakeSchema, paths, fs, filters, blocksize: int, arrow_to_pandas: dict, *,
                  hive: bool = True, categories: bool = True):
    """The lazy frame of every column of ``lake`` (see the module docstring), or None
    when a filter names a column the files lack or some hive keys are also stored in
    the files (dask's reader says what is wrong); a
    ``ValueError`` for filters dask would refuse.  ``hive``: parse the directories'
    ``key=value`` names (False: the files store the keys); ``categories``: the columns
    the pandas metadata calls categorical are categoricals (False: as stored)."""
    import dask.dataframe as dd

    got = file_reader(lake, paths, fs, filters, arrow_to_pandas, hive=hive, categories=categories)
    if got is None:
        return None
    reader, files, keep = got
    groups = plan(files, blocksize, keep)
    columns = list(reader.schema.names)
    meta = reader.meta(columns)
    if not groups:  # every file pruned: one empty partition, as dask reads it
        return dd.from_pandas(meta, npartitions=1, sort=False)
    return dd.from_map(reader, groups, meta=meta, divisions=None, label="read-parquet-gathered",
                       enforce_metadata=False)
