"""Lakes as writers leave them: thousands of small files, nested columns beside the
numbers, columns added in later files."""
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import daskpd
from daskpd import DataError
from daskpd._data.read import load


def _frame(n, seed):
    rng = np.random.default_rng(seed)
    x1, x2 = rng.uniform(0, 10, n), rng.integers(0, 5, n)
    return pd.DataFrame({"x1": x1, "x2": x2, "y": 2.0 * x1 + x2 + rng.normal(scale=0.1, size=n)})


def test_thousands_of_small_files_read_like_one(tmp_path):
    """dask hands one ``arrow_to_pandas`` dict to every partition of a read; each
    partition's types mapper used to wrap the last one (RecursionError past ~1,000
    files in a process).  1,500 files of 40 rows: read in one process, same rows."""
    df = _frame(60_000, 0)
    root = tmp_path / "lake"
    root.mkdir()
    for i in range(1_500):
        pq.write_table(pa.Table.from_pandas(df.iloc[i * 40:(i + 1) * 40], preserve_index=False),
                       root / f"part-{i:05d}.parquet")
    got = load(str(root), ["x1", "x2", "y"]).compute(scheduler="sync")
    pd.testing.assert_frame_equal(got.reset_index(drop=True), df)
    imp = daskpd.importances(str(root), target="y")
    ref = daskpd.importances(df, target="y")
    pd.testing.assert_frame_equal(imp, ref)


@pytest.fixture
def nested_lake(tmp_path):
    df = _frame(3_000, 1)
    n = len(df)
    t = pa.Table.from_pandas(df, preserve_index=False)
    t = t.append_column("event", pa.array([{"a": i, "b": str(i)} for i in range(n)]))
    t = t.append_column("tags", pa.array([[i, i + 1] for i in range(n)]))
    t = t.append_column("blob", pa.array([b"\x00\x01"] * n))
    t = t.append_column("props", pa.array([[("k", i)] for i in range(n)], type=pa.map_(pa.string(), pa.int64())))
    root = tmp_path / "nested"
    root.mkdir()
    pq.write_table(t.slice(0, n // 2), root / "a.parquet")
    pq.write_table(t.slice(n // 2), root / "b.parquet")
    return root, df


def test_nested_and_binary_columns_never_break_a_run(nested_lake):
    root, df = nested_lake
    plain = daskpd.stratpd(df, target="y", feature="x1")
    with pytest.warns(UserWarning, match=r"left out of the stratifying columns: 4 nested or binary"):
        r = daskpd.stratpd(str(root), target="y", feature="x1")
    np.testing.assert_array_equal(r.pd, plain.pd)
    with pytest.warns(UserWarning, match=r"importances: 4 of 6 columns left out of the default features: 4 nested "
                                         r"or binary \('event', 'tags', 'blob', 'props'\)"):
        t = daskpd.importances(str(root), target="y")
    pd.testing.assert_frame_equal(t, daskpd.importances(df, target="y"))
    t2 = daskpd.importances(str(root), target="y", features=["x1", "x2"], stratify_on=["x1", "x2"])
    pd.testing.assert_frame_equal(t2, t)


@pytest.mark.parametrize("column, kind", [("event", "struct"), ("tags", "list"), ("blob", "binary"),
                                          ("props", "map")])
def test_a_nested_column_asked_for_is_named(nested_lake, column, kind):
    root, _ = nested_lake
    for call in (lambda: daskpd.stratpd(str(root), target="y", feature=column),
                 lambda: daskpd.catstratpd(str(root), target="y", feature=column),
                 lambda: daskpd.importances(str(root), target="y", features=["x1", column])):
        with pytest.raises(DataError, match=rf"feature '{column}' has type {kind}.*cannot be a feature"):
            call()
    with pytest.raises(DataError, match=rf"stratifying column '{column}' has type {kind}"):
        daskpd.stratpd(str(root), target="y", feature="x1", features=["x2", column])


@pytest.fixture
def spark_lake(tmp_path):
    """A lake as Spark leaves it: hive directories of many small part files, ``.crc``
    checksums beside them, an empty part file per directory, ``_SUCCESS`` and
    ``_committed_*`` / ``_started_*`` markers."""
    rng = np.random.default_rng(3)
    n = 6_000
    df = pd.DataFrame({"x1": rng.uniform(0, 10, n), "x2": rng.integers(0, 5, n).astype("int64")})
    df["month"] = np.repeat([1, 2, 3], n // 3)
    df["y"] = 2.0 * df.x1 + df.x2 + 0.5 * df.month + rng.normal(scale=0.1, size=n)
    root = tmp_path / "spark"
    for m in (1, 2, 3):
        d = root / f"month={m}"
        d.mkdir(parents=True)
        part = df[df.month == m].drop(columns="month")
        for i in range(25):
            name = f"part-{i:05d}-7d1c.c000.snappy.parquet"
            pq.write_table(pa.Table.from_pandas(part.iloc[i * 80:(i + 1) * 80], preserve_index=False), d / name)
            (d / f".{name}.crc").write_bytes(b"crc\x00")
        pq.write_table(pa.Table.from_pandas(part.iloc[:0], preserve_index=False), d / "part-99999-7d1c.parquet")
    (root / "_SUCCESS").write_bytes(b"")
    (root / "_committed_5521").write_text("{}")
    (root / "_started_5521").write_bytes(b"")
    df["month"] = pd.Categorical(df.month)
    return root, df


def test_a_spark_lake_reads_like_its_rows_and_small_files_are_gathered(spark_lake):
    from daskpd._data.source import open_dataset

    root, df = spark_lake
    one_per_file = open_dataset(str(root))
    gathered = open_dataset(str(root), partition_bytes=1 << 20)
    assert one_per_file.frame.npartitions == 78 and gathered.frame.npartitions < 10
    cols = ["x1", "x2", "y", "month"]
    for ds in (one_per_file, gathered):
        got = ds.project(cols).compute().sort_values(["month", "x1"]).reset_index(drop=True)
        want = df[cols].sort_values(["month", "x1"]).reset_index(drop=True)
        np.testing.assert_array_equal(got[["x1", "x2", "y"]].to_numpy(), want[["x1", "x2", "y"]].to_numpy())
        np.testing.assert_array_equal(got.month.astype(int), want.month.astype(int))
    # the hive key is left out of the default features (noted), and still stratifies
    with pytest.warns(UserWarning, match=r"1 hive partition key \('month'\)"):
        t = daskpd.importances(str(root), target="y")
    assert list(t.index) == ["x1", "x2"]
    ref = daskpd.importances(df, target="y", features=["x1", "x2"], stratify_on=["x1", "x2", "month"])
    pd.testing.assert_frame_equal(t, ref)


def test_small_files_are_gathered_by_the_functions(tmp_path):
    """2,000 files of 30 rows: the functions read them in a few partitions (the task
    memory decides how many), with the same answer as the frame in memory."""
    df = _frame(60_000, 5)
    root = tmp_path / "small"
    root.mkdir()
    for i in range(2_000):
        pq.write_table(pa.Table.from_pandas(df.iloc[i * 30:(i + 1) * 30], preserve_index=False),
                       root / f"part-{i:05d}.parquet")
    from daskpd._data.read import grouping
    from daskpd._data.lake import inspect_lake
    from daskpd._engine.memory import partition_bytes

    assert grouping(inspect_lake(str(root)), partition_bytes())["aggregate_files"] is True
    r = daskpd.stratpd(str(root), target="y", feature="x1")
    assert r.params["n_partitions"] < 20
    ref = daskpd.stratpd(df, target="y", feature="x1")
    np.testing.assert_allclose(r.pd, ref.pd, rtol=1e-12, atol=1e-12)
    # files whose schemas differ (x2 stored as int32 in half of them) are not gathered:
    # dask would join their tables before daskpd widens the types
    for i in range(0, 2_000, 2):
        part = df.iloc[i * 30:(i + 1) * 30].astype({"x2": "int32"})
        pq.write_table(pa.Table.from_pandas(part, preserve_index=False), root / f"part-{i:05d}.parquet")
    assert grouping(inspect_lake(str(root)), partition_bytes()) == {}
    for i in range(100, 2_000):  # the run: 100 such files (still enough to be gathered) are as telling
        (root / f"part-{i:05d}.parquet").unlink()
    assert grouping(inspect_lake(str(root)), partition_bytes()) == {}
    r2 = daskpd.stratpd(str(root), target="y", feature="x1")
    assert r2.params["n_partitions"] == 100
    ref2 = daskpd.stratpd(df.iloc[:3_000], target="y", feature="x1")
    np.testing.assert_allclose(r2.pd, ref2.pd, rtol=1e-12, atol=1e-12)


def test_the_types_writers_use_read_as_their_plain_equivalents(tmp_path):
    """Types Spark, Hive, DuckDB or pandas write: unsigned and narrow integers, half
    floats, large_string, string_view, dictionary-encoded strings, decimals, a timestamp
    with a time zone (a datetime: left out of the default features, refused when named)
    and an all-null column (left out as empty).  Each gives the answer its plain
    equivalent gives."""
    import decimal

    rng = np.random.default_rng(11)
    n = 4_000
    x1 = np.round(rng.uniform(0, 10, n), 2)
    k = rng.integers(0, 4, n)
    y = 2.0 * x1 + k + rng.normal(scale=0.1, size=n)
    labels = np.array([f"s{v}" for v in k], dtype=object)
    typed = pa.table({
        "x1": pa.array([decimal.Decimal(f"{v:.2f}") for v in x1], type=pa.decimal128(10, 2)),
        "k_u64": pa.array(k.astype("uint64")), "k_i8": pa.array(k.astype("int8")),
        "s_large": pa.array(labels, type=pa.large_string()),
        "s_dict": pa.array(labels).dictionary_encode(),
        "when": pa.array(pd.date_range("2024-03-30", periods=n, freq="h", tz="Europe/Paris")),
        "nothing": pa.nulls(n),
        "y": pa.array(y),
    })
    if hasattr(pa, "string_view"):
        typed = typed.append_column("s_view", pa.array(labels, type=pa.string_view()))
    root = tmp_path / "typed"
    root.mkdir()
    pq.write_table(typed.slice(0, n // 2), root / "a.parquet")
    pq.write_table(typed.slice(n // 2), root / "b.parquet")
    plain = pd.DataFrame({"x1": x1, "k": k.astype("int64"), "s": labels, "y": y})
    for col, same in [("k_u64", "k"), ("k_i8", "k"), ("s_large", "s"), ("s_dict", "s"),
                      *([("s_view", "s")] if hasattr(pa, "string_view") else [])]:
        got = daskpd.importances(str(root), target="y", features=["x1", col], stratify_on=["x1", col])
        want = daskpd.importances(plain, target="y", features=["x1", same], stratify_on=["x1", same])
        pd.testing.assert_frame_equal(got.rename(index={col: same}), want, obj=col)
    with pytest.warns(UserWarning, match=r"1 datetime \('when'\)"):
        t = daskpd.importances(str(root), target="y")
    assert "when" not in t.index and "nothing" not in t.index and "x1" in t.index
    assert t.loc["x1", "kind"] == "numeric" and t.loc["s_dict", "kind"] == "categorical"
    with pytest.raises(DataError, match=r"feature 'when' is a datetime \(datetime64\[.*Europe/Paris\]\)"):
        daskpd.stratpd(str(root), target="y", feature="when")
    with pytest.raises(DataError, match="feature 'nothing' has no non-missing values"):
        daskpd.importances(str(root), target="y", features=["x1", "nothing"])


def _gathered_and_dask(path, filters=None, partition_bytes=1 << 20):
    """The frame the gathered reader makes of a lake, and dask's ``read_parquet`` of it
    with the same grouping."""
    import dask.dataframe as dd

    from daskpd._data.lake import inspect_lake
    from daskpd._data.filters import filter_columns
    from daskpd._data.read import ARROW_TO_PANDAS, PartitionOptions, _open_parquet, grouping

    lake = inspect_lake(path, filter_columns(filters), survey=True)
    options = grouping(lake, partition_bytes)
    assert options, "the lake's files are gathered"
    ours, _ = _open_parquet(path, None, filters, repr(path), partition_bytes)
    theirs = dd.read_parquet(path, filters=filters, arrow_to_pandas=PartitionOptions(ARROW_TO_PANDAS), **options)
    return ours, theirs


@pytest.fixture(scope="module")
def small_file_lakes(tmp_path_factory):
    """Small-file lakes the gathered reader must read as dask does: file names in
    natural order (2 before 10), hive directories with an empty file, many row groups a
    file, pandas' categoricals and strings."""
    import decimal

    rng = np.random.default_rng(21)
    base = tmp_path_factory.mktemp("gathered")

    def table(n):
        return pa.table({
            "x": rng.uniform(size=n), "k": rng.integers(0, 5, n),
            "s": pa.array([f"s{v}" for v in rng.integers(0, 3, n)], type=pa.string()),
            "d": pa.array([decimal.Decimal(f"{v:.2f}") for v in rng.uniform(0, 9, n)], type=pa.decimal128(6, 2)),
            "t": pa.array(pd.date_range("2024-01-01", periods=n, freq="h", tz="UTC")),
            "c": pa.array([f"c{v}" for v in rng.integers(0, 3, n)]).dictionary_encode()})

    flat = base / "flat"
    flat.mkdir()
    for i in range(70):
        pq.write_table(table(12), flat / f"{i}.parquet")
    hive = base / "hive"
    for d in (1, 2):
        for h in range(36):
            p = hive / f"date=2024-01-0{d}" / f"hour={h:02d}"
            p.mkdir(parents=True)
            pq.write_table(table(8), p / "part-0.parquet")
            if h == 3:
                pq.write_table(table(1).slice(0, 0), p / "part-1.parquet")
    groups = base / "row-groups"
    groups.mkdir()
    for i in range(70):
        pq.write_table(table(300), groups / f"p{i:03d}.parquet", row_group_size=50)
    pandas_written = base / "pandas"
    pandas_written.mkdir()
    for i in range(70):
        df = table(20).to_pandas()
        df["c"] = df["c"].astype("category")
        df.to_parquet(pandas_written / f"p{i:03d}.parquet", index=False)
    return {"flat": flat, "hive": hive, "row-groups": groups, "pandas": pandas_written}


@pytest.mark.parametrize("lake, filters, columns, partition_bytes", [
    ("flat", None, None, 1 << 20),
    ("flat", [("k", "==", 2)], ["x", "s"], 1 << 20),
    ("flat", [("s", "!=", "s1")], None, 1 << 20),
    ("hive", None, None, 1 << 20),
    ("hive", [("hour", "<", 5)], ["hour", "x"], 1 << 20),
    ("hive", [[("date", "==", "2024-01-02"), ("x", ">", 0.5)], [("hour", "in", [1, 2])]], None, 1 << 20),
    ("row-groups", None, None, 100_000),
    ("pandas", None, None, 1 << 20),
])
def test_gathered_small_files_read_as_dask_reads_them(small_file_lakes, lake, filters, columns, partition_bytes):
    """The partitions planned from daskpd's footers hold what dask's ``read_parquet``
    (``aggregate_files``) reads: the same dtypes (hive keys as categoricals of every
    value, pandas' categoricals of unknown categories in the meta), the same rows in
    the same order, as many partitions."""
    ours, theirs = _gathered_and_dask(str(small_file_lakes[lake]), filters, partition_bytes)
    assert any(type(e).__name__.startswith("FromMap") for e in ours.expr.walk())
    if columns:
        ours, theirs = ours[columns], theirs[columns]
    pd.testing.assert_series_equal(ours.dtypes, theirs.dtypes)
    for c in ours.columns:
        assert ours._meta[c].dtype == theirs._meta[c].dtype, c
    assert ours.npartitions == theirs.npartitions
    got, want = ours.compute(scheduler="sync"), theirs.compute(scheduler="sync")
    assert len(got) > 0
    pd.testing.assert_frame_equal(got.reset_index(drop=True), want.reset_index(drop=True), check_exact=True)


@pytest.fixture(scope="module")
def thousands_of_hive_partitions(tmp_path_factory):
    """2,016 hive directories (``date=YYYY-MM-DD/hour=HH``, 84 days of 24 hours), a
    4-row part file in each, and the same rows as a plain lake with date and hour as
    ordinary columns."""
    rng = np.random.default_rng(8)
    hours = pd.date_range("2024-01-01", periods=84 * 24, freq="h")
    n = 4 * len(hours)
    stamp = np.repeat(hours, 4)
    df = pd.DataFrame({"x1": rng.uniform(0, 10, n), "x2": rng.integers(0, 5, n),
                       "date": stamp.strftime("%Y-%m-%d"), "hour": stamp.hour.astype("int64")})
    df["y"] = 2.0 * df.x1 + df.x2 + 0.1 * df.hour + rng.normal(scale=0.1, size=n)
    base = tmp_path_factory.mktemp("hive-thousands")
    pq.write_to_dataset(pa.Table.from_pandas(df, preserve_index=False), base / "hive",
                        partition_cols=["date", "hour"], basename_template="part-{i}.parquet", max_partitions=4096)
    plain = base / "plain"
    plain.mkdir()
    for i in range(4):
        part = df.iloc[i * n // 4:(i + 1) * n // 4]
        pq.write_table(pa.Table.from_pandas(part, preserve_index=False), plain / f"part-{i}.parquet")
    return base / "hive", plain, df


def test_thousands_of_hive_partitions_give_the_plain_lakes_answer(thousands_of_hive_partitions):
    from daskpd._data.source import open_dataset
    from daskpd._engine.memory import partition_bytes

    hive, plain, df = thousands_of_hive_partitions
    assert sum(1 for _ in hive.glob("date=*/hour=*")) == 2_016
    ds = open_dataset(str(hive), partition_bytes=partition_bytes())
    assert ds.frame.npartitions < 10 and ds.hive_keys == ["date", "hour"]
    assert ds.kind("hour") == "categorical"
    both = dict(features=["x1", "x2"], stratify_on=["x1", "x2"])
    pd.testing.assert_frame_equal(daskpd.importances(str(hive), target="y", **both),
                                  daskpd.importances(str(plain), target="y", **both))
    # a filter on the hive keys (the directories it rules out are not read)
    where = [("date", ">=", "2024-02-15"), ("hour", "<", 12)]
    got = daskpd.importances(str(hive), target="y", filters=where, **both)
    pd.testing.assert_frame_equal(got, daskpd.importances(str(plain), target="y", filters=where, **both))
