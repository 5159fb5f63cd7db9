"""The model family's jobs on the engine: one pass, a shared per-partition context.

Several jobs (PD items, ICE, ALE, marginal) share ONE pass of the engine
(:func:`daskpd._engine.plan.build_pass`); :class:`ModelContext` decodes a partition's
model inputs and weights once for all of them, and each job's partial knows how to
combine itself.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .._data.encode import as_float
from .._engine import scheduler
from .._engine.plan import Job, build_pass
from .._errors import DataError
from ._predictor import DEFAULT_BATCH_ROWS, Predictor, float_matrix

__all__ = ["ModelContext", "Plan", "ModelJob", "run_jobs"]


class ModelContext:
    """What the jobs of one pass share on one partition (computed lazily, once)."""

    def __init__(self, df: pd.DataFrame, plan: "Plan"):
        self.df = df
        self.plan = plan
        self._w = None
        self._w_done = False
        self._inputs = None
        self._X64 = None
        self._tree_X = None

    @property
    def n(self) -> int:
        return len(self.df)

    @property
    def weights(self):
        if not self._w_done:
            self._w_done = True
            col = self.plan.weight
            if col is not None:
                w = as_float(self.df[col])
                if len(w) and (not np.isfinite(w).all() or (w < 0).any()):
                    raise DataError(f"sample_weight column {col!r} has missing, infinite or negative values")
                self._w = w
        return self._w

    def wsum(self) -> float:
        w = self.weights
        return float(w.sum()) if w is not None else float(self.n)

    def inputs(self):
        if self._inputs is None:
            self._inputs = self.plan.predictor.inputs(self.df)
        return self._inputs

    def X64(self):
        if self._X64 is None:
            self._X64 = float_matrix(self.df, self.plan.predictor.columns)
        return self._X64

    def tree_X(self):
        """The rows as the tree engine reads them (:meth:`TreeEnsemble.matrix`)."""
        if self._tree_X is None:
            tree = self.plan.predictor.tree
            self._tree_X = self.X64() if tree.encoder is None else tree.matrix(self.inputs())
        return self._tree_X


@dataclass
class Plan:
    jobs: list
    predictor: Predictor | None = None
    weight: str | None = None
    batch_rows: int = DEFAULT_BATCH_ROWS


class ModelJob(Job):
    """A model-family job on the engine: ``map`` gets the pass's shared
    :class:`ModelContext` (the partition's model inputs, decoded once for every
    job); partials combine by their own ``combine``; ``finish`` is the job's, if any."""

    def __init__(self, inner, plan: Plan):
        self.inner = inner
        self.plan = plan

    def map(self, ctx):
        mctx = ctx.cached(("model", id(self.plan)), lambda: ModelContext(ctx.df, self.plan))
        return self.inner.map(mctx)

    def combine(self, parts, bucket=0):
        return type(parts[0]).combine(list(parts))

    def finish(self, merged):
        fin = getattr(self.inner, "finish_plan", None)  # a finish that needs the plan (the model)
        if fin is not None:
            return fin(merged, self.plan)
        fin = getattr(self.inner, "finish", None)
        return fin(merged) if fin is not None else merged


def run_jobs(ddf, plan: Plan, *, progress=None, name="daskpd-model", extra=()):
    """Run every job of ``plan`` in ONE pass (:func:`daskpd._engine.plan.build_pass`);
    returns the list of finished jobs (followed by the results of ``extra`` dask objects,
    computed in the same submission)."""
    jobs = [ModelJob(j, plan) for j in plan.jobs]
    out = scheduler.compute(*build_pass(ddf, jobs, name=name), *extra, progress=progress)
    return list(out[:len(jobs)]), list(out[len(jobs):])
