"""Runs of one job that meet: two runs started at once on one output directory are
serialised by the job's lock (the second waits, says so, and plans on the first one's
state); ``history --fail-on-drift`` refuses a newest run without a readable manifest;
``n_trials`` is bounded and a scan that cannot fit in the workers' memory is refused
before it runs; a parquet file rewritten in place with the same size and its
modification time restored is seen as changed.  Real processes, real files."""
from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import daskpd
from daskpd import cli
from daskpd._errors import DataError, InvalidParameterError
from daskpd._constraints import MAX_TRIALS
from daskpd.datasets import Bulldozer
from daskpd.job import store
from daskpd.job.run import list_runs, run_job

DASKPD = Path(sys.executable).with_name("daskpd")
GEN = Bulldozer(random_state=0, n_models=20)

SPEC = """
name = "{name}"
target = "SalePrice"
features = ["YearMade", "MachineHours", "ProductGroup"]
sample_size = 2000
[source]
path = "{lake}"
[output]
plots = false
report = false
[run]
incremental = true
refit = "never"
"""


@pytest.fixture
def lake(tmp_path):
    lake = tmp_path / "lake"
    lake.mkdir()
    for i in range(3):
        GEN.chunk(i, 3000).to_parquet(lake / f"part-{i:03d}.parquet", index=False)
    return lake


def spec_file(tmp_path: Path, lake: Path, name: str = "meet", extra: str = "") -> Path:
    p = tmp_path / f"{name}.toml"
    p.write_text(SPEC.format(name=name, lake=lake) + extra)
    return p


def manifest(run_dir: Path) -> dict:
    return json.loads((run_dir / "manifest.json").read_text())


# ------------------------------------------------------------------ concurrent runs
def test_two_runs_started_at_once_are_serialised(dask_cluster, tmp_path, lake):
    spec, out = spec_file(tmp_path, lake), tmp_path / "out"
    cmd = [str(DASKPD), "run", str(spec), "--output", str(out), "--scheduler", dask_cluster, "--no-progress"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    got = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], got
    runs = list_runs(out / "meet")
    assert len(runs) == 2 and runs[0] != runs[1], runs  # two run directories, distinct ids
    first, second = (manifest(out / "meet" / r) for r in runs)
    # one after the other: the second planned on the state the first one kept
    assert first["incremental"]["mode"] == "full", first["incremental"]
    assert second["incremental"] == {**second["incremental"], "mode": "incremental", "base_run": runs[0]}
    assert second["reused_from"] == runs[0]
    assert os.readlink(out / "meet" / "latest") == runs[1]
    assert not [p.name for p in (out / "meet").iterdir() if p.name.startswith(".")]


def test_a_run_waits_for_the_lock_and_says_so(dask_cluster, tmp_path, lake):
    spec, out = spec_file(tmp_path, lake), tmp_path / "out"
    job_dir = out / "meet"
    with store.job_lock(job_dir) as waited:  # another run of the job holds it
        assert waited == 0.0
        proc = subprocess.Popen([str(DASKPD), "run", str(spec), "--output", str(out), "--scheduler", dask_cluster,
                                 "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
        reader.start()
        deadline = time.time() + 300
        while not any("waiting for it to finish" in ln for ln in lines):
            assert proc.poll() is None and time.time() < deadline, lines
            time.sleep(0.2)
        time.sleep(1.0)
        assert proc.poll() is None and list_runs(job_dir) == []  # nothing planned or written while it waits
    proc.wait(timeout=600)
    reader.join(timeout=10)
    assert proc.returncode == 0, lines
    waiting = [ln for ln in lines if "waiting for it to finish" in ln]
    assert len(waiting) == 1 and f"another run of this job is in progress in {str(job_dir)!r}" in waiting[0]
    assert any(ln.startswith("daskpd: the other run ended after ") for ln in lines), lines
    assert len(list_runs(job_dir)) == 1


def test_the_lock_of_a_job_directory_removed_while_waiting_is_taken_again(tmp_path):
    job_dir = tmp_path / "job"
    got = []

    def second():
        with store.job_lock(job_dir, got.append) as waited:
            got.append(("held", waited, job_dir.is_dir()))

    with store.job_lock(job_dir):
        t = threading.Thread(target=second)
        t.start()
        deadline = time.time() + 30
        while not got:
            assert time.time() < deadline
            time.sleep(0.05)
        job_dir.rmdir()  # a failed first run removes the empty directory it made
    t.join(timeout=30)
    assert got[0].startswith("daskpd: another run of this job is in progress")
    assert got[-1][0] == "held" and got[-1][1] > 0 and got[-1][2]


def test_free_run_id():
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        assert store.free_run_id(d, "20260101T000000Z") == "20260101T000000Z"
        (d / "20260101T000000Z").mkdir()
        assert store.free_run_id(d, "20260101T000000Z") == "20260101T000000Z-2"
        (d / "20260101T000000Z-2").mkdir()
        assert store.free_run_id(d, "20260101T000000Z") == "20260101T000000Z-3"


# ------------------------------------------------------------------ history
def test_history_fail_on_drift_refuses_a_newest_run_without_a_readable_manifest(dask_cluster, tmp_path, lake, capsys):
    spec, out = spec_file(tmp_path, lake, extra=""), tmp_path / "out"
    kw = dict(scheduler=dask_cluster, output=out, progress=False, out=False, log=False, incremental=False)
    run_job(spec, run_id="20260101T000000Z", **kw)
    run_job(spec, run_id="20260102T000000Z", **kw)
    job = str(out / "meet")
    assert cli.main(["history", job, "--fail-on-drift", "--no-write"]) == 0
    capsys.readouterr()
    # a newer run directory whose manifest is missing (the run was cut short, or the file removed)
    newest = out / "meet" / "20260103T000000Z"
    shutil.copytree(out / "meet" / "20260102T000000Z", newest)
    (newest / "manifest.json").unlink()
    assert cli.main(["history", job, "--fail-on-drift", "--no-write"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("daskpd: error: the newest run directory '20260103T000000Z' of ")
    assert "has no manifest.json" in err[0] and "--fail-on-drift cannot tell whether its curves drifted" in err[0]
    assert cli.main(["history", job, "--no-write"]) == 0  # without the flag: the complete runs, and a warning
    err = capsys.readouterr().err
    assert "daskpd: warning: the newest run directory '20260103T000000Z'" in err
    for text in ("{not json", "[1, 2]"):  # unreadable, or not an object
        (newest / "manifest.json").write_text(text)
        assert cli.main(["history", job, "--fail-on-drift", "--no-write"]) == 2
        err = capsys.readouterr().err
        assert "'20260103T000000Z'" in err and "Traceback" not in err, err
    shutil.rmtree(newest)
    (out / "meet" / "history").mkdir()  # the history's own output and the cache are not runs
    (out / "meet" / "cache").mkdir()
    assert cli.main(["history", job, "--fail-on-drift", "--no-write"]) == 0


# ------------------------------------------------------------------ n_trials and memory
def test_n_trials_has_an_upper_bound_everywhere(tmp_path, capsys):
    df = pd.DataFrame({"a": np.arange(200.0), "b": np.arange(200.0) % 7, "y": np.arange(200.0)})
    for call in (lambda: daskpd.stratpd(df, target="y", feature="a", n_trials=MAX_TRIALS + 1),
                 lambda: daskpd.catstratpd(df, target="y", feature="b", n_trials=10 ** 6),
                 lambda: daskpd.importances(df, target="y", n_trials=10 ** 6)):
        with pytest.raises(InvalidParameterError, match=r"n_trials must be an integer in \[1, 10000\]; got 10"):
            call()
    from sklearn.linear_model import LinearRegression

    model = LinearRegression().fit(df[["a", "b"]], df["y"])
    with pytest.raises(InvalidParameterError, match=r"n_trials must be an integer in \[1, 10000\]"):
        daskpd.partial_dependence(model, df, features=["a"], n_trials=10 ** 6)
    lake = tmp_path / "lake"
    lake.mkdir()
    df.to_parquet(lake / "part-0.parquet")
    for table in ("[importances]\nn_trials = 1000000\n", "[model]\npath = \"m.joblib\"\ntrust_model = true\n"
                                                         "n_trials = 1000000\n"):
        spec = tmp_path / "big.toml"
        spec.write_text(f'name = "big"\ntarget = "y"\n[source]\npath = "{lake}"\n' + table)
        assert cli.main(["validate", str(spec)]) == 2
        err = capsys.readouterr().err
        assert "n_trials': expected an integer in [1, 10000], got integer 1000000" in err, err
    assert MAX_TRIALS >= 1000  # a 90 % percentile band wants about 1,000 trials


def test_a_scan_that_cannot_fit_is_refused_before_it_runs(dask_cluster, tmp_path, lake, capsys):
    """10,000 trials (the bound) on 9,000 rows: every cell of the scan keeps 10,001 sets of
    sums, more than a 2 GiB worker can hold: refused with the figures after the first
    pass, before the scan; nothing is written."""
    spec, out = spec_file(tmp_path, lake, extra="[importances]\nn_trials = 10000\n"), tmp_path / "out"
    t0 = time.perf_counter()
    rc = cli.main(["run", str(spec), "--output", str(out), "--scheduler", dask_cluster, "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2, err
    line = [ln for ln in err.splitlines() if ln.startswith("daskpd: error:")]
    assert len(line) == 1 and "n_trials = 10,000 does not fit in memory: its largest task" in line[0], err
    assert "a worker thread has 1.60 GiB" in line[0] and "at most about " in line[0] and "nothing was scanned" in \
        line[0]
    most = int(line[0].split("at most about ")[1].split(" ")[0].replace(",", ""))
    assert 1 <= most < 10_000
    assert "Traceback" not in err and list_runs(out / "meet") == []
    assert time.perf_counter() - t0 < 300
    # the library says the same, before its scan
    with pytest.raises(DataError, match="does not fit in memory"):
        from distributed import Client

        with Client(dask_cluster, set_as_default=True):
            daskpd.importances(str(lake), target="SalePrice", features=["YearMade", "MachineHours"],
                               n_trials=10_000, sample_size=2000, progress=False)


# ------------------------------------------------------------------ fingerprints
def rewrite_in_place(path: Path, df: pd.DataFrame) -> None:
    """``df`` over ``path``: the same size, in place, the old modification time restored."""
    st = os.stat(path)
    tmp = path.with_suffix(".new")
    df.to_parquet(tmp, index=False, compression=None)
    assert os.path.getsize(tmp) == st.st_size
    with open(path, "r+b") as fh:
        fh.write(tmp.read_bytes())
    tmp.unlink()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (os.stat(path).st_mtime_ns, os.stat(path).st_size) == (st.st_mtime_ns, st.st_size)


def test_a_same_size_rewrite_with_its_mtime_restored_is_a_changed_file(dask_cluster, tmp_path):
    lake = tmp_path / "lake"
    lake.mkdir()
    rng = np.random.default_rng(0)
    frames = []
    for i in range(3):
        df = pd.DataFrame({"x1": rng.normal(size=3000), "x2": rng.normal(size=3000)})
        df["y"] = df.x1 ** 2 + df.x2 + rng.normal(scale=0.1, size=3000)
        df.to_parquet(lake / f"part-{i}.parquet", index=False, compression=None)
        frames.append(df)
    spec = tmp_path / "fp.toml"
    spec.write_text(f'name = "fp"\ntarget = "y"\nsample_size = 2000\n[source]\npath = "{lake}"\n'
                    '[output]\nplots = false\nreport = false\n[run]\nincremental = true\nrefit = "never"\n'
                    'first_pass_cache = true\n')
    out = tmp_path / "out"
    kw = dict(scheduler=dask_cluster, progress=False, out=False)
    run_job(spec, output=out, run_id="r1", log=False, **kw)
    rewrite_in_place(lake / "part-1.parquet", frames[1].assign(y=frames[1]["y"] * 2 - 1))
    log = io.StringIO()
    r2 = run_job(spec, output=out, run_id="r2", log=log, **kw)
    m = manifest(r2)
    assert m["incremental"]["mode"] == "full", m["incremental"]
    assert m["incremental"]["reason"].startswith("file 'part-1.parquet' changed since run r1")
    assert m["first_pass_cache"]["hits"] == 2 and m["first_pass_cache"]["misses"] == 1  # never the stale entry
    clean = run_job(spec, output=tmp_path / "clean", run_id="c", log=False, first_pass_cache=False, **kw)
    for f in ("curves.parquet", "importances.parquet"):
        pd.testing.assert_frame_equal(pd.read_parquet(r2 / f).drop(columns="run_id", errors="ignore"),
                                      pd.read_parquet(clean / f).drop(columns="run_id", errors="ignore"),
                                      check_exact=True)
