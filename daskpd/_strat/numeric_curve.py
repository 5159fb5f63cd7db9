"""StratPD's curve from its buckets' sums: the home of the sweep, the integral and the
result of a numeric feature.

The buckets' :class:`~daskpd._strat.numeric.BucketSums` are added
(:func:`~daskpd._strat.numeric.fold_slope_sums`), and :func:`sweep` turns the
per-position sums of the slopes of segments starting and ending there into the mean
slope and the slope count at every position.  Then :func:`integrate`: the slope over
[x_i, x_{i+1}) is the mean where at least ``min_slopes_per_x`` leaf slopes cover x_i.
An interval no leaf slope covers contributes nothing (a flat step, as stratx 0.5).  An
interval with a few slopes (0 < count < ``min_slopes_per_x``) between two valid ones
takes the slope interpolated linearly in x from its valid neighbours
(``few_slopes="interpolate"``, the default) or contributes nothing (``"flat"``, stratx
0.5's rule).  x_i is supported iff the interval starting or ending at it has a slope
(stratx's reported positions); pd is 0 at the first supported position and NaN where
unsupported.  The rule per interval (:func:`~daskpd.results.curves.interval_slopes`)
lives with the result, whose plot reads it back (:meth:`StratPDResult.intervals`).
:func:`curve_from_sums` gives the feature's :class:`StratPDResult`.
"""
from __future__ import annotations

import numpy as np

from ..results.curves import DEFAULT_FEW_SLOPES, StratPDResult, band_settings, interval_slopes
from .bandunits import effective_units, fold_terms
from .numeric import fold_slope_sums
from .trees import tree_method_of

__all__ = ["curve_from_sums", "sweep", "integrate", "integrate_trial", "support_counts", "empty_curve_message"]


def _fold(tables: list, P: int) -> np.ndarray:
    """Per-code sums of per-virtual-bucket tables given in virtual-bucket order: each
    code's terms are added in that order (independent of how buckets were cut)."""
    keys = [t.key for t in tables if len(t)]
    if not keys:
        return np.zeros(P)
    return np.bincount(np.concatenate(keys), weights=np.concatenate([t.values[:, 0] for t in tables if len(t)]),
                       minlength=P)


def sweep(add: np.ndarray, sub: np.ndarray, starts: np.ndarray, ends: np.ndarray, wadd=None, wsub=None):
    """Mean slope and slope count at every position from per-position sums of segment
    slopes starting (``add``) and ending (``sub``) there, and segment counts.  With
    ``wadd`` / ``wsub`` (a binned feature's sums of the segments' weights; ``add`` /
    ``sub`` then sum w * slope) the mean is weighted: sum w * slope / sum w."""
    n = len(add)
    c = np.cumsum(starts - ends)
    zero = c == 0
    last_zero = np.maximum.accumulate(np.where(zero, np.arange(n), -1)) if zero.any() else None

    def running(a, b):
        # Where no segment covers a position the running sum must be exactly 0: remove the
        # rounding residue accumulated so far, so that it does not leak to later positions.
        s = np.cumsum(a - b)
        if last_zero is not None:
            resid = np.where(last_zero >= 0, s[np.maximum(last_zero, 0)], 0.0)
            s = s - resid
            s[zero] = 0.0
        return s

    s = running(add, sub)
    if wadd is None:
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(c > 0, s / np.maximum(c, 1), np.nan)
        return mean, c
    w = running(wadd, wsub)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where((c > 0) & (w > 0), s / np.where(w > 0, w, 1.0), np.nan)
    return mean, c


def integrate(ux, slope, slope_count, min_slopes_per_x, few_slopes=DEFAULT_FEW_SLOPES):
    """pd over positions; see the module docstring.  Returns (pd, supported)."""
    n = len(ux)
    used, defined = interval_slopes(ux, slope, slope_count, min_slopes_per_x, few_slopes)
    supported = defined.copy()
    supported[1:] |= defined[:-1]  # x_i closes the interval on its left
    pd_ = np.full(n, np.nan)
    if not supported.any():
        return pd_, supported
    first = int(np.argmax(supported))
    # nothing is used before the first supported position, so pd is 0 there exactly
    pd_[first] = 0.0
    pd_[first + 1:] = np.cumsum(used[first:-1] * np.diff(ux[first:]))
    pd_[~supported] = np.nan
    return pd_, supported


def integrate_trial(ux, slope, slope_count, curve_count, min_slopes_per_x, few_slopes=DEFAULT_FEW_SLOPES):
    """A trial's pd over the curve's own support (``curve_count``: set 0's slope
    counts): an interval has a slope in the trial wherever it has one in the curve --
    the trial's mean where its leaves drew any slope there, else its slopes of the
    nearest intervals where they did, interpolated linearly in x (held at the ends) --
    so every trial is estimated, and 0, where the curve is, whatever leaves it drew."""
    used0, defined0 = interval_slopes(ux, slope, curve_count, min_slopes_per_x, few_slopes)
    c0 = np.asarray(curve_count)
    valid0 = c0 >= min_slopes_per_x
    valid0[-1:] = False
    own = valid0 & (np.asarray(slope_count) > 0)
    used = np.where(own, slope, 0.0)
    fill = defined0 & ~own
    k = np.flatnonzero(own)
    if fill.any() and len(k):
        i = np.flatnonzero(fill)
        used[i] = np.interp(ux[i], ux[k], np.asarray(slope)[k])
    supported = defined0.copy()
    supported[1:] |= defined0[:-1]
    pd_ = np.full(len(ux), np.nan)
    if not supported.any() or (fill.any() and not len(k)):
        return pd_
    first = int(np.argmax(supported))
    pd_[first] = 0.0
    pd_[first + 1:] = np.cumsum(np.where(defined0, used, 0.0)[first:-1] * np.diff(ux[first:]))
    pd_[~supported] = np.nan
    return pd_


def support_counts(ux, slope, slope_count, min_slopes_per_x, few_slopes=DEFAULT_FEW_SLOPES) -> dict:
    """Within the curve (from its first to its last supported position): intervals no leaf
    slope covers (flat steps), intervals with a few slopes interpolated or flat, and the
    positions left unsupported inside."""
    used, defined = interval_slopes(ux, slope, slope_count, min_slopes_per_x, few_slopes)
    supported = defined.copy()
    supported[1:] |= defined[:-1]
    out = {"empty_intervals": 0, "few_slope_intervals": 0, "few_slopes_interpolated": 0, "unsupported_inside": 0}
    k = np.flatnonzero(supported)
    if len(k) < 2:
        return out
    inner = slice(k[0], k[-1])  # intervals starting inside the curve
    c = np.asarray(slope_count)[inner]
    valid = c >= min_slopes_per_x
    out["empty_intervals"] = int((c == 0).sum())
    out["few_slope_intervals"] = int(((c > 0) & ~valid).sum())
    out["few_slopes_interpolated"] = int((defined[inner] & ~valid).sum())
    out["unsupported_inside"] = int((~supported[k[0]:k[-1] + 1]).sum())
    return out


def empty_curve_message(res, min_slopes_per_x: int) -> str | None:
    """The warning for a curve with no supported position (None when it has one)."""
    if res.supported.any():
        return None
    return (f"StratPD for feature {res.feature!r}: no x position has at least min_slopes_per_x={min_slopes_per_x} "
            f"slopes ({len(res.x)} positions, {res.n_leaves} leaves); the curve is empty. Lower min_slopes_per_x or "
            "min_samples_leaf, or give more rows.")


def curve_from_sums(fs, sums: list, job):
    """The StratPDResult of one feature from its buckets' :class:`BucketSums`."""
    P = fs.coder.n_keys
    n_sets = job.n_sets
    opts = job.finish_options
    msx = int(opts.min_slopes_per_x)
    few = opts.few_slopes
    count = np.sum([b.count for b in sums], axis=0)
    starts = np.sum([b.starts for b in sums], axis=0)
    ends = np.sum([b.ends for b in sums], axis=0)
    ignored = np.sum([b.ignored for b in sums], axis=0)
    n_leaves = int(sum(b.n_leaves for b in sums))
    n_slope_leaves = int(sum(b.n_slope_leaves for b in sums))
    counters = next((b.counters for b in sums if b.counters is not None), (0, 0, 0))
    pos = np.flatnonzero(count[0] > 0)
    if fs.binned:
        sx0 = _fold([b.sum_x[0] for b in sums], P)
        ux = sx0[pos] / count[0][pos]
    else:
        ux = np.asarray(fs.coder.values, dtype="float64")[pos]
    add, sub, wadd, wsub = fold_slope_sums(sums, P, n_sets)
    add, sub = add[:, pos], sub[:, pos]
    if wadd is not None:
        wadd, wsub = wadd[:, pos], wsub[:, pos]

    def weights(s):
        return {} if wadd is None else {"wadd": wadd[s], "wsub": wsub[s]}

    mean, c = sweep(add[0], sub[0], starts[0][pos], ends[0][pos], **weights(0))
    pd_, supported = integrate(ux, mean, c, msx, few)
    trials = []
    units = None
    if n_sets > 1 and all(b.units is not None for b in sums):
        units = effective_units(fold_terms([b.units for b in sums], P), pos)
    for s in range(1, n_sets):
        mean_t, c_t = sweep(add[s], sub[s], starts[s][pos], ends[s][pos], **weights(s))
        trials.append(integrate_trial(ux, mean_t, c_t, c, msx, few))
    # the segment sample: bottom-k by hash over the buckets
    seg = [np.concatenate([b.segments[j] for b in sums]) for j in range(4)]
    k = int(opts.n_segments)
    if len(seg[0]) > k:
        keep = np.sort(np.argpartition(seg[0], k - 1)[:k])
        seg = [a[keep] for a in seg]
    where = np.full(P, -1, dtype=np.int64)
    where[pos] = np.arange(len(pos))
    segments = {"x0": ux[where[seg[1]]], "x1": ux[where[seg[2]]], "slope": seg[3]}
    n_valid = float(count[0].sum())
    params = {
        "min_samples_leaf": fs.min_samples_leaf,
        "tree_method": tree_method_of(fs.tree),
        "tree_leaves": fs.n_leaves,
        "min_slopes_per_x": msx,
        "few_slopes": few,
        "support": support_counts(ux, mean, c, msx, few),
        "n_bins": fs.coder.n_keys if fs.binned else None,
        "stratified_on": list(fs.other),
        "random_state": job.random_state,
        "n_trials": job.n_trials,
        **(opts.run_params or {}),
    }
    params.update(band_settings(opts, n_sets, n_slope_leaves))
    return StratPDResult(
        feature=fs.feature, target=job.target, x=ux, pd=pd_, slope=np.where(c >= msx, mean, np.nan), slope_count=c,
        count=count[0][pos], supported=supported, n_rows=int(counters[0]), n_used=int(n_valid - ignored[0]),
        n_ignored=int(ignored[0]), n_missing_x=int(counters[1]), n_bad_y=int(counters[2]), n_leaves=n_leaves,
        binned=bool(fs.binned), params=params, segments=segments,
        trials_pd=np.vstack(trials) if trials else None,
        set_counts=count[:, pos], band_units=units,
    )
