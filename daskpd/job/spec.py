"""Job specs: a TOML file -> a validated, immutable :class:`JobSpec`.

The spec's tables as frozen dataclasses (:class:`JobSpec` and its parts), the method
lists and the names' rule; the keys and their checks are :mod:`daskpd.job.spec_keys`,
reading a file :mod:`daskpd.job.spec_parse`.

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

import dataclasses
import re
from dataclasses import asdict, dataclass, field

from .._errors import DataError
from ..results.base import json_clean
from .schema import METHOD_FUNCTIONS, method_params

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


#: the model-free methods: "binned_mean" is the binned mean of y of the numeric features,
#: an extra estimator run in the same scan (``daskpd.strat_curves_and_importances(estimators=)``)
MODEL_FREE_METHODS = ("stratpd", "catstratpd", "importances", "binned_mean")


MODEL_METHODS = ("partial_dependence", "ice", "ale", "marginal", "pd_variance", "h_statistic")


METHODS = MODEL_FREE_METHODS + MODEL_METHODS
assert set(METHODS) == set(METHOD_FUNCTIONS)


DEFAULT_METHODS = ("stratpd", "catstratpd", "importances")


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


#: {method: {parameter: inspect.Parameter}}: not bound here (so a bare annotation), derived from
#: the library on first use by the module ``__getattr__`` below
METHOD_PARAMS: dict


def __getattr__(name):
    if name == "METHOD_PARAMS":  # derived from the library on first use (daskpd.job.schema)
        return method_params()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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


def with_run_keys(spec: JobSpec, incremental: bool | None, refit: str | None, first_pass_cache: bool | None) -> JobSpec:
    """``spec`` with the caller's ``[run]`` keys (None: the spec's own)."""
    if incremental is None and refit is None and first_pass_cache is None:
        return spec
    if refit is not None and refit not in REFIT_POLICIES:
        raise DataError(f"refit must be one of {', '.join(map(repr, REFIT_POLICIES))}, got {refit!r}")
    return dataclasses.replace(spec, run=dataclasses.replace(
        spec.run, **({} if incremental is None else {"incremental": bool(incremental)}),
        **({} if refit is None else {"refit": refit}),
        **({} if first_pass_cache is None else {"first_pass_cache": bool(first_pass_cache)})))
