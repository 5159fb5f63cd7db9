"""CatStratPD's explicit Gram chain survives dask's serialization (spill to disk, transfer).

The chain of ``gram_link`` tasks adds each bucket's leaves to a dense ``G`` that a
worker may have spilled to disk or received from another worker in between.  dask
deserializes such arrays as views into the message or spill-file buffer, at byte offsets
that need not be multiples of 8: the array comes back *unaligned*.  BLAS's ``dsyrk``
(through f2py) can only update an aligned Fortran array in place; given an unaligned one
it silently worked on a copy, and the bucket's part of ``G`` was lost (lake benchmark,
1e7 rows: s50's effects differed between 1 and 2 worker processes by up to 1.6).
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from daskpd._strat.categorical_buckets import CGBucket
from daskpd._strat.categorical_gram import LeafSums, gram_link


def _bucket(K: int, n_leaves: int, seed: int) -> CGBucket:
    """A bucket whose leaves each hold every category (so each 256-leaf chunk of G is one
    in-place BLAS update of the whole G)."""
    rng = np.random.default_rng(seed)
    code = np.tile(np.arange(K, dtype=np.int32), n_leaves)
    n = rng.integers(1, 5, size=K * n_leaves).astype(float)
    starts = np.arange(n_leaves, dtype=np.int64) * K
    N = np.add.reduceat(n, starts)
    w = np.repeat(1.0 / N, K)
    leaf = np.arange(n_leaves, dtype=np.int64)
    return CGBucket(K, [(code, n, w, starts, np.zeros(n_leaves, np.int64), leaf)])


def _spilled(state: LeafSums) -> LeafSums:
    """``state`` written to and read back from a dask worker's spill file: the same
    serialization (distributed's ``serialize_bytelist``) and the same buffer type
    (zict's File hands back a bytearray) as a worker's SpillBuffer."""
    from distributed.protocol import deserialize_bytes, serialize_bytelist

    frames = serialize_bytelist(state, on_error="raise")
    return deserialize_bytes(bytearray(b"".join(bytes(f) for f in frames)))


@pytest.mark.parametrize("K", [3, 50, 64])
def test_gram_link_after_a_spill_round_trip_is_bit_identical(K):
    a, b = _bucket(K, 300, 1), _bucket(K, 300, 2)
    direct = gram_link(gram_link(None, a, 0), b, 0).gram
    back = _spilled(gram_link(None, a, 0))
    assert np.array_equal(back.gram, gram_link(None, a, 0).gram)
    linked = gram_link(back, b, 0)
    np.testing.assert_array_equal(linked.gram, direct)  # was: b's leaves lost
    assert np.triu(linked.gram).sum() > np.triu(gram_link(None, a, 0).gram).sum()


@pytest.mark.parametrize("offset", [1, 4])
def test_gram_link_updates_an_unaligned_fortran_gram(offset):
    """Whatever the memory the state arrives in (here a Fortran G at an odd byte offset
    of a writeable buffer, as dask may hand it over), the link adds the bucket."""
    K = 50
    a, b = _bucket(K, 300, 3), _bucket(K, 300, 4)
    first = gram_link(None, a, 0)
    direct = gram_link(gram_link(None, a, 0), b, 0).gram
    raw = bytearray(8 * K * K + 8)
    G = np.frombuffer(memoryview(raw)[offset:offset + 8 * K * K], dtype=np.float64).reshape((K, K), order="F")
    G[...] = first.gram
    assert G.flags.f_contiguous and G.flags.writeable and not G.flags.aligned
    first.gram = G
    np.testing.assert_array_equal(gram_link(first, b, 0).gram, direct)


def test_catstratpd_with_a_spilling_worker_process_equals_threads(tmp_path):
    """End to end: one worker process that spills every result to disk at once (so
    every link of the Gram chain reads its state back from the spill file) gives the
    threaded result, bit for bit, with several buckets."""
    import dask
    from distributed import Client, LocalCluster

    import daskpd

    rng = np.random.default_rng(0)
    n, K = 40_000, 40
    levels = np.array([f"L{i:02d}" for i in range(K)])
    effect = rng.normal(0.0, 2.0, K)
    c = rng.integers(0, K, n)
    df = pd.DataFrame({"x1": rng.uniform(0, 1, n), "x2": rng.integers(0, 50, n), "s": levels[c]})
    df["y"] = df["x1"] * 3 + np.sqrt(df["x2"]) + effect[c] + rng.normal(0, 0.5, n)
    path = tmp_path / "data"
    path.mkdir()
    for i in range(4):
        df.iloc[i * n // 4:(i + 1) * n // 4].to_parquet(path / f"part-{i}.parquet", index=False)

    spill_at_once = {"distributed.worker.memory.target": 1e-6, "distributed.worker.memory.spill": False,
                     "distributed.worker.memory.pause": False, "distributed.worker.memory.terminate": False}
    with dask.config.set({"daskpd.buckets": 8}):
        threads = daskpd.catstratpd(str(path), target="y", feature="s", progress=False)
        with dask.config.set(spill_at_once), LocalCluster(
                n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None,
                memory_limit="2GiB", local_directory=str(tmp_path / "workers")) as cluster, Client(cluster):
            procs = daskpd.catstratpd(str(path), target="y", feature="s", progress=False)
    assert threads.params["n_buckets"] == procs.params["n_buckets"] == 8
    assert threads.params["solver"] == "dense"
    np.testing.assert_array_equal(procs.pd, threads.pd)
    err = threads.pd - (effect - effect.min())  # the effects, up to the estimate's own shift
    assert np.max(np.abs(err - err.mean())) < 0.2


def test_syrk_chunk_writes_back_when_blas_cannot_update_in_place():
    """The chunk kernel itself never drops an update, whatever G's layout."""
    from daskpd._strat.categorical_gram import _syrk_chunk

    K, L = 6, 10
    rng = np.random.default_rng(5)
    c = np.tile(np.arange(K, dtype=np.int64), L)
    v = rng.uniform(0.5, 2.0, K * L)
    sizes = np.full(L, K)
    want = np.zeros((K, K), order="F")
    _syrk_chunk(want, c, v, sizes)
    raw = bytearray(8 * K * K + 8)
    G = np.frombuffer(memoryview(raw)[4:4 + 8 * K * K], dtype=np.float64).reshape((K, K), order="F")
    G[...] = 0.0
    assert not G.flags.aligned
    _syrk_chunk(G, c, v, sizes)
    np.testing.assert_array_equal(G, want)
    C = np.zeros((K, K))  # C order: f2py transposes into a copy
    _syrk_chunk(C, c, v, sizes)
    np.testing.assert_array_equal(np.triu(C), np.triu(want))
    assert np.triu(want).sum() > 0
