"""stratpd end to end: inputs, ground truth, schedulers, bad input."""
from __future__ import annotations

import os

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

import daskpd
from daskpd.datasets import Bulldozer, Quadratic, write_parquet
from daskpd import DataError


def rmse_vs_truth(res, gen):
    f = res.to_frame()
    f = f[f.supported]
    truth = gen.truth(res.feature, f.x.to_numpy())
    return float(np.sqrt(np.mean((f.pd.to_numpy() - truth) ** 2)))


@pytest.fixture(scope="module")
def quad_small():
    return Quadratic(random_state=3).frame(20_000)


# ------------------------------------------------------------------ ground truth


def test_quadratic_codependent_rmse_tightens_with_n():
    gen = Quadratic(random_state=11)
    errs = {}
    for n in (2_000, 20_000, 200_000):
        df = gen.frame(n)
        errs[n] = (rmse_vs_truth(daskpd.stratpd(df, target="y", feature="x1"), gen), rmse_vs_truth(daskpd.stratpd(df, target="y", feature="x2"), gen))
    # x1: truth spans 0..9; x2: 0..~5.  Bounds from the estimator's measured behaviour with margin.
    assert errs[200_000][0] < 0.12 and errs[200_000][1] < 0.12
    assert errs[2_000][0] > errs[200_000][0] and errs[2_000][1] > errs[200_000][1]
    assert errs[20_000][0] < 0.35


def test_irrelevant_feature_is_flat(quad_small):
    res = daskpd.stratpd(quad_small, target="y", feature="x3")
    f = res.to_frame()
    assert np.nanmax(np.abs(f.pd[f.supported])) < 0.3  # x1's curve spans 9


def test_integer_yearmade_like_feature_keeps_exact_values(tmp_path):
    gen = Bulldozer(random_state=2, n_models=60)
    path = write_parquet(gen, 120_000, tmp_path / "bd", rows_per_file=30_000)
    res = daskpd.stratpd(path, target="SalePrice", feature="YearMade")
    assert not res.binned
    years = np.unique(gen.frame(120_000).YearMade)
    np.testing.assert_array_equal(res.x, years)
    truth_range = gen.truth("YearMade", res.x).max()
    assert rmse_vs_truth(res, gen) < 0.08 * truth_range
    assert res.n_rows == 120_000


def test_continuous_feature_is_binned_and_accurate():
    gen = Quadratic(random_state=4)
    df = gen.frame(100_000)
    res = daskpd.stratpd(df, target="y", feature="x1", max_bins=200)
    assert res.binned and len(res.x) <= 200
    assert rmse_vs_truth(res, gen) < 0.15
    exact = daskpd.stratpd(df.iloc[:3000], target="y", feature="x1", max_bins=None)
    assert not exact.binned and len(exact.x) == 3000


# ------------------------------------------------------------------ inputs


def test_pandas_dask_and_parquet_inputs_agree(tmp_path, quad_small):
    path = tmp_path / "q"
    os.makedirs(path)
    for i in range(4):
        quad_small.iloc[i * 5000:(i + 1) * 5000].to_parquet(path / f"p{i}.parquet")
    a = daskpd.stratpd(quad_small, target="y", feature="x1")
    b = daskpd.stratpd(dd.from_pandas(quad_small, npartitions=4, sort=False), target="y", feature="x1")
    c = daskpd.stratpd(str(path), target="y", feature="x1")
    d = daskpd.stratpd(str(path / "*.parquet"), target="y", feature="x1")
    for other in (b, c, d):
        np.testing.assert_allclose(other.pd, a.pd, rtol=1e-9, atol=1e-9)
        np.testing.assert_array_equal(other.slope_count, a.slope_count)
    # same partitioning -> bit-identical
    np.testing.assert_array_equal(c.pd, d.pd)


def test_hive_partitioned_directory_and_column_pushdown(tmp_path):
    gen = Bulldozer(random_state=5, n_models=30)
    df = gen.frame(20_000)
    df["extra_unused"] = np.arange(len(df))
    df.to_parquet(tmp_path / "hive", partition_cols=["ProductGroup"])
    res = daskpd.stratpd(str(tmp_path / "hive"), target="SalePrice", feature="MachineHours", features=["YearMade", "ProductGroup"])
    assert res.n_rows == 20_000
    assert res.params["stratified_on"] == ["YearMade", "ProductGroup"]
    # only the needed columns are read
    from daskpd._data.read import load

    ddf = load(str(tmp_path / "hive"), ["SalePrice", "MachineHours"])
    assert list(ddf.columns) == ["SalePrice", "MachineHours"]


def test_non_numeric_other_features_are_encoded():
    gen = Bulldozer(random_state=6, n_models=40)
    df = gen.frame(30_000)
    df["when"] = pd.Timestamp("2012-01-01") + pd.to_timedelta(np.arange(len(df)) % 90, unit="D")
    df["cat"] = pd.Categorical(df.ProductGroup)
    df["flag"] = df.YearMade > 1990
    res = daskpd.stratpd(df, target="SalePrice", feature="MachineHours")
    assert set(res.params["stratified_on"]) == {"YearMade", "ProductGroup", "ModelID", "when", "cat", "flag"}
    assert res.supported.sum() > 100


def test_missing_values_are_dropped_and_counted(quad_small):
    df = quad_small.copy()
    df.loc[:99, "x1"] = np.nan
    df.loc[100:149, "y"] = np.nan
    df.loc[150:159, "y"] = np.inf
    df.loc[160:400, "x2"] = np.nan  # NaN in a stratifying feature: routed by the tree
    res = daskpd.stratpd(df, target="y", feature="x1")
    assert res.n_missing_x == 100
    assert res.n_bad_y == 60
    assert res.n_rows == len(df)
    assert res.n_used + res.n_ignored == len(df) - 160
    assert res.count.sum() == len(df) - 160


def test_bool_feature_two_positions():
    rng = np.random.default_rng(0)
    n = 5000
    a = rng.normal(size=n)
    flag = rng.random(n) < 0.5
    df = pd.DataFrame({"flag": flag, "a": a, "y": 3.0 * flag + a})
    res = daskpd.stratpd(df, target="y", feature="flag", min_samples_leaf=30)
    np.testing.assert_array_equal(res.x, [0.0, 1.0])
    assert res.pd[1] == pytest.approx(3.0, abs=0.1)


def test_content_hash_is_pandas_row_hash():
    """``content_hash`` (numeric columns hashed and combined in one compiled pass each)
    gives exactly ``pd.util.hash_pandas_object(df, index=False)``: every dtype pandas
    hashes its own way (ints of every width, unsigned, booleans, float64 / float32 with
    NaNs of any payload and -0.0, text with missing values, categoricals, nullable
    integers, datetimes, object columns of text and of mixed types), alone and together,
    and the empty cases -- so the samples,
    trees and bootstrap weights are those of the pandas hash they always were."""
    from daskpd._engine.hashing import content_hash

    rng = np.random.default_rng(0)
    n = 20_000
    df = pd.DataFrame({"i64": rng.integers(-5, 5, n), "i32": rng.integers(-9, 9, n).astype("int32"),
                       "i8": rng.integers(-9, 9, n).astype("int8"), "u16": rng.integers(0, 9, n).astype("uint16"),
                       "u64": rng.integers(0, 2**63, n).astype("uint64") * 2,
                       "f64": rng.normal(size=n), "f32": rng.normal(size=n).astype("float32"),
                       "b": rng.random(n) < .5, "s": rng.choice(["a", "b", None], n),
                       "c": pd.Categorical(rng.choice(["x", "y"], n)),
                       "I": pd.array(rng.integers(0, 3, n), dtype="Int64"),
                       "d": pd.to_datetime(rng.integers(0, 10**15, n)),
                       "o": pd.Series(rng.choice(["p", "q", None], n), dtype=object),
                       "m": pd.Series(rng.choice([1, "q", 2.5, None], n), dtype=object)})
    df.loc[::7, "f64"] = np.nan
    df.loc[::11, "f64"] = -0.0
    df.loc[::13, "f32"] = np.nan
    df.loc[::17, "f32"] = -0.0
    df.loc[::5, "I"] = pd.NA
    for col, width, nans in (("f64", 64, [0xFFF8000000000001, 0x7FF0000000000002]), ("f32", 32, [0xFFC00001, 0x7F800003])):
        bits = df[col].to_numpy().copy().view(f"u{width // 8}")
        bits[[3, 4]] = nans  # NaNs of other signs and payloads, which pandas hashes as its own NaN
        df[col] = bits.view(f"f{width // 8}")
        assert np.isnan(df[col].iloc[3]) and df[col].to_numpy().view(f"u{width // 8}")[3] == nans[0]
    df.loc[5, "f64"] = np.inf
    for cols in [list(df.columns), *[[c] for c in df.columns], ["f64", "s", "i8"], []]:
        part = df[cols]
        for frame in (part, part.iloc[:0], part.iloc[5:40:3]):
            want = pd.util.hash_pandas_object(frame, index=False).to_numpy()
            got = content_hash(frame)
            assert got.dtype == np.uint64 and np.array_equal(got, want), cols


def test_sample_is_partition_invariant():
    gen = Quadratic(random_state=8)
    df = gen.frame(30_000)
    a = daskpd.stratpd(dd.from_pandas(df, npartitions=1), target="y", feature="x1", sample_size=5_000)
    b = daskpd.stratpd(dd.from_pandas(df, npartitions=7, sort=False), target="y", feature="x1", sample_size=5_000)
    np.testing.assert_allclose(a.pd, b.pd, rtol=1e-9, atol=1e-9)
    assert a.n_leaves == b.n_leaves


def _sample_parts(sizes, seed=3):
    rng = np.random.default_rng(seed)
    n = sum(sizes)
    df = pd.DataFrame({"a": rng.normal(size=n), "k": rng.integers(0, 40, n), "y": rng.normal(size=n)})
    df.loc[::7, "a"] = np.nan
    cuts = np.cumsum([0, *sizes])
    return df, [df.iloc[a:z] for a, z in zip(cuts[:-1], cuts[1:])]


def test_bounded_sample_pass_ships_its_share_and_keeps_the_bottom_k():
    """With the partition count known, a partition ships only the rows under its hash
    bound (about 4 k / P of them, not k), and the finished sample is the very bottom-k
    of the unbounded pass: the same rows in the same order, the same row count and
    distinct values."""
    from daskpd._engine.sample_pass import SampleJob
    from daskpd._engine.plan import PartitionContext, run_local

    df, parts = _sample_parts([5_000] * 12)
    caps = {"a": 1 << 16, "k": 1 << 20}
    bounded = SampleJob(5_000, 7, caps, n_partitions=len(parts))
    plain = SampleJob(5_000, 7, caps, margin=None)
    shipped = [len(bounded.map(PartitionContext(p)).frame) for p in parts]
    assert max(shipped) < 2 * 4 * 5_000 / 12 and min(shipped) > 0  # ~1,667 each, not 5,000
    assert all(len(plain.map(PartitionContext(p)).frame) == 5_000 for p in parts)
    (got,), (want,) = run_local(parts, [bounded], fan_in=8), run_local(parts, [plain], fan_in=8)
    assert got.exact and want.exact
    pd.testing.assert_frame_equal(got.frame, want.frame)
    assert got.n_rows == want.n_rows == len(df)
    for c in caps:
        np.testing.assert_array_equal(got.distinct[c], want.distinct[c])


def test_bounded_sample_pass_is_redrawn_when_a_partition_is_far_above_the_mean(monkeypatch):
    """A partition over SAMPLE_MARGIN times the mean size may leave out rows of the
    bottom k: the finish says so (``exact`` False), the pipeline draws the sample again
    without bounds (a third pass, counted), and the answer is bit for bit the one of the
    unbounded sample pass; with equal partitions it is too, in two passes."""
    from daskpd._engine import sample_pass
    from daskpd._engine.plan import run_local
    from daskpd._engine.sample_pass import SampleJob

    df, parts = _sample_parts([40_000] + [2_000] * 10)
    (s,) = run_local(parts, [SampleJob(5_000, 7, {}, n_partitions=len(parts))], fan_in=8)
    assert not s.exact
    lopsided = dd.from_map(lambda i: parts[i], list(range(len(parts))), meta=df.iloc[:0])
    even = dd.from_pandas(df, npartitions=11, sort=False)
    runs, m = {}, sample_pass.SAMPLE_MARGIN
    for margin in (m, None):
        monkeypatch.setattr(sample_pass, "SAMPLE_MARGIN", margin)
        for name, data in (("lopsided", lopsided), ("even", even)):
            runs[name, margin] = daskpd.strat_curves_and_importances(
                data, target="y", features=["a", "k"], categorical_features=["k"],
                sample_size=5_000, random_state=7)
    assert runs["lopsided", m].n_passes == 3 and runs["even", m].n_passes == 2
    assert runs["lopsided", None].n_passes == runs["even", None].n_passes == 2
    for name in ("lopsided", "even"):
        a, b = runs[name, m], runs[name, None]
        pd.testing.assert_frame_equal(a.table, b.table)
        np.testing.assert_array_equal(a.curves["a"].pd, b.curves["a"].pd)
        np.testing.assert_array_equal(a.curves["k"].pd, b.curves["k"].pd)


def test_deterministic_given_random_state(quad_small):
    a = daskpd.stratpd(quad_small, target="y", feature="x1", sample_size=4_000, random_state=1)
    b = daskpd.stratpd(quad_small, target="y", feature="x1", sample_size=4_000, random_state=1)
    c = daskpd.stratpd(quad_small, target="y", feature="x1", sample_size=4_000, random_state=2)
    np.testing.assert_array_equal(a.pd, b.pd)
    assert not np.array_equal(a.pd, c.pd)


def test_result_frame_parquet_and_plot(tmp_path, quad_small):
    res = daskpd.stratpd(quad_small, target="y", feature="x1")
    f = res.to_frame()
    assert {"x", "pd", "slope", "slope_count", "count", "supported"} <= set(f.columns)
    p = res.to_parquet(tmp_path / "c.parquet")
    back = pd.read_parquet(p)
    pd.testing.assert_frame_equal(back, f)
    import pyarrow.parquet as pq

    assert b"daskpd" in pq.read_schema(p).metadata
    ax = res.plot()
    # what is drawn: the curve through the result's supported points, its axis labels
    xs, ys = ax.lines[0].get_data()
    ok = res.supported & np.isfinite(res.pd)
    np.testing.assert_allclose(np.asarray(ys, dtype=float), res.pd[ok])
    np.testing.assert_allclose(np.asarray(xs, dtype=float), res.x[ok])
    assert ax.get_xlabel() == "x1"
    ax.figure.savefig(tmp_path / "c.png")
    import matplotlib.image

    img = matplotlib.image.imread(tmp_path / "c.png")
    assert img.shape[0] > 100 and img.shape[1] > 100 and img[..., :3].std() > 0.05  # a picture, not a blank
    assert "x1" in res.summary() and "StratPDResult" in repr(res)


# ------------------------------------------------------------------ schedulers


def test_real_cluster_gives_the_local_answer(tmp_path, dask_cluster):
    """scheduler + 2 worker processes started with the `dask` CLI on 127.0.0.1."""
    from distributed import Client, get_task_stream

    gen = Quadratic(random_state=9)
    path = write_parquet(gen, 40_000, tmp_path / "q", rows_per_file=10_000)
    local = daskpd.stratpd(path, target="y", feature="x1")  # no client: dask's threads
    with Client(dask_cluster, timeout=30) as client:
        assert len(client.scheduler_info()["workers"]) == 2
        with get_task_stream(client) as ts:
            remote = daskpd.stratpd(path, target="y", feature="x1")
    map_tasks = [t for t in ts.data if "daskpd-strat-map" in str(t["key"])]
    assert len(map_tasks) == 4  # one per parquet file
    assert all(t["worker"].startswith("tcp://127.0.0.1:") for t in map_tasks)
    # the curve is finished on a worker, next to the merged aggregate: one task
    finish_tasks = [t for t in ts.data if "daskpd-strat-finish-" in str(t["key"])]
    assert len(finish_tasks) == 1 and finish_tasks[0]["worker"].startswith("tcp://127.0.0.1:")
    assert remote.n_rows == 40_000
    np.testing.assert_array_equal(remote.pd, local.pd)
    np.testing.assert_array_equal(remote.slope_count, local.slope_count)
    assert set(remote.params["timings"]) == {"sample_s", "fit_s", "scan_s"}  # completed on the driver


def test_finished_on_workers_equal_the_in_memory_kernels_and_warnings_reach_the_user(dask_cluster):
    """The curves are finished on the workers (only results reach the driver), equal to
    the very same kernels run in memory to the bit; the warnings and errors of
    finishing on a worker process still reach the caller."""
    from distributed import Client, get_task_stream

    from daskpd._engine.plan import run_local
    from daskpd._data.request import open_request
    from daskpd._strat.pipeline import run_strat

    df = Quadratic(random_state=4).frame(6_000)
    with Client(dask_cluster, timeout=30) as client:
        with get_task_stream(client) as ts:
            run = run_strat(open_request(df, "y", ["x1", "x2"]), finish_options={"min_slopes_per_x": 5})
        with pytest.warns(UserWarning, match="min_slopes_per_x=100000"):
            empty = daskpd.stratpd(df, target="y", feature="x1", min_slopes_per_x=100_000)
        cats = pd.DataFrame({"x": np.repeat(np.arange(6), 40), "y": np.repeat(np.arange(6.0), 40)})
        cats["c"] = cats.x.map(lambda v: f"c{v}")
        with pytest.raises(DataError, match="no leaf of its tree holds two categories"):  # x named: a leak by
            daskpd.catstratpd(cats, target="y", feature="c", min_samples_leaf=10, stratify_on=["x"])  # its rule
        with pytest.raises(DataError, match="float column with non-integer values"):
            daskpd.catstratpd(cats.assign(f=cats.x + 0.5), target="y", feature="f")
    workers = {t["worker"] for t in ts.data if "daskpd-strat-finish-" in str(t["key"])}
    assert workers and all(w.startswith("tcp://127.0.0.1:") for w in workers)
    (local,) = run_local([df], [run.scan])  # pandas input: one partition
    for f in ("x1", "x2"):
        got, want = run.results[f], local[f]
        assert got.n_rows == want.n_rows == 6_000 and got.n_leaves == want.n_leaves > 10
        np.testing.assert_array_equal(got.pd, want.pd)
    assert not empty.supported.any()


def test_local_cluster_equals_threads(tmp_path):
    from distributed import Client, LocalCluster

    gen = Quadratic(random_state=10)
    path = write_parquet(gen, 30_000, tmp_path / "q", rows_per_file=10_000)
    threads = daskpd.stratpd(path, target="y", feature="x2")
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as lc, Client(lc):
        dist = daskpd.stratpd(path, target="y", feature="x2")
    np.testing.assert_array_equal(threads.pd, dist.pd)


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize("kwargs, match", [
    (dict(feature="nope"), "'nope' not found"),
    (dict(target="nope"), "'nope' not found"),
    (dict(feature="y"), "is the target"),
    (dict(min_samples_leaf=0), "min_samples_leaf must be an integer >= 1"),
    (dict(min_slopes_per_x=0), "min_slopes_per_x must be an integer >= 1"),
    (dict(sample_size=1.5), "sample_size"),
    (dict(max_bins=1), "max_bins"),
])
def test_bad_parameters(quad_small, kwargs, match):
    args = dict(target="y", feature="x1") | kwargs
    with pytest.raises(DataError, match=match):
        daskpd.stratpd(quad_small, target=args.pop("target"), feature=args.pop("feature"), **args)


def test_bad_data():
    df = pd.DataFrame({"x": [1.0, 2, 3, 4], "a": [1.0, 2, 3, 4], "y": ["a", "b", "c", "d"], "c": ["u", "v", "u", "v"]})
    with pytest.raises(DataError, match="target 'y' must be numeric; it has dtype"):
        daskpd.stratpd(df, target="y", feature="x")
    with pytest.raises(DataError, match="data has no rows"):
        daskpd.stratpd(pd.DataFrame({"x": [], "y": []}, dtype=float), target="y", feature="x")
    with pytest.raises(DataError, match="feature 'x' has no non-missing values"):
        daskpd.stratpd(pd.DataFrame({"x": [np.nan] * 5, "y": [1.0, 2, 3, 4, 5]}), target="y", feature="x")
    with pytest.raises(DataError, match="feature 'x' is constant"):
        daskpd.stratpd(pd.DataFrame({"x": [2.0] * 5, "y": [1.0, 2, 3, 4, 5]}), target="y", feature="x")
    with pytest.raises(DataError, match=r"feature 'c' is categorical .*daskpd\.catstratpd"):
        daskpd.stratpd(df.assign(y=1.0 * np.arange(4)), target="y", feature="c")
    with pytest.raises(DataError, match="datetime"):
        daskpd.stratpd(pd.DataFrame({"t": pd.date_range("2020", periods=4), "y": [1.0, 2, 3, 4]}), target="y", feature="t")


def test_unreadable_paths(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        daskpd.stratpd(str(tmp_path / "missing.parquet"), target="y", feature="x")
    with pytest.raises(DataError, match="glob matches no file"):
        daskpd.stratpd(str(tmp_path / "*.parquet"), target="y", feature="x")
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"this is not parquet")
    with pytest.raises(DataError, match=r"damaged parquet file: .*bad\.parquet is not a parquet file"):
        daskpd.stratpd(str(bad), target="y", feature="x")
    with pytest.raises(DataError, match="data must be a pandas DataFrame"):
        daskpd.stratpd(42, target="y", feature="x")


def test_fsspec_url_and_csv_inputs(tmp_path, quad_small):
    import fsspec

    fs = fsspec.filesystem("memory")
    for i in range(2):
        with fs.open(f"/daskpd-test/q/part{i}.parquet", "wb") as fh:
            quad_small.iloc[i * 10_000:(i + 1) * 10_000].to_parquet(fh)
    url = daskpd.stratpd("memory://daskpd-test/q", target="y", feature="x1")
    quad_small.to_csv(tmp_path / "q.csv", index=False)
    csv = daskpd.stratpd(str(tmp_path / "q.csv"), target="y", feature="x1")
    ref = daskpd.stratpd(quad_small, target="y", feature="x1")
    np.testing.assert_allclose(url.pd, ref.pd, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(csv.pd, ref.pd, rtol=1e-6, atol=1e-6)  # CSV round-trips floats as text
    with pytest.raises(DataError, match="'nope' not found in .*q.csv"):
        daskpd.stratpd(str(tmp_path / "q.csv"), target="y", feature="nope")
