"""Brute-force partial dependence in the pass: per partition, per grid cell, the weighted
sums of the responses (the model called on stacked copies, or a tree engine), merged by
addition (:class:`PDJob`; :class:`OutputsJob` for every class of a model in one pass).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from ._passes import Plan, set_sums
from ._pd_engine import EXACT_SET_CELLS, engine_of, use_tree
from ._predictor import Predictor
from ._tree_interval import TREE_CELLS

__all__ = ["PDJob", "OutputsJob", "curves_matrix", "curve_sums", "row_chunk", "grid_cells", "item_points"]


def cell_assignments(features: Sequence[str], grids: Sequence[np.ndarray]):
    """Assignments (column, values per cell) for the cartesian grid, row-major."""
    if len(features) == 1:
        return [(features[0], np.asarray(grids[0]))], len(grids[0])
    g0, g1 = (np.asarray(g) for g in grids)
    return [(features[0], np.repeat(g0, len(g1))), (features[1], np.tile(g1, len(g0)))], len(g0) * len(g1)


def tree_targets(pred: Predictor, features, grids):
    """The trees' feature indices of ``features`` and their grids as the trees read them."""
    js = [pred.columns.index(f) for f in features]
    return [pred.tree.position(j) for j in js], [pred.tree.grid_codes(j, g) for j, g in zip(js, grids)]


def grid_cells(grids, points=None) -> np.ndarray:
    """The cartesian grid, row-major (the first feature slowest), one column per feature;
    or, with ``points`` (``(cells, features)`` indices into the grids), those cells."""
    if points is not None:
        pts = np.asarray(points, dtype=np.intp).reshape(len(points), len(grids))
        return np.stack([np.asarray(g, dtype="float64")[pts[:, d]] for d, g in enumerate(grids)], axis=1)
    if len(grids) == 1:
        return np.asarray(grids[0], dtype="float64").reshape(-1, 1)
    mesh = np.meshgrid(*[np.asarray(g, dtype="float64") for g in grids], indexing="ij")
    return np.stack([m.reshape(-1) for m in mesh], axis=1)


def n_cells_of(grids, points=None) -> int:
    """The cells of a PD item: its cartesian grid's, or its ``points``'."""
    return int(np.prod([len(g) for g in grids])) if points is None else len(points)


def curves_matrix(ctx, features, grids, kinds, r0: int, r1: int, points=None) -> np.ndarray:
    """Responses of rows ``r0:r1`` at every grid cell: shape ``(cells, rows)`` (cells
    flattened; with ``points``, the cells are those points: see :func:`grid_cells`)."""
    pred = ctx.plan.predictor
    if use_tree(pred, features, kinds):
        targets, codes = tree_targets(pred, features, grids)
        R = pred.tree.curves(ctx.tree_X()[r0:r1], targets, codes, None, need_rows=True, points=points)
        return R.reshape(-1, r1 - r0)
    if points is None:
        assignments, n_cells = cell_assignments(features, grids)
    else:
        pts = np.asarray(points, dtype=np.intp).reshape(len(points), len(features))
        assignments = [(f, np.asarray(g)[pts[:, d]]) for d, (f, g) in enumerate(zip(features, grids))]
        n_cells = len(pts)
    base = ctx.inputs()
    base = base.iloc[r0:r1] if pred.as_frame else base[r0:r1]
    return pred.predict_copies(base, assignments, n_cells, ctx.plan.batch_rows)


def row_chunk(ctx, n_cells: int) -> int:
    pred = ctx.plan.predictor
    if pred.tree is not None:
        per = max(1, TREE_CELLS // max(1, n_cells * pred.tree.n_channels))
    else:
        per = max(1, ctx.plan.batch_rows // max(1, n_cells))
    return per


def curve_sums(ctx, features, grids, kinds, rows: list | None = None, points=None) -> np.ndarray:
    """Weighted sums over the partition's rows of the response at every grid cell (flat;
    with ``points``, at those cells only).  With a list ``rows``, each row's curve is
    appended to it too (``(rows, cells)`` blocks, in row order): scikit-learn's
    ``individual``."""
    pred = ctx.plan.predictor
    n = ctx.n
    n_cells = n_cells_of(grids, points)
    w = ctx.weights
    if ctx.n_sets > 1:  # bootstrap trials: the rows' curves summed with every weight set
        out = np.zeros((ctx.n_sets, n_cells))
        W = ctx.set_weights()
        step = row_chunk(ctx, n_cells)
        for r0 in range(0, n, step):
            r1 = min(n, r0 + step)
            R = curves_matrix(ctx, features, grids, kinds, r0, r1, points)
            out += set_sums(R, W[r0:r1])
            if rows is not None:
                rows.append(R.T.copy())
        return out
    if n == 0:
        return np.zeros(n_cells)
    if use_tree(pred, features, kinds) and pred.tree.linear and rows is None:
        targets, gs = tree_targets(pred, features, grids)
        X = ctx.tree_X()
        step = max(1, TREE_CELLS // max(1, X.shape[1]))  # bounds the engine's working copy of X
        out = np.zeros(n_cells)
        for r0 in range(0, n, step):
            r1 = min(n, r0 + step)
            out += pred.tree.curves(X[r0:r1], targets, gs, None if w is None else w[r0:r1],
                                    need_rows=False, points=points).reshape(-1)
        return out
    out = np.zeros(n_cells)
    step = row_chunk(ctx, n_cells)
    for r0 in range(0, n, step):
        r1 = min(n, r0 + step)
        R = curves_matrix(ctx, features, grids, kinds, r0, r1, points)
        out += R @ w[r0:r1] if w is not None else R.sum(axis=1)
        if rows is not None:
            rows.append(R.T.copy())
    return out


#: above this many tree nodes (per item) a partition evaluates its grid cells itself and
#: ships the cell sums, not the per-node weights (deep forests: the cells are fewer)
SHIP_NODES = 1 << 16


def exact_weights(ctx, items):
    """tree-exact on one partition for PD ``items`` (``(features, grids)`` or
    ``(features, grids, points)`` each), in one
    walk of every row through every tree (several walks only when the per-node weights of
    all items at once would exceed :data:`EXACT_SET_CELLS`): per item the per-node
    weights ``W_S`` (nodes, weight sets) -- or, for very large forests, the cell sums
    directly (then ``(None, sums)``)."""
    pred = ctx.plan.predictor
    flat = pred.tree.flat()
    C = ctx.set_counts()  # the trials' counts as they are drawn, when the sets' weights are just those
    W = ctx.set_weights() if C is None else None
    S = ctx.n_sets
    targets = [tree_targets(pred, it[0], it[1]) for it in items]
    groups, cur, size = [], [], 0
    for k, (feats, *_) in enumerate(items):
        add = flat.n_nodes * S * (1 << len(feats))
        if cur and size + add > EXACT_SET_CELLS:
            groups.append(cur)
            cur, size = [], 0
        cur.append(k)
        size += add
    groups.append(cur)
    Ws = [None] * len(items)
    X = ctx.tree_X() if ctx.n else None
    for g in groups:
        if ctx.n:
            got = flat.leaf_weight_sets(X, [tuple(targets[k][0]) for k in g], W, counts=C)
        else:
            got = [np.zeros((flat.n_nodes, S)) for _ in g]
        for k, Wk in zip(g, got):
            Ws[k] = Wk
    wsum = [ctx.wsum(), *ctx.set_wsum()[1:]]
    out = []
    for k in range(len(items)):
        t, codes = targets[k]
        cells = grid_cells(codes, item_points(items[k]))
        if flat.n_nodes > max(SHIP_NODES, cells.shape[0]):
            out.append((None, flat.cell_sums(Ws[k], wsum, t, cells)))
        else:
            out.append((Ws[k], None))
    return out


def item_points(item):
    """A PD item's ``points`` (None: its cartesian grid); items are ``(features, grids)``
    or ``(features, grids, points)``."""
    return item[2] if len(item) > 2 else None


@dataclass
class _PDPartial:
    sums: list
    wsum: float
    n_rows: int
    rows: list | None = None  # per item, every row's curve (rows, cells), in data order
    set_wsum: np.ndarray | None = None  # with trials: the weight of every set (sums are then (sets, cells))
    leaves: list | None = None  # per item, tree-exact's per-node weights W_S (else None), until finish

    @classmethod
    def combine(cls, parts):
        rows = None
        if parts[0].rows is not None:
            rows = [np.concatenate([p.rows[i] for p in parts], axis=0) for i in range(len(parts[0].rows))]
        set_wsum = None if parts[0].set_wsum is None else np.sum([p.set_wsum for p in parts], axis=0)
        leaves = None
        if parts[0].leaves is not None:
            leaves = [None if parts[0].leaves[i] is None else np.sum([p.leaves[i] for p in parts], axis=0)
                      for i in range(len(parts[0].leaves))]
        return cls([np.sum([p.sums[i] for p in parts], axis=0) for i in range(len(parts[0].sums))],
                   float(sum(p.wsum for p in parts)), int(sum(p.n_rows for p in parts)), rows, set_wsum, leaves)


@dataclass
class PDJob:
    items: list  # list of (features tuple, grids list) or (features, grids, points): :func:`item_points`
    kinds: dict
    individual: bool = False  # also keep every row's curve (scikit-learn's kind="individual")

    def map(self, ctx):
        pred = ctx.plan.predictor
        set_wsum = ctx.set_wsum() if ctx.n_sets > 1 else None
        if not self.individual:
            sets = ctx.n_sets
            exact = [k for k, it in enumerate(self.items)
                     if engine_of(pred, it[0], self.kinds, sets=sets) == "tree-exact"]
            got = dict(zip(exact, exact_weights(ctx, [self.items[k] for k in exact]))) if exact else {}
            sums, leaves = [], []
            for k, it in enumerate(self.items):
                feats, grids, points = it[0], it[1], item_points(it)
                if k in got:
                    W, s = got[k]
                    if s is None:
                        s = np.zeros((sets, n_cells_of(grids, points)))
                    sums.append(s if set_wsum is not None else s[0])
                    leaves.append(W)
                else:
                    sums.append(curve_sums(ctx, feats, grids, self.kinds, points=points))
                    leaves.append(None)
            return _PDPartial(sums, ctx.wsum(), ctx.n, None, set_wsum,
                              leaves if any(x is not None for x in leaves) else None)
        sums, rows = [], []
        for feats, grids in self.items:
            blocks = []
            sums.append(curve_sums(ctx, feats, grids, self.kinds, blocks))
            cells = int(np.prod([len(g) for g in grids]))
            rows.append(np.concatenate(blocks, axis=0) if blocks else np.empty((0, cells)))
        return _PDPartial(sums, ctx.wsum(), ctx.n, rows, set_wsum)

    def finish_plan(self, merged, plan):
        """tree-exact's finalize: every grid cell from the merged per-node weights."""
        if merged.leaves is None:
            return merged
        pred = plan.predictor
        flat = pred.tree.flat()
        sums = list(merged.sums)
        for i, (it, W) in enumerate(zip(self.items, merged.leaves)):
            if W is None:  # another engine, or cells summed per partition
                continue
            targets, codes = tree_targets(pred, it[0], it[1])
            wsum = [merged.wsum] if merged.set_wsum is None else [merged.wsum, *merged.set_wsum[1:]]
            s = flat.cell_sums(W, wsum, targets, grid_cells(codes, item_points(it)))
            sums[i] = s if merged.set_wsum is not None else s[0]
        return replace(merged, sums=sums, leaves=None)


@dataclass
class _OutputsPartial:
    parts: list

    @classmethod
    def combine(cls, parts):
        return cls([type(ps[0]).combine(list(ps)) for ps in zip(*(p.parts for p in parts))])


@dataclass
class OutputsJob:
    """One job per output (each class of a multi-class model), each with its own
    predictor, in the same pass: the partition is read and decoded once."""

    jobs: list
    predictors: list

    def map(self, ctx):
        parts = []
        for job, pred in zip(self.jobs, self.predictors):
            sub = copy.copy(ctx)
            sub.plan = Plan([], predictor=pred, weight=ctx.plan.weight, batch_rows=ctx.plan.batch_rows,
                            trials=ctx.plan.trials)
            parts.append(job.map(sub))
            ctx.__dict__.update({k: v for k, v in sub.__dict__.items() if k != "plan"})  # the decoded inputs
        return _OutputsPartial(parts)

    def finish_plan(self, merged, plan):
        return _OutputsPartial([job.finish_plan(part, Plan([], predictor=pred, weight=plan.weight,
                                                          batch_rows=plan.batch_rows))
                                for job, pred, part in zip(self.jobs, self.predictors, merged.parts)])
