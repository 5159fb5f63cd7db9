"""The memory a task may use, and the bucket count that keeps a reduction within it.

One knob bounds every reduction task: the **task memory** (dask config key
``daskpd.task-memory``).  By default (``"auto"``) it is a quarter of the smallest
per-thread memory limit of the workers (``memory_limit / nthreads``), or, on dask's
threads, a quarter of the machine's memory per core.  A reduction whose merged tables
would exceed it is split into ``n_buckets`` independent reductions (:func:`n_buckets`),
so that no task holds more than about one budget; the rest of a worker's memory is
managed by dask (results beyond its ``target`` fraction are spilled to disk).  A
reduction also has at least a bucket per thread while its buckets keep
``MIN_BUCKET_ROWS`` rows each, so that the buckets' finishes keep every thread busy.

``daskpd.split-every`` is the fan-in of the reduction trees and ``daskpd.buckets``
forces a bucket count (both ``"auto"`` by default).  Float sums add up to 32 partials
at once when there are no more, else 8 at a time (:func:`arity`).
The combine *tasks* do one such level each, except in a reduction whose map outputs
all together take at most 40 % of the cluster's memory (:func:`fan_in`): one task per
bucket then adds all the levels, every map's piece going straight into its bucket's
task, so the data crosses between processes once (a tree of tasks whose merges do not
shrink the data -- rows fewer than the (leaf, position) cells -- moves it once per
level).  The bits are the same either way.
"""
from __future__ import annotations

import math
import os

import dask
from dask.utils import parse_bytes

from . import config
from .scheduler import current_client

__all__ = ["task_memory", "thread_memory", "usable_thread_memory", "driver_memory", "format_bytes", "partition_bytes",
           "cluster_memory", "split_every", "arity", "fan_in", "n_buckets", "parallelism", "MAX_BUCKETS",
           "MIN_BUCKET_ROWS"]

#: buckets are powers of two up to this many (the numeric reduction folds results over
#: this many fixed leaf groups, which makes its sums independent of the bucket count)
MAX_BUCKETS = 128
_FRACTION = 0.25
#: the default fan-in of a reduction tree (see :func:`arity`)
FAN_IN = 8
#: up to this many partitions, float sums add them all at once (one level)
ONE_LEVEL_MAX = 32
#: a reduction is merged in one task level when its map outputs take at most this
#: fraction of the cluster's memory: they are all alive when the last map ends, and
#: this keeps them under dask's spill target (60 %) with room for the tasks at work
_ONE_LEVEL_FRACTION = 0.4


def _workers() -> list | None:
    client = current_client()
    if client is None:
        return None
    try:
        return list(client.scheduler_info(n_workers=-1)["workers"].values())
    except TypeError:  # older distributed: no n_workers argument
        return list(client.scheduler_info()["workers"].values())


def cluster_memory() -> int:
    """The memory limits of the workers added up, or on dask's threads the machine's memory."""
    workers = _workers()
    limits = [w["memory_limit"] for w in workers or () if w.get("memory_limit")]
    if limits:
        return int(sum(limits))
    import psutil

    return int(psutil.virtual_memory().total)


def task_memory() -> int:
    """Bytes one reduction task may hold (see the module docstring)."""
    cfg = config.get("task-memory")
    if cfg not in (None, "auto"):
        return int(parse_bytes(cfg) if isinstance(cfg, str) else cfg)
    return max(1 << 24, int(thread_memory() * _FRACTION))


def thread_memory() -> int:
    """The most bytes one task can hold before its worker is in trouble: the smallest
    per-thread memory limit of the workers (``memory_limit / nthreads``), or on dask's
    threads the machine's memory per core.  A run refuses a plan whose largest task
    would exceed it (:func:`daskpd._strat.scan_sizing.check_scan_memory`)."""
    workers = _workers()
    limits = [w["memory_limit"] / max(1, w["nthreads"]) for w in workers or () if w.get("memory_limit")]
    if limits:
        return int(min(limits))
    import psutil

    return int(psutil.virtual_memory().total / (os.cpu_count() or 1))


def usable_thread_memory() -> int:
    """:func:`thread_memory` up to the fraction where dask pauses a worker (config
    ``distributed.worker.memory.pause``, 0.8 by default): what one task may hold at most."""
    frac = dask.config.get("distributed.worker.memory.pause", 0.8)
    frac = 0.8 if frac is None or frac is False else float(frac)
    return int(thread_memory() * frac)


def driver_memory() -> int:
    """The memory available to this process (the driver) now."""
    import psutil

    return int(psutil.virtual_memory().available)


def format_bytes(n: float) -> str:
    """``n`` bytes as messages print them (``2.00 GiB``)."""
    from dask.utils import format_bytes as fmt

    return fmt(int(n))


#: a partition of small files takes at most this share of the task memory, within these bounds
_PARTITION_FRACTION = 0.125
_PARTITION_MIN, _PARTITION_MAX = 16 << 20, 64 << 20


def partition_bytes() -> int:
    """The bytes (uncompressed, as the files' footers count them) a partition read from
    many small files gathers (dask config ``daskpd.partition-bytes``; ``"auto"``: an
    eighth of :func:`task_memory`, between 16 and 64 MiB).  Files of at least a quarter
    of that size on average are each their own partition, as dask reads them."""
    cfg = config.get("partition-bytes")
    if cfg not in (None, "auto"):
        return int(parse_bytes(cfg) if isinstance(cfg, str) else cfg)
    return int(min(_PARTITION_MAX, max(_PARTITION_MIN, task_memory() * _PARTITION_FRACTION)))


def split_every() -> int | None:
    """Fan-in set by config ``daskpd.split-every`` (None: ``"auto"``, the default)."""
    cfg = config.get("split-every")
    if cfg in (None, "auto"):
        return None
    v = int(cfg)
    if v < 2:
        raise ValueError(f"dask config daskpd.split-every must be >= 2 or 'auto'; got {cfg!r}")
    return v


def arity(n_partitions: int | None = None) -> int:
    """How many partials each float sum adds at a time: the fan-in of the *arithmetic*
    tree.  ``daskpd.split-every`` when set; else all of them when there are at most 32
    partitions (every level groups the data once more, so one level is the cheapest), and
    8 above (a merge of a tree then holds 8 maps' pieces, which keeps its task small).  The
    bits of a result depend on it and on the partitioning -- both properties of the data --
    never on how its levels are grouped into tasks."""
    v = split_every()
    if v is not None:
        return v
    if n_partitions is not None and n_partitions <= ONE_LEVEL_MAX:
        return max(2, int(n_partitions))
    return FAN_IN


def fan_in(n_partitions: int = 0, map_output_bytes: float | None = None) -> int:
    """Fan-in of the combine *tasks* of a reduction over ``n_partitions`` maps whose
    outputs take ``map_output_bytes`` in all: :func:`arity` (one arithmetic level per
    task level), or the smallest power of it covering every partition -- one task level,
    each task adding its arithmetic levels itself (the same bits) -- when
    ``daskpd.split-every`` is not set and the outputs take at most 40 % of the cluster's
    memory: they then wait for the last map in memory, and a tree of tasks would only move
    them between processes once more per level.

    Larger outputs go through a tree even when its first levels do not shrink them
    (they are kept raw, see :meth:`daskpd._strat.scan.StratScan.combine`): measured at 1e8
    rows on two 2.5 GiB workers, one task level spilled every map's output as one small
    piece per bucket (25,600 of them) and read them back piece by piece, more than twice
    as slow as a tree whose first level spills 8 large pieces per merge."""
    a = arity(n_partitions)
    if split_every() is not None or map_output_bytes is None or n_partitions <= a:
        return a
    if map_output_bytes > _ONE_LEVEL_FRACTION * cluster_memory():
        return a
    f = a
    while f < n_partitions:
        f *= a
    return f


#: a bucket of fewer rows than this is not split off only to keep another thread busy
MIN_BUCKET_ROWS = 1 << 17


def parallelism() -> int:
    """The threads that run tasks: the workers' threads added up, or on dask's local
    schedulers its worker threads (config ``num_workers``, else the cores; 1 on the
    synchronous scheduler)."""
    workers = _workers()
    if workers:
        return max(1, sum(int(w.get("nthreads") or 1) for w in workers))
    if dask.config.get("scheduler", None) in ("sync", "synchronous", "single-threaded"):
        return 1
    n = dask.config.get("num_workers", None)
    return max(1, int(n)) if n else (os.cpu_count() or 1)


def n_buckets(peak_bytes: float, budget: int | None = None, n_rows: int = 0, parallel: int = 1) -> int:
    """Buckets for a reduction whose largest combine task would hold ``peak_bytes``
    (inputs and output) undivided: the smallest power of two that brings a bucket's
    share (plus as much again of working arrays) within the task memory, in
    [1, MAX_BUCKETS]; at least as many as ``parallel`` threads (rounded up to a
    power of two) while each bucket keeps :data:`MIN_BUCKET_ROWS` of the ``n_rows``
    rows, so that the buckets' finishes keep every thread busy.  Config
    ``daskpd.buckets`` overrides.
    """
    cfg = config.get("buckets")
    if cfg not in (None, "auto"):
        b = int(cfg)
        if b < 1 or b > MAX_BUCKETS or b & (b - 1):
            raise ValueError(f"dask config daskpd.buckets must be a power of two in [1, {MAX_BUCKETS}]; got {cfg!r}")
        return b
    budget = task_memory() if budget is None else budget
    need = 2.0 * float(peak_bytes) / max(1, budget)
    b = 1 if need <= 1 else min(MAX_BUCKETS, 1 << math.ceil(math.log2(need)))
    floor = 1
    while floor < min(int(parallel), MAX_BUCKETS) and 2 * floor * MIN_BUCKET_ROWS <= int(n_rows):
        floor *= 2
    return max(b, floor)
