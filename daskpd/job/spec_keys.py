"""The keys of a job spec's tables (:data:`TOP_KEYS`, :data:`SOURCE_KEYS`, ...: each key's
check and default) and the checks of their values; :func:`validate_table` checks one table
against its keys, collecting every problem (see :mod:`daskpd.job.spec`).
"""
from __future__ import annotations

import datetime as _dt
import difflib

from ..datasets import MODEL_FITS  # a job's own model ([model] fit): for demos, no file needed
from .schema import BadValue as _Bad, Key as _Key, describe_value as _describe
from .spec import FILTER_OPS, MODEL_FORMATS, REFIT_POLICIES, SOURCE_FORMATS, SYNTHETIC, check_name

__all__ = ["TOP_KEYS", "SOURCE_KEYS", "OUTPUT_KEYS", "CLUSTER_KEYS", "RUN_KEYS", "HISTORY_KEYS", "MODEL_KEYS",
           "validate_table", "did_you_mean", "check_table"]


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


def did_you_mean(value, options) -> str:
    """`` (did you mean 'x'?)`` for a value close to one of ``options``, else empty."""
    if not isinstance(value, str):
        return ""
    near = difflib.get_close_matches(value, [str(o) for o in options], n=1)
    return f" (did you mean {near[0]!r}?)" if near else ""


def _choice(options):
    def check(v):
        if v not in options:
            raise _Bad(f"expected one of {', '.join(map(repr, options))}, got {_describe(v)}{did_you_mean(v, options)}")
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


def check_table(v):
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


def validate_table(raw: dict, schema: dict[str, _Key], prefix: str, errors: list[str]) -> dict:
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


TOP_KEYS = {
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
    "source": _Key(check_table, required=True),
    "output": _Key(check_table, {}),
    "cluster": _Key(check_table, {}),
    "model": _Key(check_table),
    "run": _Key(check_table, {}),
    "history": _Key(check_table, {}),
}


def _share(v):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
        raise _Bad(f"expected a number in (0, 1], got {_describe(v)}")
    return float(v)


RUN_KEYS = {
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
HISTORY_KEYS = {
    "n_trials": _Key(_int(2, 10_000), 100),
    "alpha": _Key(_level, 0.01),
    "threshold": _Key(_positive, 0.1),
    "baseline": _Key(_run_id),
    "window": _Key(_int(1)),
}


SOURCE_KEYS = {
    "path": _Key(_str),
    "format": _Key(_choice(SOURCE_FORMATS), "auto"),
    "columns": _Key(_str_list),
    "filters": _Key(_filters),
    "storage_options": _Key(check_table, {}),
    "read_options": _Key(check_table, {}),
    "fingerprint": _Key(_choice(("metadata", "content")), "metadata"),
    "synthetic": _Key(_choice(SYNTHETIC)),
    "iceberg": _Key(_str),
    "catalog": _Key(_str),
    "catalog_properties": _Key(check_table, {}),
    "version": _Key(_int(0)),
    "snapshot_id": _Key(_int(0)),
    "timestamp": _Key(_timestamp),
    "rows": _Key(_int(1)),
    "rows_per_file": _Key(_int(1), 50_000),
    "random_state": _Key(_int(0), 0),
    "params": _Key(check_table, {}),
}


OUTPUT_KEYS = {
    "dir": _Key(_str),
    "plots": _Key(_bool, True),
    "report": _Key(_bool, True),
    "keep": _Key(_int(0), 0),
}


CLUSTER_KEYS = {
    "scheduler": _Key(_str),
    "n_workers": _Key(_int(1)),
    "threads_per_worker": _Key(_int(1)),
    "memory_limit": _Key(lambda v: v if isinstance(v, str) and v else _int(1)(v), "auto"),
}


MODEL_KEYS = {
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
