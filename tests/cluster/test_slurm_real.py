"""cluster/slurm/ against a REAL SLURM: Debian's slurmctld + slurmd + munged on this machine.

``.ci/slurm-up.sh`` starts a single-node SLURM bound to loopback (CI runs it from
.ci/run; by hand: ``sudo bash .ci/slurm-up.sh``).  These tests then

* ``sbatch`` the real ``cluster/slurm/daskpd.sbatch`` (command-line options shrink it
  to one node and a few small tasks) and wait for the job: it must end COMPLETED with
  exit code 0, its srun'd workers must have stopped cleanly, and the run's outputs must
  be there; a failing ``daskpd run`` must make the job fail with its exit status;
* run ``cluster/slurm/run_slurm.py`` with dask-jobqueue's real ``SLURMCluster``
  (``jobqueue.yaml`` with the site-specific keys replaced: the local partition, small
  cores/memory, a prologue activating this venv, the loopback interface): the worker
  jobs appear in ``squeue``, the job's outputs are written, and closing the cluster
  cancels the worker jobs -- also when run_slurm.py gets SIGTERM while it waits.

Every address is on loopback (scheduler, workers, dashboards, slurm's own daemons).
The tests skip, saying what is missing, only when SLURM is not installed, slurmctld
does not answer, or the SLURM found is not a single-node cluster on this machine (they
bind to 127.0.0.1, which compute nodes elsewhere could not reach).
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slurm

ROOT = Path(__file__).resolve().parents[2]
SLURM_DIR = ROOT / "cluster" / "slurm"
SBATCH_SCRIPT = SLURM_DIR / "daskpd.sbatch"
RUN_SLURM = SLURM_DIR / "run_slurm.py"
VENV_BIN = Path(sys.executable).parent
IN_VENV = sys.prefix != sys.base_prefix

TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
            "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT", "REVOKED"}

# 4,000 synthetic rows in 2 parquet files: a few seconds on one thread
SMALL_SPEC = """\
name = "slurm-smoke"
target = "y"
methods = ["stratpd", "importances"]
sample_size = 3000

[source]
synthetic = "quadratic"
rows = 4000
rows_per_file = 2000
"""
BAD_SPEC = 'name = "slurm-bad"\ntarget = "y"\nmethods = ["no-such-method"]\n\n[source]\nsynthetic = "quadratic"\nrows = 100\n'


# --------------------------------------------------------------------------- helpers

def run(cmd, timeout=30, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, **kw)


def clean_env(**extra) -> dict:
    """This environment without DASKPD_*/SLURM_*/DASK_* settings that could leak into the jobs
    (sbatch exports the submitter's environment), with this venv first on PATH."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DASKPD_", "SLURM_", "SBATCH_", "SALLOC_", "SRUN_"))
           and k not in ("DASK_CONFIG", "DASK_SCHEDULER_ADDRESS")}
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONDONTWRITEBYTECODE"] = "1"   # keep cluster/ free of __pycache__
    env.update({k: str(v) for k, v in extra.items()})
    return env


def loopback_interface() -> str:
    import psutil

    for name, addrs in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == "127.0.0.1" for a in addrs):
            return name
    raise AssertionError("no interface with 127.0.0.1")


def parse_kv(text: str) -> dict:
    """`scontrol show ... -o` / jobcomp lines: Key=Value tokens separated by spaces."""
    return dict(re.findall(r"(?:^|\s)([A-Za-z][\w:/]*)=(\S*)", text))


def job_info(job_id: str) -> dict | None:
    res = run(["scontrol", "show", "job", "-o", job_id])
    if res.returncode != 0:
        return None       # unknown (purged after MinJobAge)
    return parse_kv(res.stdout)


def wait_job(job_id: str, timeout: float, output: Path | None = None) -> dict:
    """Poll until the job is finished (faster than `sbatch --wait`, which polls every 10 s)."""
    deadline = time.monotonic() + timeout
    info = None
    while time.monotonic() < deadline:
        info = job_info(job_id)
        if info and info.get("JobState") in TERMINAL:
            return info
        time.sleep(0.5)
    run(["scancel", job_id])
    tail = output.read_text()[-3000:] if output is not None and output.exists() else ""
    pytest.fail(f"job {job_id} not finished after {timeout:.0f}s (state {info and info.get('JobState')}); "
                f"cancelled.\n{tail}")


def jobs_named(name: str) -> list[tuple[str, str, str]]:
    """(job id, state, partition) of the queued/running jobs called name."""
    res = run(["squeue", "-h", "-n", name, "-o", "%i %T %P"])
    assert res.returncode == 0, res.stderr
    return [tuple(line.split()) for line in res.stdout.splitlines() if line.strip()]


def wait_no_jobs_named(name: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while jobs_named(name):
        if time.monotonic() > deadline:
            left = jobs_named(name)
            for job_id, _, _ in left:
                run(["scancel", job_id])
            pytest.fail(f"jobs {left} still in the queue {timeout:.0f}s later (cancelled now)")
        time.sleep(0.5)


def jobcomp_record(slurm: "LocalSlurm", job_id: str, timeout: float = 15) -> dict | None:
    """The job's line in the jobcomp/filetxt log (None when that log is not configured)."""
    if slurm.jobcomp is None:
        return None
    deadline = time.monotonic() + timeout
    while True:
        for line in slurm.jobcomp.read_text().splitlines():
            rec = parse_kv(line)
            if rec.get("JobId") == job_id:
                return rec
        if time.monotonic() > deadline:
            pytest.fail(f"job {job_id} is not in {slurm.jobcomp}")
        time.sleep(0.5)


def unique_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def check_run_outputs(out: Path, job_name: str, n_workers: int) -> dict:
    """The run directory daskpd wrote: files, and a manifest naming a loopback cluster."""
    job_dir = out / job_name
    runs = [p for p in job_dir.iterdir() if p.is_dir() and not p.name.startswith(".") and p.name != "latest"] \
        if job_dir.is_dir() else []
    assert len(runs) == 1, f"expected one run under {job_dir}, found {runs}"
    run_dir = runs[0]
    for name in ("manifest.json", "curves.parquet", "importances.parquet", "report.html"):
        assert (run_dir / name).is_file(), f"{name} missing in {run_dir}"
    m = json.loads((run_dir / "manifest.json").read_text())
    assert m["rows"]["rows_read"] == 4000
    assert m["cluster"]["kind"] == "existing"
    assert m["cluster"]["scheduler"].startswith("tcp://127.0.0.1:"), m["cluster"]
    assert m["cluster"]["n_workers"] == n_workers, m["cluster"]
    dash = m["cluster"].get("dashboard")
    assert dash is None or dash.startswith("http://127.0.0.1:"), dash
    import pandas as pd

    curves = pd.read_parquet(run_dir / "curves.parquet")
    imp = pd.read_parquet(run_dir / "importances.parquet")
    assert len(curves) > 0 and set(imp["feature"]) == {"x1", "x2", "x3"}
    return m


@dataclass
class LocalSlurm:
    partition: str
    node: str
    cpus: int
    jobcomp: Path | None


def _skip(reason: str):
    hint = " -- start one with `sudo bash .ci/slurm-up.sh`"
    log = os.environ.get("DASKPD_SLURM_UP_LOG")
    if log and Path(log).is_file():
        lines = [ln for ln in Path(log).read_text(errors="replace").splitlines() if ln.strip()]
        if lines:
            hint = f"; .ci/slurm-up.sh said: {lines[-1][:300]}"
    pytest.skip(reason + hint)


@pytest.fixture(scope="module")
def slurm() -> LocalSlurm:
    """The local single-node SLURM, idle; skips when there is none."""
    missing = [c for c in ("sbatch", "squeue", "scontrol", "sinfo", "scancel") if shutil.which(c) is None]
    if missing:
        _skip(f"SLURM is not installed here (no {', '.join(missing)} on PATH)")
    ping = run(["scontrol", "ping"])
    if ping.returncode != 0 or "UP" not in ping.stdout:
        first = next((ln.strip() for ln in (ping.stdout + ping.stderr).splitlines() if ln.strip()), "no output")
        _skip(f"slurmctld does not answer (`scontrol ping`: {first[:200]})")

    partition = os.environ.get("DASKPD_SLURM_PARTITION")
    if not partition:
        parts = run(["sinfo", "-h", "-o", "%P"]).stdout.split()
        defaults = [p.rstrip("*") for p in parts if p.endswith("*")]
        if not defaults:
            _skip(f"SLURM has no default partition (partitions: {parts}); set DASKPD_SLURM_PARTITION")
        partition = defaults[0]
    nodes = run(["sinfo", "-h", "-N", "-p", partition, "-o", "%N"]).stdout.split()
    if len(set(nodes)) != 1:
        _skip(f"partition {partition!r} has nodes {sorted(set(nodes))}, not the one local node these "
              "loopback-only tests need")
    node = nodes[0]
    info = parse_kv(run(["scontrol", "show", "node", "-o", node]).stdout)
    addr = info.get("NodeAddr", "")
    try:
        ip = socket.gethostbyname(addr)
    except OSError:
        ip = ""
    if not ip.startswith("127."):
        _skip(f"SLURM node {node} is at {addr} ({ip or 'unresolved'}), not on this machine's loopback; "
              "these tests bind everything to 127.0.0.1")

    # a node left busy by an earlier run must drain first; a DOWN node is a real failure
    deadline = time.monotonic() + 90
    while True:
        state = run(["sinfo", "-h", "-n", node, "-o", "%T"]).stdout.strip()
        if state == "idle":
            break
        if time.monotonic() > deadline:
            pytest.fail(f"SLURM node {node} is {state!r}, not idle:\n"
                        + run(["scontrol", "show", "node", node]).stdout)
        time.sleep(1)

    conf = run(["scontrol", "show", "config"]).stdout
    cfg = {m.group(1): m.group(2).strip() for m in re.finditer(r"^(\w+)\s*=\s*(.*)$", conf, re.M)}
    jobcomp = None
    if cfg.get("JobCompType") == "jobcomp/filetxt" and os.access(cfg.get("JobCompLoc", ""), os.R_OK):
        jobcomp = Path(cfg["JobCompLoc"])
    cpus = int(info.get("CPUTot", "1"))
    return LocalSlurm(partition=partition, node=node, cpus=cpus, jobcomp=jobcomp)


def sbatch(slurm: LocalSlurm, tmp_path: Path, name: str, ntasks: int, env: dict) -> tuple[str, Path]:
    """Submit daskpd.sbatch shrunk by command-line options; return (job id, output file)."""
    cmd = ["sbatch", "--parsable", f"--job-name={name}", f"--partition={slurm.partition}",
           "--nodes=1", f"--ntasks-per-node={ntasks}", "--cpus-per-task=1", "--mem-per-cpu=1G",
           "--time=00:10:00", f"--output={tmp_path}/slurm-%j.out", str(SBATCH_SCRIPT)]
    res = run(cmd, env=env, cwd=tmp_path)   # cwd: SLURM_SUBMIT_DIR, the job's working directory
    assert res.returncode == 0, f"sbatch failed: {res.stderr}"
    job_id = res.stdout.strip().split(";")[0]
    assert job_id.isdigit(), res.stdout
    return job_id, tmp_path / f"slurm-{job_id}.out"


def sbatch_env(tmp_path: Path, spec: Path, **extra) -> dict:
    settings = dict(
        DASKPD_SPEC=spec, DASKPD_OUTPUT=tmp_path / "out", DASKPD_RUN_DIR=tmp_path / "run",
        # one node: everything on loopback.  The hosts take precedence over the interface
        # (distributed refuses both at once); a multi-node site would set only the interface.
        DASKPD_INTERFACE=loopback_interface(),
        DASKPD_SCHEDULER_HOST="127.0.0.1", DASKPD_WORKER_HOST="127.0.0.1",
        DASKPD_WAIT_TIMEOUT="120",
    )
    if IN_VENV:
        settings["DASKPD_VENV"] = sys.prefix    # as a site would: the script activates the venv
    settings.update(extra)
    return clean_env(**settings)


# --------------------------------------------------------------------------- the SLURM itself

def test_slurm_daemons_listen_on_loopback_only(slurm):
    import psutil

    try:
        conns = psutil.net_connections(kind="inet")
    except psutil.AccessDenied:
        pytest.skip("listing other processes' sockets needs root")
    listening = []
    for c in conns:
        if c.status != psutil.CONN_LISTEN or c.pid is None:
            continue
        try:
            name = psutil.Process(c.pid).name()
        except psutil.Error:
            continue
        if name.startswith(("slurmctld", "slurmd", "slurmstepd", "srun")):
            listening.append((name, c.laddr.ip, c.laddr.port))
    assert {n for n, _, _ in listening} >= {"slurmctld", "slurmd"}, listening
    exposed = [x for x in listening if not (x[1].startswith("127.") or x[1] == "::1")]
    assert not exposed, f"SLURM listens beyond loopback: {exposed}"


# --------------------------------------------------------------------------- daskpd.sbatch

def test_sbatch_script_runs_a_job(slurm, tmp_path):
    ntasks = min(2, slurm.cpus)
    spec = tmp_path / "small.toml"
    spec.write_text(SMALL_SPEC)
    name = unique_name("daskpd-test-sbatch")
    job_id, output = sbatch(slurm, tmp_path, name, ntasks, sbatch_env(tmp_path, spec))
    try:
        info = wait_job(job_id, timeout=240, output=output)
    finally:
        run(["scancel", job_id])
    log = output.read_text() if output.exists() else "(no output file)"
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", f"{info}\n{log[-4000:]}"
    assert info["Partition"] == slurm.partition and info["NumNodes"] == "1"
    assert info["NumTasks"] == str(ntasks) and info["JobName"] == name

    # the script's own log: all workers arrived, daskpd ran, everything stopped with status 0
    assert f"{ntasks} worker(s) connected" in log, log
    assert "daskpd run finished" in log and "cluster stopped (exit 0)" in log, log
    # the srun'd workers were closed by the scheduler, not killed by srun/slurmstepd
    assert "Killed" not in log and "CANCELLED" not in log and "forcing job termination" not in log, log

    run_dir = tmp_path / "run"
    assert re.search(r"scheduler at tcp://127\.0\.0\.1:\d+", log), log
    assert not (run_dir / "scheduler.json").exists()    # the scheduler removes it when it stops
    workers_log = (run_dir / "workers.log").read_text()
    assert len(re.findall(r"Start worker at:\s+tcp://127\.0\.0\.1:", workers_log)) == ntasks, workers_log
    assert workers_log.count("End worker") == ntasks, workers_log[-3000:]
    assert re.search(r"dashboard at:\s+http://127\.0\.0\.1:", (run_dir / "scheduler.log").read_text())

    check_run_outputs(tmp_path / "out", "slurm-smoke", n_workers=ntasks)

    rec = jobcomp_record(slurm, job_id)
    if rec is not None:   # slurm-up.sh's jobcomp/filetxt log (no slurmdbd for sacct)
        assert rec["JobState"] == "COMPLETED" and rec["ExitCode"] == "0:0", rec
        assert rec["DerivedExitCode"] == "0:0", f"a job step (the workers' srun) failed: {rec}"


def test_sbatch_script_fails_with_daskpd(slurm, tmp_path):
    """A bad job spec: `daskpd run` exits 2, and so does the SLURM job (FAILED, ExitCode 2:0)."""
    spec = tmp_path / "bad.toml"
    spec.write_text(BAD_SPEC)
    name = unique_name("daskpd-test-sbatch-bad")
    job_id, output = sbatch(slurm, tmp_path, name, 1, sbatch_env(tmp_path, spec))
    try:
        info = wait_job(job_id, timeout=180, output=output)
    finally:
        run(["scancel", job_id])
    log = output.read_text() if output.exists() else "(no output file)"
    assert info["JobState"] == "FAILED" and info["ExitCode"] == "2:0", f"{info}\n{log[-4000:]}"
    assert "daskpd: error:" in log and "cluster stopped (exit 2)" in log, log
    assert "End worker" in (tmp_path / "run" / "workers.log").read_text()
    assert not (tmp_path / "out" / "slurm-bad").exists()


# --------------------------------------------------------------------------- run_slurm.py

def jobqueue_config(slurm: LocalSlurm, tmp_path: Path, name: str) -> Path:
    """cluster/slurm/jobqueue.yaml with its site-specific keys set for the local SLURM."""
    cfg = yaml.safe_load((SLURM_DIR / "jobqueue.yaml").read_text())
    s = cfg["jobqueue"]["slurm"]
    s.update({
        "name": name,
        "queue": slurm.partition,
        "cores": 1,
        "memory": "1GiB",
        "processes": 1,
        "walltime": "00:10:00",
        "interface": loopback_interface(),       # scheduler (in run_slurm.py) and workers
        "job-script-prologue": [f"source {shlex.quote(sys.prefix)}/bin/activate"] if IN_VENV else [],
        "job-extra-directives": [f"--output={tmp_path}/worker-%j.out"],
        "scheduler-options": {"dashboard_address": "127.0.0.1:0"},
    })
    path = tmp_path / "jobqueue.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.fixture
def dask_jobqueue():
    return pytest.importorskip("dask_jobqueue", reason="dask-jobqueue is not installed (the `test` extra has it)")


def start_run_slurm(args, tmp_path) -> tuple[subprocess.Popen, Path]:
    log = tmp_path / "run_slurm.log"
    with open(log, "w") as f:
        proc = subprocess.Popen([sys.executable, str(RUN_SLURM), *map(str, args)], stdout=f,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
                                env=clean_env(), cwd=tmp_path)
    return proc, log


def test_run_slurm_with_real_jobqueue(slurm, dask_jobqueue, tmp_path):
    n_jobs = min(2, slurm.cpus)
    spec = tmp_path / "small.toml"
    spec.write_text(SMALL_SPEC)
    name = unique_name("daskpd-test-jq")
    config = jobqueue_config(slurm, tmp_path, name)

    script = run([sys.executable, RUN_SLURM, "--config", config, "--print-job-script"], env=clean_env(),
                 timeout=60)
    assert script.returncode == 0, script.stderr
    assert f"#SBATCH -p {slurm.partition}" in script.stdout and f"#SBATCH -J {name}" in script.stdout
    assert "--interface" in script.stdout and "bin/activate" in script.stdout

    proc, log = start_run_slurm([spec, "--config", config, "--jobs", n_jobs, "--min-workers", n_jobs,
                                 "--wait-timeout", 120, "--output", tmp_path / "out"], tmp_path)
    # every (state, partition) each worker job was seen in: a job seen RUNNING is later
    # seen COMPLETING while the closing cluster cancels it, so keep them all
    seen: dict[str, set[tuple[str, str]]] = {}
    try:
        deadline = time.monotonic() + 240
        while proc.poll() is None:
            for job_id, state, partition in jobs_named(name):
                seen.setdefault(job_id, set()).add((state, partition))
            assert time.monotonic() < deadline, "run_slurm.py did not finish in 240 s:\n" + log.read_text()[-3000:]
            time.sleep(0.5)
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(30)
        wait_no_jobs_named(name, timeout=60)
    text = log.read_text()
    assert proc.returncode == 0, text[-4000:]
    assert "run_slurm.py: finished:" in text

    # dask-jobqueue submitted n_jobs batch jobs to the local partition; they ran, and
    # closing the cluster cancelled them
    assert len(seen) == n_jobs, seen
    assert all(p == slurm.partition for states in seen.values() for _, p in states), seen
    assert any(s == "RUNNING" for states in seen.values() for s, _ in states), seen
    for job_id in seen:
        info = job_info(job_id)
        assert info is None or info["JobState"] == "CANCELLED", info
        worker_out = (tmp_path / f"worker-{job_id}.out").read_text()
        assert re.search(r"Start worker at:\s+tcp://127\.0\.0\.1:", worker_out), worker_out[-2000:]

    check_run_outputs(tmp_path / "out", "slurm-smoke", n_workers=n_jobs)


def test_run_slurm_sigterm_cancels_the_worker_jobs(slurm, dask_jobqueue, tmp_path):
    """SIGTERM while run_slurm.py waits for workers: it closes the cluster, so SLURM
    cancels the worker jobs at once (instead of them running until death-timeout)."""
    spec = tmp_path / "small.toml"
    spec.write_text(SMALL_SPEC)
    name = unique_name("daskpd-test-jq-term")
    config = jobqueue_config(slurm, tmp_path, name)
    # 1 job but 2 workers wanted: it waits until the signal
    proc, log = start_run_slurm([spec, "--config", config, "--jobs", 1, "--min-workers", 2,
                                 "--wait-timeout", 300, "--output", tmp_path / "out"], tmp_path)
    try:
        deadline = time.monotonic() + 120
        while not any(state == "RUNNING" for _, state, _ in jobs_named(name)):
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the worker job did not start:\n" + log.read_text()[-3000:]
            time.sleep(0.5)
        (job_id, _, _), = jobs_named(name)
        # wait for the worker to join (the worker job is past its start-up)
        worker_out = tmp_path / f"worker-{job_id}.out"
        while not (worker_out.exists() and "Registered to:" in worker_out.read_text()):
            assert time.monotonic() < deadline, "the worker did not register:\n" + log.read_text()[-3000:]
            time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(60)
        wait_no_jobs_named(name, timeout=30)  # the worker job is gone (cancelled), not left running
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        for job_id, _, _ in jobs_named(name):
            run(["scancel", job_id])
    text = log.read_text()
    assert rc == 128 + signal.SIGTERM, text[-3000:]
    assert "cancelling the SLURM jobs" in text, text[-3000:]
    info = job_info(job_id)
    assert info is None or info["JobState"] == "CANCELLED", info
    assert not (tmp_path / "out" / "slurm-smoke").exists()
