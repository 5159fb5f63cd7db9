"""ReadOptions: how a request reads its input, built once and read by attribute."""
from __future__ import annotations

import dataclasses

import dask
import numpy as np
import pandas as pd
import pytest

from daskpd import DataError
from daskpd._data.options import AUTO, ReadOptions
from daskpd._data.request import open_request
from daskpd._engine.memory import partition_bytes


def frame(n=200):
    rng = np.random.default_rng(0)
    return pd.DataFrame({"x": rng.normal(size=n), "z": rng.normal(size=n), "c": rng.choice(list("ab"), n),
                         "y": rng.normal(size=n)})


def test_frozen_and_auto_partition_bytes_looked_up_when_opened():
    read = ReadOptions(partition_bytes=AUTO)
    with pytest.raises(dataclasses.FrozenInstanceError):
        read.filters = [("x", ">", 0)]
    with dask.config.set({"daskpd.partition-bytes": "3MiB"}):
        assert read.resolved_partition_bytes() == 3 * 2 ** 20 == partition_bytes()
    assert ReadOptions(partition_bytes=12345).resolved_partition_bytes() == 12345
    assert ReadOptions().resolved_partition_bytes() is None


def test_the_options_reach_the_request():
    df = frame()
    r = open_request(df, "y", read=ReadOptions(columns=["x", "c", "y"], categorical=["c"], exclude=["x"]))
    assert r.features == ["c"] and r.kinds == {"c": "categorical"} and r.categorical == ["c"]
    r = open_request(df, "y", ["x"], read=ReadOptions(row_id=["z"]))
    assert r.row_id == ["z"] and "z" not in r.stratify_on and r.trial_columns()[-1] == "z"
    # a job names its keys in the messages
    with pytest.raises(DataError, match=r"^key 'categorical' names column 'nope' not found"):
        open_request(df, "y", read=ReadOptions(categorical=["nope"], names={"categorical": "key 'categorical'"}))
    with pytest.raises(DataError, match=r"^parameter categorical_features names column 'nope' not found"):
        open_request(df, "y", read=ReadOptions(categorical=["nope"]))


def test_filters_apply_and_a_filter_on_a_missing_column_is_named(tmp_path):
    df = frame()
    path = tmp_path / "t.parquet"
    df.to_parquet(path)
    r = open_request(str(path), "y", ["x"], read=ReadOptions(filters=[("x", ">", 0)], partition_bytes=AUTO))
    assert len(r.project().compute()) == int((df.x > 0).sum())
    with pytest.raises(DataError, match=r"^filters name column 'nope'"):
        open_request(str(path), "y", ["x"], read=ReadOptions(filters=[("nope", ">", 0)]))
