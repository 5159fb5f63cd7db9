"""Lakes written by real engines (DuckDB, polars, fastparquet, pandas), each in its own
hive layout and with the types it writes, give the plain lake's answer -- or a one-line
error naming the column."""
import warnings

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import daskpd
from daskpd import DataError

N = 360


@pytest.fixture(scope="module")
def rows():
    rng = np.random.default_rng(17)
    df = pd.DataFrame({"x": np.round(rng.uniform(0, 10, N), 2), "k": rng.integers(0, 4, N),
                       "g": rng.choice(["a", "b", "c"], N)})
    df["y"] = 2.0 * df.x + df.k + (df.g == "b") + rng.normal(scale=0.1, size=N)
    df["when"] = pd.date_range("2024-03-30", periods=N, freq="h", tz="Europe/Paris")
    df["part"] = rng.choice(["p1", "p2", "p3"], N)
    return df


def _duckdb(df, root):
    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect()
    con.register("rows", df)
    con.execute(f"""COPY (SELECT x, CAST(x AS DECIMAL(10, 2)) AS xd, CAST(k AS UBIGINT) AS ku, g, y, "when",
                    [k, k + 1] AS tags, {{'a': k}} AS ev, part FROM rows)
                    TO '{root}' (FORMAT PARQUET, PARTITION_BY (part))""")
    con.close()


def _polars(df, root):
    pl = pytest.importorskip("polars")
    frame = pl.from_pandas(df).with_columns(pl.col("x").cast(pl.Decimal(10, 2)).alias("xd"),
                                            pl.col("k").cast(pl.UInt64).alias("ku"),
                                            pl.col("g").cast(pl.Categorical).alias("gc"),
                                            pl.concat_list([pl.col("k"), pl.col("k") + 1]).alias("tags"))
    frame.drop("x", "k", "g").write_parquet(root, partition_by=["part"])


def _fastparquet(df, root):
    fastparquet = pytest.importorskip("fastparquet")
    fastparquet.write(str(root), df.assign(ku=df.k.astype("uint64"), gc=df.g.astype("category")).drop(
        columns=["k", "g"]), file_scheme="hive", partition_on=["part"])


def _pandas(df, root):
    df.assign(ku=df.k.astype("uint64"), gc=df.g.astype("category")).drop(columns=["k"]).to_parquet(
        root, partition_cols=["part"])


#: engine -> (writer, {the lake's column: the plain column it holds})
WRITERS = {
    "duckdb": (_duckdb, {"xd": "x", "ku": "k", "g": "g"}),
    "polars": (_polars, {"xd": "x", "ku": "k", "gc": "g"}),
    "fastparquet": (_fastparquet, {"x": "x", "ku": "k", "gc": "g"}),
    "pandas": (_pandas, {"x": "x", "ku": "k", "gc": "g"}),
}


@pytest.fixture(scope="module")
def plain(rows, tmp_path_factory):
    root = tmp_path_factory.mktemp("plain")
    pq.write_table(pa.Table.from_pandas(rows.drop(columns=["when"]), preserve_index=False), root / "part-0.parquet")
    return str(root)


@pytest.fixture(scope="module", params=sorted(WRITERS))
def engine_lake(request, rows, tmp_path_factory):
    write, columns = WRITERS[request.param]
    root = tmp_path_factory.mktemp(request.param) / "lake"
    write(rows, root)
    return request.param, str(root), columns


def test_an_engines_lake_gives_the_plain_lakes_answer(engine_lake, plain):
    name, root, columns = engine_lake
    feats = list(columns)
    got = daskpd.importances(root, target="y", features=feats, stratify_on=feats)
    want = daskpd.importances(plain, target="y", features=list(columns.values()), stratify_on=list(columns.values()))
    got = got.rename(index=columns)
    pd.testing.assert_frame_equal(got[["importance", "impact", "pd_variance"]],
                                  want[["importance", "impact", "pd_variance"]].loc[got.index], obj=name)
    assert list(got["kind"]) == list(want.loc[got.index, "kind"])


def test_an_engines_lake_with_the_default_features(engine_lake):
    """The time stamp with a time zone, the nested columns and the hive key are left out
    with a note; the rest are scored; naming the time stamp or a nested column is a
    one-line error."""
    name, root, columns = engine_lake
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        t = daskpd.importances(root, target="y")
    notes = " ".join(str(w.message) for w in seen if "left out of the default features" in str(w.message))
    assert "1 datetime ('when')" in notes and "1 hive partition key ('part')" in notes, (name, notes)
    if name in ("duckdb", "polars"):  # they write list (and struct) columns
        assert "nested or binary" in notes and "'tags'" in notes
        with pytest.raises(DataError, match=r"^feature 'tags' has type (large_)?list.*cannot be a feature"):
            daskpd.importances(root, target="y", features=["tags"])
    assert set(columns) <= set(t.index) and "when" not in t.index and "part" not in t.index
    with pytest.raises(DataError, match=r"^feature 'when' is a datetime \(datetime64\[") as err:
        daskpd.stratpd(root, target="y", feature="when")
    assert "\n" not in str(err.value)
