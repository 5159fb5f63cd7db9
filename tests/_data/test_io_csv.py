"""CSV sources: reader options passed through (daskpd.read_csv / source.read_options);
a type that changes part-way is a DataError that says how to fix it."""
import numpy as np
import pandas as pd
import pytest

import daskpd
from daskpd import DataError
from daskpd._data.read import CsvSource, load


def _csv(tmp_path, n=4000):
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"x1": rng.uniform(0, 1, n), "x2": rng.uniform(0, 1, n)})
    df["code"] = rng.integers(0, 5, n).astype(str)
    df.loc[n - 50:, "code"] = "Z"  # numbers in the first blocks, a letter at the end
    df["y"] = 3 * df.x1 + df.x2 + (df.code == "Z") + rng.normal(0, 0.01, n)
    p = tmp_path / "data.csv"
    df.to_csv(p, index=False)
    return p, df


def test_read_options_pass_through_and_mismatch_is_named(tmp_path):
    p, df = _csv(tmp_path)
    # small blocks: dask guesses 'code' is an integer from the first block
    with pytest.raises(DataError, match=r"change type part-way.*code.*daskpd\.read_csv\(path, dtype="):
        daskpd.stratpd(daskpd.read_csv(p, blocksize="20KB"), target="y", feature="x1", progress=False)
    src = daskpd.read_csv(p, blocksize="20KB", dtype={"code": str})
    assert isinstance(src, CsvSource)
    ddf = load(src, ["code", "y"])
    assert ddf.npartitions > 1 and ddf.dtypes["code"] != np.int64
    r = daskpd.stratpd(src, target="y", feature="x1", progress=False)
    ref = daskpd.stratpd(df, target="y", feature="x1", progress=False)
    assert np.allclose(r.pd, ref.pd, equal_nan=True)
    cat = daskpd.catstratpd(src, target="y", feature="code", progress=False)
    assert "Z" in [str(c) for c in cat.categories]


def test_usecols_and_bad_options(tmp_path):
    p, _ = _csv(tmp_path)
    ddf = load(daskpd.read_csv(p, usecols=["x1", "y"]))
    assert list(ddf.columns) == ["x1", "y"]
    with pytest.raises(DataError, match="storage_options"):
        daskpd.read_csv(p, storage_options={})
    with pytest.raises(DataError, match=r"could not read data from .*data\.csv"):
        load(daskpd.read_csv(p, no_such_option=1))


def test_job_spec_read_options(tmp_path):
    from daskpd.job.spec_parse import load_spec

    p, _ = _csv(tmp_path)
    spec = tmp_path / "job.toml"
    spec.write_text(f'name = "csv"\ntarget = "y"\nmethods = ["stratpd"]\n[source]\npath = "{p}"\n'
                    '[source.read_options]\nblocksize = "20KB"\ndtype = {code = "str"}\n')
    s = load_spec(spec)
    assert s.source.read_options == {"blocksize": "20KB", "dtype": {"code": "str"}}
    from daskpd.job.inputs import job_data, open_job_request

    ddf = open_job_request(s, job_data(s, str(p))).dataset.frame
    assert ddf.npartitions > 1
    assert ddf["code"].compute().eq("Z").sum() == 50
    bad = tmp_path / "bad.toml"
    bad.write_text(f'name = "pq"\ntarget = "y"\nmethods = ["stratpd"]\n[source]\npath = "{tmp_path}"\n'
                   'format = "parquet"\n[source.read_options]\nsep = ";"\n')
    with pytest.raises(Exception, match="read_options.*CSV sources only"):
        load_spec(bad)
