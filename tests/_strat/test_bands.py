"""StratPD / CatStratPD bootstrap trials and their band: the band covers the truth at
about its nominal level on data with a known generator, the trials are reproducible and
do not depend on the scheduler or the partitioning, n_trials=1 is the curve alone, and
the summary flags a curve its band cannot tell from flat."""
from __future__ import annotations

import warnings

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

import daskpd
from daskpd import InvalidParameterError
from daskpd.results.curves import flat_within_band, trial_band

EFFECTS = np.array([0.0, 1.0, 3.0, 2.5])


def make(seed: int, n: int = 2_000, slope: float = 0.5) -> pd.DataFrame:
    """y = slope x1^2 + 4 x2 + effect[c] + N(0, 1); x1 in 0..10, x2 in {0, .25, ..., 1}:
    the stratifying tree can separate the other features exactly, so the curves' truth
    is known (x1: slope x^2 from the first position; c: the effects from the lowest)."""
    rng = np.random.default_rng(seed)
    x1 = rng.integers(0, 11, n).astype(float)
    x2 = rng.integers(0, 5, n) / 4
    c = rng.integers(0, 4, n)
    y = slope * x1 ** 2 + 4 * x2 + EFFECTS[c] + rng.normal(0, 1, n)
    return pd.DataFrame({"x1": x1, "x2": x2, "c": c.astype(str), "y": y})


@pytest.fixture(scope="module")
def df():
    return make(0)


@pytest.fixture(scope="module")
def curves(df):
    """stratpd and catstratpd with 8 trials, computed once for the module."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return (daskpd.stratpd(df, target="y", feature="x1", n_trials=8, random_state=3, progress=False),
                daskpd.catstratpd(df, target="y", feature="c", n_trials=8, random_state=3, progress=False))


def test_coverage_of_the_band_on_known_truth():
    """Over 15 seeds x 2,000 rows with 60 trials, the 90 % band holds the true curve at
    80-97 % of the positions for StratPD and for CatStratPD (60 trials: the percentile
    interval of T trials covers about 0.9 (T - 1)/(T + 1), 0.87 at T=60; the docs'
    figure, 40 seeds, is benchmarks/bench_bands.py --coverage).  Both curves ride one
    scan (strat_curves_and_importances: the same finish and result as stratpd/catstratpd)."""
    hits = {"x1": [0, 0], "c": [0, 0]}
    for seed in range(15):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = daskpd.strat_curves_and_importances(make(seed), "y", categorical_features=["c"], n_trials=60,
                                                      random_state=seed, progress=False)
        for f in hits:
            r = res.curves[f]
            b = r.band()
            if f == "x1":
                a = int(np.flatnonzero(r.supported)[0])
                truth = 0.5 * r.x ** 2 - 0.5 * r.x[a] ** 2
            else:
                truth = EFFECTS[np.asarray(r.categories).astype(int)]
                truth = truth - truth[int(np.argmin(r.pd))]
            ok = np.isfinite(b["lo"]) & (b["hi"] > b["lo"])  # not the anchor, where every trial is 0
            hits[f][0] += int(((truth[ok] >= b["lo"][ok]) & (truth[ok] <= b["hi"][ok])).sum())
            hits[f][1] += int(ok.sum())
    for f, (h, n) in hits.items():
        assert n >= (140 if f == "x1" else 40), (f, n)
        assert 0.80 <= h / n <= 0.97, (f, h / n, n)


def test_band_shape_columns_and_params(curves):
    s, c = curves
    for r, n_pos in ((s, len(s.x)), (c, len(c.categories))):
        assert r.trials_pd.shape == (8, n_pos) and r.trials_supported.shape == (8, n_pos)
        b = r.band()
        f = r.to_frame()
        for col, key in (("pd_std", "std"), ("pd_lo", "lo"), ("pd_hi", "hi")):
            np.testing.assert_array_equal(f[col].to_numpy(), b[key])
        assert r.params["band"] == [0.05, 0.95] and r.params["bootstrap"] is True
        ok = np.isfinite(b["lo"])
        assert (b["lo"][ok] <= b["hi"][ok]).all()
        # the band is of the trials aligned on the curve's anchor (0 there in every trial)
        T = r.trial_curves()
        a = int(np.flatnonzero(np.isfinite(r.pd) & (r.pd == 0))[0])
        assert np.all(T[np.isfinite(T[:, a]), a] == 0)
        np.testing.assert_allclose(b["hi"], np.nanquantile(T, 0.95, axis=0), equal_nan=True)
    assert "90% band over 8 trials" in s.summary() and "90% band over 8 trials" in c.summary()


def test_n_trials_1_is_the_curve_alone_and_trials_keep_it(df, curves):
    """n_trials=1 (the default) runs no trial set: no trial columns, params as before;
    with trials the all-rows curve is the same, bit for bit."""
    s, c = curves
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s1 = daskpd.stratpd(df, target="y", feature="x1", n_trials=1, random_state=3, progress=False)
        c1 = daskpd.catstratpd(df, target="y", feature="c", random_state=3, progress=False)
    for one, many in ((s1, s), (c1, c)):
        assert one.trials_pd is None and one.band() is None and one.n_trials == 1
        assert not {"pd_std", "pd_lo", "pd_hi"} & set(one.to_frame().columns)
        assert not {"band", "bootstrap", "subsample_size"} & set(one.params) and one.params["n_trials"] == 0
        np.testing.assert_array_equal(one.pd, many.pd)
        np.testing.assert_array_equal(one.count, many.count)
    np.testing.assert_array_equal(s1.slope, s.slope)


KW = dict(target="y", feature="x1", n_trials=6, random_state=11, progress=False)
CAT_KW = dict(target="y", feature="c", n_trials=6, random_state=11, progress=False)


@pytest.fixture(scope="module")
def on_threads(df):
    """Without a client (dask's threads): in memory, twice, with 3 partitions, and another seed."""
    ddf = dd.from_pandas(df, npartitions=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {"mem": daskpd.stratpd(df, **KW), "again": daskpd.stratpd(df, **KW),
                "threads3": daskpd.stratpd(ddf, **KW), "other": daskpd.stratpd(df, **{**KW, "random_state": 12}),
                "cat_mem": daskpd.catstratpd(df, **CAT_KW)}


def test_trials_reproducible_and_partition_independent(df, on_threads, client):
    """Same random_state: the same trials; another: other trials.  In memory (one
    partition, dask's threads) and on the real cluster with 3 partitions: equal up to the
    reassociation of float sums; the same 3 partitions on threads and on the cluster: bit
    for bit."""
    ddf = dd.from_pandas(df, npartitions=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        on_cluster = daskpd.stratpd(ddf, **KW)
        cat_cluster = daskpd.catstratpd(ddf, **CAT_KW)
    t = on_threads
    np.testing.assert_array_equal(t["mem"].trials_pd, t["again"].trials_pd)
    np.testing.assert_array_equal(t["threads3"].trials_pd, on_cluster.trials_pd)
    np.testing.assert_allclose(t["mem"].trials_pd, on_cluster.trials_pd, rtol=1e-9, atol=1e-9, equal_nan=True)
    np.testing.assert_array_equal(t["mem"].trials_supported, on_cluster.trials_supported)
    np.testing.assert_allclose(t["cat_mem"].trials_pd, cat_cluster.trials_pd, rtol=1e-9, atol=1e-9, equal_nan=True)
    assert not np.allclose(t["mem"].trials_pd, t["other"].trials_pd, equal_nan=True)


def test_flat_flag():
    """A curve whose band is wider than its rise and fall is flagged in summary()."""
    assert flat_within_band([0.0, 0.5, -0.2], [0.0, -1.0, -0.5], [0.0, 1.0, 0.6]) is True
    assert flat_within_band([0.0, 2.5, 4.5], [0.0, 2.0, 4.0], [0.0, 3.0, 5.0]) is False
    assert flat_within_band([0.0], [np.nan], [np.nan]) is None
    b = trial_band(np.array([[0.0, 1.0, np.nan], [0.0, 3.0, 2.0], [1.0, 5.0, np.nan]]), (0.0, 1.0), anchor=0)
    np.testing.assert_array_equal(b["lo"][:2], [0.0, 1.0])  # the third trial is shifted by its anchor value 1
    np.testing.assert_array_equal(b["hi"][:2], [0.0, 4.0])
    assert np.isnan(b["lo"][2]) and b["n"][2] == 1  # one trial only: no band
    rng = np.random.default_rng(5)
    df = pd.DataFrame({"x1": rng.integers(0, 11, 2000).astype(float), "x2": rng.integers(0, 5, 2000) / 4})
    df["y"] = 4 * df.x2 + rng.normal(0, 1, 2000)  # y does not depend on x1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        flat = daskpd.stratpd(df, target="y", feature="x1", n_trials=10, progress=False)
    assert "NOT distinguishable from flat" in flat.summary(), flat.summary()


def test_steep_curve_is_not_flagged(curves):
    assert "NOT distinguishable" not in curves[0].summary()
    assert "NOT distinguishable" not in curves[1].summary()


def test_subsample_trials(df):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = daskpd.stratpd(df, target="y", feature="x1", n_trials=4, bootstrap=False, subsample_size=0.5,
                           progress=False)
    assert r.params["bootstrap"] is False and r.params["subsample_size"] == 0.5
    # 0/1 weights: every trial's row count at a position is at most the all-rows count
    assert (r.set_counts[1:] <= r.set_counts[0]).all() and (r.set_counts[1:] < r.set_counts[0]).any()


@pytest.mark.parametrize("kw, name", [({"n_trials": 0}, "n_trials"), ({"band": (0.9, 0.1)}, "band"),
                                      ({"subsample_size": 1.5}, "subsample_size"), ({"bootstrap": "yes"}, "bootstrap")])
def test_bad_trial_parameters(df, kw, name):
    for fn, feature in ((daskpd.stratpd, "x1"), (daskpd.catstratpd, "c")):
        with pytest.raises(InvalidParameterError, match=name):
            fn(df, target="y", feature=feature, **kw)


def test_plots_draw_the_band(curves):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.collections import LineCollection, PolyCollection

    s, c = curves
    ax = s.plot(show_trials=True)
    labels = [h.get_label() for h in ax.collections + ax.lines]
    assert any(isinstance(h, PolyCollection) and "90% band (8 trials)" in h.get_label() for h in ax.collections)
    assert "trials" in labels
    ax2 = c.plot()
    assert any(isinstance(h, LineCollection) and "90% band" in h.get_label() for h in ax2.collections)
    import matplotlib.pyplot as plt

    plt.close("all")


@pytest.mark.parametrize("packed", [True, False])
def test_many_trials_ride_as_one_word_with_the_same_weights(df, monkeypatch, packed):
    """With more than ``HASHED_TRIALS`` trials the raw rows carry one 8-byte word: their
    weights packed (drawn in the map) or their hash (the weights drawn where the rows are
    summed).  Either way the same trials as the rows carrying their weight bytes (up to
    the reassociation of float sums where the smaller rows change the planner's
    grouping), and partition independent."""
    from daskpd._strat import scan

    if not packed:
        monkeypatch.setattr(scan, "PACKED_TRIALS", 0)
    kw = dict(target="y", categorical_features=["c"], n_trials=12, random_state=5, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hashed = daskpd.strat_curves_and_importances(df, **kw)
        parts3 = daskpd.strat_curves_and_importances(dd.from_pandas(df, npartitions=3), **kw)
        monkeypatch.setattr(scan, "HASHED_TRIALS", 100)
        weighted = daskpd.strat_curves_and_importances(df, **kw)
    assert scan.trial_row_bytes(13) == 12
    for f in ("x1", "c"):
        for other in (parts3, weighted):
            np.testing.assert_allclose(hashed.curves[f].trials_pd, other.curves[f].trials_pd, rtol=1e-9, atol=1e-9,
                                       equal_nan=True)
