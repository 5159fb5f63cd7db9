"""PD grids: a user's grid, or scikit-learn's ``_grid_from_X`` rule on the whole data set.

Distinct values when fewer than ``grid_resolution``, else ``grid_resolution`` equally
spaced points between the ``percentiles``, computed exactly (as
``scipy.stats.mstats.mquantiles``) by :func:`daskpd._engine.stats.order_statistics`.

Missing values, as scikit-learn 1.9 reads them (``_grid_from_X`` calls ``np.unique`` and
``mquantiles`` on the raw column): ``np.unique`` keeps one NaN, sorted last, so it
counts as one more distinct value and is the grid's last point when the distinct values
are few; ``mquantiles`` does not mask NaN, so the percentiles are order statistics of
all the rows with the NaNs sorted after every number (a column with 10% missing has its
95th percentile among its finite values' 94.4th...).  Where that lands on a NaN
scikit-learn's grid is all NaN; here that is a DataError saying which percentile to
lower, or to pass ``grid=``.  Infinite values count as missing.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

from .._engine.stats import ColumnSummary, mquantile_ranks, order_statistics, summarize
from .._errors import DataError, InvalidParameterError
from ._arrays import grid_names

__all__ = ["GridOptions", "build_grids", "quantile_values", "feature_quantiles", "custom_grid", "pd_grid_plan",
           "pd_grid", "check_grid_arg"]


def custom_grid(feature: str, values, kind: str) -> np.ndarray:
    """Validate a user grid for ``feature``."""
    if kind == "categorical":
        arr = np.asarray(values, dtype=object)
        if arr.ndim != 1 or len(arr) == 0:
            raise InvalidParameterError(f"parameter grid[{feature!r}] must be a non-empty 1-D list of levels")
        if pd.isna(pd.Series(arr)).any():
            raise InvalidParameterError(f"parameter grid[{feature!r}] contains missing values")
        return arr
    try:
        arr = np.asarray(values, dtype="float64")
    except (TypeError, ValueError):
        raise InvalidParameterError(f"parameter grid[{feature!r}] must be numbers (feature {feature!r} is numeric)") from None
    if arr.ndim != 1 or len(arr) == 0:
        raise InvalidParameterError(f"parameter grid[{feature!r}] must be a non-empty 1-D array; got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise InvalidParameterError(f"parameter grid[{feature!r}] contains missing or infinite values")
    return arr


class RankPlan(tuple):
    """``(lo, hi, gamma)`` of :func:`mquantile_ranks` over every row (NaNs sorted last):
    ``lo``/``hi`` clipped to the finite values' ranks (what order statistics can
    answer), ``nan_lo``/``nan_hi`` where the rank falls on a missing value."""

    nan_lo: np.ndarray
    nan_hi: np.ndarray


def _rank_plan(n_finite: int, n_missing: int, percentiles) -> RankPlan:
    lo, hi, gamma = mquantile_ranks(n_finite + n_missing, percentiles)
    plan = RankPlan((np.minimum(lo, n_finite - 1), np.minimum(hi, n_finite - 1), gamma))
    plan.nan_lo, plan.nan_hi = lo >= n_finite, hi >= n_finite
    return plan


def pd_grid_plan(summary: ColumnSummary, kind: str, grid_resolution: int, percentiles):
    """Either the grid (distinct values / levels) or the ranks needed for percentiles
    (scikit-learn's reading of missing values: see the module docstring)."""
    if summary.n == 0:
        raise DataError(f"feature {summary.name!r} has no non-missing values")
    if kind == "categorical":
        return summary.uniques, None
    nan = int(summary.n_missing > 0)  # np.unique keeps one NaN
    if summary.uniques is not None and len(summary.uniques) + nan < grid_resolution:
        return (np.append(np.asarray(summary.uniques, dtype="float64"), np.nan) if nan else summary.uniques), None
    return None, _rank_plan(summary.n, summary.n_missing, percentiles)


def pd_grid(name: str, stats: dict[int, float], plan, grid_resolution: int) -> np.ndarray:
    lo, hi, gamma = plan
    xlo = np.array([stats[int(r)] for r in lo])
    xhi = np.array([stats[int(r)] for r in hi])
    if isinstance(plan, RankPlan):
        xlo[plan.nan_lo] = np.nan
        xhi[plan.nan_hi] = np.nan
    emp = (1.0 - gamma) * xlo + gamma * xhi
    if not np.isfinite(emp).all():
        raise DataError(f"feature {name!r}: its missing values, which scikit-learn's grid sorts after every number, "
                        f"reach the upper percentile (scikit-learn's grid would be all NaN); lower percentiles[1] "
                        "below the share of non-missing rows, or pass grid=")
    if np.allclose(emp[0], emp[1]):
        raise DataError(f"feature {name!r}: percentiles are too close to each other, unable to build the grid; "
                        "choose percentiles that are further apart")
    return np.linspace(emp[0], emp[1], num=grid_resolution, endpoint=True)


@dataclass(frozen=True)
class GridOptions:
    """The grids of a PD-like request, built once at its public entry
    (:meth:`of`): ``grid_resolution`` points between the ``percentiles`` (scikit-learn's
    rule) for every feature without its own values in ``grid`` (``{feature: values}``),
    and, with ``quantiles`` (probabilities), every numeric feature's exact quantiles at
    them, from the same passes."""

    grid_resolution: int = 100
    percentiles: tuple = (0.05, 0.95)
    grid: dict = field(default_factory=dict)
    quantiles: np.ndarray | None = None

    @classmethod
    def of(cls, grid_resolution: int, percentiles, grid, features: Sequence[str], ds, quantiles=None, *,
           caller: str | None = None) -> "GridOptions":
        """The options of ``caller``'s request for ``features`` of the dataset ``ds``:
        ``grid`` (a dict whose keys are names or indices, or one feature's values) checked."""
        return cls(grid_resolution, tuple(percentiles), check_grid_arg(grid_names(grid, ds), features, caller=caller),
                   quantiles)

    def params(self) -> dict:
        """What a result's ``params`` record of its grid."""
        return {"grid_resolution": self.grid_resolution, "percentiles": list(self.percentiles)}


def build_grids(ddf, features: Sequence[str], kinds: dict, options: GridOptions):
    """The grids of ``features`` (custom where ``options.grid`` gives them, else
    scikit-learn's rule on all rows) and, with ``options.quantiles``, each numeric
    feature's ``mquantiles`` at those probabilities, exact over all rows, from the same
    summary and order-statistics passes.  Returns ``(grids, {feature: values})`` (None
    for the quantiles when none were asked for)."""
    grid, grid_resolution, percentiles = options.grid, options.grid_resolution, options.percentiles
    probs = options.quantiles
    quantiles = [f for f in features if kinds.get(f) == "numeric"] if probs is not None else []
    out, qout = {}, (None if probs is None else {})
    need = [f for f in features if f not in grid]
    for f in features:
        if f in grid:
            out[f] = custom_grid(f, grid[f], kinds[f])
    summarised = list(dict.fromkeys([*need, *quantiles]))
    if not summarised:
        return out, qout
    sums = summarize(ddf, {f: kinds[f] for f in summarised})
    plans, ranks, qplans = {}, {}, {}
    for f in need:
        g, rk = pd_grid_plan(sums[f], kinds[f], grid_resolution, percentiles)
        if g is not None:
            out[f] = g
        else:
            plans[f] = rk
            ranks[f] = list(rk[0]) + list(rk[1])
    for f in quantiles:
        if sums[f].n == 0:
            continue
        qplans[f] = mquantile_ranks(sums[f].n, probs)
        ranks[f] = [*ranks.get(f, []), *qplans[f][0], *qplans[f][1]]
    if ranks:
        stats = order_statistics(ddf, sums, {f: sorted(set(int(r) for r in rs)) for f, rs in ranks.items()})
        for f, rk in plans.items():
            out[f] = pd_grid(f, stats[f], rk, grid_resolution)
        for f, plan in qplans.items():
            qout[f] = quantile_values(stats[f], plan)
    return out, qout


def feature_quantiles(values: dict | None, features) -> dict | None:
    """A result's ``quantiles``: ``{feature: values}`` of its own numeric ``features``
    among ``values`` (None when no quantiles were asked for)."""
    return None if values is None else {f: values[f] for f in features if f in values}


def quantile_values(stats: dict[int, float], plan) -> np.ndarray:
    """``scipy.stats.mstats.mquantiles`` from the order statistics ``stats`` of a column
    at the ranks ``plan`` (:func:`mquantile_ranks`)."""
    lo, hi, gamma = plan
    xlo = np.array([stats[int(r)] for r in lo])
    xhi = np.array([stats[int(r)] for r in hi])
    return (1.0 - gamma) * xlo + gamma * xhi


def check_grid_arg(grid, features: Sequence[str], *, caller: str | None = None,
                   among: str = "the requested features") -> dict:
    """``grid``: None, a dict {feature: values} whose keys are among ``features`` (which
    ``among`` names), or (one feature) an array of values."""
    if grid is None:
        return {}
    where = f"{caller}: " if caller else ""
    if isinstance(grid, dict):
        unknown = [k for k in grid if k not in features]
        if unknown:
            raise InvalidParameterError(f"{where}parameter grid has entries for {unknown}, which are not among {among} "
                                        f"{list(features)}")
        return dict(grid)
    if len(features) == 1:
        return {features[0]: grid}
    raise InvalidParameterError(f"{where}parameter grid must be a dict {{feature: values}} when several features are "
                                "requested")
