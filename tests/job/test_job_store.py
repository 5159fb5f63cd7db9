"""daskpd.job.store (run directories, atomic commit) and daskpd.job.outputs (the run's
tables written straight from the shared result format), without a cluster."""
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

import daskpd
from daskpd.job import outputs, store
from daskpd.job.execute import RunResult


def _run(job_dir, rid):
    (job_dir / rid).mkdir(parents=True)
    (job_dir / rid / "manifest.json").write_text("{}")


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_list_runs_prune_latest_and_stale(tmp_path):
    for rid in ("20260103", "20260101", "20260102"):
        _run(tmp_path, rid)
    (tmp_path / "half").mkdir()  # no manifest: not a run
    dead = _dead_pid()
    (tmp_path / f".20260104.tmp-{dead}").mkdir()  # a killed run
    (tmp_path / f".20260105.tmp-{os.getpid()}").mkdir()  # ours, alive: kept
    assert store.list_runs(tmp_path) == ["20260101", "20260102", "20260103"]
    assert store.clean_stale(tmp_path) == [f".20260104.tmp-{dead}"]
    assert (tmp_path / f".20260105.tmp-{os.getpid()}").exists()
    assert store.update_latest(tmp_path) == "20260103"
    assert os.readlink(tmp_path / "latest") == "20260103"
    assert store.prune(tmp_path, keep=2) == ["20260101"]
    assert store.list_runs(tmp_path) == ["20260102", "20260103"]
    assert store.prune(tmp_path, keep=0) == []  # 0: keep everything
    assert store.list_runs(tmp_path / "missing") == []


def test_commit_new_and_replacing(tmp_path):
    tmp = tmp_path / ".r.tmp-1"
    tmp.mkdir()
    (tmp / "v").write_text("first")
    store.commit(tmp, tmp_path / "r")
    assert (tmp_path / "r" / "v").read_text() == "first" and not tmp.exists()


def test_names():
    assert store.safe_name("a b/c..d") == "a_b_c..d" and store.safe_name("...") == "feature"
    assert len(store.safe_name("x" * 200)) == 80
    rid = store.default_run_id()
    assert len(rid) == 16 and rid.endswith("Z") and store.TMP_RE.match(".r1.tmp-12")["pid"] == "12"


@pytest.fixture(scope="module")
def res():
    rng = np.random.default_rng(0)
    n = 3_000
    df = pd.DataFrame({"a": rng.integers(0, 30, n) / 3, "c": rng.choice([1, 2, 3], n), "b": rng.uniform(size=n)})
    df["y"] = df.a + df.c + df.b
    from daskpd._importance import strat_curves_and_importances

    imp = strat_curves_and_importances(df, target="y", categorical_features=["c"])
    r = RunResult()
    r.curves[("stratpd", "a")] = imp.curves["a"]
    r.curves[("catstratpd", "c")] = imp.curves["c"]

    def f(X):
        return X["a"].to_numpy() + X["c"].to_numpy()

    r.curves[("ice", "c")] = daskpd.ice(f, df, "c", columns=["a", "c"], categorical_features=["c"], n_lines=2)
    r.tables["importances"] = imp
    return r


def test_curves_frame_is_the_curves_own_frames(res):
    c = outputs.curves_frame(res.curves)
    assert list(c.columns[:9]) == outputs.CURVE_COLUMNS
    assert str(c.method.dtype) == "string" and str(c.category.dtype) == "string" and c.x.dtype == np.float64
    cat = c[c.method == "catstratpd"]
    assert sorted(cat.category) == ["1", "2", "3"]  # integer labels as text: "1", not "1.0"
    ice = c[c.method == "ice"]
    assert sorted(ice.category) == ["1", "2", "3"] and ice["count"].isna().all()
    for (method, feature), r in res.curves.items():
        mine = c[(c.method == method) & (c.feature == feature)]
        np.testing.assert_array_equal(mine.pd.to_numpy(), r.to_frame().pd.to_numpy())
    assert {"slope", "count_used", "group"} <= set(c.columns)  # method columns follow the head
    empty = outputs.curves_frame({})
    assert list(empty.columns) == outputs.CURVE_COLUMNS and len(empty) == 0


def test_importances_and_ice_frames(res, tmp_path):
    imp = outputs.importances_frame(res.tables)
    assert list(imp.columns[:5]) == outputs.IMPORTANCE_COLUMNS
    assert imp["rank"].tolist() == [1, 2, 3] and imp.importance.is_monotonic_decreasing
    ice = outputs.ice_frame(res.curves)
    assert list(ice.columns) == outputs.ICE_COLUMNS and ice.x.isna().all() and len(ice) == 2 * 3
    assert outputs.ice_frame({k: v for k, v in res.curves.items() if k[0] != "ice"}) is None
    curves, imp2 = outputs.write_tables(tmp_path, res, {"job": "j"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["curves.parquet", "ice.parquet", "importances.parquet"]
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "curves.parquet"), curves)
    rows = outputs.row_stats(res)
    assert rows["rows_read"] == 3_000 and rows["per_curve"]["ice:c"] == {"n_rows": 3_000}
