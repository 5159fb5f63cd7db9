"""A deliberately plain, in-memory StratPD written for the tests.

Loops and lists, no sweep, no difference arrays, no dask: the seed-000 pseudo-code
as written, plus daskpd's documented integration rule (unsupported intervals inside
the supported range take the slope linearly interpolated from their supported
neighbours; the curve ends at the right end of the last supported interval).
"""
from __future__ import annotations

import numpy as np


def reference_stratpd(x, y, leaf, min_slopes_per_x, bins=None):
    """Return dict(x, pd, slope_count, count, ignored, n_leaves).

    ``bins``: per-row bin number (binned mode: a leaf's position is its bin, placed
    at the leaf-bin's mean x for the slope, and the bin is placed at the mean x of all
    its rows for integration), or None (exact x values).
    """
    x = np.asarray(x, float)
    y = np.asarray(y, float)
    leaf = np.asarray(leaf)
    pos_of_row = x if bins is None else np.asarray(bins, float)
    positions = sorted(set(pos_of_row.tolist()))
    index = {p: i for i, p in enumerate(positions)}
    if bins is None:
        ux = [float(p) for p in positions]
    else:
        ux = [float(np.mean(x[pos_of_row == p])) for p in positions]
    count = [int(np.sum(pos_of_row == p)) for p in positions]

    segments = []  # (start position index, end position index, slope)
    ignored = 0
    leaves = sorted(set(leaf.tolist()))
    for lf in leaves:
        m = leaf == lf
        lp = sorted(set(pos_of_row[m].tolist()))
        if len(lp) < 2:
            ignored += int(m.sum())
            continue
        xbar = [float(np.mean(x[m][pos_of_row[m] == p])) for p in lp]
        ybar = [float(np.mean(y[m][pos_of_row[m] == p])) for p in lp]
        for i in range(len(lp) - 1):
            segments.append((index[lp[i]], index[lp[i + 1]], (ybar[i + 1] - ybar[i]) / (xbar[i + 1] - xbar[i])))

    n = len(positions)
    avg, cnt = [], []
    for i in range(n):
        s = [sl for a, b, sl in segments if a <= i < b]
        cnt.append(len(s))
        avg.append(sum(s) / len(s) if s else float("nan"))

    kept = [i for i in range(n - 1) if cnt[i] >= min_slopes_per_x]
    pd_ = [float("nan")] * n
    if kept:
        first, last = kept[0], kept[-1]
        pd_[first] = 0.0
        for i in range(first, last + 1):
            if i in kept:
                s = avg[i]
            else:
                j = max(k for k in kept if k < i)
                k = min(k for k in kept if k > i)
                s = avg[j] + (avg[k] - avg[j]) * (ux[i] - ux[j]) / (ux[k] - ux[j])
            pd_[i + 1] = pd_[i] + s * (ux[i + 1] - ux[i])
    return {
        "x": np.array(ux),
        "pd": np.array(pd_),
        "slope_count": np.array(cnt),
        "count": np.array(count),
        "ignored": ignored,
        "n_leaves": len(leaves),
    }
