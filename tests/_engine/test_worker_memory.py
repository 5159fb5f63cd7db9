"""The workers' allocator: freed heap memory goes back to the OS (real worker processes)."""
from __future__ import annotations

import pytest

from daskpd._engine.allocator import heap_trim_threshold, set_arrow_pool

pytestmark = pytest.mark.cluster

MiB = 1 << 20


def test_freed_heap_goes_back_to_the_os_on_real_workers(client):
    def _fragment_and_wait():  # nested: pickled by value (the workers cannot import this module)
        """In a worker task: 400 arrays of 1 MiB from glibc's heap, all freed but the last
        (which pins the top of the heap, so free() alone cannot give the rest back)."""
        import ctypes
        import threading
        import time

        import numpy as np
        import psutil

        from daskpd._engine.allocator import _MallInfo2, limit_worker_threads

        limit_worker_threads()  # what every daskpd task does first: the mmap threshold, the trimmer
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = _MallInfo2
        proc = psutil.Process()
        trimmer = any(t.name == "daskpd-heap-trim" for t in threading.enumerate())
        time.sleep(0.5)
        rss0 = proc.memory_info().rss
        arrays = [np.ones(MiB // 8) for _ in range(400)]
        rss_full = proc.memory_info().rss
        keep = arrays[-1]
        del arrays
        free_heap = libc.mallinfo2().fordblks  # freed, still the heap's (trimming does not change this)
        deadline = time.monotonic() + 15.0  # the trimmer runs every second: wait for it, up to a bound
        while True:
            rss_later = proc.memory_info().rss
            if rss_later - rss0 < 150 * MiB or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        del keep
        return {"trimmer": trimmer, "grew": rss_full - rss0, "free_heap": free_heap, "kept": rss_later - rss0}

    for addr in client.scheduler_info()["workers"]:
        out = client.submit(_fragment_and_wait, workers=[addr], allow_other_workers=False, pure=False).result()
        assert out["trimmer"], f"no daskpd-heap-trim thread on {addr}"
        # the precondition: the arrays were resident and, freed, stayed in the heap
        assert out["grew"] > 350 * MiB, out
        assert out["free_heap"] > 350 * MiB, out
        # the trimmer gave them back (2 GiB workers: trimmed above 128 MiB of free heap)
        assert out["kept"] < 150 * MiB, out


def test_freed_arrays_pages_serve_the_next_arrays_on_real_workers(client):
    def _refaults():  # nested: pickled by value
        """In a worker task: 16 arrays of 2 MiB (below numpy's huge-page size) allocated
        and freed at the top of the thread's heap, then allocated again: the page faults
        of the second round (dask's MALLOC_TRIM_THRESHOLD_ of 64 KiB alone would give the
        freed pages back, and the second round would fault all 8,192 in again)."""
        import resource

        import numpy as np

        from daskpd._engine.allocator import limit_worker_threads

        limit_worker_threads()  # what every daskpd task does first

        def faults():
            return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt

        f0 = faults()
        arrays = [np.ones(2 * MiB // 8) for _ in range(16)]
        first = faults() - f0
        again = []
        for _ in range(3):  # the least of three rounds: an arena whose heap was full at first may
            # have had to map a new heap for the first round (a worker that ran other tasks)
            del arrays
            f1 = faults()
            arrays = [np.ones(2 * MiB // 8) for _ in range(16)]
            again.append(faults() - f1)
        return first, min(again)

    for addr in client.scheduler_info()["workers"]:
        first, again = client.submit(_refaults, workers=[addr], allow_other_workers=False, pure=False).result()
        pages = 32 * MiB // 4096
        assert first > pages // 2, (addr, first)  # the precondition: the first round faulted its pages in
        assert again < pages // 16, (addr, first, again)


def test_heap_trim_threshold():
    assert heap_trim_threshold("auto", 2 << 30) == 128 * MiB
    assert heap_trim_threshold("auto", 256 * MiB) == 32 * MiB  # at least 32 MiB
    assert heap_trim_threshold("auto", None) == 256 * MiB  # no memory limit
    assert heap_trim_threshold("64MiB", 2 << 30) == 64 * MiB
    assert heap_trim_threshold(0, 2 << 30) == 0
    assert heap_trim_threshold(False, 2 << 30) == 0


def test_workers_take_pyarrows_buffers_from_the_system_allocator(client):
    def _pools():  # nested: pickled by value
        import pyarrow as pa

        from daskpd._engine.allocator import limit_worker_threads

        before = pa.default_memory_pool().backend_name
        limit_worker_threads()  # what every daskpd task does first
        import pandas as pd

        table = pa.Table.from_pandas(pd.DataFrame({"a": range(1000)}))  # a buffer of the new default pool
        return before, pa.default_memory_pool().backend_name, table.nbytes > 0

    for addr in client.scheduler_info()["workers"]:
        before, after, ok = client.submit(_pools, workers=[addr], allow_other_workers=False, pure=False).result()
        assert after == "system" and ok, (addr, before, after)


def test_set_arrow_pool_values():
    import pyarrow as pa

    previous = pa.default_memory_pool()
    try:
        assert set_arrow_pool("keep") is False
        assert pa.default_memory_pool().backend_name == previous.backend_name
        assert set_arrow_pool(0) is False
        assert set_arrow_pool("system") is True
        assert pa.default_memory_pool().backend_name == "system"
        with pytest.raises(ValueError, match="daskpd.worker-arrow-pool must be one of 'system'"):
            set_arrow_pool("tcmalloc")
    finally:
        pa.set_memory_pool(previous)


def test_set_arrow_pool_names_an_allocator_this_pyarrow_lacks(monkeypatch):
    """An allocator pyarrow was built without is an error naming the setting, not a
    silent fall-back to another pool (simulated: pyarrow raises NotImplementedError then)."""
    import pyarrow as pa

    def lacking():
        raise NotImplementedError("built without jemalloc")

    previous = pa.default_memory_pool()
    monkeypatch.setattr(pa, "jemalloc_memory_pool", lacking)
    try:
        with pytest.raises(ValueError, match="worker-arrow-pool is 'jemalloc', but this pyarrow .* was built without"):
            set_arrow_pool("jemalloc")
        assert pa.default_memory_pool().backend_name == previous.backend_name  # left as it was
    finally:
        pa.set_memory_pool(previous)
