"""The nightly job's drift test, new rows against old under one stratification, on a real
cluster: an unchanged night is not flagged, a planted change in the appended files is
flagged on the night it appears, on the right feature and where it moved (although the
merged curve moves by a tenth of the change, which the consecutive comparison does not
flag); ``run --fail-on-drift`` and ``history --fail-on-drift`` exit 3 on it; a night
that refits the trees and ``[history] window`` make their comparisons too."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from daskpd import cli
from daskpd.job.run import run_job

EFFECTS = np.array([0.0, 1.0, 3.0, 2.5])


def chunk(seed: int, n: int, x2_step: float = 0.0, c_step: float = 0.0) -> pd.DataFrame:
    """``y = 0.5 x1^2 + 4 x2 + effect[c] + N(0, 1)``, x2 in {0, .25, .., 1}; the planted
    changes: ``x2_step`` added where x2 = 1, ``c_step`` to category 3's effect."""
    rng = np.random.default_rng(seed)
    x1 = rng.integers(0, 11, n).astype(float)
    x2 = rng.integers(0, 5, n) / 4
    c = rng.integers(0, 4, n)
    y = 0.5 * x1 ** 2 + 4 * x2 + EFFECTS[c] + rng.normal(0, 1, n) + x2_step * (x2 == 1.0) + c_step * (c == 3)
    return pd.DataFrame({"x1": x1, "x2": x2, "c": c.astype(str), "y": y})


SPEC = """
name = "n"
target = "y"
features = ["x1", "x2", "c"]
categorical = ["c"]
[source]
path = "{lake}"
[output]
plots = false
report = false
[run]
incremental = true
refit = "{refit}"
{history}
"""


def setup(tmp_path: Path, refit: str, history: str = "") -> tuple[Path, Path]:
    lake = tmp_path / "lake"
    lake.mkdir()
    for i in range(4):
        chunk(i, 5000).to_parquet(lake / f"p{i:03d}.parquet", index=False)
    spec = tmp_path / "job.toml"
    spec.write_text(SPEC.format(lake=lake, refit=refit, history=history))
    return lake, spec


def comparisons(run_dir: Path) -> pd.DataFrame:
    return pd.read_parquet(run_dir / "drift" / "comparisons.parquet").set_index(["test", "feature"])


def test_an_incremental_night_flags_the_changed_feature_where_it_moved(dask_cluster, tmp_path):
    lake, spec = setup(tmp_path, "never")
    out = tmp_path / "out"

    def run(rid):
        return run_job(spec, scheduler=dask_cluster, output=out, run_id=rid, progress=False, out=False, log=False)

    r1 = run("r1")
    assert json.loads((r1 / "manifest.json").read_text())["drift"] == [
        {"test": "new-vs-old", "ref_run_id": None, "new_files": 0, "skipped": "no earlier run keeps a state"}]
    assert not (r1 / "drift").exists()

    chunk(10, 2000).to_parquet(lake / "p010.parquet", index=False)  # an unchanged night
    r2 = run("r2")
    m2 = json.loads((r2 / "manifest.json").read_text())["drift"]
    assert len(m2) == 1 and m2[0]["status"] == "no-drift" and m2[0]["ref_run_id"] == "r1"
    assert (m2[0]["rows_new"], m2[0]["rows_old"], m2[0]["counts"]) == (2000, 20000,
                                                                       {"drifted": 0, "ok": 3, "untested": 0})
    t2 = comparisons(r2)
    assert (t2["status"] == "ok").all() and (t2["mdc"] < 0.1).all()  # it could have seen a change of 0.1
    assert cli.main(["history", str(out / "n"), "--fail-on-drift", "--no-write"]) == 0

    # the next night's file: x2's curve 1.0 higher at x2 = 1 (a quarter of its range 4, one of its 5 positions)
    chunk(11, 2000, x2_step=1.0).to_parquet(lake / "p011.parquet", index=False)
    rc = cli.main(["run", str(spec), "--scheduler", dask_cluster, "--output", str(out), "--run-id", "r3",
                   "--fail-on-drift", "-q"])
    assert rc == 3
    t3 = comparisons(out / "n" / "r3")
    assert t3.loc[("new-vs-old", "x2"), "status"] == "drifted"
    assert (t3.drop(index=("new-vs-old", "x2"))["status"] == "ok").all()
    where = t3.loc[("new-vs-old", "x2"), "where"]
    assert where.startswith("x2 in [1, 1]: +")  # the position that moved, and the change with its band
    change = float(where.split(": ")[1].split(" ")[0])
    assert 0.7 < change < 1.3  # the planted step (1.0), less the median of the points that did not move
    pts = pd.read_parquet(out / "n" / "r3" / "drift" / "points.parquet")
    x2 = pts[pts["feature"] == "x2"].set_index("x")
    assert list(x2.index[x2["significant"]]) == [1.0]
    assert x2.loc[1.0, "change_lo"] > 0.5 and x2.loc[1.0, "change_hi"] < 1.5

    # the consecutive comparison of r2 and r3 sees the merged curve move by 2,000 / 24,000 of the step
    from daskpd.job.history import history

    h = history(out / "n", output=None)
    assert not (h.latest_pair()["status"] == "drifted").any()
    assert h.new_vs_old.set_index("feature").loc["x2", "status"] == "drifted"
    assert h.summary()["status"] == "drift" and h.summary()["new_vs_old"]["drifted"][0]["feature"] == "x2"
    assert cli.main(["history", str(out / "n"), "--fail-on-drift", "--no-write"]) == 3
    # the history page draws the new rows' curves against the old ones, the drifted one first
    assert cli.main(["history", str(out / "n")]) == 0
    page = (out / "n" / "history" / "history.html").read_text()
    assert "New rows against old (run r3)" in page
    assert page.index("new-vs-old: stratpd x2 &mdash; drifted") < page.index("new-vs-old: stratpd x1")


def test_a_refit_night_and_a_window_compare_too(dask_cluster, tmp_path):
    lake, spec = setup(tmp_path, "always", "[history]\nwindow = 2\nn_trials = 50")
    out = tmp_path / "out"

    def run(rid):
        return run_job(spec, scheduler=dask_cluster, output=out, run_id=rid, progress=False, out=False, log=False)

    run("r1")
    chunk(10, 2000).to_parquet(lake / "p010.parquet", index=False)
    r2 = run("r2")
    m2 = {d["test"]: d for d in json.loads((r2 / "manifest.json").read_text())["drift"]}
    assert m2["new-vs-old"]["status"] == "no-drift"  # refit: the new file scanned again under the new trees
    assert "only 1 earlier run(s) keep a state" in m2["window"]["skipped"]
    # category 3's effect 0.75 higher (a quarter of the effects' range 3) in the next night's file
    chunk(11, 2000, c_step=0.75).to_parquet(lake / "p011.parquet", index=False)
    r3 = run("r3")
    m3 = {d["test"]: d for d in json.loads((r3 / "manifest.json").read_text())["drift"]}
    assert m3["new-vs-old"]["ref_run_id"] == "r2" and m3["window"]["ref_run_id"] == "r1"
    assert (m3["window"]["new_files"], m3["window"]["rows_new"], m3["window"]["n_trials"]) == (2, 4000, 50)
    # the run's report says it first
    from daskpd.job.report import render_report

    man3 = json.loads((r3 / "manifest.json").read_text())
    html = render_report(r3, man3, pd.read_parquet(r3 / "curves.parquet"), pd.read_parquet(r3 / "importances.parquet"))
    assert "Drift: new rows against old" in html and "<b class=\"warn\">drift</b>: catstratpd c" in html
    t3 = comparisons(r3)
    for test in ("new-vs-old", "window"):
        drifted = t3.loc[test].index[t3.loc[test, "status"] == "drifted"].tolist()
        assert drifted == ["c"], (test, t3.loc[test, ["status", "z", "z_crit", "drift_sig"]])
        assert t3.loc[(test, "c"), "where"].startswith("3: +")


@pytest.mark.parametrize("key,value,message", [
    ("n_trials", "1", "history.n_trials"),
    ("alpha", "1.5", "history.alpha"),
    ("window", "0", "history.window"),
])
def test_history_keys_are_checked(tmp_path, key, value, message):
    from daskpd.job.spec import SpecError
    from daskpd.job.spec_parse import load_spec

    lake, spec = setup(tmp_path, "never", f"[history]\n{key} = {value}")
    with pytest.raises(SpecError, match=message):
        load_spec(spec)
    spec.write_text(SPEC.format(lake=lake, refit="never", history='[history]\nwindow = 2\nbaseline = "r1"'))
    with pytest.raises(SpecError, match="give one or the other"):
        load_spec(spec)


MODEL_SPEC = """
name = "m"
target = "y"
features = ["x1", "x2"]
methods = ["partial_dependence", "marginal"]
[source]
path = "{lake}"
[model]
path = "{model}"
trust_model = true
n_trials = 30
row_id = "id"
[partial_dependence]
grid_resolution = 5
[marginal]
bins = 5
[output]
plots = false
report = false
[run]
incremental = true
refit = "never"
"""


def test_model_based_curves_of_an_incremental_night_are_compared(dask_cluster, tmp_path):
    import joblib
    from sklearn.tree import DecisionTreeRegressor

    lake = tmp_path / "lake"
    lake.mkdir()
    for i in range(3):  # an id column: the model's trials weight each row on its own
        chunk(i, 4000).assign(id=np.arange(4000) + 4000 * i).to_parquet(lake / f"p{i:03d}.parquet", index=False)
    fit = chunk(99, 4000)
    joblib.dump(DecisionTreeRegressor(max_depth=6, random_state=0).fit(fit[["x1", "x2"]], fit["y"]),
                tmp_path / "model.joblib")
    spec = tmp_path / "job.toml"
    spec.write_text(MODEL_SPEC.format(lake=lake, model=tmp_path / "model.joblib"))
    out = tmp_path / "out"
    run_job(spec, scheduler=dask_cluster, output=out, run_id="r1", progress=False, out=False, log=False)
    # the appended rows' y is 8 higher at x2 = 1: their marginal plot (mean y a bin, whose noise x1's 0.5 x1^2
    # makes ~0.6) moves there; the model, and so its partial dependence on the rows' x, does not
    chunk(11, 3000, x2_step=8.0).assign(id=np.arange(3000) + 20_000).to_parquet(lake / "p011.parquet", index=False)
    r2 = run_job(spec, scheduler=dask_cluster, output=out, run_id="r2", progress=False, out=False, log=False)
    m2 = json.loads((r2 / "manifest.json").read_text())
    assert m2["incremental"]["model"]["mode"] == "incremental"
    t = pd.read_parquet(r2 / "drift" / "comparisons.parquet").set_index(["method", "feature"])
    assert sorted(t.index) == sorted((m, f) for m in ("partial_dependence", "marginal") for f in ("x1", "x2"))
    assert (t["rows_new"] == 3000).all() and (t["rows_old"] == 12000).all() and not t["paired"].any()
    assert t.loc[("marginal", "x2"), "status"] == "drifted"
    assert t.drop(index=[("marginal", "x2")])["status"].eq("ok").all(), t[["status", "z", "z_crit", "drift_sig"]]
    assert m2["drift"][0]["drifted"][0]["feature"] == "x2"
    assert t.loc[("marginal", "x2"), "where"].startswith("x2 in [1, 1]: +")
