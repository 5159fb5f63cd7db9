"""A dask worker process's allocators, set once per process by the first daskpd task.

Dask starts workers with ``MALLOC_TRIM_THRESHOLD_`` set, which pins glibc's mmap threshold
at 128 KiB and gives every freed array's pages back at once; pyarrow's default pool
(mimalloc) does the same with parquet buffers.  Three worker settings (dask config,
defaults in ``daskpd/daskpd.yaml``, documented in docs/pipeline.md "Memory is a setting")
change that:

- ``daskpd.worker-mmap-threshold``: glibc's ``M_MMAP_THRESHOLD`` (:func:`set_mmap_threshold`);
- ``daskpd.worker-arrow-pool``: pyarrow's default memory pool (:func:`set_arrow_pool`);
- ``daskpd.worker-heap-trim``: the heap trimmer and ``M_TRIM_THRESHOLD``
  (:func:`start_heap_trimmer`).

:func:`limit_worker_threads` applies them, with BLAS / OpenMP on one thread; it does
nothing outside a worker (the local scheduler's compute holds the BLAS limit itself).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
import threading
import time

from dask.utils import parse_bytes
from distributed import get_worker
from threadpoolctl import threadpool_limits

from . import config

__all__ = ["limit_worker_threads", "set_arrow_pool", "set_mmap_threshold", "start_heap_trimmer",
           "heap_trim_threshold", "ARROW_POOLS", "HEAP_TRIM_INTERVAL"]

_LIMITED = False


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
        get_worker()
    except (ImportError, ValueError):
        return  # not in a worker: the local compute holds the limit
    _LIMITED = True
    try:
        threadpool_limits(limits=1)
    except Exception:  # pragma: no cover
        pass
    set_mmap_threshold(config.get("worker-mmap-threshold"))
    set_arrow_pool(config.get("worker-arrow-pool"))
    start_heap_trimmer(config.get("worker-heap-trim"))


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
