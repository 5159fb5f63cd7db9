"""Job specs: a TOML file -> a validated, immutable :class:`JobSpec`.

Validation is strict and complete: every problem is reported at once, each naming the
dotted key (``stratpd.min_samples_leaf``) and what was expected.  Unknown keys are
errors (with a "did you mean" suggestion), so a typo never silently falls back to a
default.  Relative local paths (``source.path``, ``model.path``, ``output.dir``) are
relative to the directory holding the spec file; URLs (``s3://...``) are left alone.
Those paths and ``cluster.scheduler`` may use ``$VAR``, ``${VAR}`` and
``${VAR:-default}`` (so one spec serves a laptop and a cluster mount); an unset
variable without a default is an error.

The format is documented, with a full example, in docs/jobs.md.
"""
from __future__ import annotations

import difflib
import glob as _glob
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .._data.request import column_list
from ..datasets import MODEL_FITS  # a job's own model ([model] fit): for demos, no file needed
from .schema import METHOD_FUNCTIONS, BadValue as _Bad, Key as _Key, describe_value as _describe
from .schema import method_params, model_params, top_params

__all__ = [
    "SpecError",
    "JobSpec",
    "SourceSpec",
    "ModelSpec",
    "ClusterSpec",
    "OutputSpec",
    "RunSpec",
    "HistorySpec",
    "REFIT_POLICIES",
    "load_spec",
    "parse_spec",
    "check_name",
    "MODEL_FREE_METHODS",
    "MODEL_METHODS",
    "METHODS",
    "METHOD_PARAMS",
]

#: job names and run ids: these characters only, and never ``..``
NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
#: run ids that would collide with the bookkeeping entries of a job directory
RESERVED_NAMES = {"latest", "LATEST", "history", ".cache", "cache"}

MODEL_FREE_METHODS = ("stratpd", "catstratpd", "importances")
MODEL_METHODS = ("partial_dependence", "ice", "ale", "marginal", "pd_variance", "h_statistic")
METHODS = MODEL_FREE_METHODS + MODEL_METHODS
assert set(METHODS) == set(METHOD_FUNCTIONS)
DEFAULT_METHODS = MODEL_FREE_METHODS

SYNTHETIC = ("bulldozer", "quadratic", "linear")
FILTER_OPS = ("=", "==", "!=", "<", "<=", ">", ">=", "in", "not in")
MODEL_FORMATS = ("auto", "skops", "joblib", "pickle")
SOURCE_FORMATS = ("auto", "parquet", "csv", "delta", "iceberg")
#: when an incremental run refits the stratifying trees (docs/jobs.md, "Nightly runs")
REFIT_POLICIES = ("always", "never", "auto")


class SpecError(ValueError):
    """An invalid job spec.  ``errors`` holds one message per problem, each naming its key;
    the message lists them one per line."""

    def __init__(self, source: str, errors: list[str]):
        self.source = source
        self.errors = list(errors)
        if len(self.errors) == 1:
            msg = f"{source}: {self.errors[0]}"
        else:
            msg = f"{source}: {len(self.errors)} problems:" + "".join(f"\n  - {e}" for e in self.errors)
        super().__init__(msg)


# ------------------------------------------------------------------------ checkers
def _str(v):
    if not isinstance(v, str) or not v.strip():
        raise _Bad(f"expected a non-empty string, got {_describe(v)}")
    return v


def _opt_str(v):
    if not isinstance(v, str):
        raise _Bad(f"expected a string, got {_describe(v)}")
    return v


def _bool(v):
    if not isinstance(v, bool):
        raise _Bad(f"expected true or false, got {_describe(v)}")
    return v


def _int(minimum: int, maximum: int | None = None):
    def check(v):
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum or (maximum is not None and v > maximum):
            rng = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
            raise _Bad(f"expected an integer {rng}, got {_describe(v)}")
        return v
    check.__doc__ = f"int>={minimum}"
    return check


def _near(value, options) -> str:
    """`` (did you mean 'x'?)`` for a value close to one of ``options``, else empty."""
    if not isinstance(value, str):
        return ""
    near = difflib.get_close_matches(value, [str(o) for o in options], n=1)
    return f" (did you mean {near[0]!r}?)" if near else ""


def _choice(options):
    def check(v):
        if v not in options:
            raise _Bad(f"expected one of {', '.join(map(repr, options))}, got {_describe(v)}{_near(v, options)}")
        return v
    return check


def _str_list(v, allow_str: bool = False):
    if allow_str and isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or not all(isinstance(s, str) and s for s in v):
        raise _Bad(f"expected an array of non-empty strings, got {_describe(v)}")
    dups = sorted({s for s in v if v.count(s) > 1})
    if dups:
        raise _Bad(f"expected distinct names; {', '.join(map(repr, dups))} repeated")
    return tuple(v)


def _int_list(minimum: int):
    def check(v):
        if not isinstance(v, list) or not v or any(isinstance(i, bool) or not isinstance(i, int) or i < minimum
                                                   for i in v):
            raise _Bad(f"expected a non-empty array of integers >= {minimum}, got {_describe(v)}")
        return tuple(v)
    return check


def _table(v):
    if not isinstance(v, dict):
        raise _Bad(f"expected a table, got {_describe(v)}")
    return dict(v)


def _filters(v):
    """pyarrow/dask DNF: [[col, op, value], ...] (AND) or [[[...], ...], ...] (OR of ANDs)."""
    expected = ('expected an array of [column, operator, value] triples (all must hold), or an array of such '
                'arrays (any group may hold), e.g. [["year", ">=", 2010], ["state", "in", ["CA", "NY"]]]')
    if not isinstance(v, list) or not v:
        raise _Bad(f"{expected}; got {_describe(v)}")

    def triple(t, where):
        if not (isinstance(t, list) and len(t) == 3 and isinstance(t[0], str) and isinstance(t[1], str)):
            raise _Bad(f"{where}: {expected}")
        col, op, val = t
        op = op.strip().lower()
        if op not in FILTER_OPS:
            raise _Bad(f"{where}: operator {t[1]!r} is not one of {', '.join(map(repr, FILTER_OPS))}")
        if op in ("in", "not in"):
            if not isinstance(val, list):
                raise _Bad(f"{where}: operator {op!r} needs an array of values, got {_describe(val)}")
            val = tuple(val)
        elif isinstance(val, (list, dict)):
            raise _Bad(f"{where}: operator {op!r} needs a single value, got {_describe(val)}")
        return (col, "==" if op == "=" else op, val)

    if all(isinstance(t, list) and t and isinstance(t[0], list) for t in v):
        return [[triple(t, f"group {i + 1} item {j + 1}") for j, t in enumerate(g)] for i, g in enumerate(v)]
    return [[triple(t, f"item {j + 1}") for j, t in enumerate(v)]]


def _timestamp(v):
    """A table's pinned time: a TOML date-time, or an ISO 8601 string."""
    import datetime as _dt

    if isinstance(v, _dt.datetime):
        return v.isoformat()
    if isinstance(v, str):
        try:
            _dt.datetime.fromisoformat(v.replace("Z", "+00:00"))
        except ValueError:
            raise _Bad(f"expected an ISO 8601 date-time (e.g. 2026-12-01T00:00:00Z), got {_describe(v)}") from None
        return v
    raise _Bad(f"expected a date-time (TOML or an ISO 8601 string), got {_describe(v)}")


def _class_label(v):
    if isinstance(v, bool) or not isinstance(v, (str, int)):
        raise _Bad(f"expected a class label (string or integer), got {_describe(v)}")
    return v


def _validate_table(raw: dict, schema: dict[str, _Key], prefix: str, errors: list[str]) -> dict:
    out = {}
    for k in raw:
        if k not in schema:
            near = difflib.get_close_matches(k, list(schema), n=1)
            hint = f" (did you mean '{prefix}{near[0]}'?)" if near else ""
            allowed = ", ".join(sorted(schema))
            errors.append(f"unknown key '{prefix}{k}'{hint}; allowed keys here: {allowed}")
    for k, spec in schema.items():
        if k in raw:
            try:
                out[k] = spec.check(raw[k])
            except _Bad as exc:
                errors.append(f"key '{prefix}{k}': {exc}")
        elif spec.required:
            errors.append(f"missing required key '{prefix}{k}'")
        else:
            out[k] = spec.default
    return out


# ---------------------------------------------------------------------- schemas
_TOP = {
    "name": _Key(_str, required=True),
    "description": _Key(_opt_str, ""),
    "target": _Key(_str, required=True),
    "features": _Key(lambda v: _str_list(v, allow_str=True)),
    "exclude": _Key(lambda v: _str_list(v, allow_str=True), ()),
    "categorical": _Key(lambda v: _str_list(v, allow_str=True), ()),
    "numeric": _Key(lambda v: _str_list(v, allow_str=True), ()),
    "stratify_on": _Key(lambda v: _str_list(v, allow_str=True)),
    "methods": _Key(lambda v: _str_list(v, allow_str=True)),
    # sample_size, tree_method, honest, random_state: stratpd's (schema.top_params)
    "source": _Key(_table, required=True),
    "output": _Key(_table, {}),
    "cluster": _Key(_table, {}),
    "model": _Key(_table),
    "run": _Key(_table, {}),
    "history": _Key(_table, {}),
}

def _share(v):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
        raise _Bad(f"expected a number in (0, 1], got {_describe(v)}")
    return float(v)


_RUN = {
    "incremental": _Key(_bool, False),
    "refit": _Key(_choice(REFIT_POLICIES), "auto"),
    "refit_share": _Key(_share, 0.1),
    "first_pass_cache": _Key(_bool, False),
}

def _level(v):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 1:
        raise _Bad(f"expected a number in (0, 1), got {_describe(v)}")
    return float(v)


def _positive(v):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
        raise _Bad(f"expected a number > 0, got {_describe(v)}")
    return float(v)


def _run_id(v):
    v = _str(v)
    try:
        check_name(v, "run id")
    except ValueError as exc:
        raise _Bad(str(exc)) from None
    return v


#: [history]: the drift test of every run (docs/drift.md)
_HISTORY = {
    "n_trials": _Key(_int(2, 10_000), 100),
    "alpha": _Key(_level, 0.01),
    "threshold": _Key(_positive, 0.1),
    "baseline": _Key(_run_id),
    "window": _Key(_int(1)),
}

_SOURCE = {
    "path": _Key(_str),
    "format": _Key(_choice(SOURCE_FORMATS), "auto"),
    "columns": _Key(_str_list),
    "filters": _Key(_filters),
    "storage_options": _Key(_table, {}),
    "read_options": _Key(_table, {}),
    "fingerprint": _Key(_choice(("metadata", "content")), "metadata"),
    "synthetic": _Key(_choice(SYNTHETIC)),
    "iceberg": _Key(_str),
    "catalog": _Key(_str),
    "catalog_properties": _Key(_table, {}),
    "version": _Key(_int(0)),
    "snapshot_id": _Key(_int(0)),
    "timestamp": _Key(_timestamp),
    "rows": _Key(_int(1)),
    "rows_per_file": _Key(_int(1), 50_000),
    "random_state": _Key(_int(0), 0),
    "params": _Key(_table, {}),
}

_OUTPUT = {
    "dir": _Key(_str),
    "plots": _Key(_bool, True),
    "report": _Key(_bool, True),
    "keep": _Key(_int(0), 0),
}

_CLUSTER = {
    "scheduler": _Key(_str),
    "n_workers": _Key(_int(1)),
    "threads_per_worker": _Key(_int(1)),
    "memory_limit": _Key(lambda v: v if isinstance(v, str) and v else _int(1)(v), "auto"),
}

_MODEL = {
    "path": _Key(_str),
    "fit": _Key(_choice(MODEL_FITS)),
    "format": _Key(_choice(MODEL_FORMATS), "auto"),
    "trust_model": _Key(_bool, False),
    "trusted_types": _Key(_str_list, ()),
    "features": _Key(lambda v: _str_list(v, allow_str=True)),
    "columns": _Key(_str_list),
    # response: partial_dependence's (schema.model_params)
    "target_class": _Key(_class_label),
}

#: {method: {parameter: inspect.Parameter}}: not bound here (so a bare annotation), derived from
#: the library on first use by the module ``__getattr__`` below
METHOD_PARAMS: dict


def __getattr__(name):
    if name == "METHOD_PARAMS":  # derived from the library on first use (daskpd.job.schema)
        return method_params()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ---------------------------------------------------------------------- the spec
@dataclass(frozen=True)
class SourceSpec:
    path: str | None  # absolute local path/glob, or a URL; None for a synthetic source
    format: str
    columns: tuple[str, ...] | None
    filters: list | None  # DNF: list of AND-groups of (col, op, value)
    storage_options: dict
    fingerprint: str
    synthetic: str | None
    rows: int | None
    rows_per_file: int
    random_state: int
    params: dict
    read_options: dict = field(default_factory=dict)  # dask.dataframe.read_csv options (CSV sources)
    iceberg: str | None = None  # an Iceberg table named through its catalog ("namespace.table")
    catalog: str | None = None  # that catalog's name (pyiceberg's; default "default")
    catalog_properties: dict = field(default_factory=dict)  # its properties (else pyiceberg's configuration)
    version: int | None = None  # a Delta table's pinned version
    snapshot_id: int | None = None  # an Iceberg table's pinned snapshot
    timestamp: str | None = None  # a table's pinned time (ISO 8601)

    @property
    def is_url(self) -> bool:
        return bool(self.path) and "://" in self.path

    @property
    def is_csv(self) -> bool:
        if self.format != "auto":
            return self.format == "csv"
        p = (self.path or "").lower()
        return p.endswith((".csv", ".csv.gz", ".csv.bz2"))

    @property
    def is_iceberg(self) -> bool:
        return self.iceberg is not None or self.format == "iceberg" or (
            self.format == "auto" and (self.path or "").endswith(".metadata.json"))

    @property
    def label(self) -> str:
        """How the manifest and messages name the source."""
        return f"iceberg:{self.iceberg}" if self.iceberg else str(self.path or self.synthetic)


@dataclass(frozen=True)
class ModelSpec:
    path: str
    format: str
    trust_model: bool
    trusted_types: tuple[str, ...]
    features: tuple[str, ...] | None  # features to explain (default: the job's features the model reads)
    columns: tuple[str, ...] | None  # the model's input columns, when it does not record them
    response: str
    target_class: str | int | None
    n_trials: int = 1  # > 1: bootstrap trials of every model-based method, in the same pass
    bootstrap: bool = True
    subsample_size: float = 0.75
    band: tuple[float, float] = (0.05, 0.95)
    row_id: tuple[str, ...] | None = None  # columns that tell rows apart in the trials' weights
    fit: str | None = None  # a model the run fits on its synthetic source (path: set when it is saved)


@dataclass(frozen=True)
class ClusterSpec:
    scheduler: str | None
    n_workers: int | None
    threads_per_worker: int | None
    memory_limit: str | int


@dataclass(frozen=True)
class OutputSpec:
    dir: str | None  # absolute, or None (then the CLI's --output or ./daskpd-runs)
    plots: bool
    report: bool
    keep: int  # keep the newest N runs of this job (0: keep all)


@dataclass(frozen=True)
class RunSpec:
    incremental: bool = False  # reuse the previous run's stratification and sums; scan only appended files
    refit: str = "auto"  # "always" | "never" | "auto" (refit past refit_share of appended rows)
    refit_share: float = 0.1  # auto: refit once the rows appended since the fit exceed this share of its rows
    first_pass_cache: bool = False  # keep pass 1 per file (JOB/cache/firstpass): a rerun reads only unseen files in it


@dataclass(frozen=True)
class HistorySpec:
    n_trials: int = 100  # the trials of the new-against-old comparison (its own: the sums hold none)
    alpha: float = 0.01  # family-wise false-alarm level of a comparison (all its curves)
    threshold: float = 0.1  # a drifted curve moved by more than this share of its scale
    baseline: str | None = None  # also compare the rows since this run with the rows up to it
    window: int | None = None  # also compare the last N runs' new rows with the rows before them


@dataclass(frozen=True)
class JobSpec:
    name: str
    description: str
    target: str
    features: tuple[str, ...] | None  # None: every column but the target and `exclude`
    exclude: tuple[str, ...]
    categorical: tuple[str, ...]
    methods: tuple[str, ...]
    sample_size: int
    random_state: int
    source: SourceSpec
    output: OutputSpec
    cluster: ClusterSpec
    model: ModelSpec | None
    params: dict = field(default_factory=dict)  # method -> {param: value}
    spec_path: str | None = None
    spec_text: str | None = None
    tree_method: str = "hist"  # the stratifying trees: "hist" (daskpd's) or "exact" (scikit-learn's)
    honest: bool = True  # 2-fold cross-fitted trees (False: one tree stratifies every row, as stratx)
    numeric: tuple[str, ...] = ()  # columns read as numbers (a hive key such as month=7/)
    stratify_on: tuple[str, ...] | None = None  # None: the features (each stratified on the others)
    run: RunSpec = field(default_factory=RunSpec)  # [run]: incremental runs and the refit policy
    keep_suspect: bool = False  # suspect columns stay in the default features / stratifying columns
    history: HistorySpec = field(default_factory=HistorySpec)  # [history]: the drift test

    @property
    def model_free(self) -> tuple[str, ...]:
        return tuple(m for m in self.methods if m in MODEL_FREE_METHODS)

    @property
    def model_based(self) -> tuple[str, ...]:
        return tuple(m for m in self.methods if m in MODEL_METHODS)

    def to_dict(self) -> dict:
        """JSON-able form (for the manifest); filters' tuples become lists."""
        d = asdict(self)
        d.pop("spec_text", None)
        from ..results.base import json_clean  # numpy/pandas: only when a run needs it

        return json_clean(d)


def check_name(value, what: str = "job name") -> str:
    """A job name / run id: ``[A-Za-z0-9_.-]+``, no ``..``, not hidden, not reserved."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} must be a non-empty string")
    if not NAME_RE.match(value):
        raise ValueError(f"{what} {value!r} may contain only letters, digits, '_', '.' and '-'")
    if ".." in value:
        raise ValueError(f"{what} {value!r} must not contain '..'")
    if value.startswith("."):
        raise ValueError(f"{what} {value!r} must not start with '.'")
    if value in RESERVED_NAMES:
        raise ValueError(f"{what} {value!r} is reserved")
    if len(value) > 128:
        raise ValueError(f"{what} {value!r} is longer than 128 characters")
    return value


_ENV_RE = re.compile(r"\$(?:\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))")


def expand_env(value: str, key: str, errors: list[str], environ=None) -> str:
    """Expand ``$VAR``, ``${VAR}`` and ``${VAR:-default}`` (an unset VAR without default is an error)."""
    env = os.environ if environ is None else environ

    def sub(m):
        name = m["braced"] or m["bare"]
        if name in env and (env[name] != "" or m["default"] is None):
            return env[name]
        if m["default"] is not None:
            return m["default"]
        errors.append(f"key '{key}': environment variable {name} is not set (in {value!r}; "
                      f"use ${{{name}:-default}} for a default)")
        return m.group(0)

    return _ENV_RE.sub(sub, value)


def _resolve_local(path: str, base: Path) -> str:
    if "://" in path:
        return path
    p = Path(os.path.expanduser(path))
    if not p.is_absolute():
        p = base / p
    return os.path.normpath(str(p))


def _local_exists(path: str) -> bool:
    if any(ch in path for ch in "*?["):
        return bool(_glob.glob(path, recursive=True))
    return os.path.exists(path)


def parse_spec(raw: dict, *, base_dir: str | os.PathLike = ".", source: str = "job spec",
               spec_text: str | None = None, spec_path: str | None = None, check_files: bool = True) -> JobSpec:
    """Validate a parsed TOML document; raise :class:`SpecError` listing every problem."""
    errors: list[str] = []
    base = Path(base_dir).resolve()
    if not isinstance(raw, dict):
        raise SpecError(source, ["expected a TOML document (a table of keys)"])
    method_schemas = method_params()
    method_tables = {m: raw[m] for m in method_schemas if m in raw}
    top_raw = {k: v for k, v in raw.items() if k not in method_schemas}
    schema = {**_TOP, **top_params()}
    top = _validate_table(top_raw, {**schema, **{m: _Key(_table) for m in method_schemas}}, "", errors)

    # name
    if isinstance(top.get("name"), str):
        try:
            check_name(top["name"], "key 'name': job name")
        except ValueError as exc:
            errors.append(str(exc))

    # methods
    methods = top.get("methods")
    if methods is None:
        methods = DEFAULT_METHODS + (("partial_dependence",) if top.get("model") is not None else ())
    else:
        bad = [m for m in methods if m not in METHODS]
        if bad:
            errors.append(f"key 'methods': unknown method{'s' if len(bad) > 1 else ''} "
                          f"{', '.join(repr(m) + _near(m, METHODS) for m in bad)}; expected some of "
                          f"{', '.join(METHODS)}")
        if not methods:
            errors.append(f"key 'methods': expected at least one of {', '.join(METHODS)}")
    methods = tuple(m for m in methods if m in METHODS)

    # method parameter tables
    params = {}
    for m, sch in method_schemas.items():
        t = method_tables.get(m)
        if t is not None and not isinstance(t, dict):
            errors.append(f"key '{m}': expected a table of {m} parameters, got {_describe(t)}")
            t = None
        params[m] = _validate_table(t or {}, sch, f"{m}.", errors)
        if t is not None and m not in methods:
            errors.append(f"table [{m}] is given but '{m}' is not in 'methods' ({', '.join(methods) or 'none'})")

    # source
    src = None
    if isinstance(top.get("source"), dict):
        s = _validate_table(top["source"], _SOURCE, "source.", errors)
        has_path, has_syn, has_ice = (s.get(k) is not None for k in ("path", "synthetic", "iceberg"))
        given = [k for k in ("path", "synthetic", "iceberg") if k in top["source"]]  # an invalid one is reported already
        if has_path + has_syn + has_ice != 1 and len(given) != 1:
            errors.append("table [source]: expected exactly one of 'source.path' (parquet/CSV file, glob, "
                          "directory or URL, a Delta table's directory, an Iceberg table's metadata JSON), "
                          "'source.iceberg' (an Iceberg table through its catalog) and 'source.synthetic' (one of "
                          + ", ".join(map(repr, SYNTHETIC)) + ")")
        _check_table_keys(s, top["source"], errors)
        if has_syn:
            if s.get("rows") is None:
                errors.append("missing required key 'source.rows' (rows of the synthetic dataset)")
            for k in ("columns", "filters"):
                if s.get(k) is not None:
                    errors.append(f"key 'source.{k}' applies to files only, not to a synthetic source")
            if s.get("format") != "auto":
                errors.append("key 'source.format' applies to files only, not to a synthetic source")
        elif has_path or has_ice:
            for k in ("rows", "rows_per_file", "random_state", "params"):
                if k in top["source"]:
                    errors.append(f"key 'source.{k}' applies only to a synthetic source")
        path = s.get("path")
        if isinstance(path, str):
            path = _resolve_local(expand_env(path, "source.path", errors), base)
            if check_files and "://" not in path and not _local_exists(path):
                errors.append(f"key 'source.path': {path!r} does not exist"
                              + (" (the glob matches no file)" if any(c in path for c in "*?[") else ""))
        src = SourceSpec(
            path=path, format=s.get("format", "auto"), columns=s.get("columns"), filters=s.get("filters"),
            storage_options=s.get("storage_options") or {}, fingerprint=s.get("fingerprint", "metadata"),
            synthetic=s.get("synthetic"), rows=s.get("rows"), rows_per_file=s.get("rows_per_file", 50_000),
            random_state=s.get("random_state", 0), params=s.get("params") or {},
            read_options=s.get("read_options") or {}, iceberg=s.get("iceberg"), catalog=s.get("catalog"),
            catalog_properties={k: str(v) for k, v in (s.get("catalog_properties") or {}).items()},
            version=s.get("version"), snapshot_id=s.get("snapshot_id"), timestamp=s.get("timestamp"),
        )
        if src.format == "delta" and check_files and isinstance(src.path, str) and "://" not in src.path \
                and not os.path.isdir(os.path.join(src.path, "_delta_log")):
            errors.append(f"key 'source.format': \"delta\", but {src.path!r} holds no _delta_log/ directory")
        if src.read_options and not src.is_csv:
            errors.append("key 'source.read_options': applies to CSV sources only (source.path ending in .csv, "
                          "or source.format = \"csv\")")
        if src.synthetic and src.params:
            _check_synthetic_params(src.synthetic, src.params, errors)

    # output
    out = _validate_table(top.get("output") or {}, _OUTPUT, "output.", errors)
    out_dir = out.get("dir")
    if isinstance(out_dir, str):
        out_dir = expand_env(out_dir, "output.dir", errors)
    output = OutputSpec(dir=_resolve_local(out_dir, base) if isinstance(out_dir, str) else None,
                        plots=out.get("plots", True), report=out.get("report", True), keep=out.get("keep", 0))
    if output.report and not output.plots:
        errors.append("key 'output.report': the report embeds the plots; set output.plots = true or "
                      "output.report = false")

    # cluster
    c = _validate_table(top.get("cluster") or {}, _CLUSTER, "cluster.", errors)
    if isinstance(c.get("scheduler"), str):
        c["scheduler"] = expand_env(c["scheduler"], "cluster.scheduler", errors)
    cluster = ClusterSpec(scheduler=c.get("scheduler"), n_workers=c.get("n_workers"),
                          threads_per_worker=c.get("threads_per_worker"), memory_limit=c.get("memory_limit", "auto"))

    # run
    r = _validate_table(top.get("run") or {}, _RUN, "run.", errors)
    run = RunSpec(incremental=r.get("incremental", False), refit=r.get("refit", "auto"),
                  refit_share=r.get("refit_share", 0.1), first_pass_cache=r.get("first_pass_cache", False))

    # history
    hs = _validate_table(top.get("history") or {}, _HISTORY, "history.", errors)
    if hs.get("baseline") is not None and hs.get("window") is not None:
        errors.append("keys 'history.baseline' and 'history.window': give one or the other")
    history = HistorySpec(n_trials=hs.get("n_trials", 100), alpha=hs.get("alpha", 0.01),
                          threshold=hs.get("threshold", 0.1), baseline=hs.get("baseline"), window=hs.get("window"))

    # model
    model = None
    if isinstance(top.get("model"), dict):
        mt = _validate_table(top["model"], {**_MODEL, **model_params()}, "model.", errors)
        mpath, fit = mt.get("path"), mt.get("fit")
        if "path" in top["model"] and "fit" in top["model"]:
            errors.append("table [model]: give one of 'model.path' (a saved model) and 'model.fit' (a model the run "
                          "fits on its synthetic source), not both")
        elif "path" not in top["model"] and "fit" not in top["model"]:
            errors.append("missing required key 'model.path' (the saved model; or 'model.fit' with a synthetic "
                          "source)")
        if fit is not None:
            if src is not None and src.synthetic is None:
                errors.append(f"key 'model.fit': a job fits {fit!r} on a synthetic source only (a demo); for your "
                              "data, fit the model yourself, save it with skops and give 'model.path'")
            model = ModelSpec(path="", format="skops", trust_model=True, trusted_types=(),
                              features=mt.get("features"), columns=mt.get("columns"),
                              response=mt.get("response", "auto"), target_class=mt.get("target_class"),
                              n_trials=mt.get("n_trials", 1), bootstrap=mt.get("bootstrap", True),
                              subsample_size=mt.get("subsample_size", 0.75), band=tuple(mt.get("band", (0.05, 0.95))),
                              row_id=tuple(column_list(mt.get("row_id"))) or None, fit=fit)
        if isinstance(mpath, str):
            mpath = _resolve_local(expand_env(mpath, "model.path", errors), base)
            if "://" in mpath:
                errors.append(f"key 'model.path': expected a local file, got the URL {mpath!r}")
            elif check_files and not os.path.isfile(mpath):
                errors.append(f"key 'model.path': {mpath!r} does not exist")
            fmt = mt.get("format", "auto")
            if fmt == "auto":
                fmt = _model_format(mpath)
                if fmt is None:
                    errors.append(f"key 'model.format': cannot tell the format of {os.path.basename(mpath)!r} "
                                  "from its extension (.skops, .joblib, .pkl/.pickle); set model.format")
            if fmt in ("joblib", "pickle") and not mt.get("trust_model", False):
                errors.append(f"key 'model.trust_model': the model {os.path.basename(mpath)!r} is a {fmt} file, and "
                              "loading one runs arbitrary code; set model.trust_model = true only if you trust "
                              "its origin (or save the model with skops)")
            model = ModelSpec(path=mpath, format=fmt or "auto", trust_model=mt.get("trust_model", False),
                              trusted_types=mt.get("trusted_types", ()), features=mt.get("features"),
                              columns=mt.get("columns"), response=mt.get("response", "auto"),
                              target_class=mt.get("target_class"), n_trials=mt.get("n_trials", 1),
                              bootstrap=mt.get("bootstrap", True), subsample_size=mt.get("subsample_size", 0.75),
                              band=tuple(mt.get("band", (0.05, 0.95))),
                              row_id=tuple(column_list(mt.get("row_id"))) or None)
    needs_model = [m for m in methods if m in MODEL_METHODS]
    if needs_model and model is None and "model" not in top_raw:
        errors.append(f"key 'methods': {', '.join(needs_model)} need{'s' if len(needs_model) == 1 else ''} a model; "
                      "add a [model] table with the model's path")
    if (model is not None and model.n_trials > 1 and "partial_dependence" in methods
            and params.get("partial_dependence", {}).get("method") == "recursion"):
        errors.append("key 'partial_dependence.method': \"recursion\" reads no rows, so it has no bootstrap trials; "
                      "with model.n_trials > 1 use \"brute\" or \"auto\"")
    if model is not None and not needs_model and "methods" in top_raw:
        errors.append("table [model] is given but 'methods' lists no model-based method (one of "
                      + ", ".join(MODEL_METHODS) + ")")

    # features
    target = top.get("target")
    feats = top.get("features")
    if isinstance(target, str):
        for k in ("features", "exclude", "categorical", "numeric", "stratify_on"):
            v = top.get(k)
            if v and target in v:
                errors.append(f"key '{k}': lists the target {target!r}")
        if src is not None and src.columns is not None and target not in src.columns:
            errors.append(f"key 'source.columns': does not list the target {target!r}")
    if feats is not None:
        if not feats:
            errors.append("key 'features': expected at least one feature (omit the key for every column "
                          "but the target)")
        if top.get("exclude"):
            errors.append("keys 'features' and 'exclude': give one or the other")
        if src is not None and src.columns is not None:
            miss = [f for f in feats if f not in src.columns]
            if miss:
                errors.append(f"key 'features': {', '.join(map(repr, miss))} not in 'source.columns'")
    both = [c for c in top.get("numeric") or () if c in (top.get("categorical") or ())]
    if both:
        errors.append(f"keys 'numeric' and 'categorical': both list {both[0]!r}")
    if top.get("stratify_on") is not None and not top["stratify_on"]:
        errors.append("key 'stratify_on': expected at least one column (omit the key to stratify on the features)")
    if errors:
        raise SpecError(source, errors)
    return JobSpec(
        name=top["name"], description=top["description"], target=target, features=feats,
        exclude=top["exclude"], categorical=top["categorical"], methods=methods,
        sample_size=top["sample_size"], random_state=top["random_state"], source=src, output=output,
        cluster=cluster, model=model, params={m: params[m] for m in methods if m in params},
        spec_path=spec_path, spec_text=spec_text, tree_method=top["tree_method"], honest=top["honest"],
        numeric=top["numeric"], stratify_on=top["stratify_on"], run=run, keep_suspect=top["keep_suspect"],
        history=history,
    )


#: the [source] keys that pin or name a table, and the sources they apply to
_TABLE_KEYS = {"version": "a Delta table", "snapshot_id": "an Iceberg table", "catalog": "an Iceberg table",
               "catalog_properties": "an Iceberg table"}


def _check_table_keys(s: dict, given: dict, errors: list[str]) -> None:
    """The keys of a Delta / Iceberg source: each with the source it applies to."""
    fmt, path = s.get("format", "auto"), s.get("path") or ""
    iceberg = s.get("iceberg") is not None or fmt == "iceberg" or (fmt == "auto" and path.endswith(".metadata.json"))
    if s.get("iceberg") is not None and fmt not in ("auto", "iceberg"):
        errors.append(f"key 'source.format': {fmt!r}, but 'source.iceberg' names an Iceberg table")
    for k, what in _TABLE_KEYS.items():
        if k not in given:
            continue
        if what == "an Iceberg table" and not iceberg:
            errors.append(f"key 'source.{k}': applies to an Iceberg table only ('source.iceberg', or a path to a "
                          "metadata JSON)")
        elif what == "a Delta table" and (iceberg or fmt in ("csv", "parquet") or s.get("synthetic") is not None):
            errors.append(f"key 'source.{k}': applies to a Delta table only (a directory holding _delta_log/)")
    if "timestamp" in given and ("version" in given or "snapshot_id" in given):
        errors.append("keys 'source.timestamp' and 'source.version' / 'source.snapshot_id': give one or the other")
    if "timestamp" in given and (fmt in ("csv", "parquet") or s.get("synthetic") is not None):
        errors.append("key 'source.timestamp': applies to a Delta or Iceberg table only")


def _model_format(path: str) -> str | None:
    p = path.lower()
    if p.endswith(".skops"):
        return "skops"
    if p.endswith((".joblib", ".jbl")):
        return "joblib"
    if p.endswith((".pkl", ".pickle")):
        return "pickle"
    return None


def _check_synthetic_params(name: str, params: dict, errors: list[str]) -> None:
    import dataclasses

    from ..datasets import GENERATORS

    gen = GENERATORS[name]
    allowed = {f.name for f in dataclasses.fields(gen)} - {"random_state", "chunk_rows"}
    for k, v in params.items():
        if k not in allowed:
            near = difflib.get_close_matches(k, sorted(allowed), n=1)
            hint = f" (did you mean 'source.params.{near[0]}'?)" if near else ""
            errors.append(f"unknown key 'source.params.{k}'{hint}; the {name} generator takes: "
                          + ", ".join(sorted(allowed)))
        elif isinstance(v, (dict, bool)) or (isinstance(v, list) and not all(isinstance(i, (int, float)) for i in v)):
            errors.append(f"key 'source.params.{k}': expected a number or an array of numbers, got {_describe(v)}")


def load_spec(path: str | os.PathLike, *, check_files: bool = True) -> JobSpec:
    """Read and validate a TOML job spec file."""
    try:
        import tomllib
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        import tomli as tomllib

    path = Path(path)
    label = str(path)
    if not path.exists():
        raise SpecError(label, ["the job spec file does not exist"])
    if path.is_dir():
        raise SpecError(label, ["is a directory; expected a TOML job spec file"])
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(label, [f"cannot read the job spec: {exc}"]) from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(label, [f"invalid TOML: {exc}"]) from None
    return parse_spec(raw, base_dir=path.resolve().parent, source=label, spec_text=text,
                      spec_path=str(path.resolve()), check_files=check_files)
