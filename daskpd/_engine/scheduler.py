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

import asyncio
import contextlib
import json
import os
import threading
from dataclasses import dataclass

import dask

from . import config
from .progress import current, local_progress, show_futures

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
        value = config.get("scheduler-timeout") or dask.config.get(
            "distributed.comm.timeouts.connect", "30s")
    t = parse_timedelta(value, default="seconds")
    if not t or t <= 0:
        raise ValueError(f"the scheduler timeout must be > 0; got {value!r}")
    return float(t)


def _address_from_file(path: str) -> str:
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



def one_blas_thread():
    """A context limiting BLAS / OpenMP to one thread (process-wide)."""
    try:
        from threadpoolctl import threadpool_limits

        return threadpool_limits(limits=1)
    except Exception:  # pragma: no cover - threadpoolctl unusable
        return contextlib.nullcontext()


def _submit(client, objs, show, priority: int = 0):
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


def compute(*objs):
    """Compute dask objects in ONE graph submission; return a tuple of results.  Its
    progress is shown as the running call says (:func:`daskpd._engine.progress.current`),
    as is every computation's here."""
    client = current_client()
    show = current()
    if client is not None:
        return tuple(client.gather(_submit(client, objs, show)))
    with local_progress(show, objs), one_blas_thread():
        return dask.compute(*objs)


def compute_streamed(*objs):
    """:func:`compute`, each result gathered as soon as it is done and its future let go,
    so the workers do not hold finished results (a scan's state parts) until the last one."""
    client = current_client()
    if client is None:
        return compute(*objs)
    from distributed import as_completed

    futures = list(_submit(client, objs, current()))
    where = {f.key: i for i, f in enumerate(futures)}
    out = [None] * len(futures)
    done = as_completed(futures)
    futures = None  # only as_completed holds them: each is let go once gathered
    for fut in done:
        out[where[fut.key]] = fut.result()
        del fut
    return tuple(out)


def compute_keeping(gather: list, keep: list):
    """Compute ``gather`` and ``keep`` (structures of dask objects) in ONE submission;
    return (the values of ``gather``, ``keep`` with every object replaced by a reference
    for later graphs: a future on a cluster -- the value stays on its worker, recomputed
    from lineage if lost -- or the embedded value on dask's threads)."""
    import dask

    flat, tree = dask.base.unpack_collections(*keep, traverse=True)
    client = current_client()
    if client is None:
        values = compute(*gather, *flat)
        refs = [embed(v) for v in values[len(gather):]]
        return list(values[:len(gather)]), list(tree(refs))
    futures = _submit(client, [*gather, *flat], current())
    values = client.gather(futures[:len(gather)])
    return list(values), list(tree(futures[len(gather):]))


def materialize(*objs) -> list[Handle]:
    """Compute ``objs`` in one submission and keep them for later graphs.

    With a Client the results stay on the workers as futures of the graph that made them
    (a lost copy is recomputed from that lineage) and a copy comes to the driver; on
    dask's threads the values are embedded in later graphs.
    """
    client = current_client()
    if client is None:
        return [Handle(v, embed(v)) for v in compute(*objs)]
    futures = _submit(client, objs, current())
    values = client.gather(futures)
    return [Handle(v, f) for v, f in zip(values, futures)]
