"""Set up a model-based request: the parameters' constraints, then the checks that need
the data's columns (features, weights), then the model and the columns to read.

The constraints here are shared by :func:`daskpd.partial_dependence`,
:func:`daskpd.ice`, :func:`daskpd.ale`, :func:`daskpd.marginal`,
:func:`daskpd.pd_variance` and :func:`daskpd.model.compare.compare`; each function adds
its own (see :mod:`daskpd._validation`).
"""
from __future__ import annotations

from numbers import Integral

from .._validation import (IO_CONSTRAINTS, NO_VALIDATION, POSITIVE_INT, ArrayLike, ArrayOrColumn, ColumnNames,
                           Interval, Percentiles, StrOptions)

__all__ = ["MODEL_CONSTRAINTS", "GRID_CONSTRAINTS", "RESPONSES", "ENGINES", "DEFAULT_BATCH_ROWS"]

#: stacked rows per model call (rows x grid copies), bounds the memory of a batch
DEFAULT_BATCH_ROWS = 1 << 20
RESPONSES = ("auto", "predict", "predict_proba", "decision_function")
ENGINES = ("auto", "tree", "predict")

#: the model, its response and the rows' weights: every model-based function
MODEL_CONSTRAINTS = {
    "model": NO_VALIDATION,  # resolve_predictor: needs the model's own attributes
    "data": NO_VALIDATION,  # daskpd.io.load
    "sample_weight": [ArrayOrColumn(), None],
    "response": [StrOptions(*RESPONSES)],
    "target_class": NO_VALIDATION,  # one of the model's classes_ (or an output column)
    "columns": [ColumnNames(allow_empty=False), None],
    "categorical_features": [ColumnNames(), None],
    **IO_CONSTRAINTS,
}

#: the grid of PD-like methods
GRID_CONSTRAINTS = {
    "grid_resolution": [Interval(Integral, 2, None, closed="left")],
    "percentiles": [Percentiles()],
    "grid": [dict, ArrayLike(), None],
    "engine": [StrOptions(*ENGINES)],
    "batch_rows": [POSITIVE_INT],
}
