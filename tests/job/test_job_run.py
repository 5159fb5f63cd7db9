"""Jobs end to end: the CLI on a LocalCluster, real scheduler/worker processes, TLS,
SIGTERM mid-job, atomic and idempotent reruns, lakes, CSV, bad data."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from daskpd import cli
from daskpd.datasets import Bulldozer
from daskpd.job import run as jobrun
from daskpd.job import connection, store
from daskpd.job.run import list_runs, run_job

REPO = Path(__file__).resolve().parents[2]
DASKPD = Path(sys.executable).with_name("daskpd")
FEATURES = ["YearMade", "MachineHours", "ProductGroup", "ModelID"]


def make_lake(root: Path, years=range(2000, 2012), rows_per_year=4000, hours_effect=0.0, night=0) -> Path:
    """A hive-partitioned lake root/auctions/sale_year=Y/part-0.parquet with an extra column.

    ``night``: another sample of rows from the same world (same models, same effects);
    ``hours_effect`` adds ``hours_effect * MachineHours`` to SalePrice (a changed world).
    """
    gen = Bulldozer(random_state=0, n_models=40)
    lake = root / "auctions"
    for i, y in enumerate(years):
        df = gen.chunk(1000 * night + i, rows_per_year)
        df["SalePrice"] = df["SalePrice"] + hours_effect * df["MachineHours"]
        df["notes"] = "free text that no job should read " * 3
        d = lake / f"sale_year={y}"
        d.mkdir(parents=True, exist_ok=True)
        df.to_parquet(d / "part-0.parquet", index=False)
    return root


def spec_file(tmp_path: Path, text: str, name="job.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


SMALL = """
name = "small"
target = "y"
methods = ["stratpd", "importances"]
sample_size = 5000
[source]
synthetic = "quadratic"
rows = {rows}
rows_per_file = 5000
"""


def quiet(**kw):
    return dict(progress=False, out=False, log=False, **kw)


def hidden(job_dir: Path) -> list[str]:
    return sorted(p.name for p in job_dir.iterdir() if p.name.startswith(".")) if job_dir.exists() else []


# ------------------------------------------------------------------ the README demo
@pytest.mark.cluster
def test_readme_demo_command_on_local_cluster(tmp_path):
    """`daskpd run jobs/demo.toml --output demo-output`, exactly as the README says (LocalCluster):
    every method, no warning about itself, nothing but daskpd's own lines on stderr."""
    out = tmp_path / "demo-output"
    p = subprocess.run([str(DASKPD), "run", "jobs/demo.toml", "--output", str(out)], cwd=REPO,
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    info = [line for line in p.stderr.splitlines() if not line.startswith("daskpd: progress stage")]
    assert all(line.startswith(("daskpd: writing the synthetic", "daskpd: fitting the job's model", "daskpd: job ",
                                "daskpd: cluster ", "daskpd: dashboard ")) for line in info), info
    assert "warning" not in p.stderr.lower() and "Traceback" not in p.stderr
    # a summary line per feature, and the importance table
    for f in FEATURES:
        assert any(line.split()[1:2] == [f + ":"] for line in p.stdout.splitlines()), (f, p.stdout)
    assert "StratImpact importance (sorted by importance: mean |PD| weighted by rows):" in p.stdout
    assert "LocalCluster" in p.stderr and "dashboard http" in p.stderr
    assert "Worker process still alive" not in p.stderr  # our LocalCluster closes without the nanny's warning
    assert max(len(line) for line in p.stdout.splitlines() if "/" not in line) <= 112  # summaries: ~100 a line
    # stderr is a pipe, not a terminal: one plain line per stage (no bar frames, no escape codes), off stdout
    assert "daskpd: progress stage" in p.stderr and "tasks done in" in p.stderr and "progress" not in p.stdout
    assert "\r" not in p.stderr and "\x1b" not in p.stderr
    job_dir = out / "bulldozer-demo"
    runs = list_runs(job_dir)
    assert len(runs) == 1
    run = job_dir / runs[0]
    assert (job_dir / "latest").resolve() == run.resolve()
    for f in ("curves.parquet", "importances.parquet", "manifest.json", "report.html"):
        assert (run / f).is_file(), f
    pngs = sorted(p.name for p in (run / "plots").glob("*.png"))
    model_based = [f"{m}-{f}.png" for m in ("ale", "ice", "marginal", "partial_dependence")
                   for f in ("MachineHours", "ProductGroup", "YearMade")]
    assert pngs == sorted(["catstratpd-ModelID.png", "catstratpd-ProductGroup.png", "importance-importances.png",
                           "importance-pd_variance.png", "interaction-h_statistic.png", "stratpd-MachineHours.png",
                           "stratpd-YearMade.png", *model_based])
    assert (run / "ice.parquet").is_file()
    # Friedman's H²: every pair of the model's three features and each total; the generator is additive in them
    h = pd.read_parquet(run / "interactions.parquet")
    pairs = h[h.statistic == "pair"]
    assert set(map(frozenset, zip(pairs.feature_1, pairs.feature_2))) == set(
        map(frozenset, [("YearMade", "MachineHours"), ("YearMade", "ProductGroup"), ("MachineHours", "ProductGroup")]))
    assert len(pairs) == 3
    assert set(h[h.statistic == "total"].feature_1) == {"YearMade", "MachineHours", "ProductGroup"}
    assert h.h2.between(0, 0.2).all(), h[["feature_1", "feature_2", "h2"]]
    assert hidden(job_dir) == []

    curves = pd.read_parquet(run / "curves.parquet")
    # the shared curve head (daskpd.results), a method column first
    assert list(curves.columns[:9]) == ["method", "feature", "kind", "x", "category", "pd", "count", "supported",
                                        "n_rows"]
    assert set(curves.method) == {"stratpd", "catstratpd", "partial_dependence", "ice", "ale", "marginal"}
    num = curves[curves.method == "stratpd"]
    cat = curves[curves.method == "catstratpd"]
    assert set(num.feature) == {"YearMade", "MachineHours"} and num.category.isna().all() and num.x.notna().all()
    assert set(cat.feature) == {"ProductGroup", "ModelID"} and cat.x.isna().all() and cat.category.notna().all()
    assert (num.kind == "numeric").all() and (cat.kind == "categorical").all() and (curves.n_rows == 200_000).all()
    # the job computed the right thing: YearMade's curve against the generator's truth
    gen = Bulldozer(random_state=0)
    ym = num[(num.feature == "YearMade") & num.supported]
    truth = gen.truth("YearMade", ym.x.to_numpy())
    rmse = float(np.sqrt(np.mean((ym.pd.to_numpy() - truth) ** 2)))
    assert rmse < 0.1 * (truth.max() - truth.min()), rmse
    # ProductGroup is identifiable beside ModelID in the demo's data: CatStratPD and the model's PD order the
    # groups as their true effects do
    true_order = [g for _, g in sorted(zip(Bulldozer.group_effect, Bulldozer.groups))]
    for method in ("catstratpd", "partial_dependence"):
        pg = curves[(curves.method == method) & (curves.feature == "ProductGroup")].sort_values("pd")
        assert list(pg.category) == true_order, (method, pg[["category", "pd"]])

    imp = pd.read_parquet(run / "importances.parquet")
    assert list(imp.columns[:5]) == ["method", "feature", "kind", "importance", "rank"]
    assert imp.sort_values("rank").feature.iloc[0] == "YearMade"

    m = json.loads((run / "manifest.json").read_text())
    assert m["job"] == "bulldozer-demo" and m["run_id"] == runs[0] and m["status"] == "complete"
    assert m["rows"]["rows_read"] == 200_000
    assert m["input"]["fingerprint"]["mode"] == "content" and len(m["input"]["fingerprint"]["sha256"]) == 64
    assert m["versions"]["dask"] and m["versions"]["daskpd"] and m["versions"]["python"]
    assert set(m["timings_s"]) >= {"open", "connect", "model_free", "write", "total"}
    assert m["spec"]["name"] == "bulldozer-demo" and "synthetic" in m["spec_toml"]
    assert m["cluster"]["kind"] == "LocalCluster" and m["cluster"]["n_workers"] >= 1
    assert set(m["files"]) >= {"curves.parquet", "report.html", "plots/stratpd-YearMade.png"}


# ------------------------------------------------------------------ a parquet lake on a real cluster
@pytest.mark.cluster
def test_lake_job_on_real_cluster_reads_only_needed_columns(dask_cluster, tmp_path, monkeypatch):
    make_lake(tmp_path / "lake")
    monkeypatch.setenv("DASKPD_LAKE", str(tmp_path / "lake"))
    final = run_job(REPO / "jobs" / "lake.toml", scheduler=dask_cluster, output=tmp_path / "out", run_id="r1",
                    **quiet())
    assert final == tmp_path / "out" / "auctions-lake" / "r1"
    m = json.loads((final / "manifest.json").read_text())
    assert m["rows"]["rows_read"] == 7 * 4000  # sale_year >= 2005: 7 of 12 partitions
    assert m["input"]["columns_read"] == ["SalePrice", *FEATURES]
    assert m["input"]["filters"] == [[["sale_year", ">=", 2005]]]
    assert m["input"]["fingerprint"]["n_files"] == 12 and m["input"]["fingerprint"]["mode"] == "metadata"
    assert m["cluster"]["kind"] == "existing" and m["cluster"]["scheduler"] == dask_cluster
    assert m["cluster"]["n_workers"] == 2
    assert m["categorical"] == ["ProductGroup", "ModelID"]
    imp = pd.read_parquet(final / "importances.parquet")
    assert "importance_std" in imp.columns and imp.importance_std.notna().all()  # n_trials = 5
    assert sorted(imp.feature) == sorted(FEATURES)
    curves = pd.read_parquet(final / "curves.parquet")
    assert set(zip(curves.method, curves.feature)) == {("stratpd", "YearMade"), ("stratpd", "MachineHours"),
                                                       ("catstratpd", "ProductGroup"), ("catstratpd", "ModelID")}
    assert os.readlink(final.parent / "latest") == "r1"

    # column projection reaches the parquet reader: the graph reads exactly these columns
    from dask.dataframe.dask_expr.io.parquet import ReadParquet

    from daskpd.job.spec_parse import load_spec

    spec = load_spec(REPO / "jobs" / "lake.toml")
    request = jobrun.open_job_request(spec, spec.source.path)
    feats = request.features
    ddf = request.dataset.frame
    reads, stack = [], [request.project(["SalePrice", *feats]).optimize(fuse=False).expr]
    while stack:  # every expression, including those fused into FusedIO
        e = stack.pop()
        if isinstance(e, ReadParquet):
            reads.append(e)
        stack.extend(o for o in e.operands if hasattr(o, "operands"))
    assert reads and all(sorted(r.columns) == sorted(["SalePrice", *FEATURES]) for r in reads), reads
    assert {"notes", "sale_year"} <= set(ddf.columns)  # which exist, and are not read


@pytest.mark.cluster
def test_csv_source_with_filters_and_exclude_and_default_run_id(dask_cluster, tmp_path, monkeypatch):
    df = Bulldozer(random_state=3, n_models=30).frame(12_000)
    df["id"] = np.arange(len(df))
    df.to_csv(tmp_path / "auctions.csv", index=False)
    spec = spec_file(tmp_path, """
name = "csv"
target = "SalePrice"
exclude = ["id"]
methods = ["stratpd", "catstratpd"]
[source]
path = "auctions.csv"
filters = [["YearMade", ">=", 1980], ["ProductGroup", "not in", ["TEX"]]]
""")
    # the default run id is the UTC start time; a second run in the same second gets a suffix
    stamp = store.default_run_id()
    assert len(stamp) == 16 and stamp[:8].isdigit() and stamp[8] == "T" and stamp[15] == "Z"
    monkeypatch.setattr(store, "default_run_id", lambda at=None: "20260101T000000Z")
    taken = tmp_path / "out" / "csv" / "20260101T000000Z"
    taken.mkdir(parents=True)
    (taken / "manifest.json").write_text("{}")
    monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", dask_cluster)  # the cluster, found through the environment
    final = run_job(spec, output=tmp_path / "out", **quiet())
    assert final.name == "20260101T000000Z-2" and (taken / "manifest.json").read_text() == "{}"
    m = json.loads((final / "manifest.json").read_text())
    assert m["cluster"]["kind"] == "existing" and m["cluster"]["scheduler"] == dask_cluster
    assert m["run_id"] == "20260101T000000Z-2"
    expected = int(((df.YearMade >= 1980) & (df.ProductGroup != "TEX")).sum())
    assert m["rows"]["rows_read"] == expected and m["input"]["format"] == "csv"
    assert m["features"] == FEATURES  # all but the target and the excluded id
    curves = pd.read_parquet(final / "curves.parquet")
    assert curves[curves.feature == "YearMade"].x.min() >= 1980
    assert "TEX" not in set(curves[curves.feature == "ProductGroup"].category)
    assert len(pd.read_parquet(final / "importances.parquet")) == 0  # importances not asked for


# ------------------------------------------------------------------ atomic, idempotent reruns
@pytest.mark.cluster
def test_rerun_same_run_id_replaces_atomically_and_keep_prunes(dask_cluster, tmp_path):
    spec = spec_file(tmp_path, SMALL.format(rows=8000) + "[output]\nkeep = 1\n")
    out = tmp_path / "out"
    job_dir = out / "small"
    job_dir.mkdir(parents=True)
    stale = job_dir / ".old-run.tmp-999999999"  # what a kill -9 leaves: removed by the next run
    stale.mkdir()
    (stale / "curves.parquet").write_bytes(b"half")

    first = run_job(spec, scheduler=dask_cluster, output=out, run_id="a", **quiet())
    m1 = json.loads((first / "manifest.json").read_text())
    c1 = pd.read_parquet(first / "curves.parquet")
    assert not stale.exists() and hidden(job_dir) == []

    time.sleep(1.1)
    second = run_job(spec, scheduler=dask_cluster, output=out, run_id="a", **quiet())
    assert second == first and list_runs(job_dir) == ["a"]
    m2 = json.loads((second / "manifest.json").read_text())
    assert m2["started_at"] > m1["started_at"]  # really replaced...
    pd.testing.assert_frame_equal(pd.read_parquet(second / "curves.parquet"), c1)  # ...with the same result
    assert m2["input"]["fingerprint"] == m1["input"]["fingerprint"]
    assert hidden(job_dir) == []

    run_job(spec, scheduler=dask_cluster, output=out, run_id="b", **quiet())
    assert list_runs(job_dir) == ["b"]  # output.keep = 1
    assert os.readlink(job_dir / "latest") == "b"
    assert hidden(job_dir) == []


def test_commit_swaps_existing_run(tmp_path, monkeypatch):
    for exchange in (True, False):
        final, tmp = tmp_path / "r", tmp_path / ".r.tmp-1"
        shutil.rmtree(final, ignore_errors=True)
        final.mkdir()
        (final / "v").write_text("old")
        tmp.mkdir()
        (tmp / "v").write_text("new")
        if not exchange:
            monkeypatch.setattr(store, "exchange", lambda a, b: False)
        store.commit(tmp, final)
        assert (final / "v").read_text() == "new"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]


def test_latest_falls_back_to_a_text_file(tmp_path, monkeypatch):
    for r in ("20260101", "20260102"):
        (tmp_path / r).mkdir()
        (tmp_path / r / "manifest.json").write_text("{}")

    def no_symlinks(*a, **k):
        raise OSError("symlinks not supported here")

    monkeypatch.setattr(os, "symlink", no_symlinks)
    assert store.update_latest(tmp_path) == "20260102"
    assert (tmp_path / "LATEST").read_text() == "20260102\n"
    assert not (tmp_path / "latest").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["20260101", "20260102", "LATEST"]


# ------------------------------------------------------------------ SIGTERM mid-job
@pytest.mark.cluster
def test_sigterm_mid_job_leaves_no_run_directory_and_rerun_succeeds(dask_cluster, tmp_path):
    spec = spec_file(tmp_path, """
name = "killme"
target = "SalePrice"
[source]
synthetic = "bulldozer"
rows = 250000
rows_per_file = 10000
""")
    out = tmp_path / "out"
    job_dir = out / "killme"
    proc = subprocess.Popen([str(DASKPD), "run", str(spec), "--scheduler", dask_cluster, "--output", str(out),
                             "--run-id", "r1", "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        seen_tmp = False
        for line in proc.stderr:  # wait until it is computing on the cluster
            if line.startswith("daskpd: cluster"):
                seen_tmp = any(p.name.startswith(".r1.tmp-") for p in job_dir.iterdir())
                break
        time.sleep(0.5)
        assert proc.poll() is None, "the job finished before it could be killed"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert seen_tmp, "the run's temporary directory should exist while it computes"
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "terminated by signal SIGTERM; no run was written" in err
    assert not job_dir.exists()  # no run, no temporary directory, not even the job directory
    assert sorted(p.name for p in out.iterdir()) == [".cache"]  # only the synthetic-data cache

    final = run_job(spec, scheduler=dask_cluster, output=out, run_id="r1", **quiet())
    assert list_runs(job_dir) == ["r1"] and (final / "report.html").is_file() and hidden(job_dir) == []


# ------------------------------------------------------------------ bad data: exit 2, nothing written
@pytest.mark.cluster
def test_bad_data_exit_2_and_nothing_written(dask_cluster, tmp_path, capsys):
    r = np.random.default_rng(0)
    df = pd.DataFrame({"x": np.arange(200.0), "c": 1.0, "z": r.uniform(size=200)})
    df["y"] = df.x ** 2 + 1e4 * df.z
    df.to_parquet(tmp_path / "d.parquet")
    out = tmp_path / "out"
    # a feature the data lacks: found before anything is written
    spec = spec_file(tmp_path, 'name = "bad"\ntarget = "y"\nfeatures = ["x", "nope"]\n[source]\npath = "d.parquet"\n')
    assert cli.main(["run", str(spec), "--output", str(out), "--scheduler", dask_cluster, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("daskpd: error: column 'nope' not found") and err.count("\n") == 1
    assert not out.exists()
    # a constant feature named explicitly: found by the library during the run; the run's directories are removed
    spec = spec_file(tmp_path, 'name = "bad"\ntarget = "y"\nfeatures = ["x", "c"]\nmethods = ["stratpd"]\n'
                               '[source]\npath = "d.parquet"\n')
    assert cli.main(["run", str(spec), "--output", str(out), "--scheduler", dask_cluster, "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("daskpd: error: ") and "'c' is constant" in err[-1], err
    assert not out.exists()
    # in the default feature set it is left out, with a counted note, and recorded in the manifest
    spec = spec_file(tmp_path, 'name = "ok"\ntarget = "y"\nmethods = ["stratpd"]\n[source]\npath = "d.parquet"\n')
    assert cli.main(["run", str(spec), "--output", str(out), "--scheduler", dask_cluster, "--no-progress",
                     "--run-id", "r1"]) == 0
    err = capsys.readouterr().err
    assert "1 of 3 columns left out of the default features: 1 constant ('c')" in err
    m = json.loads((out / "ok" / "r1" / "manifest.json").read_text())
    assert m["skipped_features"] == {"c": "constant"}
    assert [p["feature"] for p in m["plots"] if p["kind"] == "curve"] == ["x", "z"]


def test_unreachable_scheduler_exit_2(tmp_path, capsys):
    import dask

    from conftest import free_port

    spec = spec_file(tmp_path, SMALL.format(rows=1000))
    with dask.config.set({"distributed.comm.timeouts.connect": "2s"}):
        rc = cli.main(["run", str(spec), "--scheduler", f"tcp://127.0.0.1:{free_port()}", "--output",
                       str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and "daskpd: error: cannot connect to the Dask scheduler at tcp://127.0.0.1:" in err
    assert not (tmp_path / "out" / "small").exists()


def test_unexpected_failure_exit_1_with_traceback_and_nothing_written(tmp_path, capsys, monkeypatch):
    spec = spec_file(tmp_path, SMALL.format(rows=1000))

    def boom(*a, **k):
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(connection, "connect", boom)  # after the run's temporary directory exists
    assert cli.main(["run", str(spec), "--output", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "RuntimeError: simulated bug" in err
    assert err.strip().splitlines()[-1] == "daskpd: error: unexpected failure (traceback above); nothing was written"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [".cache"]  # no job directory, no .tmp


# ------------------------------------------------------------------ TLS-only cluster
def _start_tls_cluster(certs: Path, logdir: Path):
    from conftest import _dask_cmd, free_port

    port = free_port()
    addr = f"tls://127.0.0.1:{port}"
    env = dict(os.environ, DASK_DISTRIBUTED__WORKER__DAEMON="False")
    tls = lambda role: ["--tls-ca-file", str(certs / "ca.pem"), "--tls-cert", str(certs / f"{role}.pem"),  # noqa
                        "--tls-key", str(certs / f"{role}.key")]
    procs = [subprocess.Popen(_dask_cmd("scheduler", "--host", "127.0.0.1", "--port", str(port), "--protocol", "tls",
                                        "--dashboard-address", ":0", "--no-show", *tls("scheduler")),
                              stdout=open(logdir / "tls-scheduler.log", "w"), stderr=subprocess.STDOUT, env=env)]
    procs.append(subprocess.Popen(_dask_cmd("worker", addr, "--host", "127.0.0.1", "--nthreads", "2",
                                            "--memory-limit", "2GiB", "--no-dashboard", "--protocol", "tls",
                                            "--local-directory", str(logdir / "tls-w0"), *tls("worker")),
                                  stdout=open(logdir / "tls-worker.log", "w"), stderr=subprocess.STDOUT, env=env))
    from distributed import Client
    from distributed.security import Security

    sec = Security(tls_ca_file=str(certs / "ca.pem"), tls_client_cert=str(certs / "client.pem"),
                   tls_client_key=str(certs / "client.key"), require_encryption=True)
    deadline = time.time() + 60
    while True:
        try:
            with Client(addr, security=sec, timeout=5) as c:
                c.wait_for_workers(1, timeout=max(1, deadline - time.time()))
            return addr, procs
        except (OSError, TimeoutError):
            if time.time() > deadline:
                from conftest import stop_cluster

                stop_cluster(procs)
                raise RuntimeError(f"TLS cluster did not come up; logs in {logdir}")
            time.sleep(0.5)


@pytest.mark.cluster
def test_tls_only_cluster(tmp_path, capsys):
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed (needed by cluster/tls/make-certs.sh)")
    from conftest import stop_cluster

    certs = tmp_path / "certs"
    subprocess.run(["bash", str(REPO / "cluster" / "tls" / "make-certs.sh"), str(certs)], check=True,
                   capture_output=True, timeout=120)
    addr, procs = _start_tls_cluster(certs, tmp_path)
    try:
        spec = spec_file(tmp_path, SMALL.format(rows=6000))
        out = tmp_path / "out"
        # 1. `DASK_CONFIG=certs/dask-tls.yaml daskpd run ... --scheduler tls://...` (cluster/README.md)
        env = dict(os.environ, DASK_CONFIG=str(certs / "dask-tls.yaml"))
        p = subprocess.run([str(DASKPD), "run", str(spec), "--scheduler", addr, "--output", str(out), "--no-progress",
                            "--run-id", "config"], capture_output=True, text=True, timeout=180, env=env)
        assert p.returncode == 0, p.stderr[-3000:]
        m = json.loads((out / "small" / "config" / "manifest.json").read_text())
        assert m["cluster"]["scheduler"] == addr and m["rows"]["rows_read"] == 6000
        # 2. the CLI's TLS flags (in this process, whose Dask config has no TLS)
        base = ["run", str(spec), "--output", str(out), "--no-progress"]
        flags = ["--tls-ca-file", str(certs / "ca.pem"), "--tls-cert", str(certs / "client.pem"),
                 "--tls-key", str(certs / "client.key")]
        assert cli.main(base + ["--scheduler", addr, "--run-id", "flags", *flags]) == 0
        capsys.readouterr()
        # 3. tls:// without any certificate: refused before connecting, with the way out
        assert cli.main(base + ["--scheduler", addr, "--run-id", "nocert"]) == 2
        assert "no client certificate is configured" in capsys.readouterr().err
        # 4. a plain-TCP client is refused by the TLS-only scheduler
        import dask

        tcp = addr.replace("tls://", "tcp://")
        with dask.config.set({"distributed.comm.timeouts.connect": "5s"}):
            assert cli.main(base + ["--scheduler", tcp, "--run-id", "plain"]) == 2
        err = capsys.readouterr().err
        assert f"daskpd: error: cannot connect to the Dask scheduler at {tcp}" in err and "Traceback" not in err
        assert list_runs(out / "small") == ["config", "flags"] and hidden(out / "small") == []
    finally:
        stop_cluster(procs)


# ------------------------------------------------------------------ model-based methods
@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    import pickle

    import joblib
    import skops.io as sio
    from sklearn.compose import ColumnTransformer
    from sklearn.ensemble import HistGradientBoostingRegressor
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OneHotEncoder

    d = tmp_path_factory.mktemp("model")
    df = Bulldozer(random_state=4, n_models=30).frame(6_000)
    df.to_parquet(d / "data.parquet")
    X = df[["YearMade", "MachineHours", "ProductGroup"]]
    model = Pipeline([
        ("ct", ColumnTransformer([("oh", OneHotEncoder(handle_unknown="ignore"), ["ProductGroup"])],
                                 remainder="passthrough")),
        ("gb", HistGradientBoostingRegressor(max_iter=40, random_state=0)),
    ]).fit(X, df["SalePrice"])
    sio.dump(model, d / "model.skops")
    joblib.dump(model, d / "model.joblib")
    with open(d / "model.pkl", "wb") as fh:
        pickle.dump(model, fh)
    (d / "broken.pkl").write_bytes(b"not a pickle")
    return d


TREE = "sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor"


@pytest.mark.cluster
def test_model_based_methods_in_a_job(dask_cluster, model_dir):
    spec = spec_file(model_dir, f"""
name = "model-job"
target = "SalePrice"
methods = ["stratpd", "partial_dependence", "ice", "ale", "marginal", "pd_variance"]
[source]
path = "data.parquet"
[model]
path = "model.skops"
trusted_types = ["{TREE}"]
[partial_dependence]
grid_resolution = 25
[ice]
grid_resolution = 10
n_lines = 15
[pd_variance]
grid_resolution = 20
""")
    final = run_job(spec, scheduler=dask_cluster, output=model_dir / "out", run_id="m1", **quiet())
    m = json.loads((final / "manifest.json").read_text())
    assert m["model_type"] == "sklearn.pipeline.Pipeline"
    assert m["model_inputs"] == ["YearMade", "MachineHours", "ProductGroup"]
    assert m["model_features"] == ["YearMade", "MachineHours", "ProductGroup"]  # ModelID is not a model input
    curves = pd.read_parquet(final / "curves.parquet")
    got = set(zip(curves.method, curves.feature))
    for method in ("partial_dependence", "ice", "ale", "marginal"):
        assert {(method, f) for f in ("YearMade", "MachineHours", "ProductGroup")} <= got, method
    assert ("stratpd", "YearMade") in got and ("stratpd", "ModelID") not in got  # categorical: no StratPD
    pdc = curves[curves.method == "partial_dependence"]
    assert len(pdc[pdc.feature == "YearMade"]) == 25
    pg = pdc[pdc.feature == "ProductGroup"]
    assert pg.x.isna().all() and set(pg.category) == set(Bulldozer.groups)
    # the model learned the generator: its PD of YearMade follows the true effect
    ym = pdc[pdc.feature == "YearMade"]
    truth = Bulldozer.year_effect(ym.x.to_numpy())
    assert np.corrcoef(ym.pd.to_numpy(), truth)[0, 1] > 0.97
    ice = pd.read_parquet(final / "ice.parquet")
    assert list(ice.columns) == ["feature", "partition", "row", "x", "category", "ice"]  # the one long ICE table
    lines = ice.groupby("feature")[["partition", "row"]].apply(lambda g: len(g.drop_duplicates())).to_dict()
    assert lines == {"MachineHours": 15, "ProductGroup": 15, "YearMade": 15}
    imp = pd.read_parquet(final / "importances.parquet")
    assert set(imp.method) == {"pd_variance"} and imp.sort_values("rank").feature.iloc[0] == "YearMade"
    assert len(list((final / "plots").glob("*.png"))) == 1 + 2 + 4 * 3  # pd_variance chart + 2 StratPD + 12
    # one merged model plan; ProductGroup's ALE levels need their ordering pass
    assert m["model_phases"] == ["summary", "order statistics", "level order", "model"]


@pytest.mark.cluster
def test_three_features_five_model_methods_take_three_passes(dask_cluster, tmp_path, monkeypatch):
    """3 features x 5 model-based methods: one summary pass, one order-statistics pass, one
    model pass (one by one they took 21).  Counted by wrapping the engine's real build_pass."""
    import joblib
    from sklearn.ensemble import HistGradientBoostingRegressor

    import daskpd._engine.plan as plan
    import daskpd._strat.pipeline as pipeline
    import daskpd._strat.scan_stage as scan_stage
    import daskpd.model._passes as mpasses

    rng = np.random.default_rng(0)
    n = 5_000  # > 1,024 distinct values: grids and bins need exact order statistics
    df = pd.DataFrame({"a": rng.uniform(-1, 1, n), "b": rng.normal(size=n), "c": rng.uniform(0, 4, n)})
    df["y"] = df.a ** 2 + df.b * df.c + rng.normal(scale=0.1, size=n)
    df.to_parquet(tmp_path / "data.parquet", index=False)
    joblib.dump(HistGradientBoostingRegressor(max_iter=10, random_state=0).fit(df[["a", "b", "c"]], df.y),
                tmp_path / "model.joblib")
    spec = spec_file(tmp_path, """
name = "passes"
target = "y"
methods = ["partial_dependence", "ice", "ale", "marginal", "pd_variance"]
[source]
path = "data.parquet"
[model]
path = "model.joblib"
trust_model = true
[partial_dependence]
grid_resolution = 10
[ice]
grid_resolution = 5
n_lines = 4
[pd_variance]
grid_resolution = 8
""")
    real, names = plan.build_pass, []

    def counting(ddf, jobs, *, name="daskpd", **shape):
        names.append(name)
        return real(ddf, jobs, name=name, **shape)

    for mod in (plan, mpasses, pipeline, scan_stage):
        monkeypatch.setattr(mod, "build_pass", counting)
    final = run_job(spec, scheduler=dask_cluster, output=tmp_path / "out", run_id="p1", **quiet())
    assert names == ["daskpd-summary", "daskpd-quantiles", "daskpd-model-methods"], names
    m = json.loads((final / "manifest.json").read_text())
    assert m["model_phases"] == ["summary", "order statistics", "model"]
    curves = pd.read_parquet(final / "curves.parquet")
    assert curves.groupby("method").feature.nunique().to_dict() == {
        "ale": 3, "ice": 3, "marginal": 3, "partial_dependence": 3}
    imp = pd.read_parquet(final / "importances.parquet")
    assert list(imp.method) == ["pd_variance"] * 3 and list(imp["rank"]) == [1, 2, 3]


def test_load_model_trust_rules(model_dir):
    from daskpd import DataError
    from daskpd.job.spec_parse import load_spec

    def spec_for(model_lines):
        return load_spec(spec_file(model_dir, f"""
name = "m"
target = "SalePrice"
methods = ["partial_dependence"]
[source]
path = "data.parquet"
[model]
{model_lines}
""", name="trust.toml"))

    with pytest.raises(DataError, match=f"skops does not trust by default: {TREE}; review them and list them in "
                                        "model.trusted_types"):
        jobrun.load_model(spec_for('path = "model.skops"'))
    assert hasattr(jobrun.load_model(spec_for('path = "model.skops"\ntrust_model = true')), "predict")
    assert hasattr(jobrun.load_model(spec_for('path = "model.joblib"\ntrust_model = true')), "predict")
    assert hasattr(jobrun.load_model(spec_for('path = "model.pkl"\ntrust_model = true')), "predict")
    with pytest.raises(DataError, match="could not be loaded: UnpicklingError"):
        jobrun.load_model(spec_for('path = "broken.pkl"\ntrust_model = true'))
    with pytest.raises(DataError, match="is not a readable skops file"):
        shutil.copy(model_dir / "broken.pkl", model_dir / "broken.skops")
        jobrun.load_model(spec_for('path = "broken.skops"'))


def test_untrusted_model_fails_before_computing(model_dir, capsys):
    spec = spec_file(model_dir, """
name = "m2"
target = "SalePrice"
methods = ["partial_dependence"]
[source]
path = "data.parquet"
[model]
path = "model.skops"
""", name="untrusted.toml")
    out = model_dir / "out-untrusted"
    # no scheduler given and none reachable would start a LocalCluster: the model is checked first
    assert cli.main(["run", str(spec), "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("daskpd: error: model file") and "TreePredictor" in err and "cluster" not in err
    assert not out.exists()
