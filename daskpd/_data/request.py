"""One request's input, resolved once: :func:`open_request`.

Every public function and the job runner go through it.  It opens the input once
(:func:`daskpd._data.source.open_dataset`), then decides, with one set of rules and one
wording for each error:

* the **target**: a column, numeric (or boolean, read as 0/1);
* the **features**: the ones named (each must exist; a datetime, nested or binary
  feature is an error naming it), or by default every column but the target and those
  excluded, less the columns no curve can be drawn over, each left out with its reason
  (:attr:`Request.left_out`): datetimes, nested and binary columns, the hive partition
  keys of a parquet lake (where a file lies, not a property of its rows), and columns
  missing from some of the lake's files (a column added later);
* their **kinds**, by the one rule of :mod:`daskpd._data.kinds` (declared categorical
  columns are categorical whatever their dtype; declared numeric columns -- a hive key
  such as ``month=7/``, codes stored as strings -- are read as numbers);
* the **stratifying columns** of a model-free request: the ones named, or every column
  but the target and those excluded, less nested, binary and partly missing columns.

Columns of keys by their stored type (UUIDs, fixed-size binary) are left out of both
default sets as likely identifiers; the others that would mislead (identifiers, row
numbers, leaks, dates stored as strings: :mod:`daskpd._data.suspects`) are found on the
tree sample, and the pipeline leaves them out of the sets the request marks as defaults
(:attr:`Request.default_features`, :attr:`Request.default_strat`) unless
:attr:`Request.keep_suspect`.

A column whose types differ across a lake's files is an error when it is read, named
with the files that hold each type; columns that are not read are never inspected beyond
their type.
"""
from __future__ import annotations

import uuid
import warnings
from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np
import pandas as pd

from .._errors import DataError, InvalidParameterError
from .kinds import datetime_message, is_numeric_like, key_type, unsupported_message
from .options import ReadOptions
from .columns import did_you_mean, short_list
from .filters import filter_columns
from .source import Dataset
from .suspects import KEEP_HINT, SUSPECT_WHYS, WHY_IDENTIFIER

__all__ = ["Request", "ReadOptions", "open_request", "left_out_note", "column_list"]


@dataclass
class Request:
    """A resolved request: see the module docstring."""

    dataset: Dataset
    target: str | None
    features: list[str]
    kinds: dict[str, str]  # feature -> "numeric" | "categorical"
    categorical: list[str]  # the columns declared categorical
    stratify_on: list[str] | None  # model-free requests: the stratifying columns
    left_out: dict[str, str] = field(default_factory=dict)  # default features left out: column -> why
    numeric: list[str] = field(default_factory=list)  # columns declared numeric: read as float64
    filters: list | None = None  # the filters the input was read with (for messages)
    #: columns read by the pass that draws bootstrap trials only, hashed into the rows'
    #: trial weights so that rows alike in every other column draw their own
    row_id: list[str] = field(default_factory=list)
    #: the features / the stratifying columns are a default set (not named by the caller):
    #: the pipeline leaves the columns the tree sample flags out of them
    default_features: bool = False
    default_strat: bool = False
    #: suspect columns stay in the default sets (with their warnings)
    keep_suspect: bool = False

    @property
    def dtypes(self):
        if not self.numeric:
            return self.dataset.dtypes
        out = self.dataset.dtypes.copy()
        for c in self.numeric:
            out[c] = np.dtype("float64")
        return out

    @property
    def target_boolean(self) -> bool:
        """The target is boolean: read as 0/1 (its partial dependence is the change in the
        share of True)."""
        return self.target is not None and pd.api.types.is_bool_dtype(self.dataset.dtypes[self.target])

    def read_columns(self, *extra: str) -> list[str]:
        """The columns a model-free run reads: target, features, stratifying columns, ``extra``."""
        cols = [self.target, *self.features, *(self.stratify_on or ()), *extra]
        return list(dict.fromkeys(c for c in cols if c is not None))

    def trial_columns(self) -> list[str]:
        """The columns the trial weights are drawn from: those read, and ``row_id``."""
        return self.read_columns(*self.row_id)

    def read_schema(self):
        """The lake's schema over the columns read (:meth:`Dataset.read_schema`), or None."""
        return self.dataset.read_schema(self.read_columns())

    def project(self, columns: Sequence[str] | None = None):
        """The dask DataFrame of ``columns`` (default: :meth:`read_columns`); the columns
        declared numeric as float64, keys stored as binary (UUIDs, fixed-size binary) as
        their text (:func:`as_key_text`)."""
        ddf = self.dataset.project(self.read_columns() if columns is None else columns)
        keys = [c for c in ddf.columns if self.dataset.lake is not None
                and key_type(self.dataset.lake.types.get(c))]
        if keys:
            ddf = ddf.map_partitions(as_key_text, keys, meta=ddf._meta.astype({c: object for c in keys}))
        cast = [c for c in self.numeric if c in set(ddf.columns)]
        if not cast:
            return ddf
        meta = ddf._meta.astype({c: "float64" for c in cast})
        return ddf.map_partitions(as_numbers, cast, meta=meta)


def as_key_text(df, columns):
    """``df`` with key ``columns`` (UUID objects, 16-byte values as UUIDs, other bytes as
    hex) as text: levels every encoder and writer reads (a partition kernel)."""
    def text(v):
        if v is None or (isinstance(v, float) and v != v):
            return None
        if isinstance(v, (bytes, bytearray)):
            return str(uuid.UUID(bytes=bytes(v))) if len(v) == 16 else bytes(v).hex()
        return str(v)

    return df.assign(**{c: df[c].map(text, na_action="ignore").astype(object) for c in columns})


def as_numbers(df, columns):
    """``df`` with ``columns`` read as float64 (a partition kernel): a categorical column
    (a hive key) through its categories, strings parsed; a value that is not a number is
    a DataError naming the column."""
    out = {}
    for c in columns:
        s = df[c]
        if isinstance(s.dtype, pd.CategoricalDtype):
            cats = _numbers(pd.Series(s.cat.categories), c)
            codes = s.cat.codes.to_numpy()
            vals = np.where(codes >= 0, cats[np.maximum(codes, 0)] if len(cats) else np.nan, np.nan)
        elif pd.api.types.is_numeric_dtype(s.dtype) or pd.api.types.is_bool_dtype(s.dtype):
            vals = s.to_numpy(dtype="float64", na_value=np.nan)
        else:
            vals = _numbers(s, c)
        out[c] = pd.Series(vals, index=df.index, dtype="float64")
    return df.assign(**out)


def _numbers(s: pd.Series, column: str) -> np.ndarray:
    try:
        return pd.to_numeric(s.astype(object), errors="raise").to_numpy(dtype="float64", na_value=np.nan)
    except (ValueError, TypeError):
        bad = s[pd.to_numeric(s.astype(object), errors="coerce").isna() & s.notna()]
        raise DataError(f"column {column!r} is declared numeric but holds values that are not numbers "
                        f"(e.g. {bad.iloc[0]!r}); declare it categorical instead") from None


def column_list(value) -> list[str]:
    """A column name or a list of them (or None) as a list of names."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


def _missing(dataset: Dataset, names: Sequence[str], what: str) -> None:
    missing = [c for c in names if c not in set(dataset.columns)]
    if missing:
        raise DataError(f"{what} names column{'s' if len(missing) > 1 else ''} {short_list(map(repr, missing))} "
                        f"not found in {dataset.label}{did_you_mean(missing, dataset.columns)}: "
                        f"{short_list(dataset.columns)}")


def _readable(dataset: Dataset, names: Sequence[str]) -> None:
    """A DataError for the first of ``names`` that cannot be read from every file."""
    for c in names:
        conflict = dataset.conflict(c)
        if conflict is not None:
            raise DataError(conflict)


def _usable_default(dataset: Dataset, column: str, how: str, others: Sequence[str]) -> str | None:
    """:func:`_usable` of a column that is only in a default set (every column but the
    target, ``column`` and ``others``): a column that cannot be read says that leaving it
    out works, and ``how`` (``{c}``: the column, ``{others}``: the other columns)."""
    try:
        return _usable(dataset, column)
    except DataError as exc:
        rest = [c for c in others if c != column]
        listed = repr(rest) if len(rest) <= 10 else "[...]"
        raise DataError(f"{exc}. Or leave it out: {column!r} was only one of the default columns (every column "
                        f"but the target), and the call works without it: {how.format(c=column, others=listed)}"
                        ) from None


def _usable(dataset: Dataset, column: str) -> str | None:
    """Why ``column`` cannot stratify or be a default feature, or None."""
    if dataset.kind(column) == "unsupported":
        return "nested or binary"
    if dataset.partial(column):
        return "missing from some files"
    _readable(dataset, [column])  # types that differ across the files: never read past that
    return None


def open_request(data, target: str | None = None, features=None, *, read: ReadOptions = ReadOptions(),
                 stratify_on=None, as_kind: str | None = None, model_free: bool = True,
                 default_features: bool | None = None, default_stratify_on: bool | None = None) -> Request:
    """Open ``data`` and resolve the request (see the module docstring).

    ``features``: a column name or a list of them, or None for the default set;
    ``read``: how the input is opened and the columns declared (:class:`ReadOptions`:
    ``categorical`` / ``numeric``, the columns declared categorical / numeric -- read as
    numbers: a hive key, codes stored as strings; ``exclude``, columns left out of the
    default sets; ``columns``, the only columns the request may use; ``row_id``, columns
    that tell rows apart for the bootstrap trials, read by the scan only and left out of
    the default feature and stratifying sets; ``names``, how messages name the
    parameters, default ``parameter categorical_features``, ...; a job names its keys);
    ``stratify_on``: the stratifying columns (None: the default set; only when
    ``model_free``); ``as_kind``: the kind a method needs ("numeric": StratPD, which
    reads a boolean as 0/1; "categorical": CatStratPD, which takes any value as a
    level).  ``default_features`` / ``default_stratify_on``: the features / stratifying
    columns given are the caller's default set (default: when None is given), of which
    suspect columns are left out unless ``read.keep_suspect`` (see the module
    docstring).
    """
    filters, keep_suspect = read.filters, read.keep_suspect
    names = ({k: f"parameter {k}" for k in ("exclude", "columns", "stratify_on", "row_id", "target", "features")}
             | {"categorical": "parameter categorical_features", "numeric": "parameter numeric_features"}
             | dict(read.names or {}))
    if target is not None and not isinstance(target, str):
        raise DataError(f"target must be a column name (str); got {target!r}")
    try:
        ds = read.open(data)
    except DataError:
        if filters:
            _check_filter_columns(data, read)
        raise
    available = list(ds.columns)
    if read.columns is not None:
        columns = column_list(read.columns)
        _missing(ds, columns, names["columns"])
        available = [c for c in available if c in set(columns)]
    if target is not None:
        ds.check([target], names["target"])
        _readable(ds, [target])
        if not is_numeric_like(ds.dtypes[target]):
            raise DataError(f"target {target!r} must be numeric; it has dtype {ds.dtypes[target]}: convert it to "
                            f"numbers, or a label of two classes to a boolean (e.g. data[{target!r}] == 'yes'), which "
                            "is read as 0/1 (the partial dependence of the share of True)")
    declared = column_list(read.categorical)
    _missing(ds, declared, names["categorical"])
    if target is not None and target in declared:
        raise InvalidParameterError(f"{names['categorical']} names the target {target!r}; the target must be numeric")
    exclude = column_list(read.exclude)
    _missing(ds, exclude, names["exclude"])
    row_id = list(dict.fromkeys(column_list(read.row_id)))
    _missing(ds, row_id, names["row_id"])
    _readable(ds, row_id)
    exclude = [*exclude, *(c for c in row_id if c not in exclude)]  # an identifier: never a default feature
    numeric = column_list(read.numeric)
    _missing(ds, numeric, names["numeric"])
    both = [c for c in numeric if c in declared]
    if both:
        raise InvalidParameterError(f"{names['numeric']} and {names['categorical']} both name {both[0]!r}; "
                                    "declare it one or the other")
    if as_kind == "numeric" and features is not None:
        # StratPD asked for a column by name: a hive key or categories that are all numbers
        # (``month=7/``) read as numbers
        for f in column_list(features):
            if f in ds.columns and f not in declared and f not in numeric and _numeric_categories(ds, f):
                numeric.append(f)
    for c in numeric:
        if ds.kind(c) == "datetime":
            raise DataError(datetime_message(c, ds.dtypes[c]))
        if ds.kind(c) == "unsupported":
            raise DataError(unsupported_message(c, ds.type_name(c)))
        dtype = ds.dtypes[c]
        if isinstance(dtype, pd.CategoricalDtype) and dtype.categories is not None:
            _numbers(pd.Series(dtype.categories), c)

    left_out: dict[str, str] = {}
    if features is None:
        feats = []
        for c in available:
            if c == target or c in exclude:
                continue
            why = _usable_default(ds, c, names.get("leave_out", "pass features={others}"),
                                  [a for a in available if a != target and a not in exclude])
            if why is None and c not in declared and c not in numeric:
                if ds.kind(c) == "datetime":
                    why = "datetime"
                elif c in ds.hive_keys:
                    why = "hive partition key"
            if why is None and not keep_suspect and _key_column(ds, c):
                why = WHY_IDENTIFIER
            if why is None:
                feats.append(c)
            else:
                left_out[c] = why
    else:
        feats = list(dict.fromkeys(column_list(features)))
        ds.check(feats, names["features"])
        _readable(ds, feats)
        if target is not None and target in feats:
            raise InvalidParameterError(f"feature {target!r} is the target; partial dependence of a column on "
                                        "itself is meaningless")

    kinds = {}
    for f in feats:
        kind = "categorical" if f in declared else "numeric" if f in numeric else ds.kind(f)
        if kind == "datetime":
            raise DataError(datetime_message(f, ds.dtypes[f]))
        if kind == "unsupported":
            raise DataError(unsupported_message(f, ds.type_name(f)))
        if as_kind == "numeric":
            if f in declared or not (f in numeric or is_numeric_like(ds.dtypes[f])):
                raise DataError(f"feature {f!r} is categorical (dtype {ds.dtypes[f]}); StratPD needs a numeric "
                                f"feature. Use daskpd.catstratpd(data, target={target!r}, feature={f!r}) for "
                                "categorical features.")
            kind = "numeric"  # StratPD asked for by name: a boolean is 0/1
        elif as_kind == "categorical":
            kind = "categorical"
        kinds[f] = kind

    strat = None
    if model_free:
        if stratify_on is None:
            strat, unusable = [], {}
            for c in available:
                if c == target or c in exclude:
                    continue
                why = _usable_default(ds, c, names.get("leave_out", "pass stratify_on={others} (or features=)"),
                                      [a for a in available if a != target and a not in exclude])
                if why is None and not keep_suspect and _key_column(ds, c):
                    why = WHY_IDENTIFIER
                if why is None:
                    strat.append(c)
                elif c not in left_out:  # the default features' note names it already
                    unusable[c] = why
            if unusable:
                warnings.warn(left_out_note("daskpd", unusable, len(strat), "name them in stratify_on= to use them",
                                            what="stratifying columns"), UserWarning, stacklevel=3)
        else:
            strat = list(dict.fromkeys(column_list(stratify_on)))
            _missing(ds, strat, names["stratify_on"])
            _readable(ds, strat)
            for c in strat:
                if ds.kind(c) == "unsupported":
                    raise DataError(unsupported_message(c, ds.type_name(c), role="stratifying column"))
            strat = [c for c in strat if c != target]
    if default_features is None:
        default_features = features is None
    if default_stratify_on is None:
        default_stratify_on = stratify_on is None
    return Request(dataset=ds, target=target, features=feats, kinds=kinds, categorical=declared, stratify_on=strat,
                   left_out=left_out, numeric=numeric, filters=filters or None, row_id=row_id,
                   default_features=bool(default_features), default_strat=bool(default_stratify_on and model_free),
                   keep_suspect=bool(keep_suspect))


def _key_column(ds: Dataset, column: str) -> bool:
    """A column of keys by its stored type (a UUID, fixed-size binary)."""
    return ds.lake is not None and key_type(ds.lake.types.get(column))


def _check_filter_columns(data, read: ReadOptions) -> None:
    """On a failed read with filters: a one-line DataError when a filter names a column
    the input lacks (the reader's own error lists the whole schema)."""
    try:
        names = filter_columns(read.filters)
        ds = replace(read, filters=None, spread=False).open(data)
    except Exception:  # the input itself is unreadable: the reader's error says why
        return
    missing = [c for c in names if c not in set(ds.columns)]
    if missing:
        raise DataError(f"filters name column {missing[0]!r}, which {ds.label} does not have; available columns: "
                        f"{short_list(ds.columns, limit=8)}") from None


def _numeric_categories(ds: Dataset, column: str) -> bool:
    """A categorical column whose known categories are all numbers (a hive key such as
    ``month=7/``)."""
    dtype = ds.dtypes[column]
    if not isinstance(dtype, pd.CategoricalDtype) or dtype.categories is None or not len(dtype.categories):
        return False
    return bool(pd.to_numeric(pd.Series(dtype.categories).astype(object), errors="coerce").notna().all())


def left_out_note(who: str, left_out: dict, n_used: int, hint: str = "name them in features= to use them",
                  keep: str = KEEP_HINT, what: str = "default features") -> str:
    """"importances: 3 of 52 columns left out of the default features: 2 constant ('a',
    'b'); 1 hive partition key ('sale_year'); name them in features= to use them"; when
    suspect columns are among them, ``keep`` (the option that keeps them) is named too."""
    why: dict[str, list] = {}
    for f, w in left_out.items():
        why.setdefault(w, []).append(f)
    parts = [f"{len(fs)} {w if len(fs) == 1 else _plural(w)} ({', '.join(map(repr, fs[:10]))}"
             f"{', ...' if len(fs) > 10 else ''})" for w, fs in why.items()]
    n_suspect = sum(len(fs) for w, fs in why.items() if w in SUSPECT_WHYS)
    if n_suspect:
        hint += f"; {keep} keeps the {'suspect column' if n_suspect == 1 else f'{n_suspect} suspect columns'}"
    return (f"{who}: {len(left_out)} of {len(left_out) + n_used} columns left out of the {what}: "
            f"{'; '.join(parts)}; {hint}")


def _plural(why: str) -> str:
    if why in ("likely identifier", "row number", "likely leak") or why.endswith("key"):
        return why + "s"
    return why
