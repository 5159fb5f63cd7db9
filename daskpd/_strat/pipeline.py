"""The model-free pipeline shared by stratpd, catstratpd and importances.

read (needed columns only) -> pass 1: the tree sample, the row count and every
feature's distinct values (:class:`daskpd._engine.sample_pass.SampleJob`) -> one stratifying
tree per feature, fitted in parallel next to the sample -> pass 2: ONE scan applying
every tree, its reduction split into buckets of leaves, each curve finished next to its
data (:class:`daskpd._strat.scan.StratScan`) -> only the curves reach the driver.

Passes over the data: two per request, whatever the number of features and trials
(the trials are a bootstrap of the leaves, made by the finish: nothing rides the rows;
the scan's trees are fitted on the sample, so the two cannot be fused); three
when a partition holds over ``SAMPLE_MARGIN`` times the mean partition's rows and the
sample's rows, which the partitions ship only about their share of, must be drawn again
without that bound (:class:`daskpd._engine.sample_pass.SampleJob`).  The sample and the
trees reach later stages as results of the graphs that made them (futures on a
cluster), never as scattered data, so a lost worker's part is recomputed from lineage.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np
import pandas as pd

from .._data.encode import FeatureEncoder, KeyCoder
from .._data.request import Request
from .._data.suspects import KEEP_HINT, SUSPECT_WHYS
from .._engine import sample_pass, scheduler
from .._engine.hashing import fold_hash, fold_of, hash_order
from .._engine.plan import build_pass
from .._engine.progress import plan_stages, reporting, stage
from .._engine.sample_pass import Sample, SampleJob
from .._errors import DataError
from .apart import call_new_state_hook
from .catstratpd_estimator import CATEGORY_LEVELS_CAP
from .estimators import estimator_named
from .firstpass import cached_first_pass
from .firstpass_partial import TargetRange
from .options import FinishOptions, KeepState, Reuse, StateMode, TreeOptions, Trials
from .positions import extend_coder
from .sample_checks import (
    check_sample,
    check_strata,
    check_target_range,
    leave_out_suspects,
    left_out_whys,
    stamp_target_std,
    target_std,
)
from .scan import FeatureScan, StratScan, leaf_numbering, split_of
from .scan_stage import kept_state, plan_scan, scan_and_finish, solve_kept_buckets, state_parts_dir, with_extra
from .state import ScanState, attach_summaries
from .stratification import Stratification, sample_id
from .stratpd_estimator import NUMERIC_VALUES_CAP
from .trees import bin_sample, fit_honest, fit_tree

__all__ = ["StratRun", "run_strat", "first_pass_inputs", "drawn_sample_size", "NUMERIC_VALUES_CAP",
           "CATEGORY_LEVELS_CAP"]

#: the sample pass merges its partials 8 at a time: they are exact (bottom-k rows, capped
#: distinct sets, min/max), so the tree's shape cannot change a bit, and every partial
#: holds up to ``sample_size`` rows, so a wide merge would be one long task at the end
SAMPLE_FAN_IN = 8
# NUMERIC_VALUES_CAP (StratPD) and CATEGORY_LEVELS_CAP (CatStratPD): each estimator's values_cap


def drawn_sample_size(sample_size: int, honest: bool) -> int:
    """The rows pass 1 draws for a stratification fitted on ``sample_size`` rows: twice
    as many with ``honest`` trees, one fold's tree fitted on each half (a fold's tree then
    has the leaves one tree on ``sample_size`` rows would have; fitted on half of it, its
    leaves were twice as coarse and the curves' RMSE against the truth at 1e6 rows and
    above was worse than one tree's, docs/benchmarks.md)."""
    return int(sample_size) * (2 if honest else 1)


@dataclass
class StratRun:
    # {feature: StratPDResult | CatStratPDResult} (the feature's own estimator), and
    # {(feature, kind): result} of the extra estimators asked for, finished next to the data
    results: dict
    scan: StratScan  # the scan job (trees, coders, bucket count)
    sample: pd.DataFrame  # the tree-fitting sample (hash-ordered bottom-k rows)
    n_rows: int
    n_partitions: int
    kinds: dict
    timings: dict = field(default_factory=dict)
    skipped: dict = field(default_factory=dict)  # {feature: why} left out by skip_constant, or as suspect
    skipped_strat: dict = field(default_factory=dict)  # {column: why} suspect, left out of the stratifying columns
    n_passes: int = 2  # over the data: the sample, the scan (3: the sample drawn again, see SampleJob)
    stratification: Stratification | None = None  # the trees fitted (or the one given)
    state: ScanState | None = None  # with keep_state: the merged sums (base_state included)
    new_state: ScanState | None = None  # with base_state: the sums of the data scanned alone

    @property
    def sample_rows(self) -> int:
        return len(self.sample)


def _same(sample: Sample) -> Sample:
    return sample


def _folds(sample: Sample, hash_columns, random_state) -> np.ndarray:
    """The sample's rows' cross-fitting folds (those the scan gives the same rows)."""
    return fold_of(fold_hash(sample.frame[list(hash_columns)], random_state))


def _fit(sample: Sample, target, other, encoder, min_samples_leaf, random_state, tree_method, binned, folds_of):
    """A feature's stratification: one tree on the sample, or with ``folds_of`` (the
    fold hash's columns: honest) a tree per fold."""
    if folds_of:
        return fit_honest(sample.frame, _folds(sample, folds_of, random_state), target, other, encoder,
                          min_samples_leaf, random_state, tree_method=tree_method, binned=binned)
    return fit_tree(sample.frame, target, other, encoder, min_samples_leaf, random_state, tree_method=tree_method,
                    binned=binned)


def _bin(sample: Sample, target, columns, encoder, folds_of, random_state):
    if folds_of:  # each fold's rows binned on their own: its tree's thresholds fall between its own values
        folds = _folds(sample, folds_of, random_state)
        return tuple(bin_sample(sample.frame.loc[folds == k], target, columns, encoder) for k in (0, 1))
    return bin_sample(sample.frame, target, columns, encoder)


def first_pass_inputs(request: Request) -> tuple:
    """``(ddf, caps)``: the frame pass 1 reads (the request's columns) and every feature's
    cap on its distinct values (:func:`daskpd._strat.firstpass.cache_files` takes the
    same as :func:`run_strat`)."""
    kinds = request.kinds
    caps = {f: estimator_named(kinds[f], f"feature {f!r}").values_cap for f in request.features}
    return request.project(request.read_columns()), caps


def run_strat(
    request: Request,
    *,
    trees: TreeOptions = TreeOptions(),
    trials: Trials = Trials(),
    finish_options: FinishOptions | None = None,
    keep_state: KeepState = KeepState(),
    reuse: Reuse = Reuse(),
    skip_constant: Sequence[str] = (),
    warn_sample: bool = True,
    later_stages: Sequence[str] = (),
    fit_only: bool = False,
    extra: Sequence[str] = (),
) -> StratRun:
    """Run the pipeline for the request's features (each stratified on the request's
    stratifying columns minus itself; :func:`daskpd._data.request.open_request`).

    ``trees`` (:class:`~daskpd._strat.options.TreeOptions`): how the stratifying trees
    are fitted; ``trials`` (:class:`~daskpd._strat.options.Trials`): the finish's
    bootstraps of the leaves.  Every feature's result (StratPDResult for a numeric
    feature, CatStratPDResult for a categorical one) is finished next to its merged sums
    and returned in ``StratRun.results``; ``finish_options``
    (:class:`~daskpd._strat.options.FinishOptions`, None: the defaults) are those of
    :func:`daskpd._strat.numeric_curve.curve_from_sums` / ``categorical.result_of_effects``
    (``min_slopes_per_x``, ``few_slopes``, ``band``, ``centered``, ``n_segments``).
    Features in ``skip_constant`` (a default feature set) that the sample shows to be
    constant or empty are left out (``StratRun.skipped``) instead of raising.
    ``warn_sample``: a warning for each likely identifier, leak or date stored as
    strings among the columns read (:func:`sample_warnings`).  ``later_stages``: the
    stages the caller runs after this (their names, for the progress's "stage n of m").

    ``reuse`` (:class:`~daskpd._strat.options.Reuse`): its ``stratification`` skips the
    sample and the fit, the scan runs under its trees (:func:`run_under`, with its
    ``base_state``); its ``first_pass_cache`` makes pass 1 from the files' cached
    partials, reading only the files it does not hold (:mod:`daskpd._strat.firstpass`;
    the same sample, bit for bit).  ``keep_state`` (the public parameter normalised,
    :meth:`KeepState.of`): also return the scan's merged sums (``StratRun.state``) and
    the stratification.  ``fit_only``: stop after the fit
    (``StratRun.stratification``, no results).  ``extra``: the kind names of estimators
    run besides each feature's own on the features of their column kind, in the same
    scan (:func:`with_extra`; their results keyed ``(feature, kind)``).
    """
    # The parameters were validated by the public function (daskpd._validation).
    finish_options = FinishOptions.of(finish_options)
    target, features, kinds = request.target, list(request.features), dict(request.kinds)
    if not features:
        raise DataError("no features to compute")
    if reuse.stratification is not None:
        return run_under(request, reuse.stratification, trials=trials, finish_options=finish_options,
                         keep_state=keep_state, base_state=reuse.base_state, later_stages=later_stages,
                         extra=extra)
    if reuse.base_state is not None:
        raise DataError("base_state= needs the stratification= it was scanned under")
    strat_cols = list(request.stratify_on)
    ddf, caps = first_pass_inputs(request)
    dtypes = {f: ddf.dtypes[f] for f in features}

    # pass 1: the sample, the row count, the features' distinct values
    random_state, tree_method, honest = trees.random_state, trees.tree_method, trees.honest
    drawn = drawn_sample_size(trees.sample_size, honest)
    t0 = time.perf_counter()
    plan_stages("sample", "fit trees", *(() if fit_only else ("scan and finish",)), *later_stages)
    cached = None
    with stage("sample"):
        if reuse.first_pass_cache is not None:
            cached = cached_first_pass(request, ddf, reuse.first_pass_cache, drawn, random_state, caps, target)
        if cached is not None:  # the sample reaches the fits as the result of a graph, as below
            import warnings

            from dask import delayed

            with warnings.catch_warnings(), reporting(False):  # the sample is embedded in the graph on purpose
                warnings.filterwarnings("ignore", message="Sending large graph")  # (its lineage)
                (sample_h,) = scheduler.materialize(delayed(_same, pure=True)(cached.sample))
            y_range = cached.y_range
        else:
            sample_h, range_h = scheduler.materialize(
                *build_pass(ddf, [SampleJob(drawn, random_state, caps, n_partitions=ddf.npartitions,
                                            margin=sample_pass.SAMPLE_MARGIN),
                                  TargetRange(target)], name="daskpd-sample", fan_in=SAMPLE_FAN_IN))
            y_range = range_h.value
            del range_h
    sample: Sample = sample_h.value
    sample_passes = 1
    if not sample.exact:
        # a partition far above the mean size left out rows of the bottom k: draw the rows
        # again without bounds (the row count and the distinct values are exact already)
        with stage("sample again"):
            (sample_h,) = scheduler.materialize(
                *build_pass(ddf, [SampleJob(drawn, random_state, margin=None)], name="daskpd-sample",
                            fan_in=SAMPLE_FAN_IN))
        sample, sample_passes = Sample(sample_h.value.frame, sample.n_rows, sample.distinct), 2
    skipped = check_sample(sample.frame, target, features, kinds, trees.nan_as_level, set(skip_constant),
                            filters=request.filters)
    check_target_range(target, y_range, sample.n_rows)
    # suspect columns (identifiers, row numbers, leaks, dates as strings) leave the default sets
    features, strat_cols, suspect, skipped_strat = leave_out_suspects(request, sample, features, strat_cols, kinds,
                                                                      warn_sample)
    skipped.update(suspect)
    if skipped:
        features = [f for f in features if f not in skipped]
        if not features:
            if not set(skipped.values()) & set(SUSPECT_WHYS):
                raise DataError(f"every feature is constant or empty (in a sample of {len(sample.frame):,} rows): "
                                f"{', '.join(map(repr, skipped))}")
            raise DataError(f"every default feature was left out (on a sample of {len(sample.frame):,} rows): "
                            f"{left_out_whys(skipped)}; name the features to use, or pass {KEEP_HINT} to keep the suspect "
                            "columns")

    check_strata([f for f in features if estimator_named(kinds[f]).needs_other_columns], strat_cols, request,
                 sample.frame,
                 int(finish_options.min_slopes_per_x),
                 {c: w for c, w in {**skipped, **skipped_strat}.items()
                  if w in SUSPECT_WHYS and c in request.stratify_on})
    # the trees, fitted in parallel next to the sample (on the workers when there is a cluster)
    t1 = time.perf_counter()
    from dask import delayed
    from dask.base import tokenize

    encoder = FeatureEncoder.fit(sample.frame, list(dict.fromkeys([*strat_cols, *features])))
    # the columns of the rows' fold hash: every column read
    hash_cols = hash_order(sample.frame.columns)
    folds_of = hash_cols if honest else None
    token = tokenize(sample_h.ref.key, target, strat_cols, tree_method, random_state, trees.min_samples_leaf,
                     trees.min_samples_leaf_for, folds_of)
    binned = (delayed(_bin, pure=True)(sample_h.ref, target, strat_cols, encoder, folds_of, random_state,
                                       dask_key_name=f"daskpd-bin-{token}")
              if tree_method == "hist" else None)
    others = {f: [c for c in strat_cols if c != f] for f in features}
    msl = {f: trees.leaf_size(f) for f in features}
    tasks = [delayed(_fit, pure=True)(sample_h.ref, target, others[f], encoder, msl[f], random_state, tree_method,
                                      binned, folds_of, dask_key_name=f"daskpd-fit-{token}-{i}")
             for i, f in enumerate(features)]
    with stage("fit trees"):
        fitted = scheduler.compute(*tasks)
    del sample_h  # the scan needs neither the sample nor its future
    t2 = time.perf_counter()

    scans = []
    for i, f in enumerate(features):
        split = split_of(fitted[i], honest)
        leaf_index, n_leaves = leaf_numbering(fitted[i], random_state, i, split)
        coder = estimator_named(kinds[f]).coder(f, sample, trees.max_bins, trees.nan_as_level, dtypes.get(f))
        scans.append(FeatureScan(f, kinds[f], others[f], fitted[i], coder, leaf_index, n_leaves,
                                 min_samples_leaf=msl[f] if fitted[i] is not None else None, split=split))
    strat = _stratification(request, features, kinds, strat_cols, scans, encoder, random_state, sample, hash_cols,
                            dtypes, {"min_samples_leaf": msl, "sample_size": trees.sample_size,
                                     "max_bins": trees.max_bins, "tree_method": tree_method,
                                     "nan_as_level": bool(trees.nan_as_level),
                                     "honest": bool(honest), "left_out": dict(skipped),
                                     "target_std": target_std(sample.frame, target)})
    if fit_only:
        return StratRun(results={}, scan=None, sample=sample.frame, n_rows=sample.n_rows,
                        n_partitions=ddf.npartitions, kinds=kinds,
                        timings={"sample_s": t1 - t0, "fit_s": t2 - t1}, skipped=skipped, n_passes=sample_passes,
                        stratification=strat, skipped_strat=skipped_strat)
    parts_dir = state_parts_dir(keep_state)
    scans = with_extra(strat, scans, extra)
    scan, fan_in, arity = plan_scan(ddf, scans, strat, sample.n_rows, dtypes, trials, random_state, finish_options,
                                     keep_state.mode, parts_dir, strat.hash_columns)
    # pass 2: one scan, every feature, each finished next to its data
    results, kept, parts = scan_and_finish(ddf, scan, fan_in, arity, parts_dir)
    state = None
    if keep_state.keeps:
        state = kept_state(parts, scan, strat.id, sample.n_rows, y_range, ddf.npartitions, parts_dir)
    if kept:  # features whose buckets stayed on the workers (CatStratPD's, many categories): their solves
        results = solve_kept_buckets(results, kept, scan)
    if state is not None:  # the finish summaries the buckets did not make (CatStratPD's)
        attach_summaries(state, strat)
    stamp_target_std(results, strat)
    timings = {"sample_s": t1 - t0, "fit_s": t2 - t1, "scan_s": time.perf_counter() - t2}
    return StratRun(results=results, scan=scan, sample=sample.frame, n_rows=sample.n_rows,
                    n_partitions=ddf.npartitions, kinds=kinds, timings=timings, skipped=skipped,
                    n_passes=sample_passes + 1, stratification=strat, state=state, skipped_strat=skipped_strat)


def _fresh(coder: KeyCoder) -> KeyCoder:
    """A copy without the lookup cache (stratifications are pickled)."""
    return KeyCoder(coder.kind, edges=coder.edges, values=coder.values, nan_level=coder.nan_level)


def _stratification(request, features, kinds, strat_cols, scans, encoder, random_state, sample, hash_cols, dtypes,
                    params) -> Stratification:
    fss = [replace(fs, coder=_fresh(fs.coder)) for fs in scans]
    return Stratification(target=request.target, features=list(features), kinds={f: kinds[f] for f in features},
                          stratify_on=list(strat_cols), scans=fss, encoder=encoder, random_state=int(random_state),
                          params=params, dtypes={f: dtypes.get(f) for f in features}, fitted_rows=int(sample.n_rows),
                          sample_rows=len(sample.frame), sample_id=sample_id(sample.frame),
                          hash_columns=hash_cols)


def run_under(request: Request, strat: Stratification, *, trials: Trials = Trials(),
              finish_options: FinishOptions | None = None, keep_state: KeepState = KeepState(),
              base_state: ScanState | None = None, later_stages: Sequence[str] = (),
              extra: Sequence[str] = ()) -> StratRun:
    """The scan of ``request`` under a fitted stratification: no sample, no fit.

    Pass 1 is reduced to what the positions need -- the row count, the target's range and
    the distinct values / levels of the features that keep exact positions (a binned
    feature keeps its bins) -- so that values and levels the stratification never saw
    get positions of their own.  With ``base_state`` (the state of other data under the
    same stratification) the scan keeps only its sums (no finish) and the results are
    finished from the merged state.  ``trials``: the finish's bootstraps of the leaves
    (:class:`~daskpd._strat.options.Trials`; the trees are the stratification's)."""
    finish_options = FinishOptions.of(finish_options)
    target, features, kinds = request.target, list(request.features), dict(request.kinds)
    strat_cols = list(request.stratify_on)
    # default sets: less the columns the fit left out (suspect, constant)
    dropped = {}
    if request.default_features:
        dropped = {f: strat.params.get("left_out", {}).get(f, "not in stratification=") for f in features
                   if f not in strat.features}
        features = [f for f in features if f not in dropped]
    if request.default_strat and set(strat.stratify_on) <= set(strat_cols):
        strat_cols = list(strat.stratify_on)
    strat.check_request(target, features, strat_cols)
    fss = [strat.scan_of(f) for f in features]
    for fs in fss:
        if kinds[fs.feature] != fs.estimator.column_kind:
            raise DataError(f"feature {fs.feature!r} is {kinds[fs.feature]} here but {fs.estimator.column_kind} in "
                            "stratification=")
    # the rows' hashes are of the columns the stratification's sample hashed (when this
    # data has them all: then a row of the sample falls in the fold it was fitted in)
    hashed = list(strat.hash_columns) if set(strat.hash_columns) <= set(request.dataset.columns) else []
    columns = request.read_columns(*hashed)
    ddf = request.project(columns)
    dtypes = {f: ddf.dtypes[f] for f in features}
    exact = {fs.feature: fs.estimator.values_cap for fs in fss if not fs.coder.binned}
    t0 = time.perf_counter()
    plan_stages("positions", "scan and finish", *later_stages)
    with stage("positions"):
        vocab_h, range_h = scheduler.materialize(
            *build_pass(ddf, [SampleJob(1, strat.random_state, exact, margin=None), TargetRange(target)],
                        name="daskpd-positions", fan_in=SAMPLE_FAN_IN))
    vocab, y_range = vocab_h.value, range_h.value
    del vocab_h, range_h
    t1 = time.perf_counter()
    scans = [replace(fs, coder=extend_coder(fs.coder, vocab.distinct.get(fs.feature), dtypes.get(fs.feature),
                                            fs.feature)) for fs in fss]
    scans = with_extra(strat, scans, extra)
    n_rows = vocab.n_rows
    merge = base_state is not None
    keep = StateMode.ONLY if merge else keep_state.mode
    parts_dir = None if merge else state_parts_dir(keep_state)  # the new files' sums: gathered (small)
    scan, fan_in, arity = plan_scan(ddf, scans, strat, n_rows, dtypes, trials, strat.random_state, finish_options,
                                     keep, parts_dir, hashed or None)
    results, kept, parts = scan_and_finish(ddf, scan, fan_in, arity, parts_dir)
    t2 = time.perf_counter()
    phases = {"positions_s": t1 - t0, "new_scan_s": t2 - t1}
    state = None
    if keep.keeps:
        state = kept_state(parts, scan, strat.id, n_rows, y_range, ddf.npartitions, parts_dir)
    phases["gather_state_s"] = time.perf_counter() - t2
    new_state = None
    if merge:
        t3 = time.perf_counter()
        new_state = state
        call_new_state_hook(new_state)  # e.g. a job's new-against-old comparison, started on the workers
        state, results = base_state.delta_finish(state, strat, finish_options)
        phases["merge_finish_s"] = time.perf_counter() - t3
        modes, secs = state.finish_modes, state.finish_seconds
        phases["features_delta_finished"] = float(sum(m == "delta" for m in modes.values()))
        phases["delta_finish_feature_s"] = sum(secs[f] for f, m in modes.items() if m == "delta")
        phases["merge_finish_feature_s"] = sum(secs[f] for f, m in modes.items() if m != "delta")
        y_range = state.y_range
        n_rows = state.n_rows
    else:
        if kept:
            results = solve_kept_buckets(results, kept, scan)
    if state is not None and not merge:  # the finish summaries the buckets did not make (CatStratPD's)
        t4 = time.perf_counter()
        attach_summaries(state, strat)
        phases["categorical_summary_s"] = time.perf_counter() - t4
    check_target_range(target, y_range, n_rows)
    stamp_target_std(results, strat)
    timings = {"sample_s": t1 - t0, "fit_s": 0.0, "scan_s": time.perf_counter() - t1, **phases}
    return StratRun(results=results, scan=scan, sample=pd.DataFrame(), n_rows=int(n_rows),
                    n_partitions=ddf.npartitions, kinds=kinds, timings=timings, n_passes=2,
                    stratification=strat, state=state, new_state=new_state, skipped=dropped)
