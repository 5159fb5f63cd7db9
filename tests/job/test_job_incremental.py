"""Incremental job runs on a real cluster: appended files are scanned alone under the
previous run's stratification and their sums added (equal to a full scan under that
stratification); a changed or removed file, a spec change or the ``auto`` refit rule
give a full run with the reason in the manifest; a killed incremental run leaves the
previous run's state as it was."""
from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import daskpd
from daskpd import cli
from daskpd.datasets import Bulldozer
from daskpd.job import incremental as nightly
from daskpd.job import inputs
from daskpd.job.history import drift_table, load_runs
from daskpd.job.spec_parse import load_spec
from daskpd.job.run import list_runs, run_job
from daskpd.job.store import JobTerminated

FEATURES = ["YearMade", "MachineHours", "ProductGroup", "ModelID"]
GEN = Bulldozer(random_state=0, n_models=40)

SPEC = """
name = "nightly"
target = "SalePrice"
features = {features}
categorical = ["ModelID"]
sample_size = 4000
[source]
path = "{lake}"
[output]
plots = false
report = false
[run]
incremental = true
refit = "{refit}"
refit_share = 0.5
"""


def write_spec(tmp_path: Path, lake: Path, refit="auto", features=FEATURES, name="job.toml") -> Path:
    p = tmp_path / name
    p.write_text(SPEC.format(features=json.dumps(features), lake=lake, refit=refit))
    return p


def add_file(lake: Path, i: int, rows: int) -> Path:
    p = lake / f"part-{i:03d}.parquet"
    GEN.chunk(i, rows).to_parquet(p, index=False)
    return p


def manifest(run_dir: Path) -> dict:
    return json.loads((run_dir / "manifest.json").read_text())


def importances(run_dir: Path) -> pd.Series:
    t = pd.read_parquet(run_dir / "importances.parquet")
    return t.set_index("feature")["importance"].sort_index()


@pytest.fixture
def lake(tmp_path):
    lake = tmp_path / "lake"
    lake.mkdir()
    for i in range(3):
        add_file(lake, i, 2000)
    return lake


def test_appended_files_are_scanned_alone_and_anything_else_runs_in_full(dask_cluster, tmp_path, lake):
    spec = write_spec(tmp_path, lake)
    out = tmp_path / "out"

    def run(run_id, **kw):
        return run_job(spec, scheduler=dask_cluster, output=out, run_id=run_id, progress=False, out=False, log=False,
                       **kw)

    r1 = run("r1")
    m1 = manifest(r1)
    assert m1["incremental"]["mode"] == "full" and "no earlier run" in m1["incremental"]["reason"]
    assert m1["stratification"]["refitted"] is True and m1["stratification"]["fitted_rows"] == 6000
    assert m1["state"]["bytes"] > 0 and (r1 / "state" / "sums" / "state.json").is_file()
    assert not any(f.startswith("state/") for f in m1["files"])  # the state is reported by its size
    # the workers wrote the sums (their parts hard-linked into the state), no scratch directory is left
    sm1 = daskpd.ScanState.read_meta(r1 / "state" / "sums")
    assert all(".part-" in p["name"] for f in sm1["features"] for r in f["runs"] for p in r["parts"])
    assert not [d for d in os.listdir(out / "nightly") if d.startswith(".daskpd-state-")]

    new = [add_file(lake, 10, 1000), add_file(lake, 11, 1000)]  # +2,000 rows: a third of 6,000, under 50 %
    r2 = run("r2")
    m2 = manifest(r2)
    assert m2["incremental"] == {"mode": "incremental", "reason": m2["incremental"]["reason"],
                                 "new_files": [str(p) for p in new], "base_run": "r1",
                                 "schema": m1["incremental"]["schema"]}
    assert "2 new file(s) (2,000 rows) since run r1" in m2["incremental"]["reason"]
    assert m2["stratification"] == {**m1["stratification"], "refitted": False}
    assert m2["state"]["n_rows"] == 8000
    # the new files' sums are one more run (or compacted into one: more than half the cells of the first);
    # the numeric curves were updated, not finished again
    sm2 = daskpd.ScanState.read_meta(r2 / "state" / "sums")
    assert {len(f["runs"]) for f in sm2["features"]} <= {1, 2} and max(len(f["runs"]) for f in sm2["features"]) == 2
    # YearMade, MachineHours and the categorical ModelID, ProductGroup (kept normal equations)
    assert m2["model_free_phases_s"]["features_delta_finished"] == 4
    # equal to a full scan of every file under the same stratification
    strat = daskpd.Stratification.load(r1 / "state" / "stratification.pkl")
    whole = daskpd.strat_curves_and_importances(str(lake), target="SalePrice", features=FEATURES,
                                                categorical_features=["ModelID"], stratification=strat, progress=False)
    want = whole.table["importance"].sort_index()
    np.testing.assert_allclose(importances(r2).to_numpy(), want.to_numpy(), rtol=1e-9)
    assert list(importances(r2).index) == list(want.index)
    # history reads the two runs' manifests: same trees, new input -> every curve's cause is "data"
    causes = drift_table(load_runs(out / "nightly"))["cause"]
    assert len(causes) and set(causes) == {"data"}, causes.value_counts()

    # no new file: the state is finished again, nothing is scanned; the CLI's flags
    rc = cli.main(["run", str(spec), "--output", str(out), "--run-id", "r3", "--scheduler", dask_cluster, "-q",
                   "--incremental", "--refit", "never"])
    assert rc == 0
    m3 = manifest(out / "nightly" / "r3")
    assert m3["incremental"]["mode"] == "incremental" and m3["incremental"]["new_files"] == []
    assert m3["incremental"]["reason"] == "no new files since run r2"
    assert m3["reused_from"] == "r2" and m3["stratification"] == m2["stratification"]
    for f in ("importances.parquet", "state/sums/state.json"):  # the same files, linked
        assert (out / "nightly" / "r3" / f).stat().st_ino == (r2 / f).stat().st_ino
    pd.testing.assert_series_equal(importances(out / "nightly" / "r3"), importances(r2))

    # what the next run would do (its plan, written to the manifest as is): full runs that say why
    def plan(spec_path=spec):
        job = load_spec(spec_path)
        return nightly.plan(job, out / "nightly", inputs.open_job_request(job, str(lake)),
                            inputs.file_stamps(str(lake)))

    add_file(lake, 12, 2000)  # refit = "auto": 4,000 rows appended since the fit exceed half of 6,000
    p = plan()
    assert (p.mode, p.base_run) == ("full", "r3")
    assert p.reason == 'refit = "auto": 4,000 rows appended since the trees were fitted exceed 50% of the 6,000 ' \
                       'rows they were fitted on'
    assert plan(write_spec(tmp_path, lake, refit="never", name="never.toml")).mode == "incremental"
    assert plan(write_spec(tmp_path, lake, refit="always", name="always.toml")).reason.startswith('refit = "always"')
    spec2 = write_spec(tmp_path, lake, features=["YearMade", "ProductGroup", "ModelID"], name="job2.toml")
    assert plan(spec2).reason == "the job spec changed since run r3 (key(s) features)"
    (lake / "part-012.parquet").unlink()
    GEN.chunk(99, 2000).to_parquet(lake / "part-001.parquet", index=False)
    assert plan().reason.startswith("file 'part-001.parquet' changed since run r3")
    (lake / "part-001.parquet").unlink()
    assert plan().reason == "file 'part-001.parquet' was removed since run r3"
    late = GEN.chunk(1, 2000)
    late["YearMade"] = late["YearMade"].astype("float64")  # widened across the files: read as float64
    late.to_parquet(lake / "part-001.parquet", index=False)
    assert plan().reason.startswith("the schema changed since run r3: column 'YearMade'")


def test_killed_incremental_run_leaves_the_previous_state(dask_cluster, tmp_path, lake, monkeypatch):
    spec = write_spec(tmp_path, lake, refit="never")
    out = tmp_path / "out"
    kw = dict(scheduler=dask_cluster, output=out, progress=False, out=False, log=False)
    r1 = run_job(spec, run_id="r1", **kw)
    before = {p.relative_to(r1): p.read_bytes() for p in (r1 / "state").rglob("*") if p.is_file()}
    add_file(lake, 10, 1000)
    save = nightly.save_state

    def killed(*args, **kwargs):  # SIGTERM arrives while the new state is being written
        save(*args, **kwargs)
        raise JobTerminated(signal.SIGTERM)

    monkeypatch.setattr(nightly, "save_state", killed)
    with pytest.raises(JobTerminated):
        run_job(spec, run_id="r2", **kw)
    monkeypatch.setattr(nightly, "save_state", save)
    assert list_runs(out / "nightly") == ["r1"]
    assert sorted(p.name for p in (out / "nightly").iterdir() if p.name.startswith(".")) == []
    after = {p.relative_to(r1): p.read_bytes() for p in (r1 / "state").rglob("*") if p.is_file()}
    assert after == before
    m2 = manifest(run_job(spec, run_id="r2", **kw))  # the next run picks the state up again
    assert m2["incremental"]["mode"] == "incremental" and m2["incremental"]["base_run"] == "r1"
    assert m2["state"]["n_rows"] == 7000


def test_model_based_parameters_do_not_refit_the_model_free_part():
    """The model and the model-based methods' parameters are checked by their own state:
    changing them leaves the model-free part incremental (a model-free key still counts)."""
    base = {"target": "y", "features": ["a", "b"], "methods": ["stratpd", "ale"], "model": {"path": "m1.joblib"},
            "params": {"stratpd": {"min_slopes_per_x": 5}, "ale": {"bins": 6}}, "run": {"incremental": True}}
    other = {**base, "methods": ["stratpd", "ale", "ice"], "model": {"path": "m2.joblib"},
             "params": {"stratpd": {"min_slopes_per_x": 5}, "ale": {"bins": 7}}}
    assert nightly._spec_key(base) == nightly._spec_key(other)
    changed = {**base, "params": {"stratpd": {"min_slopes_per_x": 3}, "ale": {"bins": 6}}}
    assert nightly._spec_key(base) != nightly._spec_key(changed)
