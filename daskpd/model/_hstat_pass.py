"""Friedman and Popescu's (2008) H-statistic: pairwise and total interaction strength.

With the partial dependence functions centred to weighted mean 0 over the evaluation
points ``x_i`` (``F`` the model's response, ``F_j``, ``F_jk`` the 1- and 2-way PDs,
``F_-j`` the PD of every input but ``j``)::

    H2_jk = sum_i e_i [F_jk(x_ij, x_ik) - F_j(x_ij) - F_k(x_ik)]^2 / sum_i e_i F_jk(x_ij, x_ik)^2
    H2_j  = sum_i e_i [F(x_i) - F_j(x_ij) - F_-j(x_i,-j)]^2       / sum_i e_i F(x_i)^2

(equations 44 and 46 of the paper).  The PDs are *evaluated at data points*, not on a
grid, and each is an average over the data (``F_-j(x_-j)`` averages the response over
the distribution of ``x_j`` alone).  Evaluated at all N rows this costs N^2
predictions per statistic; here the evaluation points are a seeded bottom-k sample of
``n_points`` rows (the rows of smallest keyed hash of the model's inputs: the same rows
however the data is partitioned), each PD an exact average over **every** row, so the
statistic is the data-point definition restricted to the sample (with every row when
there are at most ``n_points``).

Two passes over the data: the sample (:class:`PointsJob`), then ONE pass of every PD
at the sample's values (a :class:`~daskpd.model._pd_pass.PDJob` holding the 1-way items and
the pairs at their points, on the brute-force engines: the tree-exact walk, the
tree-interval engine or the model's ``predict``) and of every ``F_-j``
(:class:`RestJob`: for a scikit-learn tree model the rows' counts per class of x_j values
that take the same branches at every split on x_j, an exact summary of the distribution
of x_j to the model, its response at each class computed once on the driver; for any
other model the sample's rows predicted at every distinct value of x_j in each
partition).  With bootstrap trials every sum carries one weight column per trial and
every evaluation point its trial weight, so each trial is the statistic of a
bootstrap draw of the rows (the model fixed).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .._engine.hashing import keyed_hash, trial_draw
from .._engine.repeats import content_of
from .._errors import DataError
from ._predictor import float_matrix

__all__ = ["PointsJob", "EvalPoints", "RestJob", "HJob", "h_plan", "finish_h", "H_SALT"]

#: the evaluation sample's hash salt (the trials' weights use salts 1..T, ICE's lines 7)
H_SALT = 0x4853


# ---------------------------------------------------------------------------------
# pass 1: the evaluation points


@dataclass
class _PointsPartial:
    rows: pd.DataFrame
    h: np.ndarray  # the keyed hash of each kept row (bottom k)
    content: np.ndarray  # its content hash (the trials' weights are drawn from it)
    n_rows: int
    k: int

    @classmethod
    def combine(cls, parts):
        rows = pd.concat([p.rows for p in parts], ignore_index=True)
        h = np.concatenate([p.h for p in parts])
        content = np.concatenate([p.content for p in parts])
        k = parts[0].k
        if len(h) > k:
            keep = np.sort(np.argpartition(h, k - 1)[:k])
            rows, h, content = rows.iloc[keep].reset_index(drop=True), h[keep], content[keep]
        return cls(rows, h, content, int(sum(p.n_rows for p in parts)), k)


@dataclass
class PointsJob:
    """The ``k`` rows of smallest keyed hash of the trials' weight columns (the model's
    inputs and ``row_id``), with their content hashes, and the row count."""

    k: int
    random_state: int

    def map(self, ctx):
        content = content_of(ctx.ctx, ctx.plan.weight_columns(ctx.df.columns))
        h = keyed_hash(np.asarray(content, dtype=np.uint64), self.random_state, H_SALT)
        keep = np.arange(ctx.n) if ctx.n <= self.k else np.sort(np.argpartition(h, self.k - 1)[:self.k])
        return _PointsPartial(ctx.df.iloc[keep].reset_index(drop=True), h[keep], np.asarray(content)[keep], ctx.n,
                              self.k)

    def finish(self, merged):
        order = np.argsort(merged.h, kind="stable")  # hash order: the same rows, in the same order, anywhere
        return _PointsPartial(merged.rows.iloc[order].reset_index(drop=True), merged.h[order],
                              merged.content[order], merged.n_rows, merged.k)


@dataclass
class EvalPoints:
    """The evaluation points: ``frame`` (m rows, the columns read), ``weights``
    ``(sets, m)`` (set 0 the rows' weights, set t those times trial t's draw) and the
    data's row count."""

    frame: pd.DataFrame
    weights: np.ndarray
    n_rows: int

    @classmethod
    def of(cls, part: _PointsPartial, weight: str | None, trials) -> "EvalPoints":
        frame = part.rows
        w = np.ones(len(frame)) if weight is None else np.asarray(frame[weight], dtype="float64")
        sets = [w]
        if trials is not None:
            C = trial_draw(trials.n, trials.random_state, trials.fraction).counts(part.content)
            sets += [w * C[:, t] for t in range(trials.n)]
        return cls(frame, np.vstack(sets), part.n_rows)

    @property
    def m(self) -> int:
        return len(self.frame)


# ---------------------------------------------------------------------------------
# pass 2: F_-j, the PD of every input but j, at the evaluation points


def value_classes(tree, pos: int) -> np.ndarray | None:
    """The sorted thresholds of every numeric split on internal feature ``pos`` (values
    with as many thresholds below them take the same branches at all of them), or None
    when the trees split it by category (each category is then its own class)."""
    cat, _ = tree.split_kinds(pos)
    if cat:
        return None
    thr = [tree.thresholds(i, pos) for i in range(len(tree.trees))]
    return np.unique(np.concatenate(thr)) if thr else np.empty(0)


def class_keys(x: np.ndarray, thresholds: np.ndarray | None, float32: bool) -> np.ndarray:
    """Each value's class (:func:`value_classes`): the number of thresholds below it (the
    value as the trees compare it), or the category code; -1 for a missing value (and a
    negative code: both go the missing-value way)."""
    x = np.asarray(x, dtype="float64")
    miss = np.isnan(x)
    if thresholds is None:
        keys = np.where(miss | (x < 0), -1, np.floor(np.where(miss, -1, x))).astype(np.int64)
        return keys
    cmp = x.astype(np.float32).astype("float64") if float32 else x
    keys = np.searchsorted(thresholds, cmp, side="left").astype(np.int64)
    keys[miss] = -1
    return keys


@dataclass
class _ClassPartial:
    """Per feature: the class keys (sorted), the weight of every set in each class
    ``(sets, K)`` and the smallest value of each (its representative)."""

    keys: list
    counts: list
    reps: list

    @classmethod
    def combine(cls, parts):
        keys, counts, reps = [], [], []
        for i in range(len(parts[0].keys)):
            k_all = np.concatenate([p.keys[i] for p in parts])
            uk, inv = np.unique(k_all, return_inverse=True)
            c = np.zeros((parts[0].counts[i].shape[0], len(uk)))
            r = np.full(len(uk), np.inf)
            np.add.at(c.T, inv, np.concatenate([p.counts[i].T for p in parts]))
            np.minimum.at(r, inv, np.concatenate([p.reps[i] for p in parts]))
            keys.append(uk)
            counts.append(c)
            reps.append(r)
        return cls(keys, counts, reps)


@dataclass
class _RowsPartial:
    """Per feature: ``(sets, m)`` sums over the rows of the evaluation points' response
    with x_j set to the row's x_j."""

    sums: list

    @classmethod
    def combine(cls, parts):
        return cls([np.sum([p.sums[i] for p in parts], axis=0) for i in range(len(parts[0].sums))])


@dataclass
class RestJob:
    """``sum_l w_l f(x_lj, x_i,-j)`` at every evaluation point ``x_i`` for each feature
    j, every weight set: by value classes on a tree model (``thresholds``: per feature,
    :func:`value_classes`), else by predicting the points at the partition's distinct
    values of x_j."""

    features: list
    points: pd.DataFrame  # the evaluation rows (the model's input columns)
    thresholds: list | None = None  # tree model: per feature, value_classes (None: by category)

    def map(self, ctx):
        pred = ctx.plan.predictor
        W = ctx.set_weights()
        if self.thresholds is not None:
            X = ctx.tree_X() if ctx.n else np.empty((0, 0))
            keys, counts, reps = [], [], []
            for f, thr in zip(self.features, self.thresholds):
                x = X[:, pred.tree.position(pred.columns.index(f))] if ctx.n else np.empty(0)
                uk, inv = np.unique(class_keys(x, thr, pred.tree.float32), return_inverse=True)
                inv = inv.reshape(-1)
                c = np.stack([np.bincount(inv, weights=W[:, s], minlength=len(uk)) for s in range(W.shape[1])]) \
                    if ctx.n else np.zeros((ctx.n_sets, 0))
                r = np.full(len(uk), np.inf)
                np.minimum.at(r, inv, np.where(np.isnan(x), np.inf, x))
                keys.append(uk)
                counts.append(c)
                reps.append(r)
            return _ClassPartial(keys, counts, reps)
        base = pred.inputs(self.points)
        m = len(self.points)
        step = max(1, ctx.plan.batch_rows // max(1, m))
        sums = []
        for f in self.features:
            out = np.zeros((W.shape[1], m))
            if ctx.n:
                codes, uniq = pd.factorize(ctx.df[f], use_na_sentinel=False)
                uniq = np.asarray(uniq, dtype=object if not pd.api.types.is_numeric_dtype(ctx.df[f]) else "float64")
                wv = np.stack([np.bincount(codes, weights=W[:, s], minlength=len(uniq)) for s in range(W.shape[1])])
                for v0 in range(0, len(uniq), step):
                    v1 = min(len(uniq), v0 + step)
                    R = pred.predict_copies(base, [(f, uniq[v0:v1])], v1 - v0, ctx.plan.batch_rows)  # (values, m)
                    out += wv[:, v0:v1] @ R
            sums.append(out)
        return _RowsPartial(sums)

    def finish_plan(self, merged, plan):
        """Tree model: each class's response at every point, weighted by the class's rows."""
        if not isinstance(merged, _ClassPartial):
            return merged
        pred = plan.predictor
        tree = pred.tree
        X64 = float_matrix(self.points, pred.columns) if tree.encoder is None else None
        Xt = tree.matrix(pred.inputs(self.points), X64)
        sums = []
        for f, keys, counts, reps in zip(self.features, merged.keys, merged.counts, merged.reps):
            pos = tree.position(pred.columns.index(f))
            reps = np.where(keys < 0, np.nan, reps)
            out = np.zeros((counts.shape[0], len(self.points)))
            for sel in (keys >= 0, keys < 0):  # the numeric sweep for the values, then the missing class
                if sel.any():
                    R = np.asarray(tree.curves(Xt, [pos], [reps[sel]], None, need_rows=True))
                    out += counts[:, sel] @ R.reshape(int(sel.sum()), -1)
            sums.append(out)
        return _RowsPartial(sums)


@dataclass
class _HPartial:
    parts: list

    @classmethod
    def combine(cls, parts):
        return cls([type(ps[0]).combine(list(ps)) for ps in zip(*(p.parts for p in parts))])


@dataclass
class HJob:
    """The statistic's jobs (a PDJob, and a RestJob with totals) as ONE job of a pass:
    one partial, so a merged plan (:mod:`daskpd.model._multi`) keeps it as one."""

    jobs: list

    def map(self, ctx):
        return _HPartial([j.map(ctx) for j in self.jobs])

    def finish_plan(self, merged, plan):
        out = []
        for job, part in zip(self.jobs, merged.parts):
            fin = getattr(job, "finish_plan", None)
            out.append(fin(part, plan) if fin is not None else part)
        return _HPartial(out)


# ---------------------------------------------------------------------------------
# the plan and the statistic


@dataclass
class HPlan:
    """What the pass computes, given the evaluation points: the 1-way and pairwise PD
    items (``pd_items``, for a :class:`~daskpd.model._pd_pass.PDJob`), each feature's grid
    (the points' distinct values) and the index of every point's value in it, each
    pair's distinct points and the index of every point's pair among them."""

    features: list  # every feature of a pair or a total
    pairs: list
    totals: list
    grids: dict
    index: dict  # feature -> (m,) index into grids[feature]
    pair_index: dict  # pair -> (m,) index into its points
    pd_items: list


def _factorize(values) -> tuple[np.ndarray, np.ndarray]:
    codes, uniq = pd.factorize(values, use_na_sentinel=False)
    if isinstance(values, pd.Series) and not pd.api.types.is_numeric_dtype(values):
        uniq = np.asarray(uniq, dtype=object)
    else:
        uniq = np.asarray(uniq)
    return np.asarray(codes, dtype=np.intp), uniq


def h_plan(points: EvalPoints, pairs: list, totals: list) -> HPlan:
    """The PD items of :func:`finish_h`'s statistics at ``points``."""
    features = list(dict.fromkeys([*(f for p in pairs for f in p), *totals]))
    grids, index = {}, {}
    for f in features:
        index[f], grids[f] = _factorize(points.frame[f])
    items = [((f,), [grids[f]]) for f in features]
    pair_index = {}
    for a, b in pairs:
        both = np.stack([index[a], index[b]], axis=1)
        uniq, inv = np.unique(both, axis=0, return_inverse=True)
        pair_index[(a, b)] = np.asarray(inv, dtype=np.intp).reshape(-1)
        items.append(((a, b), [grids[a], grids[b]], uniq))
    return HPlan(features, list(pairs), list(totals), grids, index, pair_index, items)


def _centred(v: np.ndarray, e: np.ndarray) -> np.ndarray:
    """``v`` (sets, m) minus its mean over the points weighted by ``e`` (sets, m)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return v - (np.sum(e * v, axis=1) / np.sum(e, axis=1))[:, None]


def _ratio(num: np.ndarray, den: np.ndarray, e: np.ndarray):
    """H^2 (``sum e num / sum e den``: NaN where the denominator is 0) and the
    unnormalised statistic ``sqrt(sum e num / sum e)``, per set."""
    n = np.sum(e * num, axis=1)
    d = np.sum(e * den, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        h2 = np.where(d > 0, n / np.where(d > 0, d, 1.0), np.nan)
        raw = np.sqrt(n / np.sum(e, axis=1))
    return h2, raw


def finish_h(plan: HPlan, points: EvalPoints, pd_part, rest_part, response: np.ndarray | None) -> dict:
    """Every statistic, per weight set (``(sets,)`` arrays): ``{"pairs": [(h2, raw)],
    "totals": [(h2, raw)]}``.  ``pd_part``: the finished PDJob partial (sums per set and
    cell, in ``plan.pd_items`` order), ``rest_part``: the finished RestJob partial (None
    without totals), ``response``: the model's response at the points."""
    e = points.weights
    S = e.shape[0]
    if pd_part.wsum <= 0:
        raise DataError("data has no rows" if pd_part.n_rows == 0 else "the sample weights sum to 0")
    wsum = np.array([pd_part.wsum]) if pd_part.set_wsum is None else np.concatenate(
        [[pd_part.wsum], pd_part.set_wsum[1:]])

    def pd_of(k: int, at: np.ndarray) -> np.ndarray:  # (sets, m): item k's PD at every point
        s = np.asarray(pd_part.sums[k], dtype="float64").reshape(S, -1)
        with np.errstate(invalid="ignore", divide="ignore"):
            return (s / wsum[:, None])[:, at]

    nf = len(plan.features)
    one = {f: _centred(pd_of(k, plan.index[f]), e) for k, f in enumerate(plan.features)}
    out = {"pairs": [], "totals": []}
    for k, (a, b) in enumerate(plan.pairs):
        fab = _centred(pd_of(nf + k, plan.pair_index[(a, b)]), e)
        out["pairs"].append(_ratio((fab - one[a] - one[b]) ** 2, fab ** 2, e))
    if plan.totals:
        F = _centred(np.broadcast_to(np.asarray(response, dtype="float64"), e.shape), e)
        for f, s in zip(plan.totals, rest_part.sums):
            with np.errstate(invalid="ignore", divide="ignore"):
                rest = _centred(np.asarray(s).reshape(S, -1) / wsum[:, None], e)
            out["totals"].append(_ratio((F - one[f] - rest) ** 2, F ** 2, e))
    return out
