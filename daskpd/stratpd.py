"""StratPD for numeric features: the driver-side finalize and the public function.

Finalize, from per-(leaf, x) sums (seed 000, Parr & Wilson):

1. In each leaf, order by x and take mean y per x.  Forward differences between a
   leaf's adjacent x values give slopes over [x_i, x_{i+1}).  A leaf holding a single x
   carries no slope; its rows are counted as ignored.
2. Average, at every distinct x position, the slopes of all segments covering it.  This
   is a sweep with difference arrays -- ``+slope`` where a segment starts, ``-slope``
   where it ends, cumulative sums -- O(S + U) after the O(S log S) grouping, never a
   positions x segments matrix (what runs stratx out of memory).
3. Positions averaging fewer than ``min_slopes_per_x`` slopes are unsupported.  The
   curve is integrated from the leftmost supported position (pd = 0 there) to the right
   end of the last supported interval; an unsupported interval *inside* that range gets
   the slope linearly interpolated from its supported neighbours (stratx instead carries
   the left neighbour's slope, and drops the last x value; see docs/stratpd.md).
"""
from __future__ import annotations

import functools
import warnings

import numpy as np

from .aggregate import N, SUM_X, SUM_Y, FeatureAgg
from .io import DataError
from .pipeline import check_int, run_strat
from .results import StratPDResult
from .stratify import tree_method_of, DEFAULT_MAX_BINS, DEFAULT_SAMPLE_SIZE, DEFAULT_TREE_METHOD

__all__ = ["stratpd", "finalize_numeric", "finish_numeric", "empty_curve_message", "slope_segments", "average_slopes",
           "integrate"]


def slope_segments(leaf, pos, cnt, sum_y, xbar):
    """Per-leaf forward differences.

    Inputs are per-(leaf, position) rows sorted by leaf then position, with cnt > 0.
    Returns (start_pos, end_pos, slope, single_x_rows, n_leaves).
    """
    ybar = sum_y / cnt
    same = leaf[1:] == leaf[:-1]
    i = np.flatnonzero(same)
    dx = xbar[i + 1] - xbar[i]
    slope = (ybar[i + 1] - ybar[i]) / dx
    # leaves with a single position
    starts = np.flatnonzero(np.r_[True, ~same])
    sizes = np.diff(np.r_[starts, len(leaf)])
    single = np.repeat(sizes == 1, sizes)
    return pos[i], pos[i + 1], slope, float(cnt[single].sum()), len(starts)


def average_slopes(start, end, slope, n_positions):
    """Mean slope and slope count at every position 0..n_positions-1 (sweep)."""
    add = np.bincount(start, weights=slope, minlength=n_positions + 1)
    sub = np.bincount(end, weights=slope, minlength=n_positions + 1)
    s = np.cumsum(add - sub)[:n_positions]
    c = np.cumsum(np.bincount(start, minlength=n_positions + 1) - np.bincount(end, minlength=n_positions + 1))[:n_positions]
    # Where no segment covers a position the running sum must be exactly 0: remove the
    # rounding residue accumulated so far, so that it does not leak to later positions.
    zero = c == 0
    if zero.any():
        last_zero = np.maximum.accumulate(np.where(zero, np.arange(n_positions), -1))
        resid = np.where(last_zero >= 0, s[np.maximum(last_zero, 0)], 0.0)
        s = s - resid
        s[zero] = 0.0
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(c > 0, s / np.maximum(c, 1), np.nan)
    return mean, c


def integrate(ux, slope, slope_count, min_slopes_per_x):
    """pd over positions; see the module docstring.  Returns (pd, supported)."""
    n = len(ux)
    pd_ = np.full(n, np.nan)
    keep = slope_count >= min_slopes_per_x
    keep[-1:] = False  # no interval starts at the last position
    k = np.flatnonzero(keep)
    supported = np.zeros(n, bool)
    if len(k) == 0:
        return pd_, supported
    first, last = k[0], k[-1]
    s = slope[first:last + 1].copy()
    gap = ~keep[first:last + 1]
    if gap.any():
        s[gap] = np.interp(ux[first:last + 1][gap], ux[k], slope[k])
    dx = np.diff(ux[first:last + 2])
    pd_[first] = 0.0
    pd_[first + 1:last + 2] = np.cumsum(s * dx)
    supported[first:last + 2] = True
    return pd_, supported


def empty_curve_message(res: StratPDResult, min_slopes_per_x: int) -> str | None:
    """The warning for a curve with no supported position (None when it has one)."""
    if res.supported.any():
        return None
    return (f"StratPD for feature {res.feature!r}: no x position has at least min_slopes_per_x={min_slopes_per_x} "
            f"slopes ({len(res.x)} positions, {res.n_leaves} leaves); the curve is empty. Lower min_slopes_per_x or "
            "min_samples_leaf, or give more rows.")


def finalize_numeric(agg: FeatureAgg, *, feature: str, target: str, binned: bool, min_slopes_per_x: int,
                     params: dict | None = None, n_segments: int = 500, random_state: int = 0,
                     warn: bool = True) -> StratPDResult:
    """Per-(leaf, x) sums -> StratPDResult (plus bootstrap curves when trials were run).

    ``warn=False``: no warning for an empty curve (the caller emits
    :func:`empty_curve_message` where the user sees it, e.g. on the driver).
    """
    g = agg.sums
    n_sets = agg.n_sets
    if binned and agg.stats_per_set < 3:
        raise ValueError(f"feature {feature!r} is binned but its aggregate has no sums of x")
    cnt_all = agg.column(N)
    keys = g.key.astype("float64")
    ux_keys, pos = np.unique(keys, return_inverse=True)
    count = np.bincount(pos, weights=cnt_all, minlength=len(ux_keys))
    if binned:
        ux = np.bincount(pos, weights=agg.column(SUM_X), minlength=len(ux_keys)) / count
    else:
        ux = ux_keys

    def one(t):
        cnt, sy = agg.column(N, t), agg.column(SUM_Y, t)
        m = cnt > 0
        xbar = (agg.column(SUM_X, t)[m] / cnt[m]) if binned else keys[m]
        start, end, slope, ignored, n_leaves = slope_segments(g.leaf[m], pos[m], cnt[m], sy[m], xbar)
        mean, c = average_slopes(start, end, slope, len(ux))
        keep = c >= min_slopes_per_x
        pdv, supported = integrate(ux, mean, c, min_slopes_per_x)
        return pdv, supported, np.where(keep, mean, np.nan), c, ignored, n_leaves, (start, end, slope)

    pd_, supported, slope, c, ignored, n_leaves, segs = one(0)
    trials = None
    if n_sets > 1:
        trials = np.vstack([one(t)[0] for t in range(1, n_sets)])
    start, end, seg_slope = segs
    if len(seg_slope) > n_segments:
        pick = np.sort(np.random.default_rng(random_state).choice(len(seg_slope), n_segments, replace=False))
        start, end, seg_slope = start[pick], end[pick], seg_slope[pick]
    n_rows_valid = float(cnt_all.sum())
    res = StratPDResult(
        feature=feature, target=target, x=ux, pd=pd_, slope=slope, slope_count=c, count=count,
        supported=supported, n_rows=int(agg.n_rows), n_used=int(n_rows_valid - ignored), n_ignored=int(ignored),
        n_missing_x=int(agg.n_missing_x), n_bad_y=int(agg.n_bad_y), n_leaves=int(n_leaves), binned=bool(binned),
        params=dict(params or {}),
        segments={"x0": ux[start], "x1": ux[end], "slope": seg_slope}, trials_pd=trials,
    )
    message = empty_curve_message(res, min_slopes_per_x) if warn else None
    if message:
        warnings.warn(message, UserWarning, stacklevel=3)
    return res


def stratpd(
    data,
    target: str,
    feature: str,
    *,
    features=None,
    min_samples_leaf: int = 15,
    min_slopes_per_x: int = 5,
    sample_size: int = DEFAULT_SAMPLE_SIZE,
    max_bins: int | None = DEFAULT_MAX_BINS,
    tree_method: str = DEFAULT_TREE_METHOD,
    random_state: int = 0,
    progress=None,
    storage_options: dict | None = None,
    filters=None,
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
        Columns the stratifying tree may use (default: every column but target);
        ``feature`` itself is always excluded.  Non-numeric ones are encoded for
        the tree (categories as codes learned from the sample, dates as numbers);
        missing values are kept and the tree routes them.
    min_samples_leaf : int, default 15
        Leaf size of the stratifying tree (fitted on the sample).
    min_slopes_per_x : int, default 5
        Positions averaging fewer leaf slopes are unsupported.
    sample_size : int, default 200,000
        Rows (bottom-k by seeded row hash) used to fit the tree; all rows if fewer.
    max_bins : int or None, default 1000
        If ``feature`` has more distinct values than this in the sample, it is cut into
        this many quantile bins (edges from the sample) and each bin is placed at the
        mean x of its rows; ``None`` never bins.  Integer-like features with few values
        keep their exact values.
    tree_method : {"hist", "exact"}, default "hist"
        How the stratifying tree is grown.  "hist": daskpd's histogram tree (columns
        cut into at most 1023 bins on the sample -- exact for columns with at most 1023
        distinct values -- and grown to full size; about 4x faster to fit).  "exact":
        scikit-learn's ``DecisionTreeRegressor`` (exact thresholds, as stratx).
    random_state : int, default 0
        Seeds the sample, the tree and the plotted segment sample.
    progress : bool or None
        Show a progress bar (None: when stderr is a terminal).
    storage_options, filters
        Passed to ``dask.dataframe.read_parquet`` for path inputs.

    Returns
    -------
    StratPDResult
    """
    min_slopes_per_x = check_int("min_slopes_per_x", min_slopes_per_x, 1)
    if not isinstance(feature, str):
        raise DataError(f"feature must be a column name (str); got {feature!r}")
    run = _run_numeric(data, target, [feature], features=features, min_samples_leaf=min_samples_leaf,
                       sample_size=sample_size, max_bins=max_bins, tree_method=tree_method, random_state=random_state,
                       progress=progress, storage_options=storage_options, filters=filters,
                       finish=functools.partial(finish_numeric, min_slopes_per_x=min_slopes_per_x, warn=False))
    return driver_side(run, run.finished[feature], min_slopes_per_x=min_slopes_per_x)


def _run_numeric(data, target, feats, *, features, **kw):
    return run_strat(data, target, feats, stratify_on=features, expect_kind="numeric", **kw)


def driver_side(run, res: StratPDResult, *, min_slopes_per_x: int) -> StratPDResult:
    """What a curve finished on a worker still needs on the driver: the run's full
    timings, and the empty-curve warning where the user sees it."""
    res.params["timings"] = {k: round(v, 4) for k, v in run.timings.items()}
    message = empty_curve_message(res, min_slopes_per_x)
    if message:
        warnings.warn(message, UserWarning, stacklevel=3)
    return res


def finish_numeric(run, feature: str, *, min_slopes_per_x: int, n_segments: int = 500, warn: bool = True):
    spec = next(s for s in run.plan.specs if s.feature == feature)
    params = {
        "min_samples_leaf": spec.tree.min_samples_leaf if spec.tree is not None else None,
        "tree_method": tree_method_of(spec.tree),
        "tree_leaves": spec.tree.get_n_leaves() if spec.tree is not None else 1,
        "min_slopes_per_x": min_slopes_per_x,
        "sample_rows": run.sample_rows,
        "n_bins": None if spec.edges is None else len(spec.edges) - 1,
        "stratified_on": spec.other,
        "random_state": run.plan.random_state,
        "n_trials": run.plan.n_trials,
        "n_partitions": run.n_partitions,
        "timings": {k: round(v, 4) for k, v in run.timings.items()},
    }
    return finalize_numeric(run.aggs[feature], feature=feature, target=run.plan.target,
                            binned=spec.edges is not None, min_slopes_per_x=min_slopes_per_x, params=params,
                            n_segments=n_segments, random_state=run.plan.random_state, warn=warn)
