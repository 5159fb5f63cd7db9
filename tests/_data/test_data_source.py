"""One data opening per request: the parquet schema is read once, the columns projected
from that one lazy frame (the real ``dask.dataframe.read_parquet``, counted by wrapping)."""
from __future__ import annotations

import functools

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from sklearn.ensemble import HistGradientBoostingRegressor

import daskpd
from daskpd._data.source import Dataset, open_dataset
from daskpd.model._compare import compare


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    rng = np.random.default_rng(0)
    X = pd.DataFrame({"a": rng.normal(size=3000), "b": rng.normal(size=3000),
                      "c": rng.integers(0, 4, 3000).astype(float)})
    y = X.a ** 2 + X.b + 0.1 * X.c
    path = tmp_path_factory.mktemp("lake") / "d.parquet"
    X.assign(y=y).to_parquet(path)
    model = HistGradientBoostingRegressor(max_iter=15, random_state=0).fit(X, y)
    return str(path), model


@pytest.fixture
def reads(monkeypatch):
    calls = []
    real = dd.read_parquet

    @functools.wraps(real)
    def counted(*args, **kwargs):
        calls.append(args[0] if args else kwargs.get("path"))
        return real(*args, **kwargs)

    monkeypatch.setattr(dd, "read_parquet", counted)
    return calls


REQUESTS = {
    "partial_dependence": lambda p, m: daskpd.partial_dependence(m, p, ["a", ("a", "b")], grid_resolution=8),
    "ice": lambda p, m: daskpd.ice(m, p, "a", grid_resolution=8, n_lines=5),
    "ale": lambda p, m: daskpd.ale(m, p, ["a", "b"], bins=5),
    "marginal": lambda p, m: daskpd.marginal(p, ["a", "c"], target="y", model=m, bins=5),
    "pd_variance": lambda p, m: daskpd.pd_variance(m, p, ["a", "b"], grid_resolution=8),
    "compare": lambda p, m: compare(m, p, "a", target="y", grid_resolution=8, bins=5),
    "stratpd": lambda p, m: daskpd.stratpd(p, target="y", feature="a"),
    "catstratpd": lambda p, m: daskpd.catstratpd(p, target="y", feature="c"),
    "importances": lambda p, m: daskpd.importances(p, target="y"),
}


@pytest.mark.parametrize("name", sorted(REQUESTS))
def test_one_parquet_open_per_request(lake, reads, name):
    path, model = lake
    REQUESTS[name](path, model)
    assert len(reads) == 1, (name, reads)


def test_dataset_projects_without_reading_again(lake, reads):
    path, _ = lake
    ds = open_dataset(path)
    assert isinstance(ds, Dataset) and ds.columns == ["a", "b", "c", "y"]
    assert open_dataset(ds) is ds
    part = ds.project(["y", "a"])
    assert list(part.columns) == ["y", "a"] and len(reads) == 1
    with pytest.raises(daskpd.DataError, match=r"'nope' not found in '.*d\.parquet'"):
        ds.check(["nope"])


def test_the_read_options_survive_repeated_reads(lake):
    """dask adds its own entries (one of them a closure that cannot be tokenized) to the
    ``arrow_to_pandas`` dict it is given: daskpd's options are passed as a copy, so the
    second read of a path in a process works and reads the same frame."""
    from daskpd._data.read import ARROW_TO_PANDAS, load

    path, _ = lake
    first = load(path, ["y", "a", "c"]).compute()
    second = load(path, ["y", "a", "c"]).compute()
    pd.testing.assert_frame_equal(first, second)
    pd.testing.assert_frame_equal(first.reset_index(drop=True), pd.read_parquet(path, columns=["y", "a", "c"]))
    assert dict(ARROW_TO_PANDAS) == {"split_blocks": True}


@pytest.mark.parametrize("many", [False, True])
def test_restrict_reads_some_files_with_the_whole_lakes_types(tmp_path, many):
    """An incremental night's new files are read as the whole lake reads them: a hive
    key a categorical over every value of the lake (not only the new files' values), a
    column widened across the lake (int in the new file, float in an older one) with the
    widened type.  ``many``: enough files for the lake to be read gathered."""
    n = 70 if many else 3
    rng = np.random.default_rng(0)
    paths = []
    for i in range(n):
        d = tmp_path / "lake" / f"region={'ab'[i % 2]}" / f"day={i}"
        d.mkdir(parents=True)
        df = pd.DataFrame({"x": rng.integers(0, 9, 20), "y": rng.normal(size=20)})
        if i == 0:
            df["x"] = df["x"].astype("float64")  # widened to float64 across the lake
        df.to_parquet(d / "part-0.parquet", index=False)
        paths.append(str(d / "part-0.parquet"))
    ds = open_dataset(str(tmp_path / "lake"), partition_bytes=1 << 20)
    new = ds.restrict(paths[-2:], partition_bytes=1 << 20)
    whole = ds.project(None).compute()
    got = new.project(None).compute()
    assert len(got) == 40
    assert dict(got.dtypes) == dict(whole.dtypes)  # categories included
    assert list(got["day"].cat.categories) == list(whole["day"].cat.categories)
    assert got["x"].dtype == np.float64
    tail = whole[whole["day"].isin([n - 2, n - 1])].reset_index(drop=True)
    pd.testing.assert_frame_equal(got.reset_index(drop=True), tail)
