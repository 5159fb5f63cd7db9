"""A job whose rows repeat: ``[model] row_id`` tells them apart in the model-based
trials' weights, on a real cluster -- the id column is read, never a default feature,
and the bands are those of the library called with ``row_id``; the model-free trials
resample leaves and need none."""
from __future__ import annotations

import json
import warnings

import joblib
import numpy as np
import pandas as pd
import pytest
from sklearn.tree import DecisionTreeRegressor

import daskpd
from daskpd.job.run import run_job

SPEC = """
name = "repeats"
target = "y"
methods = ["stratpd", "importances", "partial_dependence"]
sample_size = 5000
[source]
path = "rows.parquet"
[importances]
n_trials = 4
[model]
path = "model.joblib"
trust_model = true
n_trials = 4
row_id = "id"
[partial_dependence]
grid_resolution = 6
"""


def _rows(n: int = 6000) -> pd.DataFrame:
    rng = np.random.default_rng(5)
    df = pd.DataFrame({"x1": rng.integers(0, 6, n), "x2": rng.integers(0, 4, n)})
    df["y"] = (df.x1 + 2 * df.x2 + rng.integers(0, 2, n)).astype("int64")
    df["id"] = np.arange(n, dtype="int64")
    return df


@pytest.mark.cluster
def test_job_trials_tell_repeated_rows_apart_by_row_id(dask_cluster, tmp_path):
    df = _rows()
    df.to_parquet(tmp_path / "rows.parquet", index=False)
    model = DecisionTreeRegressor(max_depth=4, random_state=0).fit(df[["x1", "x2"]], df.y)
    joblib.dump(model, tmp_path / "model.joblib")
    (tmp_path / "job.toml").write_text(SPEC)
    with warnings.catch_warnings():
        warnings.simplefilter("error", daskpd.RepeatedRowsWarning)  # row_id: the rows do not repeat
        final = run_job(tmp_path / "job.toml", scheduler=dask_cluster, output=tmp_path / "out", run_id="r",
                        progress=False, out=False, log=False)
    m = json.loads((final / "manifest.json").read_text())
    assert m["features"] == ["x1", "x2"]  # the id is never a default feature
    assert m["input"]["columns_read"] == ["y", "x1", "x2", "id"]
    imp = pd.read_parquet(final / "importances.parquet")
    want = daskpd.strat_curves_and_importances(df, target="y", features=["x1", "x2"], n_trials=4,
                                               sample_size=5000, progress=False)
    got = imp.set_index("feature").loc[["x1", "x2"], "importance_std"].to_numpy()
    np.testing.assert_allclose(got, want.table.loc[["x1", "x2"], "importance_std"].to_numpy(), rtol=1e-9)
    curves = pd.read_parquet(final / "curves.parquet")
    pdp = curves[(curves.method == "partial_dependence") & (curves.feature == "x1")]
    ref = daskpd.partial_dependence(model, df, "x1", grid_resolution=6, method="brute", n_trials=4, row_id="id",
                                    progress=False)
    np.testing.assert_allclose(pdp.pd_std.to_numpy(), ref.band()["std"].ravel(), rtol=1e-9)
    with pytest.warns(daskpd.RepeatedRowsWarning):  # the same bands without row_id: rows alike share weights
        wide = daskpd.partial_dependence(model, df, "x1", grid_resolution=6, method="brute", n_trials=4,
                                         progress=False)
    assert np.nanmax(wide.band()["std"]) > 2 * np.nanmax(ref.band()["std"])
