"""A job's cluster: the home of connecting to it (:func:`connect`: the caller's Client,
an address, or a LocalCluster of our own; :func:`unguarded_script`), its dashboard link
and what the page needs (:func:`dashboard`, :func:`dashboard_hint`), and closing it in
silence (:func:`close`, :func:`quiet_logs`, :func:`quiet_worker`).
"""
from __future__ import annotations

import ast
import contextlib
import inspect
import logging
import multiprocessing
import os
import sys
import threading

from .._engine import scheduler as _cluster
from .inputs import log_line
from .spec import JobSpec

__all__ = ["connect", "close", "dashboard", "dashboard_hint", "unguarded_script", "quiet_logs", "quiet_worker",
           "CURRENT_CLIENT", "CHATTY_LOGGERS"]


def dashboard(client) -> str | None:
    try:
        link = client.dashboard_link
    except Exception:
        return None
    return link or None


def dashboard_hint(client, cluster) -> str:
    """Empty when the dashboard page can be drawn; else what to install, and where.

    The page is drawn by the scheduler's process with bokeh (a dependency of daskpd,
    so a LocalCluster has it); a scheduler started elsewhere needs it in its own
    environment."""
    import importlib.util

    need = "bokeh>=3.1"
    if cluster is not None:
        ok = importlib.util.find_spec("bokeh") is not None
        where = "this Python environment"
    else:
        try:
            ok = bool(client.run_on_scheduler(lambda: __import__("importlib.util").util.find_spec("bokeh") is not None))
        except Exception:
            return ""  # cannot tell: say nothing rather than guess
        where = "the scheduler's Python environment"
    if ok:
        return ""
    return (f" (the page needs {need} in {where}: pip install '{need}' there"
            + (", then restart the scheduler)" if cluster is None else ", then rerun)"))


#: ``where`` of a run on the caller's active Client
CURRENT_CLIENT = "current Client"


def unguarded_script() -> str | None:
    """The path of the script whose top-level code (no ``if __name__ == "__main__":``
    guard) is running this call, else None.

    Worker processes are started by *spawning* Python, which re-runs such a script in
    every worker: each one would run the job again.  Found from the ``<module>`` frame
    of ``__main__`` on the stack and the guards of its source (parsed with ``ast``)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or not path or not os.path.isfile(path):
        return None  # interactive, python -c, a notebook: spawn does not re-run anything
    frame = inspect.currentframe()
    line = None
    while frame is not None:
        if frame.f_globals is vars(main) and frame.f_code.co_name == "<module>":
            line = frame.f_lineno
            break
        frame = frame.f_back
    del frame
    if line is None:
        return None
    try:
        tree = ast.parse(open(path, encoding="utf-8").read(), path)
    except (OSError, SyntaxError, ValueError):
        return None

    def is_guard(test) -> bool:
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
            sides = [test.left, *test.comparators]
            return (any(isinstance(x, ast.Name) and x.id == "__name__" for x in sides)
                    and any(isinstance(x, ast.Constant) and x.value == "__main__" for x in sides))
        return False

    for node in ast.walk(tree):
        if isinstance(node, ast.If) and is_guard(node.test):
            if node.body[0].lineno <= line <= (node.body[-1].end_lineno or node.body[-1].lineno):
                return None
    return path


def connect(spec: JobSpec, scheduler, security, n_workers, threads_per_worker, log=None):
    """(client, LocalCluster we started or None, where).  The order: ``scheduler`` given
    to run_job; the caller's active Client; ``DASK_SCHEDULER_ADDRESS``; the spec's
    ``cluster.scheduler``; a LocalCluster (worker processes; threads in this process
    when run_job is called from the top level of a script without a ``__main__``
    guard, which worker processes would re-run)."""

    if multiprocessing.parent_process() is not None and getattr(sys.modules.get("__main__"), "__name__",
                                                                    "") == "__mp_main__":
        raise RuntimeError("run_job was called while a worker process was starting: it re-ran the script that "
                           "started the cluster. Put the run_job call under `if __name__ == \"__main__\":`")
    if not scheduler:
        current = _cluster.current_client()
        if current is not None:
            return current, None, CURRENT_CLIENT
    where = scheduler or os.environ.get("DASK_SCHEDULER_ADDRESS") or spec.cluster.scheduler or None
    if where and where != "local":
        if where.startswith("tls://"):
            from distributed.security import Security

            sec = security if security is not None else Security()
            if sec.get_connection_args("client").get("ssl_context") is None:
                raise ConnectionError(
                    f"the scheduler {where} speaks TLS but no client certificate is configured: pass "
                    "--tls-ca-file, --tls-cert and --tls-key, or set Dask's distributed.comm.tls.* config "
                    "(e.g. DASK_CONFIG=certs/dask-tls.yaml from cluster/tls/make-certs.sh)")
        try:
            client, cl = _cluster.connect(where, security=security)
        except _cluster.SchedulerTimeout:
            raise  # its message says it all
        except (OSError, TimeoutError) as exc:
            raise ConnectionError(f"cannot connect to the Dask scheduler at {where}: {exc} (is it running, and "
                                  "does it speak this protocol? a TLS-only scheduler needs tls:// and "
                                  "certificates)") from exc
        return client, cl, where
    script = unguarded_script()
    if script is not None:
        log_line(log, f"daskpd: run_job runs at the top level of {os.path.basename(script)} (no "
                      "`if __name__ == \"__main__\":` guard), where worker processes would re-run the script: the "
                      "LocalCluster runs in threads of this process (put the call under the guard for worker "
                      "processes)")
    client, cl = _cluster.connect(
        "local", n_workers=n_workers or spec.cluster.n_workers,
        threads_per_worker=threads_per_worker or spec.cluster.threads_per_worker,
        memory_limit=spec.cluster.memory_limit, security=security, processes=script is None)
    return client, cl, "local"


#: the loggers of a cluster's shutdown chatter
CHATTY_LOGGERS = ("distributed", "tornado", "asyncio")


def quiet_logs() -> dict:
    """Silence distributed's shutdown chatter in this process (run on our own
    LocalCluster's workers too); returns the levels it replaced."""
    before = {name: logging.getLogger(name).level for name in CHATTY_LOGGERS}
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)
    return before


def quiet_worker(driver_pid: int) -> None:
    """On a worker of our own LocalCluster, when a signal ends the run: its logs
    silenced and, in a worker process of its own, its stdout / stderr -- the user's
    terminal or log, which the worker processes share with this one -- pointed at
    /dev/null, so that nothing a worker writes while it is torn down lands among the
    lines of the run.  (Two fresh-clone CI runs saw a bare line break there, between
    the "cluster" line and the "terminated" line; this process writes nothing but
    ``daskpd:`` lines, so a worker process is the likely writer.)  A worker in this
    very process (a LocalCluster of threads) keeps the streams: they are the run's."""
    quiet_logs()
    if os.getpid() == driver_pid:
        return
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        for stream, fd in ((sys.stdout, 1), (sys.stderr, 2)):
            with contextlib.suppress(Exception):
                stream.flush()
            os.dup2(null, fd)
    finally:
        os.close(null)


def close(client, cluster, quiet: bool = False) -> None:
    """Close the client, then the LocalCluster we started (never an existing cluster).

    Our own LocalCluster is torn down in silence, however the run ended: a worker whose
    heartbeat falls between the scheduler's closing and its own (on a loaded machine,
    or under a signal while tasks run) logs "Failed to communicate with scheduler during
    heartbeat" with a CommClosedError traceback, and a nanny kills a worker slow to
    exit with a warning; nothing is lost then, and the run has said what it did.  So
    before closing, the workers' logs are silenced and their stdout / stderr pointed at
    /dev/null (:func:`quiet_worker`), and this process's distributed loggers (our
    scheduler and nannies) are silenced until the cluster is closed, then restored.
    ``quiet`` (a signal ended the run) silences this process's loggers for the client
    too.  The logging of an existing cluster is never touched.
    """
    own = cluster is not None and client is not None
    before = quiet_logs() if (quiet or own) else {}
    try:
        if own:
            pid = os.getpid()

            def quiet_workers():
                with contextlib.suppress(Exception):  # a worker already gone: nothing to quiet
                    client.run(quiet_worker, pid)

            th = threading.Thread(target=quiet_workers, daemon=True)
            th.start()
            th.join(5)  # a worker that cannot answer is not waited for
        for obj in (client, cluster):
            if obj is not None:
                with contextlib.suppress(Exception):
                    obj.close(timeout=10)
    finally:
        if not quiet:  # a signal ends the process: its loggers stay quiet
            for name, level in before.items():
                logging.getLogger(name).setLevel(level)
