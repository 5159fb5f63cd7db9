"""catstratpd: hand-checkable cases, an in-memory reference, ground truth, scale, inputs."""
from __future__ import annotations

import time
import tracemalloc
import warnings

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import daskpd
from daskpd._strat.leafboot import weights_of_leaves
from daskpd._strat import categorical_gram, categorical_gram_solve, categorical_solve
from daskpd._catstratpd import run_categorical as run_with_options
from daskpd._data.options import AUTO, ReadOptions
from daskpd._strat.options import TreeOptions, Trials
from daskpd._strat.categorical_solve import solve_effects
from daskpd import DataError

def run_categorical(data, *, target, feature, centered=False, n_trials=1, band=(0.05, 0.95), **trees):
    """The runner of :func:`daskpd.catstratpd` (run, dtype), its options built from the
    public parameters as catstratpd builds them (``trees``: TreeOptions' fields)."""
    return run_with_options(data, target=target, feature=feature, read=ReadOptions(partition_bytes=AUTO),
                            trees=TreeOptions(min_samples_leaf=5, max_bins=None, **trees),
                            trials=Trials.of(n_trials, band), centered=centered)


# ---------------------------------------------------------------------------------
# plain in-memory references (pandas groupby, python loops, dense numpy lstsq)


def leaves_of(run, df):
    """Leaf (unit: a leaf of the tree of the row's other fold, or part of a leaf) of every
    row of ``df`` under the run's fitted stratification."""
    from daskpd._engine.hashing import fold_hash

    fs = run.scan.features[0]
    X = run.scan.encoder.transform(df)
    h = fold_hash(df[run.scan.hash_columns], run.scan.random_state) if fs.needs_hash else None
    return fs.leaves(X, [run.scan.encoder.columns.index(c) for c in fs.other], h)


def leaf_table(df, target, feature, leaf, nan_as_level=False, weight=None):
    """(leaf, category) -> mean y and count (or weighted: weight sums), with plain pandas."""
    w = np.ones(len(df)) if weight is None else np.asarray(weight, float)
    d = pd.DataFrame({"leaf": leaf, "c": df[feature].astype(object).to_numpy(), "y": df[target].to_numpy(float),
                      "w": w})
    d = d[np.isfinite(d.y) & (d.w > 0)]
    if not nan_as_level:
        d = d[d.c.notna()]
    d["c"] = d.c.where(d.c.notna(), "<<NA>>")  # a plain hashable stand-in for groupby
    d["wy"] = d.w * d.y
    g = d.groupby(["leaf", "c"]).agg(size=("w", "sum"), sum=("wy", "sum")).reset_index()
    g["mean"] = g["sum"] / g["size"]
    marg = d.groupby("c").agg(sum=("wy", "sum"), size=("w", "sum"))
    return g, marg


def reference_effects(g, marg, centered=False):
    """Dense WLS per connected group + placement by marginal mean; Series by category."""
    cats = list(marg.index)
    parent = {c: c for c in cats}

    def find(c):
        while parent[c] != c:
            parent[c] = parent[parent[c]]
            c = parent[c]
        return c

    multi = g.groupby("leaf").c.transform("size") >= 2
    gm = g[multi]
    for _, rows in gm.groupby("leaf"):
        cs = list(rows.c)
        for c in cs[1:]:
            parent[find(c)] = find(cs[0])
    comps = {}
    for c in cats:
        comps.setdefault(find(c), []).append(c)
    eff = {}
    for members in comps.values():
        rows = gm[gm.c.isin(members)]
        if len(rows) == 0:
            eff[members[0]] = 0.0
            continue
        lv = sorted(rows.leaf.unique())
        cs = sorted(members, key=str)
        A = np.zeros((len(rows), len(lv) + len(cs) - 1))
        for i, (lf, c) in enumerate(zip(rows.leaf, rows.c)):
            A[i, lv.index(lf)] = 1.0
            j = cs.index(c)
            if j > 0:
                A[i, len(lv) + j - 1] = 1.0
        w = np.sqrt(rows["size"].to_numpy(float))
        sol = np.linalg.lstsq(A * w[:, None], rows["mean"].to_numpy() * w, rcond=None)[0]
        b = np.r_[0.0, sol[len(lv):]]
        n = marg.loc[cs, "size"].to_numpy(float)
        s = marg.loc[cs, "sum"].to_numpy(float)
        b = b + (s.sum() - (n * b).sum()) / n.sum()
        eff.update(zip(cs, b))
    out = pd.Series(eff).reindex(cats)
    if centered:
        return out - np.average(out, weights=marg["size"])
    return out - out.min()


def stratx_greedy(g, marg):
    """stratx 0.5's avg_values_at_cat, re-implemented on dicts (same leaves, same deltas).

    Deltas relative to the leaf's minimum-mean category; leaves merged one at a time into
    a running count-weighted average, aligned on the mean offset over shared categories,
    at most 3 passes per region; regions shifted by the mean of their categories'
    marginal means.  Returns effects by category (arbitrary origin).
    """
    leaves = []
    for _, rows in g.groupby("leaf", sort=True):
        d = dict(zip(rows.c, rows["mean"] - rows["mean"].min()))
        leaves.append((d, dict(zip(rows.c, rows["size"]))))
    catavg, groups = {}, []
    work = list(range(len(leaves)))
    while work:
        avg = dict(leaves[work[0]][0])
        wt = dict(leaves[work[0]][1])
        work = set(work[1:])
        completed, it = {-1}, 1
        while work and completed and it <= 3:
            completed = set()
            for j in sorted(work):
                v, cnt = leaves[j]
                inter = [c for c in v if c in avg]
                if not inter:
                    continue
                adj = {c: np.mean([v[c] - v[i] + avg[i] for i in inter]) for c in v}
                for c, a in adj.items():
                    if c in avg:
                        avg[c] = (avg[c] * wt[c] + a * cnt[c]) / (wt[c] + cnt[c])
                        wt[c] += cnt[c]
                    else:
                        avg[c], wt[c] = a, cnt[c]
                completed.add(j)
            it += 1
            work = work - completed
        work = sorted(work)
        groups.append(list(avg))
        catavg.update(avg)
    mm = marg["sum"] / marg["size"]
    if len(groups) > 1:
        base = np.mean(mm[groups[0]])
        for cs in groups:
            shift = np.mean(mm[cs]) - base
            for c in cs:
                catavg[c] += shift
    return pd.Series(catavg).reindex(marg.index)


def run_with_reference(data, df, target, feature, **kw):
    """daskpd's result and the plain reference on the very same tree."""
    centered = kw.pop("centered", False)
    run, dtype = run_categorical(data, target=target, feature=feature, centered=centered, **kw)
    res = run.results[feature]
    g, marg = leaf_table(df, target, feature, leaves_of(run, df), kw.get("nan_as_level", False))
    return res, reference_effects(g, marg, centered), g, marg


def as_series(res):
    idx = [("<<NA>>" if pd.isna(c) else c) for c in res.categories]
    return pd.Series(res.pd, index=idx)


def centred_rmse(est, truth):
    e = est - est.mean()
    t = truth - truth.mean()
    return float(np.sqrt(np.mean((e - t) ** 2)))


# ---------------------------------------------------------------------------------
# data


def strata_data(n=6000, n_cats=40, n_strata=25, noise=0.0, seed=0, labels="str"):
    """y = 3*s + b[c] (+ noise); the category is codependent with the stratum s."""
    rng = np.random.default_rng(seed)
    s = rng.integers(0, n_strata, n)
    c = (2 * s + rng.integers(0, 8, n)) % n_cats
    b = np.round(rng.normal(0, 5, n_cats), 3)
    y = 3.0 * s + b[c] + rng.normal(0, noise, n) * (noise > 0)
    if labels == "str":
        lab = pd.array([f"m{v:03d}" for v in c], dtype="str")
        truth = pd.Series(b, index=[f"m{v:03d}" for v in range(n_cats)])
    else:
        lab, truth = c, pd.Series(b, index=range(n_cats))
    return pd.DataFrame({"s": s, "c": lab, "y": y}), truth


def continuous_data(n, k=150, seed=5):
    """Continuous x1, category drawn near x1 (codependent); y = x1**2 + b[c] + noise."""
    rng = np.random.default_rng(seed)
    x1 = rng.uniform(0, 10, n)
    c = np.clip((x1 * k / 10 + rng.normal(0, 6, n)).astype(int), 0, k - 1)
    b = rng.normal(0, 4, k)
    y = x1 ** 2 + b[c] + rng.normal(0, 1.0, n)
    return pd.DataFrame({"x1": x1, "c": c, "y": y}), pd.Series(b)


# ---------------------------------------------------------------------------------
# hand-checkable


def test_one_leaf_is_mean_y_per_category_minus_the_lowest():
    df = pd.DataFrame({"c": ["b", "a", "c", "a", "b", "c", "c"], "y": [3.0, 1, 6, 1, 3, 5, 7]})
    res = daskpd.catstratpd(df, target="y", feature="c", features=[])  # nothing to stratify on: one leaf
    assert list(res.categories) == ["a", "b", "c"]
    np.testing.assert_allclose(res.pd, [0.0, 2.0, 5.0], atol=1e-12)
    np.testing.assert_array_equal(res.count, [2, 2, 3])
    assert (res.n_leaves, res.n_groups, res.n_ignored, res.n_used) == (1, 1, 0, 7)
    cen = daskpd.catstratpd(df, target="y", feature="c", features=[], centered=True)
    # count-weighted mean 0: mean y is 26/7
    np.testing.assert_allclose(cen.pd, np.array([1.0, 3.0, 6.0]) - 26 / 7, atol=1e-12)


def test_two_disjoint_groups_are_placed_by_their_marginal_means():
    # x separates {A, B} (x=0) from {C, D} (x=1): no leaf holds both groups
    df = pd.DataFrame({
        "x": [0, 0, 0, 0, 1, 1, 1, 1],
        "c": ["A", "A", "B", "B", "C", "C", "C", "D"],
        "y": [1.0, 1, 3, 3, 12, 12, 12, 15],
    })
    res = daskpd.catstratpd(df, target="y", feature="c", min_samples_leaf=1, honest=False)
    assert res.n_groups == 2 and res.n_leaves == 2
    # group 1: deltas A=0, B=2, mean y 2 -> A=1, B=3; group 2: C=0, D=3, mean y 12.75 -> C=12, D=15
    # then shifted so that the smallest is 0
    np.testing.assert_allclose(res.pd, [0.0, 2.0, 11.0, 14.0], atol=1e-12)
    f = res.to_frame()
    assert f.group.tolist() == [0, 0, 1, 1]  # group 0: the most rows (tie: the first category)
    np.testing.assert_allclose(f.marginal_mean, [1.0, 3.0, 12.0, 15.0])


def test_sawtooth_models_across_yearmade_strata():
    """Model i is sold in years i and i+1; its effect alternates +5/-5; price rises 2/year.

    The marginal mean per model is a rising sawtooth; CatStratPD must return the pure
    alternation (0 for odd models, 10 for even ones), exactly.
    """
    rows = []
    n_models = 12
    for i in range(n_models):
        for year in (2000 + i, 2001 + i):
            for _ in range(6):
                rows.append((year, f"M{i:02d}", 2.0 * (year - 2000) + (5.0 if i % 2 == 0 else -5.0)))
    df = pd.DataFrame(rows, columns=["YearMade", "ModelID", "price"])
    res = daskpd.catstratpd(df, target="price", feature="ModelID", honest=False)  # stratx's leaf for leaf
    expect = np.where(np.arange(n_models) % 2 == 0, 10.0, 0.0)
    np.testing.assert_allclose(res.pd, expect, atol=1e-9)
    assert res.n_groups == 1
    # the first and last years hold a single model: their rows are ignored
    assert res.n_ignored == 12 and res.n_used == len(df) - 12
    # the marginal means carry the YearMade trend (model i's mean year is 2000.5 + i) that
    # CatStratPD removes: marginal - pd rises by exactly 2 per model
    np.testing.assert_allclose(np.diff(res.marginal_mean - res.pd), 2.0, atol=1e-9)


# ---------------------------------------------------------------------------------
# reference equality, exactness, ground truth


def test_exact_on_noise_free_data_and_equal_to_reference():
    df, truth = strata_data(noise=0.0, seed=1)
    res, ref, _, _ = run_with_reference(df, df, "y", "c")
    got = as_series(res)
    np.testing.assert_allclose(got.to_numpy(), ref.reindex(got.index).to_numpy(), atol=1e-9)
    t = truth.reindex(got.index)
    np.testing.assert_allclose(got.to_numpy(), (t - t.min()).to_numpy(), atol=1e-9)
    assert res.n_groups == 1


def _partitioned(df, cuts):
    bounds = [0, *sorted(set(cuts)), len(df)]
    chunks = [df.iloc[a:b] for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
    return dd.from_delayed([dask.delayed(c) for c in chunks], meta=df.iloc[:0], verify_meta=False)


@pytest.fixture(scope="module")
def noisy_with_nan():
    df, _ = strata_data(n=1500, n_cats=30, n_strata=12, noise=1.0, seed=7)
    c = df.c.astype(object)
    c[::37] = None
    df["c"] = pd.array(c, dtype="str")
    df.loc[5::101, "y"] = np.nan
    return df.sample(frac=1.0, random_state=3).reset_index(drop=True)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cuts=st.lists(st.integers(1, 1499), max_size=6), nan_as_level=st.booleans(), centered=st.booleans())
def test_distributed_equals_in_memory_reference_for_any_partitioning(noisy_with_nan, cuts, nan_as_level, centered):
    df = noisy_with_nan
    ddf = _partitioned(df, cuts)
    res, ref, _, _ = run_with_reference(ddf, df, "y", "c", nan_as_level=nan_as_level, centered=centered,
                                        sample_size=800)
    got = as_series(res)
    assert set(got.index) == set(ref.index)
    np.testing.assert_allclose(got.to_numpy(), ref.reindex(got.index).to_numpy(), rtol=1e-9, atol=1e-9)
    assert res.n_rows == len(df)
    assert res.n_bad_y == int(df.y.isna().sum() - (df.y.isna() & df.c.isna()).sum() * (not nan_as_level))
    assert res.n_missing_x == (0 if nan_as_level else int(df.c.isna().sum()))


def test_ground_truth_rmse_with_a_codependent_numeric_feature():
    df, b = continuous_data(60_000)
    res = daskpd.catstratpd(df, target="y", feature="c")
    assert res.categories.dtype == np.int64
    est = pd.Series(res.pd, index=res.categories)
    err = centred_rmse(est, pd.Series(b).reindex(est.index))
    marginal = pd.Series(res.marginal_mean, index=res.categories)
    err_marginal = centred_rmse(marginal, pd.Series(b).reindex(est.index))
    assert err < 0.2, err  # measured 0.098; effects have sd 4, noise sd 1
    assert err_marginal > 5 * err  # the marginal means are confounded by x1**2 (range 100)


def test_at_least_as_accurate_as_stratx_greedy_merge_on_noisy_data():
    ours, theirs = [], []
    for seed in range(3):
        df, truth = strata_data(n=8000, n_cats=60, n_strata=40, noise=3.0, seed=seed)
        res, _, g, marg = run_with_reference(df, df, "y", "c")
        got = as_series(res)
        t = truth.reindex(got.index)
        ours.append(centred_rmse(got, t))
        theirs.append(centred_rmse(stratx_greedy(g, marg).reindex(got.index), t))
    assert np.mean(ours) <= np.mean(theirs), (ours, theirs)


def test_stratx_greedy_reimplementation_is_exact_on_noise_free_data():
    # guards the comparison above: on noise-free data both merges are exact
    df, truth = strata_data(noise=0.0, seed=2)
    res, _, g, marg = run_with_reference(df, df, "y", "c")
    got = as_series(res)
    sx = stratx_greedy(g, marg).reindex(got.index)
    t = truth.reindex(got.index)
    np.testing.assert_allclose((sx - sx.min()).to_numpy(), (t - t.min()).to_numpy(), atol=1e-9)


# ---------------------------------------------------------------------------------
# label types, missing values, odd categories


def test_integer_codes_with_gaps_keep_their_type():
    df, truth = strata_data(noise=0.0, seed=3, labels="int")
    codes = np.array([3, 17, 42, 1000, 7, 99, 250, 5, 61, 8] * 4)  # 40 distinct codes with gaps
    codes = codes + np.repeat(np.arange(4) * 10_000, 10)
    df["c"] = codes[df.c]
    res = daskpd.catstratpd(df, target="y", feature="c")
    assert res.categories.dtype == np.int64
    assert list(res.categories) == sorted(set(codes))
    t = pd.Series(truth.to_numpy(), index=codes).reindex(res.categories)
    np.testing.assert_allclose(res.pd, t - t.min(), atol=1e-9)
    assert res.to_frame().category.dtype == np.int64


def test_pandas_categorical_keeps_dtype_and_category_order():
    df, truth = strata_data(noise=0.0, seed=4, n_cats=6, n_strata=6)
    order = ["m005", "m003", "m001", "m000", "m004", "m002", "unused"]
    df["c"] = pd.Categorical(df.c.astype(object), categories=order, ordered=True)
    res = daskpd.catstratpd(df, target="y", feature="c")
    assert isinstance(res.categories.dtype, pd.CategoricalDtype)
    assert res.categories.dtype == df.c.dtype
    assert list(res.categories) == order[:-1]  # observed categories, in the dtype's order
    t = truth.reindex(list(res.categories))
    np.testing.assert_allclose(res.pd, t - t.min(), atol=1e-9)
    assert res.to_frame().category.dtype == df.c.dtype


def test_single_row_category_and_category_only_in_some_partitions():
    df, truth = strata_data(noise=0.0, seed=6)
    df = df.sort_values("c", kind="stable").reset_index(drop=True)  # each category in one or two partitions
    solo = pd.DataFrame({"s": [4], "c": ["solo"], "y": [3.0 * 4 + 2.5]})
    df = pd.concat([df, solo], ignore_index=True)
    one = daskpd.catstratpd(df, target="y", feature="c")
    many = daskpd.catstratpd(dd.from_pandas(df, npartitions=5, sort=False), target="y", feature="c")
    np.testing.assert_allclose(many.pd, one.pd, atol=1e-10)
    s = as_series(one)
    assert one.count[list(one.categories).index("solo")] == 1
    t = pd.concat([truth, pd.Series({"solo": 2.5})]).reindex(s.index)
    np.testing.assert_allclose(s.to_numpy(), (t - t.min()).to_numpy(), atol=1e-9)


def test_missing_category_dropped_by_default_or_its_own_level():
    df, truth = strata_data(noise=0.0, seed=8)
    c = df.c.astype(object).to_numpy(copy=True)
    miss = np.arange(len(df)) % 9 == 0
    c[miss] = None
    df["c"] = pd.array(c, dtype="str")
    df.loc[miss, "y"] = 3.0 * df.s[miss] + 7.0  # missing behaves like a level with effect 7
    dropped = daskpd.catstratpd(df, target="y", feature="c")
    assert dropped.n_missing_x == miss.sum() and not pd.isna(dropped.categories).any()
    assert dropped.count.sum() == len(df) - miss.sum()
    lvl = daskpd.catstratpd(df, target="y", feature="c", nan_as_level=True)
    assert lvl.n_missing_x == 0 and pd.isna(lvl.categories[-1]) and lvl.count[-1] == miss.sum()
    s = as_series(lvl)
    t = pd.concat([truth, pd.Series({"<<NA>>": 7.0})]).reindex(s.index)
    np.testing.assert_allclose(s.to_numpy(), (t - t.min()).to_numpy(), atol=1e-9)
    # the other categories do not move (up to the origin) when NaN becomes a level
    a, b = as_series(dropped), s.drop("<<NA>>")
    np.testing.assert_allclose((a - a.min()).to_numpy(), (b - b.min()).to_numpy(), atol=1e-9)


def test_nullable_integer_codes_with_missing_as_a_level_sort_it_last():
    df, truth = strata_data(noise=0.0, seed=15, labels="int")
    codes = df.c.to_numpy() * 7 + 3  # gaps
    miss = np.arange(len(df)) % 11 == 0
    df["c"] = pd.array(np.where(miss, None, codes), dtype="Int64")
    df.loc[miss, "y"] = 3.0 * df.s[miss] - 4.0
    res = daskpd.catstratpd(df, target="y", feature="c", nan_as_level=True, honest=False)
    assert res.categories.dtype == "Int64" and pd.isna(res.categories[-1])
    assert list(res.categories[:-1]) == sorted(set(codes[~miss].tolist()))
    t = pd.Series(truth.to_numpy(), index=np.arange(len(truth)) * 7 + 3).reindex(list(res.categories[:-1]))
    expect = np.r_[t.to_numpy(), -4.0]
    np.testing.assert_allclose(res.pd, expect - expect.min(), atol=1e-9)


def test_bool_and_object_labels():
    """A bool feature's effects are those of the same rows labelled with strings (one
    tree on every row: honest folds are drawn from the rows' content, labels included)."""
    df, _ = strata_data(noise=0.5, seed=9, n_cats=2, n_strata=5)
    df["c"] = df.c == "m001"
    res = daskpd.catstratpd(df, target="y", feature="c", honest=False)
    assert list(res.categories) == [False, True] and res.categories.dtype == bool
    df["c"] = df.c.map({False: "no", True: "yes"}).astype(object)
    res2 = daskpd.catstratpd(df, target="y", feature="c", honest=False)
    np.testing.assert_allclose(res2.pd, res.pd)


# ---------------------------------------------------------------------------------
# trials (a bootstrap of the leaves), solvers, scale


def test_trials_are_a_leaf_bootstrap_and_match_the_weighted_reference():
    df, _ = strata_data(noise=0.0, seed=10)
    run, dtype = run_categorical(df, target="y", feature="c", n_trials=3)
    res = run.results["c"]
    assert res.trials_pd.shape == (3, len(res))
    # noise-free: every trial gives the same effects, up to its own origin
    for tr in res.trials_pd:
        ok = np.isfinite(tr)
        assert ok.mean() > 0.9
        d = tr[ok] - res.pd[ok]
        np.testing.assert_allclose(d, d[0], atol=1e-8)
    assert "pd_std" in res.to_frame()
    # with noise, trial 2 is the least squares of its draw of the leaves: each leaf's rows
    # weighted by the leaf's weight
    df, _ = strata_data(noise=2.0, seed=10)
    run, dtype = run_categorical(df, target="y", feature="c", n_trials=3)
    res = run.results["c"]
    leaves = leaves_of(run, df)
    w = weights_of_leaves("c", leaves, 3, run.scan.random_state)[:, 1]
    g, marg = leaf_table(df, "y", "c", leaves, weight=w)
    ref = reference_effects(g, marg)
    got = pd.Series(res.trials_pd[1], index=res.categories.astype(object)).dropna()
    np.testing.assert_allclose(got.to_numpy(), ref.reindex(got.index).to_numpy(), atol=1e-9)
    np.testing.assert_allclose(res.set_counts[2], marg["size"].reindex(res.categories.astype(object)).fillna(0))


def synthetic_sums(n_cats, n_leaves, seed=0, noise=0.0, window=30):
    """Per-(leaf, category) sums with ybar = a_l + b_c exactly (or with noise)."""
    rng = np.random.default_rng(seed)
    k = rng.integers(1, 9, n_leaves)
    leaf = np.repeat(np.arange(n_leaves), k)
    centre = rng.integers(0, n_cats, n_leaves)
    cat = (np.repeat(centre, k) + rng.integers(-window, window + 1, len(leaf))) % n_cats
    key = np.unique(leaf * n_cats + cat)
    leaf, cat = key // n_cats, key % n_cats
    b = rng.normal(0, 10, n_cats)
    a = rng.normal(0, 100, n_leaves)
    n = rng.integers(1, 30, len(leaf)).astype(float)
    s = n * (a[leaf] + b[cat] + rng.normal(0, noise, len(leaf)) * (noise > 0))
    return leaf, cat, n, s, b


def test_direct_and_cg_solvers_agree():
    leaf, cat, n, s, b = synthetic_sums(4000, 20_000, seed=1, noise=1.0)
    d = solve_effects(leaf, cat, n, s, 4000, solver="direct")
    c = solve_effects(leaf, cat, n, s, 4000, solver="cg")
    assert (d.solver, c.solver) == ("direct", "cg")
    np.testing.assert_allclose(c.effect, d.effect, atol=1e-7)
    a = solve_effects(leaf, cat, n, s, 4000)  # auto: > DIRECT_MAX unknowns -> CG first
    assert a.solver in ("cg", "cg+direct")
    np.testing.assert_allclose(a.effect, d.effect, atol=1e-7)
    # the pairs need not come sorted by leaf
    perm = np.random.default_rng(0).permutation(len(leaf))
    p = solve_effects(leaf[perm], cat[perm], n[perm], s[perm], 4000, solver="direct")
    np.testing.assert_allclose(p.effect, d.effect, atol=1e-9)
    np.testing.assert_array_equal(p.group, d.group)


def test_summed_normal_equations_dense_or_sparse_equal_the_table_solve(monkeypatch):
    """The large-table path (G summed leaf by leaf) solves the same system."""
    leaf, cat, n, s, b = synthetic_sums(4000, 20_000, seed=1, noise=1.0)
    d = solve_effects(leaf, cat, n, s, 4000, solver="direct")
    dense = categorical_gram_solve.solve_gram(categorical_gram.leaf_sums(leaf, cat, n, s, 4000))
    monkeypatch.setattr(categorical_gram, "DENSE_MAX_KEYS", 100)
    sparse = categorical_gram_solve.solve_gram(categorical_gram.leaf_sums(leaf, cat, n, s, 4000), solver="direct")
    assert (dense.solver, sparse.solver) == ("cg", "direct")
    for e in (dense, sparse):
        np.testing.assert_allclose(e.effect, d.effect, atol=1e-7)
        np.testing.assert_array_equal(e.group, d.group)
        np.testing.assert_array_equal(e.count_used, d.count_used)
        assert (e.n_leaves, e.n_leaves_used, e.n_ignored) == (d.n_leaves, d.n_leaves_used, d.n_ignored)


def test_matrix_free_path_for_huge_leaves(monkeypatch):
    """Above EXPLICIT_BUDGET the Laplacian is never formed: CG runs on the table."""
    leaf, cat, n, s, b = synthetic_sums(600, 3000, seed=4)
    ref = solve_effects(leaf, cat, n, s, 600, solver="direct")
    formed = []
    real = categorical_solve.scatter_upper
    monkeypatch.setattr(categorical_solve, "scatter_upper", lambda *a: formed.append(1) or real(*a))
    monkeypatch.setattr(categorical_solve, "EXPLICIT_BUDGET", 0)
    free = solve_effects(leaf, cat, n, s, 600)
    assert free.solver == "cg" and not formed
    np.testing.assert_allclose(free.effect, ref.effect, atol=1e-8)
    np.testing.assert_array_equal(free.group, ref.group)
    monkeypatch.setattr(categorical_solve, "EXPLICIT_BUDGET", 10**9)  # small system: formed for the LU
    small = solve_effects(leaf, cat, n, s, 600)
    assert small.solver == "direct" and formed
    np.testing.assert_allclose(small.effect, ref.effect, atol=1e-10)


@pytest.mark.parametrize("factor", [0.0, 1e18])
def test_gram_by_blas_or_scatter_equals_the_dense_definition(monkeypatch, factor):
    """G = sum over leaves of n_l n_l' / N_l, whichever way a chunk computes it."""
    leaf, cat, n, s, _ = synthetic_sums(300, 2000, seed=6, noise=1.0)
    monkeypatch.setattr(categorical_gram, "BLAS_FACTOR", factor)  # 0: always scatter; huge: always BLAS
    sums = categorical_gram.leaf_sums(leaf, cat, n, s, 300)
    M = np.zeros((leaf.max() + 1, 300))
    np.add.at(M, (leaf, cat), n)
    multi = (M > 0).sum(axis=1) >= 2
    M = M[multi]
    G = (M / M.sum(axis=1, keepdims=True)).T @ M
    np.testing.assert_allclose(sums.full_gram(), G, rtol=1e-12, atol=1e-9)
    np.testing.assert_array_equal(np.tril(sums.gram, -1), 0)  # only the upper triangle is summed
    np.testing.assert_allclose(sums.count_used, M.sum(axis=0), rtol=1e-12)


def test_chain_graph_falls_back_to_the_direct_solver(monkeypatch):
    # leaves holding categories (i, i+1): a path graph, hopeless for CG, trivial for LU
    k = 6000
    leaf = np.repeat(np.arange(k - 1), 2)
    cat = np.c_[np.arange(k - 1), np.arange(1, k)].ravel()
    b = np.sin(np.arange(k))
    n = np.full(len(leaf), 3.0)
    s = n * (leaf * 0.5 + b[cat])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        table = solve_effects(leaf, cat, n, s, k)
        dense = categorical_gram_solve.solve_gram(categorical_gram.leaf_sums(leaf, cat, n, s, k))
        monkeypatch.setattr(categorical_gram, "DENSE_MAX_KEYS", 1000)
        sparse = categorical_gram_solve.solve_gram(categorical_gram.leaf_sums(leaf, cat, n, s, k))
    assert (table.solver, dense.solver, sparse.solver) == ("cg+direct", "cg+dense", "cg+direct")
    # a 6,000-long chain amplifies the rounding of the sums (leaf levels up to 1,500)
    for e in (table, dense, sparse):
        np.testing.assert_allclose(e.effect - e.effect[0], b - b[0], atol=1e-6)


def test_ten_thousand_categories_hundred_thousand_leaves_sparse_and_exact():
    from daskpd._strat.categorical import result_from_effects, result_from_sums

    leaf, cat, n, s, b = synthetic_sums(10_000, 100_000, seed=2)
    labels = np.array([f"k{v:05d}" for v in range(10_000)], dtype=object)
    tracemalloc.start()
    sums = categorical_gram.leaf_sums(leaf, cat, n, s, 10_000)
    res = result_from_sums("k", "y", labels, [sums])
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert not sums.dense  # 10,000 categories: above DENSE_MAX_KEYS, a sparse G
    table = result_from_effects("k", "y", labels, [solve_effects(leaf, cat, n, s, 10_000)])
    for r in (res, table):
        assert len(r) == 10_000 and r.n_groups == 1 and r.n_leaves == 100_000
        np.testing.assert_allclose(r.pd, b - b.min(), atol=1e-7)
    assert peak < 400e6, peak  # a dense categories x leaves matrix would be 8 GB


# ---------------------------------------------------------------------------------
# schedulers, outputs, determinism


def test_real_cluster_equals_the_in_memory_reference(tmp_path, client):
    """scheduler + 2 worker processes started with the `dask` CLI on 127.0.0.1."""
    from distributed import get_task_stream

    df, _ = strata_data(n=20_000, noise=1.0, seed=11)
    path = tmp_path / "cats"
    dd.from_pandas(df, npartitions=4, sort=False).to_parquet(path)
    assert len(client.scheduler_info()["workers"]) == 2
    with get_task_stream(client) as ts:
        res, ref, _, _ = run_with_reference(str(path), df, "y", "c", n_trials=2)
    map_tasks = [t for t in ts.data if "daskpd-strat-map" in str(t["key"])]
    assert len(map_tasks) == 4 and all(t["worker"].startswith("tcp://127.0.0.1:") for t in map_tasks)
    got = as_series(res)
    np.testing.assert_allclose(got.to_numpy(), ref.reindex(got.index).to_numpy(), atol=1e-9)
    assert res.n_rows == 20_000 and pd.api.types.is_string_dtype(res.categories.dtype) and res.trials_pd.shape == (2, len(res))


def test_explicit_and_iterative_paths_agree_and_buckets_change_no_bit(monkeypatch):
    """A categorical feature's system is summed explicitly over the buckets (few
    categories) or solved by CG rounds over them (many): the two agree, and neither
    depends on the number of buckets to the last bit."""
    from daskpd._strat import categorical_buckets

    df, _ = continuous_data(30_000, seed=21)
    df["c2"] = (df.c * 7) % 13
    results = {}
    for gather in (16_000_000, 0):  # explicit system (few categories) or CG rounds
        monkeypatch.setattr(categorical_buckets, "EXPLICIT_MAX_KEYS", gather)
        for buckets in (1, 4, 32):
            with dask.config.set({"daskpd.buckets": buckets}):
                r = daskpd.strat_curves_and_importances(df, target="y", categorical_features=["c", "c2"], n_trials=3,
                                                                   cat_min_samples_leaf=3)
            results[gather, buckets] = r
    for gather in (16_000_000, 0):
        base = results[gather, 1]
        for buckets in (4, 32):
            for f in ("c", "c2"):
                np.testing.assert_array_equal(results[gather, buckets].curves[f].pd, base.curves[f].pd)
                np.testing.assert_array_equal(results[gather, buckets].curves[f].trials_pd, base.curves[f].trials_pd)
    for f in ("c", "c2"):
        a, b = results[16_000_000, 1].curves[f], results[0, 1].curves[f]
        np.testing.assert_allclose(a.pd, b.pd, atol=1e-8)
        np.testing.assert_allclose(a.trials_pd, b.trials_pd, atol=1e-8)
        np.testing.assert_array_equal(a.count, b.count)
        np.testing.assert_array_equal(a.group, b.group)
        assert (a.n_leaves, a.n_leaves_used, a.n_ignored) == (b.n_leaves, b.n_leaves_used, b.n_ignored)


def test_iterative_path_falls_back_to_the_explicit_system(monkeypatch):
    """When CG does not converge over the buckets, G is summed from them and solved directly."""
    from daskpd._strat import categorical_buckets
    from daskpd._strat import categorical_system

    df, _ = continuous_data(20_000, seed=22)
    ref = daskpd.catstratpd(df, target="y", feature="c", n_trials=2)
    monkeypatch.setattr(categorical_buckets, "EXPLICIT_MAX_KEYS", 0)
    monkeypatch.setattr(categorical_system, "CG_MAXITER", 2)
    with dask.config.set({"daskpd.buckets": 4}):
        res = daskpd.catstratpd(df, target="y", feature="c", n_trials=2)
    assert res.params["solver"].startswith("cg+")
    np.testing.assert_allclose(res.pd, ref.pd, atol=1e-8)
    np.testing.assert_allclose(res.trials_pd, ref.trials_pd, atol=1e-8)


def test_a_trials_groups_follow_its_own_rows_on_both_paths(monkeypatch):
    """A category whose only row in a leaf has weight 0 in a trial does not link that
    leaf's other categories to its own group in that trial: the CG path's groups (a
    spanning forest per set) are the explicit path's (G's nonzeros per set)."""
    from daskpd._strat import categorical_buckets

    rng = np.random.default_rng(0)

    def rows(x2, c, n):
        return pd.DataFrame({"x2": np.full(n, x2, float), "c": np.full(n, c, object)})

    # leaves x2 = 1: {a, b}; x2 = 2: {c, d}; x2 = 3: {a (one row), c, e}
    df = pd.concat([rows(1, "a", 50), rows(1, "b", 50), rows(2, "c", 50), rows(2, "d", 50),
                    rows(3, "a", 1), rows(3, "c", 50), rows(3, "e", 50)], ignore_index=True)
    effect = {"a": 0.0, "b": 1.0, "c": 5.0, "d": 7.0, "e": 2.0}
    df["y"] = df["c"].map(effect).astype(float) + 3 * df["x2"] + rng.normal(0, 0.1, len(df))
    out = {}
    for gather in (16_000_000, 0):  # explicit system, CG rounds
        monkeypatch.setattr(categorical_buckets, "EXPLICIT_MAX_KEYS", gather)
        out[gather] = daskpd.catstratpd(df, target="y", feature="c", n_trials=30, random_state=0)
    explicit, cg = out[16_000_000], out[0]
    np.testing.assert_allclose(cg.pd, explicit.pd, atol=1e-8)
    np.testing.assert_allclose(cg.trials_pd, explicit.trials_pd, atol=1e-8)


def test_deterministic_given_random_state():
    df, _ = continuous_data(20_000, seed=12)
    a = daskpd.catstratpd(df, target="y", feature="c", sample_size=2_000, random_state=1)
    b = daskpd.catstratpd(df, target="y", feature="c", sample_size=2_000, random_state=1)
    c = daskpd.catstratpd(df, target="y", feature="c", sample_size=2_000, random_state=2)
    np.testing.assert_array_equal(a.pd, b.pd)
    assert not np.array_equal(a.pd, c.pd)


def test_frame_parquet_summary_and_plots(tmp_path):
    df, _ = strata_data(n=4000, noise=1.0, seed=13, n_cats=12, n_strata=8)
    res = daskpd.catstratpd(df, target="y", feature="c", centered=True)
    f = res.to_frame()
    assert {"feature", "category", "pd", "count"} <= set(f.columns)
    assert abs(np.average(f.pd, weights=f["count"])) < 1e-9
    p = res.to_parquet(tmp_path / "c.parquet")
    pd.testing.assert_frame_equal(pd.read_parquet(p), f, check_dtype=False)
    import json

    import pyarrow.parquet as pq

    meta = json.loads(pq.read_schema(p).metadata[b"daskpd"])
    assert meta["method"] == "catstratpd" and meta["n_categories"] == 12 and meta["centered"] is True
    assert "12 categories" in res.summary() and "CatStratPDResult" in repr(res)
    ax = res.plot()
    assert len(ax.get_yticklabels()) == 12 and ax.child_axes[0].get_yticklabels()[0].get_text().startswith("n=")
    ax.figure.savefig(tmp_path / "bar.png")
    # 1,000 categories: a strip sorted by effect, a few named, counts on a twin axis
    leaf, cat, n, s, _ = synthetic_sums(1000, 3000, seed=3, noise=1.0)
    from daskpd._strat.categorical import result_from_sums

    big = result_from_sums("k", "y", np.arange(1000).astype(object),
                           [categorical_gram.leaf_sums(leaf, cat, n, s, 1000)])
    ax = big.plot()
    assert len(ax.texts) == 10 and len(ax.figure.axes) == 2
    assert len(ax.collections[0].get_offsets()) == 1000  # every category a point (more: test_plotting.py)
    ax = big.plot(kind="bar", top_k=25)
    assert len(ax.get_yticklabels()) == 25 and "top 25 of 1000" in ax.get_ylabel()
    import matplotlib.pyplot as plt

    plt.close("all")


# ---------------------------------------------------------------------------------
# bad input


@pytest.fixture(scope="module")
def small():
    return strata_data(n=500, noise=1.0, seed=14)[0]


@pytest.mark.parametrize("kwargs, match", [
    (dict(feature="nope"), "'nope' not found"),
    (dict(target="nope"), "'nope' not found"),
    (dict(feature="y"), "is the target"),
    (dict(feature=3), "feature must be a column name"),
    (dict(min_samples_leaf=0), "min_samples_leaf must be an integer >= 1"),
    (dict(n_trials=0), r"n_trials must be an integer in \[1, 10000\]"),
    (dict(centered="yes"), "centered must be True or False"),
    (dict(nan_as_level=1), "nan_as_level must be True or False"),
    (dict(features=["s", "zz"]), "'zz' not found"),
])
def test_bad_parameters(small, kwargs, match):
    args = dict(target="y", feature="c") | kwargs
    with pytest.raises(DataError, match=match):
        daskpd.catstratpd(small, target=args.pop("target"), feature=args.pop("feature"), **args)


def test_bad_data(small):
    with pytest.raises(DataError, match="float column with non-integer values"):
        daskpd.catstratpd(small.assign(f=small.s + 0.5 * (small.index % 2)), target="y", feature="f")
    with pytest.raises(DataError, match="datetime"):
        daskpd.catstratpd(small.assign(t=pd.Timestamp("2020") + pd.to_timedelta(small.s, "D")), target="y", feature="t")
    with pytest.raises(DataError, match="target 'c' must be numeric"):
        daskpd.catstratpd(small, target="c", feature="s")
    with pytest.raises(DataError, match="feature 'k' is constant"):
        daskpd.catstratpd(small.assign(k="same"), target="y", feature="k")
    with pytest.raises(DataError, match="feature 'k' has no non-missing values"):
        daskpd.catstratpd(small.assign(k=pd.array([None] * len(small), dtype="str")), target="y", feature="k")
    with pytest.raises(DataError, match=r"daskpd\.catstratpd"):
        daskpd.stratpd(small, target="y", feature="c")
    # integral floats (integer codes with missing values) are accepted
    res = daskpd.catstratpd(small.assign(f=np.where(small.index % 10 == 0, np.nan, small.s * 1.0)), target="y", feature="f")
    assert res.categories.dtype == np.float64 and res.n_missing_x == 50


def test_no_leaf_holding_two_categories_is_an_error_and_a_no_support_flag():
    df = pd.DataFrame({"x": np.repeat(np.arange(6), 40), "y": np.repeat(np.arange(6.0), 40)})
    df["c"] = df.x.map(lambda v: f"c{v}")
    with pytest.raises(DataError, match=r"^CatStratPD for feature 'c': no leaf of its tree holds two categories: the "
                                        r"other columns separate them completely; raise min_samples_leaf"):
        # x named: y is a function of it, a likely leak the default stratifying columns leave out
        daskpd.catstratpd(df, target="y", feature="c", min_samples_leaf=10, stratify_on=["x"])
    # the same curve among others: marginal means only, flagged and left without importance
    df = pd.DataFrame({"x": np.repeat(np.arange(6), 100), "y": np.repeat(np.arange(6.0), 100),
                       "z": np.tile(np.arange(10.0), 60)})
    df["c"] = df.x.map(lambda v: f"c{v}")
    with pytest.warns(UserWarning, match="no leaf of the stratifying tree holds two or more categories"):
        res = daskpd.strat_curves_and_importances(df, target="y", features=["x", "c", "z"],
                                                  cat_min_samples_leaf=10, honest=False, progress=False)
    cur = res.curves["c"]
    assert cur.n_groups == 6 and cur.n_used == 0
    np.testing.assert_allclose(cur.pd, np.arange(6.0))  # marginal means
    assert res.table.loc["c", "support"] == "no_support" and np.isnan(res.table.loc["c", "importance"])


@pytest.mark.parametrize("n_rows, K, T, L", [(5000, 40, 3, None), (300, 5000, 2, None), (2000, 7, 0, None),
                                           (0, 7, 2, None), (140_000, 2, 1, 1), (140_000, 2, 0, 1)])
def test_prepare_sums_every_set_in_one_pass_as_group_sums_of_each_set(n_rows, K, T, L):
    """A bucket's per (virtual bucket, category) terms of every statistics set, made in
    one pass over its merged table, are each set's group_sums of the six columns (set t:
    every leaf's rows and sums times its trial-t weight; the same bits); the scalars and
    the rows the CG products use are each set's own.  The CG block's counts are kept in
    the narrowest type that holds them, also where a group counts 2^16 rows or more (one
    leaf of two categories)."""
    from daskpd._data.encode import KeyCoder
    from daskpd._engine.rows import Rows
    from daskpd._engine.sums import group_sums, reduce_tables
    from daskpd._engine.tree_fold import fold_tree, tree_nodes
    from daskpd._strat.categorical_buckets import prepare
    from daskpd._strat.leafboot import weights_of_leaves
    from daskpd._strat.scan import FeatureScan
    from daskpd._strat.virtual import N_VIRTUAL, virtual_of

    rng = np.random.default_rng(4)
    L = L or max(1, n_rows // 6)
    leaf, code = rng.integers(0, L, n_rows), rng.integers(0, K, n_rows)
    y = rng.normal(size=n_rows) * 1e3
    table = reduce_tables([Rows(leaf.astype(np.int32), code.astype(np.int32), y, None)], K)
    fs = FeatureScan("c", "categorical", [], None, KeyCoder("categorical", values=np.arange(K)), None, L)
    bucket, summary = prepare((table, None), fs, type("Job", (), {"n_sets": T + 1, "random_state": 3})())
    tl = np.asarray(table.leaf, np.int64)
    W = np.ones((len(tl), T + 1))
    if T and len(tl):
        W[:, 1:] = weights_of_leaves("c", np.arange(L), T, 3)[tl]

    def set_stats(st):
        return table.values[:, 0] * W[:, st], table.values[:, 1] * W[:, st]

    top = max([float(set_stats(st)[0].max(initial=0)) for st in range(T + 1)])
    assert bucket.block.n.dtype == (np.uint8 if top < 2 ** 8 else np.float32 if top >= 2 ** 16 else np.uint16)
    for st in range(T + 1):
        n, s = set_stats(st)
        keep = n > 0
        lf, cd, n, s = tl[keep], np.asarray(table.key)[keep], n[keep], s[keep]
        first = np.flatnonzero(np.r_[True, lf[1:] != lf[:-1]]) if len(lf) else np.zeros(0, np.int64)
        size = np.diff(np.r_[first, len(lf)])
        N, S = np.zeros(len(first)), np.zeros(len(first))
        for q, (a, m) in enumerate(zip(first, size)):
            for i in range(a, a + m):  # in group order
                N[q] += n[i]
                S[q] += s[i]
        N, S = np.repeat(N, size), np.repeat(S, size)
        multi = np.repeat(size >= 2, size)
        vb = virtual_of(lf, L)
        want = group_sums(vb, cd, np.column_stack([n, s, np.where(multi, n, 0.0), np.where(multi, 1.0, 0.0),
                                                   np.where(multi, s - n * (S / N), 0.0),
                                                   np.where(multi, n * n / N, 0.0)]))
        got = summary.vectors
        if st == 0:  # per (virtual bucket, category)
            at = {(v, c): i for i, (v, c) in enumerate(zip(got.leaf, got.key))}
            idx = np.array([at[(v, c)] for v, c in zip(want.leaf, want.key)], dtype=np.int64)
            assert got.values.shape[1] == 6 and got.values[idx].tobytes() == want.values.tobytes()
            assert not np.delete(got.values, idx, axis=0).any()  # the other cells: no row of this set
        else:  # a trial's: folded over the virtual buckets by the fixed tree
            ref = fold_tree([tree_nodes(want.leaf, want.key, want.values, 0, N_VIRTUAL, N_VIRTUAL)], K, 6, N_VIRTUAL)
            tr = fold_tree([summary.vector_trials], K, 6 * T, N_VIRTUAL)[:, 6 * (st - 1):6 * st]
            assert tr.tobytes() == ref.tobytes()
        sca = summary.scalars.values[:, 3 * st:3 * st + 3].sum(axis=0)
        assert sca.tolist() == [float(n[~multi].sum()), float(len(first)), float((size >= 2).sum())]
        c, nn, ww, starts, _, leaves = bucket.set_rows(st)
        assert c.tolist() == cd[multi].tolist() and nn.tobytes() == n[multi].tobytes()
        assert ww.tobytes() == (1.0 / N[multi]).tobytes() and leaves.tolist() == lf[first][size >= 2].tolist()


@pytest.mark.parametrize("seed, K, per_leaf", [(0, 12, 2), (1, 30, 3), (2, 200, 2), (3, 6, 4), (4, 60, 2)])
def test_forests_link_each_sets_categories_through_its_own_leaves(seed, K, per_leaf):
    """Each set's spanning forest (a bucket's, and the kept-state finish's from its
    cells) has the components of a plain union over that set's leaves holding >= 2 of
    its categories: the leaves come in an order where a set's categories fall into one
    component, split again (a leaf of new categories) and rejoin, and a trial draws no
    copy (weight 0) of leaves that would have linked them."""
    from daskpd._data.encode import KeyCoder
    from daskpd._engine.rows import Rows
    from daskpd._engine.sums import reduce_tables
    from daskpd._strat.categorical_buckets import prepare
    from daskpd._strat.categorical_solve import uf_flatten
    from daskpd._strat.catruns import _merge_leaves
    from daskpd._strat.leafboot import weights_of_leaves
    from daskpd._strat.scan import FeatureScan

    rng = np.random.default_rng(seed)
    T, L = 5, 400
    # leaf l draws its categories from a window that moves across the categories, so the
    # components grow, meet new categories apart from them, and merge
    leaf, code = [], []
    for q in range(L):
        lo = int(rng.integers(0, K)) if rng.random() < 0.3 else (q * 7) % K
        cats = (lo + rng.choice(3, size=per_leaf, replace=True) * rng.integers(1, 3)) % K
        for c in cats:
            for _ in range(int(rng.integers(1, 3))):
                leaf.append(q)
                code.append(int(c))
    leaf, code = np.array(leaf), np.array(code)
    n_rows = len(leaf)
    table = reduce_tables([Rows(leaf.astype(np.int32), code.astype(np.int32), rng.normal(size=n_rows), None)], K)
    fs = FeatureScan("c", "categorical", [], None, KeyCoder("categorical", values=np.arange(K)), None, L)
    _, summary = prepare((table, None), fs, type("Job", (), {"n_sets": T + 1, "random_state": seed})())
    tl = np.asarray(table.leaf, np.int64)
    W = np.column_stack([np.ones(len(tl)), weights_of_leaves("c", np.arange(L), T, seed)[tl]])
    assert (W == 0).any()
    # the kept-state finish links the same forests from a block of (leaf, category) cells
    n_all = table.values[:, :1] * W
    starts = np.r_[np.flatnonzero(np.r_[True, tl[1:] != tl[:-1]]), len(tl)].astype(np.int64)
    N = np.add.reduceat(n_all, starts[:-1], axis=0)
    kept = _merge_leaves(np.asarray(table.key).astype(np.int32), n_all.copy(), starts, N, np.zeros_like(N), K)[-1]
    for st in range(T + 1):
        n = n_all[:, st]
        parent = list(range(K))

        def find(c):
            while parent[c] != c:
                c = parent[c]
            return c

        for q in np.unique(tl):
            cats = np.unique(np.asarray(table.key)[(tl == q) & (n > 0)])
            if len(cats) >= 2:
                for c in cats[1:]:
                    a, b = find(int(cats[0])), find(int(c))
                    parent[max(a, b)] = min(a, b)
        want = [find(c) for c in range(K)]
        for forests in (summary.forests, kept):
            assert uf_flatten(np.array(forests[st], np.int64)).tolist() == want, st
