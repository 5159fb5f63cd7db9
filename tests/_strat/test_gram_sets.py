"""CatStratPD's trials' explicit G, summed for every trial at once (``gram_sets``).

Each trial's G is what summing that trial alone leaf after leaf gives (the same terms in
the same order: bit for bit), it does not depend on how the leaves are cut into buckets,
and it survives dask's serialization (a spilled or transferred chain state).
"""
from __future__ import annotations

import numpy as np
import pytest

from daskpd._data.encode import KeyCoder
from daskpd._engine.rows import Rows
from daskpd._engine.sums import reduce_tables
from daskpd._strat.categorical_buckets import prepare
from daskpd._strat.categorical_gram import gram_link, gram_sets
from daskpd._strat.categorical_solve import TILE, scatter_upper
from daskpd._strat.scan import FeatureScan


def _table(n_rows: int, K: int, L: int, seed: int = 4):
    rng = np.random.default_rng(seed)
    leaf, code = np.sort(rng.integers(0, L, n_rows)), rng.integers(0, K, n_rows)
    y = rng.normal(size=n_rows) * 1e3
    return reduce_tables([Rows(leaf.astype(np.int32), code.astype(np.int32), y, None)], K)


def _bucket(table, K: int, L: int, T: int):
    fs = FeatureScan("c", "categorical", [], None, KeyCoder("categorical", values=np.arange(K)), None, L)
    return prepare((table, None), fs, type("Job", (), {"n_sets": T + 1, "random_state": 3})())[0]


def _rows(table, lo: int, hi: int):
    from daskpd._engine.sums import Table

    m = (np.asarray(table.leaf) >= lo) & (np.asarray(table.leaf) < hi)
    return Table(table.leaf[m], table.key[m], table.values[m])


@pytest.mark.parametrize("n_rows, K, L, T", [(20_000, 12, 900, 7), (3_000, 1500, 40, 3), (500, 4, 300, 1)])
def test_every_trials_gram_is_that_trial_summed_alone_bit_for_bit(n_rows, K, L, T):
    """Trial t's G from the one pass is its leaves' terms n_i w_l n_j summed leaf after
    leaf (:func:`scatter_upper` on the trial's rows alone): the same bits; set 0's G
    (gram_link, kept) equals it at rounding level."""
    table = _table(n_rows, K, L)
    bucket = _bucket(table, K, L, T)
    got = gram_sets(None, bucket, range(1, T + 1))
    assert got.gram.shape == (K, K, T)
    sums = got.leaf_sums()
    for j, st in enumerate(range(1, T + 1)):
        code, n, w, starts, _, _ = bucket.set_rows(st)
        want = np.zeros((K, K))
        scatter_upper(want, code.astype(np.int64), n, w, starts.astype(np.int64), TILE)
        np.testing.assert_array_equal(got.gram[:, :, j], want)
        np.testing.assert_array_equal(sums[j].gram, want)
        assert sums[j].gram.flags.f_contiguous
        assert want.sum() > 0
    zero = gram_sets(None, bucket, [0]).gram[:, :, 0]
    np.testing.assert_allclose(zero, np.triu(gram_link(None, bucket, 0).gram), rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("cuts", [(0, 333, 900), (0, 1, 450, 451, 900), (0, 256, 512, 900)])
def test_trials_gram_does_not_depend_on_how_the_leaves_are_cut(cuts):
    """The trials' G summed over buckets cut anywhere (inside a chunk of leaves too),
    bucket after bucket, is the same bits as over one bucket holding every leaf."""
    K, L, T = 12, 900, 5
    table = _table(20_000, K, L)
    whole = gram_sets(None, _bucket(table, K, L, T), range(1, T + 1)).gram
    state = None
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        state = gram_sets(state, _bucket(_rows(table, lo, hi), K, L, T), range(1, T + 1))
    np.testing.assert_array_equal(state.gram, whole)


def test_trials_gram_after_a_spill_round_trip_adds_the_next_bucket():
    """A chain state serialized as a worker spills or sends it (a view into the bytes,
    perhaps read-only or unaligned) is copied before the next bucket is added: the same
    bits as without the round trip."""
    from distributed.protocol import deserialize_bytes, serialize_bytelist

    K, L, T = 9, 600, 4
    table = _table(10_000, K, L)
    a, b = _bucket(_rows(table, 0, 300), K, L, T), _bucket(_rows(table, 300, 600), K, L, T)
    direct = gram_sets(gram_sets(None, a, range(1, T + 1)), b, range(1, T + 1)).gram
    for offset in (0, 3):
        frames = serialize_bytelist(gram_sets(None, a, range(1, T + 1)), on_error="raise")
        buf = bytearray(offset) + bytearray(b"".join(bytes(f) for f in frames))
        back = deserialize_bytes(memoryview(buf)[offset:])
        np.testing.assert_array_equal(gram_sets(back, b, range(1, T + 1)).gram, direct)
