"""Which scheduler runs the graph, and computing it once (with optional progress).

The library never creates a cluster behind the user's back: ``compute`` runs on the
current :class:`distributed.Client` when there is one (``Client(...)`` made by the user,
or by :func:`connect`), and otherwise on dask's local threaded scheduler.  The CLI uses
:func:`connect` to start a LocalCluster sized to the machine or to join an address.
"""
from __future__ import annotations

import contextlib
import os
import sys

import dask

__all__ = ["current_client", "connect", "compute", "share"]


def current_client():
    """The active distributed Client, or None."""
    try:
        from distributed import get_client
    except ImportError:  # pragma: no cover - distributed is a hard dependency
        return None
    try:
        return get_client()
    except ValueError:
        return None


def connect(scheduler: str | None = None, *, n_workers: int | None = None,
            threads_per_worker: int | None = None, memory_limit="auto", security=None,
            dashboard: bool = True):
    """Return ``(client, cluster_or_None)``.

    ``scheduler``: an address (``tcp://host:8786``, ``tls://...``), the path of a
    scheduler file, ``"local"``/None (a LocalCluster sized to the machine; the
    ``DASK_SCHEDULER_ADDRESS`` environment variable wins when set).
    """
    from distributed import Client, LocalCluster

    scheduler = scheduler or os.environ.get("DASK_SCHEDULER_ADDRESS") or None
    if scheduler and scheduler != "local":
        if os.path.isfile(scheduler):
            return Client(scheduler_file=scheduler, security=security), None
        return Client(scheduler, security=security), None
    ncores = os.cpu_count() or 1
    if n_workers is None:
        n_workers = max(1, min(ncores, 4)) if ncores > 1 else 1
    if threads_per_worker is None:
        threads_per_worker = max(1, ncores // n_workers)
    cluster = LocalCluster(
        n_workers=n_workers,
        threads_per_worker=threads_per_worker,
        memory_limit=memory_limit,
        dashboard_address=":0" if dashboard else None,
        processes=True,
    )
    return Client(cluster), cluster


def share(obj):
    """Put a large driver-side object (a sample, fitted trees) where tasks can use it.

    On a distributed cluster the object is scattered once to a worker and the tasks
    depend on that Future (instead of the object being pickled into the graph); without
    a cluster it becomes a single delayed object.
    """
    from dask import delayed

    client = current_client()
    if client is not None:
        return client.scatter(obj, direct=False, hash=False)
    return delayed(obj, pure=True, traverse=False)


def _want_progress(progress) -> bool:
    if progress is None:
        return bool(getattr(sys.stderr, "isatty", lambda: False)())
    return bool(progress)


def compute(*objs, progress=None):
    """Compute dask objects in ONE graph submission; return a tuple of results."""
    client = current_client()
    show = _want_progress(progress)
    if client is not None:
        futures = client.compute(list(objs))
        if show:
            from distributed import progress as dprogress

            with contextlib.redirect_stdout(sys.stderr):  # keep stdout for results
                dprogress(futures)
            print(file=sys.stderr)
        return tuple(client.gather(futures))
    ctx = contextlib.nullcontext()
    if show:
        from dask.diagnostics import ProgressBar

        ctx = ProgressBar(out=sys.stderr)
    with ctx:
        return dask.compute(*objs)
