"""One pass over the data for any number of jobs: map, bucketed tree reduction, finish.

Every pass daskpd makes (the tree sample, the StratPD / CatStratPD scan, the passes of
the model-based methods) is :func:`run_pass` over a list of :class:`Job` objects:

* **map**: one task per partition runs every job's ``map`` on a shared
  :class:`PartitionContext` (the partition and what the jobs derive from it once);
* **reduce**: a job with ``n_buckets`` > 1 has its partials split into buckets, each
  merged by its own tree of ``combine`` tasks (see :mod:`daskpd._engine.memory` for the
  arithmetic tree's fan-in and the tasks'), so no task holds more than one bucket's
  merged partial.  In a tree of combine tasks splitting is gradual: the map cuts its
  partial into at most ``SPLIT`` pieces and every combine cuts its output at most
  ``SPLIT`` ways again, until the buckets are reached -- a node's output is picked apart
  by a few tasks, never by all of them (a spilled output would be read back once per
  pick); with one level of combines the map cuts its partial into every bucket at once;
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
from .allocator import limit_worker_threads

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

    ``map(ctx)`` returns the partial of one partition; ``combine(parts, bucket)`` merges
    partials of one bucket (associative; inputs in partition order); with ``n_buckets``
    > 1, ``split(partial, granularity, n, part)`` cuts the partial of bucket ``part`` of
    ``granularity`` buckets into the ``n`` buckets it holds at ``granularity * n``;
    ``finish(*merged)`` turns the merged partial(s) into the job's result.  ``reduce`` may replace the single finish task by
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

    def split(self, partial, granularity: int, n: int, part: int) -> list:
        """``partial`` of bucket ``part`` (of ``granularity``) cut into its ``n`` buckets."""
        raise NotImplementedError(f"{type(self).__name__} has n_buckets > 1 but cannot split its partials")

    def combine_split(self, parts: list, bucket: int, granularity: int, n: int) -> list:
        """``split(combine(parts, bucket), granularity, n, bucket)``; a job may do it in
        one go (:class:`daskpd._strat.scan.StratScan` cuts raw rows without first
        concatenating them), as long as the pieces are the same."""
        return self.split(self.combine(parts, bucket), granularity, n, bucket)

    def finish_bucket(self, merged, bucket: int):
        """What the last combine of bucket ``bucket`` hands on instead of its merged
        partial (default: the partial itself).  A job whose ``reduce`` first turns every
        bucket into something small does it here, inside the combine task that holds the
        merged partial: the partial then never waits in memory for (or travels to) a
        separate task that would be placed, or stolen, elsewhere."""
        return merged

    def combine_finish(self, parts: list, bucket: int):
        """``finish_bucket(combine(parts, bucket), bucket)``: the last merge of a bucket;
        a job may skip what the finish would undo (:class:`daskpd._strat.scan.StratScan`
        hands raw rows to its finish without concatenating them first)."""
        return self.finish_bucket(self.combine(parts, bucket), bucket)

    def finish(self, *merged):
        """The result, from the merged partial of each bucket (default: the partial)."""
        return merged[0] if len(merged) == 1 else list(merged)

    def reduce(self, merged: list, node):
        """Wire the merged buckets into the result with ``node(method, *args, key=...)``,
        which runs ``self.<method>(*args)`` as a task (or at once, in :func:`run_local`);
        ``key`` names the task uniquely within the job.  Default: one ``finish``."""
        return node("finish", *merged, key="finish")


def merge_keyed(parts: list, attr: str, merge) -> dict:
    """``{key: merge([part.<attr>[key] for part in parts])}`` over the keys of the first
    part: the per-column (per-feature) dicts of partials merged key by key, in order."""
    return {k: merge([getattr(p, attr)[k] for p in parts]) for k in getattr(parts[0], attr)}


def sum_fields(parts: list, *names: str) -> dict:
    """``{name: sum(part.<name> for part in parts)}``: a partial's counters summed."""
    return {a: sum(getattr(p, a) for p in parts) for a in names}


# ---------------------------------------------------------------------------------
# the kernels' wrappers (module-level functions: what the tasks run)


def _one_thread():
    """BLAS / OpenMP on one thread for the tasks: they already run in parallel, and a
    fixed thread count keeps BLAS's sums in a fixed order (the same bits everywhere).

    threadpoolctl's limits are process-wide, so they cannot be set per task while other
    tasks run: in a dask worker the limit is set once for the process; on dask's local
    schedulers :func:`daskpd._engine.scheduler.compute` sets it around the whole compute.
    """
    limit_worker_threads()
    return contextlib.nullcontext()


#: a node's output is cut at most this many ways (see the module docstring)
SPLIT = 8


def split_schedule(n_buckets: int, n_levels: int) -> list[int]:
    """Granularity (buckets) of the map's pieces and of each level's outputs.  With one
    level of combines the maps cut their partials into every bucket at once (each
    combine then takes one bucket of every map, not ``B / SPLIT`` of them)."""
    g = [n_buckets if n_levels <= 1 else min(n_buckets, SPLIT)]
    for level in range(n_levels):
        g.append(n_buckets if level == n_levels - 1 else min(n_buckets, g[-1] * SPLIT))
    return g


def _map_partition(df, jobs, index, grans):
    ctx = PartitionContext(df, index)
    with _one_thread():
        out = []
        for job, g in zip(jobs, grans):
            partial = job.map(ctx)
            out.append(job.split(partial, 1, g, 0) if g > 1 else partial)
        return tuple(out)


def _pick(out, j, b, n):
    part = out[j]
    return part[b] if n > 1 else part


def _lower_levels(job, parts: list, b: int, arity: int) -> list:
    """``parts`` merged ``arity`` at a time, level by level (the arithmetic tree), until
    at most ``arity`` are left for the last merge: a task covering several levels of it
    adds exactly what a tree of tasks would."""
    while len(parts) > arity:
        parts = [job.combine(parts[i:i + arity], b) for i in range(0, len(parts), arity)]
    return parts


def _combine(jobs, j, b, granularity, n_split, final, arity, *parts):
    job = jobs[j]
    with _one_thread():
        parts = _lower_levels(job, list(parts), b, arity)
        if n_split > 1:  # the last merge and the cut in one go (Job.combine_split)
            pieces = job.combine_split(parts, b, granularity, n_split)
            return [job.finish_bucket(p, b * n_split + t) for t, p in enumerate(pieces)] if final else pieces
        return job.combine_finish(parts, b) if final else job.combine(parts, b)


def _reduce(job, j: int, n_maps: int, shape, task, arity: int) -> list:
    """Wire one job's reduction: ``task(fn, *args, key)`` makes a task (or runs it);
    map outputs are ``task("map", i)``.  Returns every bucket's ``job.finish_bucket`` of
    its merged partial (made by the bucket's last combine)."""
    nb = int(job.n_buckets)
    grans = split_schedule(nb, len(shape))
    # nodes[i][k]: piece k (a bucket at the current granularity) of node i
    nodes = [[task(_pick, ("map", i), j, k, grans[0], key=f"pick-{j}-{k}-{i}") for k in range(grans[0])]
             for i in range(n_maps)]
    for depth, groups in enumerate(shape):
        g, g_next = grans[depth], grans[depth + 1]
        s = g_next // g
        nxt = []
        for q, (a, z) in enumerate(groups):
            pieces = []
            for k in range(g):
                out = task(_combine, ("jobs",), j, k, g, s, depth == len(shape) - 1, arity,
                           *[nodes[c][k] for c in range(a, z)],
                           key=f"combine-{j}-{depth}-{q}-{k}")
                pieces += [task(_pick_one, out, t, key=f"split-{j}-{depth}-{q}-{k}-{t}")
                           for t in range(s)] if s > 1 else [out]
            nxt.append(pieces)
        nodes = nxt
    return nodes[0]


def _pick_one(out, t):
    return out[t]


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


def _shape_args(fan_in, arity, n_partitions: int):
    """``(fan_in, arity)``: by default both :func:`memory.arity`; an explicit ``fan_in``
    alone is also the arity.  ``fan_in`` must be a power of ``arity``."""
    arity = (int(arity) if arity is not None else int(fan_in) if fan_in is not None
             else memory.arity(n_partitions))
    fan_in = int(fan_in) if fan_in is not None else arity
    f = arity
    while f < fan_in:
        f *= arity
    if f != fan_in or arity < 2:
        raise ValueError(f"fan_in={fan_in} must be a power of arity={arity} (>= 2)")
    return fan_in, arity


def _map_tasks(parts, jobs_ref, grans, prefix: str) -> list:
    """One Delayed per partition: ``_map_partition`` of it, under the key ``prefix-i``.

    Each partition's own last task (usually the one reading it) is fused into its map
    task when nothing else uses it, so a partition never crosses between workers on its
    way to its map: as a task of its own it could be read by one worker and mapped by
    another (at 1e8 rows, 2.5 GB of the 23 GB that crossed were such partitions).
    """
    from dask._task_spec import GraphNode, Task, TaskRef
    from dask.core import reverse_dict
    from dask.delayed import Delayed
    from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

    graph = {}
    for p in parts:  # the partitions usually share one graph: merged once
        if p.key not in graph:
            graph.update(p.__dask_graph__())
    used = reverse_dict({k: (v.dependencies if isinstance(v, GraphNode) else set()) for k, v in graph.items()})
    maps, rest = {}, dict(graph)
    for i, p in enumerate(parts):
        key = f"{prefix}-{i}"
        mapped = Task(key, _map_partition, TaskRef(p.key), TaskRef(jobs_ref.key), i, grans)
        node = graph.get(p.key)
        if isinstance(node, GraphNode) and not used.get(p.key):
            mapped = Task.fuse(node, mapped, key=key)
            del rest[p.key]
        maps[key] = mapped
    jobs_graph = jobs_ref.__dask_graph__()
    layers, deps = dict(jobs_graph.layers), dict(jobs_graph.dependencies)
    layers[f"{prefix}-inputs"], deps[f"{prefix}-inputs"] = MaterializedLayer(rest), set()
    layers[prefix], deps[prefix] = MaterializedLayer(maps), {f"{prefix}-inputs", *jobs_ref.__dask_layers__()}
    hlg = HighLevelGraph(layers, deps)
    return [Delayed(key, hlg, layer=prefix) for key in maps]


def build_pass(ddf, jobs: Sequence[Job], *, name: str = "daskpd", fan_in: int | None = None,
               arity: int | None = None):
    """The lazy graph of one pass: a list with one Delayed result per job (a
    :class:`Kept` of Delayeds for jobs that keep part of their output on the workers)."""
    from dask import delayed

    jobs = list(jobs)
    jobs_ref = scheduler.embed(jobs)
    token = jobs_ref.key.rsplit("-", 1)[-1][:12]  # task names: <name>-<stage>-<token>-...
    parts = ddf.to_delayed(optimize_graph=True)
    if not parts:
        raise ValueError("the data has no partitions")
    fan_in, arity = _shape_args(fan_in, arity, len(parts))
    shape = tree_groups(len(parts), fan_in)
    grans = [split_schedule(int(job.n_buckets), len(shape))[0] for job in jobs]
    maps = _map_tasks(parts, jobs_ref, grans, f"{name}-map-{token}")

    def task(fn, *args, key):
        args = [maps[a[1]] if isinstance(a, tuple) and a and a[0] == "map" else
                jobs_ref if isinstance(a, tuple) and a == ("jobs",) else a for a in args]
        stage = key.split("-", 1)[0]
        return delayed(fn, pure=True)(*args, dask_key_name=f"{name}-{stage}-{token}-{key.split('-', 1)[1]}")

    results = []
    for j, job in enumerate(jobs):
        merged = _reduce(job, j, len(maps), shape, task, arity)

        def node(method, *args, key, _j=j):
            return job_task(jobs_ref, _j, method, *args, name=f"{name}-{key}-{token}-{_j}")

        results.append(job.reduce(merged, node))
    return results


def run_pass(ddf, jobs: Sequence[Job], *, name: str = "daskpd", fan_in: int | None = None,
             arity: int | None = None) -> list:
    """Run every job in ONE pass over ``ddf`` (one graph submission); their results (a
    :class:`Kept` of the result and of references -- futures, or embedded values -- to
    the kept outputs, for jobs that keep some)."""
    outs = build_pass(ddf, jobs, name=name, fan_in=fan_in, arity=arity)
    kept = [o.kept if isinstance(o, Kept) else None for o in outs]
    results = [o.result if isinstance(o, Kept) else o for o in outs]
    if not any(k is not None for k in kept):
        return list(scheduler.compute(*results))
    values, refs = scheduler.compute_keeping(results, kept)
    return [Kept(v, r) if k is not None else v for v, r, k in zip(values, refs, kept)]


def run_local(partitions: Sequence[pd.DataFrame], jobs: Sequence[Job], *, fan_in: int | None = None,
              arity: int | None = None) -> list:
    """The same kernels, in the same tree shape, without dask (in-memory partitions)."""
    with scheduler.one_blas_thread():
        return _run_local(partitions, list(jobs), *_shape_args(fan_in, arity, len(partitions)))


def _run_local(partitions, jobs, fan_in, arity):
    shape = tree_groups(len(partitions), fan_in)
    grans = [split_schedule(int(job.n_buckets), len(shape))[0] for job in jobs]
    outs = [_map_partition(df, jobs, i, grans) for i, df in enumerate(partitions)]

    def task(fn, *args, key):
        args = [outs[a[1]] if isinstance(a, tuple) and a and a[0] == "map" else
                jobs if isinstance(a, tuple) and a == ("jobs",) else a for a in args]
        return fn(*args)

    results = []
    for j, job in enumerate(jobs):
        merged = _reduce(job, j, len(outs), shape, task, arity)

        def node(method, *args, key, _job=job):
            return getattr(_job, method)(*args)

        results.append(job.reduce(merged, node))
    return results
