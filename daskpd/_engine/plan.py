"""One pass over the data for any number of jobs: map, bucketed tree reduction, finish.

Every pass daskpd makes (the tree sample, the StratPD / CatStratPD scan, the passes of
the model-based methods) is :func:`run_pass` over a list of :class:`Job` objects:

* **map**: one task per partition runs every job's ``map`` on a shared
  :class:`PartitionContext` (the partition and what the jobs derive from it once);
* **reduce**: a job with ``n_buckets`` > 1 returns one partial per bucket, and each
  bucket is merged by its own tree of ``combine`` tasks (fan-in ``split_every``), so no
  task holds more than one bucket's merged partial;
* **finish**: the job's ``reduce`` turns the merged buckets into its result with
  tasks of its own (by default, one ``finish`` task), next to the merged data: only
  results reach the driver.

The jobs travel as one node of the graph (:func:`daskpd._engine.scheduler.embed`), so
every task that needs them depends on that node and a lost worker's tasks are recomputed
from lineage.  :func:`run_local` runs the very same kernels in the same tree shape
without dask, for in-memory callers and tests.
"""
from __future__ import annotations

import abc
import contextlib
from dataclasses import dataclass
from typing import Sequence

import pandas as pd

from . import memory, scheduler

__all__ = ["PartitionContext", "Job", "Kept", "run_pass", "run_local", "build_pass", "tree_groups", "job_task"]


class PartitionContext:
    """One partition, and what the jobs of a pass derive from it (each derived once)."""

    def __init__(self, df: pd.DataFrame, index: int = 0):
        self.df = df
        self.index = index
        self._cache: dict = {}

    @property
    def n(self) -> int:
        return len(self.df)

    def cached(self, key, fn):
        """``fn()`` the first time ``key`` is asked for on this partition, then the same value."""
        if key not in self._cache:
            self._cache[key] = fn()
        return self._cache[key]


@dataclass
class Kept:
    """What a job's ``reduce`` returns when part of its output must stay where it was
    computed (on the workers) for a later stage: ``result`` comes to the driver, ``kept``
    (any structure of task outputs) does not."""

    result: object
    kept: object


class Job(abc.ABC):
    """One computation riding a pass: pure kernels on pandas/numpy objects.

    ``map(ctx)`` returns the partial of one partition (a list of ``n_buckets`` partials
    when ``n_buckets > 1``); ``combine(parts, bucket)`` merges partials of one bucket
    (associative; inputs in partition order); ``finish(*merged)`` turns the merged
    partial(s) into the job's result.  ``reduce`` may replace the single finish task by
    tasks of its own (see :class:`daskpd._strat.scan.StratScan`); it only wires
    ``node(...)`` calls together, so the same code builds the dask graph and runs the
    in-memory path.
    """

    n_buckets: int = 1

    @abc.abstractmethod
    def map(self, ctx: PartitionContext):
        """Partial of one partition."""

    @abc.abstractmethod
    def combine(self, parts: list, bucket: int = 0):
        """Merged partial of ``parts`` (same bucket)."""

    def finish(self, *merged):
        """The result, from the merged partial of each bucket (default: the partial)."""
        return merged[0] if len(merged) == 1 else list(merged)

    def reduce(self, merged: list, node):
        """Wire the merged buckets into the result with ``node(method, *args, key=...)``,
        which runs ``self.<method>(*args)`` as a task (or at once, in :func:`run_local`);
        ``key`` names the task uniquely within the job.  Default: one ``finish``."""
        return node("finish", *merged, key="finish")


# ---------------------------------------------------------------------------------
# the kernels' wrappers (module-level functions: what the tasks run)


def _one_thread():
    """BLAS / OpenMP on one thread for the tasks: they already run in parallel, and a
    fixed thread count keeps BLAS's sums in a fixed order (the same bits everywhere).

    threadpoolctl's limits are process-wide, so they cannot be set per task while other
    tasks run: in a dask worker the limit is set once for the process; on dask's local
    schedulers :func:`daskpd._engine.scheduler.compute` sets it around the whole compute.
    """
    from .scheduler import limit_worker_threads

    limit_worker_threads()
    return contextlib.nullcontext()


def _map_partition(df, jobs, index):
    ctx = PartitionContext(df, index)
    with _one_thread():
        return tuple(job.map(ctx) for job in jobs)


def _pick(out, j, b, n_buckets):
    part = out[j]
    return part[b] if n_buckets > 1 else part


def _combine(jobs, j, b, *parts):
    with _one_thread():
        return jobs[j].combine(list(parts), b)


def _call(jobs, j, method, *args):
    with _one_thread():
        return getattr(jobs[j], method)(*args)


def job_task(jobs_ref, index: int, method: str, *args, name: str):
    """A task running ``jobs[index].<method>(*args)`` (the jobs come from their graph node)."""
    from dask import delayed

    return delayed(_call, pure=True)(jobs_ref, index, method, *args, dask_key_name=name)


def tree_groups(n: int, fan_in: int) -> list[list[tuple[int, int]]]:
    """The shape of a reduction tree over ``n`` leaves: per level, the (start, stop)
    ranges of the previous level's nodes that each combine merges (at least one level,
    so that a single partition's partial is combined too)."""
    levels = []
    while n > 1 or not levels:
        groups = [(i, min(n, i + fan_in)) for i in range(0, n, fan_in)]
        levels.append(groups)
        n = len(groups)
    return levels


# ---------------------------------------------------------------------------------
# the graph


def build_pass(ddf, jobs: Sequence[Job], *, name: str = "daskpd", fan_in: int | None = None):
    """The lazy graph of one pass: a list with one Delayed result per job (a
    :class:`Kept` of Delayeds for jobs that keep part of their output on the workers)."""
    from dask import delayed

    jobs = list(jobs)
    fan_in = memory.split_every() if fan_in is None else int(fan_in)
    jobs_ref = scheduler.embed(jobs)
    token = jobs_ref.key.rsplit("-", 1)[-1][:12]  # task names: <name>-<stage>-<token>-...
    parts = ddf.to_delayed(optimize_graph=True)
    if not parts:
        raise ValueError("the data has no partitions")
    maps = [delayed(_map_partition, pure=True)(p, jobs_ref, i, dask_key_name=f"{name}-map-{token}-{i}")
            for i, p in enumerate(parts)]
    shape = tree_groups(len(maps), fan_in)
    results = []
    for j, job in enumerate(jobs):
        nb = int(job.n_buckets)
        merged = []
        for b in range(nb):
            level = [delayed(_pick, pure=True)(m, j, b, nb, dask_key_name=f"{name}-pick-{token}-{j}-{b}-{i}")
                     for i, m in enumerate(maps)]
            for depth, groups in enumerate(shape):
                level = [delayed(_combine, pure=True)(jobs_ref, j, b, *level[a:z],
                                                      dask_key_name=f"{name}-combine-{token}-{j}-{b}-{depth}-{k}")
                         for k, (a, z) in enumerate(groups)]
            merged.append(level[0])

        def node(method, *args, key, _j=j):
            return job_task(jobs_ref, _j, method, *args, name=f"{name}-{key}-{token}-{_j}")

        results.append(job.reduce(merged, node))
    return results


def run_pass(ddf, jobs: Sequence[Job], *, progress=None, name: str = "daskpd", fan_in: int | None = None) -> list:
    """Run every job in ONE pass over ``ddf`` (one graph submission); their results (a
    :class:`Kept` of the result and of references -- futures, or embedded values -- to
    the kept outputs, for jobs that keep some)."""
    outs = build_pass(ddf, jobs, name=name, fan_in=fan_in)
    kept = [o.kept if isinstance(o, Kept) else None for o in outs]
    results = [o.result if isinstance(o, Kept) else o for o in outs]
    if not any(k is not None for k in kept):
        return list(scheduler.compute(*results, progress=progress))
    values, refs = scheduler.compute_keeping(results, kept, progress=progress)
    return [Kept(v, r) if k is not None else v for v, r, k in zip(values, refs, kept)]


def run_local(partitions: Sequence[pd.DataFrame], jobs: Sequence[Job], *, fan_in: int | None = None) -> list:
    """The same kernels, in the same tree shape, without dask (in-memory partitions)."""
    with scheduler.one_blas_thread():
        return _run_local(partitions, list(jobs), memory.split_every() if fan_in is None else int(fan_in))


def _run_local(partitions, jobs, fan_in):
    outs = [_map_partition(df, jobs, i) for i, df in enumerate(partitions)]
    shape = tree_groups(len(outs), fan_in)
    results = []
    for j, job in enumerate(jobs):
        nb = int(job.n_buckets)
        merged = []
        for b in range(nb):
            level = [_pick(o, j, b, nb) for o in outs]
            for groups in shape:
                level = [_combine(jobs, j, b, *level[a:z]) for a, z in groups]
            merged.append(level[0])

        def node(method, *args, key, _job=job):
            return getattr(_job, method)(*args)

        results.append(job.reduce(merged, node))
    return results
