"""stratx 0.5's finishing steps, re-implemented on daskpd's per-(leaf, key) sums.

Test-side only (not part of the package): a reproduction of the reference, checked
against the outputs of stratx 0.5 itself on its own unit cases
(``tests/_strat/test_stratx_compat.py``, expected values from ``tests/make_stratx_expected.py``),
so that the conformance tests can show that the reference's rule on daskpd's leaves
gives the reference's answer wherever daskpd differs on purpose.  daskpd's own
``few_slopes="flat"`` is :func:`stratx_integrate`'s rule.

* :func:`stratx_integrate` -- ``partial_dependence``'s integration and the positions it
  keeps (stratx/partdep.py lines 146-182).
* :func:`stratx_merge_categorical` -- ``catwise_leaves`` + ``avg_values_at_cat`` (the
  greedy merge of leaf delta vectors, in leaf order, at most 3 passes per region, and the
  placement of disjoint regions by the mean of their categories' marginal means), from
  per-(leaf, category) counts and sums.  The result depends on the order of the leaves:
  stratx visits them in increasing node id of a scikit-learn tree (depth-first, left
  child first); pass ``leaf`` ids that sort the same way (scikit-learn's ``apply`` ids
  do; see :func:`preorder_leaf_rank` for other trees).  Python ``set`` iteration order is
  reproduced by using sets exactly as stratx does.
"""
from __future__ import annotations

import warnings

import numpy as np

__all__ = ["stratx_integrate", "stratx_merge_categorical", "preorder_leaf_rank"]


def stratx_integrate(x, slope, slope_count, min_slopes_per_x):
    """stratx 0.5's integration.

    ``x``: the distinct x values (sorted); ``slope``: the mean leaf slope over
    [x_i, x_{i+1}) (any value where ``slope_count`` is 0); ``slope_count``: how many leaf
    slopes were averaged.  Returns ``(pd, kept)``: pd at every position (pd[0] = 0; a
    position with fewer than ``min_slopes_per_x`` slopes -- NaN in stratx -- contributes a
    flat step, 0 x dx) and the positions stratx reports (``pdpx = x[kept]``): x[0] iff its
    slope is valid, x[i] iff the slope at i or at i-1 is valid.
    """
    x = np.asarray(x, dtype="float64")
    c = np.asarray(slope_count)
    m = max(int(min_slopes_per_x), 1)  # stratx: min_slopes_per_x <= 0 means 1
    valid = c >= m
    s = np.where(valid, np.asarray(slope, dtype="float64"), 0.0)
    pd_ = np.r_[0.0, np.cumsum(s[:-1] * np.diff(x))] if len(x) else np.zeros(0)
    kept = valid | np.r_[False, valid[:-1]]
    return pd_, kept


def preorder_leaf_rank(children_left, children_right) -> np.ndarray:
    """Rank of every node in a depth-first, left-first preorder walk (scikit-learn's node
    numbering), for trees numbered otherwise (e.g. :class:`daskpd._strat.histtree.HistTree`:
    ``children_left_``/``children_right_``); map leaf ids through it before
    :func:`stratx_merge_categorical`."""
    left = np.asarray(children_left)
    right = np.asarray(children_right)
    rank = np.full(len(left), -1, dtype="int64")
    stack, k = [0], 0
    while stack:
        node = stack.pop()
        rank[node] = k
        k += 1
        if left[node] >= 0:
            stack.append(right[node])
            stack.append(left[node])
    return rank


def _nanavg_vectors(a, b, wa, wb):
    a_nan = np.isnan(a)
    b_nan = np.isnan(b)
    with np.errstate(invalid="ignore"):
        c = a * wa + b * wb
    w = wa + wb
    c = c / np.where(w == 0, 1, w)
    c[a_nan] = b[a_nan]
    both = ~a_nan & b_nan
    c[both] = a[both]
    return c


def _merge_candidate(catavg, v, idx):
    cands = [v - v[i] + catavg[i] for i in idx]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=RuntimeWarning)
        return np.nanmean(cands, axis=0)


def _one_region(work, counts, deltas, max_iter):
    first = work[0]
    work = set(work[1:])
    catavg = deltas[:, first].copy()
    weight = counts[:, first].copy()
    completed = {-1}
    iteration = 1
    while len(work) > 0 and len(completed) > 0 and iteration <= max_iter:
        completed = set()
        for j in work:
            v = deltas[:, j]
            idx = np.flatnonzero(~np.isnan(catavg) & ~np.isnan(v))
            if len(idx) == 0:
                continue
            w = counts[:, j]
            catavg = _nanavg_vectors(catavg, _merge_candidate(catavg, v, idx), weight, w)
            weight = weight + w
            completed.add(j)
        iteration += 1
        work = work - completed
    return catavg, weight, list(work)


def stratx_merge_categorical(leaf, cat, n, sum_y, n_categories: int, *, max_iter: int = 3):
    """stratx 0.5's CatStratPD merge from per-(leaf, category) sums.

    ``leaf`` (ids; leaves are visited in increasing id), ``cat`` (codes
    0..n_categories-1), ``n`` (rows), ``sum_y`` (sum of y) are aligned 1-D arrays, one
    entry per (leaf, category) pair with rows.  Returns ``(avg_per_cat, count_per_cat)``
    as stratx's ``cat_partial_dependence`` (NaN / 0 for codes without rows; the origin is
    the first leaf's lowest category).
    """
    leaf = np.asarray(leaf)
    cat = np.asarray(cat, dtype="int64")
    n = np.asarray(n, dtype="float64")
    sum_y = np.asarray(sum_y, dtype="float64")
    m = n > 0
    leaf, cat, n, sum_y = leaf[m], cat[m], n[m], sum_y[m]
    K = int(n_categories)
    leaves, li = np.unique(leaf, return_inverse=True)
    L = len(leaves)
    deltas = np.full((K, L), np.nan)
    counts = np.zeros((K, L), dtype="int64")
    avg = sum_y / n
    for j in range(L):
        rows = np.flatnonzero(li == j)
        order = rows[np.argsort(cat[rows], kind="stable")]  # categories sorted, as np.unique in stratx
        a = avg[order]
        deltas[cat[order], j] = a - a[np.nanargmin(a)]
        counts[cat[order], j] = np.round(n[order]).astype("int64")
    tot_n = np.bincount(cat, weights=n, minlength=K)
    with np.errstate(invalid="ignore", divide="ignore"):
        marginal = np.where(tot_n > 0, np.bincount(cat, weights=sum_y, minlength=K) / tot_n, np.nan)

    catavg = np.full(K, np.nan)
    count_per_cat = np.zeros(K, dtype="int64")
    groups = []
    work = list(range(L))
    while len(work) > 0:
        region_avg, region_count, work = _one_region(work, counts, deltas, max_iter)
        group = np.flatnonzero(region_count > 0)
        groups.append(group)
        catavg[group] = region_avg[group]
        count_per_cat += region_count
    if len(groups) > 1:
        avgs = np.array([np.mean(marginal[g]) for g in groups])
        for g, shift in zip(groups, avgs - avgs[0]):
            catavg[g] += shift
    return catavg, count_per_cat
