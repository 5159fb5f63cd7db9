"""StratPD / CatStratPD trials (a bootstrap of the stratification's leaves) and their
band: the band covers the truth at about its nominal level on data with a known
generator, is centred on the curve and exists wherever the curve does, the trials are
reproducible and do not depend on the scheduler or the partitioning, n_trials=1 is the
curve alone, and the summary flags a curve its band cannot tell from flat."""
from __future__ import annotations

import warnings

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

import daskpd
from daskpd import InvalidParameterError
from daskpd.results.curves import align_trials, flat_within_band, simultaneous_q, trial_band

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
    """Over 12 seeds x 2,000 rows with 60 trials, the 90 % band holds the true curve at
    80-98 % of the positions for StratPD and for CatStratPD (these seeds give 0.825 for
    x1; the docs' figures, over 40 seeds and more designs, are bench_bands.py --coverage:
    a curve's errors at its positions move together, so 12 seeds weigh like 12 draws).  Both curves ride one
    scan (strat_curves_and_importances: the same finish and result as stratpd/catstratpd)."""
    hits = {"x1": [0, 0], "c": [0, 0]}
    for seed in range(12):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = daskpd.strat_curves_and_importances(make(seed), target="y", categorical_features=["c"], n_trials=60,
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
        assert n >= (110 if f == "x1" else 30), (f, n)
        assert 0.80 <= h / n <= 0.98, (f, h / n, n)


def test_band_shape_columns_and_params(curves):
    s, c = curves
    for r, n_pos in ((s, len(s.x)), (c, len(c.categories))):
        assert r.trials_pd.shape == (8, n_pos) and r.trials_supported.shape == (8, n_pos)
        b = r.band()
        f = r.to_frame()
        for col, key in (("pd_std", "std"), ("pd_lo", "lo"), ("pd_hi", "hi")):
            np.testing.assert_array_equal(f[col].to_numpy(), b[key])
        assert r.params["band"] == [0.05, 0.95]
        ok = np.isfinite(b["lo"])
        # the band exists wherever the curve does, is centred on it and holds it
        np.testing.assert_array_equal(ok, np.isfinite(r.pd))
        np.testing.assert_allclose((b["lo"][ok] + b["hi"][ok]) / 2, r.pd[ok], rtol=1e-12, atol=1e-12)
        assert (b["lo"][ok] <= r.pd[ok]).all() and (r.pd[ok] <= b["hi"][ok]).all()
        # the trials are aligned on the curve (0 at its anchor in every trial)
        T = r.trial_curves()
        a = int(np.flatnonzero(np.isfinite(r.pd) & (r.pd == 0))[0])
        assert np.all(T[:, a] == 0)
        # pd +- t_{df} std: with m leaves resampled, std is the trials' times sqrt(m / (m - 1))
        from scipy.stats import t as student

        m = r.params["band_clusters"] if r is s else np.maximum(r.n_leaves_cat, 1)
        df_ = np.minimum(7, np.asarray(m) - 1)
        std = np.nanstd(T, axis=0, ddof=1) * np.sqrt(m / (np.asarray(m) - 1.0))
        np.testing.assert_allclose(b["std"][ok], std[ok] if np.ndim(std) else std, rtol=1e-12)
        np.testing.assert_allclose(b["hi"][ok], (r.pd + student.ppf(0.95, df_) * std)[ok], rtol=1e-9, atol=1e-12)
    assert s.params["band_clusters"] == s.n_leaves  # every leaf holds a slope here
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
        assert not {"band", "band_clusters"} & set(one.params) and one.params["n_trials"] == 0
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


def test_band_functions():
    """The band's pieces on hand-made trials: trials aligned at the anchor or, without
    a value there, by their mean difference; a centred t band; a flat line fits a band
    iff max(lo) <= min(hi)."""
    trials = np.array([[0.0, 1.0, np.nan], [0.0, 3.0, 2.0], [1.0, 5.0, np.nan], [np.nan, 2.0, 3.0]])
    center = np.array([0.0, 2.0, 2.5])
    al = align_trials(trials, center, anchor=0)
    np.testing.assert_array_equal(al[2], [0.0, 4.0, np.nan])  # shifted by its value at the anchor
    np.testing.assert_array_equal(al[3], [np.nan, 1.75, 2.75])  # no anchor: by its mean difference (+0.25 - 0.5) / 2
    b = trial_band(trials, (0.05, 0.95), center=center, align=True, anchor=0)
    assert b["n"].tolist() == [3, 4, 2]
    assert b["std"][0] == 0 and b["lo"][0] == b["hi"][0] == 0
    from scipy.stats import t as student

    sd1 = np.std(al[:, 1], ddof=1)
    np.testing.assert_allclose([b["lo"][1], b["hi"][1]], 2.0 + student.ppf([0.05, 0.95], 3) * sd1)
    b1 = trial_band(trials[:1], (0.05, 0.95), center=center, align=True, anchor=0)
    assert np.isnan(b1["lo"]).all()  # one trial: no band
    # few clusters: the spread scaled by sqrt(m / (m - 1)), t with m - 1 degrees of freedom
    bc = trial_band(trials, (0.05, 0.95), center=center, align=True, anchor=0, clusters=3)
    np.testing.assert_allclose(bc["std"][1], sd1 * np.sqrt(1.5))
    np.testing.assert_allclose(bc["hi"][1], 2.0 + student.ppf(0.95, 2) * sd1 * np.sqrt(1.5))
    # a curve known absolutely (a model's PD): the trials are not shifted
    ba = trial_band(np.array([[1.0, 2.0], [3.0, 4.0]]), (0.05, 0.95), center=np.array([2.0, 3.0]))
    np.testing.assert_allclose(ba["std"], [np.sqrt(2.0)] * 2)
    assert flat_within_band([0.0, 0.5, -0.2], [0.0, -1.0, -0.5], [0.0, 1.0, 0.6]) is True
    assert flat_within_band([0.0, 2.5, 4.5], [0.0, 2.0, 4.0], [0.0, 3.0, 5.0]) is False
    assert flat_within_band([0.0, 0.5], [-0.1, 0.2], [0.1, 0.8]) is False  # wide, but no flat line fits
    assert flat_within_band([0.0], [np.nan], [np.nan]) is None
    # the sup-t critical value: the order statistic ceil(level (T + 1)) over trials of the
    # largest standardised deviation (T = 4: level 0.6 -> the 3rd of 4)
    T = np.array([[0.0, 1.0], [0.0, 3.0], [0.0, -1.0], [0.0, 2.0]])
    assert simultaneous_q(T, np.zeros(2), np.array([1.0, 1.0]), 0.6) == 2.0
    assert simultaneous_q(T, np.zeros(2), np.array([1.0, 1.0]), 0.99) == 3.0


def test_flat_flag():
    """y does not depend on x1: the summary says the curve is not distinguishable from
    flat (a flat line fits in its simultaneous 90 % band) for most seeds -- 9 of these
    10; a test at the nominal rate over many seeds is bench_bands.py --coverage's "no
    effect" design."""
    said = []
    for seed in range(10):
        rng = np.random.default_rng(seed)
        df = pd.DataFrame({"x1": rng.integers(0, 11, 2000).astype(float), "x2": rng.integers(0, 5, 2000) / 4})
        df["y"] = 4 * df.x2 + rng.normal(0, 1, 2000)  # y does not depend on x1
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            flat = daskpd.stratpd(df, target="y", feature="x1", n_trials=20, random_state=seed, progress=False)
        said.append("NOT distinguishable from flat" in flat.summary())
    assert sum(said) >= 8, said


def test_steep_curve_is_not_flagged(curves):
    assert "NOT distinguishable" not in curves[0].summary()
    assert "NOT distinguishable" not in curves[1].summary()


@pytest.mark.parametrize("kw, name", [({"n_trials": 0}, "n_trials"), ({"band": (0.9, 0.1)}, "band")])
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


def test_the_band_exists_where_the_curve_does_on_a_sparse_tail():
    """A pure-noise feature on a sparse, heavy-tailed x: every trial is estimated where
    the curve is (no trial drops out on one sparse position), so the band exists at
    every position of the curve and the summary speaks of the band where it is."""
    rng = np.random.default_rng(7)
    n = 3000
    df = pd.DataFrame({"noise": np.round(rng.lognormal(0, 1.5, n), 1), "x2": rng.uniform(0, 1, n)})
    df["y"] = 3 * df.x2 + rng.normal(0, 1, n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = daskpd.stratpd(df, target="y", feature="noise", n_trials=20, progress=False)
    b = r.band()
    np.testing.assert_array_equal(np.isfinite(b["lo"]), np.isfinite(r.pd))
    assert np.isfinite(r.trials_pd[:, np.isfinite(r.pd)]).all()
    assert "90% band over 20 trials" in r.summary() and "positions)" not in r.summary()
