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

from typing import Sequence

import numpy as np
import pandas as pd

from .._engine.stats import ColumnSummary, mquantile_ranks, order_statistics, summarize
from .._errors import DataError, InvalidParameterError

__all__ = ["build_grids", "grids_and_quantiles", "custom_grid", "pd_grid_plan", "pd_grid", "check_grid_arg"]


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


def build_grids(ddf, features: Sequence[str], kinds: dict, *, grid_resolution: int, percentiles, grid=None,
                progress=None) -> dict[str, np.ndarray]:
    """Grids for ``features``: custom where given, else scikit-learn's rule on all rows."""
    return grids_and_quantiles(ddf, features, kinds, grid_resolution=grid_resolution, percentiles=percentiles,
                               grid=grid, progress=progress)[0]


def grids_and_quantiles(ddf, features: Sequence[str], kinds: dict, *, grid_resolution: int, percentiles,
                        grid=None, quantiles=None, progress=None):
    """:func:`build_grids`, plus the ``mquantiles`` at ``probs`` of the numeric columns
    of ``quantiles`` (``{column: probs}``, e.g. the deciles a plot marks), exact over all
    rows, from the same summary and order-statistics passes.  Returns ``(grids, {column:
    values})``."""
    grid = dict(grid or {})
    quantiles = {f: np.asarray(p, dtype="float64") for f, p in (quantiles or {}).items()
                 if kinds.get(f) == "numeric"}
    out, qout = {}, {}
    need = [f for f in features if f not in grid]
    for f in features:
        if f in grid:
            out[f] = custom_grid(f, grid[f], kinds[f])
    summarised = list(dict.fromkeys([*need, *quantiles]))
    if not summarised:
        return out, qout
    sums = summarize(ddf, {f: kinds[f] for f in summarised}, progress=progress)
    plans, ranks, qplans = {}, {}, {}
    for f in need:
        g, rk = pd_grid_plan(sums[f], kinds[f], grid_resolution, percentiles)
        if g is not None:
            out[f] = g
        else:
            plans[f] = rk
            ranks[f] = list(rk[0]) + list(rk[1])
    for f, probs in quantiles.items():
        if sums[f].n == 0:
            continue
        qplans[f] = mquantile_ranks(sums[f].n, probs)
        ranks[f] = [*ranks.get(f, []), *qplans[f][0], *qplans[f][1]]
    if ranks:
        stats = order_statistics(ddf, sums, {f: sorted(set(int(r) for r in rs)) for f, rs in ranks.items()},
                                 progress=progress)
        for f, rk in plans.items():
            out[f] = pd_grid(f, stats[f], rk, grid_resolution)
        for f, (lo, hi, gamma) in qplans.items():
            xlo = np.array([stats[f][int(r)] for r in lo])
            xhi = np.array([stats[f][int(r)] for r in hi])
            qout[f] = (1.0 - gamma) * xlo + gamma * xhi
    return out, qout


def check_grid_arg(grid, features: Sequence[str], *, caller: str | None = None,
                   among: str = "the requested features") -> dict:
    """``grid``: None, a dict {feature: values} whose keys are among ``features`` (which
    ``among`` names), or (one feature) an array of values."""
    if grid is None:
        return {}
    if isinstance(grid, dict):
        unknown = [k for k in grid if k not in features]
        if unknown:
            raise InvalidParameterError(f"{caller + ': ' if caller else ''}parameter grid has entries for {unknown}, "
                                        f"which are not among {among} {list(features)}")
        return dict(grid)
    if len(features) == 1:
        return {features[0]: grid}
    raise InvalidParameterError("parameter grid must be a dict {feature: values} when several features are requested")
