"""Pass 1 of one file and the merge of the files' partials: the home of
:class:`FilePartial` (a file's rows below a hash cutoff, its row count, distinct values
and target range), :func:`file_partial` / :func:`read_partials` (made on the workers) and
:func:`merged_sample` (the bottom k of the partials, and the files to read again);
:class:`TargetRange` (the job riding the sample pass).  :mod:`daskpd._strat.firstpass`
keeps them per file (:mod:`daskpd._strat.firstpass_cache`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .._data.encode import as_float
from .._data.gather import Group
from .._data.request import as_numbers
from .._engine.distinct import distinct_capped
from .._engine.hashing import sample_hash
from .._engine.plan import Job
from .._engine.sample_pass import HASH_COLUMN, Sample, SampleJob

__all__ = ["TargetRange", "FilePartial", "file_partial", "read_partials", "merged_sample"]


class TargetRange(Job):
    """Rides the sample pass: the smallest and largest finite target value of all rows
    (None when there is none), so a constant target is known exactly, not from a sample."""

    def __init__(self, target: str):
        self.target = target

    def map(self, ctx):
        y = as_float(ctx.df[self.target])
        y = y[np.isfinite(y)]
        return (float(y.min()), float(y.max())) if len(y) else None

    def combine(self, parts, bucket=0):
        parts = [p for p in parts if p is not None]
        return (min(p[0] for p in parts), max(p[1] for p in parts)) if parts else None


@dataclass
class FilePartial:
    """Pass 1 of one file: ``sample`` (a :class:`Sample` partial: the rows below
    ``sample.limit`` with their hashes, the row count, the distinct values; ``limit``
    None when every row is kept) and ``y_range`` (:class:`TargetRange`)."""

    sample: Sample
    y_range: tuple | None


class _Ctx:
    def __init__(self, df):
        self.df = df


def file_partial(df: pd.DataFrame, job: SampleJob, target: str) -> FilePartial:
    """The partial of one file's rows ``df`` (see :mod:`daskpd._strat.firstpass`); ``job`` gives k,
    the random state, the caps and the bound (its ``n_partitions``: the lake's files)."""
    n, k = len(df), job.k
    h = sample_hash(df, job.random_state)
    bound = job.bound(n)
    idx = np.flatnonzero(h < bound) if bound is not None else np.arange(n)
    cutoff = bound if bound is not None and len(idx) < n else None
    if len(idx) > k:
        part = np.argpartition(h[idx], k)
        cutoff = h[idx[part[k]]]  # every row below the (k+1)-th hash is among the k kept
        idx = np.sort(idx[part[:k]])
    rows = df.iloc[idx].reset_index(drop=True) if len(idx) < n else df.reset_index(drop=True)
    rows[HASH_COLUMN] = h[idx]
    distinct = {c: distinct_capped(df[c], cap) for c, cap in job.distinct.items()}
    return FilePartial(Sample(rows, n, distinct, cutoff), TargetRange(target).map(_Ctx(df)))


def read_partials(reader, pieces, columns, numeric, job: SampleJob, target: str) -> dict:
    """A task: ``{path: FilePartial}`` of the files ``pieces`` (``(path, row groups, size)``),
    each read alone by ``reader`` (:func:`daskpd._data.gather.file_reader`), the columns
    declared numeric read as numbers, as the request's frame reads them."""
    out = {}
    for piece in pieces:
        df = reader(Group((piece,)), columns)
        if numeric:
            df = as_numbers(df, numeric)
        out[piece[0]] = file_partial(df, job, target)
    return out


def merged_sample(job: SampleJob, partials: dict) -> tuple[Sample, list]:
    """``(merged, short)``: the merged partial of ``partials`` ({path: Sample partial})
    and the files whose cutoff is not above its k-th hash (their rows below it may be
    missing: read them again without a bound).  ``short`` is empty when the merged
    bottom k is the bottom k of every row."""
    merged = job.combine(list(partials.values()))
    limited = {p: s.limit for p, s in partials.items() if s.limit is not None}
    if not limited:
        return merged, []
    h = merged.frame[HASH_COLUMN].to_numpy()
    if len(h) < job.k:
        return merged, sorted(limited)
    kth = np.partition(h, job.k - 1)[job.k - 1]
    return merged, sorted(p for p, lim in limited.items() if lim <= kth)
