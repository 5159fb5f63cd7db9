"""Incremental model-based job runs on a real cluster: the base run keeps its layout
(grids, ALE's edges and level order, the marginal plot's bins) and its partial sums in
``state/model/``; a run after appended files scans only them and adds their partials,
equal to one scan of every file under the base run's layout (bands included); a changed
model file, changed parameters or a model-free part run in full give a full run of the
model-based methods with the reason in the manifest."""
from __future__ import annotations

import dataclasses
import json
import pickle
import signal
from pathlib import Path

import joblib
import numpy as np
import pandas as pd
import pytest
from sklearn.compose import ColumnTransformer
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import OneHotEncoder
from sklearn.tree import DecisionTreeRegressor

from daskpd.datasets import Bulldozer
from daskpd.job import incremental as nightly
from daskpd.job import inputs, model_state
from daskpd.job.outputs import curves_frame
from daskpd.job.run import list_runs, run_job
from daskpd.job.spec_parse import load_spec
from daskpd.job.store import JobTerminated
from daskpd.model._multi import Increment, model_methods
from daskpd.model._params import ModelOptions, TrialOptions

FEATURES = ["YearMade", "MachineHours", "ProductGroup"]
MODEL_METHODS = ("partial_dependence", "ice", "ale", "marginal")
GEN = Bulldozer(random_state=0, n_models=20)
TRIALS = 4

SPEC = f"""
name = "nightly-model"
target = "SalePrice"
features = {json.dumps(FEATURES)}
methods = ["stratpd", "partial_dependence", "ice", "ale", "marginal", "pd_variance"]
sample_size = 3000
[source]
path = "lake"
[model]
path = "model.joblib"
trust_model = true
n_trials = {TRIALS}
[partial_dependence]
grid_resolution = 9
[ice]
grid_resolution = 5
n_lines = 7
[ale]
bins = 6
[marginal]
bins = 6
[pd_variance]
grid_resolution = 7
[output]
plots = false
report = false
[run]
incremental = true
refit = "never"
"""


def add_file(lake: Path, i: int, rows: int) -> Path:
    p = lake / f"part-{i:03d}.parquet"
    GEN.chunk(i, rows).to_parquet(p, index=False)
    return p


def fit_model(path: Path, depth: int) -> None:
    df = GEN.chunk(99, 3000)
    model = Pipeline([
        ("ct", ColumnTransformer([("oh", OneHotEncoder(handle_unknown="ignore"), ["ProductGroup"])],
                                 remainder="passthrough")),
        ("tree", DecisionTreeRegressor(max_depth=depth, random_state=0)),
    ]).fit(df[FEATURES], df["SalePrice"])
    joblib.dump(model, path)


def manifest(run_dir: Path) -> dict:
    return json.loads((run_dir / "manifest.json").read_text())


def model_curves(run_dir: Path) -> pd.DataFrame:
    c = pd.read_parquet(run_dir / "curves.parquet")
    c = c[c.method.isin(MODEL_METHODS)].astype({"category": object})
    return c.sort_values(["method", "feature", "x", "category"]).reset_index(drop=True)


@pytest.mark.cluster
def test_appended_files_add_to_the_model_based_sums(dask_cluster, tmp_path):
    lake = tmp_path / "lake"
    lake.mkdir()
    for i in range(3):
        add_file(lake, i, 1500)
    fit_model(tmp_path / "model.joblib", 6)
    spec_path = tmp_path / "job.toml"
    spec_path.write_text(SPEC)
    out = tmp_path / "out"

    def run(run_id):
        return run_job(spec_path, scheduler=dask_cluster, output=out, run_id=run_id, progress=False, out=False,
                       log=False)

    r1 = run("r1")
    m1 = manifest(r1)
    assert m1["incremental"]["model"]["mode"] == "full"
    assert m1["incremental"]["model"]["reason"].startswith("the model-free part runs in full (no earlier run")
    assert (r1 / "state" / "model" / "state.pkl").is_file() and m1["state"]["model_bytes"] > 0
    assert m1["state"]["bytes"] == nightly.state_bytes(r1)  # the model-free and the model-based state
    assert {"pd_std", "pd_lo", "pd_hi"} <= set(model_curves(r1).columns)

    add_file(lake, 10, 700)
    r2 = run("r2")
    m2 = manifest(r2)
    assert m2["incremental"]["mode"] == "incremental"
    assert m2["incremental"]["model"] == {"mode": "incremental", "base_run": "r1",
                                          "reason": "1 new file(s) added to run r1's model-based sums",
                                          "model_sha256": m1["incremental"]["model"]["model_sha256"]}
    assert m2["model_phases"] == ["model"]  # no summary or quantile pass: the grids are r1's
    # equal to one scan of every file under r1's layout
    spec = load_spec(spec_path)
    with open(r1 / "state" / "model" / "state.pkl", "rb") as fh:
        layout = pickle.load(fh)["layout"]
    methods = {m: dict(spec.params[m]) for m in spec.model_based}
    whole = model_methods(joblib.load(tmp_path / "model.joblib"), str(lake), m1["model_features"], methods,
                          target="SalePrice", model_options=ModelOptions(columns=m1["model_inputs"]),
                          trial_options=TrialOptions(random_state=0, n_trials=TRIALS), increment=Increment(layout))
    want = curves_frame({(m, f): whole.results[m][f] for m in MODEL_METHODS for f in m1["model_features"]})
    want = want.astype({"category": object}).sort_values(["method", "feature", "x", "category"])
    got = model_curves(r2)[list(want.columns)]
    pd.testing.assert_frame_equal(got, want.reset_index(drop=True), rtol=1e-12, atol=1e-12)
    imp = pd.read_parquet(r2 / "importances.parquet")
    imp = imp[imp.method == "pd_variance"].sort_values("feature").reset_index(drop=True)
    wv = whole.results["pd_variance"].to_frame().sort_values("feature").reset_index(drop=True)
    for c in ("importance", "importance_std", "importance_lo", "importance_hi"):
        np.testing.assert_allclose(imp[c], wv[c], rtol=1e-12, atol=1e-12)
    ice = pd.read_parquet(r2 / "ice.parquet")  # the sampled lines: the smallest row hashes of all files
    for f in m1["model_features"]:
        np.testing.assert_allclose(ice[ice.feature == f].ice.to_numpy(), whole.results["ice"][f].lines.reshape(-1),
                                   rtol=1e-12)

    # a new model file: the model-based methods run in full; the model-free part stays incremental
    fit_model(tmp_path / "model.joblib", 5)
    r3 = run("r3")
    m3 = manifest(r3)
    assert m3["incremental"]["mode"] == "incremental" and "reused_from" not in m3
    assert m3["incremental"]["model"]["mode"] == "full"
    assert m3["incremental"]["model"]["reason"].startswith("the model file changed since run r2 (sha256 ")
    assert m3["model_phases"][0] == "summary"
    # no new file: the model-free curves are those of the kept sums, r2's
    c2, c3 = (pd.read_parquet(r / "curves.parquet") for r in (r2, r3))
    c2, c3 = (c[c.method == "stratpd"].reset_index(drop=True) for c in (c2, c3))
    assert len(c3) and m3["state"]["n_rows"] == m2["state"]["n_rows"]
    pd.testing.assert_frame_equal(c3, c2, check_exact=False, rtol=1e-12)
    # changed parameters (the layout key) or a model-free part in full: a full run, the reason named
    key = model_state.layout_key(spec, m1["model_inputs"], m1["model_features"], m1["categorical"])
    sha = model_state.model_sha256(tmp_path / "model.joblib")
    free = nightly.Plan("incremental", "", [], "r3")
    assert model_state.plan(spec, out / "nightly-model", free, sha, key).mode == "incremental"
    changed = {**key, "params": {**key["params"], "ale": {"bins": 7}}}
    p = model_state.plan(spec, out / "nightly-model", free, sha, changed)
    assert p.mode == "full" and p.reason == "the model-based methods' grids or parameters changed since run r3 (params)"
    p = model_state.plan(spec, out / "nightly-model", nightly.Plan("full", "the schema changed", base_run="r3"), sha,
                         key)
    assert p.mode == "full" and p.reason == "the model-free part runs in full (the schema changed)"


MODEL_ONLY = SPEC.replace('methods = ["stratpd", "partial_dependence", "ice", "ale", "marginal", "pd_variance"]',
                          'methods = ["partial_dependence", "ice", "ale", "marginal", "pd_variance"]'
                          ).replace('name = "nightly-model"', 'name = "model-only"').replace(
                              f"n_trials = {TRIALS}", "n_trials = 1")  # the bands: the test above


@pytest.mark.cluster
def test_a_job_with_only_model_based_methods_runs_incrementally(dask_cluster, tmp_path, monkeypatch):
    """No model-free method: the files covered are kept next to the model-based state,
    an appended file is scanned alone (equal to one scan of every file under the kept
    layout), no new file reuses the base run, a killed run leaves the state as it was, a
    changed file or the refit rule (on the rows the layout was built from) give a full
    run, with the reason in the manifest."""
    lake = tmp_path / "lake"
    lake.mkdir()
    for i in range(3):
        add_file(lake, i, 1500)
    fit_model(tmp_path / "model.joblib", 6)
    spec_path = tmp_path / "job.toml"
    spec_path.write_text(MODEL_ONLY)
    out = tmp_path / "out"
    job_dir = out / "model-only"
    lines = []

    class Log:
        def write(self, s):
            lines.extend(x for x in s.splitlines() if x)

        def flush(self):
            pass

    def run(run_id):
        lines.clear()
        return run_job(spec_path, scheduler=dask_cluster, output=out, run_id=run_id, progress=False, out=False,
                       log=Log())

    r1 = run("r1")
    m1 = manifest(r1)
    assert m1["incremental"]["mode"] == "full"
    assert m1["incremental"]["reason"] == "no earlier run of this job keeps a state"
    assert m1["incremental"]["model"]["mode"] == "full"
    assert m1["incremental"]["model"]["reason"] == "no earlier run of this job keeps a state"
    assert "daskpd: full run: no earlier run of this job keeps a state" in lines
    assert set(m1["incremental"]["schema"]) == {"SalePrice", *FEATURES}
    assert sorted(p.name for p in (r1 / "state").iterdir()) == ["files.json", "model", "seal.json"]  # no trees, no sums
    assert m1["state"]["bytes"] == nightly.state_bytes(r1) and m1["state"]["sums_bytes"] == 0
    assert m1["state"]["n_rows"] == 4500 and "stratification" not in m1
    assert model_state.kept_rows(r1 / "state") == (4500, 4500)

    add_file(lake, 10, 300)
    r2 = run("r2")
    m2 = manifest(r2)
    assert m2["incremental"]["mode"] == "incremental" and m2["incremental"]["base_run"] == "r1"
    assert m2["incremental"]["new_files"] == [str(lake / "part-010.parquet")]
    assert m2["incremental"]["reason"] == "1 new file(s) (300 rows) since run r1"
    assert "daskpd: incremental run: 1 new file(s) (300 rows) since run r1" in lines
    assert m2["incremental"]["model"]["mode"] == "incremental"
    assert m2["model_phases"] == ["model"]  # no summary or quantile pass: the grids are r1's
    assert m2["state"]["n_rows"] == 4800 and model_state.kept_rows(r2 / "state") == (4800, 4500)
    spec = load_spec(spec_path)
    with open(r1 / "state" / "model" / "state.pkl", "rb") as fh:
        layout = pickle.load(fh)["layout"]
    whole = model_methods(joblib.load(tmp_path / "model.joblib"), str(lake), m1["model_features"],
                          {m: dict(spec.params[m]) for m in spec.model_based}, target="SalePrice",
                          model_options=ModelOptions(columns=m1["model_inputs"]),
                          trial_options=TrialOptions(random_state=0), increment=Increment(layout))
    want = curves_frame({(m, f): whole.results[m][f] for m in MODEL_METHODS for f in m1["model_features"]})
    want = want.astype({"category": object}).sort_values(["method", "feature", "x", "category"])
    pd.testing.assert_frame_equal(model_curves(r2)[list(want.columns)], want.reset_index(drop=True), rtol=1e-12,
                                  atol=1e-12)
    imp = pd.read_parquet(r2 / "importances.parquet").sort_values("feature").reset_index(drop=True)
    wv = whole.results["pd_variance"].to_frame().sort_values("feature").reset_index(drop=True)
    np.testing.assert_allclose(imp["importance"], wv["importance"], rtol=1e-12, atol=1e-12)
    ice = pd.read_parquet(r2 / "ice.parquet")  # the sampled lines: the smallest row hashes of all files
    for f in m1["model_features"]:
        np.testing.assert_allclose(ice[ice.feature == f].ice.to_numpy(), whole.results["ice"][f].lines.reshape(-1),
                                   rtol=1e-12)

    # no new file: the base run's files are the results, nothing is computed
    m3 = manifest(run("r3"))
    assert m3["reused_from"] == "r2" and m3["incremental"]["reason"] == "no new files since run r2"
    assert (job_dir / "r3" / "state" / "model" / "state.pkl").stat().st_ino == \
        (r2 / "state" / "model" / "state.pkl").stat().st_ino

    # a run killed while it writes the new state leaves the kept one as it was
    before = {p.relative_to(r2): p.read_bytes() for p in (r2 / "state").rglob("*") if p.is_file()}
    add_file(lake, 11, 300)
    save = model_state.save

    def killed(*args, **kwargs):
        save(*args, **kwargs)
        raise JobTerminated(signal.SIGTERM)

    monkeypatch.setattr(model_state, "save", killed)
    with pytest.raises(JobTerminated):
        run("r4")
    monkeypatch.setattr(model_state, "save", save)
    assert list_runs(job_dir) == ["r1", "r2", "r3"] and not [p for p in job_dir.iterdir() if p.name.startswith(".")]
    assert {p.relative_to(r2): p.read_bytes() for p in (r2 / "state").rglob("*") if p.is_file()} == before
    m4 = manifest(run("r4"))
    assert m4["incremental"]["reason"] == "1 new file(s) (300 rows) since run r3"
    assert m4["state"]["n_rows"] == 5100

    # the refit rule counts the rows appended since the layout was built: 600 of 4,500
    def plan(refit, share=0.1, **changed):
        job = dataclasses.replace(spec, run=dataclasses.replace(spec.run, refit=refit, refit_share=share), **changed)
        return nightly.plan(job, job_dir, inputs.open_job_request(job, str(lake)), inputs.file_stamps(str(lake)),
                            m1["model_inputs"])

    assert plan("auto", 0.2).mode == "incremental"
    assert plan("auto").reason == ('refit = "auto": 600 rows appended since the grids and bins were built exceed 10% '
                                   "of the 4,500 rows they were built from")
    assert plan("always").reason == 'refit = "always": the grids and bins are built again on every run'
    # the trees' settings touch no model-based result: changed, the run stays incremental; a seed does not
    assert plan("never", sample_size=999, tree_method="exact", stratify_on=("YearMade",)).mode == "incremental"
    assert plan("never", random_state=7).reason == "the job spec changed since run r4 (key(s) random_state)"

    # a changed file: a full run, the model-based layout built again
    add_file(lake, 0, 1400)
    r5 = run("r5")
    m5 = manifest(r5)
    assert m5["incremental"]["mode"] == "full"
    assert m5["incremental"]["reason"].startswith("file 'part-000.parquet' changed since run r4 (size or ")
    assert m5["incremental"]["model"]["mode"] == "full"
    assert m5["incremental"]["model"]["reason"] == m5["incremental"]["reason"]
    assert m5["model_phases"][0] == "summary" and model_state.kept_rows(r5 / "state") == (5000, 5000)
