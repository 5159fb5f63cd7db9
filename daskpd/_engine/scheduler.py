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
import ctypes
import ctypes.util
import os
import sys
import threading
import time
from dataclasses import dataclass

import dask

__all__ = ["current_client", "connect", "compute", "submit", "compute_streamed", "materialize", "embed", "Handle", "probe",
           "scheduler_timeout", "SchedulerTimeout"]

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
            dashboard: bool = True, host: str = "127.0.0.1", processes: bool = True, timeout=None):
    """Return ``(client, cluster_or_None)``.

    ``scheduler``: an address (``tcp://host:8786``, ``tls://...``), the path of a
    scheduler file, ``"local"``/None (a LocalCluster sized to the machine, listening on
    ``host`` -- loopback by default, dashboard included; the
    ``DASK_SCHEDULER_ADDRESS`` environment variable wins when set).  ``processes=False``:
    the LocalCluster's workers are threads of this process (one worker, all threads).

    Connecting to an existing scheduler never waits longer than ``timeout`` (seconds or
    a string like ``"30s"``; default the ``daskpd.scheduler-timeout`` config, else
    ``distributed.comm.timeouts.connect``) for the connection and for the scheduler's
    first answer: :func:`probe` asks for its identity first, so a scheduler that accepts
    TCP but never answers (a stopped process) is a :class:`SchedulerTimeout`, not a hang.
    """
    from distributed import Client, LocalCluster

    scheduler = scheduler or os.environ.get("DASK_SCHEDULER_ADDRESS") or None
    if scheduler and scheduler != "local":
        limit = scheduler_timeout(timeout)
        address = scheduler
        if os.path.isfile(scheduler):
            address = _address_from_file(scheduler)
        probe(address, security=security, timeout=limit)
        return Client(address, security=security, timeout=limit), None
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


class SchedulerTimeout(ConnectionError):
    """The scheduler did not answer in time (a ConnectionError: the CLI's exit status 2)."""


def scheduler_timeout(value=None) -> float:
    """Seconds to wait for a scheduler: ``value``, else ``daskpd.scheduler-timeout``, else
    ``distributed.comm.timeouts.connect``."""
    from dask.utils import parse_timedelta

    if value is None:
        value = dask.config.get("daskpd.scheduler-timeout", None) or dask.config.get(
            "distributed.comm.timeouts.connect", "30s")
    t = parse_timedelta(value, default="seconds")
    if not t or t <= 0:
        raise ValueError(f"the scheduler timeout must be > 0; got {value!r}")
    return float(t)


def _address_from_file(path: str) -> str:
    import json

    try:
        with open(path) as fh:
            return json.load(fh)["address"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConnectionError(f"scheduler file {path!r} is not readable or holds no address: {exc}") from None


def probe(address: str, *, security=None, timeout: float = 30.0) -> dict:
    """Connect to ``address`` and ask for the scheduler's identity, all within
    ``timeout`` seconds (run on a private event loop in a helper thread, so no caller's
    loop and no half-open socket can make it wait longer).  Returns the identity;
    raises :class:`SchedulerTimeout` or ``OSError``."""
    import asyncio
    import threading

    out: dict = {}

    async def ask():
        from distributed.comm import connect

        args = security.get_connection_args("client") if security is not None else {}
        if security is None:
            from distributed.security import Security

            args = Security().get_connection_args("client")
        comm = await asyncio.wait_for(connect(address, timeout=timeout, **args), timeout)
        try:
            await asyncio.wait_for(comm.write({"op": "identity", "reply": True}), timeout)
            return await asyncio.wait_for(comm.read(), timeout)
        finally:
            comm.abort()

    def main():
        try:
            out["value"] = asyncio.run(asyncio.wait_for(ask(), timeout))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            out["error"] = exc

    th = threading.Thread(target=main, name="daskpd-scheduler-probe", daemon=True)
    th.start()
    th.join(timeout + 5)
    err = out.get("error")
    if th.is_alive() or isinstance(err, (asyncio.TimeoutError, TimeoutError)):
        raise SchedulerTimeout(
            f"cannot connect to the Dask scheduler at {address}: no answer within {timeout:g} s (something accepts "
            "connections there but does not reply: a stopped or overloaded scheduler, or not a Dask scheduler); "
            "the limit is --scheduler-timeout / the daskpd.scheduler-timeout config") from None
    if err is not None:
        if isinstance(err, OSError):
            raise err
        raise ConnectionError(f"{type(err).__name__}: {err}") from err
    value = out.get("value")
    if not isinstance(value, dict) or value.get("type") not in (None, "Scheduler"):
        raise ConnectionError(f"{address} answered, but not as a Dask scheduler: {str(value)[:200]!r}")
    return value


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
    threads are the parallelism; see :func:`one_blas_thread`), glibc's mmap threshold
    raised to ``daskpd.worker-mmap-threshold`` (default 32 MiB), pyarrow's buffers
    taken from that same allocator (``daskpd.worker-arrow-pool``, :func:`set_arrow_pool`)
    and the heap trimmer started (:func:`start_heap_trimmer`).

    Dask starts workers with ``MALLOC_TRIM_THRESHOLD_`` set, which freezes glibc's mmap
    threshold at 128 KiB: every array above it is a fresh mapping whose pages fault in
    one by one, and the scan's arrays are mostly above it.  Below the raised threshold
    they come from the heap and are reused; free memory beyond ``daskpd.worker-heap-trim``
    bytes is given back, at the top of a heap by free() itself, the rest by the heap
    trimmer (set the config keys to 0 to leave the worker's allocator alone).
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
    set_arrow_pool(dask.config.get("daskpd.worker-arrow-pool", "system"))
    start_heap_trimmer(dask.config.get("daskpd.worker-heap-trim", "auto"))


#: ``daskpd.worker-arrow-pool`` values: pyarrow's memory pools by backend name
ARROW_POOLS = ("system", "mimalloc", "jemalloc")


def set_arrow_pool(value) -> bool:
    """Make pyarrow's default memory pool (where parquet reads put their buffers) the one
    named by ``value`` (:data:`ARROW_POOLS`); ``"keep"`` (or 0 / None) leaves it alone.

    The workers use ``"system"``: glibc's malloc, whose heap below the raised mmap
    threshold is reused from one partition to the next and trimmed by the heap trimmer.
    pyarrow's default, mimalloc, hands freed segments back to the OS within milliseconds,
    so every read faulted its ~50 MB of buffers in again: at 1e7 rows of the lake
    benchmark the workers took 0.81-0.98 M page faults each (2.7-4.0 s of system time)
    against 0.57-0.68 M (2.2-2.6 s) with the system pool, and the call 15.0-16.2 s against
    13.5-14.1 s.
    """
    if value in (None, False, 0, "0", "keep"):
        return False
    if value not in ARROW_POOLS:
        raise ValueError(f"daskpd.worker-arrow-pool must be one of {', '.join(map(repr, ARROW_POOLS))} or "
                         f"'keep'; got {value!r}")
    import pyarrow as pa

    try:
        pool = getattr(pa, f"{value}_memory_pool")()
    except (NotImplementedError, pa.ArrowNotImplementedError) as exc:
        raise ValueError(f"daskpd.worker-arrow-pool is {value!r}, but this pyarrow ({pa.__version__}) was built "
                         f"without that allocator ({exc}); use 'system' or 'keep'") from exc
    pa.set_memory_pool(pool)
    return True


def _libc():
    """The C library (ctypes), or None where it cannot be loaded."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


def set_mmap_threshold(value) -> bool:
    """``mallopt(M_MMAP_THRESHOLD, value)`` on glibc (False where unavailable or 0)."""
    from dask.utils import parse_bytes

    nbytes = int(parse_bytes(value) if isinstance(value, str) else (value or 0))
    if nbytes <= 0 or sys.platform != "linux":
        return False
    try:
        return bool(_libc().mallopt(-3, ctypes.c_int(min(nbytes, 2**31 - 1))))  # M_MMAP_THRESHOLD
    except AttributeError:  # no C library, or not glibc's
        return False


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


#: how often the heap trimmer looks at the free heap (seconds)
HEAP_TRIM_INTERVAL = 0.2
_TRIMMER = None


def heap_trim_threshold(value, memory_limit: int | None) -> int:
    """Free heap bytes above which :func:`start_heap_trimmer` gives memory back: ``"auto"``
    is 1/16 of the worker's memory limit (at least 32 MiB; 256 MiB without a limit), 0 or
    False turns trimming off."""
    from dask.utils import parse_bytes

    if value in (None, False, 0, "0", "off", "none", "None"):
        return 0
    if value == "auto":
        return max(32 << 20, int(memory_limit) // 16) if memory_limit else 256 << 20
    return int(parse_bytes(value) if isinstance(value, str) else value)


def start_heap_trimmer(value) -> bool:
    """Once per worker process: a daemon thread that calls glibc's ``malloc_trim(0)``
    whenever the heap holds more free bytes than :func:`heap_trim_threshold`
    (``daskpd.worker-heap-trim``), checked every ``HEAP_TRIM_INTERVAL`` seconds; and
    glibc's ``M_TRIM_THRESHOLD`` set to the same bytes, so that ``free()`` keeps up to
    that much at the top of a heap for the next allocation instead of dask's 64 KiB
    (``MALLOC_TRIM_THRESHOLD_``).  With 64 KiB, an array freed at the top of the heap
    gave its pages back at once and the next array faulted them in again: a bucket's
    finish with 20 trials (a 1e7-row lake in 16 buckets, run in a thread set up as a
    worker's) faulted 646 MiB in and took 1.06 s, against 227 MiB and 0.90 s with it
    raised.

    Arrays below the mmap threshold (see :func:`limit_worker_threads`) come from glibc's
    heaps, and memory freed in the middle of a heap stays in the process: after the
    scan's maps and merges a 2.5 GiB worker kept ~1.3 GiB of free heap in its RSS.
    Dask counts that as unmanaged memory, so it spilled the task outputs it could have
    kept, and paused the worker at 80 % of its limit while most of that memory was free.
    The trim runs off the event loop (ctypes releases
    the GIL) and only when the free heap is large, so that memory a task reuses at once
    is not handed back and faulted in again; and only when the process holds that much
    more resident memory than it has in use than it did after the last trim (freed
    memory stays in the heap's free count once trimmed, so that count alone would trim
    the same empty pages again and again).
    """
    global _TRIMMER
    if _TRIMMER is not None or sys.platform != "linux":
        return False
    try:
        from distributed import get_worker

        limit = get_worker().memory_manager.memory_limit
    except Exception:
        limit = None
    threshold = heap_trim_threshold(value, limit)
    if threshold <= 0:
        return False
    libc = _libc()
    try:
        mallinfo2, trim = libc.mallinfo2, libc.malloc_trim
    except AttributeError:  # no C library, or not glibc >= 2.33
        return False
    mallinfo2.restype = _MallInfo2
    trim.argtypes = [ctypes.c_size_t]
    # free() itself keeps up to as much at the top of a heap (dask's MALLOC_TRIM_THRESHOLD_
    # of 64 KiB gave every freed array's pages back at once, so the next one faulted them in)
    libc.mallopt(-1, ctypes.c_int(min(threshold, 2**31 - 1)))  # M_TRIM_THRESHOLD

    page = os.sysconf("SC_PAGE_SIZE")

    def slack() -> int:  # resident bytes that the heap does not have in use
        with open("/proc/self/statm") as f:
            rss = int(f.read().split()[1]) * page
        info = mallinfo2()
        return rss - info.uordblks - info.hblkhd

    def loop():
        base = None  # the slack right after the last trim: what trimming cannot give back
        while True:
            time.sleep(HEAP_TRIM_INTERVAL)
            if mallinfo2().fordblks <= threshold:
                continue
            if base is not None and slack() <= base + threshold:
                continue  # the free heap was given back already and has not been touched since
            trim(0)
            base = slack()

    _TRIMMER = threading.Thread(target=loop, name="daskpd-heap-trim", daemon=True)
    _TRIMMER.start()
    return True


def _want_progress(progress) -> str | None:
    """``"bar"`` (a terminal), ``"log"`` (lines: a log file or pipe) or None; see
    :mod:`daskpd._engine.progress`."""
    from .progress import progress_mode

    return progress_mode(progress)


def _submit(client, objs, show, priority: int = 0):
    from .progress import show_futures

    with dask.config.set({"distributed.admin.large-graph-warning-threshold": _GRAPH_WARNING}):
        futures = client.compute(list(objs), priority=priority)
    show_futures(futures, show)
    return futures


def submit(*objs, priority: int = 0):
    """Futures of ``objs``, submitted now in one graph at ``priority`` (below 0: after
    the tasks of later default submissions that are ready), or None without a Client;
    gather them with the Client (:func:`current_client`)."""
    client = current_client()
    return None if client is None else _submit(client, objs, None, priority)


def compute(*objs, progress=None):
    """Compute dask objects in ONE graph submission; return a tuple of results."""
    from .progress import local_progress

    client = current_client()
    show = _want_progress(progress)
    if client is not None:
        return tuple(client.gather(_submit(client, objs, show)))
    with local_progress(show, objs), one_blas_thread():
        return dask.compute(*objs)


def compute_streamed(*objs, progress=None):
    """:func:`compute`, each result gathered as soon as it is done and its future let go,
    so the workers do not hold finished results (a scan's state parts) until the last one."""
    client = current_client()
    if client is None:
        return compute(*objs, progress=progress)
    from distributed import as_completed

    futures = list(_submit(client, objs, _want_progress(progress)))
    where = {f.key: i for i, f in enumerate(futures)}
    out = [None] * len(futures)
    done = as_completed(futures)
    futures = None  # only as_completed holds them: each is let go once gathered
    for fut in done:
        out[where[fut.key]] = fut.result()
        del fut
    return tuple(out)


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
