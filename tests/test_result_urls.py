"""Results write to fsspec URLs (memory://, file://) atomically, leaving no temp file."""
from __future__ import annotations

import io
import json

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

import daskpd
from daskpd.datasets import Quadratic


@pytest.fixture(scope="module")
def res():
    return daskpd.stratpd(Quadratic(random_state=2).frame(3000), "y", "x1", progress=False)


def test_to_parquet_memory_url(res):
    import fsspec

    fs = fsspec.filesystem("memory")
    url = "memory://h15u-results/curve.parquet"
    assert res.to_parquet(url) == url
    with fs.open("/h15u-results/curve.parquet", "rb") as fh:
        t = pq.read_table(io.BytesIO(fh.read()))
    pd.testing.assert_frame_equal(t.to_pandas(), res.to_frame(), check_dtype=False)
    assert json.loads(t.schema.metadata[b"daskpd"])["method"] == "stratpd"
    res.to_parquet(url)  # replacing works
    assert fs.ls("/h15u-results", detail=False) == ["/h15u-results/curve.parquet"]  # no temp file left


def test_to_parquet_file_url_and_no_temp_file_on_failure(res, tmp_path):
    url = (tmp_path / "c.parquet").as_uri()
    res.to_parquet(url)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "c.parquet"), res.to_frame(), check_dtype=False)
    with pytest.raises(Exception):
        res.to_parquet("memory://h15u-fail/x.parquet", compression="no-such-codec")
    import fsspec

    fs = fsspec.filesystem("memory")
    assert not fs.exists("/h15u-fail") or fs.ls("/h15u-fail", detail=False) == []
    with pytest.raises(Exception):
        res.to_parquet(tmp_path / "y.parquet", compression="no-such-codec")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.parquet"]
