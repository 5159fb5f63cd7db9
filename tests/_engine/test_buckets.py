"""The bucket count: enough buckets for the memory, and at least one per thread while a
bucket keeps enough rows, so that the buckets' finishes keep every thread busy -- which
never changes a curve's bits."""
from __future__ import annotations

import dask
import numpy as np
import pandas as pd
import pytest

import daskpd
from daskpd._engine import memory
from daskpd._engine.memory import MAX_BUCKETS, MIN_BUCKET_ROWS, n_buckets, parallelism


@pytest.mark.parametrize("parallel,n_rows,expected", [
    (1, 10 ** 9, 1),  # one thread: the memory alone decides
    (2, 10 ** 6, 2),
    (2, 2 * MIN_BUCKET_ROWS - 1, 1),  # two buckets would hold too few rows each
    (2, 2 * MIN_BUCKET_ROWS, 2),
    (8, 10 ** 6, 4),  # as many as keep MIN_BUCKET_ROWS rows a bucket
    (3, 10 ** 9, 4),  # a power of two
    (1000, 10 ** 12, MAX_BUCKETS),
])
def test_at_least_a_bucket_per_thread_while_buckets_keep_their_rows(parallel, n_rows, expected):
    assert n_buckets(0.0, budget=1 << 30, n_rows=n_rows, parallel=parallel) == expected


def test_the_memory_asks_for_more_buckets_than_the_threads_and_the_config_overrides_both():
    assert n_buckets(40 * float(1 << 30), budget=1 << 30, n_rows=10 ** 6, parallel=2) == 128
    assert n_buckets(3 * float(1 << 30), budget=1 << 30, n_rows=10 ** 9, parallel=2) == 8
    with dask.config.set({"daskpd.buckets": 1}):
        assert n_buckets(3 * float(1 << 30), budget=1 << 30, n_rows=10 ** 9, parallel=8) == 1


def test_trials_are_the_bits_of_one_bucket_whatever_the_bucket_count():
    """A 20,000-row table scanned in 1 and in 4 buckets (the config forces them): the
    curves and their trials are those of one bucket, bit for bit, and trials change no
    bucket count (they ride the finish, not the rows)."""
    rng = np.random.default_rng(5)
    n = 20_000
    df = pd.DataFrame({"x1": rng.uniform(0, 10, n).round(1), "x2": rng.uniform(0, 10, n)})
    df["y"] = df.x1 ** 2 + df.x2 + rng.normal(size=n)
    kw = dict(target="y", random_state=2, progress=False)
    with dask.config.set(scheduler="sync"):
        one = daskpd.strat_curves_and_importances(df, n_trials=3, **kw)
        plain = daskpd.strat_curves_and_importances(df, **kw)
        with dask.config.set({"daskpd.buckets": 4}):
            four = daskpd.strat_curves_and_importances(df, n_trials=3, **kw)
    assert one.curves["x1"].params["n_buckets"] == plain.curves["x1"].params["n_buckets"] == 1
    assert four.curves["x1"].params["n_buckets"] == 4
    for f in ("x1", "x2"):
        a, b = one.curves[f], four.curves[f]
        np.testing.assert_array_equal(a.pd, b.pd)
        np.testing.assert_array_equal(a.trials_pd, b.trials_pd)
    pd.testing.assert_frame_equal(one.to_frame(), four.to_frame())


def test_parallelism_of_the_local_schedulers():
    assert memory.current_client() is None
    with dask.config.set(scheduler="sync"):
        assert parallelism() == 1
    with dask.config.set(scheduler="threads", num_workers=3):
        assert parallelism() == 3


def test_parallelism_of_a_real_cluster(client):
    """The session cluster's two worker processes of one thread each (its client current)."""
    assert parallelism() == sum(w["nthreads"] for w in client.scheduler_info(n_workers=-1)["workers"].values()) == 2


def test_two_threads_finish_two_buckets_with_the_bits_of_one():
    """On dask's threads (2) a table large enough for two buckets of MIN_BUCKET_ROWS rows
    is finished in two; the curves and their trials are those of one bucket, bit for bit."""
    rng = np.random.default_rng(4)
    n = 2 * MIN_BUCKET_ROWS + 1000
    df = pd.DataFrame({"x1": rng.uniform(0, 10, n).round(2), "x2": rng.uniform(0, 10, n),
                       "c": rng.integers(0, 6, n)})
    df["y"] = df.x1 ** 2 + df.x2 + df.c + rng.normal(size=n)
    kw = dict(target="y", categorical_features=["c"], n_trials=3, random_state=1, progress=False)
    with dask.config.set(scheduler="threads", num_workers=2):
        assert memory.current_client() is None
        two = daskpd.strat_curves_and_importances(df, **kw)
        with dask.config.set({"daskpd.buckets": 1}):
            one = daskpd.strat_curves_and_importances(df, **kw)
    assert two.curves["x1"].params["n_buckets"] == 2 and one.curves["x1"].params["n_buckets"] == 1
    for f in ("x1", "x2", "c"):
        a, b = two.curves[f], one.curves[f]
        np.testing.assert_array_equal(a.pd, b.pd)
        np.testing.assert_array_equal(a.trials_pd, b.trials_pd)
    pd.testing.assert_frame_equal(two.to_frame(), one.to_frame())
