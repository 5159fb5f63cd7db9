"""The nightly new-against-old drift test on a real table (UCI Bike Sharing, hourly:
``../shared/data/bike_hour.csv``, skipped when absent), on a real cluster.

The table's rows are split at random: 12,376 "old" rows in a parquet lake of 4 files,
and a night's file of 5,000 held-out rows appended to it.  Night A appends the rows as
they are: nothing is flagged, and ``run --fail-on-drift`` exits 0.  Night B (another job)
appends the same rows with one planted change in the target's dependence on one
feature: ``cnt`` a quarter of its standard deviation higher from 17:00 on.  ``hr`` is
flagged, where it moved, and no other feature; ``run --fail-on-drift`` exits 3.  The two
nights differ only by the planted change, so it is what triggers the flag.

``pytest tests/job/test_job_newold_real.py -s`` prints both nights' tables."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from daskpd import cli
from daskpd.job.run import run_job

pytestmark = pytest.mark.realdata

FEATURES = ["hr", "temp", "hum", "weathersit"]
N_NEW = 5000

SPEC = """
name = "bike"
target = "cnt"
features = {features}
categorical = ["weathersit"]
[source]
path = "{lake}"
[output]
plots = false
report = false
[run]
incremental = true
refit = "never"
"""


@pytest.fixture(scope="module")
def bike(shared_data) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The old rows and the night's rows (a random split of the table)."""
    path = shared_data / "bike_hour.csv"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    df = pd.read_csv(path, usecols=FEATURES + ["cnt"])
    df = df[df["weathersit"] < 4]  # heavy rain: 3 rows of 17,379
    df["cnt"] = df["cnt"].astype(float)
    idx = np.random.default_rng(0).permutation(len(df))
    return df.iloc[idx[N_NEW:]].reset_index(drop=True), df.iloc[idx[:N_NEW]].reset_index(drop=True)


def night(tmp_path: Path, name: str, old: pd.DataFrame, new: pd.DataFrame, scheduler: str) -> tuple[int, Path]:
    """A job on a lake of the old rows (4 files), run once; then the night's file is
    appended and ``daskpd run --fail-on-drift`` makes the incremental run.  Returns its
    exit code and the run's directory."""
    lake = tmp_path / name / "lake"
    lake.mkdir(parents=True)
    size = -(-len(old) // 4)
    for i in range(4):
        old.iloc[i * size:(i + 1) * size].to_parquet(lake / f"old{i}.parquet", index=False)
    spec = tmp_path / name / "job.toml"
    spec.write_text(SPEC.format(features=json.dumps(FEATURES), lake=lake))
    out = tmp_path / name / "out"
    run_job(spec, scheduler=scheduler, output=out, run_id="r1", progress=False, out=False, log=False)
    new.to_parquet(lake / "new.parquet", index=False)
    rc = cli.main(["run", str(spec), "--scheduler", scheduler, "--output", str(out), "--run-id", "r2",
                   "--fail-on-drift", "-q"])
    return rc, out / "bike" / "r2"


def table(run_dir: Path, title: str) -> pd.DataFrame:
    t = pd.read_parquet(run_dir / "drift" / "comparisons.parquet")
    assert (t["test"] == "new-vs-old").all()
    t = t.set_index("feature")
    with pd.option_context("display.width", 200, "display.max_colwidth", 60):
        print(f"\n{title}\n" + t[["method", "status", "z", "z_crit", "drift", "mdc", "where"]].round(3).to_string())
    return t


def test_a_planted_shift_in_a_real_table_is_flagged_on_its_feature(dask_cluster, tmp_path, bike):
    old, new = bike
    step = 0.25 * pd.concat([old, new])["cnt"].std()  # 45.3 bikes an hour

    # night A: held-out rows of the same table, unchanged
    rc, r2 = night(tmp_path, "a", old, new, dask_cluster)
    a = table(r2, "night A: held-out rows, unchanged")
    assert rc == 0
    man = json.loads((r2 / "manifest.json").read_text())["drift"]
    assert len(man) == 1 and man[0]["status"] == "no-drift"
    assert (man[0]["rows_new"], man[0]["rows_old"]) == (N_NEW, len(old))
    assert sorted(a.index) == sorted(FEATURES) and (a["status"] == "ok").all()
    assert (a["z"] < a["z_crit"]).all()

    # night B: the same rows, cnt a step higher from 17:00 on (a change in the dependence on hr only)
    planted = new.assign(cnt=new["cnt"] + step * (new["hr"] >= 17))
    rc, r2 = night(tmp_path, "b", old, planted, dask_cluster)
    b = table(r2, f"night B: the same rows, cnt + {step:.1f} where hr >= 17")
    assert rc == 3
    man = json.loads((r2 / "manifest.json").read_text())["drift"]
    assert man[0]["status"] == "drift" and [d["feature"] for d in man[0]["drifted"]] == ["hr"]
    assert b.loc["hr", "status"] == "drifted" and b.loc["hr", "z"] > b.loc["hr", "z_crit"]
    assert (b.drop(index="hr")["status"] == "ok").all()
    assert b.loc["hr", "where"].startswith("hr in [")
    # where it moved: hours from 17:00 on, and the change's band holds the planted step
    pts = pd.read_parquet(r2 / "drift" / "points.parquet")
    hr = pts[pts["feature"] == "hr"]
    moved = hr[hr["significant"]]
    assert len(moved) and (moved["x_lo"] >= 16.5).all(), hr[["x_lo", "x_hi", "change", "t", "significant"]]
    assert ((moved["change_lo"] > 0) & (moved["change_lo"] < step) & (moved["change_hi"] > step)).all()
