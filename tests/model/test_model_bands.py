"""Bootstrap bands of the model-based curves (the model fixed, the rows re-weighted in
the same pass): PD's band covers the model's exact PD on the population at about its
nominal level; every trial equals the weighted average with that trial's weights
(PD and ALE); trials are reproducible and independent of the partitioning and the
scheduler; n_trials=1 is today's pass."""
from __future__ import annotations

import warnings

import dask.dataframe as dd
import numpy as np
from scipy.stats import t as student
import pandas as pd
import pytest

import daskpd
from daskpd import InvalidParameterError
from daskpd._engine.hashing import bootstrap_weights

pytestmark = pytest.mark.usefixtures("one_openmp_thread")


def model(d: pd.DataFrame) -> np.ndarray:
    """f(x1, x2) = x1^2 + 3 x1 x2 + sin(4 x2): its PD in x1 over x2 ~ U(0, 1) is
    v^2 + 1.5 v + (1 - cos 4) / 4, exactly."""
    x1, x2 = d["x1"].to_numpy(float), d["x2"].to_numpy(float)
    return x1 ** 2 + 3 * x1 * x2 + np.sin(4 * x2)


def truth(v):
    return v ** 2 + 1.5 * v + (1 - np.cos(4.0)) / 4


def make(seed: int, n: int = 2_000) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"x1": rng.uniform(0, 1, n), "x2": rng.uniform(0, 1, n)})


GRID = {"x1": np.linspace(0.0, 1.0, 6)}


@pytest.fixture(scope="module")
def df():
    return make(0, 1_000)


def test_pd_band_covers_the_population_pd():
    """25 seeds x 2,000 rows, 60 trials: the 90 % band holds the exact population PD at
    80-97 % of the grid (the percentile interval of 60 trials covers about 0.87; the
    docs' figure: benchmarks/bench_bands.py --coverage)."""
    hits = n = 0
    for seed in range(25):
        r = daskpd.partial_dependence(model, make(seed), "x1", grid=GRID, n_trials=60, random_state=seed,
                                      progress=False)
        b = r.band()
        t = truth(r.grid_values[0])
        hits += int(((t >= b["lo"]) & (t <= b["hi"])).sum())
        n += len(t)
    assert 0.80 <= hits / n <= 0.97, hits / n


def test_pd_trials_are_weighted_averages(df):
    """Trial t is the PD weighted by trial t's bootstrap weights (the row hash of the
    model's columns), and the band's columns are the trials' std and the band centred on
    the PD (Student's t quantiles at T - 1 degrees of freedom)."""
    r = daskpd.partial_dependence(model, df, "x1", grid=GRID, n_trials=5, random_state=7, progress=False)
    W = bootstrap_weights(df, ["x1", "x2"], 5, 7)
    for t in range(5):
        ref = daskpd.partial_dependence(model, df, "x1", grid=GRID, sample_weight=W[:, t], progress=False)
        np.testing.assert_allclose(r.trials_pd[t], ref.average, rtol=1e-12)
    f = r.to_frame()
    np.testing.assert_allclose(f["pd_std"], np.std(r.trials_pd, axis=0, ddof=1))
    np.testing.assert_allclose(f["pd_lo"], r.average + student.ppf(0.05, 4) * np.std(r.trials_pd, axis=0, ddof=1))
    assert r.params["n_trials"] == 5 and "90% band over 5 trials" in r.summary()
    # 2-way: one band per cell
    r2 = daskpd.partial_dependence(model, df, ("x1", "x2"), grid={"x1": GRID["x1"], "x2": np.array([0.2, 0.8])},
                                   n_trials=5, random_state=7, progress=False)
    assert r2.trials_pd.shape == (5, 6, 2) and len(r2.to_frame()["pd_std"]) == 12


def test_pd_tree_engine_trials(df):
    """tree-exact carries every weight set through its one walk (per-leaf weight vectors):
    each trial is the weighted PD, equal to the per-row engines' trials to 1e-12, and the
    average is bit for bit the PD without trials."""
    from sklearn.ensemble import GradientBoostingRegressor

    m = GradientBoostingRegressor(n_estimators=10, max_depth=3, random_state=0).fit(df, model(df))
    kw = dict(grid=GRID, random_state=1, method="brute", progress=False)
    r = daskpd.partial_dependence(m, df, ["x1", ("x1", "x2")], n_trials=3, **kw)
    assert {x.engine for x in r.values()} == {"tree-exact"}
    W = bootstrap_weights(df, ["x1", "x2"], 3, 1)
    for t in range(3):
        ref = daskpd.partial_dependence(m, df, "x1", grid=GRID, sample_weight=W[:, t], method="brute", progress=False)
        np.testing.assert_allclose(r["x1"].trials_pd[t], ref.average, rtol=1e-12)
    slow = daskpd.partial_dependence(m, df, ["x1", ("x1", "x2")], n_trials=3, engine="predict", **kw)
    for key in r:
        np.testing.assert_allclose(r[key].trials_pd, slow[key].trials_pd, rtol=1e-12)
    one = daskpd.partial_dependence(m, df, ["x1", ("x1", "x2")], **kw)
    for key in r:
        np.testing.assert_array_equal(r[key].average, one[key].average)


def test_pd_tree_engine_trial_counts_equal_float_weights(df):
    """Without sample_weight the tree walk sums the trials' uint8 counts (set 0's weight
    is 1); with a sample_weight column of ones it sums the float64 weight sets: whole
    numbers either way, so every trial is the same to the bit."""
    from sklearn.ensemble import GradientBoostingRegressor

    m = GradientBoostingRegressor(n_estimators=10, max_depth=3, random_state=0).fit(df, model(df))
    kw = dict(grid=GRID, random_state=1, method="brute", progress=False, n_trials=4)
    counts = daskpd.partial_dependence(m, df, ["x1", ("x1", "x2")], **kw)
    floats = daskpd.partial_dependence(m, df.assign(w=1.0), ["x1", ("x1", "x2")], sample_weight="w",
                                       columns=["x1", "x2"], **kw)
    for key in counts:
        assert counts[key].engine == floats[key].engine == "tree-exact"
        np.testing.assert_array_equal(counts[key].trials_pd, floats[key].trials_pd)
        np.testing.assert_array_equal(counts[key].average, floats[key].average)


def test_pd_n_trials_1_is_today(df):
    one = daskpd.partial_dependence(model, df, "x1", grid=GRID, progress=False)
    also = daskpd.partial_dependence(model, df, "x1", grid=GRID, n_trials=1, random_state=3, progress=False)
    many = daskpd.partial_dependence(model, df, "x1", grid=GRID, n_trials=4, progress=False)
    np.testing.assert_array_equal(one.average, also.average)
    assert one.trials_pd is None and "pd_std" not in one.to_frame() and "band" not in one.params
    np.testing.assert_allclose(many.average, one.average, rtol=1e-12)  # the same average, summed per weight set


def test_ale_trials_are_weighted_ales(df):
    """ALE trial t is the ALE with trial t's weights (same bins: unweighted quantiles), up
    to its centring: a trial is centred by the all-rows bins' weights (quantile bins hold
    the same rows in any sample of the data)."""
    r = daskpd.ale(model, df, "x1", bins=8, n_trials=4, random_state=2, progress=False)
    W = bootstrap_weights(df, ["x1", "x2"], 4, 2)
    w = np.asarray(r.count, float)[1:]
    for t in range(4):
        ref = daskpd.ale(model, df, "x1", bins=8, sample_weight=W[:, t], progress=False)
        d = r.trials_pd[t] - ref.ale
        np.testing.assert_allclose(d, d[0], rtol=0, atol=1e-12)  # the same curve, another constant
        mid = (r.trials_pd[t][:-1] + r.trials_pd[t][1:]) / 2
        assert abs(float((w * mid).sum() / w.sum())) < 1e-12
    one = daskpd.ale(model, df, "x1", bins=8, progress=False)
    np.testing.assert_array_equal(r.ale, one.ale)  # the all-rows curve is today's
    assert one.trials_pd is None and "pd_lo" in r.to_frame() and "pd_lo" not in one.to_frame()


def test_ale_categorical_trials(df):
    d = df.assign(c=np.where(df.x2 > 0.5, "hi", np.where(df.x2 > 0.2, "mid", "lo")))

    def f(x):
        return model(x) + np.where(x["c"].astype(str).to_numpy() == "hi", 2.0, 0.0)

    r = daskpd.ale(f, d, "c", n_trials=4, random_state=2, progress=False)
    W = bootstrap_weights(d, ["x1", "x2", "c"], 4, 2)
    for t in range(4):
        ref = daskpd.ale(f, d, "c", sample_weight=W[:, t], progress=False)
        np.testing.assert_allclose(r.trials_pd[t], ref.ale, rtol=1e-10, atol=1e-12)


@pytest.fixture(scope="module")
def gbm(df):
    """A scikit-learn model (the workers can unpickle it)."""
    from sklearn.linear_model import LinearRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import PolynomialFeatures

    return make_pipeline(PolynomialFeatures(2), LinearRegression()).fit(df, model(df))


@pytest.fixture(scope="module")
def pd_on_threads(df, gbm):
    ddf = dd.from_pandas(df, npartitions=3)
    kw = dict(grid=GRID, n_trials=5, random_state=4, progress=False, method="brute")
    return {"mem": daskpd.partial_dependence(gbm, df, "x1", **kw),
            "threads3": daskpd.partial_dependence(gbm, ddf, "x1", **kw),
            "ale_mem": daskpd.ale(gbm, df, "x1", bins=8, n_trials=5, random_state=4, progress=False)}


def test_trials_independent_of_partitioning_and_scheduler(df, gbm, pd_on_threads, client):
    ddf = dd.from_pandas(df, npartitions=3)
    kw = dict(grid=GRID, n_trials=5, random_state=4, progress=False, method="brute")
    on_cluster = daskpd.partial_dependence(gbm, ddf, "x1", **kw)
    ale_cluster = daskpd.ale(gbm, ddf, "x1", bins=8, n_trials=5, random_state=4, progress=False)
    assert np.ptp(on_cluster.band()["std"]) > 0
    np.testing.assert_array_equal(on_cluster.trials_pd, pd_on_threads["threads3"].trials_pd)
    np.testing.assert_allclose(on_cluster.trials_pd, pd_on_threads["mem"].trials_pd, rtol=1e-12)
    np.testing.assert_allclose(ale_cluster.trials_pd, pd_on_threads["ale_mem"].trials_pd, rtol=1e-10, atol=1e-12)


def test_bad_trial_parameters(df):
    with pytest.raises(InvalidParameterError, match="n_trials"):
        daskpd.partial_dependence(model, df, "x1", n_trials=0)
    with pytest.raises(InvalidParameterError, match="band"):
        daskpd.ale(model, df, "x1", band=(0.5, 0.5))
    with pytest.raises(InvalidParameterError, match="recursion"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from sklearn.tree import DecisionTreeRegressor

            m = DecisionTreeRegressor(max_depth=3).fit(df, df.x1)
            daskpd.partial_dependence(m, df, "x1", method="recursion", n_trials=3)


def test_model_plots_draw_the_band(df):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.collections import PolyCollection

    r = daskpd.partial_dependence(model, df, "x1", grid=GRID, n_trials=5, progress=False)
    a = daskpd.ale(model, df, "x1", bins=8, n_trials=5, progress=False)
    ice = daskpd.ice(model, df, "x1", grid=GRID["x1"], n_lines=3, n_trials=5, progress=False)
    for res in (r, a, ice):
        ax = res.plot(show_trials=True)
        assert any(isinstance(h, PolyCollection) and "90% band (5 trials)" in h.get_label() for h in ax.collections)
        assert sum(line.get_label() == "trials" for line in ax.lines) == 1 and len(ax.lines) >= 6
    # the marginal plot: the bin means' interval as bars (its shading is the rows' spread)
    d = df.assign(y=model(df))
    ax = daskpd.marginal(d, "x1", target="y", bins=5, n_trials=5, progress=False).plot()
    assert "90% band (5 trials)" in [c.get_label() for c in ax.collections]
    plt.close("all")


def test_marginal_trials_are_weighted_means(df):
    d = df.assign(y=model(df))
    r = daskpd.marginal(d, "x1", target="y", bins=5, n_trials=4, random_state=9, progress=False)
    W = bootstrap_weights(d, ["x1", "y"], 4, 9)  # no model: the columns read (feature, target) are hashed
    for t in range(4):
        ref = daskpd.marginal(d, "x1", target="y", bins=5, sample_weight=W[:, t], progress=False)
        np.testing.assert_allclose(r.trials_pd[t], ref.y_mean, rtol=1e-12)
    assert "pd_hi" in r.to_frame() and r.band()["std"].shape == (5,)


def test_ice_centred_pd_trials(df):
    """ICE's centred PD: every trial is the weighted PD centred at the first grid value,
    the same numbers as partial_dependence's trials, centred."""
    r = daskpd.ice(model, df, "x1", grid=GRID["x1"], centered=True, n_lines=5, n_trials=4, random_state=6,
                   progress=False)
    p = daskpd.partial_dependence(model, df, "x1", grid=GRID, n_trials=4, random_state=6, progress=False)
    np.testing.assert_allclose(r.trials_pd, p.trials_pd - p.trials_pd[:, :1], rtol=1e-12, atol=1e-12)
    assert np.all(r.band()["std"][0] == 0) and "pd_lo" in r.to_frame()


# ---------------------------------------------------------------------------------
# 2-D ALE and PD variance: bands from the same pass


def test_ale2d_trials_are_weighted_surfaces(df):
    """2-D ALE trial t is the 2-D ALE with trial t's weights (the edges fixed); the band
    is per grid point; the all-rows surface is today's."""
    pair = ("x1", "x2")
    r = daskpd.ale(model, df, pair, bins=4, n_trials=4, random_state=2, progress=False)
    W = bootstrap_weights(df, ["x1", "x2"], 4, 2)
    for t in range(4):
        ref = daskpd.ale(model, df, pair, bins=4, sample_weight=W[:, t], progress=False)
        np.testing.assert_allclose(r.trials_pd[t], ref.ale, rtol=1e-10, atol=1e-12)
    one = daskpd.ale(model, df, pair, bins=4, progress=False)
    np.testing.assert_array_equal(r.ale, one.ale)
    b = r.band()
    assert r.trials_pd.shape == (4, *r.ale.shape) and b["std"].shape == r.ale.shape
    np.testing.assert_allclose(b["std"], np.std(r.trials_pd, axis=0, ddof=1))
    f = r.to_frame()
    np.testing.assert_allclose(f["pd_hi"], (r.ale + student.ppf(0.95, 3) * b["std"]).reshape(-1))
    assert one.trials_pd is None and one.band() is None and "pd_std" not in one.to_frame()
    assert "90% band over 4 trials" in r.summary() and r.params["n_trials"] == 4


GRID_PV = {"x1": np.linspace(0.0, 1.0, 5), "x2": np.linspace(0.0, 1.0, 5)}


def test_pd_variance_trials_on_known_truth(df):
    """The model's PD in x1 is v^2 + 3 v m + const with m the (weighted) mean of x2, so
    trial t's importance of x1 is exactly std(g^2 + 3 g m_t) with m_t the mean of x2
    under trial t's weights; ``importance_std`` / ``_lo`` / ``_hi`` are the trials' std
    and the band centred on the values.  Without trials the table has no band columns."""
    kw = dict(grid=GRID_PV, progress=False)
    r = daskpd.pd_variance(model, df, ["x1", "x2"], n_trials=6, random_state=5, **kw)
    W = bootstrap_weights(df, ["x1", "x2"], 6, 5)
    g = GRID_PV["x1"]
    m = (W * df["x2"].to_numpy()[:, None]).sum(axis=0) / W.sum(axis=0)
    exact = np.array([np.std(g ** 2 + 3 * g * mt, ddof=1) for mt in m])
    np.testing.assert_allclose(r.trials_values[:, 0], exact, rtol=1e-12)
    for t in (0, 5):
        ref = daskpd.pd_variance(model, df, ["x1", "x2"], sample_weight=W[:, t], **kw)
        np.testing.assert_allclose(r.trials_values[t], ref.values, rtol=1e-12)
    one = daskpd.pd_variance(model, df, ["x1", "x2"], **kw)
    np.testing.assert_allclose(r.values, one.values, rtol=1e-12)  # the same PDs, summed per weight set
    f = r.to_frame().set_index("feature")
    np.testing.assert_allclose(f.loc["x1", "importance_std"], np.std(exact, ddof=1), rtol=1e-9)
    np.testing.assert_allclose(f.loc["x1", "importance_lo"],
                               r.values[0] + student.ppf(0.05, 5) * np.std(exact, ddof=1), rtol=1e-9)
    assert f.loc["x1", "importance_std"] > 0 and r.params["n_trials"] == 6
    assert "importance_std" not in one.to_frame() and one.trials_values is None


def test_pd_variance_interaction_trials(df):
    """With the model's two inputs the 2-way PD is the model itself on the grid, the
    same for every row weighting: every trial's interaction equals the all-rows one."""
    r = daskpd.pd_variance(model, df, [("x1", "x2")], measure="interaction", grid=GRID_PV, n_trials=4,
                           random_state=1, progress=False)
    assert r.trials_values.shape == (4, 1)
    np.testing.assert_allclose(r.trials_values[:, 0], r.values[0], rtol=1e-12)
    f = r.to_frame()
    assert {"interaction_std", "interaction_lo", "interaction_hi"} <= set(f.columns)
    np.testing.assert_allclose(f["interaction_std"], 0.0, atol=1e-12)


def test_ale2d_and_pd_variance_trials_on_the_cluster(df, gbm, client):
    """3 partitions on the real cluster: the same trials as in memory (up to the
    reassociation of the float sums)."""
    ddf = dd.from_pandas(df, npartitions=3)
    kw = dict(n_trials=4, random_state=3, progress=False)
    a_mem = daskpd.ale(gbm, df, ("x1", "x2"), bins=4, **kw)
    a_cl = daskpd.ale(gbm, ddf, ("x1", "x2"), bins=4, **kw)
    np.testing.assert_allclose(a_cl.trials_pd, a_mem.trials_pd, rtol=1e-10, atol=1e-12)
    v_mem = daskpd.pd_variance(gbm, df, ["x1", "x2"], grid=GRID_PV, **kw)
    v_cl = daskpd.pd_variance(gbm, ddf, ["x1", "x2"], grid=GRID_PV, **kw)
    np.testing.assert_allclose(v_cl.trials_values, v_mem.trials_values, rtol=1e-12)
    assert np.all(v_cl.band()["std"] > 0)
