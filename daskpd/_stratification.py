"""Stratifications and scan states: the public functions.

:func:`fit_stratification` runs pass 1 and the tree fit of the model-free pipeline and
returns the fitted :class:`~daskpd._strat.stratification.Stratification`; :func:`scan_state`
scans data under one and returns the mergeable :class:`~daskpd._strat.state.ScanState`
(see :mod:`daskpd._strat.state` and docs/pipeline.md).
"""
from __future__ import annotations

from ._constraints import IO_CONSTRAINTS, N_TRIALS, NO_VALIDATION, POSITIVE_INT, ColumnNames, InstancesOf
from ._data.options import AUTO, ReadOptions
from ._data.request import open_request
from ._strat.options import KeepState, StateMode, TreeOptions, Trials
from ._strat.pipeline import run_strat, run_under
from ._strat.state import ScanState
from ._strat.stratification import Stratification
from ._stratpd import STRAT_CONSTRAINTS, stratifying_columns
from ._validation import validate_params

__all__ = ["fit_stratification", "scan_state", "Stratification", "ScanState"]


@validate_params({
    **{k: v for k, v in STRAT_CONSTRAINTS.items() if k != "stratification"},
    "categorical_features": [ColumnNames(allow_single=True), None],
    "numeric_features": [ColumnNames(allow_single=True), None],
    "cat_min_samples_leaf": [POSITIVE_INT],
    "nan_as_level": ["boolean"],
})
def fit_stratification(
    data,
    *,
    target: str,
    features=None,
    categorical_features=None,
    numeric_features=None,
    stratify_on=None,
    min_samples_leaf: int = 15,
    cat_min_samples_leaf: int = 5,
    nan_as_level: bool = False,
    sample_size: int = 200_000,
    max_bins: int | None = 1000,
    tree_method: str = "hist",
    honest: bool = True,
    random_state: int = 0,
    progress=None,
    storage_options: dict | None = None,
    filters=None,
    keep_suspect: bool = False,
) -> Stratification:
    """The stratifying trees of every feature, fitted on the tree sample (pass 1 and the
    fit of :func:`daskpd.importances`, no scan).

    The parameters are those of :func:`daskpd.strat_curves_and_importances` (numeric
    features use ``min_samples_leaf``, categorical ones ``cat_min_samples_leaf``).
    Pass the result as ``stratification=`` to :func:`daskpd.stratpd`,
    :func:`daskpd.catstratpd`, :func:`daskpd.importances` or :func:`scan_state`;
    :meth:`Stratification.save` / :meth:`Stratification.load` keep it.  The features and
    stratifying columns it leaves out (constant, suspect: ``keep_suspect``) are in
    ``params["left_out"]``.
    """
    stratify_on = stratifying_columns(features, stratify_on)
    read = ReadOptions(storage_options=storage_options, filters=filters, partition_bytes=AUTO,
                       categorical=categorical_features, numeric=numeric_features, keep_suspect=keep_suspect)
    request = open_request(data, target, features, read=read, stratify_on=stratify_on)
    kinds = dict(request.kinds)
    msl_for = {f: (cat_min_samples_leaf if kinds[f] == "categorical" else min_samples_leaf) for f in request.features}
    trees = TreeOptions(min_samples_leaf=min_samples_leaf, min_samples_leaf_for=msl_for, sample_size=sample_size,
                        max_bins=max_bins, tree_method=tree_method, honest=honest, nan_as_level=nan_as_level,
                        random_state=random_state)
    run = run_strat(request, trees=trees, fit_only=True)
    return run.stratification


@validate_params({
    "data": NO_VALIDATION,
    "stratification": [InstancesOf(Stratification, "a daskpd.Stratification")],
    "features": [ColumnNames(allow_single=True), None],
    "n_trials": [N_TRIALS],
    **IO_CONSTRAINTS,
})
def scan_state(
    data,
    stratification: Stratification,
    *,
    features=None,
    n_trials: int = 1,
    progress=None,
    storage_options: dict | None = None,
    filters=None,
) -> ScanState:
    """The merged sums of one scan of ``data`` under ``stratification`` (no finish).

    ``features``: a subset of the stratification's (default: all).  ``n_trials`` > 1:
    its finish makes that many trials (a bootstrap of the leaves, as in
    :func:`daskpd.stratpd`; the sums themselves do not depend on it).  States of the
    same stratification and trials add (``a + b``); :meth:`ScanState.finish` gives
    ``{feature: result}``.
    """
    strat = stratification
    feats = list(strat.features) if features is None else ([features] if isinstance(features, str) else
                                                            list(features))
    read = ReadOptions(storage_options=storage_options, filters=filters, partition_bytes=AUTO,
                       categorical=[f for f in feats if strat.kinds.get(f) == "categorical"] or None)
    request = open_request(data, strat.target, feats, read=read, stratify_on=list(strat.stratify_on))
    run = run_under(request, strat, trials=Trials.of(n_trials),
                    keep_state=KeepState(StateMode.ONLY))
    return run.state
