"""The parameters of the model-based functions: one spec per method.

:data:`SPECS` maps each public function (``partial_dependence``, ``ice``, ``ale``,
``marginal``, ``pd_variance``, ``h_statistic``, ``compare``, ``model_curves``) to the
constraints of every one of its parameters, in :mod:`daskpd._constraints`' terms.  The
function is decorated with ``validate_params(SPECS[name])`` (which checks, when the
function is defined, that the spec lists exactly its parameters); the defaults are the
signature's.  :func:`daskpd.model_curves` checks each method's per-request parameters
(:data:`PER_REQUEST`) against the same spec, so a value is accepted, normalised and
refused with the same words whichever way it comes in; the job spec reads the same
constraints back (:func:`daskpd._validation.get_constraints`).

The groups (:data:`MODEL`, :data:`GRID`, :data:`ENGINE`, :data:`TRIALS`) are what the
functions share; each spec adds the method's own.  The checks that need two parameters
at once, and are made by more than one function, are here too, and the groups' values as
typed options once validated (:class:`ModelOptions`, :class:`TrialOptions`), as the
internal functions that run several methods at once take them.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from numbers import Integral, Real

from .._errors import InvalidParameterError
from .._constraints import (IO_CONSTRAINTS, N_TRIALS, NO_VALIDATION, NON_NEGATIVE_INT, POSITIVE_INT, ArrayLike,
                            ArrayOrColumn, ColumnNames, InstancesOf, Interval, Percentiles, Probabilities, StrOptions)
from ._arrays import ColumnOrIndex, ColumnOrValues
from ._predictor import DEFAULT_BATCH_ROWS

__all__ = ["RESPONSES", "ENGINES", "PD_METHODS", "KINDS", "MODEL", "GRID", "ENGINE", "TRIALS", "SPECS", "PER_REQUEST",
           "check_trials_method", "ModelOptions", "TrialOptions"]

RESPONSES = ("auto", "predict", "predict_proba", "decision_function")
ENGINES = ("auto", "tree", "predict")
#: partial dependence's ``method`` (scikit-learn's)
PD_METHODS = ("brute", "recursion", "auto")
#: partial dependence's ``kind`` (scikit-learn's)
KINDS = ("average", "individual", "both")

#: the model, its response and the rows' weights: every model-based function
MODEL = {
    "model": NO_VALIDATION,  # resolve_predictor: needs the model's own attributes
    "data": NO_VALIDATION,  # daskpd.io.load
    "sample_weight": [ArrayOrColumn(), None],
    "response": [StrOptions(*RESPONSES)],
    "target_class": NO_VALIDATION,  # one of the model's classes_ (or an output column)
    "columns": [ColumnNames(allow_empty=False), None],
    "categorical_features": NO_VALIDATION,  # names, indices or a boolean mask: categorical_names
    "feature_names": [ColumnNames(allow_empty=False), None],  # an array's column names
    **IO_CONSTRAINTS,
}

_GRID_RESOLUTION = Interval(Integral, 2, None, closed="left")

#: the grid of the PD-like methods
GRID = {
    "grid_resolution": [_GRID_RESOLUTION],
    "percentiles": [Percentiles()],
    "grid": [dict, ArrayLike(), None],
}

#: how the model is called
ENGINE = {
    "engine": [StrOptions(*ENGINES)],
    "batch_rows": [POSITIVE_INT],
}

#: bootstrap trials riding the model's pass (:class:`~daskpd.model._passes.Trials`)
TRIALS = {
    "n_trials": [N_TRIALS],
    "bootstrap": ["boolean"],
    "subsample_size": [Interval(Real, 0, 1, closed="neither")],
    "band": [Percentiles()],
    "random_state": [NON_NEGATIVE_INT],
    "row_id": [ColumnNames(allow_single=True), None],
}

#: a marginal plot's response: a column of data, or values for in-memory data
_TARGET = [ColumnOrValues(), None]
_BINS = [POSITIVE_INT]
#: probabilities at which every numeric feature's exact quantiles are reported (a plot's deciles)
_QUANTILES = [Probabilities(), None]

SPECS = {
    "partial_dependence": {
        **MODEL, **GRID, **ENGINE,
        "features": NO_VALIDATION,  # check_features: names, pairs and lists of them, against the data
        "quantiles": _QUANTILES,
        "method": [StrOptions(*PD_METHODS)],
        "kind": [StrOptions(*KINDS)],
        **TRIALS,
    },
    "ice": {
        **MODEL, **GRID, **ENGINE,
        "feature": [ColumnOrIndex()],
        "quantiles": _QUANTILES,
        "n_lines": [POSITIVE_INT, None],
        "centered": ["boolean"],
        "random_state": TRIALS["random_state"],
        "path": [str, os.PathLike, None],
        "id_columns": [ColumnNames(), None],
        "overwrite": ["boolean"],
        **TRIALS,
    },
    "ale": {
        **MODEL,
        "features": NO_VALIDATION,  # check_features, against the data
        "bins": _BINS,
        "order": [dict, None],
        "batch_rows": ENGINE["batch_rows"],
        **TRIALS,
    },
    "marginal": {
        **MODEL,
        "features": NO_VALIDATION,  # check_features, against the data
        "target": _TARGET,
        "model": NO_VALIDATION,  # None, or resolve_predictor
        "bins": _BINS,
        "binning": [StrOptions("quantile", "uniform")],
        **TRIALS,
    },
    "pd_variance": {
        **MODEL, **GRID, **ENGINE,
        "features": NO_VALIDATION,  # names or pairs, depending on measure; checked in the function
        "measure": [StrOptions("importance", "interaction")],
        "grid_resolution": [_GRID_RESOLUTION, None],  # None: the measure's default
        **TRIALS,
    },
    "h_statistic": {
        **MODEL,
        "pairs": NO_VALIDATION,  # h_items
        "features": NO_VALIDATION,
        "total": ["boolean"],
        "n_points": [Interval(Integral, 2, None, closed="left")],
        **ENGINE,
        **TRIALS,
    },
    "compare": {
        **MODEL,
        "feature": [ColumnOrIndex()],
        "target": _TARGET,
        "stratpd": NO_VALIDATION,  # None, True/False, or a curve (checked by _curve_of)
        "curves": [dict, None],
        "grid_resolution": GRID["grid_resolution"],
        "percentiles": GRID["percentiles"],
        "bins": _BINS,
        "stratpd_kwargs": [dict, None],
        "batch_rows": ENGINE["batch_rows"],
        **TRIALS,
    },
    "model_curves": {
        **MODEL,
        "grid": [InstancesOf(dict, "a dict {feature: values}"), None],
        **ENGINE,
        "methods": NO_VALIDATION,  # each method's features and parameters, against its spec (_curves._requests)
        "quantiles": _QUANTILES,
        "target": _TARGET,
        **TRIALS,
    },
}

#: the parameters each method of :func:`daskpd.model_curves` takes in its own request
#: (``methods[m]``); the others are model_curves' own, shared by every method
PER_REQUEST = {
    "partial_dependence": ("grid_resolution", "percentiles", "method"),
    "ice": ("grid_resolution", "percentiles", "n_lines", "centered"),
    "ale": ("bins",),
    "marginal": ("bins", "binning"),
    "pd_variance": ("grid_resolution", "percentiles"),
    "h_statistic": ("n_points", "total"),
}


def check_trials_method(caller: str, n_trials: int, method: str, name: str = "method") -> None:
    """Bootstrap trials re-weight the rows; partial dependence by tree recursion reads
    none (``name``: how the caller names partial dependence's ``method``)."""
    if n_trials > 1 and method == "recursion":
        raise InvalidParameterError(f"{caller}: n_trials > 1 re-weights the rows of data; {name}='recursion' reads "
                                    f"no rows. Use {name}='brute'")


@dataclass(frozen=True)
class ModelOptions:
    """How the model is called on the rows, one value for every method of a request (the
    :data:`MODEL` and :data:`ENGINE` groups' values, validated): the model's ``response``
    (and ``target_class``), its input ``columns`` and ``categorical_features``, the rows'
    ``sample_weight`` (a column of the data, or values for pandas data), the ``engine``
    and ``batch_rows``, and the parquet ``filters`` the data was opened with (the rows the
    engine notice counts).  The defaults are the public functions'."""

    response: str = "auto"
    target_class: object = None
    columns: list | None = None
    categorical_features: object = None
    sample_weight: object = None
    engine: str = "auto"
    batch_rows: int = DEFAULT_BATCH_ROWS
    filters: object = None


@dataclass(frozen=True)
class TrialOptions:
    """The bootstrap trials riding the pass, the same weights for every method (the
    :data:`TRIALS` group's values, validated; :meth:`daskpd.model._passes.Trials.of`
    makes the trials of them): ``n_trials`` (1: none), Poisson ``bootstrap`` or subsamples
    of ``subsample_size``, the ``band``'s probabilities, ``random_state`` (which also seeds
    ICE's line sample and the H-statistic's points) and the ``row_id`` columns.  The
    defaults are the public functions'."""

    n_trials: int = 1
    bootstrap: bool = True
    subsample_size: float = 0.75
    band: tuple = (0.05, 0.95)
    random_state: int = 0
    row_id: object = None
