"""StratPD for numeric features: the public function.

The pipeline (sample, trees, one scan, curves finished next to the data) is
:mod:`daskpd._strat.pipeline`; the finish (slopes, their average, the integral) is
:mod:`daskpd._strat.numeric` and :mod:`daskpd._strat.numeric_curve`.
"""
from __future__ import annotations

import warnings
from numbers import Integral

from ._constraints import (
    IO_CONSTRAINTS,
    N_TRIALS,
    NO_VALIDATION,
    NON_NEGATIVE_INT,
    POSITIVE_INT,
    ColumnNames,
    InstancesOf,
    Interval,
    Percentiles,
    StrOptions,
)
from ._data.options import AUTO, ReadOptions
from ._data.request import open_request
from ._errors import DataError
from ._strat.numeric_curve import empty_curve_message
from ._strat.options import FinishOptions, Reuse, TreeOptions, Trials
from ._strat.pipeline import run_strat
from ._strat.stratification import Stratification
from ._strat.trees import DEFAULT_MAX_BINS, DEFAULT_SAMPLE_SIZE, DEFAULT_TREE_METHOD, TREE_METHODS
from ._validation import validate_params
from .results import StratPDResult
from .results.curves import DEFAULT_FEW_SLOPES, FEW_SLOPES_RULES
from .results.support import LOW_SUPPORT_SHARE, no_support_reason

__all__ = ["stratpd"]

#: the stratifying tree and its sample: constraints shared by stratpd, catstratpd and importances
STRAT_CONSTRAINTS = {
    "data": NO_VALIDATION,
    "target": ["column"],
    "features": [ColumnNames(allow_single=True), None],
    "stratify_on": [ColumnNames(allow_single=True), None],
    "min_samples_leaf": [POSITIVE_INT],
    "sample_size": [Interval(Integral, 2, None, closed="left")],
    "max_bins": [Interval(Integral, 2, None, closed="left"), None],
    "tree_method": [StrOptions(*TREE_METHODS)],
    "honest": ["boolean"],
    "random_state": [NON_NEGATIVE_INT],
    "stratification": [InstancesOf(Stratification, "a daskpd.Stratification"), None],
    "keep_suspect": ["boolean"],
    **IO_CONSTRAINTS,
}

# -- trials and their band (stratpd, catstratpd, importances) ----------------------
#: the trials' parameters, shared by stratpd, catstratpd and importances
TRIAL_CONSTRAINTS = {
    "n_trials": [N_TRIALS],
    "band": [Percentiles()],
}


@validate_params({
    **STRAT_CONSTRAINTS,
    "feature": ["column"],
    "min_slopes_per_x": [POSITIVE_INT],
    "few_slopes": [StrOptions(*FEW_SLOPES_RULES)],
    **TRIAL_CONSTRAINTS,
})
def stratpd(
    data,
    *,
    target: str,
    feature: str,
    features=None,
    stratify_on=None,
    min_samples_leaf: int = 15,
    min_slopes_per_x: int = 5,
    few_slopes: str = DEFAULT_FEW_SLOPES,
    sample_size: int = DEFAULT_SAMPLE_SIZE,
    max_bins: int | None = DEFAULT_MAX_BINS,
    tree_method: str = DEFAULT_TREE_METHOD,
    honest: bool = True,
    random_state: int = 0,
    progress=None,
    storage_options: dict | None = None,
    filters=None,
    n_trials: int = 1,
    band=(0.05, 0.95),
    stratification: Stratification | None = None,
    keep_suspect: bool = False,
) -> StratPDResult:
    """Model-free partial dependence of ``target`` on numeric ``feature`` (StratPD).

    Parameters
    ----------
    data : pandas DataFrame, dask DataFrame, or parquet path / glob / directory / URL
    target : str
        Numeric response column.
    feature : str
        Numeric (or boolean) column whose partial dependence is wanted.  For a
        categorical column use :func:`daskpd.catstratpd`.
    features : list of str, optional
        The columns of the analysis (stratx's ``X``): ``feature`` is stratified on the
        others in it (default: every column but ``target``).  The same meaning in
        :func:`daskpd.importances` and a job's ``features``.
    stratify_on : list of str, optional
        The stratifying columns, when they should differ from ``features`` (e.g. to
        stratify on a column that is not analysed); ``feature`` itself is always
        excluded.  Non-numeric ones are encoded for the tree (categories as codes
        learned from the sample, dates as numbers); missing values are kept and the
        tree routes them.
    min_samples_leaf : int, default 15
        Leaf size of the stratifying tree (fitted on the sample).
    min_slopes_per_x : int, default 5
        The slope over [x_i, x_{i+1}) is the mean of the leaf slopes covering x_i when
        there are at least this many.  An interval no leaf slope covers contributes
        nothing (a flat step; its inner positions are unsupported).
    few_slopes : {"interpolate", "flat"}, default "interpolate"
        An interval with some leaf slopes but fewer than ``min_slopes_per_x``, between
        two valid ones: "interpolate" takes the slope interpolated linearly in x from
        the valid neighbours (nearer the truth on average on synthetic data with a known
        curve; see docs/stratpd.md); "flat" contributes nothing, as stratx 0.5.  Such intervals
        at the ends of the curve are left out under either rule.
    sample_size : int, default 200,000
        Rows (bottom-k by seeded row hash) each stratifying tree is fitted on; all rows
        if fewer.  With ``honest=True`` pass 1 draws twice as many and each fold's tree is
        fitted on its half, so its leaves are as fine as one tree's on ``sample_size`` rows.
    max_bins : int or None, default 1000
        If ``feature`` has more distinct values than this in the sample, it is cut into
        this many quantile bins (edges from the sample) and each bin is placed at the
        mean x of its rows; ``None`` never bins.  Integer-like features with few values
        keep their exact values.
    tree_method : {"hist", "exact"}, default "hist"
        How the stratifying tree is grown.  "hist": daskpd's histogram tree (each
        column binned on the sample with one bin per distinct value up to 65,535 values
        -- then it is scikit-learn's exact tree, up to ties -- and 65,535 percentile bins
        beyond; grown to full size; faster to fit, see docs/benchmarks.md).  "exact":
        scikit-learn's ``DecisionTreeRegressor`` (exact thresholds, as stratx).
    honest : bool, default True
        Honest stratification by 2-fold cross-fitting: the tree sample's rows are split
        in two folds by row hash, a tree is fitted on each, and every row is stratified
        by the tree of the other fold -- the trees never stratify the rows they were fitted
        on, which otherwise shrinks the curve toward flat (trees split on the rows' own
        noise).  A stratification with fewer than 30 leaves splits each leaf in parts
        by row hash, the units its trials resample.  False: one tree fitted on the
        sample stratifies every row (stratx's estimator, for comparison with it).  See
        docs/stratpd.md, "Honest stratification".
    random_state : int, default 0
        Seeds the sample, the tree and the plotted segment sample.
    progress : bool or None
        Progress on stderr: None/True (default): a bar on a terminal, one line per
        stage (tasks done, elapsed time; no carriage returns) in a log or pipe;
        "bar" / "log" force a form; False: nothing.  None in a call made inside
        another daskpd call (a job's) keeps that call's setting.
    storage_options, filters
        Passed to ``dask.dataframe.read_parquet`` for path inputs.
    n_trials : int, default 1
        1: the curve alone (as stratx's default).  T > 1: T trials, each a bootstrap of
        the stratification's leaves (every leaf drawn a Poisson(1) number of times,
        seeded: reproducible, independent of partitioning), made by the finish from the
        same sums: no row carries anything more through the scan.  The result then
        carries ``trials_pd`` (T curves, on the curve's own support) and a band
        (:meth:`band`; ``to_frame()`` adds ``pd_std, pd_lo, pd_hi``).  ``pd`` stays the
        all-rows curve.  The band is the sampling variability of the curve *given the
        stratification*: it does not hold the stratification's own bias where the trees
        only approximate continuous stratifying columns (see docs/stratpd.md).
    band : (float, float), default (0.05, 0.95)
        The lower and upper probabilities of the band, centred on ``pd`` (a 90 %
        band: ``pd +- t std``, Student's t quantiles; see docs/stratpd.md).
    stratification : Stratification, optional
        A fitted stratification (:func:`daskpd.fit_stratification`, or one saved by a
        job): no sample and no tree fit, one scan under its trees; its tree parameters
        (``min_samples_leaf``, ``sample_size``, ``max_bins``, ``tree_method``,
        ``random_state``) are used and those given here are ignored.  See
        docs/pipeline.md, "Stratifications and scan states".
    keep_suspect : bool, default False
        Keep in the default stratifying columns the ones the tree sample flags: likely
        identifiers (integer or text columns distinct in >= 99 % of sampled rows,
        near-unique text such as titles, UUID and fixed-size binary keys), row numbers,
        likely leaks (including a thresholded or binned copy of the target, such as
        ``y > 1``: stratifying on it flattens every curve) and dates stored as strings.
        By default they are left out of the stratifying columns daskpd chooses (one
        warning counts them); a column named in
        ``features`` / ``stratify_on`` is always used, with its warning.

    Returns
    -------
    StratPDResult
    """
    trials = Trials.of(n_trials, band)
    read = ReadOptions(storage_options=storage_options, filters=filters, partition_bytes=AUTO,
                       keep_suspect=keep_suspect, names={"features": "parameter feature"})
    request = open_request(data, target, [feature], read=read, stratify_on=stratifying_columns(features, stratify_on),
                           as_kind="numeric")
    trees = TreeOptions(min_samples_leaf=min_samples_leaf, sample_size=sample_size, max_bins=max_bins,
                        tree_method=tree_method, honest=honest, random_state=random_state)
    run = run_strat(request, trees=trees, trials=trials,
                    finish_options=FinishOptions(min_slopes_per_x=int(min_slopes_per_x), few_slopes=few_slopes,
                                                  band=trials.band),
                    reuse=Reuse(stratification=stratification))
    res = run.results[feature]
    if request.target_boolean:
        res.params["target_boolean"] = True
    return driver_side(run, res, min_slopes_per_x=min_slopes_per_x)


def stratifying_columns(features, stratify_on):
    """The one rule of every model-free function: the stratifying columns are
    ``stratify_on`` when given, else the analysis columns ``features`` (each feature
    stratified on the others), else None (every usable column but the target)."""
    return stratify_on if stratify_on is not None else features


def driver_side(run, res: StratPDResult, *, min_slopes_per_x: int, strict: bool = True) -> StratPDResult:
    """What a curve finished on a worker still needs on the driver: the run's timings,
    and the empty-curve warning where the user sees it.  ``strict`` (a curve asked for
    alone): every row in a leaf holding a single x value is a DataError saying what would
    work (importances flag such a feature ``no_support`` instead)."""
    res.params["timings"] = {k: round(v, 4) for k, v in run.timings.items()}
    if strict and res.n_used <= 0 and res.n_ignored > 0:
        raise DataError(f"StratPD for feature {res.feature!r}: {no_support_reason(res)}")
    message = empty_curve_message(res, min_slopes_per_x) or thin_message(res, "StratPD", "a single x value")
    if message:
        warnings.warn(message, UserWarning, stacklevel=3)
    return res


#: a warning when more than this share of the rows fell in leaves that cannot contribute
#: (the importance table's low_support rule: :mod:`daskpd.results.support`)
THIN_SHARE = 1.0 - LOW_SUPPORT_SHARE


def thin_message(res, method: str, what: str) -> str | None:
    """The warning when more than half of the rows with an x fell in leaves holding
    ``what`` (no slope, or no second category to compare with), or None."""
    used, ignored = float(res.n_used), float(res.n_ignored)
    if used + ignored <= 0 or ignored <= THIN_SHARE * (used + ignored):
        return None
    return (f"{method} for feature {res.feature!r}: {ignored / (used + ignored):.0%} of the rows "
            f"({int(ignored):,} of {int(used + ignored):,}) fell in leaves holding {what} and could not contribute; "
            "raise min_samples_leaf (larger leaves) or stratify on fewer columns (stratify_on=)")
