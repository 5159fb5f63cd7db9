"""The engine's pass: map -> bucketed combine trees -> finish, in memory and on dask."""
import numpy as np
import pandas as pd
import pytest
import dask.dataframe as dd

from daskpd._engine.plan import Job, SPLIT, run_local, run_pass, split_schedule, tree_groups


class BucketSum(Job):
    """Sums of y per key; bucket b of B holds the keys k with k * B // n_keys == b, so
    bucket b at one granularity is buckets b*n .. b*n+n-1 at n times that granularity."""

    def __init__(self, n_buckets, n_keys=97):
        self.n_buckets = n_buckets
        self.n_keys = n_keys
        self.seen = []

    def map(self, ctx):
        df = ctx.df
        return {int(k): float(v) for k, v in df.groupby("k").y.sum().items()}

    def split(self, partial, granularity, n, part):
        nb = granularity * n
        out = [dict() for _ in range(n)]
        for k, v in partial.items():
            b = k * nb // self.n_keys
            assert b // n == part, "a key reached the wrong bucket"
            out[b - part * n][k] = v
        return out

    def combine(self, parts, bucket=0):
        out = {}
        for p in parts:
            for k, v in p.items():
                out[k] = out.get(k, 0.0) + v
        return out

    def finish(self, *merged):
        assert len(merged) == self.n_buckets
        for b, m in enumerate(merged):
            assert all(k * self.n_buckets // self.n_keys == b for k in m), f"bucket {b} holds foreign keys"
        out = {}
        for m in merged:
            out.update(m)
        return out


@pytest.mark.parametrize("n_buckets,n_levels", [(1, 0), (16, 0), (8, 1), (64, 1), (64, 3), (128, 2), (2, 4)])
def test_split_schedule_reaches_the_buckets_by_multiples(n_buckets, n_levels):
    g = split_schedule(n_buckets, n_levels)
    assert len(g) == n_levels + 1
    assert g[-1] == n_buckets
    for a, b in zip(g[:-1], g[1:]):
        assert b % a == 0
    if n_levels > 1:  # a tree: the maps cut their partials a few ways, the combines the rest
        assert g[0] <= SPLIT
    else:  # one level of combines: every map cuts its partial into every bucket
        assert g[0] == n_buckets


@pytest.mark.parametrize("n_parts", [1, 3, 17])
@pytest.mark.parametrize("n_buckets", [1, 4, 32])
def test_bucketed_pass_equals_a_groupby(n_parts, n_buckets):
    rng = np.random.default_rng(n_parts * 100 + n_buckets)
    df = pd.DataFrame({"k": rng.integers(0, 97, 2000), "y": rng.integers(0, 10, 2000).astype(float)})
    truth = df.groupby("k").y.sum().to_dict()
    cuts = np.linspace(0, len(df), n_parts + 1).astype(int)
    chunks = [df.iloc[a:z] for a, z in zip(cuts[:-1], cuts[1:])]
    (local,) = run_local(chunks, [BucketSum(n_buckets)], fan_in=2)
    ddf = dd.from_pandas(df, npartitions=n_parts, sort=False)
    (remote,) = run_pass(ddf, [BucketSum(n_buckets)], fan_in=2)
    assert local == truth
    assert remote == truth


def test_tree_groups_cover_every_input_once():
    for n in (1, 2, 7, 64, 65):
        for fan_in in (2, 8):
            width = n
            for groups in tree_groups(n, fan_in):
                assert groups[0][0] == 0 and groups[-1][1] == width
                assert all(a < z and z - a <= fan_in for a, z in groups)
                width = len(groups)
            assert width == 1
