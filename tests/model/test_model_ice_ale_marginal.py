"""ICE (equal to scikit-learn, sampled lines, written from the workers), ALE (ground truth,
ALEPlot's algorithm, categorical ordering, weights), marginal plots, the comparison figure."""
from __future__ import annotations

import json

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from sklearn.ensemble import GradientBoostingClassifier, HistGradientBoostingRegressor
from sklearn.inspection import partial_dependence as sk_pd
from sklearn.linear_model import LinearRegression, LogisticRegression

import daskpd
from daskpd import DataError
from daskpd.model._compare import align_curves, compare

TOL = 1e-9


pytestmark = pytest.mark.usefixtures("one_openmp_thread")


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    n = 2_000
    X = pd.DataFrame(rng.uniform(size=(n, 3)), columns=["a", "b", "c"])
    y = 2 * X.a + np.sin(5 * X.b) + X.a * X.c + rng.normal(0, 0.1, n)
    return X, y


@pytest.fixture(scope="module")
def hgb(data):
    X, y = data
    return HistGradientBoostingRegressor(max_iter=20, random_state=0).fit(X, y)


@pytest.fixture(scope="module")
def gbc(data):
    X, y = data
    return GradientBoostingClassifier(n_estimators=10, random_state=0).fit(X, (y > np.median(y)).astype(int))


# ------------------------------------------------------------------ ICE


@pytest.mark.parametrize("engine", ["auto", "predict"])
def test_ice_equals_sklearn_individual_regression_and_classification(data, hgb, gbc, engine):
    X, _ = data
    for m in (hgb, gbc):
        sk = sk_pd(m, X, ["b"], method="brute", grid_resolution=15, kind="both")
        res = daskpd.ice(m, X, "b", grid_resolution=15, n_lines=None, engine=engine)
        np.testing.assert_array_equal(res.grid, sk["grid_values"][0])
        np.testing.assert_allclose(res.lines, sk["individual"][0], atol=TOL)
        np.testing.assert_allclose(res.pd, sk["average"][0], atol=TOL)
        np.testing.assert_array_equal(res.line_index.astype(int), np.arange(len(X)))
        np.testing.assert_allclose(res.line_x.astype(float), X.b.to_numpy())
        c = daskpd.ice(m, X, "b", grid_resolution=15, n_lines=None, centered=True, engine=engine)
        ind = sk["individual"][0]
        np.testing.assert_allclose(c.lines, ind - ind[:, :1], atol=TOL)
        np.testing.assert_allclose(c.pd, sk["average"][0] - sk["average"][0][0], atol=TOL)


def test_ice_line_sample_is_seeded_and_independent_of_partitioning(data, hgb):
    X, _ = data
    a = daskpd.ice(hgb, X, "a", grid_resolution=10, n_lines=25, random_state=4)
    b = daskpd.ice(hgb, dd.from_pandas(X, npartitions=7), "a", grid_resolution=10, n_lines=25, random_state=4)
    c = daskpd.ice(hgb, X, "a", grid_resolution=10, n_lines=25, random_state=5)
    assert len(a.lines) == 25
    np.testing.assert_array_equal(a.line_index, b.line_index)
    np.testing.assert_allclose(a.lines, b.lines, atol=TOL)
    assert set(a.line_index) != set(c.line_index)
    ind = sk_pd(hgb, X, ["a"], method="brute", grid_resolution=10, kind="individual")["individual"][0]
    np.testing.assert_allclose(a.lines, ind[a.line_index.astype(int)], atol=TOL)
    np.testing.assert_allclose(a.pd, ind.mean(axis=0), atol=TOL)  # the PD uses every row
    f = a.lines_frame()  # the one long ICE table: row id (partition, row), grid value, prediction
    assert len(f) == 25 * 10 and list(f.columns) == ["feature", "partition", "row", "x", "ice"]
    np.testing.assert_allclose(f.ice.to_numpy().reshape(25, 10), a.lines)
    np.testing.assert_allclose(f.x.to_numpy()[:10], a.grid)
    assert (f.partition == 0).all()  # one partition in memory: the row is the row's position
    np.testing.assert_array_equal(f.row.to_numpy()[::10], a.line_index.astype(int))
    fb = b.lines_frame()  # 7 partitions: the ids differ, each names its row there
    starts = np.r_[0, np.cumsum([len(p) for p in dd.from_pandas(X, npartitions=7).partitions])]
    np.testing.assert_array_equal(starts[fb.partition.to_numpy()[::10]] + fb.row.to_numpy()[::10],
                                  a.line_index.astype(int))
    head = a.to_frame()  # the PD over all rows, in the shared curve head
    assert list(head.columns) == ["feature", "kind", "x", "pd", "count", "supported", "n_rows"]
    np.testing.assert_allclose(head.pd, a.pd)
    assert (head.n_rows == a.n_rows).all() and head.supported.all()


def test_ice_full_table_written_by_the_workers(tmp_path, data, hgb):
    X, _ = data
    Xk = X.assign(key=np.arange(len(X)) * 10)
    out = tmp_path / "ice"
    res = daskpd.ice(hgb, dd.from_pandas(Xk, npartitions=3), "c", grid_resolution=12, n_lines=5, path=out,
                     id_columns=["key"])
    files = sorted(p.name for p in out.iterdir())
    assert files == ["_daskpd_ice.json", "part.00000.parquet", "part.00001.parquet", "part.00002.parquet"]
    t = pd.read_parquet(out).sort_values(["partition", "row", "x"]).reset_index(drop=True)
    # long: one row per (data row, grid value), the layout of lines_frame() and of a job's ice.parquet
    assert len(t) == len(X) * 12 and list(t.columns) == ["feature", "partition", "row", "key", "x", "ice"]
    assert (t.feature == "c").all()
    np.testing.assert_array_equal(t.key.to_numpy()[::12], Xk.key)
    np.testing.assert_allclose(t.x.to_numpy().reshape(-1, 12), np.tile(res.grid, (len(X), 1)))
    ind = sk_pd(hgb, X, ["c"], method="brute", grid_resolution=12, kind="individual")["individual"][0]
    np.testing.assert_allclose(t.ice.to_numpy().reshape(-1, 12), ind, atol=TOL)
    lines = res.lines_frame()  # the sampled lines are rows of the table, by their ids
    both = lines.merge(t, on=["feature", "partition", "row", "x"], suffixes=("", "_table"))
    assert len(both) == len(lines) == 5 * 12
    np.testing.assert_array_equal(both.ice, both.ice_table)
    meta = json.loads((out / "_daskpd_ice.json").read_text())
    np.testing.assert_allclose(meta["grid"], res.grid)
    assert meta["rows_written"] == len(X) and meta["columns"] == list(t.columns)
    with pytest.raises(DataError, match="already exists"):
        daskpd.ice(hgb, X, "c", grid_resolution=12, path=out)
    again = daskpd.ice(hgb, X, "c", grid_resolution=12, path=out, overwrite=True)
    assert again.path == str(out)


def test_ice_plot_and_bad_input(tmp_path, data, hgb):
    X, _ = data
    res = daskpd.ice(hgb, X, "a", grid_resolution=10, n_lines=20)
    ax = res.plot()
    (lc,) = ax.collections  # one collection of the 20 ICE lines, and the PD on top
    assert len(lc.get_segments()) == 20
    np.testing.assert_allclose(ax.get_lines()[0].get_ydata(), res.pd)
    for kwargs, match in ((dict(n_lines=0), "n_lines must be"), (dict(centered="yes"), "centered must be"),
                          (dict(id_columns=["a"]), "only used with path"), (dict(feature=("a", "b")), "feature must"),
                          (dict(random_state=-1), "random_state must")):
        kw = dict(feature="a")
        kw.update(kwargs)
        with pytest.raises(DataError, match=match):
            daskpd.ice(hgb, X, **kw)


# ------------------------------------------------------------------ ALE


def aleplot_numeric(X, f, feature, K):
    """ALEPlot's numeric algorithm, written directly (R quantile type 1)."""
    x = X[feature].to_numpy()
    xs = np.sort(x)
    n = len(x)
    z = np.unique(np.r_[xs[0], xs[-(-n * np.arange(1, K + 1) // K) - 1]])
    k = np.clip(np.searchsorted(z, x, "left") - 1, 0, len(z) - 2)
    lo, hi = X.copy(), X.copy()
    lo[feature], hi[feature] = z[k], z[k + 1]
    d = f(hi) - f(lo)
    Kk = len(z) - 1
    b = np.bincount(k, minlength=Kk)
    fJ = np.r_[0, np.cumsum(np.bincount(k, weights=d, minlength=Kk) / b)]
    return z, fJ - np.sum((fJ[:-1] + fJ[1:]) / 2 * b) / b.sum()


def additive(df):
    lv = {"lo": 0.0, "mid": 1.0, "hi": 3.0}
    return (df["a"] ** 2 + 2 * df["b"]).to_numpy() + df["g"].astype(str).map(lv).to_numpy().astype(float)


@pytest.fixture(scope="module")
def add_data():
    rng = np.random.default_rng(1)
    n = 6_000
    a = rng.uniform(-1, 1, n)
    return pd.DataFrame({"a": a, "b": rng.uniform(0, 1, n), "g": rng.choice(["lo", "mid", "hi"], n)})


def test_ale_recovers_the_centred_additive_components(add_data):
    res = daskpd.ale(additive, add_data, ["a", "b", "g"], bins=25)
    ra = res["a"]
    z = ra.x
    # the effect at the edges is z^2 up to a constant; the constant makes the row mean 0
    np.testing.assert_allclose(ra.ale - ra.ale[0], z ** 2 - z[0] ** 2, atol=1e-12)
    mids = (ra.ale[:-1] + ra.ale[1:]) / 2
    assert np.sum(mids * ra.count[1:]) == pytest.approx(0.0, abs=1e-10)
    rb = res["b"]
    np.testing.assert_allclose(np.diff(rb.ale), 2 * np.diff(rb.x), atol=1e-12)
    rg = res["g"]
    eff = dict(zip(rg.x, rg.ale))
    assert eff["mid"] - eff["lo"] == pytest.approx(1.0) and eff["hi"] - eff["lo"] == pytest.approx(3.0)
    p = rg.count / rg.count.sum()
    assert np.sum(rg.ale * p) == pytest.approx(0.0, abs=1e-12)


def test_ale_equals_aleplot_algorithm_on_a_model_and_across_partitions(data, hgb):
    X, _ = data
    z, fj = aleplot_numeric(X, hgb.predict, "b", 20)
    res = daskpd.ale(hgb, dd.from_pandas(X, npartitions=4), "b", bins=20)
    np.testing.assert_array_equal(res.x, z)
    np.testing.assert_allclose(res.ale, fj, atol=1e-12)
    assert res.n_used == len(X) and res.n_missing == 0


def test_ale_discrete_feature_keeps_its_values_and_weights_equal_duplication(add_data):
    df = add_data.assign(a=np.round(add_data.a * 3) / 3)  # 7 values
    res = daskpd.ale(additive, df, "a", bins=40)
    np.testing.assert_allclose(res.x, np.unique(df.a))
    w = np.random.default_rng(2).integers(1, 4, len(df))
    weighted = daskpd.ale(additive, df.assign(w=w.astype(float)), ["a", "g"], sample_weight="w")
    dup = daskpd.ale(additive, df.loc[np.repeat(df.index, w)].reset_index(drop=True), ["a", "g"])
    # the level order (MDS on unweighted counts) may differ; the effects per level may not
    wg, dg = dict(zip(weighted["g"].x, weighted["g"].ale)), dict(zip(dup["g"].x, dup["g"].ale))
    assert wg.keys() == dg.keys()
    np.testing.assert_allclose([wg[k] for k in wg], [dg[k] for k in wg], atol=1e-12)
    # edges are unweighted quantiles, so compare on a feature whose edges are its values
    np.testing.assert_allclose(weighted["a"].ale, dup["a"].ale, atol=1e-12)


def test_categorical_ale_orders_levels_by_similarity(add_data):
    rng = np.random.default_rng(3)
    n = 4_000
    lv = np.array(["q", "w", "e", "r", "t"])  # true order q<w<e<r<t via the correlated column
    code = rng.integers(0, 5, n)
    df = pd.DataFrame({"g": lv[code], "x": code + rng.normal(0, 1.5, n)})  # overlapping: KS grows with distance
    f = lambda d: d["x"].to_numpy() + (d["g"] == "e").to_numpy() * 2.0  # noqa: E731
    res = daskpd.ale(f, df, "g")
    order = list(res.x)
    assert order in (list(lv), list(lv[::-1]))
    assert res.order_source == "mds"
    given = daskpd.ale(f, df, "g", order={"g": ["t", "e", "q", "w", "r"]})
    assert list(given.x) == ["t", "e", "q", "w", "r"] and given.order_source == "given"
    eff = dict(zip(given.x, given.ale))
    assert eff["e"] - eff["q"] == pytest.approx(2.0)
    cat = df.assign(g=pd.Categorical(df.g, categories=["r", "q", "t", "w", "e"], ordered=True))
    assert list(daskpd.ale(f, cat, "g").x) == ["r", "q", "t", "w", "e"]
    with pytest.raises(DataError, match="lacks observed level"):
        daskpd.ale(f, df, "g", order={"g": ["q", "w"]})


def test_ale_classification_probability(data, gbc):
    X, _ = data
    z, fj = aleplot_numeric(X, lambda d: gbc.predict_proba(d)[:, 1], "a", 10)
    res = daskpd.ale(gbc, X, "a", bins=10)
    np.testing.assert_allclose(res.ale, fj, atol=1e-12)
    assert res.response == "predict_proba"


def test_ale_plots_and_bad_input(tmp_path, add_data):
    res = daskpd.ale(additive, add_data, ["a", "g"])
    for name, r in res.items():
        ax = r.plot()
        np.testing.assert_allclose(ax.get_lines()[0].get_ydata(), r.ale)
        assert ax.get_xlabel() == name and ax.get_ylabel().startswith("ALE")
    fa = res["a"].to_frame()
    assert list(fa.columns) == ["feature", "kind", "x", "pd", "count", "supported", "n_rows", "weight", "delta",
                                "delta_std"]
    np.testing.assert_array_equal(fa.pd, res["a"].ale)
    fg = res["g"].to_frame()
    assert "category" in fg and "x" not in fg and list(fg.category) == list(res["g"].x)
    with pytest.raises(DataError, match="bins must be"):
        daskpd.ale(additive, add_data, "a", bins=0)
    with pytest.raises(DataError, match="applies to categorical"):
        daskpd.ale(additive, add_data, "a", order={"a": [1, 2]})
    with pytest.raises(DataError, match="is constant"):
        daskpd.ale(additive, add_data.assign(a=1.0), "a")


# ------------------------------------------------------------------ marginal


def test_marginal_means_and_spread_per_quantile_bin(data, hgb):
    X, y = data
    df = X.assign(y=y)
    res = daskpd.marginal(dd.from_pandas(df, npartitions=3), "a", target="y", model=hgb, bins=10)
    x = df.a.to_numpy()
    n = len(x)
    xs = np.sort(x)
    z = np.unique(np.r_[xs[0], xs[-(-n * np.arange(1, 11) // 10) - 1]])
    k = np.clip(np.searchsorted(z, x, "left") - 1, 0, len(z) - 2)
    g = df.assign(k=k, p=hgb.predict(X)).groupby("k")
    np.testing.assert_allclose(res.y_mean, g.y.mean(), atol=1e-12)
    np.testing.assert_allclose(res.y_std, g.y.std(ddof=0), atol=1e-12)
    np.testing.assert_allclose(res.pred_mean, g.p.mean(), atol=1e-12)
    np.testing.assert_allclose(res.x, g.a.mean(), atol=1e-12)
    np.testing.assert_array_equal(res.count, g.size())
    np.testing.assert_array_equal(res.lo, z[:-1])


def test_marginal_uniform_bins_categorical_weights_and_bad_y():
    rng = np.random.default_rng(5)
    n = 3_000
    df = pd.DataFrame({"x": rng.uniform(0, 10, n), "c": rng.choice(["u", "v"], n)})
    df["y"] = df.x + (df.c == "v") * 5 + rng.normal(0, 1, n)
    df.loc[:9, "y"] = np.nan
    res = daskpd.marginal(df, ["x", "c"], target="y", binning="uniform", bins=5)
    assert res["x"].n_bad_y == 10 and res["x"].count.sum() == n - 10
    np.testing.assert_allclose(res["x"].lo, np.linspace(df.x.min(), df.x.max(), 6)[:-1])
    assert list(res["c"].x) == ["u", "v"]
    assert res["c"].y_mean[1] - res["c"].y_mean[0] == pytest.approx(5, abs=0.3)
    w = rng.integers(1, 3, n)
    weighted = daskpd.marginal(df.assign(w=w.astype(float)), "c", target="y", sample_weight="w")
    dup = daskpd.marginal(df.loc[np.repeat(df.index, w)], "c", target="y")
    np.testing.assert_allclose(weighted.y_mean, dup.y_mean, atol=1e-12)
    np.testing.assert_allclose(weighted.y_std, dup.y_std, atol=1e-12)


def test_marginal_plot_and_bad_input(tmp_path, data, hgb):
    X, y = data
    res = daskpd.marginal(X.assign(y=y), "a", target="y", model=hgb)
    ax = res.plot()
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["mean y", "mean predicted y"]
    np.testing.assert_allclose(ax.get_lines()[0].get_ydata(), res.y_mean)
    with pytest.raises(DataError, match="needs target="):
        daskpd.marginal(X, "a")
    with pytest.raises(DataError, match="binning must be"):
        daskpd.marginal(X.assign(y=y), "a", target="y", binning="log")
    with pytest.raises(DataError, match="only with model="):
        daskpd.marginal(X.assign(y=y), "a", target="y", response="predict")


# ------------------------------------------------------------------ the comparison figure


def test_comparison_figure_overlays_four_methods(tmp_path):
    rng = np.random.default_rng(6)
    n = 4_000
    df = pd.DataFrame({"x1": rng.uniform(0, 3, n), "x2": rng.uniform(0, 3, n)})
    df["y"] = df.x1 ** 2 + df.x2 + rng.normal(0, 0.05, n)
    m = LinearRegression().fit(pd.DataFrame({"x1": df.x1, "x2": df.x2}), df.y)
    res = compare(m, df, "x1", target="y", columns=["x1", "x2"], stratpd_kwargs={"min_samples_leaf": 10})
    assert list(res.curves) == ["StratPD", "FPD", "ALE", "marginal (y)", "marginal (prediction)"]
    al = res.aligned("left")
    x0 = max(v[0][0] for v in al.values())
    for name, (x, y) in al.items():
        assert np.interp(x0, x, y) == pytest.approx(0.0, abs=1e-9), name
    # StratPD and the marginal of y see the true x1^2 (slope ~ 2*1.5 over the middle); FPD/ALE the linear fit
    sx, sy = al["StratPD"]
    assert np.interp(2.5, sx, sy) - np.interp(0.5, sx, sy) == pytest.approx(6.0, rel=0.15)
    ax = res.plot()
    assert [t.get_text() for t in ax.get_legend().get_texts()] == list(res.curves)
    assert len({ln.get_color() for ln in ax.get_lines()[:len(res.curves)]}) == len(res.curves)
    f = res.to_frame()
    assert set(f.method) == set(res.curves)
    pre = compare(m, df, "x1", columns=["x1", "x2"], stratpd=(sx, sy), curves={"truth": (sx, sx ** 2)})
    assert "truth" in pre.curves and "StratPD" in pre.curves and "marginal (y)" not in pre.curves
    with pytest.raises(DataError, match="needs target="):
        compare(m, df, "x1", columns=["x1", "x2"], stratpd=True)
    with pytest.raises(DataError, match="align must be"):
        align_curves(res.curves, "top")


def test_logistic_model_curves_are_probabilities(data):
    X, y = data
    m = LogisticRegression().fit(X, (y > np.median(y)).astype(int))
    pdr = daskpd.partial_dependence(m, X, "a", grid_resolution=5)
    mr = daskpd.marginal(X, "a", model=m, bins=5)
    assert np.all((pdr.average > 0) & (pdr.average < 1)) and np.all((mr.pred_mean > 0) & (mr.pred_mean < 1))
    assert mr.y_mean is None


def test_every_result_writes_parquet_with_its_metadata(tmp_path, add_data):
    import pyarrow.parquet as pq

    f = additive
    results = {
        "pd2": daskpd.partial_dependence(f, add_data, ("a", "g"), grid_resolution=4),
        "ice": daskpd.ice(f, add_data, "g", n_lines=3),
        "ale": daskpd.ale(f, add_data, "g"),
        "marginal": daskpd.marginal(add_data, "g", model=f),
        "variance": daskpd.pd_variance(f, add_data, ["a", "g"]),
    }
    for name, r in results.items():
        out = r.to_parquet(tmp_path / f"{name}.parquet")
        back = pd.read_parquet(out)
        assert len(back) == len(r.to_frame()), name
        meta = json.loads(pq.read_schema(out).metadata[b"daskpd"])
        assert meta["method"] in ("partial_dependence", "ice", "ale", "marginal", "pd_variance"), name
    f2 = results["pd2"].to_frame()
    assert f2.shape == (4 * 3, 10)
    assert list(f2.columns) == ["feature", "kind", "x", "pd", "count", "supported", "n_rows", "feature_2", "kind_2",
                                "category_2"]
    np.testing.assert_array_equal(f2.pd, results["pd2"].average.reshape(-1))


def test_comparison_bands_and_pd_variance():
    """n_trials > 1: FPD, ALE and the marginal plot carry their bands from the one pass;
    the feature's PD variance is pd_variance's (band columns included), and measures()
    gives every curve's spread with the spread of its trials."""
    rng = np.random.default_rng(8)
    n = 1_500
    df = pd.DataFrame({"x1": rng.uniform(0, 3, n), "x2": rng.uniform(0, 3, n)})
    df["y"] = df.x1 * df.x2 + rng.normal(0, 0.1, n)
    m = LinearRegression().fit(df[["x1", "x2"]], df.y)
    kw = {"columns": ["x1", "x2"], "grid_resolution": 9, "progress": False}
    plain = compare(m, df, "x1", target="y", stratpd=False, **kw)
    assert list(plain.measures().columns) == ["method", "pd_variance"]
    res = compare(m, df, "x1", target="y", stratpd=False, n_trials=12, random_state=3, **kw)
    np.testing.assert_allclose(res.curves["FPD"][1], plain.curves["FPD"][1], rtol=1e-12)
    for name in ("FPD", "ALE", "marginal"):
        assert res.results[name].trials_pd.shape[0] == 12, name
    want = daskpd.pd_variance(m, df, ["x1"], n_trials=12, random_state=3, **kw).to_frame()
    got = res.results["pd_variance"].to_frame()
    assert {"importance_std", "importance_lo", "importance_hi"} <= set(got.columns)
    pd.testing.assert_frame_equal(got, want, rtol=1e-12, atol=1e-12)
    meas = res.measures().set_index("method")
    assert list(meas.columns) == ["pd_variance", "pd_variance_std", "pd_variance_lo", "pd_variance_hi"]
    assert meas.loc["FPD", "pd_variance"] == pytest.approx(got["importance"].iloc[0], rel=1e-12)
    assert meas.loc["FPD", "pd_variance_std"] == pytest.approx(got["importance_std"].iloc[0], rel=1e-9)
    assert np.isfinite(meas.loc[["ALE", "marginal (y)"], "pd_variance_std"]).all()
    assert np.isnan(meas.loc["marginal (prediction)", "pd_variance_std"])  # its trials are those of y's means
    lo, hi = meas.loc["FPD", ["pd_variance_lo", "pd_variance_hi"]]
    assert lo <= meas.loc["FPD", "pd_variance"] <= hi
