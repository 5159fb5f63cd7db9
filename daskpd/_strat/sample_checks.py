"""The checks of a model-free request against its tree sample, before the trees are fitted:
the target's range and spread, the features and stratifying columns that cannot make a
curve (constant, suspect identifiers, too few rows per value), with the warnings and
notes that say which were left out and why.
"""
from __future__ import annotations

import os
import sys
import warnings

import numpy as np
import pandas as pd

from .._data.encode import as_float
from .._data.request import Request, left_out_note
from .._data.suspects import KEEP_HINT, leave_out, suspect_columns
from .._engine.sample_pass import Sample
from .._errors import DataError
from .estimators import estimator_named
from .stratification import Stratification


def check_sample(sample: pd.DataFrame, target, features, kinds, nan_as_level, skip=(), filters=None) -> dict:
    """Raise on an unusable sample or feature; features in ``skip`` that are constant or
    empty are returned as ``{feature: why}`` instead of raising."""
    skipped = {}
    if len(sample) == 0:
        if filters:
            raise DataError(f"the filters removed every row: no row satisfies filters={filters!r}")
        raise DataError("data has no rows")
    y = as_float(sample[target])
    if not np.isfinite(y).any():
        raise DataError(f"target {target!r} has no finite values (in a sample of {len(sample):,} rows)")
    for f in features:
        est = estimator_named(kinds[f], f"feature {f!r}")
        vals, valid = est.sample_values(sample[f])
        if not valid.any() and not est.keeps_missing(nan_as_level):
            if f in skip:
                skipped[f] = "empty"
                continue
            raise DataError(f"feature {f!r} has no non-missing values (in a sample of {len(sample):,} rows)")
        nuniq = pd.Series(np.asarray(vals)[valid]).nunique()
        if nuniq < 2 and not (est.keeps_missing(nan_as_level) and not valid.all()):
            if f in skip:
                skipped[f] = "constant"
                continue
            raise DataError(f"feature {f!r} is constant (a single distinct value in a sample of "
                            f"{len(sample):,} rows); its partial dependence is undefined")
    return skipped


def _user_stacklevel() -> int:
    """The ``stacklevel`` of the first frame outside daskpd, for a warning raised by the
    caller of this function (the user's line, whatever the depth of the call)."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    frame, level = sys._getframe(2), 2
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    return level


def check_target_range(target: str, y_range, n_rows: int) -> None:
    """A DataError when every row holds the same target (``y_range``: its min and max
    over all rows): no partial dependence to estimate, every curve would be flat zero."""
    if y_range is None or y_range[0] != y_range[1]:
        return
    raise DataError(f"target {target!r} is constant: every row with a value holds {y_range[0]:g} (of {n_rows:,} "
                    "rows read), so there is no partial dependence to estimate (every curve would be flat zero); "
                    "check the target column and the filters")


def target_std(sample: pd.DataFrame, target: str) -> float | None:
    """The target's standard deviation on the tree sample (the plots' scale for a curve
    not distinguishable from flat), or None."""
    y = as_float(sample[target])
    y = y[np.isfinite(y)]
    return float(np.std(y, ddof=1)) if len(y) > 1 else None


def stamp_target_std(results: dict, strat: Stratification) -> None:
    """``params["target_std"]`` of every result: the target's spread on the tree sample
    the stratification was fitted on."""
    value = strat.params.get("target_std")
    for res in results.values():
        if value is not None and hasattr(res, "params"):
            res.params["target_std"] = value


def leave_out_suspects(request: Request, sample: Sample, features: list, strat_cols: list, kinds: dict,
                       warn: bool = True) -> tuple[list, list, dict, dict]:
    """``(features, strat_cols, left, left_strat)``: the suspect columns of the tree
    sample (:func:`daskpd._data.suspects.suspect_columns`) taken out of the request's
    default sets (``left``: the features left out, ``{feature: why}``, for the caller's
    counted note; ``left_strat``: the stratifying columns left out that are not features
    left out, counted in a note here), and with ``warn`` a warning for each suspect still
    used."""
    suspects = suspect_columns(sample.frame, request.target, [*features, *strat_cols], kinds,
                               n_rows=sample.n_rows, lake=request.dataset.lake)
    if not suspects:
        return features, strat_cols, {}, {}
    features, strat_cols, left_f, left_s, lines = leave_out(
        suspects, features, strat_cols, default_features=request.default_features,
        default_strat=request.default_strat, keep=request.keep_suspect)
    only_strat = {c: w for c, w in left_s.items() if c not in left_f}
    if only_strat:
        warnings.warn(left_out_note("daskpd", only_strat, len(strat_cols), "name them in stratify_on= to use them",
                                    what="stratifying columns"), UserWarning, stacklevel=_user_stacklevel())
    for line in lines if warn else ():
        warnings.warn(line, UserWarning, stacklevel=_user_stacklevel())
    return features, strat_cols, left_f, only_strat


def left_out_whys(left: dict) -> str:
    return "; ".join(f"{c!r} ({w})" for c, w in list(left.items())[:10]) + ("; ..." if len(left) > 10 else "")


def check_strata(features, strat_cols, request: Request, sample: pd.DataFrame, min_slopes_per_x: int = 5,
                 left_suspect=()) -> None:
    """A DataError naming the first (numeric) feature with no other column to be
    stratified on (none, or only columns constant on the tree ``sample``) when
    ``min_slopes_per_x`` > 1: its tree would be one leaf giving one slope per position,
    the curve would be empty and the advice of an empty curve would not apply.  (With
    ``min_slopes_per_x=1`` the one leaf gives the marginal curve, as stratx does; a
    categorical feature's one leaf compares every category: its marginal effects.)
    ``left_suspect``: the suspect columns left out of the stratifying columns (the message
    names them and the option that keeps them)."""
    if min_slopes_per_x <= 1:
        return
    constant = {c for c in strat_cols if c in sample and sample[c].nunique(dropna=False) < 2}
    for f in features:
        if any(c != f and c not in constant for c in strat_cols):
            continue
        cols = ", ".join(f"{c!r}" + (" (constant)" if c in constant else "") for c in strat_cols) or "none"
        raise DataError(f"feature {f!r} has no other column to be stratified on (the stratifying columns: {cols}): "
                        "partial dependence compares rows alike in the other columns, and with none its tree is one "
                        f"leaf, one slope per x, fewer than min_slopes_per_x={min_slopes_per_x}. Name at least one "
                        "other column in features / stratify_on (a job: its 'features' or 'stratify_on' keys)"
                        + (f", or pass {KEEP_HINT} to keep the suspect columns left out ({left_out_whys(left_suspect)})"
                           if left_suspect else "")
                        + "; with no other column the partial dependence is the marginal curve "
                        f"(daskpd.marginal(data, [{f!r}], target={request.target!r}), or min_slopes_per_x=1)")
