"""2-D (second-order) ALE of two numeric features: against an in-memory numpy reference
of Apley & Zhu's algorithm, against PyALE 1.2.0 (when installed), a known interaction
recovered exactly, in-memory vs dask (threads and a LocalCluster) bit for bit, the
shared result format, the plot (by its artists) and bad input."""
from __future__ import annotations

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from sklearn.ensemble import GradientBoostingRegressor
from sklearn.linear_model import LinearRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer

import daskpd
from daskpd._errors import InvalidParameterError
from daskpd.results import CURVE_HEAD


# ------------------------------------------------------------------ the reference


def ale2d_reference(X: pd.DataFrame, predict, f0: str, f1: str, K: int):
    """Apley & Zhu's second-order ALE, written directly in numpy (ALEPlot / PyALE
    convention): type-1 quantile edges, four-corner second differences averaged per
    cell, empty cells take the nearest filled cell's mean (centres scaled by range),
    accumulated over both axes, first-order effects and the mean removed."""
    n = len(X)

    def edges(x):
        xs = np.sort(x)
        return np.unique(np.r_[xs[0], xs[-(-n * np.arange(1, K + 1) // K) - 1]])

    a, b = X[f0].to_numpy(float), X[f1].to_numpy(float)
    z0, z1 = edges(a), edges(b)
    K0, K1 = len(z0) - 1, len(z1) - 1
    i = np.clip(np.searchsorted(z0, a, "left") - 1, 0, K0 - 1)
    j = np.clip(np.searchsorted(z1, b, "left") - 1, 0, K1 - 1)
    corner = {}
    for di in (0, 1):
        for dj in (0, 1):
            Xc = X.copy()
            Xc[f0], Xc[f1] = z0[i + di], z1[j + dj]
            corner[di, dj] = np.asarray(predict(Xc), dtype=float)
    d = (corner[1, 1] - corner[1, 0]) - (corner[0, 1] - corner[0, 0])
    N = np.zeros((K0, K1))
    S = np.zeros((K0, K1))
    np.add.at(N, (i, j), 1)
    np.add.at(S, (i, j), d)
    D = np.full((K0, K1), np.nan)
    D[N > 0] = S[N > 0] / N[N > 0]
    c0 = (z0[:-1] + z0[1:]) / 2 / (z0[-1] - z0[0])
    c1 = (z1[:-1] + z1[1:]) / 2 / (z1[-1] - z1[0])
    filled = [(p, q) for p in range(K0) for q in range(K1) if N[p, q] > 0]
    for p in range(K0):
        for q in range(K1):
            if N[p, q] == 0:
                dist = [(c0[p] - c0[u]) ** 2 + (c1[q] - c1[v]) ** 2 for u, v in filled]
                D[p, q] = D[filled[int(np.argmin(dist))]]
    F = np.zeros((K0 + 1, K1 + 1))
    for p in range(1, K0 + 1):
        for q in range(1, K1 + 1):
            F[p, q] = D[:p, :q].sum()
    fJ0 = np.zeros(K0 + 1)
    for p in range(1, K0 + 1):
        loc = sum(N[p - 1, q - 1] * ((F[p, q] - F[p - 1, q]) + (F[p, q - 1] - F[p - 1, q - 1])) / 2
                  for q in range(1, K1 + 1))
        fJ0[p] = fJ0[p - 1] + loc / N[p - 1].sum()
    fJ1 = np.zeros(K1 + 1)
    for q in range(1, K1 + 1):
        loc = sum(N[p - 1, q - 1] * ((F[p, q] - F[p, q - 1]) + (F[p - 1, q] - F[p - 1, q - 1])) / 2
                  for p in range(1, K0 + 1))
        fJ1[q] = fJ1[q - 1] + loc / N[:, q - 1].sum()
    G = F - fJ0[:, None] - fJ1[None, :]
    mean = sum(N[p - 1, q - 1] * (G[p, q] + G[p - 1, q] + G[p, q - 1] + G[p - 1, q - 1]) / 4
               for p in range(1, K0 + 1) for q in range(1, K1 + 1)) / n
    return z0, z1, G - mean, N


@pytest.fixture(scope="module")
def inter():
    """y = x1 * x2 + x3 + noise; x2 normal, so the quantile grid has empty cells at 40 bins."""
    rng = np.random.default_rng(0)
    n = 3_000
    X = pd.DataFrame({"x1": rng.uniform(-1, 1, n), "x2": rng.normal(0, 1, n), "x3": rng.uniform(0, 1, n)})
    y = X.x1 * X.x2 + X.x3 + rng.normal(0, 0.1, n)
    gbr = GradientBoostingRegressor(n_estimators=60, max_depth=3, random_state=0).fit(X, y)
    return X, y, gbr


def product_pipeline(X, y):
    """A LinearRegression on [x1, x2, x3, x1*x2] (the product built inside a Pipeline)."""
    add = FunctionTransformer(lambda d: np.c_[d.to_numpy(float), d["x1"].to_numpy() * d["x2"].to_numpy()])
    return make_pipeline(add, LinearRegression()).fit(X, y)


# ------------------------------------------------------------------ correctness


@pytest.mark.parametrize("bins", [8, 40])
def test_equals_the_numpy_reference(inter, bins):
    X, _, gbr = inter
    res = daskpd.ale(gbr, X, ("x1", "x2"), bins=bins)
    z0, z1, ref, N = ale2d_reference(X, gbr.predict, "x1", "x2", bins)
    np.testing.assert_array_equal(res.x, z0)
    np.testing.assert_array_equal(res.x2, z1)
    np.testing.assert_allclose(res.ale, ref, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(res.count[1:, 1:], N)
    assert res.imputed[1:, 1:].sum() == (N == 0).sum()
    if bins == 40:
        assert (N == 0).sum() > 100  # the imputation is exercised
    # the surface has mean zero over the rows (each cell at the mean of its corners)
    Z = res.ale
    corners = (Z[:-1, :-1] + Z[1:, 1:] + Z[:-1, 1:] + Z[1:, :-1]) / 4
    assert abs((N * corners).sum() / N.sum()) < 1e-12


def test_known_interaction_recovered_exactly(inter):
    """f = b x1 x2 + additive: every cell's second difference of the surface is
    b (z1_i - z1_{i-1}) (z2_j - z2_{j-1}), whatever the first-order removal adds."""
    X, y, _ = inter
    pipe = product_pipeline(X, y)
    bcoef = pipe[-1].coef_[3]
    assert abs(bcoef - 1) < 0.05
    res = daskpd.ale(pipe, X, ("x1", "x2"), bins=12)
    Z = res.ale
    second = Z[1:, 1:] - Z[1:, :-1] - Z[:-1, 1:] + Z[:-1, :-1]
    np.testing.assert_allclose(second, bcoef * np.outer(np.diff(res.x), np.diff(res.x2)), rtol=1e-9, atol=1e-12)
    assert np.isfinite(Z).all() and res.imputed.sum() == 0




def _pyale():
    mod = pytest.importorskip("PyALE._src.ALE_2D", reason="PyALE (test extra) is not installed")
    return mod.aleplot_2D_continuous


@pytest.mark.parametrize("model", ["gbr", "pipeline"])
@pytest.mark.parametrize("bins", [10, 40])
def test_equals_pyale(inter, model, bins):
    aleplot_2D_continuous = _pyale()
    X, y, gbr = inter
    m = gbr if model == "gbr" else product_pipeline(X, y)
    res = daskpd.ale(m, X, ("x1", "x2"), bins=bins)
    grid = aleplot_2D_continuous(X, m, ["x1", "x2"], grid_size=bins)
    np.testing.assert_array_equal(res.x, grid.index.to_numpy())
    np.testing.assert_array_equal(res.x2, grid.columns.to_numpy())
    np.testing.assert_allclose(res.ale, grid.to_numpy(), rtol=0, atol=1e-10)
    pd.testing.assert_frame_equal(res.grid_frame(), grid, check_exact=False, atol=1e-10, check_names=True)


def test_uneven_grids_symmetric_and_pyale_where_its_sizes_align(inter):
    """A discrete second feature: fewer edges than the first.  PyALE agrees in this order;
    swapped, PyALE's per-column sizes are indexed by the first feature's edge count (a
    PyALE 1.2.0 bug) -- daskpd's surface is the transpose, as the definition is symmetric."""
    X, y, _ = inter
    rng = np.random.default_rng(3)
    Xd = X.assign(x2=rng.integers(0, 5, len(X)).astype(float))
    m = GradientBoostingRegressor(n_estimators=40, max_depth=3, random_state=0).fit(Xd, Xd.x1 * Xd.x2 + y * 0)
    a = daskpd.ale(m, Xd, ("x1", "x2"), bins=10)
    b = daskpd.ale(m, Xd, ("x2", "x1"), bins=10)
    assert a.ale.shape == (11, 5)
    np.testing.assert_allclose(b.ale, a.ale.T, rtol=0, atol=1e-12)
    _, _, ref, _ = ale2d_reference(Xd, m.predict, "x2", "x1", 10)
    np.testing.assert_allclose(b.ale, ref, rtol=0, atol=1e-12)
    try:
        from PyALE._src.ALE_2D import aleplot_2D_continuous
    except ImportError:
        return  # the reference comparison above is the check without PyALE
    grid = aleplot_2D_continuous(Xd, m, ["x1", "x2"], grid_size=10)
    np.testing.assert_allclose(a.ale, grid.to_numpy(), rtol=0, atol=1e-10)


def test_integer_weights_equal_duplicated_rows():
    rng = np.random.default_rng(5)
    n = 800
    X = pd.DataFrame({"a": rng.integers(0, 6, n).astype(float), "b": rng.integers(0, 4, n).astype(float),
                      "c": rng.uniform(0, 1, n)})
    y = X.a * X.b ** 2 + X.c
    m = GradientBoostingRegressor(n_estimators=30, random_state=0).fit(X, y)
    w = rng.integers(1, 4, n)
    wx = X.assign(w=w)
    weighted = daskpd.ale(m, wx, ("a", "b"), sample_weight="w", columns=["a", "b", "c"])
    dup = daskpd.ale(m, X.loc[X.index.repeat(w)].reset_index(drop=True), ("a", "b"))
    np.testing.assert_array_equal(weighted.x, dup.x)
    np.testing.assert_allclose(weighted.ale, dup.ale, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(weighted.weight, dup.count)
    np.testing.assert_array_equal(weighted.count.sum(), n)


# ------------------------------------------------------------------ the engine


def test_in_memory_equals_dask_bit_for_bit(inter):
    from distributed import Client, LocalCluster

    X, _, gbr = inter
    mem = daskpd.ale(gbr, X, ("x1", "x2"), bins=20)
    one = daskpd.ale(gbr, dd.from_pandas(X, npartitions=1), ("x1", "x2"), bins=20)
    four = daskpd.ale(gbr, dd.from_pandas(X, npartitions=4), ("x1", "x2"), bins=20)
    np.testing.assert_array_equal(mem.ale, one.ale)
    np.testing.assert_allclose(four.ale, mem.ale, rtol=0, atol=1e-12)  # a different merge order
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address="127.0.0.1:0") as lc, Client(lc):
        dist = daskpd.ale(gbr, dd.from_pandas(X, npartitions=4), ("x1", "x2"), bins=20)
    for name in ("ale", "count", "weight", "delta", "delta_std", "imputed"):
        np.testing.assert_array_equal(getattr(dist, name), getattr(four, name), err_msg=name)


def test_list_mixes_1d_and_2d_in_one_pass(inter, monkeypatch):
    import daskpd.model._ale as ale_mod
    import daskpd.model._ale_specs as specs_mod

    X, _, gbr = inter
    calls = []
    real = ale_mod.run_jobs
    for mod in (ale_mod, specs_mod):  # the ALE pass, and the pass ordering categorical levels
        monkeypatch.setattr(mod, "run_jobs", lambda *a, **k: calls.append(k.get("name")) or real(*a, **k))
    out = daskpd.ale(gbr, X, ["x3", ("x1", "x2"), ("x2", "x3")], bins=10)
    assert list(out) == ["x3", ("x1", "x2"), ("x2", "x3")]
    assert calls == ["daskpd-ale"]  # one model pass (no categorical ordering)
    pd.testing.assert_frame_equal(out["x3"].to_frame(), daskpd.ale(gbr, X, "x3", bins=10).to_frame(),
                                  check_exact=True)
    np.testing.assert_array_equal(out[("x1", "x2")].ale, daskpd.ale(gbr, X, ("x1", "x2"), bins=10).ale)
    assert type(out[("x2", "x3")]).__name__ == "ALE2DResult"


# ------------------------------------------------------------------ format, plot, errors


def test_frame_metadata_and_parquet(tmp_path, inter):
    import pyarrow.parquet as pq

    X, _, gbr = inter
    res = daskpd.ale(gbr, X, ("x1", "x2"), bins=40)
    f = res.to_frame()
    head = [c for c in CURVE_HEAD if c != "category"]
    assert list(f.columns[:len(head)]) == head
    assert list(f.columns[len(head):]) == ["feature_2", "kind_2", "x_2", "weight", "delta", "delta_std", "imputed"]
    assert len(f) == len(res.x) * len(res.x2)
    assert (f.feature == "x1").all() and (f.feature_2 == "x2").all() and (f.kind == "numeric").all()
    np.testing.assert_array_equal(f.pd.to_numpy().reshape(res.ale.shape), res.ale)
    np.testing.assert_array_equal(f.x_2.to_numpy().reshape(res.ale.shape)[0], res.x2)
    assert f["count"].sum() == len(X) and (f.n_rows == len(X)).all()
    first = (f.x == res.x[0]) | (f.x_2 == res.x2[0])
    assert (f.loc[first, "count"] == 0).all() and f.loc[first, "delta"].isna().all()
    assert f.supported.dtype == bool
    np.testing.assert_array_equal(f.supported.to_numpy(), res.supported.reshape(-1))
    path = res.to_parquet(tmp_path / "ale2d.parquet")
    meta = pq.read_schema(path).metadata[b"daskpd"]
    assert b'"order": 2' in meta and b'"features": ["x1", "x2"]' in meta
    pd.testing.assert_frame_equal(pd.read_parquet(path), f)
    assert "ALE2DResult(features=('x1', 'x2'), grid=" in repr(res)


def test_supported_marks_corners_of_cells_with_rows():
    from daskpd.model._ale2d import ALE2DResult

    count = np.zeros((3, 3))
    count[2, 2] = 5  # only the cell (x_1, x_2] x (x2_1, x2_2]
    r = ALE2DResult(features=("a", "b"), x=np.arange(3.0), x2=np.arange(3.0), ale=np.zeros((3, 3)), count=count,
                    weight=count, delta=np.zeros((3, 3)), delta_std=np.zeros((3, 3)), imputed=count == 0)
    want = np.zeros((3, 3), dtype=bool)
    want[1:, 1:] = True
    np.testing.assert_array_equal(r.supported, want)


def test_plot_by_artists(inter):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.collections import PathCollection, QuadMesh

    X, _, gbr = inter
    res = daskpd.ale(gbr, X, ("x1", "x2"), bins=40)
    ax = res.plot()
    assert ax.get_xlabel() == "x1" and ax.get_ylabel() == "x2" and ax.get_title() == "2-D ALE: x1 x x2"
    cbar_ax = [a for a in ax.figure.axes if a is not ax]
    assert len(cbar_ax) == 1 and "2-D ALE" in cbar_ax[0].get_ylabel()
    assert ax.collections, "filled contours drawn"
    marks = [ln for ln in ax.lines if ln.get_marker() == "x"]
    assert len(marks) == 1 and len(marks[0].get_xdata()) == int(res.imputed.sum())
    assert "imputed" in ax.get_legend().get_texts()[0].get_text()
    ax2 = daskpd.ale(gbr, X, ("x1", "x2"), bins=8).plot(kind="heatmap", show_empty=True)
    mesh = [c for c in ax2.collections if isinstance(c, QuadMesh)]
    assert len(mesh) == 1 and mesh[0].get_array().size == 9 * 9
    assert ax2.get_legend() is None  # no empty cells at 8 bins
    norm = mesh[0].norm
    assert norm.vcenter == 0 and norm.vmin == -norm.vmax  # diverging, centred on 0
    assert not any(isinstance(c, PathCollection) for c in ax2.collections)
    with pytest.raises(ValueError, match="kind"):
        res.plot(kind="line")
    import matplotlib.pyplot as plt

    plt.close("all")


def test_bad_input(inter):
    X, _, gbr = inter
    Xc = X.assign(g=np.where(X.x3 > 0.5, "hi", "lo"))
    m = make_pipeline(FunctionTransformer(lambda d: d[["x1", "x2", "x3"]].to_numpy()), LinearRegression())
    m.fit(Xc, X.x1)
    with pytest.raises(InvalidParameterError, match=r"2-D ALE of \('x1', 'g'\) needs two numeric.*'g' is categorical"):
        daskpd.ale(m, Xc, ("x1", "g"))
    with pytest.raises(InvalidParameterError, match="two different columns"):
        daskpd.ale(gbr, X, ("x1", "x1"))
    with pytest.raises(Exception, match="nope"):
        daskpd.ale(gbr, X, ("x1", "nope"))
