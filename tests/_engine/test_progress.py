"""Progress: a bar on a terminal; in a log (not a terminal) one plain line per stage with
the tasks done and the elapsed time -- no carriage returns, no escape codes -- for the
model-free and the model-based calls, on dask's threads and on a real cluster."""
from __future__ import annotations

import os
import pty
import re
import sys

import dask
import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import LinearRegression

import daskpd
from daskpd._engine.progress import current, progress_mode, reporting

LINE = re.compile(r"^daskpd: progress stage (\d+)(?:/\d+)? \(([^)]*)\): (.*)$")
NUMBERED = re.compile(r"^daskpd: progress stage (\d+)(?:/(\d+))? \(([^)]*)\): ")
DONE = re.compile(r"^([\d,]+)/([\d,]+) tasks done in [\d.]+ (s|min)$")


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = pd.DataFrame(rng.uniform(size=(4000, 3)), columns=["a", "b", "c"])
    y = 2 * X.a + X.b ** 2 + rng.normal(0, 0.01, len(X))
    return X, y, LinearRegression().fit(X, y)


def parse_lines(err: str) -> list[tuple[int, str, str]]:
    assert "\r" not in err and "\x1b" not in err, repr(err[:300])
    out = []
    for line in err.splitlines():
        m = LINE.match(line)
        if m:
            out.append((int(m.group(1)), m.group(2), m.group(3)))
    return out


def assert_one_line_per_stage(lines):
    assert lines
    stages = [s for s, _, _ in lines]
    assert stages == sorted(set(stages)), lines  # one line each, in order
    for _, name, text in lines:
        m = DONE.match(text)
        assert m and m.group(1) == m.group(2) and int(m.group(2).replace(",", "")) > 0, text
        assert name


def test_progress_modes(monkeypatch):
    assert progress_mode(False) is None
    assert progress_mode("bar") == "bar" and progress_mode("log") == "log"
    with pytest.raises(ValueError, match="progress must be"):
        progress_mode("loud")
    monkeypatch.setattr(sys, "stderr", open(os.devnull, "w"))
    assert progress_mode(None) == "log" and progress_mode(True) == "log"


def test_model_based_call_reports_in_a_log(capfd, data):
    X, _, m = data
    import dask.dataframe as dd

    daskpd.partial_dependence(m, dd.from_pandas(X, npartitions=3), ["a", "b"], grid_resolution=8)
    out, err = capfd.readouterr()
    assert "progress" not in out  # stdout stays for results
    assert_one_line_per_stage(parse_lines(err))
    daskpd.partial_dependence(m, X, ["a"], grid_resolution=8, progress=False)
    assert "progress" not in capfd.readouterr().err


def test_model_free_call_reports_in_a_log(capfd, data):
    X, y, _ = data
    daskpd.stratpd(X.assign(y=y), target="y", feature="a")
    assert_one_line_per_stage(parse_lines(capfd.readouterr().err))


def numbered(err: str) -> list[tuple[str, str | None, str]]:
    return [m.groups() for m in map(NUMBERED.match, err.splitlines()) if m]


def test_stages_are_named_and_numbered_per_call(capfd, data):
    """"stage n/m (name)": the model-free pipeline's stages by name, numbered from 1 in
    every call (not counting on across the calls of a process); a call that does not
    declare its stages numbers them without a total."""
    X, y, m = data
    df = X.assign(y=y)
    for _ in range(2):
        daskpd.stratpd(df, target="y", feature="a")
        assert numbered(capfd.readouterr().err) == [("1", "3", "sample"), ("2", "3", "fit trees"),
                                                    ("3", "3", "scan and finish")]
    daskpd.importances(df, target="y", pvalues=True, pvalues_n_trials=2, pvalues_sample_size=200)
    assert [(n, t, name) for n, t, name in numbered(capfd.readouterr().err)][-1] == ("4", "4", "p-values")
    daskpd.partial_dependence(m, X, ["a"], grid_resolution=8)
    stages = numbered(capfd.readouterr().err)
    assert [n for n, _, _ in stages] == [str(i) for i in range(1, len(stages) + 1)]
    assert stages[0][2] == "summary" and all(not name.startswith("daskpd-") for _, _, name in stages)


def test_long_stages_report_while_they_run(capfd, data):
    X, _, m = data
    import dask.dataframe as dd

    with dask.config.set({"daskpd.progress-interval": 0.0}):  # a line at every task
        daskpd.partial_dependence(m, dd.from_pandas(X, npartitions=4), ["a"], grid_resolution=8)
    lines = parse_lines(capfd.readouterr().err)
    running = [t for _, _, t in lines if "done in" not in t]
    assert running and all(re.match(r"^[\d,]+/[\d,]+ tasks \(\d+%\), [\d.]+ s$", t) for t in running), running


@pytest.mark.cluster
def test_model_based_call_on_a_cluster_reports_in_a_log(capfd, data, dask_cluster):
    from distributed import Client

    X, _, m = data
    import dask.dataframe as dd

    with Client(dask_cluster):
        daskpd.partial_dependence(m, dd.from_pandas(X, npartitions=3), ["a"], grid_resolution=8)
    assert_one_line_per_stage(parse_lines(capfd.readouterr().err))


def test_a_terminal_gets_a_bar(monkeypatch, data):
    X, _, m = data
    master, slave = pty.openpty()
    tty = os.fdopen(slave, "w", buffering=1)
    monkeypatch.setattr(sys, "stderr", tty)
    try:
        assert progress_mode(None) == "bar"
        import dask.dataframe as dd

        with dask.config.set({"daskpd.progress-interval": 0.0}):
            daskpd.partial_dependence(m, dd.from_pandas(X, npartitions=3), ["a"], grid_resolution=8)
        tty.flush()
        os.set_blocking(master, False)
        chunks = []
        while True:
            try:
                b = os.read(master, 65536)
            except (BlockingIOError, OSError):
                break
            if not b:
                break
            chunks.append(b)
        text = b"".join(chunks).decode(errors="replace")
    finally:
        tty.close()
        os.close(master)
    assert "Completed" in text  # the bar ("[####  ] | 40% Completed"), not log lines
    assert "daskpd 1 summary [" in text  # labelled with its stage
    assert "daskpd: progress stage" not in text


@pytest.mark.cluster
def test_cli_run_writes_plain_lines_into_a_log(tmp_path, capfd, dask_cluster):
    from daskpd import cli
    from daskpd.datasets import Quadratic

    Quadratic(random_state=5).frame(3000).to_parquet(tmp_path / "data.parquet")
    (tmp_path / "job.toml").write_text('name = "p"\ntarget = "y"\n[source]\npath = "data.parquet"\n')
    assert cli.main(["run", str(tmp_path / "job.toml"), "--scheduler", dask_cluster, "--output",
                     str(tmp_path / "out")]) == 0
    out, err = capfd.readouterr()
    assert "progress" not in out
    lines = parse_lines(err)  # no carriage return, no escape code anywhere in the log
    assert_one_line_per_stage(lines)
    assert err.count("\n") < 40  # a line per stage, not a frame per redraw


def test_a_call_inside_another_keeps_its_setting_and_gives_it_back(capfd, data):
    """The setting is a context entered by every public call: a call inside another (or
    inside a job) with ``progress=None`` shows what the enclosing one shows, an explicit
    setting holds for that call only, and the enclosing setting is back when it returns,
    or raises; outside any call nothing is set (an engine function shows nothing)."""
    X, y, m = data
    df = X.assign(y=y)
    assert current() is None
    with reporting(False):
        daskpd.stratpd(df, target="y", feature="a")  # None: the enclosing call's setting
        assert "progress" not in capfd.readouterr().err and current() is None
        daskpd.stratpd(df, target="y", feature="a", progress=True)  # its own, for this call
        assert_one_line_per_stage(parse_lines(capfd.readouterr().err))
        assert current() is None
    with reporting("log"):
        daskpd.partial_dependence(m, X, ["a"], grid_resolution=8, progress=False)
        assert "progress" not in capfd.readouterr().err and current() == "log"
        daskpd.partial_dependence(m, X, ["a"], grid_resolution=8)
        assert_one_line_per_stage(parse_lines(capfd.readouterr().err))

        class Failing(LinearRegression):
            def predict(self, X):
                raise RuntimeError("the model failed")

        bad = Failing().fit(X, y)
        with pytest.raises(RuntimeError, match="the model failed"):
            daskpd.partial_dependence(bad, X, ["a"], grid_resolution=8, engine="predict", progress=False)
        assert current() == "log"
    assert current() is None
    capfd.readouterr()
    from daskpd._engine.stats import summarize

    import dask.dataframe as dd

    summarize(dd.from_pandas(X, npartitions=2), {"a": "numeric"})  # outside any call: nothing shown
    assert "progress" not in capfd.readouterr().err


@pytest.mark.cluster
def test_a_job_without_progress_shows_none_and_leaves_no_setting(tmp_path, capfd, dask_cluster):
    """The job's computation is one context: the library calls it makes (the model-free
    scan, the model-based plan) show nothing under ``progress=False``, and nothing stays
    set after the run."""
    import joblib

    from daskpd.datasets import Quadratic
    from daskpd.job import run_job

    df = Quadratic(random_state=5).frame(3000)
    df.to_parquet(tmp_path / "data.parquet")
    feats = [c for c in df.columns if c != "y"]
    joblib.dump(LinearRegression().fit(df[feats], df.y), tmp_path / "model.joblib")
    (tmp_path / "job.toml").write_text('name = "p"\ntarget = "y"\nmethods = ["stratpd", "partial_dependence"]\n'
                                       '[source]\npath = "data.parquet"\n[model]\npath = "model.joblib"\ntrust_model = true\n')
    capfd.readouterr()
    run_job(tmp_path / "job.toml", scheduler=dask_cluster, output=tmp_path / "out", progress=False, out=False,
            log=False)
    assert "daskpd: progress" not in capfd.readouterr().err
    assert current() is None
    run_job(tmp_path / "job.toml", scheduler=dask_cluster, output=tmp_path / "out", progress=True, out=False,
            log=False)
    lines = parse_lines(capfd.readouterr().err)
    assert {name for _, name, _ in lines} >= {"sample", "fit trees", "scan and finish"}
    stages = [(n, name) for n, name, _ in lines]  # each stage once: the library calls inside the job
    assert len(stages) == len(set(stages)) and current() is None  # do not show it again
