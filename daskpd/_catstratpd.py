"""CatStratPD for categorical features: the public function.

The pipeline is :mod:`daskpd._strat.pipeline` (a tree sample, one stratifying tree, one
scan producing per-(leaf, category) sums, reduced in buckets of leaves); the merge of
the leaves' category deltas is the weighted least-squares fit of
:mod:`daskpd._strat.categorical_solve`; the result class and the placement of disjoint
groups are in :mod:`daskpd._strat.categorical`.
"""
from __future__ import annotations

import warnings

from ._data.options import AUTO, ReadOptions
from ._data.request import open_request
from ._strat.categorical import CatStratPDResult, no_shared_leaf_message
from ._strat.options import FinishOptions, Reuse, TreeOptions, Trials
from ._strat.pipeline import run_strat
from ._strat.trees import DEFAULT_SAMPLE_SIZE, DEFAULT_TREE_METHOD
from ._validation import validate_params
from ._errors import DataError
from ._stratpd import STRAT_CONSTRAINTS, TRIAL_CONSTRAINTS, stratifying_columns, thin_message
from .results.support import no_support_reason

__all__ = ["catstratpd"]


#: CatStratPD's own parameters (no bins: categories are their own positions)
_CAT_CONSTRAINTS = {
    **{k: v for k, v in STRAT_CONSTRAINTS.items() if k != "max_bins"},
    "feature": ["column"],
    "nan_as_level": ["boolean"],
    "centered": ["boolean"],
    **TRIAL_CONSTRAINTS,
}


def driver_side(res: CatStratPDResult, strict: bool = True) -> CatStratPDResult:
    """The warning of a result finished on a worker, emitted where the user sees it.
    ``strict`` (a curve asked for alone): no leaf holding two categories is a DataError
    saying what would work (importances flag such a feature ``no_support`` instead)."""
    if strict and res.n_leaves_used == 0 and len(res.categories) > 1 and res.n_ignored > 0:
        raise DataError(f"CatStratPD for feature {res.feature!r}: {no_support_reason(res)} (each category alone "
                        "would be placed at its marginal mean y: that is not a partial dependence)")
    message = no_shared_leaf_message(res) or thin_message(res, "CatStratPD", "a single category")
    if message:
        warnings.warn(message, UserWarning, stacklevel=3)
    return res


def run_categorical(data, *, target: str, feature: str, stratify_on=None, read: ReadOptions = ReadOptions(),
                    trees: TreeOptions = TreeOptions(min_samples_leaf=5, max_bins=None), trials: Trials = Trials(),
                    centered: bool = False, reuse: Reuse = Reuse()):
    """Run the shared pipeline for one categorical ``feature`` stratified on ``stratify_on``
    (None: every usable column but the target), the options built (and validated) by
    :func:`catstratpd`; returns (run, dtype), the result (with ``centered``) in
    ``run.results[feature]``."""
    request = open_request(data, target, [feature], read=read, stratify_on=stratify_on, as_kind="categorical")
    run = run_strat(request, trees=trees, trials=trials,
                    finish_options=FinishOptions(centered=bool(centered), band=trials.band), reuse=reuse)
    dtype = request.dtypes[feature]
    if request.target_boolean:
        run.results[feature].params["target_boolean"] = True
    return run, dtype


@validate_params(_CAT_CONSTRAINTS)
def catstratpd(
    data,
    *,
    target: str,
    feature: str,
    features=None,
    stratify_on=None,
    min_samples_leaf: int = 5,
    centered: bool = False,
    nan_as_level: bool = False,
    sample_size: int = DEFAULT_SAMPLE_SIZE,
    tree_method: str = DEFAULT_TREE_METHOD,
    honest: bool = True,
    random_state: int = 0,
    progress=None,
    storage_options: dict | None = None,
    filters=None,
    n_trials: int = 1,
    band=(0.05, 0.95),
    stratification=None,
    keep_suspect: bool = False,
) -> CatStratPDResult:
    """Model-free partial dependence of ``target`` on categorical ``feature`` (CatStratPD).

    Parameters
    ----------
    data : pandas DataFrame, dask DataFrame, or parquet path / glob / directory / URL
    target : str
        Numeric response column.
    feature : str
        The categorical column: strings, object, pandas Categorical, bool, or integer
        codes (any column given here is treated as categories; a float column must hold
        integral values, e.g. integer codes with missing values).
    features : list of str, optional
        The columns of the analysis (stratx's ``X``): ``feature`` is stratified on the
        others in it (default: every column but ``target``), as in
        :func:`daskpd.importances` and a job.
    stratify_on : list of str, optional
        The stratifying columns, when they should differ from ``features``;
        ``feature`` itself is always excluded.
    min_samples_leaf : int, default 5
        Leaf size of the stratifying tree (fitted on the sample).
    centered : bool, default False
        False: the smallest effect is 0 (every effect is "how much more than the
        lowest category").  True: the count-weighted mean effect is 0.
    nan_as_level : bool, default False
        False: rows with a missing category are dropped (counted in ``n_missing_x``).
        True: missing is a level of its own (label NaN, listed last).
    sample_size : int, default 200,000
        Rows (bottom-k by seeded row hash) each stratifying tree is fitted on; all rows
        if fewer.  With ``honest=True`` pass 1 draws twice as many and each fold's tree is
        fitted on its half, so its leaves are as fine as one tree's on ``sample_size`` rows.
    tree_method : {"hist", "exact"}, default "hist"
        How the stratifying tree is grown.  "hist": daskpd's histogram tree (each
        column binned on the sample with one bin per distinct value up to 65,535 values
        -- then it is scikit-learn's exact tree, up to ties -- and 65,535 percentile bins
        beyond; grown to full size; faster to fit, see docs/benchmarks.md).  "exact":
        scikit-learn's ``DecisionTreeRegressor`` (exact thresholds, as stratx).
    honest : bool, default True
        Honest stratification by 2-fold cross-fitting (see :func:`daskpd.stratpd`);
        False: one tree stratifies every row, as stratx.
    random_state : int, default 0
        Seeds the sample, the tree and the trials' leaf weights.
    progress : bool or None
        Progress on stderr: None/True (default): a bar on a terminal, one line per
        stage (tasks done, elapsed time; no carriage returns) in a log or pipe;
        "bar" / "log" force a form; False: nothing.  None in a call made inside
        another daskpd call (a job's) keeps that call's setting.
    storage_options, filters
        Passed to ``dask.dataframe.read_parquet`` for path inputs.
    n_trials : int, default 1
        1: the effects alone (stratx's default).  T > 1: T trials, each a bootstrap of
        the stratification's leaves, made by the finish from the same sums (see
        :func:`daskpd.stratpd`); the result carries ``trials_pd`` (T effect vectors,
        NaN where a trial drew no leaf of the category) and a band (:meth:`band`).  The
        band is the sampling variability of the effects given the stratification (see
        docs/catstratpd.md).
    band : (float, float), default (0.05, 0.95)
        The lower and upper probabilities of the band, centred on ``pd`` (a 90 % band).
    stratification : Stratification, optional
        A fitted stratification: no sample and no tree fit, one scan under its trees (its
        tree parameters are used; see :func:`daskpd.stratpd`).
    keep_suspect : bool, default False
        Keep the suspect columns (likely identifiers, row numbers, leaks, dates stored as
        strings) in the default stratifying columns; see :func:`daskpd.stratpd`.

    Returns
    -------
    CatStratPDResult
        ``to_frame()`` has columns ``feature, category, pd, count, count_used, leaves,
        group, marginal_mean`` (and ``pd_std, pd_lo, pd_hi`` with trials).
    """
    run, dtype = run_categorical(
        data, target=target, feature=feature, stratify_on=stratifying_columns(features, stratify_on),
        read=ReadOptions(storage_options=storage_options, filters=filters, partition_bytes=AUTO,
                         keep_suspect=keep_suspect, names={"features": "parameter feature"}),
        trees=TreeOptions(min_samples_leaf=min_samples_leaf, sample_size=sample_size, max_bins=None,
                          random_state=random_state, nan_as_level=nan_as_level, tree_method=tree_method,
                          honest=honest),
        trials=Trials.of(n_trials, band), centered=centered, reuse=Reuse(stratification=stratification))
    return driver_side(run.results[feature])
