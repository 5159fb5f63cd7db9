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
from .._data.request import column_list
from .._engine import memory, scheduler
from .._engine.hashing import trial_draw
from .._engine.plan import Job, build_pass
from .._engine.repeats import RepeatsJob, RepeatSketch, content_of, warn_repeats
from .._errors import DataError
from ._predictor import DEFAULT_BATCH_ROWS, Predictor, float_matrix

__all__ = ["ModelContext", "Plan", "ModelJob", "run_jobs", "Trials", "set_sums", "trial_params",
           "trial_row_id", "trial_bin_sums", "ResponseSpread", "SpreadJob", "SPREAD_ROWS"]


class ModelContext:
    """What the jobs of one pass share on one partition (computed lazily, once)."""

    def __init__(self, ctx, plan: "Plan"):
        self.ctx = ctx  # the engine's PartitionContext: what every job of the pass shares
        self.df: pd.DataFrame = ctx.df
        self.plan = plan
        self._w = None
        self._w_done = False
        self._inputs = None
        self._X64 = None
        self._tree_X = None
        self._C = None  # the trials' counts (trial_counts)
        self._W = None  # every set's weights (set_weights)

    @property
    def n(self) -> int:
        return len(self.df)

    @property
    def index(self) -> int:
        """The partition's number in the pass (its rows' ids start with it)."""
        return self.ctx.index

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

    # -- bootstrap trials (Plan.trials): one weight column per statistics set

    @property
    def n_sets(self) -> int:
        return 1 + (self.plan.trials.n if self.plan.trials is not None else 0)

    def trial_counts(self) -> np.ndarray | None:
        """``(rows, n_trials)`` uint8: every row's trial weights as drawn (Poisson counts, or
        0/1 with a subsample fraction), None without trials."""
        tr = self.plan.trials
        if tr is None or tr.n == 0:
            return None
        if self._C is None:
            content = content_of(self.ctx, self.plan.weight_columns(self.df.columns))
            self._C = trial_draw(tr.n, tr.random_state, tr.fraction).counts(content)
        return self._C

    def set_counts(self) -> np.ndarray | None:
        """:meth:`trial_counts` when the sets' weights are exactly 1 (column 0) and those
        counts (no ``sample_weight``): the compact form of :meth:`set_weights` (one byte
        per row and trial instead of eight), which the tree engine sums; else None."""
        return self.trial_counts() if self.weights is None else None

    def set_weights(self) -> np.ndarray:
        """``(rows, n_sets)`` float64: column 0 the rows' weights (1 without
        ``sample_weight``), column t the same times trial t's bootstrap (or subsample)
        weight, drawn from the seeded row hash of the model's input columns as the
        StratPD scan draws them (so every method of one request, on any partitioning,
        draws the same trials)."""
        if self._W is None:
            w = self.weights
            base = np.ones(self.n) if w is None else np.asarray(w, dtype="float64")
            C = self.trial_counts()
            if C is None:
                self._W = base[:, None]
            else:
                self._W = np.empty((self.n, 1 + C.shape[1]))
                self._W[:, 0] = base
                np.multiply(C, base[:, None], out=self._W[:, 1:])
        return self._W

    def set_wsum(self) -> np.ndarray:
        """The weight of every set (:meth:`set_weights` summed over the rows)."""
        C = self.set_counts()
        if C is not None:  # whole numbers: the same sums, without the float copy
            return np.concatenate([[float(self.n)], C.sum(axis=0, dtype=np.float64)])
        return self.set_weights().sum(axis=0)


#: the trials' parameters of every model-based function that has them
@dataclass(frozen=True)
class Trials:
    """Bootstrap trials riding a model pass: ``n`` weight sets besides the rows' own,
    Poisson(1) (``fraction`` None) or 0/1 subsamples of that fraction, keyed by
    ``random_state``.  The model is fixed: the trials measure the variability of an
    average over the rows, not of the model."""

    n: int
    random_state: int = 0
    fraction: float | None = None
    #: columns that tell rows apart, hashed into the weights besides the model's inputs
    row_id: tuple = ()

    @classmethod
    def of(cls, n_trials: int, bootstrap: bool, subsample_size: float, random_state: int,
           row_id=None) -> "Trials | None":
        """None for ``n_trials=1`` (no trial sets: today's pass, bit for bit)."""
        if n_trials <= 1:
            return None
        return cls(int(n_trials), int(random_state), None if bootstrap else float(subsample_size),
                   tuple(dict.fromkeys(column_list(row_id))))


def trial_row_id(trials: "Trials | None") -> list:
    """The ``row_id`` columns a pass with ``trials`` reads besides the model's (none
    without trials)."""
    return list(trials.row_id) if trials is not None else []


def trial_params(trials: "Trials | None", band, repeats: float | None = None,
                 response_std: float | None = None) -> dict:
    """What a result's ``params`` record of its trials (nothing without trials):
    ``row_repeats`` is :attr:`Plan.repeats` once the pass has run; ``response_std``
    :attr:`Plan.response_std` (the scale a flat curve is drawn on), when measured."""
    if trials is None:
        return {}
    out = {"n_trials": trials.n, "bootstrap": trials.fraction is None, "subsample_size": trials.fraction,
           "band": [float(band[0]), float(band[1])], "random_state": trials.random_state,
           "row_id": list(trials.row_id), "row_repeats": repeats}
    if response_std is not None:
        out["response_std"] = response_std
    return out


#: the rows of each partition (every k-th, at most this many) whose prediction measures
#: the spread of the model's response (:class:`SpreadJob`)
SPREAD_ROWS = 2_000


@dataclass
class ResponseSpread:
    """The weighted count, mean and sum of squared deviations of the model's response on
    some rows; partials merge exactly (Chan et al.'s pairwise update)."""

    n: float = 0.0
    mean: float = 0.0
    m2: float = 0.0

    @classmethod
    def combine(cls, parts) -> "ResponseSpread":
        out = cls()
        for p in parts:
            if p.n <= 0:
                continue
            n = out.n + p.n
            d = p.mean - out.mean
            out = cls(n, out.mean + d * p.n / n, out.m2 + p.m2 + d * d * out.n * p.n / n)
        return out

    def std(self) -> float | None:
        """The weighted standard deviation, None without rows or when not finite."""
        if self.n <= 0:
            return None
        v = self.m2 / self.n
        return float(np.sqrt(v)) if np.isfinite(v) and v >= 0 else None


class SpreadJob:
    """The spread of the model's response on every k-th row of each partition (at most
    ``SPREAD_ROWS``), weighted by the sample weight: the scale a model-based curve that
    is not distinguishable from flat is drawn on (``params["response_std"]``).  A model
    whose response is not one number per row (every class at once) gives none."""

    def map(self, ctx) -> ResponseSpread:
        n = ctx.n
        if n == 0 or ctx.plan.predictor is None:
            return ResponseSpread()
        step = max(1, -(-n // SPREAD_ROWS))
        rows = ctx.df.iloc[::step]
        try:
            p = ctx.plan.predictor.predict(rows)
        except DataError:  # every class at once: the PD job itself says what to do
            return ResponseSpread()
        w = ctx.weights
        w = np.ones(len(p)) if w is None else np.asarray(w, dtype="float64")[::step]
        ok = np.isfinite(p) & (w > 0)
        p, w = p[ok], w[ok]
        if not len(p) or w.sum() <= 0:
            return ResponseSpread()
        m = float(np.average(p, weights=w))
        return ResponseSpread(float(w.sum()), m, float((w * (p - m) ** 2).sum()))


def trial_bin_sums(ctx, idx, vals, rows_of, nbins, levels=None, nlevels=0):
    """(T, 2 [+1], nbins): per trial, the sums of the trial weights and of the weighted
    ``vals`` per bin ``idx`` (``rows_of``: the partition row of every value: an ALE's
    local effects, a marginal plot's targets); with ``levels`` = (level, row) of every
    used row, also the trial weight of each of ``nlevels`` levels (a categorical ALE's
    centring)."""
    W = ctx.set_weights()[:, 1:]
    T = W.shape[1]
    width = max(nbins, nlevels)
    out = np.zeros((T, 2 if levels is None else 3, width))
    for t in range(T):
        wt = W[rows_of, t]
        out[t, 0, :nbins] = np.bincount(idx, weights=wt, minlength=nbins)[:nbins]
        out[t, 1, :nbins] = np.bincount(idx, weights=wt * vals, minlength=nbins)[:nbins]
        if levels is not None:
            out[t, 2, :nlevels] = np.bincount(levels[0], weights=W[levels[1], t], minlength=nlevels)[:nlevels]
    return out


def set_sums(R: np.ndarray, W: np.ndarray) -> np.ndarray:
    """``R`` (cells, rows) summed over rows with every weight set ``W`` (rows, sets):
    ``(sets, cells)``."""
    return (R @ W).T


@dataclass
class Plan:
    jobs: list
    predictor: Predictor | None = None
    weight: str | None = None
    batch_rows: int = DEFAULT_BATCH_ROWS
    trials: "Trials | None" = None  # bootstrap trials riding the pass (None: none)
    #: with trials, the pass's :class:`~daskpd._engine.repeats.RepeatSketch` of the rows'
    #: weight columns (set by :func:`run_jobs`)
    sketch: "RepeatSketch | None" = None
    #: with trials and a model, the spread of its response (:class:`SpreadJob`, set by
    #: :func:`run_jobs`)
    spread: "ResponseSpread | None" = None

    @property
    def response_std(self) -> float | None:
        """The standard deviation of the model's response (None before the pass, without
        trials or without a model): :class:`SpreadJob`."""
        return self.spread.std() if self.spread is not None else None

    @property
    def repeats(self) -> float | None:
        """How often rows repeat in the weight columns (None before the pass or without
        trials): :meth:`RepeatSketch.repeats`."""
        return self.sketch.repeats() if self.sketch is not None else None

    def weight_columns(self, columns) -> list:
        """The columns the trial weights are drawn from: the model's inputs and the
        trials' ``row_id`` (every column read when there is no model)."""
        if self.predictor is None:
            return list(columns)
        return list(dict.fromkeys([*self.predictor.columns, *trial_row_id(self.trials)]))


class ModelJob(Job):
    """A model-family job on the engine: ``map`` gets the pass's shared
    :class:`ModelContext` (the partition's model inputs, decoded once for every
    job); partials combine by their own ``combine``; ``finish`` is the job's, if any."""

    def __init__(self, inner, plan: Plan):
        self.inner = inner
        self.plan = plan

    def map(self, ctx):
        mctx = ctx.cached(("model", id(self.plan)), lambda: ModelContext(ctx, self.plan))
        return self.inner.map(mctx)

    def combine(self, parts, bucket=0):
        return type(parts[0]).combine(list(parts))

    def finish(self, merged):
        fin = getattr(self.inner, "finish_plan", None)  # a finish that needs the plan (the model)
        if fin is not None:
            return fin(merged, self.plan)
        fin = getattr(self.inner, "finish", None)
        return fin(merged) if fin is not None else merged


#: what a model pass with trials holds per (row of a partition, statistics set): the rows'
#: weights of every set (float64, :meth:`PassContext.set_weights`) and their trial counts
#: (one byte a trial)
TRIAL_ROW_BYTES = 9


def check_trial_memory(trials: "Trials | None", rows: int | None, n_partitions: int) -> None:
    """A :class:`DataError` with the figures, before anything runs, when a partition's
    trial weights (:data:`TRIAL_ROW_BYTES` per row and set, the partitions' mean rows)
    cannot fit in a worker thread's memory (:func:`daskpd._engine.memory.usable_thread_memory`);
    the message gives the most trials that would fit."""
    if trials is None or not rows:
        return
    per_row = float(rows) / max(1, n_partitions) * TRIAL_ROW_BYTES
    need, have = per_row * (1 + trials.n), memory.usable_thread_memory()
    if need <= have:
        return
    most = int(have // per_row) - 1
    raise DataError(f"n_trials = {trials.n:,} does not fit in memory: a partition of about "
                    f"{rows / max(1, n_partitions):,.0f} rows holds its rows' weights of every trial, about "
                    f"{memory.format_bytes(need)}, and a worker thread has {memory.format_bytes(have)} (its share of "
                    "memory_limit, up to dask's pause threshold); "
                    + (f"at most about {most:,} trials fit: lower n_trials, " if most >= 1 else "")
                    + "read the data in smaller partitions or give the workers more memory (nothing was computed)")


def run_jobs(ddf, plan: Plan, *, name="daskpd-model", extra=(), warn: bool = True,
             rows: int | None = None):
    """Run every job of ``plan`` in ONE pass (:func:`daskpd._engine.plan.build_pass`);
    returns the list of finished jobs (followed by the results of ``extra`` dask objects,
    computed in the same submission).  With trials, the same pass measures how often rows
    repeat in the weight columns (:attr:`Plan.sketch`; with ``warn``, a
    ``RepeatedRowsWarning`` when they do: a caller that adds earlier rows' partials
    warns of the sum itself) and, with a model, the spread of its response
    (:attr:`Plan.response_std`, :class:`SpreadJob`: at most ``SPREAD_ROWS`` predictions a
    partition); ``rows`` (the data's rows, when known): the trials' memory is checked
    first (:func:`check_trial_memory`)."""
    check_trial_memory(plan.trials, rows, ddf.npartitions)
    jobs = [ModelJob(j, plan) for j in plan.jobs]
    riders = [RepeatsJob(plan.weight_columns(ddf.columns))] if plan.trials is not None else []
    if riders and plan.predictor is not None:  # the response's spread: the scale of a flat curve
        riders.append(ModelJob(SpreadJob(), plan))
    out = scheduler.compute(*build_pass(ddf, [*jobs, *riders], name=name), *extra)
    n = len(jobs) + len(riders)
    if riders:
        plan.sketch = out[len(jobs)]
        if len(riders) > 1:
            plan.spread = out[len(jobs) + 1]
        if warn:
            warn_repeats(plan.repeats, riders[0].columns)
    return list(out[:len(jobs)]), list(out[n:])
