"""Run directories: where a job's runs live, and how a finished run appears atomically.

Layout of a job directory::

    OUTPUT/JOB_NAME/
        RUN_ID/                 one complete run (never a partial one)
        latest -> RUN_ID        symlink (a LATEST text file where symlinks are unavailable)
        cache/firstpass/        ([run] first_pass_cache) pass 1 per input file (daskpd._strat.firstpass)
        .RUN_ID.tmp-PID/        only while a run is in progress

Concurrency: a run holds an exclusive lock on its job directory (``flock`` on the
directory itself, :func:`job_lock`) from before it plans until it has committed and
pruned; a second run of the same job in the same output root waits for it and says so,
then plans on the state the first one left (and takes the next free run id).  The lock
goes with its process: a killed run holds nothing.

Atomicity: a run is written into ``.RUN_ID.tmp-PID`` and renamed to ``RUN_ID`` at the
end by :func:`commit` (one ``rename``; on Linux an existing run of the same id is
swapped out with ``renameat2(RENAME_EXCHANGE)``, so readers see either the old or the
new run, never neither).  SIGTERM/SIGINT during a run raise :class:`JobTerminated`
(:func:`signals_raise`) and are deferred while committing (:func:`signals_blocked`); a
``kill -9`` leaves only a hidden ``.tmp-PID`` directory, which :func:`clean_stale`
removes once that PID is gone.  An output that cannot be written (read-only, permission
denied, disk full) raises :class:`OutputError` (:func:`output_fault`); the run's
temporary directory is removed and the earlier runs and ``latest`` stay as they were.
"""
from __future__ import annotations

import contextlib
import ctypes
import datetime as _dt
import errno
import fcntl
import hashlib
import os
import re
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

from .._engine import config
from .._errors import DataError
from .._strat.firstpass_cache import FirstPassCache
from ..results.base import OUTPUT_FAULTS, OutputError, atomic_path

__all__ = ["JobTerminated", "now", "default_run_id", "pid_alive", "rmtree", "clean_stale", "list_runs", "commit",
           "update_latest", "prune", "signals_raise", "signals_blocked", "safe_name", "sha256_file", "TMP_RE",
           "check_free_space", "OutputError", "output_fault", "FIRST_PASS_DIR", "first_pass_cache", "job_lock",
           "free_run_id", "DEFAULT_OUTPUT"]

#: the job directory's sub-directory holding pass 1 per input file ([run] first_pass_cache)
FIRST_PASS_DIR = "cache/firstpass"

#: hidden directories of runs in progress (``tmp``) or being replaced (``old``)
TMP_RE = re.compile(r"^\.(?P<run>.+)\.(?:tmp|old)-(?P<pid>\d+)$")

#: default output root when neither --output nor output.dir is given (relative to the cwd)
DEFAULT_OUTPUT = "daskpd-runs"


class JobTerminated(BaseException):
    """SIGTERM/SIGINT arrived during a run (a BaseException, so library code cannot swallow it)."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"terminated by signal {signal.Signals(signum).name}")



def first_pass_cache(job_dir: Path, stamps: list):
    """The job's :class:`daskpd.FirstPassCache` (``JOB/cache/firstpass``), keyed by the
    input files' stamps (``inputs.file_stamps``: path, size, and modification time / ETag
    or the bytes' hash)."""
    return FirstPassCache(Path(job_dir) / FIRST_PASS_DIR, {f["path"]: (f["size"], f["stamp"]) for f in stamps})


def now() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)


def default_run_id(at: _dt.datetime | None = None) -> str:
    """UTC timestamp ``YYYYMMDDTHHMMSSZ`` (sorts in time order, like ISO dates)."""
    return (at or now()).strftime("%Y%m%dT%H%M%SZ")


def pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def rmtree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def clean_stale(job_dir: Path) -> list[str]:
    """Remove ``.RUN.tmp-PID`` / ``.RUN.old-PID`` directories left by dead processes."""
    removed = []
    if not job_dir.is_dir():
        return removed
    for p in job_dir.iterdir():
        m = TMP_RE.match(p.name)
        if m and not pid_alive(int(m["pid"])):
            rmtree(p)
            removed.append(p.name)
    return removed


def _in_progress(job_dir: Path) -> str:
    """The runs in progress in ``job_dir`` (their temporary directories), as a message names them."""
    found = []
    with contextlib.suppress(OSError):
        for p in job_dir.iterdir():
            m = TMP_RE.match(p.name)
            if m and p.name.endswith(f".tmp-{m['pid']}") and not m["run"].startswith("daskpd-state-") \
                    and pid_alive(int(m["pid"])):
                found.append(f"run {m['run']}, pid {m['pid']}")
    return f" ({'; '.join(sorted(found))})" if found else ""


@contextlib.contextmanager
def job_lock(job_dir: Path, say=None):
    """Hold the job's lock while the block runs: an exclusive ``flock`` on the job
    directory (made when missing), which its process holds until the block ends or it
    dies.  A run that finds it taken says so (``say``: a callable taking one line) and
    waits.  Yields the seconds waited (0.0: the lock was free), or None where the file
    system cannot lock a directory (then ``say`` tells that runs are not serialised)."""
    say = say or (lambda line: None)
    t0 = time.perf_counter()
    blocked = False
    while True:
        job_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(job_dir, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                say(f"daskpd: another run of this job is in progress in {str(job_dir)!r}{_in_progress(job_dir)}; "
                    "waiting for it to finish")
                blocked = True
                fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as exc:  # BlockingIOError is handled above: no locks on this file system
            os.close(fd)
            if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL, errno.EBADF, errno.ENOSYS):
                raise
            say(f"daskpd: note: the file system of {str(job_dir)!r} cannot lock it ({os.strerror(exc.errno)}): "
                "runs of this job started at the same time are not serialised")
            yield None
            return
        except BaseException:
            os.close(fd)
            raise
        try:  # the directory may have gone while this run waited (an empty one, removed by a failed run)
            same = os.path.samestat(os.fstat(fd), os.stat(job_dir))
        except OSError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        yield time.perf_counter() - t0 if blocked else 0.0
    finally:
        os.close(fd)


def free_run_id(job_dir: Path, run_id: str) -> str:
    """``run_id``, or when a run of that id exists, ``run_id-2``, ``-3``, ... (the first free)."""
    if not (job_dir / run_id).exists():
        return run_id
    i = 2
    while (job_dir / f"{run_id}-{i}").exists():
        i += 1
    return f"{run_id}-{i}"


def check_free_space(where: Path, need: int, what: str) -> None:
    """Refuse up front (``DataError``, nothing written) when the file system of ``where``
    has less than ``need`` bytes free plus the ``daskpd.output-reserve`` config (default
    64 MiB, left for everything else on that disk)."""
    from dask.utils import format_bytes, parse_bytes


    probe = where
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        free = shutil.disk_usage(probe).free
    except OSError:
        return
    reserve = config.get("output-reserve")
    reserve = int(parse_bytes(reserve) if isinstance(reserve, str) else reserve)
    if free < need + reserve:
        raise DataError(f"not enough free space for {what} in {str(probe)!r}: {format_bytes(free)} free, it needs "
                        f"about {format_bytes(need)} plus the {format_bytes(reserve)} daskpd.output-reserve; free "
                        "some space or choose another --output (nothing was computed or written)")


def list_runs(job_dir: str | os.PathLike) -> list[str]:
    """Complete runs of a job (directories holding manifest.json), oldest first by run id."""
    job_dir = Path(job_dir)
    if not job_dir.is_dir():
        return []
    runs = [p.name for p in job_dir.iterdir()
            if not p.name.startswith(".") and not p.is_symlink() and p.is_dir() and (p / "manifest.json").is_file()]
    return sorted(runs)



_RENAME_EXCHANGE = 2


def exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths (Linux renameat2); False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd = -100
    rc = fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), _RENAME_EXCHANGE)
    return rc == 0


def commit(tmp: Path, final: Path) -> bool:
    """Move the finished ``tmp`` run to ``final``, replacing an existing run atomically.
    Returns whether a run of that id was replaced."""
    try:
        os.rename(tmp, final)
        return False
    except OSError:
        if not final.exists():
            raise
    # a run with this id exists: swap it out
    if exchange(tmp, final):
        rmtree(tmp)  # now holds the old run
        return True
    old = final.parent / f".{final.name}.old-{os.getpid()}"
    os.rename(final, old)
    os.rename(tmp, final)
    rmtree(old)
    return True


def update_latest(job_dir: Path) -> str | None:
    """Point ``latest`` at the newest run (by run id), atomically.  Returns the run id."""
    runs = list_runs(job_dir)
    if not runs:
        return None
    newest = runs[-1]
    try:
        with atomic_path(job_dir / "latest") as tmp:
            os.symlink(newest, tmp)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(job_dir / "LATEST")
    except OSError as exc:  # no symlinks here (EPERM, ENOTSUP ...): a text file
        if exc.errno in OUTPUT_FAULTS - {errno.EPERM}:  # nothing can be written here: leave both as they are
            raise
        with atomic_path(job_dir / "LATEST") as tmp:
            Path(tmp).write_text(newest + "\n")
    return newest


def output_fault(exc: BaseException, job_dir: Path, tmp: Path | None = None,
                 suffix: str = "(no run was written)", what: str | None = None) -> OutputError | None:
    """``exc`` as an :class:`OutputError` when it is an output fault
    (:data:`~daskpd.results.base.OUTPUT_FAULTS`: read-only, permission denied, disk full,
    file too large), naming ``job_dir`` (or the directory outside it that failed) and the
    file of the run's temporary directory ``tmp`` being written (``what`` when the error
    names no file); else None."""
    if not isinstance(exc, OSError) or exc.errno not in OUTPUT_FAULTS:
        return None
    where, detail = Path(job_dir), f"writing {what}" if what else ""
    if exc.filename is not None:
        fn = Path(os.fsdecode(exc.filename))
        if tmp is not None and fn.is_relative_to(tmp):
            rel = fn.relative_to(tmp)
            m = re.fullmatch(r"\.(.+)\.tmp-\d+", rel.name)  # atomic_path's temporary name of a file
            rel = (rel.with_name(m[1]) if m else rel).as_posix()
            detail = "" if rel == "." else f"writing {rel}"
        elif not fn.is_relative_to(where):
            where = fn  # e.g. the output root that could not be made
    return OutputError(exc.errno, where, detail=detail, instead="--output", suffix=suffix)


def prune(job_dir: Path, keep: int) -> list[str]:
    if keep <= 0:
        return []
    runs = list_runs(job_dir)
    gone = runs[:-keep] if len(runs) > keep else []
    for r in gone:
        trash = job_dir / f".{r}.old-{os.getpid()}"
        os.rename(job_dir / r, trash)
        rmtree(trash)
    return gone


@contextlib.contextmanager
def signals_raise():
    """While running: SIGTERM/SIGINT raise :class:`JobTerminated` in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise JobTerminated(signum)

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextlib.contextmanager
def signals_blocked():
    """Defer SIGTERM/SIGINT while committing (delivered when the block ends)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    sigs = {signal.SIGTERM, signal.SIGINT}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def safe_name(name: str) -> str:
    s = re.sub(r"[^A-Za-z0-9_.-]+", "_", str(name)).strip("._") or "feature"
    return s[:80]



def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
