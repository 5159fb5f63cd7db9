"""Feature importance and impact for every feature, from StratPD / CatStratPD curves.

One request = TWO passes over the data, whatever the number of features ``p`` and of
trials (the pipeline in :mod:`daskpd._strat.pipeline`; a third only when one partition
is far larger than the others and the sample must be drawn again, see ``n_passes``):

1. a bottom-k sample (by keyed row hash, partition-invariant);
2. the p stratifying trees are fitted on the sample, in parallel (on the workers when
   a ``distributed.Client`` is active); then ONE scan applies all p trees and builds
   all p per-(leaf, x) aggregate tables.  Trials are a bootstrap of each
   stratification's leaves, made by the finish from the same sums
   (:mod:`daskpd._strat.leafboot`): they cost no re-read and nothing rides the rows.

Every measure is then computed on the driver from the p curves (small arrays).

Definitions (per feature, on its curve; stratx's ``importances`` for the first two):

* **impact**: mean ``|PD|`` over the curve's positions (the distinct x values, or bins, of
  a numeric feature where the curve is supported; the categories of a categorical
  feature that have an estimate).
* **importance**: mean ``|PD|`` weighted by the number of rows at each position.
* **pd_variance**: the PD-variance ("flatness") measure of Greenwell et al. (2018),
  on the same curve: the standard deviation (ddof=1) of PD over the positions for a
  numeric feature, (max PD - min PD) / 4 for a categorical one.

A numeric StratPD curve is 0 at its leftmost supported x (an integral from there);
a categorical curve has no natural zero, so it is mean-centred (plain mean over the
categories with an estimate) before ``|PD|`` is taken, as in stratx.  ``pd_variance`` is
invariant to either shift.  With ``normalize=True`` (default) each of the three
columns is divided by its sum over the features (within each trial for trials); the
unnormalised values, in units of the target, are kept as ``*_raw`` columns.
"""
from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass
from numbers import Integral
from typing import Sequence

import numpy as np
import pandas as pd

from ._data.options import AUTO, ReadOptions
from ._data.request import left_out_note, open_request
from ._errors import DataError
from ._importance_pvalues import permutation_pvalues
from ._importance_table import finish_table, measure_curves, measures_table
from ._importance_result import MEASURES, ImportanceResult
from ._strat.estimators import EXTRA_METHODS, estimator_named, extra_kinds
from ._strat.firstpass_cache import FirstPassCache
from ._strat.options import FinishOptions, KeepState, Reuse, TreeOptions, Trials
from ._strat.pipeline import run_strat
from ._strat.state import ScanState
from ._strat.trees import DEFAULT_MAX_BINS, DEFAULT_SAMPLE_SIZE, DEFAULT_TREE_METHOD
from ._stratpd import STRAT_CONSTRAINTS, stratifying_columns
from ._constraints import (
    N_TRIALS,
    POSITIVE_INT,
    ColumnNames,
    Constraint,
    InstancesOf,
    Interval,
    StrOptions,
)
from ._validation import validate_params
from .results.curves import DEFAULT_FEW_SLOPES, FEW_SLOPES_RULES

__all__ = ["importances", "strat_curves_and_importances", "importance_request", "ImportanceResult"]


# ---------------------------------------------------------------------------------
# the public functions


#: the parameters of :func:`strat_curves_and_importances` (and of :func:`importances`)
class EstimatorNames(Constraint):
    """Extra model-free estimators by their public names (a name or a list of them), among
    :data:`~daskpd._strat.estimators.EXTRA_METHODS`."""

    def is_satisfied_by(self, value) -> bool:
        value = [value] if isinstance(value, str) else value
        return isinstance(value, (list, tuple)) and all(isinstance(v, str) and v in EXTRA_METHODS for v in value)

    def convert(self, value):
        value = [value] if isinstance(value, str) else list(value)
        return tuple(dict.fromkeys(value))

    def __str__(self):
        return "a list of some of " + ", ".join(map(repr, EXTRA_METHODS))


IMPORTANCE_CONSTRAINTS = {
    **STRAT_CONSTRAINTS,
    "categorical_features": [ColumnNames(allow_single=True), None],
    "numeric_features": [ColumnNames(allow_single=True), None],
    "n_trials": [N_TRIALS],
    "normalize": ["boolean"],
    "sort_by": [StrOptions(*MEASURES)],
    "cat_min_samples_leaf": [POSITIVE_INT],
    "min_slopes_per_x": [POSITIVE_INT],
    "few_slopes": [StrOptions(*FEW_SLOPES_RULES)],
    "skip_unusable": ["boolean", None],
    "default_stratify_on": ["boolean", None],
    "nan_as_level": ["boolean"],
    "pvalues": ["boolean"],
    "pvalues_n_trials": [POSITIVE_INT],
    "pvalues_sample_size": [Interval(Integral, 2, None, closed="left")],
    "base_state": [InstancesOf(ScanState, "a daskpd.ScanState"), None],
    "keep_state": ["boolean", str, os.PathLike],
    "first_pass_cache": [InstancesOf(FirstPassCache, "a daskpd.FirstPassCache"), None],
    "estimators": [EstimatorNames()],
}


def importance_request(data, target, features=None, *, stratify_on=None, categorical_features=None,
                       numeric_features=None, storage_options=None, filters=None,
                       keep_suspect: bool = False, skip_unusable: bool | None = None,
                       default_stratify_on: bool | None = None):
    """The request :func:`strat_curves_and_importances` opens for these arguments (its
    columns, kinds and stratifying columns, and which of them are default sets): a job's
    incremental run opens the whole lake's with it to key the first-pass cache entries
    of its new files as a later run over the lake keys them."""
    if skip_unusable is None:
        skip_unusable = features is None
    if default_stratify_on is None:
        default_stratify_on = stratify_on is None and skip_unusable
    read = ReadOptions(storage_options=storage_options, filters=filters, partition_bytes=AUTO,
                       categorical=categorical_features, numeric=numeric_features, keep_suspect=keep_suspect)
    return open_request(data, target, features, read=read, stratify_on=stratifying_columns(features, stratify_on),
                        default_features=skip_unusable, default_stratify_on=default_stratify_on)


@validate_params(IMPORTANCE_CONSTRAINTS)
def strat_curves_and_importances(
    data,
    *,
    target: str,
    features: Sequence[str] | None = None,
    categorical_features: Sequence[str] | None = None,
    numeric_features: Sequence[str] | None = None,
    stratify_on: Sequence[str] | None = None,
    n_trials: int = 1,
    normalize: bool = True,
    sort_by: str = "importance",
    min_samples_leaf: int = 15,
    cat_min_samples_leaf: int = 5,
    min_slopes_per_x: int = 5,
    few_slopes: str = DEFAULT_FEW_SLOPES,
    nan_as_level: bool = False,
    sample_size: int = DEFAULT_SAMPLE_SIZE,
    max_bins: int | None = DEFAULT_MAX_BINS,
    tree_method: str = DEFAULT_TREE_METHOD,
    honest: bool = True,
    random_state: int = 0,
    pvalues: bool = False,
    pvalues_n_trials: int = 80,
    pvalues_sample_size: int = 10_000,
    progress=None,
    storage_options: dict | None = None,
    filters=None,
    skip_unusable: bool | None = None,
    stratification=None,
    base_state=None,
    keep_state: bool = False,
    first_pass_cache=None,
    keep_suspect: bool = False,
    default_stratify_on: bool | None = None,
    estimators: Sequence[str] = (),
) -> ImportanceResult:
    """StratPD / CatStratPD curves of every feature and their importances, in one scan.

    Parameters
    ----------
    data : pandas DataFrame, dask DataFrame, or parquet path / glob / directory / URL
    target : str
        Numeric response column.
    features : list of str, optional
        The columns of the analysis (stratx's ``X``): each is scored, and each is
        stratified on the others in it (unless ``stratify_on`` says otherwise), as in
        :func:`daskpd.stratpd` and a job.  Default: every column but ``target``, less the datetime
        columns (convert them to numbers to score them), the hive partition keys of a
        parquet lake (``sale_year=2011/`` directories), the columns the tree sample
        shows to be constant or empty, and the suspect columns (``keep_suspect``); one
        warning counts and names what was left out (``params["skipped_features"]``
        keeps it).  A feature named here is always
        scored, and a constant one raises a :class:`DataError` naming it.
    categorical_features : list of str, optional
        Columns to treat as categorical (e.g. integer codes).  Besides these, columns
        of dtype object, string, category and bool are categorical.  (The model-based
        functions' parameter of the same name.)
    numeric_features : list of str, optional
        Columns to read as numbers though their dtype says categories: a hive key of a
        parquet lake (``month=7/`` directories; read as categories and left out of the
        default features otherwise), codes stored as strings.
    stratify_on : list of str, optional
        The stratifying columns, when they should differ from ``features`` (default:
        ``features`` when given, else every column but ``target``); each feature's tree
        excludes the feature itself.  Up to daskpd 0.1, ``features`` chose only the
        columns scored while the trees stratified on every column; that answer is
        ``stratify_on=`` every column but the target (docs/importances.md, "Changes").
    n_trials : int, default 1
        1: one estimate on all rows, no spread (as stratx).  T > 1: T trials, each a
        bootstrap of every feature's leaves made by the finish from the same sums (see
        :func:`daskpd.stratpd`); the table gets ``*_std`` columns, the standard
        deviation (ddof=1) over trials.  The point estimates stay the all-rows values.
    normalize : bool, default True
        Divide each measure by its sum over the features (per trial, too).
    sort_by : {"importance", "impact", "pd_variance"}
    min_samples_leaf, cat_min_samples_leaf : int, default 15 and 5
        Stratifying-tree leaf size for numeric / categorical features (stratx's).
    min_slopes_per_x : int, default 5
        StratPD: positions averaging fewer leaf slopes are unsupported.
    few_slopes : {"interpolate", "flat"}, default "interpolate"
        StratPD: an interval with some but fewer than ``min_slopes_per_x`` slopes between
        two valid ones takes the interpolated slope, or none ("flat", stratx 0.5); see
        :func:`daskpd.stratpd`.
    nan_as_level : bool, default False
        Categorical features: a missing value is a level of its own (else such rows
        are dropped from that feature's curve).
    sample_size, max_bins, tree_method, honest, random_state, progress, storage_options, filters
        As for :func:`daskpd.stratpd`.  ``random_state`` also seeds the trials' leaf
        weights and the permutations: results are deterministic given it.
    pvalues : bool, default False
        Permutation p-values (y shuffled, trees refitted, ``pvalues_n_trials`` times),
        ``(r + 1) / (N + 1)`` with r the draws whose raw measure reaches the observed
        one (raw, i.e. unnormalised: under a shuffled y each feature's normalised share
        is ~1/p whatever its effect, which would make the test meaningless).
        Computed on the first ``pvalues_sample_size`` rows of the tree sample (itself
        a uniform sample; the observed statistic is recomputed on the same rows, so the
        test is exact at that size), on the workers -- no extra pass over the data.

    skip_unusable : bool, optional
        ``features`` is a default set (default: when ``features`` is None): constant /
        empty features are left out instead of raising, and so are the suspect columns
        (``keep_suspect``).  For callers whose own default set fills ``features``.
    default_stratify_on : bool, optional
        The stratifying columns are a default set, of which the suspect columns are left
        out (default: when ``stratify_on`` is None and ``features`` is a default set).
        For callers whose own default set fills ``stratify_on``.
    stratification : Stratification, optional
        Scan under these fitted trees: no sample, no fit (see :func:`daskpd.stratpd`);
        not with ``pvalues`` (they refit trees on the sample).
    base_state : ScanState, optional
        The merged sums of other data scanned under ``stratification`` (e.g. the files
        of a lake already scanned): ``data`` (the new files) is scanned alone, its sums
        are added to these, and the curves and measures cover both.
    keep_state : bool or path, default False
        Keep the scan's merged sums: ``result.state`` (a :class:`ScanState`, with
        ``base_state`` added; ``result.new_state``: the sums of ``data`` alone) and
        ``result.stratification``.  A directory: each bucket
        of the scan writes its sums there itself (a scratch directory inside, removed
        once the state is gone: save it first) when every worker sees that directory
        (a filesystem the workers share: a ``LocalCluster``, a shared mount), so the
        sums never travel to the client; otherwise the client gathers them.
    keep_suspect : bool, default False
        Keep in the default features and stratifying columns the ones the tree sample
        flags: likely identifiers (integer or text columns distinct in >= 99 % of
        sampled rows, near-unique text such as titles, UUID and fixed-size binary keys),
        row numbers (0..n-1 or 1..n, once or once per file), likely leaks (a column that
        predicts the target almost perfectly, or a thresholded / binned copy of it such
        as ``y > 1``) and dates stored as strings.  By default
        they are left out, counted in the warning; a column named in ``features`` /
        ``stratify_on`` is always used, with its warning.
    first_pass_cache : FirstPassCache, optional
        A parquet lake's pass 1 (the tree sample, the row count, the distinct values)
        kept per file in a directory (``daskpd.FirstPassCache(directory, stamps)``): a
        rerun reads only the files the cache does not hold in pass 1, and its sample,
        trees and curves equal a run without it bit for bit (docs/jobs.md, "The first
        pass, cached per file").  Other inputs run the plain pass.
    estimators : list of str, default ()
        Model-free estimators to run besides StratPD and CatStratPD, in the same scan:
        ``"binned_mean"``, the mean of the target per position (bin or exact value) of
        every numeric feature, over all rows (the strata ignored: the marginal plot's
        curve, without a model).  Their curves are in ``result.extra_curves``
        (``{"binned_mean": {feature: BinnedMeanResult}}``); the importances and
        ``curves`` do not change.

    Returns
    -------
    ImportanceResult
    """
    opened = _open_request(data, target, features, stratify_on=stratify_on, categorical_features=categorical_features,
                           numeric_features=numeric_features, storage_options=storage_options, filters=filters,
                           keep_suspect=keep_suspect, skip_unusable=skip_unusable,
                           default_stratify_on=default_stratify_on, pvalues=pvalues, stratification=stratification,
                           min_samples_leaf=min_samples_leaf, cat_min_samples_leaf=cat_min_samples_leaf)
    request, feats, left_out, msl_for = opened.request, opened.feats, opened.left_out, opened.msl_for

    # passes 1 and 2
    n_sets = 1 + (n_trials if n_trials > 1 else 0)
    call = _Call(n_trials=n_trials, normalize=normalize, sort_by=sort_by, min_samples_leaf=min_samples_leaf,
                 cat_min_samples_leaf=cat_min_samples_leaf, min_slopes_per_x=min_slopes_per_x, few_slopes=few_slopes,
                 nan_as_level=nan_as_level, sample_size=sample_size, max_bins=max_bins, tree_method=tree_method,
                 honest=honest, random_state=random_state, pvalues=pvalues, pvalues_n_trials=pvalues_n_trials,
                 pvalues_sample_size=pvalues_sample_size, keep_suspect=keep_suspect, estimators=estimators)
    run = _run(opened, call, stratification=stratification, base_state=base_state, keep_state=keep_state,
               first_pass_cache=first_pass_cache)
    if run.skipped:
        left_out.update(run.skipped)
        feats = [f for f in feats if f not in run.skipped]
    if left_out:
        warnings.warn(left_out_note("importances", left_out, len(feats), "name them in features= to score them"),
                      UserWarning, stacklevel=2)
    kinds = {f: run.kinds[f] for f in feats}
    timings = dict(getattr(run, "timings", None) or {})
    t0 = time.perf_counter()

    # measures (driver; the curves were finished next to the merged aggregates)
    measured = measure_curves(run, feats, kinds, n_sets, normalize=normalize, min_slopes_per_x=min_slopes_per_x,
                              target_boolean=request.target_boolean)
    table, trials_df = measures_table(measured, feats, kinds, n_sets)
    timings["finalize_s"] = time.perf_counter() - t0
    null_df = pv = None
    if pvalues:
        t0 = time.perf_counter()
        pv, null_df = permutation_pvalues(run, feats, msl_for, pvalues_n_trials, pvalues_sample_size,
                                          tree_method)
        pv[measured.flags == "no_support"] = np.nan
        timings["pvalues_s"] = time.perf_counter() - t0
    table = finish_table(table, measured, sort_by, pv)
    return _result(opened, call, run, table, measured.curves, kinds, trials_df, null_df, timings, target=target,
                   feats=feats)


@dataclass
class _Opened:
    """What :func:`strat_curves_and_importances` works from once its request is open:
    the request, the stratifying columns asked for, the declared categorical columns, the
    features, the columns left out so far, each feature's leaf size and
    whether the features are a default set."""

    request: object
    stratify_on: list | None
    declared: list
    feats: list
    left_out: dict
    msl_for: dict
    skip_unusable: bool


def _open_request(data, target, features, *, stratify_on, categorical_features, numeric_features, storage_options,
                  filters, keep_suspect, skip_unusable, default_stratify_on, pvalues, stratification,
                  min_samples_leaf, cat_min_samples_leaf) -> _Opened:
    """The arguments checked together and the request opened (columns and kinds: the
    request's one resolution)."""
    if pvalues and stratification is not None:
        raise DataError("pvalues=True refits trees on the tree sample, which stratification= skips: "
                        "leave one of them out")

    # columns and kinds: the request's one resolution
    if skip_unusable is None:
        skip_unusable = features is None
    request = importance_request(data, target, features, stratify_on=stratify_on,
                                 categorical_features=categorical_features, numeric_features=numeric_features,
                                 storage_options=storage_options, filters=filters,
                                 keep_suspect=keep_suspect, skip_unusable=skip_unusable,
                                 default_stratify_on=default_stratify_on)
    stratify_on = stratifying_columns(features, stratify_on)
    declared = list(request.categorical)
    feats, kinds = list(request.features), dict(request.kinds)
    left_out: dict[str, str] = dict(request.left_out)
    if not feats:
        raise DataError("no features to score (features is empty, or the data has only the target)")
    msl_for = {f: (cat_min_samples_leaf if kinds[f] == "categorical" else min_samples_leaf) for f in feats}
    return _Opened(request, stratify_on, declared, feats, left_out, msl_for, skip_unusable)


@dataclass(frozen=True)
class _Call:
    """The parameters of a :func:`strat_curves_and_importances` call that its run and
    its recorded ``params`` read, as given."""

    n_trials: int
    normalize: bool
    sort_by: str
    min_samples_leaf: object
    cat_min_samples_leaf: object
    min_slopes_per_x: int
    few_slopes: str
    nan_as_level: bool
    sample_size: object
    max_bins: int
    tree_method: str
    honest: bool
    random_state: int
    pvalues: bool
    pvalues_n_trials: int
    pvalues_sample_size: object
    keep_suspect: bool
    estimators: object


def _run(opened: _Opened, call: _Call, *, stratification, base_state, keep_state, first_pass_cache):
    """Passes 1 and 2: the sample, the trees and the one scan (:func:`run_strat`)."""
    trees = TreeOptions(min_samples_leaf=call.min_samples_leaf, min_samples_leaf_for=opened.msl_for,
                        sample_size=call.sample_size, max_bins=call.max_bins, tree_method=call.tree_method,
                        honest=call.honest, nan_as_level=call.nan_as_level, random_state=call.random_state)
    return run_strat(
        opened.request, trees=trees, trials=Trials.of(call.n_trials),  # the table keeps no band
        finish_options=FinishOptions(min_slopes_per_x=int(call.min_slopes_per_x), few_slopes=call.few_slopes),
        keep_state=KeepState.of(keep_state),
        reuse=Reuse(stratification=stratification, base_state=base_state, first_pass_cache=first_pass_cache),
        skip_constant=opened.feats if opened.skip_unusable else (),
        later_stages=("p-values",) if call.pvalues else (), extra=extra_kinds(call.estimators))


def _result(opened: _Opened, call: _Call, run, table, curves, kinds, trials_df, null_df, timings, *, target,
            feats) -> ImportanceResult:
    """The :class:`ImportanceResult`: the table, the curves, the parameters recorded and
    the extra estimators' curves."""
    request, stratify_on, left_out = opened.request, opened.stratify_on, opened.left_out
    n_rows = int(next(iter(curves.values())).n_rows)
    c = call
    params = {"features": feats, "categorical": opened.declared, "numeric": list(request.numeric),
              "stratify_on": None if stratify_on is None else list(stratify_on), "n_trials": c.n_trials,
              "normalize": c.normalize, "sort_by": c.sort_by, "min_samples_leaf": c.min_samples_leaf,
              "cat_min_samples_leaf": c.cat_min_samples_leaf, "min_slopes_per_x": c.min_slopes_per_x,
              "few_slopes": c.few_slopes, "nan_as_level": c.nan_as_level, "sample_size": c.sample_size,
              "max_bins": c.max_bins, "tree_method": c.tree_method, "honest": c.honest, "random_state": c.random_state,
              "pvalues": c.pvalues, "pvalues_n_trials": c.pvalues_n_trials if c.pvalues else None,
              "pvalues_sample_size": c.pvalues_sample_size if c.pvalues else None,
              "skipped_features": dict(left_out), "skipped_stratify_on": dict(run.skipped_strat),
              "keep_suspect": c.keep_suspect, "target_boolean": request.target_boolean}
    extra_curves = {}
    for key, r in run.results.items():
        if isinstance(key, tuple) and key[0] in feats:  # (feature, kind): an extra estimator's
            extra_curves.setdefault(estimator_named(key[1]).method, {})[key[0]] = r
    if c.estimators:
        params["estimators"] = list(c.estimators)
    return ImportanceResult(table=table, curves=curves, target=target, kinds=kinds, n_rows=n_rows,
                            n_partitions=run.n_partitions, n_passes=run.n_passes, sample_rows=run.sample_rows,
                            n_trials=c.n_trials, trials=trials_df, null=null_df, params=params, timings=timings,
                            stratification=run.stratification, state=run.state, new_state=run.new_state,
                            extra_curves=extra_curves)


@validate_params(IMPORTANCE_CONSTRAINTS, signature_of=strat_curves_and_importances)
def importances(data, *, target, **kwargs) -> pd.DataFrame:
    """Importance and impact of every feature, one scan of the data (a DataFrame).

    Returns a DataFrame, :attr:`ImportanceResult.table` of
    :func:`strat_curves_and_importances` (same parameters; that function returns the
    :class:`ImportanceResult`, with the curves): indexed by feature, sorted by
    importance (descending), with
    columns ``kind``, ``importance``, ``impact``, ``pd_variance`` (each normalised to
    sum to 1 by default), ``*_std`` when ``n_trials > 1``, ``*_pvalue`` when
    ``pvalues=True``, ``*_raw`` (units of the target), ``n_positions``, ``n_rows``.

    * importance: how far the feature moves the target for the typical row -- the mean
      ``|PD|`` weighted by the rows at each position (stratx's).  The table is sorted by it:
      it ranks the features by their effect on the data as they are distributed.
    * impact: the same mean ``|PD|`` with every position (value, bin or category) counted
      once, whatever its rows.
    * pd_variance: how much the curve varies (Greenwell et al.'s flatness: the SD,
      ddof=1, of PD over the positions; range / 4 over categories).

    Categorical curves are mean-centred before ``|PD|`` is taken.  ``features`` are the
    columns of the analysis: each is scored and stratified on the others
    (``stratify_on`` to stratify on other columns).
    """
    return strat_curves_and_importances.__wrapped__(data, target=target, **kwargs).table  # validated above


# the table is what importances returns (stratx's return type); the signature is borrowed
importances.__signature__ = importances.__signature__.replace(return_annotation="pd.DataFrame")
