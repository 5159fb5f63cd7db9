"""Reading a job spec: a TOML file (:func:`load_spec`) or its parsed tables
(:func:`parse_spec`) -> a validated :class:`~daskpd.job.spec.JobSpec`, every problem
reported at once; ``$VAR`` expansion (:func:`expand_env`) and the paths made relative to
the spec file (see :mod:`daskpd.job.spec` for the rules).
"""
from __future__ import annotations

import dataclasses
import difflib
import glob as _glob
import os
import re
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from .._data.request import column_list
from ..datasets import GENERATORS
from .schema import Key as _Key, describe_value as _describe
from .schema import method_params, model_params, top_params
from .spec import (DEFAULT_METHODS, METHODS, MODEL_METHODS, SYNTHETIC, ClusterSpec, HistorySpec, JobSpec, ModelSpec,
                   OutputSpec, RunSpec, SourceSpec, SpecError, check_name)
from .spec_keys import (CLUSTER_KEYS, HISTORY_KEYS, MODEL_KEYS, OUTPUT_KEYS, RUN_KEYS, SOURCE_KEYS, TOP_KEYS,
                        check_table, did_you_mean, validate_table)

__all__ = ["load_spec", "parse_spec", "expand_env"]


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
    schema = {**TOP_KEYS, **top_params()}
    top = validate_table(top_raw, {**schema, **{m: _Key(check_table) for m in method_schemas}}, "", errors)

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
                          f"{', '.join(repr(m) + did_you_mean(m, METHODS) for m in bad)}; expected some of "
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
        params[m] = validate_table(t or {}, sch, f"{m}.", errors)
        if t is not None and m not in methods:
            errors.append(f"table [{m}] is given but '{m}' is not in 'methods' ({', '.join(methods) or 'none'})")

    # source
    src = None
    if isinstance(top.get("source"), dict):
        s = validate_table(top["source"], SOURCE_KEYS, "source.", errors)
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
    out = validate_table(top.get("output") or {}, OUTPUT_KEYS, "output.", errors)
    out_dir = out.get("dir")
    if isinstance(out_dir, str):
        out_dir = expand_env(out_dir, "output.dir", errors)
    output = OutputSpec(dir=_resolve_local(out_dir, base) if isinstance(out_dir, str) else None,
                        plots=out.get("plots", True), report=out.get("report", True), keep=out.get("keep", 0))
    if output.report and not output.plots:
        errors.append("key 'output.report': the report embeds the plots; set output.plots = true or "
                      "output.report = false")

    # cluster
    c = validate_table(top.get("cluster") or {}, CLUSTER_KEYS, "cluster.", errors)
    if isinstance(c.get("scheduler"), str):
        c["scheduler"] = expand_env(c["scheduler"], "cluster.scheduler", errors)
    cluster = ClusterSpec(scheduler=c.get("scheduler"), n_workers=c.get("n_workers"),
                          threads_per_worker=c.get("threads_per_worker"), memory_limit=c.get("memory_limit", "auto"))

    # run
    r = validate_table(top.get("run") or {}, RUN_KEYS, "run.", errors)
    run = RunSpec(incremental=r.get("incremental", False), refit=r.get("refit", "auto"),
                  refit_share=r.get("refit_share", 0.1), first_pass_cache=r.get("first_pass_cache", False))

    # history
    hs = validate_table(top.get("history") or {}, HISTORY_KEYS, "history.", errors)
    if hs.get("baseline") is not None and hs.get("window") is not None:
        errors.append("keys 'history.baseline' and 'history.window': give one or the other")
    history = HistorySpec(n_trials=hs.get("n_trials", 100), alpha=hs.get("alpha", 0.01),
                          threshold=hs.get("threshold", 0.1), baseline=hs.get("baseline"), window=hs.get("window"))

    # model
    model = None
    if isinstance(top.get("model"), dict):
        mt = validate_table(top["model"], {**MODEL_KEYS, **model_params()}, "model.", errors)
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
