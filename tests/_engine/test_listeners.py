"""Nothing daskpd starts listens off loopback: its own LocalCluster (the library's
``connect("local")``, used by ``daskpd run``) and the cluster/ scripts, TLS included
(no plain HTTP endpoint off loopback).  Every listening socket of every process is
checked with psutil on real processes."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

psutil = pytest.importorskip("psutil")

REPO = Path(__file__).resolve().parents[2]
LOOPBACK = {"127.0.0.1", "::1"}


def listening(pids) -> list[tuple[int, str, int]]:
    """(pid, address, port) of every listening TCP socket of ``pids`` and their children."""
    procs = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
        except psutil.NoSuchProcess:
            continue
        procs += [p, *p.children(recursive=True)]
    out = []
    for p in procs:
        try:
            conns = p.net_connections(kind="inet")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        out += [(p.pid, c.laddr.ip, c.laddr.port) for c in conns if c.status == psutil.CONN_LISTEN]
    return out


PROBE = r"""
import json, os, sys, time
import psutil
from daskpd._engine.scheduler import connect

client, cluster = connect("local", n_workers=2, threads_per_worker=1, memory_limit="1GiB")
client.wait_for_workers(2, timeout=60)
assert client.submit(sum, [1, 2]).result() == 3
me = psutil.Process()
procs = [me, *me.children(recursive=True)]
socks = []
for p in procs:
    socks += [(p.pid, c.laddr.ip, c.laddr.port) for c in p.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
print(json.dumps({"sockets": socks, "n_procs": len(procs), "dashboard": client.dashboard_link,
                  "scheduler": client.scheduler.address}))
client.close(); cluster.close()
"""


def test_daskpds_local_cluster_listens_only_on_loopback(tmp_path):
    env = dict(os.environ, DASK_DISTRIBUTED__WORKER__DAEMON="False")
    p = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=180, env=env,
                       cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    info = json.loads(p.stdout.strip().splitlines()[-1])
    socks = info["sockets"]
    assert info["n_procs"] >= 3  # this process (scheduler), two worker processes (+ nannies)
    assert len(socks) >= 4, socks  # scheduler comm + HTTP, and each worker's comm
    assert {ip for _, ip, _ in socks} <= LOOPBACK, socks
    assert info["scheduler"].startswith("tcp://127.0.0.1:")
    if info["dashboard"]:
        port = int(info["dashboard"].split(":")[2].split("/")[0])
        assert any(p == port for _, _, p in socks)  # the printed link is the socket it listens on


def _start_script(script: Path, env: dict, args=()):
    p = subprocess.run(["bash", str(script), *args], capture_output=True, text=True, timeout=180, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout.strip().splitlines()[-1]


def _stop(run_dir: Path, env):
    subprocess.run(["bash", str(REPO / "cluster" / "local" / "stop-cluster.sh"), str(run_dir)],
                   capture_output=True, text=True, timeout=120, env=env)


def _pids(run_dir: Path) -> list[int]:
    return [int(f.read_text().strip()) for f in sorted(run_dir.glob("*.pid"))]


def _env(tmp_path: Path, port: int) -> dict:
    dask_exe = shutil.which("dask", path=os.path.dirname(sys.executable))
    if dask_exe is None:
        pytest.skip("the dask executable is not installed next to this python")
    return dict(os.environ, DASKPD_DASK=dask_exe, DASKPD_RUN_DIR=str(tmp_path / "run"),
                DASKPD_SCHEDULER_PORT=str(port), DASKPD_N_WORKERS="2", DASKPD_NTHREADS="1",
                DASKPD_MEMORY_LIMIT="1GiB", DASKPD_START_TIMEOUT="90")


@pytest.mark.cluster
@pytest.mark.parametrize("dashboard", ["none", "0"])
def test_local_cluster_script_listens_only_on_loopback(tmp_path, dashboard):
    from conftest import free_port

    env = _env(tmp_path, free_port())
    env["DASKPD_DASHBOARD_PORT"] = dashboard
    run_dir = tmp_path / "run"
    try:
        addr = _start_script(REPO / "cluster" / "local" / "start-cluster.sh", env)
        assert addr.startswith("tcp://127.0.0.1:")
        socks = listening(_pids(run_dir))
        assert len(socks) >= 3, socks
        assert {ip for _, ip, _ in socks} <= LOOPBACK, socks
    finally:
        _stop(run_dir, env)


@pytest.mark.cluster
def test_tls_cluster_has_no_plain_http_off_loopback(tmp_path):
    """cluster/tls: the comm ports speak only TLS; every HTTP server (dashboard, worker
    /health) is on loopback, even when the cluster listens on another interface."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed (needed by cluster/tls/make-certs.sh)")
    from conftest import free_port

    certs = tmp_path / "certs"
    subprocess.run(["bash", str(REPO / "cluster" / "tls" / "make-certs.sh"), str(certs)], check=True,
                   capture_output=True, timeout=120)
    env = _env(tmp_path, free_port())
    env["DASKPD_DASHBOARD_PORT"] = "0"
    run_dir = tmp_path / "run"
    try:
        addr = _start_script(REPO / "cluster" / "tls" / "start-tls-cluster.sh", env, [str(certs)])
        assert addr.startswith("tls://127.0.0.1:")
        socks = listening(_pids(run_dir))
        assert {ip for _, ip, _ in socks} <= LOOPBACK, socks
        # the HTTP servers are pinned to loopback whatever DASKPD_HOST is
        for pid in _pids(run_dir):
            cmd = psutil.Process(pid).cmdline()
            i = cmd.index("--dashboard-address")
            assert cmd[i + 1].startswith("127.0.0.1:"), cmd
        # the scheduler's comm port refuses plain HTTP (it is TLS)
        import urllib.request

        port = int(addr.rsplit(":", 1)[1])
        with pytest.raises(Exception):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5).read()
    finally:
        _stop(run_dir, env)
