"""Which scheduler runs a graph, how values reach the workers, and computing once.

The library never creates a cluster behind the user's back: :func:`compute` runs on the
current :class:`distributed.Client` when there is one (``Client(...)`` made by the user,
or by :func:`connect`), and otherwise on dask's local threaded scheduler.

Nothing a result depends on lives only in scattered data.  A value the driver already
holds is *embedded* in the graph (:func:`embed`: pickled once into the graph, so the
scheduler can hand it to a replacement worker), and an intermediate result that later
graphs build on is kept as a future of the graph that produced it (:func:`materialize`),
so dask recomputes it from its lineage when the worker holding it is lost.
"""
from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass

import dask

__all__ = ["current_client", "connect", "compute", "materialize", "embed", "Handle"]

#: graphs that embed a tree sample or fitted trees are a few MB: no warning below this
_GRAPH_WARNING = "256MiB"


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
            dashboard: bool = True, host: str = "127.0.0.1", processes: bool = True):
    """Return ``(client, cluster_or_None)``.

    ``scheduler``: an address (``tcp://host:8786``, ``tls://...``), the path of a
    scheduler file, ``"local"``/None (a LocalCluster sized to the machine, listening on
    ``host`` -- loopback by default, dashboard included; the
    ``DASK_SCHEDULER_ADDRESS`` environment variable wins when set).  ``processes=False``:
    the LocalCluster's workers are threads of this process (one worker, all threads).
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
    if not processes:  # one in-process worker holding every thread
        threads_per_worker, n_workers = max(1, n_workers * threads_per_worker), 1
    cluster = LocalCluster(
        n_workers=n_workers,
        threads_per_worker=threads_per_worker,
        memory_limit=memory_limit,
        host=host,
        dashboard_address=f"{host}:0" if dashboard else None,
        processes=processes,
        **({} if processes else {"protocol": "tcp://"}),  # in-process workers default to inproc://
    )
    return Client(cluster), cluster


def embed(obj):
    """``obj`` as one node of the graph (pickled once; every task that uses it depends on
    that node, and a lost copy is recreated from the graph)."""
    from dask import delayed

    return delayed(obj, pure=True, traverse=False)


@dataclass
class Handle:
    """A computed value on the driver, and how later graphs refer to it."""

    value: object
    ref: object  # a Future (lineage kept by the scheduler) or an embedded Delayed


_LIMITED = False


def one_blas_thread():
    """A context limiting BLAS / OpenMP to one thread (process-wide)."""
    try:
        from threadpoolctl import threadpool_limits

        return threadpool_limits(limits=1)
    except Exception:  # pragma: no cover - threadpoolctl unusable
        return contextlib.nullcontext()


def limit_worker_threads():
    """Once per dask worker process: BLAS / OpenMP on one thread (the worker's own
    threads are the parallelism; see :func:`one_blas_thread`), and glibc's mmap threshold
    raised to ``daskpd.worker-mmap-threshold`` (default 32 MiB).

    Dask starts workers with ``MALLOC_TRIM_THRESHOLD_`` set, which freezes glibc's mmap
    threshold at 128 KiB: every array above it is a fresh mapping whose pages fault in
    one by one, and the scan's arrays are mostly above it.  Below the raised threshold
    they come from the heap and are reused; freed memory at the top of the heap is still
    trimmed.  Measured in docs/benchmarks.md (set the config key to 0 to leave the
    worker's allocator alone).
    """
    global _LIMITED
    if _LIMITED:
        return
    try:
        from distributed import get_worker

        get_worker()
    except (ImportError, ValueError):
        return  # not in a worker: the local compute holds the limit
    _LIMITED = True
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=1)
    except Exception:  # pragma: no cover
        pass
    set_mmap_threshold(dask.config.get("daskpd.worker-mmap-threshold", "32MiB"))


def set_mmap_threshold(value) -> bool:
    """``mallopt(M_MMAP_THRESHOLD, value)`` on glibc (False where unavailable or 0)."""
    import ctypes
    import ctypes.util

    from dask.utils import parse_bytes

    nbytes = int(parse_bytes(value) if isinstance(value, str) else (value or 0))
    if nbytes <= 0 or sys.platform != "linux":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(-3, ctypes.c_int(min(nbytes, 2**31 - 1))))  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        return False


def _want_progress(progress) -> str | None:
    """``"bar"`` (a terminal), ``"log"`` (lines: a log file or pipe) or None; see
    :mod:`daskpd._engine.progress`."""
    from .progress import progress_mode

    return progress_mode(progress)


def _submit(client, objs, show):
    from .progress import show_futures

    with dask.config.set({"distributed.admin.large-graph-warning-threshold": _GRAPH_WARNING}):
        futures = client.compute(list(objs))
    show_futures(futures, show)
    return futures


def compute(*objs, progress=None):
    """Compute dask objects in ONE graph submission; return a tuple of results."""
    from .progress import local_progress

    client = current_client()
    show = _want_progress(progress)
    if client is not None:
        return tuple(client.gather(_submit(client, objs, show)))
    with local_progress(show, objs), one_blas_thread():
        return dask.compute(*objs)


def compute_keeping(gather: list, keep: list, *, progress=None):
    """Compute ``gather`` and ``keep`` (structures of dask objects) in ONE submission;
    return (the values of ``gather``, ``keep`` with every object replaced by a reference
    for later graphs: a future on a cluster -- the value stays on its worker, recomputed
    from lineage if lost -- or the embedded value on dask's threads)."""
    import dask

    flat, tree = dask.base.unpack_collections(*keep, traverse=True)
    client = current_client()
    if client is None:
        values = compute(*gather, *flat, progress=progress)
        refs = [embed(v) for v in values[len(gather):]]
        return list(values[:len(gather)]), list(tree(refs))
    futures = _submit(client, [*gather, *flat], _want_progress(progress))
    values = client.gather(futures[:len(gather)])
    return list(values), list(tree(futures[len(gather):]))


def materialize(*objs, progress=None) -> list[Handle]:
    """Compute ``objs`` in one submission and keep them for later graphs.

    With a Client the results stay on the workers as futures of the graph that made them
    (a lost copy is recomputed from that lineage) and a copy comes to the driver; on
    dask's threads the values are embedded in later graphs.
    """
    client = current_client()
    if client is None:
        return [Handle(v, embed(v)) for v in compute(*objs, progress=progress)]
    futures = _submit(client, objs, _want_progress(progress))
    values = client.gather(futures)
    return [Handle(v, f) for v, f in zip(values, futures)]
