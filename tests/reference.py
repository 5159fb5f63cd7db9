"""A deliberately plain, in-memory StratPD written for the tests.

Loops and lists, no sweep, no difference arrays, no dask: the seed-000 pseudo-code
as written, plus daskpd's documented integration rule (issue 13):

* an interval [x_i, x_{i+1}) whose position has at least min_slopes_per_x slopes uses
  their mean;
* an interval with no slope at all adds nothing (a flat step, as stratx 0.5);
* an interval with a few slopes (fewer than min_slopes_per_x) between two valid ones
  uses the slope interpolated linearly in x between the nearest valid interval on each
  side ("interpolate") or adds nothing ("flat"); at the ends it adds nothing;
* x_i is supported when the interval starting at it or the one ending at it has a slope;
  pd is 0 at the first supported position and NaN at unsupported ones;
* binned x: a leaf's segment from bin a to bin b weighs min(1, its own x gap / the gap
  between the bins' anchors) -- a bin's anchor the middle of its edges, an end bin open
  to infinity as wide as its neighbour -- and the mean slope at a position is the
  weighted mean sum w * slope / sum w (the counts stay counts).
"""
from __future__ import annotations

import numpy as np


def _anchors(edges):
    """Per bin: the middle of its edges; an end bin open to infinity as wide as its
    neighbour (None: no bin of finite width)."""
    edges = [float(e) for e in edges]
    K = len(edges) - 1
    out = []
    for c in range(K):
        lo, hi = edges[c], edges[c + 1]
        if np.isfinite(lo) and np.isfinite(hi):
            out.append((lo + hi) / 2)
        elif np.isfinite(hi) and c + 2 <= K and np.isfinite(edges[c + 2]):
            out.append(hi - (edges[c + 2] - hi) / 2)
        elif np.isfinite(lo) and c >= 1 and np.isfinite(edges[c - 1]):
            out.append(lo + (lo - edges[c - 1]) / 2)
        else:
            return None
    return out


def _weight(a, b, dx, anchors):
    """A segment's weight in the mean slope (1 for exact x)."""
    if anchors is None:
        return 1.0
    return min(1.0, dx / (anchors[int(b)] - anchors[int(a)]))


def reference_stratpd(x, y, leaf, min_slopes_per_x, bins=None, few_slopes="interpolate", edges=None):
    """Return dict(x, pd, slope_count, count, ignored, n_leaves).

    ``bins``: per-row bin number (binned mode: a leaf's position is its bin, placed
    at the leaf-bin's mean x for the slope, and the bin is placed at the mean x of all
    its rows for integration), or None (exact x values); ``edges`` the bins' edges
    (required with ``bins``: the segments' weights).
    """
    if bins is not None and edges is None:
        raise ValueError("binned mode needs the bins' edges")
    x = np.asarray(x, float)
    y = np.asarray(y, float)
    leaf = np.asarray(leaf)
    pos_of_row = x if bins is None else np.asarray(bins, float)
    anchors = None if bins is None else _anchors(edges)
    positions = sorted(set(pos_of_row.tolist()))
    index = {p: i for i, p in enumerate(positions)}
    if bins is None:
        ux = [float(p) for p in positions]
    else:
        ux = [float(np.mean(x[pos_of_row == p])) for p in positions]
    count = [int(np.sum(pos_of_row == p)) for p in positions]

    segments = []  # (start position index, end position index, slope, weight)
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
            dx = xbar[i + 1] - xbar[i]
            segments.append((index[lp[i]], index[lp[i + 1]], (ybar[i + 1] - ybar[i]) / dx,
                             _weight(lp[i], lp[i + 1], dx, anchors)))

    n = len(positions)
    avg, cnt = [], []
    for i in range(n):
        s = [(sl, w) for a, b, sl, w in segments if a <= i < b]
        cnt.append(len(s))
        avg.append(sum(w * sl for sl, w in s) / sum(w for _, w in s) if s else float("nan"))

    valid = [i for i in range(n - 1) if cnt[i] >= min_slopes_per_x]
    slope_used = [0.0] * n  # the last position starts no interval
    has_slope = [False] * n
    for i in range(n - 1):
        if i in valid:
            slope_used[i] = avg[i]
            has_slope[i] = True
        elif cnt[i] > 0 and few_slopes == "interpolate":
            left = [k for k in valid if k < i]
            right = [k for k in valid if k > i]
            if left and right:
                j, k = max(left), min(right)
                slope_used[i] = avg[j] + (avg[k] - avg[j]) * (ux[i] - ux[j]) / (ux[k] - ux[j])
                has_slope[i] = True
    supported = [has_slope[i] or (i > 0 and has_slope[i - 1]) for i in range(n)]
    pd_ = [float("nan")] * n
    if any(supported):
        first = supported.index(True)
        value = 0.0
        for i in range(first, n):
            if i > first:
                value = value + slope_used[i - 1] * (ux[i] - ux[i - 1])
            if supported[i]:
                pd_[i] = value
    return {
        "x": np.array(ux),
        "pd": np.array(pd_),
        "supported": np.array(supported),
        "slope_count": np.array(cnt),
        "count": np.array(count),
        "ignored": ignored,
        "n_leaves": len(leaves),
    }


def reference_leaf_trial(x, y, leaf, weights, min_slopes_per_x, bins=None, few_slopes="interpolate", edges=None):
    """One trial of the leaf bootstrap, plainly: every leaf's slope segments (as in
    :func:`reference_stratpd`) counted ``weights[leaf]`` times in the mean slope at each
    position, integrated over the all-rows curve's support -- an interval has a slope in
    the trial wherever it has one in the curve: the trial's mean where its leaves drew a
    slope, else the trial's slopes of the nearest such intervals interpolated linearly
    in x (held at the ends); binned (``bins`` with their ``edges``), each segment also
    weighs its x-gap weight.  Returns the trial's pd at the curve's positions."""
    if bins is not None and edges is None:
        raise ValueError("binned mode needs the bins' edges")
    anchors = None if bins is None else _anchors(edges)
    x = np.asarray(x, float)
    y = np.asarray(y, float)
    leaf = np.asarray(leaf)
    pos_of_row = x if bins is None else np.asarray(bins, float)
    positions = sorted(set(pos_of_row.tolist()))
    index = {p: i for i, p in enumerate(positions)}
    ux = [float(p) for p in positions] if bins is None else [float(np.mean(x[pos_of_row == p])) for p in positions]
    segments = []  # (start index, end index, slope, leaf, x-gap weight)
    for lf in sorted(set(leaf.tolist())):
        m = leaf == lf
        lp = sorted(set(pos_of_row[m].tolist()))
        xbar = [float(np.mean(x[m][pos_of_row[m] == p])) for p in lp]
        ybar = [float(np.mean(y[m][pos_of_row[m] == p])) for p in lp]
        for i in range(len(lp) - 1):
            dx = xbar[i + 1] - xbar[i]
            segments.append((index[lp[i]], index[lp[i + 1]], (ybar[i + 1] - ybar[i]) / dx, lf,
                             _weight(lp[i], lp[i + 1], dx, anchors)))
    n = len(positions)
    cnt0, cnt_t, avg_t = [], [], []
    for i in range(n):
        cover = [(sl, lf, g) for a, b, sl, lf, g in segments if a <= i < b]
        cnt0.append(len(cover))
        cnt_t.append(sum(float(weights[lf]) for _, lf, _ in cover))
        wsum = sum(float(weights[lf]) * g for _, lf, g in cover)
        avg_t.append(sum(float(weights[lf]) * g * sl for sl, lf, g in cover) / wsum if wsum > 0 else float("nan"))
    valid = [cnt0[i] >= min_slopes_per_x for i in range(n - 1)] + [False]
    defined = list(valid)
    if few_slopes == "interpolate":  # the curve's few-slope intervals between two valid ones
        vk = [i for i in range(n) if valid[i]]
        for i in range(n - 1):
            if not valid[i] and cnt0[i] > 0 and vk and vk[0] < i < vk[-1]:
                defined[i] = True
    own = [valid[i] and cnt_t[i] > 0 for i in range(n)]
    ok = [i for i in range(n) if own[i]]
    used = [0.0] * n
    for i in range(n - 1):
        if own[i]:
            used[i] = avg_t[i]
        elif defined[i] and ok:
            left = [k for k in ok if k < i]
            right = [k for k in ok if k > i]
            if left and right:
                j, k = left[-1], right[0]
                used[i] = avg_t[j] + (avg_t[k] - avg_t[j]) * (ux[i] - ux[j]) / (ux[k] - ux[j])
            else:
                used[i] = avg_t[(left or right)[-1 if left else 0]]
    supported = [defined[i] or (i > 0 and defined[i - 1]) for i in range(n)]
    pd_ = [float("nan")] * n
    if any(supported):
        first = supported.index(True)
        value = 0.0
        for i in range(first, n):
            if i > first:
                value += (used[i - 1] if defined[i - 1] else 0.0) * (ux[i] - ux[i - 1])
            if supported[i]:
                pd_[i] = value
    return {"x": np.array(ux), "pd": np.array(pd_)}
