"""The importance table of a model-free run: the home of measuring its curves
(:func:`measure_curves`: the three measures per feature and per set, normalised, and each
curve's support), of the table of the measures and the trials' spread
(:func:`measures_table`) and of its last columns -- the p-values, the raw measures, the
positions, rows and support (:func:`finish_table`);
:func:`daskpd._importance.strat_curves_and_importances` calls them in that order.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ._catstratpd import driver_side as categorical_driver_side
from ._errors import DataError
from ._importance_result import MEASURES, curve_arrays, curve_measures, normalize_measures
from ._stratpd import driver_side as numeric_driver_side
from .results.support import curve_support, no_support_reason, support_flag, support_order

__all__ = ["Measured", "measure_curves", "measures_table", "finish_table"]


@dataclass
class Measured:
    """The measures of a run's curves: ``curves`` (each feature's, made driver-side),
    ``raw`` ``(sets, features, 3)`` in units of the target and ``vals`` (normalised, or
    ``raw``), ``n_pos`` / ``n_used`` (the first set's positions with an estimate and
    their rows), ``support`` (rows used, rows with a value) and ``flags`` (each feature's
    support)."""

    curves: dict
    raw: np.ndarray
    vals: np.ndarray
    n_pos: np.ndarray
    n_used: np.ndarray
    support: np.ndarray
    flags: np.ndarray


def measure_curves(run, feats, kinds, n_sets, *, normalize, min_slopes_per_x, target_boolean) -> Measured:
    """The measures of ``run``'s curves of ``feats`` (driver; the curves were finished
    next to the merged aggregates); a :class:`DataError` when no feature has support."""
    curves = {}
    raw = np.full((n_sets, len(feats), 3), np.nan)
    n_pos = np.zeros(len(feats), dtype="int64")
    n_used = np.zeros(len(feats))
    support = np.zeros((len(feats), 2))  # rows used, rows with a value
    for i, f in enumerate(feats):
        res = run.results[f]
        curves[f] = (numeric_driver_side(run, res, min_slopes_per_x=min_slopes_per_x, strict=False)
                     if kinds[f] == "numeric" else categorical_driver_side(res, strict=False))
        support[i] = curve_support(res)
        if target_boolean:
            res.params["target_boolean"] = True
        for s, (pdv, cnt) in enumerate(curve_arrays(res, n_sets)):
            raw[s, i] = curve_measures(pdv, cnt, kinds[f])
            if s == 0:
                ok = np.isfinite(pdv)
                n_pos[i] = int(ok.sum())
                n_used[i] = float(cnt[ok].sum())
    flags = np.array([support_flag(u, w) for u, w in support], dtype=object)
    if len(flags) and (flags == "no_support").all():
        raise DataError("no feature has support: "
                        + "; ".join(f"{f!r}: {no_support_reason(run.results[f])}" for f in feats[:5])
                        + ("; ..." if len(feats) > 5 else ""))
    raw[:, flags == "no_support", :] = np.nan  # no estimate: no measure (a bare marginal is not a PD)
    vals = np.stack([normalize_measures(raw[s]) for s in range(n_sets)]) if normalize else raw.copy()
    return Measured(curves, raw, vals, n_pos, n_used, support, flags)


def measures_table(measured: Measured, feats, kinds, n_sets) -> tuple:
    """``(table, trials)``: the table of the kinds and the measures (with their ``*_std``
    over the trials), and the trials' long table (None without trials)."""
    vals = measured.vals
    table = pd.DataFrame(index=pd.Index(feats, name="feature"))
    table["kind"] = [kinds[f] for f in feats]
    for j, m in enumerate(MEASURES):
        table[m] = vals[0, :, j]
    trials_df = None
    if n_sets > 1:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN features
            sd = np.nanstd(vals[1:], axis=0, ddof=1)
        for j, m in enumerate(MEASURES):
            table[f"{m}_std"] = sd[:, j]
        trials_df = pd.DataFrame({
            "trial": np.repeat(np.arange(1, n_sets), len(feats)),
            "feature": np.tile(feats, n_sets - 1),
            **{m: vals[1:, :, j].ravel() for j, m in enumerate(MEASURES)},
        })
    return table, trials_df


def finish_table(table: pd.DataFrame, measured: Measured, sort_by: str, pv=None) -> pd.DataFrame:
    """``table`` with the p-values ``pv`` (``(features, 3)``, or None), the raw measures,
    the positions, rows and support, sorted (:func:`daskpd.results.support.support_order`)."""
    raw, n_pos, n_used, support, flags = measured.raw, measured.n_pos, measured.n_used, measured.support, measured.flags
    if pv is not None:
        for j, m in enumerate(MEASURES):
            table[f"{m}_pvalue"] = pv[:, j]
    for j, m in enumerate(MEASURES):
        table[f"{m}_raw"] = raw[0, :, j]
    table["n_positions"] = n_pos
    table["n_rows"] = n_used.astype("int64") if np.all(n_used == np.round(n_used)) else n_used
    used = support[:, 0]
    table["support_rows"] = used.astype("int64") if np.all(used == np.round(used)) else used
    with np.errstate(invalid="ignore", divide="ignore"):
        table["support_share"] = np.where(support[:, 1] > 0, used / np.where(support[:, 1] > 0, support[:, 1], 1), 0.0)
    table["support"] = pd.array(flags, dtype="str")
    return support_order(table, sort_by)
