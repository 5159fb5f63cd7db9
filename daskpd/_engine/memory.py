"""The memory a task may use, and the bucket count that keeps a reduction within it.

One knob bounds every reduction task: the **task memory** (dask config key
``daskpd.task-memory``).  By default (``"auto"``) it is a quarter of the smallest
per-thread memory limit of the workers (``memory_limit / nthreads``), or, on dask's
threads, a quarter of the machine's memory per core.  A reduction whose merged tables
would exceed it is split into ``n_buckets`` independent reductions (:func:`n_buckets`),
so that no task holds more than about one budget; the rest of a worker's memory is
managed by dask (results beyond its ``target`` fraction are spilled to disk).

``daskpd.split-every`` is the fan-in of the reduction trees (default 8) and
``daskpd.buckets`` forces a bucket count (``"auto"`` by default).
"""
from __future__ import annotations

import math
import os

import dask
from dask.utils import parse_bytes

from .scheduler import current_client

__all__ = ["task_memory", "split_every", "n_buckets", "MAX_BUCKETS"]

#: buckets are powers of two up to this many (the numeric reduction folds results over
#: this many fixed leaf groups, which makes its sums independent of the bucket count)
MAX_BUCKETS = 128
_FRACTION = 0.25


def _config(key, default):
    return dask.config.get(f"daskpd.{key}", default)


def task_memory() -> int:
    """Bytes one reduction task may hold (see the module docstring)."""
    cfg = _config("task-memory", "auto")
    if cfg not in (None, "auto"):
        return int(parse_bytes(cfg) if isinstance(cfg, str) else cfg)
    client = current_client()
    per_thread = None
    if client is not None:
        try:
            workers = client.scheduler_info(n_workers=-1)["workers"].values()
        except TypeError:  # older distributed: no n_workers argument
            workers = client.scheduler_info()["workers"].values()
        limits = [w["memory_limit"] / max(1, w["nthreads"]) for w in workers if w.get("memory_limit")]
        if limits:
            per_thread = min(limits)
    if per_thread is None:
        import psutil

        per_thread = psutil.virtual_memory().total / (os.cpu_count() or 1)
    return max(1 << 24, int(per_thread * _FRACTION))


def split_every() -> int:
    """Fan-in of the reduction trees (config ``daskpd.split-every``, default 8)."""
    v = int(_config("split-every", 8))
    if v < 2:
        raise ValueError(f"dask config daskpd.split-every must be >= 2; got {v}")
    return v


def n_buckets(peak_bytes: float, budget: int | None = None) -> int:
    """Buckets for a reduction whose largest combine task would hold ``peak_bytes``
    (inputs and output) undivided: the smallest power of two that brings a bucket's
    share (plus as much again of working arrays) within the task memory, in
    [1, MAX_BUCKETS]; config ``daskpd.buckets`` overrides.
    """
    cfg = _config("buckets", "auto")
    if cfg not in (None, "auto"):
        b = int(cfg)
        if b < 1 or b > MAX_BUCKETS or b & (b - 1):
            raise ValueError(f"dask config daskpd.buckets must be a power of two in [1, {MAX_BUCKETS}]; got {cfg!r}")
        return b
    budget = task_memory() if budget is None else budget
    need = 2.0 * float(peak_bytes) / max(1, budget)
    if need <= 1:
        return 1
    return min(MAX_BUCKETS, 1 << math.ceil(math.log2(need)))
