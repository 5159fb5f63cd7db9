"""Compute a job: every model-free method in ONE ``run_strat`` (StratPD, CatStratPD and
the importances share the sample and the scan), every model-based method in ONE merged
model plan (:func:`daskpd.model._multi.model_methods`), on the cluster the job names
(:mod:`daskpd.job.connection`).
"""
from __future__ import annotations

import contextlib
import time
import warnings

from .._data.source import open_dataset
from .._engine.memory import partition_bytes
from .._errors import DataError
from .._importance import importance_request, strat_curves_and_importances
from .._strat.estimators import ESTIMATORS, EXTRA_METHODS, estimator_named, estimator_of_method, method_of
from .._strat.firstpass import start_cache_files
from .._strat.options import FinishOptions
from .._strat.pipeline import drawn_sample_size, first_pass_inputs
from ..model._multi import Increment, model_methods
from ..model._params import ModelOptions, TrialOptions
from . import model_state, newold
from .inputs import log_line
from .spec import METHOD_PARAMS, JobSpec

__all__ = ["RunResult", "model_free", "start_new_files_cache", "first_pass_stats", "model_based", "method_defaults"]


#: the methods of the model-free estimators' curves (StratPD, CatStratPD, the binned mean of y)
MODEL_FREE_CURVES = tuple(e.method for e in ESTIMATORS.values())


class RunResult:
    """What a run computed, before it is written: result objects in the shared format."""

    def __init__(self):
        self.curves: dict = {}  # (method, feature) -> a CurveResult
        self.tables: dict = {}  # method -> a result whose to_frame() is an importance table
        self.interactions: dict = {}  # method -> an interaction table (h_statistic's HStatisticResult)
        self.figures: dict = {}
        self.phases: list = []  # the model plan's phases, by name
        self.stratification = None  # the model-free stratification (daskpd.Stratification)
        self.state = None  # its merged sums (daskpd.ScanState), kept for incremental runs
        self.model_state = None  # (layout, partials) of the model-based plan, kept for incremental runs
        self.comparisons: list = []  # the run's new-against-old comparisons (daskpd.job.newold.Comparison)
        self.notes: list = []  # lines for the run's log, found while computing ("daskpd: " is added)


def model_free(spec: JobSpec, data, feats, cats, res: RunResult, stats: dict, plan=None,
               first_pass_cache=None) -> None:
    """The model-free methods in one ``strat_curves_and_importances``.  ``plan`` (an
    incremental :class:`~daskpd.job.incremental.Plan`): in "incremental" mode only its
    new files are scanned, under its stratification, and their sums added to its state;
    with ``[run] incremental`` the state is kept (``res.state``).  ``first_pass_cache`` (a
    :class:`daskpd.FirstPassCache`): pass 1 reads only the files it does not hold."""
    want = spec.model_free
    p_num = spec.params.get("stratpd") or method_defaults("stratpd")
    p_cat = spec.params.get("catstratpd") or method_defaults("catstratpd")
    p_imp = spec.params.get("importances") or method_defaults("importances")
    # the extra estimators wanted (run besides StratPD on the numeric features, in the same scan)
    extra = tuple(m for m in want if m in EXTRA_METHODS)
    # the features whose curves are wanted (importances need them all)
    if "importances" in want:
        curve_feats = list(feats)
    else:  # the features whose kind's estimator (StratPD: numeric, CatStratPD: categorical) or an extra one is wanted
        curve_feats = [f for f in feats for kind in ["categorical" if f in cats else "numeric"]
                       if estimator_named(kind).method in want
                       or any(estimator_of_method(m).column_kind == kind for m in extra)]
    if not curve_feats:
        kinds = " or ".join(dict.fromkeys(estimator_of_method(m).column_kind for m in want if m != "importances"))
        raise DataError(f"methods {', '.join(want)}: none of the features is {kinds} "
                        f"(features: {', '.join(feats)}; categorical: {', '.join(cats) or 'none'})")
    columns = dict(target=spec.target,
                   stratify_on=list(spec.stratify_on) if spec.stratify_on is not None else list(feats),
                   categorical_features=list(cats),
                   numeric_features=[c for c in spec.numeric if c in feats or c in (spec.stratify_on or ())])
    under = {}
    lake, lake_feats = data, list(curve_feats)  # what a run fitting the trees again reads: its pass 1's request
    if plan is not None and plan.mode == "incremental":
        strat = plan.stratification
        curve_feats = [f for f in curve_feats if f in strat.features]
        data = _new_files(spec, data, plan.new_files)
        under = {"stratification": strat, "base_state": plan.load_state(), "keep_state": True}
    elif spec.run.incremental:  # the scan's buckets write the sums next to the runs (hard-linked into the state)
        under = {"keep_state": str(plan.job_dir) if plan is not None and plan.job_dir is not None else True}
    pending = None
    if first_pass_cache is not None and under.get("stratification") is not None and plan.new_files:
        # the new files' pass 1 for the cache (the next run that refits reads it): submitted first at a low
        # priority, it runs on the threads the scan leaves free, mostly while the driver finishes the curves
        pending = start_new_files_cache(spec, lake, lake_feats, columns, first_pass_cache, plan.new_files)
    common = dict(min_samples_leaf=p_num["min_samples_leaf"], cat_min_samples_leaf=p_cat["min_samples_leaf"],
                  min_slopes_per_x=p_num["min_slopes_per_x"], few_slopes=p_num["few_slopes"],
                  max_bins=p_num["max_bins"], nan_as_level=p_cat["nan_as_level"], sample_size=spec.sample_size,
                  tree_method=spec.tree_method, honest=spec.honest, random_state=spec.random_state,
                  **columns)
    # the features and stratifying columns the spec leaves to the job are default sets: the
    # suspect columns the tree sample flags leave them (unless keep_suspect)
    default_strat = spec.stratify_on is None and spec.features is None
    call = dict(common)
    if under.get("stratification") is not None:  # the stratifying columns the stratification was fitted on
        call["stratify_on"] = list(under["stratification"].stratify_on)
    early = {}  # an incremental night's nightly comparison, started as soon as the new files' sums are gathered
    hook = contextlib.nullcontext()
    if under.get("stratification") is not None and any(
            c.reference.test == "new-vs-old" and not c.reference.skip for c in res.comparisons):
        from .._strat.apart import new_state_hook

        strat = under["stratification"]
        methods = newold.curve_entries([(m, f) for f in curve_feats if f in strat.features
                                        for m in ["catstratpd" if f in cats else "stratpd", *extra] if m in want])

        def start(new_state):  # its tasks run on the workers while the driver merges the sums
            early["new-vs-old"] = (methods, newold.start_compare(
                new_state, strat, methods, spec.history.n_trials, finish_options, old_state=under["base_state"]))

        hook = new_state_hook(start)
    finish_options = FinishOptions(min_slopes_per_x=int(p_num["min_slopes_per_x"]), few_slopes=p_num["few_slopes"])
    with warnings.catch_warnings(), hook:  # the job logs the note itself (run_job's log stream), once
        warnings.filterwarnings("ignore", message="importances: .* left out of the default features")
        warnings.filterwarnings("ignore", message="daskpd: .* left out of the stratifying columns")
        out = strat_curves_and_importances(
            data, features=curve_feats, keep_suspect=spec.keep_suspect,
            default_stratify_on=default_strat and not under.get("stratification"), n_trials=p_imp["n_trials"],
            pvalues=p_imp["pvalues"], pvalues_n_trials=p_imp["pvalues_n_trials"],
            pvalues_sample_size=p_imp["pvalues_sample_size"],
            skip_unusable=spec.features is None and not under.get("stratification"),  # the default feature set:
            first_pass_cache=None if under.get("stratification") else first_pass_cache, estimators=extra,
            **call, **under)  # constant columns are left out, counted
    res.stratification, res.state = out.stratification, out.state
    phases = {k: round(float(v), 3) for k, v in (getattr(out, "timings", None) or {}).items()}
    if pending is not None:
        from .._strat.firstpass import finish_cache_files

        t0 = time.perf_counter()
        finish_cache_files(pending)
        phases["first_pass_cache_s"] = round(time.perf_counter() - t0, 3)  # the wait after the scan, and the writes
    stats["model_free_phases_s"] = phases
    stats["kinds_used"] = dict(out.kinds)
    skipped = {**stats.get("skipped_features", {}), **out.params.get("skipped_features", {})}
    if skipped:
        stats["skipped_features"] = skipped
    if out.params.get("skipped_stratify_on"):
        stats["skipped_stratify_on"] = dict(out.params["skipped_stratify_on"])
    for f in curve_feats:
        if f not in out.curves:
            continue
        r = out.curves[f]
        method = method_of(r)
        if method in want:
            res.curves[(method, f)] = r
    for m in extra:  # the extra estimators' curves, after the features' own
        for f, r in out.extra_curves.get(m, {}).items():
            res.curves[(m, f)] = r
    if "importances" in want:
        res.tables["importances"] = out
    if res.comparisons:
        t0 = time.perf_counter()

        def scan(files):  # the files' sums alone, under this run's trees (no trials: the comparison picks its own)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # the run warned about these columns already
                got = strat_curves_and_importances(_new_files(spec, lake, files), n_trials=1,
                                                   features=[f for f in curve_feats if f in out.stratification.features],
                                                   stratification=out.stratification, keep_state=True,
                                                   estimators=extra, **{**common, "stratify_on": list(out.stratification.stratify_on)})
            return got.state

        model_free_comparisons(spec, res, plan, out, scan, finish_options, early)
        phases["new_vs_old_s"] = round(time.perf_counter() - t0, 3)


def model_free_comparisons(spec: JobSpec, res: RunResult, plan, out, scan, finish_options: FinishOptions,
                           early: dict | None = None) -> None:
    """Fill ``res.comparisons`` with the model-free curves' records (:mod:`.newold`):
    an incremental night's nightly comparison takes the new files' sums and the kept
    ones (``early``: ``{"new-vs-old": (methods, started comparison)}``, started while the
    scan merged them); any other (a refit night, a baseline, a window) scans its new
    files under this run's trees (``scan``) and takes their sums off all the rows'."""
    early = early or {}
    for cmp_ in res.comparisons:
        ref = cmp_.reference
        if ref.skip:
            continue
        want = {(m, f) for (m, f) in res.curves if m in MODEL_FREE_CURVES}  # the model-free curves
        keys = newold.curve_entries(want)
        if ref.test == "new-vs-old" and plan.mode == "incremental" and ref.test in early and \
                all(early[ref.test][0].get(k) == m for k, m in keys.items()):
            _, pending = early[ref.test]
            cmp_.records.extend(r for r in pending.result() if (r.method, r.feature) in want)
            continue
        if ref.test == "new-vs-old" and plan.mode == "incremental":
            sides = {"new_state": out.new_state, "old_state": plan.load_state()}
        else:
            sides = {"new_state": scan(ref.new_files), "whole_state": out.state}
        cmp_.records.extend(newold.model_free(spec, ref, out.stratification, res.curves, finish_options, **sides))


def start_new_files_cache(spec: JobSpec, lake, features, columns: dict, cache, files):
    """Start pass 1 of an incremental run's new ``files`` for the first-pass ``cache``
    (:func:`daskpd._strat.firstpass.start_cache_files`), keyed as a run over the whole
    ``lake`` that fits the trees again keys them: the request
    :func:`daskpd.strat_curves_and_importances` opens for ``features`` and ``columns``."""
    request = importance_request(lake, features=features, **columns)
    ddf, caps = first_pass_inputs(request)
    return start_cache_files(request, ddf, cache, files, drawn_sample_size(spec.sample_size, spec.honest),
                             spec.random_state, caps, spec.target)


def _new_files(spec: JobSpec, data, files):
    """The dataset of an incremental run's new ``files`` (no file: no row to scan), read
    as the whole input reads them (:meth:`daskpd._data.source.Dataset.restrict`: the same
    columns and types, hive keys and a table's partition columns included)."""
    if not files:
        return open_dataset(data.frame.iloc[:0] if data.is_pandas else data.frame._meta)
    return data.restrict(list(files), partition_bytes=partition_bytes())


def first_pass_stats(cache, log, new_files_only: bool = False) -> dict:
    """The manifest's ``first_pass_cache`` record of a run, and its line on ``log``;
    ``new_files_only``: an incremental run, which kept the new files' pass 1
    (:func:`start_new_files_cache`) and ran none over the lake."""
    st = cache.stats
    bad = st.get("unusable") or []
    if bad:  # damaged entries: their files were read again (never a stale or altered pass 1)
        shown = "; ".join(f"cache/firstpass/{n} {what}" for n, what in bad[:3])
        log_line(log, f"daskpd: first-pass cache: {len(bad)} entr{'y' if len(bad) == 1 else 'ies'} not used, "
                      f"{'its file' if len(bad) == 1 else 'their files'} read again: {shown}"
                      + (f" (and {len(bad) - 3} more)" if len(bad) > 3 else ""))
    if st.get("off"):
        log_line(log, f"daskpd: first-pass cache not used: {st['off']}")
        return {"used": False, "reason": st["off"]}
    if new_files_only:
        log_line(log, f"daskpd: first pass: the trees are kept, no pass over the lake; {st['misses']} new file(s) "
                      f"read into the cache" + (f", {st['hits']} in it already" if st["hits"] else ""))
        return {"used": True, "hits": int(st["hits"]), "misses": int(st["misses"]), "read_again": [],
                "bytes": int(st["bytes"]), "path": "cache/firstpass", "new_files_only": True}
    again = st.get("read_again") or []
    log_line(log, f"daskpd: first pass: {st['hits']} file(s) from the cache, {st['misses']} read"
             + (f"; read again, their cached rows stopping above the sample's cutoff: {', '.join(again)}"
                if again else ""))
    return {"used": True, "hits": int(st["hits"]), "misses": int(st["misses"]), "read_again": list(again),
            "bytes": int(st["bytes"]), "path": "cache/firstpass",
            **({"unusable": [{"entry": n, "what": w} for n, w in bad]} if bad else {})}


def method_defaults(method: str) -> dict:
    return {k: v.default for k, v in METHOD_PARAMS[method].items()}


def model_based(spec: JobSpec, ddf, model, inputs, mfeats, cats, res: RunResult, mplan=None) -> None:
    """Every requested model-based method over the model's input columns, in one merged
    plan.  ``mplan`` (a :class:`~daskpd.job.model_state.ModelPlan`): in "incremental" mode
    only its new files are scanned, under its layout, and their partials added to the
    kept ones; with ``[run] incremental`` the layout and the partials are kept
    (``res.model_state``)."""
    methods = {m: dict(spec.params.get(m) or method_defaults(m)) for m in spec.model_based}
    increment = None
    # the nightly comparison of an incremental night: the new files' curves and the kept rows' finished apart
    nightly_cmp = next((c for c in res.comparisons if c.reference.test == "new-vs-old" and not c.reference.skip),
                       None)
    new = _new_files(spec, ddf, mplan.new_files) if mplan is not None and mplan.mode == "incremental" else None
    if new is not None and mplan.new_files:
        _check_layout(spec, new, mplan, nightly_cmp, res)  # may turn the plan into a full one
    if mplan is not None and mplan.mode == "incremental":
        ddf = new
        increment = Increment(mplan.layout, mplan.load_parts(), apart=nightly_cmp is not None)
    out = model_methods(model, ddf, list(mfeats), methods, target=spec.target,
                        model_options=ModelOptions(response=spec.model.response, target_class=spec.model.target_class,
                                                   columns=list(inputs),
                                                   categorical_features=[c for c in cats if c in inputs] or None),
                        trial_options=TrialOptions(n_trials=spec.model.n_trials, bootstrap=spec.model.bootstrap,
                                                   subsample_size=spec.model.subsample_size, band=spec.model.band,
                                                   random_state=spec.random_state, row_id=spec.model.row_id),
                        increment=increment)
    if spec.run.incremental:
        res.model_state = (out.layout, out.parts)
    for method in spec.model_based:  # the spec's order
        r = out.results[method]
        if method == "pd_variance":
            res.tables[method] = r
        elif method == "h_statistic":
            res.interactions[method] = r
        else:
            for f in mfeats:
                res.curves[(method, f)] = r[f]
    res.phases = list(out.phases)
    if increment is not None and increment.apart and out.apart is not None:

        records = newold.model_night(spec.model_based, mfeats, out)
        outside = {it["feature"]: it for it in mplan.outside}
        for r in records:  # compared under the kept layout, which does not reach the new values
            it = outside.get(r.feature)
            if it is None:
                continue
            (lo, hi), (nlo, nhi) = it.get("layout_range") or (0, 0), it.get("new_range") or (0, 0)
            if it["kind"] == "categorical" or nlo < lo or nhi > hi:
                said = "the new rows hold values outside the kept grids and bins, which do not reach them"
            else:
                said = (f"the new rows hold values that {' and '.join(it['held_by'])} (the feature's distinct "
                        f"values, kept) {'does' if len(it['held_by']) == 1 else 'do'} not hold")
            r.note = "; ".join(filter(None, [r.note, f"{said} (the run's log names them)"]))
        nightly_cmp.records.extend(records)


def _check_layout(spec: JobSpec, new, mplan, nightly_cmp, res: RunResult) -> None:
    """An incremental night's model-based plan, before its pass: do the new files hold
    values outside the range the kept grids and bins were built from (one summary pass
    over their feature columns)?  If so, with ``[run] refit = "auto"`` the plan runs in
    full (the grids and bins built again from every row); with ``"never"`` the layout is
    kept; either way the run's log and manifest name the features and the values."""
    try:
        outside = model_state.outside_layout(mplan.layout, new)
    except (DataError, TypeError, ValueError) as exc:  # the check only: the night goes on under the kept layout
        res.notes.append(f"note: the new files' values could not be checked against the kept model-based grids "
                         f"and bins ({type(exc).__name__}: {exc})")
        return
    if not outside:
        return
    mplan.outside = outside
    what = model_state.describe_outside(outside)
    if spec.run.refit == "never":
        res.notes.append(f"warning: the model-based grids and bins of run {mplan.base_run} are kept "
                         f"([run] refit = \"never\") although the new rows fall outside them: {what}. Partial "
                         "dependence and ICE are not evaluated at those values, ALE and the marginal plot leave "
                         "out the rows their kept bins do not hold; refit = \"auto\" builds them again")
        return
    mplan.rebuild(f"the new rows fall outside the grids and bins of run {mplan.base_run} ({what}): they are built "
                  "again from all the rows")
    res.notes.append(f"model-based methods: full after all: the curves are computed again on grids and bins "
                     f"extended to the new values ({what})")
    if nightly_cmp is not None and not nightly_cmp.records and not spec.model_free:
        nightly_cmp.reference.skip = ("the model-based grids and bins were built again (the new rows fall outside "
                                      "the kept ones): no new-against-old comparison of their curves")


