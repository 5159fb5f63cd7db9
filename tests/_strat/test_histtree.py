"""daskpd._strat.histtree.HistTree: the histogram stratifying tree, checked against
scikit-learn's exact DecisionTreeRegressor and against brute force."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.tree import DecisionTreeRegressor

import daskpd
from daskpd._strat.histbins import MAX_TREE_BINS, ColumnBins, bin_columns
from daskpd._strat.histtree import HistTree
from daskpd import DataError


def partition(leaf):
    """The partition of row numbers that leaf ids induce (ids themselves are arbitrary)."""
    leaf = np.asarray(leaf)
    order = np.argsort(leaf, kind="stable")
    groups = np.split(order, np.flatnonzero(np.diff(leaf[order])) + 1)
    return sorted(tuple(g.tolist()) for g in groups)


def int_data(seed, nan_rate=0.0):
    r = np.random.default_rng(seed)
    n = int(r.integers(300, 3000))
    p = int(r.integers(1, 5))
    msl = int(r.integers(5, 30))
    X = r.integers(0, r.integers(2, 200), size=(n, p)).astype(float)  # <= 200 distinct values: exact bins
    y = X @ r.normal(size=p) + r.normal(size=n)
    if nan_rate:
        X[r.random((n, p)) < nan_rate] = np.nan
    return X, y, msl, r


def walk_equal(h: HistTree, t, a=0, b=0):
    """Both trees have the same structure, split features, thresholds and missing-value sides."""
    if t.children_left[b] == -1:
        return h.feature_[a] < 0
    if h.feature_[a] != t.feature[b] or bool(h.missing_left_[a]) != bool(t.missing_go_to_left[b]):
        return False
    if np.float32(h.threshold_[a]) != np.float32(t.threshold[b]):
        return False
    return walk_equal(h, t, h.children_left_[a], t.children_left[b]) and \
        walk_equal(h, t, h.children_right_[a], t.children_right[b])


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("nan_rate", [0.0, 0.1])
def test_same_tree_as_sklearn_exact_when_columns_have_few_values(seed, nan_rate):
    # With <= 1023 distinct values per column every value has its own bin, so the best
    # histogram split is the best exact split: the same tree as DecisionTreeRegressor.
    X, y, msl, r = int_data(seed, nan_rate)
    h = HistTree(msl).fit(X, y)
    d = DecisionTreeRegressor(min_samples_leaf=msl, random_state=0).fit(X.astype("float32"), y)
    assert h.get_n_leaves() == d.get_n_leaves()
    assert walk_equal(h, d.tree_)
    assert partition(h.apply(X)) == partition(d.apply(X.astype("float32")))
    # unseen rows, including values between and beyond the fitted ones and new NaNs
    Xn = X + r.choice([-0.5, 0.0, 0.5], size=X.shape)
    Xn[r.random(X.shape) < 0.2] = np.nan
    assert partition(h.apply(Xn)) == partition(d.apply(Xn.astype("float32")))


@pytest.mark.parametrize("nan_rate", [0.0, 0.1])
def test_same_tree_as_sklearn_exact_with_65535_bins(nan_rate):
    # The stratifying trees' bins ("auto": up to 65,535 a column, the missing code last):
    # the occupied-bin bitmaps then span 1,024 words, found through a bitmap of their
    # non-zero words; columns of ~17,000 spread-out values make every node's scan, clear
    # and next-occupied-bin search cross words of both levels.
    r = np.random.default_rng(7)
    n = 20_000
    X = r.integers(0, 60_000, size=(n, 3)).astype(float)  # exact in float32, ~17,000 distinct a column
    y = np.sin(X[:, 0] / 4000.0) + X[:, 1] / 30_000.0 + 0.3 * r.normal(size=n)
    if nan_rate:
        X[r.random(X.shape) < nan_rate] = np.nan
    h = HistTree(4, max_bins=65_535).fit(X, y)
    d = DecisionTreeRegressor(min_samples_leaf=4, random_state=0).fit(X.astype("float32"), y)
    # the same leaves (splits can differ where two give the same rows: tied gains)
    assert h.get_n_leaves() == d.get_n_leaves() > 1000
    assert partition(h.apply(X)) == partition(d.apply(X.astype("float32")))


def brute_best_root_split(X, y, msl):
    """(gain proxy, feature, threshold) of the best split of all rows at bin edges."""
    best = (-np.inf, None, None)
    for j in range(X.shape[1]):
        cb = ColumnBins.fit(X[:, j])
        for e in cb.edges:
            left = X[:, j] <= e
            nl, nr = left.sum(), (~left).sum()
            if nl < msl or nr < msl:
                continue
            g = y[left].sum() ** 2 / nl + y[~left].sum() ** 2 / nr
            if g > best[0] + 1e-9 * abs(g):
                best = (g, j, e)
    return best


@pytest.mark.parametrize("seed", range(5))
def test_root_split_is_the_best_split_on_quantile_bins(seed):
    r = np.random.default_rng(100 + seed)
    n = 4000
    X = np.column_stack([r.normal(size=n), r.exponential(size=n), r.uniform(size=n)])  # > 1023 distinct values
    y = np.sin(3 * X[:, 0]) + X[:, 1] ** 2 * (seed % 2) + 2 * X[:, 2] + r.normal(0, 0.1, n)
    h = HistTree(20).fit(X, y)
    g, j, e = brute_best_root_split(X, y, 20)
    assert h.feature_[0] == j
    # same partition of the rows (the stored threshold is the middle of the empty gap)
    np.testing.assert_array_equal(X[:, j] <= e, X[:, j] <= h.threshold_[0])


def test_leaves_respect_min_samples_leaf_and_apply_reproduces_fit():
    r = np.random.default_rng(7)
    n, msl = 20_000, 15
    X = np.column_stack([r.normal(size=n), np.round(r.uniform(size=n), 3), r.integers(0, 5, n), r.normal(size=n)])
    y = X[:, 0] + X[:, 2] + r.normal(size=n)
    X[r.random(X.shape) < 0.05] = np.nan
    X[:10, 0] = np.inf
    X[10:20, 0] = -np.inf
    h = HistTree(msl).fit(X, y)
    leaf = h.apply(X)
    counts = np.bincount(leaf, minlength=h.node_count)
    is_leaf = h.feature_ < 0
    assert (counts[~is_leaf] == 0).all()
    np.testing.assert_array_equal(counts[is_leaf], h.n_node_samples_[is_leaf])  # apply == the fit's partition
    assert counts[is_leaf].min() >= msl
    assert counts.sum() == n
    assert h.get_n_leaves() > n / (4 * msl)  # grown to full size, not stopped early
    # at least as good a fit as the exact tree, to within a few percent
    Xf = np.where(np.isinf(X), np.sign(X) * 10, X).astype("float32")  # scikit-learn refuses inf
    d = DecisionTreeRegressor(min_samples_leaf=msl, random_state=0).fit(Xf, y)

    def sse(lf):
        return float(((y - pd.Series(y).groupby(lf).transform("mean")) ** 2).sum())

    assert sse(leaf) < 1.05 * sse(d.apply(Xf))


def test_row_order_does_not_change_the_tree():
    r = np.random.default_rng(3)
    n = 5000
    X = np.column_stack([np.round(r.normal(size=n), 2), r.integers(0, 50, n)]).astype(float)
    y = r.integers(0, 100, n).astype(float) + 10 * X[:, 1]  # integer y: exact sums in any order
    perm = r.permutation(n)
    a, b = HistTree(10).fit(X, y), HistTree(10).fit(X[perm], y[perm])
    for attr in ("feature_", "threshold_", "missing_left_", "children_left_", "n_node_samples_"):
        np.testing.assert_array_equal(getattr(a, attr), getattr(b, attr))
    assert partition(a.apply(X)) == partition(b.apply(X))


def test_degenerate_inputs():
    r = np.random.default_rng(0)
    X = r.normal(size=(100, 2))
    assert HistTree(5).fit(X, np.full(100, 3.0)).get_n_leaves() == 1  # constant y
    assert HistTree(60).fit(X, r.normal(size=100)).get_n_leaves() == 1  # < 2 * min_samples_leaf rows
    Xc = np.column_stack([np.full(100, np.nan), np.ones(100)])  # all-missing and constant columns
    t = HistTree(5).fit(Xc, r.normal(size=100))
    assert t.get_n_leaves() == 1
    np.testing.assert_array_equal(t.apply(Xc), 0)
    # one informative column among useless ones is the one split on
    Xm = np.column_stack([np.full(100, np.nan), np.ones(100), np.repeat([0.0, 1.0], 50)])
    t = HistTree(5).fit(Xm, np.repeat([0.0, 10.0], 50) + r.normal(0, 0.01, 100))
    assert t.feature_[0] == 2


def test_bins_are_exact_up_to_max_bins_and_quantiles_beyond():
    x = np.arange(MAX_TREE_BINS, dtype=float)
    cb = ColumnBins.fit(x)
    assert cb.values is not None and len(cb.edges) == MAX_TREE_BINS - 1
    B, _ = bin_columns(x[:, None])
    np.testing.assert_array_equal(B[:, 0], np.arange(MAX_TREE_BINS))
    x2 = np.random.default_rng(0).normal(size=10_000)
    cb2 = ColumnBins.fit(x2)
    assert cb2.values is None and len(cb2.edges) <= MAX_TREE_BINS - 1
    B2, _ = bin_columns(np.column_stack([x2, np.full(len(x2), np.nan)]))
    counts = np.bincount(B2[:, 0])
    assert counts.max() < 3 * len(x2) / MAX_TREE_BINS  # roughly equal-count bins
    assert (B2[:, 1] == MAX_TREE_BINS).all()  # the missing-value bin


def test_adjacent_float_values_stay_apart():
    # the midpoint of two adjacent floats rounds onto one of them; the split must still separate them
    a = 1.0
    b = np.nextafter(a, 2.0)
    X = np.repeat([a, b], 20)[:, None]
    y = np.repeat([0.0, 1.0], 20)
    t = HistTree(5).fit(X, y)
    assert t.get_n_leaves() == 2
    leaf = t.apply(X)
    assert len(set(leaf[:20])) == 1 and len(set(leaf[20:])) == 1 and leaf[0] != leaf[-1]
    assert a <= t.threshold_[0] < b  # (scikit-learn's tree, on float32, cannot tell a from b at all)


def test_bad_input_errors():
    with pytest.raises(ValueError, match="y must be finite"):
        HistTree(1).fit(np.zeros((3, 1)), [1.0, np.nan, 2.0])
    with pytest.raises(ValueError, match="max_bins"):
        HistTree(1, max_bins=70_000)
    t = HistTree(1).fit(np.arange(6.0).reshape(3, 2), [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="2 columns"):
        t.apply(np.zeros((4, 3)))


# ------------------------------------------------------------------ in the pipeline


def codependent(n=30_000, seed=0):
    r = np.random.default_rng(seed)
    x1 = r.integers(0, 100, n).astype(float)
    x2 = np.clip(x1 + r.integers(-10, 11, n), 0, None)
    x3 = r.integers(0, 40, n).astype(float)
    return pd.DataFrame({"x1": x1, "x2": x2, "x3": x3, "y": 0.01 * x1 ** 2 + x2 + 0.5 * x3 + r.normal(0, 1, n)})


def test_stratpd_hist_equals_exact_when_stratifiers_have_few_values():
    # the trees induce the same leaves, so the curves are the same
    df = codependent()
    a = daskpd.stratpd(df, target="y", feature="x1", tree_method="hist")
    b = daskpd.stratpd(df, target="y", feature="x1", tree_method="exact")
    assert a.params["tree_method"] == "hist" and b.params["tree_method"] == "exact"
    assert a.params["tree_leaves"] == b.params["tree_leaves"]
    np.testing.assert_allclose(a.to_frame()["pd"], b.to_frame()["pd"], rtol=0, atol=1e-9)


def test_importances_hist_equals_exact_when_stratifiers_have_few_values():
    df = codependent(seed=1)
    a = daskpd.importances(df, target="y", tree_method="hist")
    b = daskpd.importances(df, target="y", tree_method="exact")
    pd.testing.assert_frame_equal(a, b, check_exact=False, atol=1e-9, rtol=0)


def test_tree_method_is_validated():
    df = codependent(2_000)
    with pytest.raises(DataError, match="parameter tree_method must be one of 'hist', 'exact'; got 'fast'"):
        daskpd.stratpd(df, target="y", feature="x1", tree_method="fast")
    with pytest.raises(DataError, match="tree_method"):
        daskpd.importances(df, target="y", tree_method=None)
