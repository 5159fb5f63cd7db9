"""Output faults end a run with one line and exit 2: a read-only file system (EROFS), a
directory the user may not write to (EACCES), a disk that fills during the run (ENOSPC)
and a file-size limit hit in the middle of a file (EFBIG).  After each: no new run, no
temporary directory left (or, where the file system forbids removing it, only a hidden
``.RUN.tmp-PID`` that no listing shows and the next run removes), and ``latest`` still
points at the previous complete run, whose files are unchanged.  The same faults from
``Result.to_parquet`` raise :class:`OutputError` naming the path and leave the old file.

Every fault is the kernel's own error on a real file system, no mocks:

* EROFS: a tmpfs mounted here and remounted read-only (needs mount permission; skipped
  where there is none);
* EACCES: a directory with mode 0555, the CLI run by a process without
  CAP_DAC_OVERRIDE (when the tests run as root, the wrapper drops every capability from
  the bounding set before exec, so uid 0 gets none, as in a container without them);
* EFBIG: ``RLIMIT_FSIZE`` set in the CLI's process (SIGXFSZ ignored, as Python does), so
  the write stops part-way through a file;
* ENOSPC: a small tmpfs filled up by the test while the run computes (needs mount).
"""
from __future__ import annotations

import errno
import json
import os
import pickle
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
from daskpd.job.store import TMP_RE, list_runs
from daskpd.results.base import OutputError

pytestmark = pytest.mark.cluster

#: the worktree/installation whose daskpd the tests import: the CLI children use the same
CODE_ROOT = str(Path(daskpd.__file__).resolve().parents[1])
JOB = "faults"

#: run as ``python -c WRAPPER OPTS_JSON CMD...``: optional file-size limit and dropped
#: capabilities, then exec CMD (the limit and the ignored SIGXFSZ survive exec)
WRAPPER = r"""
import ctypes, json, os, resource, signal, sys
opts = json.loads(sys.argv[1])
if opts.get("fsize") is not None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (opts["fsize"], opts["fsize"]))
if opts.get("drop_caps") and os.geteuid() == 0:
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in range(64):
        libc.prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP: after exec uid 0 holds no capability
os.execv(sys.argv[2], sys.argv[2:])
"""


def wrapped(cmd, **opts) -> list[str]:
    return [sys.executable, "-c", WRAPPER, json.dumps(opts), *cmd]


def env() -> dict:
    return dict(os.environ, PYTHONPATH=CODE_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
                DASK_DASKPD__OUTPUT_RESERVE="0")


def make_job(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    n = 3000
    df = pd.DataFrame({"x1": rng.uniform(-1, 1, n), "x2": rng.uniform(-1, 1, n), "c": rng.integers(0, 4, n)})
    df["y"] = 2 * df["x1"] + df["x2"] ** 2 + df["c"] + rng.normal(0, 0.01, n)
    df.to_parquet(tmp_path / "d.parquet", index=False)
    p = tmp_path / "job.toml"
    p.write_text(f'name = "{JOB}"\ntarget = "y"\nmethods = ["stratpd", "catstratpd"]\ncategorical = ["c"]\n'
                 f'[source]\npath = "{tmp_path / "d.parquet"}"\n')
    return p


def cli_cmd(job: Path, out: Path, scheduler: str, run_id: str) -> list[str]:
    return [sys.executable, "-m", "daskpd.cli", "run", str(job), "--output", str(out), "--scheduler", scheduler,
            "--run-id", run_id, "--no-progress"]


def run_cli(cmd, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env(), **kw)


@pytest.fixture(scope="module")
def template(dask_cluster, tmp_path_factory) -> tuple[Path, Path]:
    """``(job spec, job directory holding one complete run r1)``, made once by the CLI."""
    d = tmp_path_factory.mktemp("faults-r1")
    job = make_job(d)
    p = run_cli(cli_cmd(job, d / "out", dask_cluster, "r1"))
    assert p.returncode == 0, p.stderr
    return job, d / "out" / JOB


def first_run(template: tuple[Path, Path], out: Path) -> tuple[Path, dict]:
    """Give ``out`` the complete run r1 (a copy of the template's, ``latest`` included);
    return the job spec and what must survive every later fault unchanged."""
    job, job_dir = template
    shutil.copytree(job_dir, out / JOB, symlinks=True)
    return job, snapshot(out / JOB)


def snapshot(job_dir: Path) -> dict:
    return {"entries": sorted(p.name for p in job_dir.iterdir()),
            "latest": os.readlink(job_dir / "latest"),
            "files": {p.relative_to(job_dir).as_posix(): p.read_bytes() for p in (job_dir / "r1").rglob("*")
                      if p.is_file()}}


def assert_one_line(p: subprocess.CompletedProcess, *phrases: str, before_computing: bool = False) -> str:
    """Exit 2, no traceback; the last line is the one error line (after the run's own
    ``daskpd: job/cluster`` lines when it failed after computing); returns it."""
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr, p.stderr
    lines = p.stderr.strip().splitlines()
    assert all(ln.startswith("daskpd: ") for ln in lines), p.stderr
    assert [ln for ln in lines if "error" in ln] == lines[-1:], p.stderr
    assert lines[-1].startswith("daskpd: error: cannot write to "), p.stderr
    if before_computing:
        assert len(lines) == 1, p.stderr
    for ph in phrases:
        assert ph in lines[-1], lines[-1]
    return lines[-1]


def assert_unchanged(job_dir: Path, before: dict, leftover_ok: bool = False) -> None:
    after = snapshot(job_dir)
    hidden = [e for e in after["entries"] if e not in before["entries"]]
    if leftover_ok:  # only where the file system refuses to remove it: hidden, and named incomplete
        assert all(TMP_RE.match(e) and ".tmp-" in e for e in hidden), hidden
    else:
        assert hidden == [], hidden
    assert [e for e in after["entries"] if e not in hidden] == before["entries"]
    assert after["latest"] == before["latest"] == "r1"
    assert after["files"] == before["files"]
    assert list_runs(job_dir) == ["r1"]


# ------------------------------------------------------------------ a real tmpfs
def _mount(*args) -> subprocess.CompletedProcess:
    return subprocess.run(["mount", *args], capture_output=True, text=True)


@pytest.fixture
def tmpfs(tmp_path):
    """A fresh 32 MiB tmpfs; yields (path, remount); skipped where mounting is not allowed."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    p = _mount("-t", "tmpfs", "-o", "size=32m,mode=0755", "tmpfs", str(mnt))
    if p.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (no CAP_SYS_ADMIN?): {p.stderr.strip()}")

    def remount(mode: str) -> None:
        q = _mount("-o", f"remount,{mode}", str(mnt))
        assert q.returncode == 0, q.stderr

    try:
        yield mnt, remount
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


# ------------------------------------------------------------------ EROFS
def test_read_only_file_system_before_and_during_the_run(dask_cluster, template, tmp_path, tmpfs):
    mnt, remount = tmpfs
    out = mnt / "out"
    job, before = first_run(template, out)

    # read-only from the start: refused before computing
    remount("ro")
    p = run_cli(cli_cmd(job, out, dask_cluster, "r2"))
    line = assert_one_line(p, before_computing=True)
    assert line == (f"daskpd: error: cannot write to {out / JOB}: read-only file system (EROFS); choose a writable "
                    "--output (nothing was computed or written)")
    assert_unchanged(out / JOB, before)

    # a new output root on it: named
    p = run_cli(cli_cmd(job, mnt / "new" / "root", dask_cluster, "r2"))
    assert_one_line(p, f"cannot write to {mnt / 'new'}: read-only file system (EROFS)", before_computing=True)
    assert not (mnt / "new").exists()

    # turned read-only while the run computes: the hidden temporary directory cannot be
    # removed on a read-only file system; it is the only trace, no listing shows it, and
    # the next run removes it
    remount("rw")
    proc, lines = popen_lines(cli_cmd(job, out, dask_cluster, "r3"))
    try:
        wait_for(lines, proc, "daskpd: cluster ")
        remount("ro")
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = "".join(lines)
    assert proc.returncode == 2 and "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"daskpd: error: cannot write to {out / JOB}: read-only file system (EROFS)"), err
    assert last.endswith("; choose a writable --output (no run was written)"), err
    assert_unchanged(out / JOB, before, leftover_ok=True)
    remount("rw")
    p = run_cli(cli_cmd(job, out, dask_cluster, "r4"))
    assert p.returncode == 0, p.stderr
    assert sorted(e.name for e in (out / JOB).iterdir()) == ["latest", "r1", "r4"]
    assert os.readlink(out / JOB / "latest") == "r4"


def popen_lines(cmd):
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env())
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True).start()
    return proc, lines


def wait_for(lines, proc, prefix, timeout=300):
    deadline = time.monotonic() + timeout
    while not any(ln.startswith(prefix) for ln in list(lines)):
        assert proc.poll() is None and time.monotonic() < deadline, "".join(lines)
        time.sleep(0.02)


# ------------------------------------------------------------------ ENOSPC
def fill(mnt: Path, leave: int) -> Path:
    """Fill the file system of ``mnt`` up, then give back about ``leave`` bytes."""
    filler = mnt / "filler"
    block = b"\0" * (1 << 20)
    with open(filler, "wb", buffering=0) as fh:
        for chunk in (block, b"\0" * 4096, b"\0"):
            while True:
                try:
                    fh.write(chunk)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC
                    break
        os.ftruncate(fh.fileno(), max(0, os.fstat(fh.fileno()).st_size - leave))
    return filler


def test_disk_fills_up_during_the_run(dask_cluster, template, tmp_path, tmpfs):
    mnt, _ = tmpfs
    out = mnt / "out"
    job, before = first_run(template, out)
    curves = len(before["files"]["r1/curves.parquet"])
    proc, lines = popen_lines(cli_cmd(job, out, dask_cluster, "r2"))
    try:
        wait_for(lines, proc, "daskpd: cluster ")  # the run's directory exists, the computing starts
        filler = fill(mnt, leave=curves // 3)  # room for a third of the first table
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = "".join(lines)
    assert proc.returncode == 2, f"the run did not fail (did it finish before the disk was full?): {err}"
    assert "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    assert last == (f"daskpd: error: cannot write to {out / JOB}: no space left on device (ENOSPC) writing "
                    "curves.parquet; free some space or choose another --output (no run was written)"), err
    assert_unchanged(out / JOB, before)
    filler.unlink()
    p = run_cli(cli_cmd(job, out, dask_cluster, "r3"))  # room again: the next run works
    assert p.returncode == 0, p.stderr
    assert os.readlink(out / JOB / "latest") == "r3"


# ------------------------------------------------------------------ EFBIG
@pytest.mark.parametrize("where", ["curves.parquet", "report.html"])
def test_file_size_limit_hit_in_the_middle_of_a_file(dask_cluster, template, tmp_path, where):
    out = tmp_path / "out"
    job, before = first_run(template, out)
    sizes = {k.split("/", 1)[1]: len(v) for k, v in before["files"].items()}
    if where == "curves.parquet":  # the first file written: stops a third of the way in
        limit = sizes["curves.parquet"] // 3
    else:  # the last file before the manifest: every table and plot fits, the report does not
        limit = max(v for k, v in sizes.items() if k not in ("report.html", "manifest.json")) + 1
        assert limit < sizes["report.html"] // 2, sizes
    p = run_cli(wrapped(cli_cmd(job, out, dask_cluster, "r2"), fsize=limit))
    line = assert_one_line(p)
    assert line == (f"daskpd: error: cannot write to {out / JOB}: file too large (EFBIG) writing {where}; raise the "
                    "file-size limit (ulimit -f) or choose another --output (no run was written)")
    assert_unchanged(out / JOB, before)


# ------------------------------------------------------------------ EACCES
def test_permission_denied(dask_cluster, template, tmp_path):
    out = tmp_path / "out"
    job, before = first_run(template, out)
    (out / JOB).chmod(0o555)
    try:
        probe = subprocess.run(wrapped([sys.executable, "-c", f"open({str(out / JOB / 'probe')!r}, 'w')"],
                                       drop_caps=True), capture_output=True, text=True)
        if probe.returncode == 0:
            os.unlink(out / JOB / "probe")
            pytest.skip("this process cannot give up the capability to write a 0555 directory")
        assert "PermissionError" in probe.stderr, probe.stderr
        p = run_cli(wrapped(cli_cmd(job, out, dask_cluster, "r2"), drop_caps=True))
        line = assert_one_line(p, before_computing=True)
        assert line == (f"daskpd: error: cannot write to {out / JOB}: permission denied (EACCES); choose a --output "
                        "you may write to, or fix its permissions (nothing was computed or written)")
        assert_unchanged(out / JOB, before)
    finally:
        (out / JOB).chmod(0o755)


# ------------------------------------------------------------------ the Python API: Result.to_parquet
TO_PARQUET = r"""
import errno, os, pickle, sys
from daskpd.results.base import OutputError
r = pickle.load(open(sys.argv[1], "rb"))
try:
    r.to_parquet(sys.argv[2])
except OutputError as exc:
    assert isinstance(exc, OSError)
    print(errno.errorcode[exc.errno], exc.filename == sys.argv[2], str(exc), sep="\n")
else:
    print("written")
"""


@pytest.fixture(scope="module")
def curve(tmp_path_factory):
    rng = np.random.default_rng(1)
    df = pd.DataFrame({"x": rng.uniform(size=4000), "z": rng.uniform(size=4000)})
    df["y"] = df["x"] ** 2 + df["z"]
    r = daskpd.stratpd(df, target="y", feature="x", progress=False)
    p = tmp_path_factory.mktemp("curve") / "r.pkl"
    p.write_bytes(pickle.dumps(r))
    return r, p


def old_file(d: Path) -> Path:
    d.mkdir(exist_ok=True)
    target = d / "curve.parquet"
    target.write_bytes(b"the previous file")
    return target


def to_parquet_in_child(pkl: Path, target: Path, **opts) -> list[str]:
    p = subprocess.run(wrapped([sys.executable, "-c", TO_PARQUET, str(pkl), str(target)], **opts),
                       capture_output=True, text=True, timeout=120, env=env())
    assert p.returncode == 0, p.stderr
    return p.stdout.strip().splitlines()


def test_to_parquet_file_size_limit(curve, tmp_path):
    r, pkl = curve
    target = old_file(tmp_path / "d")
    size = len(pd.DataFrame(r.to_frame()).to_parquet())
    code, same, msg = to_parquet_in_child(pkl, target, fsize=size // 3)
    assert code == "EFBIG" and same == "True"
    assert msg == (f"cannot write to {target}: file too large (EFBIG); raise the file-size limit (ulimit -f) or "
                   "choose another location")
    assert target.read_bytes() == b"the previous file" and os.listdir(target.parent) == ["curve.parquet"]


def test_to_parquet_permission_denied(curve, tmp_path):
    r, pkl = curve
    target = old_file(tmp_path / "d")
    target.parent.chmod(0o555)
    try:
        out = to_parquet_in_child(pkl, target, drop_caps=True)
        if out == ["written"]:
            pytest.skip("this process cannot give up the capability to write a 0555 directory")
        assert out[0] == "EACCES" and out[2] == (f"cannot write to {target}: permission denied (EACCES); choose a "
                                                 "location you may write to, or fix its permissions")
    finally:
        target.parent.chmod(0o755)
    assert target.read_bytes() == b"the previous file" and os.listdir(target.parent) == ["curve.parquet"]


def test_to_parquet_read_only_file_system(curve, tmpfs):
    r, _ = curve
    mnt, remount = tmpfs
    target = old_file(mnt / "d")
    remount("ro")
    with pytest.raises(OutputError) as info:
        r.to_parquet(target)
    assert info.value.errno == errno.EROFS and isinstance(info.value, OSError) and info.value.filename == str(target)
    assert str(info.value) == f"cannot write to {target}: read-only file system (EROFS); choose a writable location"
    assert target.read_bytes() == b"the previous file" and os.listdir(target.parent) == ["curve.parquet"]
    again = pickle.loads(pickle.dumps(info.value))  # crosses processes (dask) intact
    assert type(again) is OutputError and str(again) == str(info.value) and again.errno == errno.EROFS
