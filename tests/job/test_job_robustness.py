"""Runs that end badly end cleanly: degenerate requests (a constant target, one feature
with nothing to stratify on: exit 2, one line, nothing written), a disk too
small (refused before computing), ``kill -9`` while the synthetic dataset is written
(cleaned up by the next run), SIGTERM on daskpd's own LocalCluster (one line, no
tracebacks).  Real processes, real files."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import daskpd
from daskpd import cli

DASKPD = Path(sys.executable).with_name("daskpd")


def spec_file(tmp_path: Path, text: str, name: str = "job.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def constant_target_frame(n: int = 3000) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"x1": rng.uniform(size=n), "x2": rng.uniform(size=n), "c": rng.integers(0, 4, n)})
    df["y"] = 5.0
    return df


# ------------------------------------------------------------------ degenerate requests
def test_constant_target_is_decided_on_all_rows_not_the_sample():
    """One row in 20,000 differs: not constant (the sample of 2,000 rows may miss it)."""
    df = constant_target_frame(20000)
    df.loc[12345, "y"] = 6.0
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        daskpd.stratpd(df, target="y", feature="x1", sample_size=2000)
    assert not any("is constant" in str(x.message) for x in w)


def run_cli(spec, out, dask_cluster, capsys):
    code = cli.main(["run", str(spec), "--output", str(out), "--scheduler", dask_cluster, "--no-progress",
                     "--run-id", "r1"])
    return code, capsys.readouterr()


@pytest.mark.cluster
@pytest.mark.parametrize("case", ["constant target", "nothing to stratify on"])
def test_degenerate_jobs_exit_2_with_one_line_and_write_nothing(dask_cluster, tmp_path, capsys, case):
    if case == "constant target":
        constant_target_frame().to_parquet(tmp_path / "d.parquet", index=False)
        want = "daskpd: error: target 'y' is constant: every row with a value holds 5 (of 3,000 rows read)"
    else:
        r = np.random.default_rng(0)
        pd.DataFrame({"x": r.uniform(size=2000), "y": r.normal(size=2000)}).to_parquet(tmp_path / "d.parquet",
                                                                                       index=False)
        want = "daskpd: error: feature 'x' has no other column to be stratified on (the stratifying columns: 'x')"
    spec = spec_file(tmp_path, 'name = "flat"\ntarget = "y"\n[output]\nplots = false\nreport = false\n[source]\n'
                               'path = "d.parquet"\n')
    code, got = run_cli(spec, tmp_path / "out", dask_cluster, capsys)
    assert code == 2
    assert got.err.splitlines()[-1].startswith(want), got.err
    assert "Traceback" not in got.err and not got.out
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*.parquet"))


@pytest.mark.cluster
def test_a_job_leaves_suspects_out_and_shows_support(dask_cluster, tmp_path, capsys):
    """Default features on a table with a row number, a title and a thinly supported
    categorical: the summary names what was left out and flags the thin feature;
    ``keep_suspect = true`` brings the suspects back."""
    r = np.random.default_rng(0)
    n = 4000
    df = pd.DataFrame({"x1": r.uniform(size=n), "x2": r.uniform(size=n)})
    k = np.where(r.uniform(size=n) < 0.01, r.integers(0, 4, n), (df.x2 * 4).astype(int).clip(0, 3))
    df["c"] = np.array(list("abcd"))[k]
    df["y"] = df.x1 + 3.0 * k + r.normal(0, 0.1, n)
    df = df.sort_values("y").reset_index(drop=True)
    df.insert(0, "row", np.arange(n))
    df["title"] = [f"Title {i}" for i in r.permutation(n)]
    df.to_parquet(tmp_path / "d.parquet", index=False)
    text = 'name = "s"\ntarget = "y"\nmethods = ["importances"]\n{}[source]\npath = "d.parquet"\n'
    spec = spec_file(tmp_path, text.format(""))
    code, got = run_cli(spec, tmp_path / "out", dask_cluster, capsys)
    assert code == 0, got.err
    assert ("left out of the default features: row (row number), title (likely identifier); keep_suspect = true "
            "keeps the suspect ones") in got.out
    assert "daskpd: note: job 's': 2 of 5 columns left out of the default features: 1 row number ('row'); 1 likely " \
           "identifier ('title')" in got.err
    line = next(x for x in got.out.splitlines() if x.strip().startswith("3. c"))
    assert "low_support:" in line and "rows used" in line, got.out
    run = tmp_path / "out" / "s" / "r1"
    imp = pd.read_parquet(run / "importances.parquet").set_index("feature")
    assert list(imp.index) == ["x1", "x2", "c"] and imp.loc["c", "support"] == "low_support"
    assert imp.loc["c", "rank"] == 3 and {"support_rows", "support_share"} <= set(imp.columns)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["skipped_features"] == {"row": "row number", "title": "likely identifier"}
    report = (run / "report.html").read_text()
    assert "low_support" in report and "support_<wbr>share" in report and "ranked after the supported" in report
    assert "Left out of the default features: row (row number), title (likely identifier)" in report
    spec = spec_file(tmp_path, text.format("keep_suspect = true\n"), "keep.toml")
    code, got = run_cli(spec, tmp_path / "out2", dask_cluster, capsys)
    assert code == 0 and "left out of the default features" not in got.out
    imp = pd.read_parquet(tmp_path / "out2" / "s" / "r1" / "importances.parquet")
    assert {"row", "title"} <= set(imp["feature"])


# ------------------------------------------------------------------ free space
def test_too_little_free_space_is_refused_before_computing(tmp_path, capsys):
    """``daskpd.output-reserve`` larger than the disk: the run stops up front (exit 2),
    before generating the synthetic data or starting a cluster, and writes nothing."""
    spec = spec_file(tmp_path, 'name = "big"\ntarget = "y"\n[source]\nsynthetic = "quadratic"\nrows = 1000\n')
    out = tmp_path / "out"
    env = dict(os.environ, DASK_DASKPD__OUTPUT_RESERVE="1PiB")
    p = subprocess.run([str(DASKPD), "run", str(spec), "--output", str(out)], capture_output=True, text=True,
                       timeout=120, env=env)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.startswith("daskpd: error: not enough free space for the synthetic dataset in ")
    assert not out.exists()
    # a parquet source: the run's outputs
    pd.DataFrame({"x": np.arange(100.0), "y": np.arange(100.0)}).to_parquet(tmp_path / "d.parquet")
    spec = spec_file(tmp_path, 'name = "big"\ntarget = "y"\n[source]\npath = "d.parquet"\n')
    p = subprocess.run([str(DASKPD), "run", str(spec), "--output", str(out)], capture_output=True, text=True,
                       timeout=120, env=env)
    assert p.returncode == 2 and "not enough free space for the run's outputs" in p.stderr, p.stderr
    assert not out.exists()


# ------------------------------------------------------------------ kill -9 while generating
@pytest.mark.cluster
def test_kill_9_during_synthetic_generation_is_cleaned_by_the_next_run(dask_cluster, tmp_path):
    out = tmp_path / "out"
    cache = out / ".cache" / "synthetic"
    spec = spec_file(tmp_path, 'name = "gen"\ntarget = "y"\nmethods = ["stratpd"]\nsample_size = 2000\n'
                               '[output]\nplots = false\nreport = false\n'
                               '[source]\nsynthetic = "quadratic"\nrows = 3000000\nrows_per_file = 20000\n')
    proc = subprocess.Popen([str(DASKPD), "run", str(spec), "--output", str(out), "--scheduler", dask_cluster],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        partial = []
        while time.monotonic() < deadline and proc.poll() is None:
            tmps = list(cache.glob(".*.tmp-*")) if cache.is_dir() else []
            partial = [f for t in tmps for f in t.rglob("*.parquet")]
            if partial:
                break
            time.sleep(0.05)
        assert partial, "the generation never started writing"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    stale = list(cache.glob(".*.tmp-*"))
    assert stale, "kill -9 should have left the hidden copy"
    # the next run (a smaller dataset) removes it
    spec2 = spec_file(tmp_path, spec.read_text().replace("rows = 3000000", "rows = 4000"), "job2.toml")
    assert cli.main(["run", str(spec2), "--output", str(out), "--scheduler", dask_cluster, "--no-progress",
                     "-q"]) == 0
    assert not any(p.exists() for p in stale)
    assert [p.name for p in cache.iterdir() if p.name.startswith(".")] == []


# ------------------------------------------------------------------ SIGTERM on our own LocalCluster
@pytest.mark.cluster
def test_sigterm_on_the_local_cluster_prints_one_clean_line(tmp_path):
    spec = spec_file(tmp_path, 'name = "term"\ntarget = "SalePrice"\n[source]\nsynthetic = "bulldozer"\n'
                               'rows = 300000\nrows_per_file = 10000\n')
    out = tmp_path / "out"
    proc = subprocess.Popen([str(DASKPD), "run", str(spec), "--output", str(out), "--no-progress",
                             "--n-workers", "2", "--threads-per-worker", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    timed = []  # (seconds since the start, line): a stray line shows when it came, before or after the signal
    t0 = time.perf_counter()
    reader = threading.Thread(target=lambda: timed.extend((time.perf_counter() - t0, ln) for ln in proc.stderr),
                              daemon=True)
    reader.start()
    t_sig = None
    try:
        deadline = time.time() + 300
        while not any(ln.startswith("daskpd: cluster") for _, ln in list(timed)):
            assert time.time() < deadline and proc.poll() is None, "the job did not start its cluster"
            time.sleep(0.05)
        time.sleep(1.0)
        assert proc.poll() is None, "the job finished before it could be terminated"
        t_sig = time.perf_counter() - t0
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        reader.join(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = "".join(ln for _, ln in timed)
    when = [(round(t - t_sig, 2) if t_sig is not None else None, ln) for t, ln in timed]  # seconds after the signal
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "Traceback" not in err and "CommClosedError" not in err and "WARNING" not in err, err
    assert err.strip().splitlines()[-1] == "daskpd: terminated by signal SIGTERM; no run was written"
    assert all(ln.startswith("daskpd: ") for ln in err.strip().splitlines()), when
    assert not (out / "term").exists()


def test_quiet_worker_points_a_worker_processes_output_at_devnull():
    """What a terminated run does on its own LocalCluster's worker processes: nothing
    they write afterwards reaches the terminal they share with the run; in the run's own
    process (a LocalCluster of threads) the streams are left alone."""
    code = ("import os, sys\nfrom daskpd.job.connection import quiet_worker\nprint('before', flush=True)\n"
            "quiet_worker({pid})\nprint('after')\nsys.stderr.write('\\n')\nos.write(2, b'raw\\n')\n")
    other = subprocess.run([sys.executable, "-c", code.format(pid=-1)], capture_output=True, text=True, timeout=120)
    assert other.returncode == 0, other.stderr
    assert (other.stdout, other.stderr) == ("before\n", "")
    own = subprocess.run([sys.executable, "-c", code.format(pid="os.getpid()")], capture_output=True, text=True,
                         timeout=120)
    assert (own.stdout, own.stderr) == ("before\nafter\n", "\nraw\n")
