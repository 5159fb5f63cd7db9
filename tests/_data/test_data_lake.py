"""Inputs checked before anything is computed: a parquet lake's footers and reconciled
schema (type drift, missing columns, safe widenings, damaged files) and one rule for
column names whatever the input (pandas, dask, parquet).  Real parquet files written
with pyarrow, real dask (its threaded scheduler)."""
from __future__ import annotations

import os
from pathlib import Path

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import daskpd
from daskpd import DataError
from daskpd._data.read import load
from daskpd._data.lake import inspect_lake

N = 3000


def frame(seed: int, n: int = N) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x1 = rng.uniform(-1, 1, n)
    x2 = rng.uniform(-1, 1, n)
    c = rng.integers(0, 7, n)
    y = 2 * x1 + x2 + 0.5 * c + rng.normal(0, 0.01, n)
    return pd.DataFrame({"x1": x1, "x2": x2, "c": c, "y": y})


def write(path: Path, df: pd.DataFrame, types: dict | None = None) -> Path:
    """``df`` as a parquet file with the arrow ``types`` given per column."""
    types = types or {}
    arrays = {c: pa.array(df[c].to_numpy(), type=types.get(c)) if not isinstance(types.get(c), str)
              else pa.array(df[c].astype(str).to_numpy()) for c in df.columns}
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(arrays), path)
    return path


def lake3(root: Path, types=({}, {}, {}), drop=(None, None, None)) -> Path:
    for i, (t, d) in enumerate(zip(types, drop)):
        df = frame(i)
        if d is not None:
            df = df.drop(columns=[d])
        write(root / f"part-{i}.parquet", df, t)
    return root


# ------------------------------------------------------------------ type drift
def test_int_in_some_files_string_in_others_is_an_error_naming_column_and_files(tmp_path):
    lake = lake3(tmp_path / "lake", types=({}, {"c": "str"}, {}))
    for call in (lambda: daskpd.catstratpd(str(lake), target="y", feature="c"),
                 lambda: daskpd.importances(str(lake), target="y"),
                 lambda: daskpd.stratpd(str(lake), target="y", feature="x1"),  # stratified on every column, c too
                 lambda: load(str(lake))):
        with pytest.raises(DataError) as e:
            call()
        msg = str(e.value)
        assert "column 'c' has incompatible types" in msg
        assert "int64 in" in msg and "string in" in msg
        assert "part-1.parquet" in msg and "part-0.parquet" in msg


def test_drift_in_a_column_that_is_not_read_does_not_matter(tmp_path):
    lake = lake3(tmp_path / "lake", types=({}, {"c": "str"}, {}))
    r = daskpd.stratpd(str(lake), target="y", feature="x1", features=["x2"])
    assert r.feature == "x1" and np.isfinite(r.pd).sum() > 10
    assert list(load(str(lake), ["x1", "y"]).columns) == ["x1", "y"]


def test_target_drift_is_an_error_naming_the_target(tmp_path):
    lake = lake3(tmp_path / "lake", types=({}, {}, {"y": "str"}))
    with pytest.raises(DataError, match=r"column 'y' has incompatible types.*double in .*string in .*part-2"):
        daskpd.stratpd(str(lake), target="y", feature="x1", features=["x2"])


def test_number_and_boolean_do_not_mix(tmp_path):
    root = tmp_path / "lake"
    df = frame(0)
    df["b"] = df["c"] > 3
    write(root / "a.parquet", df)
    df2 = frame(1)
    df2["b"] = (df2["c"] > 3).astype(int)
    write(root / "b.parquet", df2)
    with pytest.raises(DataError, match="column 'b' has incompatible types: .*bool in .*int64 in|"
                                        "column 'b' has incompatible types"):
        load(str(root))


# ------------------------------------------------------------------ missing columns
def test_column_missing_from_the_first_file_is_named_not_dropped(tmp_path):
    lake = lake3(tmp_path / "lake", drop=("x2", None, None))
    # by default, a column added in later files is left out, with a note naming it
    with pytest.warns(UserWarning, match=r"1 missing from some files \('x2'\)"):
        t = daskpd.importances(str(lake), target="y")
    assert "x2" not in t.index and "x1" in t.index
    for call in (lambda: daskpd.importances(str(lake), target="y", features=["x1", "x2"]),
                 lambda: daskpd.stratpd(str(lake), target="y", feature="x2"),
                 lambda: daskpd.stratpd(str(lake), target="y", feature="x1", features=["x2", "c"]),
                 lambda: load(str(lake))):
        with pytest.raises(DataError) as e:
            call()
        assert "column 'x2' is missing from 1 of the 3 parquet files" in str(e.value)
        assert "part-0.parquet" in str(e.value)


def test_column_missing_from_a_later_file_is_named(tmp_path):
    lake = lake3(tmp_path / "lake", drop=(None, None, "x2"))
    with pytest.raises(DataError, match=r"column 'x2' is missing from 1 of the 3 parquet files: .*part-2\.parquet"):
        daskpd.stratpd(str(lake), target="y", feature="x2")
    # the default stratifying columns leave it out, and say so
    with pytest.warns(UserWarning, match=r"left out of the stratifying columns: 1 missing from some files \('x2'\)"):
        daskpd.stratpd(str(lake), target="y", feature="x1")
    # not read: no error
    r = daskpd.stratpd(str(lake), target="y", feature="x1", features=["c"])
    assert r.n_rows == 3 * N


# ------------------------------------------------------------------ safe widenings
def test_widening_int_widths_floats_and_nulls_gives_the_uniform_answer(tmp_path):
    """int32/int64, float32/float64, int/float and an all-null column: cast in every
    partition; the curves equal those of the same lake written with one type."""
    root = tmp_path / "drift"
    uniform = tmp_path / "uniform"
    frames = [frame(i) for i in range(3)]
    for i, df in enumerate(frames):
        df = df.assign(x1=df["x1"].astype("float32").astype("float64"))  # same values in both lakes
        write(uniform / f"p{i}.parquet", df.assign(note=["a"] * len(df)))
        types = [{"c": pa.int32(), "x1": pa.float32()}, {"c": pa.int64()}, {"c": pa.int16()}][i]
        note = pa.nulls(len(df)) if i == 1 else pa.array(["a"] * len(df))
        t = pa.table({**{c: pa.array(df[c].to_numpy(), type=types.get(c)) for c in df.columns}, "note": note})
        root.mkdir(exist_ok=True)
        pq.write_table(t, root / f"p{i}.parquet")
    lake = inspect_lake(str(root))
    assert lake.widened["c"]["to"] == "int64" and lake.widened["c"]["from"] == {"int32": 1, "int64": 1, "int16": 1}
    assert lake.widened["x1"] == {"to": "double", "from": {"float": 1, "double": 2}}
    assert lake.widened["note"]["to"] == "string"
    ddf = load(str(root))
    parts = [ddf.get_partition(i).compute().dtypes for i in range(ddf.npartitions)]
    for p in parts:
        assert p["c"] == np.dtype("int64") and p["x1"] == np.dtype("float64")
        assert p["note"] == ddf.dtypes["note"]
    a = daskpd.catstratpd(str(root), target="y", feature="c", features=["x1", "x2"])
    b = daskpd.catstratpd(str(uniform), target="y", feature="c", features=["x1", "x2"])
    assert list(a.categories) == list(b.categories) == list(range(7))  # never split by storage type
    np.testing.assert_allclose(a.pd, b.pd)
    s1 = daskpd.stratpd(str(root), target="y", feature="x1", features=["x2", "c"])
    s2 = daskpd.stratpd(str(uniform), target="y", feature="x1", features=["x2", "c"])
    np.testing.assert_allclose(s1.pd, s2.pd)


def test_int_and_float_widen_to_float(tmp_path):
    root = tmp_path / "lake"
    write(root / "a.parquet", frame(0))
    df = frame(1)
    df["c"] = df["c"].astype(float)
    df.loc[0, "c"] = np.nan  # the day with a missing value, written as float
    write(root / "b.parquet", df)
    lake = inspect_lake(str(root))
    assert lake.widened == {"c": {"to": "double", "from": {"int64": 1, "double": 1}}}
    ddf = load(str(root), ["c", "y"])
    assert ddf.dtypes["c"] == np.dtype("float64")
    assert ddf["c"].isna().sum().compute() == 1


# ------------------------------------------------------------------ damaged files
def _footer_junk(path: Path) -> None:
    raw = bytearray(path.read_bytes())
    n = int.from_bytes(raw[-8:-4], "little")  # the footer's length, before the closing PAR1
    raw[-8 - n:-8] = b"\xff" * n
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("damage, phrase", [
    ("empty", "is empty (0 bytes)"),
    ("truncated", "is truncated"),
    ("text", "is not a parquet file"),
    ("footer", "has a corrupt parquet footer"),
])
def test_damaged_file_is_named_with_what_is_wrong(tmp_path, damage, phrase):
    lake = lake3(tmp_path / "lake")
    bad = lake / "part-1.parquet"
    if damage == "empty":
        bad.write_bytes(b"")
    elif damage == "truncated":
        bad.write_bytes(bad.read_bytes()[: bad.stat().st_size // 2])
    elif damage == "text":
        bad.write_text("x1,x2,c,y\n1,2,3,4\n")
    else:
        _footer_junk(bad)
    for call in (lambda: load(str(lake)), lambda: daskpd.stratpd(str(lake), target="y", feature="x1", features=["x2"]),
                 lambda: load(str(bad))):
        with pytest.raises(DataError) as e:
            call()
        msg = str(e.value)
        assert "damaged parquet file" in msg and "part-1.parquet" in msg and phrase in msg, msg


def test_every_damaged_file_is_counted(tmp_path):
    lake = lake3(tmp_path / "lake")
    for i in range(3):
        (lake / f"part-{i}.parquet").write_bytes(b"")
    for i in range(3, 6):
        (lake / f"part-{i}.parquet").write_bytes(b"nope")
    with pytest.raises(DataError, match=r"damaged parquet files: .*part-0.parquet is empty.*\(and 3 more damaged"):
        load(str(lake))


def test_hidden_files_are_skipped_like_the_reader_does(tmp_path):
    lake = lake3(tmp_path / "lake")
    (lake / "_SUCCESS").write_bytes(b"")
    (lake / ".part-9.parquet.crc").write_bytes(b"junk")
    assert len(inspect_lake(str(lake)).files) == 3
    assert len(load(str(lake))) == 3 * N


def test_a_list_of_files_is_checked_too(tmp_path):
    lake = lake3(tmp_path / "lake", types=({}, {"c": "str"}, {}))
    files = [str(lake / f"part-{i}.parquet") for i in range(3)]
    with pytest.raises(DataError, match="column 'c' has incompatible types"):
        load(files)
    assert len(load(files[::2])) == 2 * N


# ------------------------------------------------------------------ column names
def test_duplicate_column_names_are_refused_for_pandas_and_dask(tmp_path):
    df = frame(0)
    dup = pd.concat([df[["x1"]], df], axis=1)  # x1 twice
    assert list(dup.columns).count("x1") == 2
    for data in (dup, dd.from_pandas(dup, npartitions=2)):
        for call in (lambda: daskpd.stratpd(data, target="y", feature="x1"), lambda: daskpd.catstratpd(data, target="y", feature="c"),
                     lambda: daskpd.importances(data, target="y")):
            with pytest.raises(DataError, match="duplicate column names: 'x1'"):
                call()


def test_duplicate_column_names_in_a_parquet_file_are_refused(tmp_path):
    df = frame(0)
    t = pa.Table.from_arrays([pa.array(df["x1"]), pa.array(df["x2"]), pa.array(df["y"])], names=["x1", "x1", "y"])
    pq.write_table(t, tmp_path / "dup.parquet")
    with pytest.raises(DataError, match=r"dup\.parquet has duplicate column names: 'x1'"):
        daskpd.stratpd(str(tmp_path / "dup.parquet"), target="y", feature="x1")


def test_non_string_column_names_are_named_by_their_text(tmp_path):
    """The integer column 3 is selected as '3', for pandas and dask inputs (a name given as
    a non-string is a clear error)."""
    df = frame(0).rename(columns={"x1": 3, "c": 7})
    ref = daskpd.stratpd(frame(0), target="y", feature="x1")
    for data in (df, dd.from_pandas(df, npartitions=2)):
        r = daskpd.stratpd(data, target="y", feature="3")
        assert r.feature == "3"
        np.testing.assert_allclose(r.pd, ref.pd)
        with pytest.raises(DataError, match="feature must be a column name"):
            daskpd.stratpd(data, target="y", feature=3)
        c = daskpd.catstratpd(data, target="y", feature="7")
        assert len(c.categories) == 7
        imp = daskpd.importances(data, target="y")
        assert sorted(imp.index) == ["3", "7", "x2"]


def test_the_integer_3_and_the_string_3_are_the_same_name(tmp_path):
    df = frame(0)
    df.columns = [3, "3", "c", "y"]
    for data in (df, dd.from_pandas(df, npartitions=2)):
        with pytest.raises(DataError, match=r"duplicate column names: '3' \(as text"):
            daskpd.stratpd(data, target="y", feature="c")
