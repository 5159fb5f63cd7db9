"""Results write to fsspec URLs (memory://, file://) atomically, leaving no temp file."""
from __future__ import annotations

import warnings

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
    return daskpd.stratpd(Quadratic(random_state=2).frame(3000), target="y", feature="x1", progress=False)


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


def test_fsspec_glob_syntax_in_full(tmp_path):
    import fsspec

    from daskpd import DataError
    from daskpd._data.read import load

    fs = fsspec.filesystem("memory")
    for i in range(4):
        df = pd.DataFrame({"x": np.arange(10.0) + i, "z": np.arange(10.0) % 3, "y": np.arange(10.0)})
        df.to_parquet(tmp_path / f"p{i}.parquet")
        with fs.open(f"/h15u-glob/p{i}.parquet", "wb") as fh:
            df.to_parquet(fh)
    for pattern, n in (("p?.parquet", 40), ("p[0-2].parquet", 30), ("p[!0].parquet", 30), ("p*.parquet", 40)):
        assert len(load(str(tmp_path / pattern)).compute()) == n, pattern
        assert len(load(f"memory://h15u-glob/{pattern}").compute()) == n, pattern
    with pytest.raises(DataError, match="the glob matches no file"):
        load(str(tmp_path / "q[0-2].parquet"))
    with warnings.catch_warnings():  # 30 rows: too few for a good curve, but all read
        warnings.simplefilter("ignore", UserWarning)
        r = daskpd.stratpd(str(tmp_path / "p[0-2].parquet"), target="y", feature="x", progress=False,
                           min_samples_leaf=2, min_slopes_per_x=1)
    assert r.n_rows == 30
