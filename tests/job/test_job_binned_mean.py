"""The binned mean of y (``methods = [..., "binned_mean"]``) in a job on a real
cluster: its curves in curves.parquet next to StratPD's and CatStratPD's, equal to a
pandas groupby of the lake; kept in the state (keyed (feature, estimator)), merged by an
incremental night, compared new against old and read by ``daskpd history`` like any
other method's curves; a state without it gives a full run that says why."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import daskpd
from daskpd import cli
from daskpd._data.encode import as_float
from daskpd.datasets import Bulldozer
from daskpd.job import incremental as nightly
from daskpd.job import inputs
from daskpd.job.history import drift_table, load_runs
from daskpd.job.run import run_job
from daskpd.job.spec import SpecError
from daskpd.job.spec_parse import load_spec

GEN = Bulldozer(random_state=3, n_models=30)
NUMERIC = ["YearMade", "MachineHours"]

SPEC = """
name = "means"
target = "SalePrice"
features = ["YearMade", "MachineHours", "ProductGroup"]
methods = {methods}
sample_size = 3000
[source]
path = "{lake}"
[output]
plots = {plots}
report = {plots}
[run]
incremental = true
refit = "never"
[history]
n_trials = 20
"""


def write_spec(tmp_path: Path, lake: Path, methods, plots=False, name="job.toml") -> Path:
    p = tmp_path / name
    p.write_text(SPEC.format(methods=json.dumps(methods), lake=lake, plots=str(plots).lower()))
    return p


def add_file(lake: Path, i: int, rows: int) -> None:
    GEN.chunk(i, rows).to_parquet(lake / f"part-{i:03d}.parquet", index=False)


def reference(lake: Path, feature: str, coder) -> pd.DataFrame:
    """The binned mean by pandas over every file of the lake: per position code, mean x,
    mean y and rows."""
    df = pd.read_parquet(lake)
    x, y = as_float(df[feature]), as_float(df["SalePrice"])
    ok = np.isfinite(x) & np.isfinite(y)
    g = pd.DataFrame({"code": coder.encode_float(x[ok]), "x": x[ok], "y": y[ok]}).groupby("code")
    return pd.DataFrame({"x": g["x"].mean(), "mean": g["y"].mean(), "count": g.size()})


def check_curves(run_dir: Path, lake: Path) -> None:
    curves = pd.read_parquet(run_dir / "curves.parquet")
    assert set(curves["method"]) == {"stratpd", "catstratpd", "binned_mean"}
    mm = curves[curves["method"] == "binned_mean"]
    assert sorted(mm["feature"].unique()) == sorted(NUMERIC)  # the numeric features only
    state = daskpd.ScanState.load(run_dir / "state" / "sums")
    for f in NUMERIC:
        ref = reference(lake, f, state.features[(f, "binned_mean")].coder)
        got = mm[mm["feature"] == f]
        np.testing.assert_array_equal(got["count"].to_numpy(), ref["count"].to_numpy())
        np.testing.assert_allclose(got["pd"].to_numpy(), ref["mean"].to_numpy(), rtol=1e-10)
        np.testing.assert_allclose(got["x"].to_numpy(), ref["x"].to_numpy(), rtol=1e-10)
        assert int(got["n_rows"].iloc[0]) == state.n_rows


def test_a_job_runs_the_binned_mean_nightly_and_history_reads_it(dask_cluster, tmp_path):
    lake = tmp_path / "lake"
    lake.mkdir()
    for i in range(3):
        add_file(lake, i, 1500)
    out = tmp_path / "out"
    spec = write_spec(tmp_path, lake, ["stratpd", "catstratpd", "binned_mean"], plots=True)

    def run(run_id, path=spec):
        return run_job(path, scheduler=dask_cluster, output=out, run_id=run_id, progress=False, out=False, log=False)

    r1 = run("r1")
    check_curves(r1, lake)
    meta = daskpd.ScanState.read_meta(r1 / "state" / "sums")
    assert [(f["feature"], f["kind"]) for f in meta["features"]] == [
        ("YearMade", "numeric"), ("MachineHours", "numeric"), ("ProductGroup", "categorical"),
        ("YearMade", "binned_mean"), ("MachineHours", "binned_mean")]
    man = json.loads((r1 / "manifest.json").read_text())
    plotted = {(p["method"], p["feature"]) for p in man["plots"] if p["kind"] == "curve"}
    assert {("binned_mean", f) for f in NUMERIC} <= plotted
    html = (r1 / "report.html").read_text()
    assert "binned_mean" in html and "Binned mean of the target" in html

    add_file(lake, 10, 800)  # appended: an incremental night
    r2 = run("r2")
    m2 = json.loads((r2 / "manifest.json").read_text())
    assert m2["incremental"]["mode"] == "incremental" and m2["state"]["n_rows"] == 5300
    check_curves(r2, lake)  # the kept sums and the new file's, merged: the whole lake's binned mean
    # compared new against old like the other curves (tested: its trials resample the rows' parts)
    recs = pd.read_parquet(r2 / "drift" / "comparisons.parquet")
    mine = recs[recs["method"] == "binned_mean"]
    assert sorted(mine["feature"]) == sorted(NUMERIC)
    assert set(mine["status"]) <= {"ok", "drifted"} and (mine["n_trials"] == 20).all()

    # daskpd history: its curves are paired across the runs, the new file their cause
    assert cli.main(["history", str(out / "means"), "--no-write"]) == 0
    t = drift_table(load_runs(out / "means"))
    t = t[t["method"] == "binned_mean"]
    assert sorted(t["feature"]) == sorted(NUMERIC) and set(t["cause"]) == {"data"}

    # a spec without it, then with it again: the state must hold its sums, so a full run says why
    plain = write_spec(tmp_path, lake, ["stratpd", "catstratpd"], name="plain.toml")
    r3 = run("r3", plain)
    assert json.loads((r3 / "manifest.json").read_text())["incremental"]["mode"] == "full"
    assert not any(f["kind"] == "binned_mean" for f in daskpd.ScanState.read_meta(r3 / "state" / "sums")["features"])
    job = load_spec(spec)
    p = nightly.plan(job, out / "means", inputs.open_job_request(job, str(lake)), inputs.file_stamps(str(lake)))
    assert p.mode == "full" and p.reason.startswith("the job spec changed since run r3 (key(s) methods")


def test_an_unknown_method_names_the_key_and_the_allowed_values(tmp_path):
    spec = write_spec(tmp_path, tmp_path, ["stratpd", "binned_means"])
    with pytest.raises(SpecError) as exc:
        load_spec(spec)
    msg = str(exc.value)
    assert "key 'methods': unknown method 'binned_means' (did you mean 'binned_mean'?)" in msg
    assert "binned_mean" in msg.split("expected some of")[1]
    # the estimator's name is binned_mean ("marginal_mean" is CatStratPD's column, "marginal" the model's plot)
    with pytest.raises(SpecError, match="key 'methods': unknown method 'marginal_mean'"):
        load_spec(write_spec(tmp_path, tmp_path, ["stratpd", "marginal_mean"], name="old.toml"))
