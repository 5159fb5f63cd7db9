"""The CLI on bad lakes: damaged files and schema drift exit 2 with one line naming the
file/column and write nothing; ``validate --check-data`` fails where the run would.
Real parquet files, real dask processes (the session's loopback cluster)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from daskpd import cli

DASKPD = Path(sys.executable).with_name("daskpd")
N = 4000


def frame(seed: int, n: int = N) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"x1": rng.uniform(-1, 1, n), "x2": rng.uniform(-1, 1, n), "c": rng.integers(0, 5, n)})
    df["y"] = 2 * df["x1"] + df["x2"] + df["c"] + rng.normal(0, 0.01, n)
    df["day"] = seed
    return df


def make_lake(root: Path, n_files: int = 3) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n_files):
        frame(i).to_parquet(root / f"part-{i}.parquet", index=False)
    return root


def spec(tmp_path: Path, lake: Path, extra: str = "", source_extra: str = "") -> Path:
    p = tmp_path / "job.toml"
    p.write_text(f'name = "robust"\ntarget = "y"\nmethods = ["stratpd", "catstratpd", "importances"]\n'
                 f'categorical = ["c"]\nsample_size = 3000\n{extra}\n[source]\npath = "{lake}"\n{source_extra}\n')
    return p


def run(argv, capsys):
    rc = cli.main(argv)
    cap = capsys.readouterr()
    return rc, cap.err


def assert_one_line_error(rc, err, *phrases):
    assert rc == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("daskpd: error: "), err
    for p in phrases:
        assert p in lines[0], err


def damage(path: Path, how: str) -> None:
    raw = path.read_bytes()
    if how == "empty":
        path.write_bytes(b"")
    elif how == "truncated":
        path.write_bytes(raw[: len(raw) * 2 // 3])
    elif how == "footer":
        b = bytearray(raw)
        n = int.from_bytes(b[-8:-4], "little")
        b[-8 - n:-8] = b"\xff" * n
        path.write_bytes(bytes(b))
    elif how == "page":  # the first data page's header: the footer is intact
        b = bytearray(raw)
        b[4:40] = b"\xff" * 36
        path.write_bytes(bytes(b))


# ------------------------------------------------------------------ damaged files
@pytest.mark.parametrize("how, phrase", [("empty", "is empty (0 bytes)"), ("truncated", "is truncated"),
                                         ("footer", "has a corrupt parquet footer")])
def test_damaged_file_exit_2_names_the_file_and_writes_nothing(tmp_path, capsys, how, phrase):
    lake = make_lake(tmp_path / "lake")
    damage(lake / "part-1.parquet", how)
    out = tmp_path / "out"
    # found from the footers, before any cluster is started
    rc, err = run(["run", str(spec(tmp_path, lake)), "--output", str(out), "--no-progress"], capsys)
    assert_one_line_error(rc, err, "part-1.parquet", phrase)
    assert not out.exists()
    rc, err = run(["validate", str(spec(tmp_path, lake)), "--check-data"], capsys)
    assert_one_line_error(rc, err, "part-1.parquet", phrase)


@pytest.mark.cluster
def test_damaged_data_page_found_mid_run_is_named_exit_2(dask_cluster, tmp_path, capsys):
    lake = make_lake(tmp_path / "lake")
    damage(lake / "part-2.parquet", "page")
    out = tmp_path / "out"
    rc, err = run(["run", str(spec(tmp_path, lake)), "--output", str(out), "--scheduler", dask_cluster,
                   "--no-progress"], capsys)
    last = err.strip().splitlines()[-1]  # after the progress lines: the one error line
    assert rc == 2 and "Traceback" not in err and last.startswith("daskpd: error: damaged parquet file: "), err
    assert "part-2.parquet cannot be read" in last and last.isprintable()
    assert not (out / "robust").exists()


def test_the_real_command_exits_2_without_a_traceback(tmp_path):
    lake = make_lake(tmp_path / "lake")
    (lake / "part-0.parquet").write_bytes(b"")
    p = subprocess.run([str(DASKPD), "run", str(spec(tmp_path, lake)), "--output", str(tmp_path / "out")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.startswith("daskpd: error: damaged parquet file:") and "part-0.parquet is empty" in p.stderr
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------ drift
def test_type_drift_and_missing_column_exit_2(tmp_path, capsys):
    lake = make_lake(tmp_path / "lake")
    df = frame(1)
    df["c"] = df["c"].astype(str)
    df.to_parquet(lake / "part-1.parquet", index=False)
    rc, err = run(["run", str(spec(tmp_path, lake)), "--output", str(tmp_path / "out")], capsys)
    assert_one_line_error(rc, err, "column 'c' has incompatible types", "part-1.parquet")
    rc, err = run(["validate", str(spec(tmp_path, lake)), "--check-data"], capsys)
    assert_one_line_error(rc, err, "column 'c' has incompatible types")
    # a drifting column the job excludes is not read: fine
    p = tmp_path / "job2.toml"
    p.write_text(f'name = "robust"\ntarget = "y"\nmethods = ["stratpd"]\nexclude = ["c"]\n[source]\npath = "{lake}"\n')
    rc, err = run(["validate", str(p), "--check-data"], capsys)
    assert rc == 0, err

    # a column missing from some files (a lake whose schema evolved): left out of the
    # default features with a note; named in 'features', a one-line error naming the file
    frame(0).drop(columns=["x2"]).to_parquet(lake / "part-1.parquet", index=False)
    rc = cli.main(["validate", str(spec(tmp_path, lake)), "--check-data"])
    out = capsys.readouterr().out
    assert rc == 0 and "'x2' (missing from some files)" in out, out
    rc, err = run(["validate", str(spec(tmp_path, lake, 'features = ["x1", "x2", "c"]')), "--check-data"], capsys)
    assert_one_line_error(rc, err, "column 'x2' is missing from 1 of the 3 parquet files", "part-1.parquet")


# ------------------------------------------------------------------ validate --check-data = the run's checks
def test_validate_check_data_ok_on_a_good_lake(tmp_path, capsys):
    lake = make_lake(tmp_path / "lake")
    rc = cli.main(["validate", str(spec(tmp_path, lake)), "--check-data"])
    out = capsys.readouterr().out
    assert rc == 0 and ": ok: job 'robust'" in out


@pytest.mark.cluster
def test_validate_check_data_fails_where_the_run_fails(dask_cluster, tmp_path, capsys):
    """A constant feature named in 'features' and a filter that leaves no row: validate
    says so, and so does the run.  The same constant feature in the default feature set
    is left out with a note by both (issue 15's rule)."""
    lake = make_lake(tmp_path / "lake")
    for i in range(3):
        frame(i).assign(day=7).to_parquet(lake / f"part-{i}.parquet", index=False)  # 'day' constant
    const = spec(tmp_path, lake, 'features = ["x1", "c", "day"]').rename(tmp_path / "const.toml")
    empty = spec(tmp_path, lake, 'exclude = ["day"]', 'filters = [["x1", ">", 5.0]]').rename(tmp_path / "empty.toml")
    for job, vmsg, rmsg in [(const, "feature 'day' is constant", "'day' is constant"),
                            (empty, "has no rows left after source.filters", "no rows")]:
        rc, err = run(["validate", str(job), "--check-data"], capsys)
        assert_one_line_error(rc, err, vmsg)
        rc, err = run(["run", str(job), "--output", str(tmp_path / "out"), "--scheduler", dask_cluster,
                       "--no-progress"], capsys)
        assert rc == 2 and rmsg in err and "Traceback" not in err, err
        assert not (tmp_path / "out" / "robust").exists()

    default = spec(tmp_path, lake).rename(tmp_path / "default.toml")
    rc = cli.main(["validate", str(default), "--check-data"])
    out = capsys.readouterr().out
    assert rc == 0 and "leaves out of the default features: 'day' (constant)" in out, out
    rc, err = run(["run", str(default), "--output", str(tmp_path / "out"), "--scheduler", dask_cluster,
                   "--no-progress"], capsys)
    assert rc == 0, err


def test_validate_constant_feature_without_statistics_is_found_by_a_scan(tmp_path, capsys):
    lake = tmp_path / "lake"
    lake.mkdir()
    for i in range(2):
        t = pa.Table.from_pandas(frame(i).assign(day=3), preserve_index=False)
        pq.write_table(t, lake / f"p{i}.parquet", write_statistics=False)
    rc, err = run(["validate", str(spec(tmp_path, lake, 'features = ["x1", "c", "day"]')), "--check-data"], capsys)
    assert_one_line_error(rc, err, "feature 'day' is constant")
    # and a healthy lake without statistics passes
    for i in range(2):
        pq.write_table(pa.Table.from_pandas(frame(i), preserve_index=False), lake / f"p{i}.parquet",
                       write_statistics=False)
    frame(5).assign(day=5).to_parquet(lake / "p2.parquet", index=False)
    rc, err = run(["validate", str(spec(tmp_path, lake)), "--check-data"], capsys)
    assert rc == 0, err


# ------------------------------------------------------------------ a scheduler that never answers
@pytest.fixture
def frozen_scheduler():
    """A plain TCP server on 127.0.0.1 that accepts connections and never replies (as a
    stopped scheduler process does)."""
    import socket
    import threading

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    held = []
    stop = threading.Event()

    def accept():
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except OSError:
                continue

    th = threading.Thread(target=accept, daemon=True)
    th.start()
    try:
        yield f"tcp://127.0.0.1:{srv.getsockname()[1]}"
    finally:
        stop.set()
        th.join()
        for c in held:
            c.close()
        srv.close()


def test_frozen_scheduler_times_out_with_a_clear_message(tmp_path, frozen_scheduler):
    lake = make_lake(tmp_path / "lake")
    job = spec(tmp_path, lake)
    out = tmp_path / "out"
    sched_file = tmp_path / "scheduler.json"
    sched_file.write_text(json.dumps({"address": frozen_scheduler, "type": "Scheduler"}))
    import os

    for how, extra, env in [("flag", ["--scheduler", frozen_scheduler, "--scheduler-timeout", "2"], {}),
                            ("config", ["--scheduler", str(sched_file)], {"DASK_DASKPD__SCHEDULER_TIMEOUT": "2s"}),
                            ("env address", [], {"DASK_SCHEDULER_ADDRESS": frozen_scheduler,
                                                 "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "2s"})]:
        p = subprocess.run([str(DASKPD), "run", str(job), "--output", str(out), "--no-progress", *extra],
                           capture_output=True, text=True, timeout=120, env=dict(os.environ, **env))
        assert p.returncode == 2, (how, p.stderr)
        last = p.stderr.strip().splitlines()[-1]
        assert "Traceback" not in p.stderr
        assert last.startswith(f"daskpd: error: cannot connect to the Dask scheduler at {frozen_scheduler}: no "
                               "answer within 2 s"), (how, last)
        assert "--scheduler-timeout" in last
        assert not (out / "robust").exists()


def test_probe_and_connect_in_the_library(frozen_scheduler, dask_cluster):
    from daskpd._engine.scheduler import SchedulerTimeout, connect, probe

    with pytest.raises(SchedulerTimeout, match="no answer within 1 s"):
        connect(frozen_scheduler, timeout=1)
    assert probe(dask_cluster, timeout=10)["type"] == "Scheduler"
    client, cluster = connect(dask_cluster, timeout="10s")
    try:
        assert cluster is None and client.submit(sum, [1, 2]).result(timeout=30) == 3
    finally:
        client.close()


def test_bad_scheduler_timeout_flag(tmp_path, capsys):
    lake = make_lake(tmp_path / "lake")
    rc, err = run(["run", str(spec(tmp_path, lake)), "--scheduler-timeout", "0", "--output", str(tmp_path / "o")],
                  capsys)
    assert_one_line_error(rc, err, "--scheduler-timeout must be > 0")


@pytest.mark.cluster
def test_widened_columns_are_counted_in_the_manifest(dask_cluster, tmp_path, capsys):
    lake = make_lake(tmp_path / "lake")
    t = pa.Table.from_pandas(frame(1), preserve_index=False)
    t = t.set_column(t.schema.get_field_index("c"), "c", t.column("c").cast(pa.int32()))
    pq.write_table(t, lake / "part-1.parquet")
    df = frame(2)
    df["x1"] = df["x1"].astype("float32")
    df.to_parquet(lake / "part-2.parquet", index=False)
    rc, err = run(["run", str(spec(tmp_path, lake)), "--output", str(tmp_path / "out"), "--scheduler", dask_cluster,
                   "--no-progress", "--run-id", "r1", "-q"], capsys)
    assert rc == 0, err
    m = json.loads((tmp_path / "out" / "robust" / "r1" / "manifest.json").read_text())
    assert m["input_schema"]["parquet_files"] == 3 and m["input_schema"]["rows_in_files"] == 3 * N
    assert m["input_schema"]["widened"] == {"c": {"to": "int64", "from": {"int64": 2, "int32": 1}},
                                            "x1": {"to": "double", "from": {"double": 2, "float": 1}}}
    assert m["rows"]["rows_read"] == 3 * N


@pytest.mark.parametrize("call", ["stratpd", "importances", "partial_dependence"])
def test_damaged_data_page_named_by_every_public_function(tmp_path, call):
    """The footer is intact, so the damage shows only while computing; the public
    functions name the file too (not only the job runner)."""
    import daskpd
    from daskpd import DataError

    lake = make_lake(tmp_path / "lake")
    damage(lake / "part-2.parquet", "page")
    with pytest.raises(DataError, match=r"damaged parquet file: .*part-2\.parquet cannot be read"):
        if call == "stratpd":
            daskpd.stratpd(str(lake), target="y", feature="x1", progress=False)
        elif call == "importances":
            daskpd.importances(str(lake), target="y", categorical_features=["c"], progress=False)
        else:
            from sklearn.linear_model import LinearRegression

            df = frame(0)
            model = LinearRegression().fit(df[["x1", "x2"]], df["y"])
            daskpd.partial_dependence(model, str(lake), "x1", progress=False)
