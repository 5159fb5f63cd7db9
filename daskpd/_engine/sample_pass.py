"""The sample pass: the home of the bottom-k tree sample, the row count and the capped
distinct values, in one pass over the data.

:class:`SampleJob` is the first pass of the model-free pipeline: the ``k`` rows with the
smallest seeded value hashes (:func:`daskpd._engine.hashing.sample_hash`: uniform,
without replacement, the same however the data is partitioned), the row count, and the
distinct values of the columns that need a complete vocabulary (categories, and numeric
features that may keep their exact values), capped (:mod:`daskpd._engine.distinct`).
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from dask.sizeof import sizeof

from .distinct import distinct_capped, union_capped
from .hashing import sample_hash
from .plan import Job

__all__ = ["SampleJob", "Sample", "SAMPLE_MARGIN", "HASH_COLUMN"]


_HASH = "__daskpd_hash__"
#: the column of :class:`SampleJob`'s partials holding each row's hash (dropped by its finish)
HASH_COLUMN = _HASH


class Sample:
    """Result of :class:`SampleJob`: ``frame`` (hash-ordered bottom-k rows), ``n_rows``,
    ``distinct`` ({column: sorted distinct values, or None beyond the cap}).

    ``limit``: while merging, the smallest hash bound below which a partition that left
    rows out kept every row (None: none left rows out); ``exact`` (finished sample):
    False when such a partition may have left out a row of the bottom k -- the sample
    must then be drawn again without bounds (:class:`SampleJob`).
    """

    def __init__(self, frame: pd.DataFrame, n_rows: int, distinct: dict, limit=None, exact: bool = True):
        self.frame = frame
        self.n_rows = n_rows
        self.distinct = distinct
        self.limit = limit
        self.exact = exact


#: how many times its share of the sample a partition ships at most, when the partition
#: count is known (see :class:`SampleJob`)
SAMPLE_MARGIN = 4


class SampleJob(Job):
    """Bottom-k rows by keyed row hash, the row count, and capped distinct values.

    With ``n_partitions`` (P) and ``margin`` (c), a partition of r rows ships only its
    rows whose hash is below ``c k / (P r)`` of the hash range (about c k / P rows, not
    k: at 1e8 rows in 200 partitions, 4,000 rows each instead of 200,000).  That keeps
    every row of the bottom k whenever the k-th smallest hash of all rows is below every
    such bound -- true unless a partition holds over c times the mean partition's rows
    -- and the finish checks it exactly (:attr:`Sample.exact`): the sample is either the
    same rows, in the same order, as without bounds, or flagged to be drawn again.
    """

    def __init__(self, k: int, random_state: int, distinct: dict | None = None, n_partitions: int | None = None,
                 margin: int | None = SAMPLE_MARGIN):
        self.k = int(k)
        self.random_state = int(random_state)
        self.distinct = dict(distinct or {})  # column -> cap
        self.n_partitions = int(n_partitions) if n_partitions else None
        self.margin = int(margin) if margin else None

    def bound(self, n: int):
        """The hash bound (uint64) of a partition of ``n`` rows, or None (ship its bottom k)."""
        if self.n_partitions is None or self.margin is None or n == 0:
            return None
        b = (self.margin * self.k << 64) // (self.n_partitions * n)  # exact integer arithmetic
        return np.uint64(b) if b < (1 << 64) else None

    def map(self, ctx):
        df = ctx.df
        h = sample_hash(df, self.random_state)
        limit = self.bound(len(df))
        keep = None
        if limit is not None:
            keep = np.flatnonzero(h < limit)
            if len(keep) == len(df):
                keep, limit = None, None  # nothing left out
        if keep is not None and len(keep) > self.k:
            keep = keep[np.sort(np.argpartition(h[keep], self.k - 1)[:self.k])]
        elif keep is None and len(df) > self.k:
            keep = np.argpartition(h, self.k - 1)[:self.k]
            keep.sort()
        if keep is not None:
            rows, h = df.iloc[keep], h[keep]
        else:
            rows = df
        rows = rows.reset_index(drop=True)
        rows[_HASH] = h
        distinct = {c: distinct_capped(df[c], cap) for c, cap in self.distinct.items()}
        return Sample(rows, len(df), distinct, limit)

    def combine(self, parts, bucket=0):
        df = pd.concat([p.frame for p in parts], ignore_index=True)
        if len(df) > self.k:
            keep = np.argpartition(df[_HASH].to_numpy(), self.k - 1)[:self.k]
            keep.sort()
            df = df.iloc[keep].reset_index(drop=True)
        distinct = {c: union_capped([p.distinct[c] for p in parts], cap) for c, cap in self.distinct.items()}
        limits = [p.limit for p in parts if p.limit is not None]
        return Sample(df, sum(p.n_rows for p in parts), distinct, min(limits) if limits else None)

    def finish(self, merged):
        # Order by hash (ties: identical rows, whose order is immaterial) so that the
        # sample, and everything fitted on it, does not depend on the partitioning.
        frame = merged.frame.sort_values(_HASH, kind="stable")
        exact = True
        if merged.limit is not None:  # a left-out row is at or above its partition's bound
            h = frame[_HASH].to_numpy()
            exact = len(h) >= self.k and h[self.k - 1] < merged.limit
        frame = frame.drop(columns=_HASH).reset_index(drop=True)
        return Sample(frame, merged.n_rows, merged.distinct, exact=exact)


@sizeof.register(Sample)
def _sizeof_sample(o):
    return sizeof(o.frame) + sum(0 if v is None else sizeof(v) for v in o.distinct.values())
