"""importances: definitions, known order, codependence, one scan, cluster == memory, trials."""
from __future__ import annotations

import re
import threading
from collections import Counter

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

import daskpd
from daskpd._engine import scheduler
from daskpd.datasets import Linear, Quadratic, write_parquet
from daskpd._importance import MEASURES, ImportanceResult, importances, strat_curves_and_importances
from daskpd._importance_result import curve_measures
from daskpd import DataError

BETAS = (10.0, 5.0, 1.0, 0.5, 0.0)  # y strongly on x1, weakly on x3 (and x4), not at all on x5


@pytest.fixture(scope="module")
def linear_df():
    return Linear(betas=BETAS, random_state=1, noise=0.1).frame(20_000)


@pytest.fixture(scope="module")
def linear_result(linear_df):
    return strat_curves_and_importances(linear_df, target="y", n_trials=4, random_state=3)


def mixed_frame(n=12_000, seed=0):
    """Numeric x1, string 'grp', bool 'flag', int codes 'code' (declared), noise 'z'."""
    r = np.random.default_rng(seed)
    grp_eff = {"a": 0.0, "b": 4.0, "c": -2.0, "d": 1.0}
    code_eff = np.array([0.0, 1.5, 3.0])
    x1 = r.uniform(0, 1, n)
    grp = r.choice(list(grp_eff), n, p=[0.4, 0.3, 0.2, 0.1])
    flag = r.uniform(size=n) < 0.3
    code = r.integers(0, 3, n)
    z = r.normal(size=n)
    y = (6 * x1 + np.vectorize(grp_eff.get)(grp) + 2.0 * flag + code_eff[code] + r.normal(0, 0.1, n))
    df = pd.DataFrame({"x1": x1, "grp": pd.array(grp, dtype="str"), "flag": flag, "code": code, "z": z, "y": y})
    return df, grp_eff, code_eff


# ------------------------------------------------------------------ definitions


def test_curve_measures_by_hand():
    # numeric: positions with NaN are ignored; not centred; SD with ddof=1
    pdv = np.array([0.0, 1.0, np.nan, 3.0])
    cnt = np.array([1.0, 3.0, 50.0, 1.0])
    imp, impact, var = curve_measures(pdv, cnt, "numeric")
    assert impact == pytest.approx((0 + 1 + 3) / 3)
    assert imp == pytest.approx((0 * 1 + 1 * 3 + 3 * 1) / 5)
    assert var == pytest.approx(np.std([0, 1, 3], ddof=1))
    # categorical: mean-centred (plain mean over categories with an estimate), range / 4
    pdc = np.array([0.0, 2.0, 4.0, np.nan])
    cc = np.array([10.0, 1.0, 1.0, 7.0])
    imp, impact, var = curve_measures(pdc, cc, "categorical")
    assert impact == pytest.approx((2 + 0 + 2) / 3)
    assert imp == pytest.approx((2 * 10 + 0 * 1 + 2 * 1) / 12)
    assert var == pytest.approx(4 / 4)
    # shifting a categorical curve changes nothing; shifting a numeric one changes |PD|
    assert curve_measures(pdc + 100, cc, "categorical") == pytest.approx((imp, impact, var))
    assert curve_measures(pdv + 1, cnt, "numeric")[1] != pytest.approx(impact)
    assert all(np.isnan(curve_measures([np.nan, np.nan], [1, 1], "numeric")))
    with pytest.raises(ValueError, match="kind"):
        curve_measures(pdv, cnt, "ordinal")


def test_table_measures_recomputed_from_curves(linear_result):
    r = linear_result
    t = r.table
    raw = np.array([curve_measures(r.curves[f].pd, r.curves[f].count, "numeric") for f in t.index])
    np.testing.assert_allclose(t[["importance_raw", "impact_raw", "pd_variance_raw"]].to_numpy(), raw, rtol=1e-12)
    for j, m in enumerate(MEASURES):
        np.testing.assert_allclose(t[m].to_numpy(), raw[:, j] / raw[:, j].sum(), rtol=1e-12)
        assert t[m].sum() == pytest.approx(1.0)


# ------------------------------------------------------------------ known answers


def test_known_order_and_values(linear_result):
    t = linear_result.table
    assert list(t.index) == ["x1", "x2", "x3", "x4", "x5"]  # sorted by importance
    assert (t.kind == "numeric").all()
    assert t.loc["x5", "importance"] < 0.01 and t.loc["x5", "impact"] < 0.01 and t.loc["x5", "pd_variance"] < 0.01
    assert t.loc["x1", "importance"] > 0.5
    # truth for beta * U(0, 1): PD = beta * (x - min); mean |PD| ~ beta / 2, SD ~ beta / sqrt(12)
    for f, b, tol in zip(("x1", "x2", "x3"), BETAS, (0.05, 0.05, 0.25)):  # the weak x3 is noisier
        assert t.loc[f, "impact_raw"] == pytest.approx(b / 2, rel=tol)
        assert t.loc[f, "importance_raw"] == pytest.approx(b / 2, rel=tol)
        assert t.loc[f, "pd_variance_raw"] == pytest.approx(b / np.sqrt(12), rel=tol)
    assert t.loc["x5", "importance_raw"] < 0.05 * BETAS[0] / 2


def test_codependent_pair_gets_its_own_effect():
    """y = x1**2 + x2 with x2 = x1 + noise: x2's importance is that of its own PD (x2 - min),
    not the much larger marginal association it borrows from x1; x3 is irrelevant."""
    gen = Quadratic(random_state=5)
    df = gen.frame(20_000)
    r = strat_curves_and_importances(df, target="y")
    t = r.table
    for f in ("x1", "x2"):
        c = r.curves[f]
        ok = np.isfinite(c.pd)
        truth = curve_measures(gen.truth(f, c.x[ok]), c.count[ok], "numeric")
        assert t.loc[f, "importance_raw"] == pytest.approx(truth[0], rel=0.08)
        assert t.loc[f, "pd_variance_raw"] == pytest.approx(truth[2], rel=0.08)
    # the marginal (no stratification) mean |PD| of x2 is about twice its own effect
    bins = pd.qcut(df.x2, 50)
    marg = df.groupby(bins, observed=True).y.mean().to_numpy()
    assert np.mean(np.abs(marg - marg[0])) > 1.6 * t.loc["x2", "importance_raw"]
    assert t.loc["x3", "importance"] < 0.01


def test_categorical_inferred_declared_and_bool():
    df, grp_eff, code_eff = mixed_frame()
    r = strat_curves_and_importances(df, target="y", categorical_features=["code"])
    t = r.table
    assert t.kind.to_dict() == {"x1": "numeric", "grp": "categorical", "flag": "categorical", "code": "categorical",
                                "z": "numeric"}
    assert list(t.index[:2]) == ["x1", "grp"] and set(t.index[2:4]) == {"code", "flag"} and t.index[-1] == "z"
    assert t.loc["z", "importance"] < 0.02
    # categorical truth: mean-centred effects, weighted by the category counts
    counts = df.grp.value_counts()
    eff = pd.Series(grp_eff)
    truth = curve_measures(eff.to_numpy(), counts.reindex(eff.index).to_numpy(), "categorical")
    assert t.loc["grp", "importance_raw"] == pytest.approx(truth[0], rel=0.05)
    assert t.loc["grp", "impact_raw"] == pytest.approx(truth[1], rel=0.05)
    assert t.loc["grp", "pd_variance_raw"] == pytest.approx(6 / 4, rel=0.05)
    assert t.loc["code", "pd_variance_raw"] == pytest.approx(3 / 4, rel=0.05)
    # bool: two levels 2.0 apart -> |centred| = 1 at both, range / 4 = 0.5
    assert t.loc["flag", "impact_raw"] == pytest.approx(1.0, rel=0.05)
    assert t.loc["flag", "pd_variance_raw"] == pytest.approx(0.5, rel=0.05)
    # importance weights rows: grp's frequent levels are near the mean -> importance != impact
    assert t.loc["grp", "importance_raw"] != pytest.approx(t.loc["grp", "impact_raw"], rel=0.02)
    assert type(r.curves["grp"]).__name__ == "CatStratPDResult"
    assert type(r.curves["x1"]).__name__ == "StratPDResult"
    # without the declaration, int codes are a numeric feature
    assert importances(df, target="y").loc["code", "kind"] == "numeric"


def test_datetime_columns_skipped_with_warning_unless_named():
    df, _, _ = mixed_frame(4_000)
    df["when"] = pd.Timestamp("2020-01-01") + pd.to_timedelta(np.arange(len(df)), unit="h")
    with pytest.warns(UserWarning, match=r"1 of 6 columns left out of the default features: 1 datetime \('when'\)"):
        t = importances(df, target="y", features=None)
    assert "when" not in t.index and len(t) == 5
    with pytest.raises(DataError, match="'when' is a datetime"):
        importances(df, target="y", features=["x1", "when"])


# ------------------------------------------------------------------ one scan


class CountingReader:
    """A partition reader that counts how often each partition is produced."""

    def __init__(self, frames):
        self.frames = frames
        self.calls = Counter()
        self._lock = threading.Lock()

    def __call__(self, i):
        with self._lock:
            self.calls[i] += 1
        return self.frames[i].copy()

    def __dask_tokenize__(self):
        return ("CountingReader", id(self))

    @property
    def total(self):
        return sum(self.calls.values())


def counted_frame(df, nparts):
    bounds = np.linspace(0, len(df), nparts + 1).astype(int)
    frames = [df.iloc[a:b].reset_index(drop=True) for a, b in zip(bounds[:-1], bounds[1:])]
    reader = CountingReader(frames)
    ddf = dd.from_map(reader, list(range(nparts)), meta=df.iloc[:0], enforce_metadata=False)
    return ddf, reader


class MapCounter(dask.callbacks.Callback):
    """Counts executed tasks by key prefix (dask's local schedulers)."""

    def __init__(self):
        super().__init__()
        self.keys = Counter()

    def _pretask(self, key, dsk, state):
        name = key[0] if isinstance(key, tuple) else key
        for prefix in ("daskpd-strat-map", "daskpd-sample-map"):
            if str(name).startswith(prefix):
                self.keys[prefix] += 1


def test_one_scan_for_all_features_and_trials(monkeypatch):
    df, _, _ = mixed_frame(12_000, seed=4)
    nparts = 6
    calls = []
    real_compute = scheduler.compute

    def counting_compute(*objs, **kw):
        calls.append(len(objs))
        return real_compute(*objs, **kw)

    monkeypatch.setattr(scheduler, "compute", counting_compute)
    ddf, reader = counted_frame(df, nparts)
    with dask.config.set(scheduler="threads"), MapCounter() as mc:
        r = strat_curves_and_importances(ddf, target="y", categorical_features=["code"], n_trials=5, random_state=1)
    p = len(r.table)
    assert p == 5 and r.n_trials == 5
    # every partition read exactly twice: the sample pass and the one scan (all p features, 5 trials)
    assert reader.calls == Counter({i: 2 for i in range(nparts)})
    assert r.n_passes == 2 and r.n_partitions == nparts and r.n_partition_reads == reader.total == 2 * nparts
    # the kernel that builds all p aggregate tables ran once per partition
    assert mc.keys["daskpd-strat-map"] == nparts and mc.keys["daskpd-sample-map"] == nparts
    # three graph submissions: sample, the p tree fits (one graph, parallel), the scan
    assert len(calls) == 3 and calls[1] == p

    # the p-values run on the in-memory sample: still two reads per partition
    ddf2, reader2 = counted_frame(df, nparts)
    strat_curves_and_importances(ddf2, target="y", pvalues=True, pvalues_n_trials=3, pvalues_sample_size=2_000)
    assert reader2.total == 2 * nparts

    # the counter is not blind: per-feature stratpd re-reads everything for each feature
    ddf3, reader3 = counted_frame(df[["x1", "z", "y"]], nparts)
    for f in ("x1", "z"):
        daskpd.stratpd(ddf3, target="y", feature=f)
    assert reader3.total == 2 * 2 * nparts


# ------------------------------------------------------------------ cluster == memory, determinism


def test_real_cluster_equals_in_memory(tmp_path, dask_cluster):
    from distributed import Client, get_task_stream

    gen = Linear(betas=BETAS, random_state=7)
    path = write_parquet(gen, 12_000, tmp_path / "lin", rows_per_file=2_500)  # 5 files
    df = gen.frame(12_000)
    df["grp"] = pd.array(np.where(df.x2 > 0.5, "hi", "lo"), dtype="str")  # codependent with x2
    pq = tmp_path / "mixed.parquet"
    df.to_parquet(pq)
    kw = dict(n_trials=2, random_state=2)
    local_lin = strat_curves_and_importances(df.drop(columns="grp"), target="y", **kw)
    local_mix = strat_curves_and_importances(df, target="y", **kw)
    with Client(dask_cluster, timeout=30) as c:
        with get_task_stream(c) as ts:
            remote_lin = strat_curves_and_importances(path, target="y", **kw)
        remote_mix = strat_curves_and_importances(str(pq), target="y", **kw)
    maps = [t for t in ts.data if str(t["key"]).startswith("('daskpd-strat-map") or "daskpd-strat-map" in str(t["key"])]
    assert len(maps) == 5 == remote_lin.n_partitions
    finishes = [t for t in ts.data if re.search(r"daskpd-strat-finish-(numeric|categorical)-", str(t["key"]))]
    assert len(finishes) == len(remote_lin.curves) == 5  # curves finished on the workers
    for loc, rem in ((local_lin, remote_lin), (local_mix, remote_mix)):
        assert list(loc.table.index) == list(rem.table.index)
        pd.testing.assert_frame_equal(loc.table, rem.table, rtol=1e-9, atol=1e-12)
        pd.testing.assert_frame_equal(loc.trials, rem.trials, rtol=1e-9, atol=1e-12)
    assert "importance_std" in remote_mix.table and remote_mix.table.loc["grp", "kind"] == "categorical"


def test_trials_deterministic_and_spread(linear_df, linear_result):
    t = linear_result.table
    again = strat_curves_and_importances(linear_df, target="y", n_trials=4, random_state=3)
    pd.testing.assert_frame_equal(t, again.table, check_exact=True)
    pd.testing.assert_frame_equal(linear_result.trials, again.trials, check_exact=True)
    other = strat_curves_and_importances(linear_df, target="y", n_trials=4, random_state=4)
    assert not np.allclose(other.table.importance_std, t.importance_std)
    for m in MEASURES:
        assert (t[f"{m}_std"] > 0).all()
    assert t.loc["x1", "importance_std"] < 0.1 * t.loc["x1", "importance"]
    tr = linear_result.trials
    assert len(tr) == 4 * 5 and set(tr.trial) == {1, 2, 3, 4}
    np.testing.assert_allclose(tr.groupby("trial").importance.sum(), 1.0)  # normalised per trial
    np.testing.assert_allclose(tr.groupby("feature").importance.std(ddof=1).reindex(t.index), t.importance_std)
    # n_trials=1: one fit on all rows, no spread columns; same point estimates as with trials
    one = strat_curves_and_importances(linear_df, target="y", random_state=3)
    assert not any(c.endswith("_std") for c in one.table.columns) and one.trials is None
    pd.testing.assert_series_equal(one.table.importance, t.importance)


def test_trial_spread_is_partition_invariant(linear_df):
    kw = dict(n_trials=3, random_state=9)
    a = strat_curves_and_importances(dd.from_pandas(linear_df, npartitions=1), target="y", **kw)
    b = strat_curves_and_importances(dd.from_pandas(linear_df, npartitions=7), target="y", **kw)
    pd.testing.assert_frame_equal(a.table, b.table, rtol=1e-9, atol=1e-12)


def test_permutation_pvalues():
    df = Linear(betas=(10.0, 0.0), random_state=2).frame(8_000)
    r = np.random.default_rng(0)
    df["g"] = pd.array(r.choice(["u", "v", "w"], len(df)), dtype="str")
    df["h"] = pd.array(r.choice(["p", "q"], len(df)), dtype="str")  # no effect
    df["y"] += np.where(df.g == "v", 3.0, 0.0)
    kw = dict(pvalues=True, pvalues_n_trials=9, pvalues_sample_size=8_000, random_state=1)
    r = strat_curves_and_importances(df, target="y", **kw)
    t = r.table
    for f in ("x1", "g"):
        for m in MEASURES:
            assert t.loc[f, f"{m}_pvalue"] == pytest.approx(0.1)  # (0 + 1) / (9 + 1): beats every shuffle
    assert t.loc["x2", "importance_pvalue"] > 0.2 and t.loc["h", "importance_pvalue"] > 0.2
    assert len(r.null) == 9 * 4 and set(r.null.feature) == {"x1", "x2", "g", "h"}
    assert r.null.groupby("feature").importance.nunique().min() > 1  # a real null distribution
    again = strat_curves_and_importances(df, target="y", **kw)
    pd.testing.assert_frame_equal(t, again.table, check_exact=True)


# ------------------------------------------------------------------ API, errors, plots


def test_public_function_options(linear_df, linear_result, tmp_path):
    t = daskpd.importances(linear_df, target="y", n_trials=4, random_state=3)
    pd.testing.assert_frame_equal(t, linear_result.table)
    raw = importances(linear_df, target="y", normalize=False, features=["x3", "x1"], sort_by="pd_variance")
    assert list(raw.index) == ["x1", "x3"]
    np.testing.assert_array_equal(raw.importance, raw.importance_raw)
    # features are the analysis columns: x1 stratified on x3 only; the previous meaning
    # (every column stratifies) is stratify_on= every column but the target
    old = importances(linear_df, target="y", normalize=False, features=["x3", "x1"], sort_by="pd_variance",
                      stratify_on=[c for c in linear_df.columns if c != "y"], random_state=3)
    assert old.loc["x1", "importance"] == pytest.approx(linear_result.table.loc["x1", "importance_raw"], rel=1e-12)
    assert raw.loc["x1", "importance"] != old.loc["x1", "importance"]
    assert isinstance(linear_result, ImportanceResult) and "x1=" in repr(linear_result)
    assert "2 passes" in linear_result.summary()
    f = linear_result.to_frame()
    assert f.columns[0] == "feature" and len(f) == 5
    path = linear_result.to_parquet(tmp_path / "imp.parquet")
    back = pd.read_parquet(path)
    pd.testing.assert_frame_equal(back, f)
    import json

    import pyarrow.parquet as pq

    meta = json.loads(pq.read_schema(path).metadata[b"daskpd"])
    assert meta["method"] == "importances" and meta["n_passes"] == 2 and meta["params"]["n_trials"] == 4


@pytest.mark.parametrize("kwargs, match", [
    (dict(n_trials=0), r"n_trials must be an integer in \[1, 10000\]"),
    (dict(n_trials=2.5), "n_trials"),
    (dict(n_trials=True), "n_trials"),
    (dict(categorical_features=["nope"]), "categorical_features names column 'nope' not found"),
    (dict(categorical_features=["y"]), "categorical_features names the target"),
    (dict(categorical_features=[3]),
     "importances: parameter categorical_features must be a column name or a list of column names"),
    (dict(sort_by="gain"), "sort_by must be one of"),
    (dict(normalize="yes"), "normalize must be True or False"),
    (dict(features=["x1", "ghost"]), "'ghost'"),
    (dict(features=["x1", "y"]), "'y' is the target"),
    (dict(stratify_on=["x1", "nope"]), "'nope'"),
    (dict(min_samples_leaf=0), "min_samples_leaf"),
    (dict(pvalues=True, pvalues_n_trials=0), "pvalues_n_trials"),
])
def test_bad_parameters(kwargs, match):
    df = Linear(betas=(1.0, 0.0)).frame(500)
    with pytest.raises(DataError, match=match):
        importances(df, target="y", **kwargs)


def test_bad_data():
    df = pd.DataFrame({"x": np.arange(100.0), "c": np.ones(100), "s": ["a"] * 100, "y": np.arange(100.0)})
    with pytest.raises(DataError, match="'c' is constant"):
        importances(df, target="y", features=["x", "c"])
    with pytest.raises(DataError, match="target 's' must be numeric"):
        importances(df, target="s", features=["x"])
    with pytest.raises(DataError, match="column 'nope' not found"):
        importances(df, target="nope")
    with pytest.raises(DataError, match="no features"):
        importances(df[["y"]], target="y")


def test_plots(linear_result, tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    ax = linear_result.plot()
    bars = [p for p in ax.patches]
    assert len(bars) == 5
    ypos = {t.get_text(): t.get_position()[1] for t in ax.get_yticklabels()}
    assert sorted(ypos, key=ypos.get, reverse=True) == ["x1", "x2", "x3", "x4", "x5"]  # top = most important
    widths = sorted(((b.get_y(), b.get_width()) for b in bars), reverse=True)
    np.testing.assert_allclose([w for _, w in widths], linear_result.table.importance.to_numpy())
    from matplotlib.container import BarContainer

    (bc,) = [c for c in ax.containers if isinstance(c, BarContainer)]
    (segs,) = bc.errorbar.lines[2]  # error bars drawn: +- the trial SD
    half = sorted(((s[0][1], (s[1][0] - s[0][0]) / 2) for s in segs.get_segments()), reverse=True)
    np.testing.assert_allclose([h for _, h in half], linear_result.table.importance_std.to_numpy())
    ax.figure.savefig(tmp_path / "bars.png")
    ax2 = linear_result.plot(column="impact", top_k=2, error=None)
    assert len(ax2.patches) == 2
    assert all(c.errorbar is None for c in ax2.containers if isinstance(c, BarContainer))
    fig = linear_result.plot_curves(top_k=4, ncols=2)
    visible = [a for a in fig.axes if a.get_visible() and a.get_title()]
    assert [a.get_title().split()[0] for a in visible] == ["x1", "x2", "x3", "x4"]
    for a, f in zip(visible, ["x1", "x2", "x3", "x4"]):
        assert a.get_xlabel() == f and len(a.get_lines()) >= 1  # each panel is its feature's curve
    from daskpd.plotting.importance import plot_importances

    plot_importances(linear_result.table)  # a bare table works too
    with pytest.raises(ValueError, match="column 'gain'"):
        linear_result.plot(column="gain")
    with pytest.raises(ValueError, match="top_k"):
        linear_result.plot_curves(top_k=0)
    import matplotlib.pyplot as plt

    plt.close("all")


def test_documented_entry_points_after_a_bare_import():
    """docs/importances.md calls ``daskpd.strat_curves_and_importances`` after
    ``import daskpd`` alone: submodules load on first attribute access (a fresh process,
    since this one has imported them all already)."""
    import subprocess
    import sys

    code = ("import daskpd, pandas as pd\n"
            "assert 'daskpd._importance' not in __import__('sys').modules\n"
            "df = pd.DataFrame({'x': [0., 1, 2, 3] * 30, 'z': [1., 0, 0, 1, 1, 0] * 20})\n"
            "df['y'] = 2 * df.x + df.z + [0.01, -0.02, 0.03] * 40\n"
            "res = daskpd.strat_curves_and_importances(df, target='y', min_samples_leaf=2, min_slopes_per_x=1)\n"
            "print(list(res.table.index), callable(daskpd.importances), daskpd.plotting.__name__)\n"
            "try:\n    daskpd.no_such_thing\nexcept AttributeError as e:\n    print('AttributeError', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.strip().splitlines()
    assert lines[0] == "['x', 'z'] True daskpd.plotting"
    assert lines[1] == "AttributeError module 'daskpd' has no attribute 'no_such_thing'"


def test_the_importance_functions_have_one_name():
    """``daskpd.importances`` / ``daskpd.strat_curves_and_importances``; there is no
    ``daskpd.importance`` module or attribute."""
    from daskpd._importance import strat_curves_and_importances

    assert daskpd.strat_curves_and_importances is strat_curves_and_importances
    assert not hasattr(daskpd, "importance") and "importance" not in dir(daskpd)
    import pkgutil

    assert "importance" not in {m.name for m in pkgutil.iter_modules(daskpd.__path__)}
