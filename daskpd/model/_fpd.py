"""Friedman partial dependence (1-way and 2-way), brute force or tree recursion.

Brute force (Friedman 2001; scikit-learn ``method="brute"``)::

    PD_S(v) = sum_i w_i f(v, x_C^(i)) / sum_i w_i

for every grid value (or 2-way grid cell) ``v``.  Per partition the kernel returns,
per grid cell, the weighted sum of predictions and the sum of weights; the combine adds
them; the driver divides.  Every requested feature and pair is computed in the same
pass.  Predictions are made on the partition's rows stacked once per grid cell, in
batches of at most ``batch_rows`` rows (or, for scikit-learn tree models, by the tree
engine of :mod:`daskpd.model._tree_engine`, which evaluates each tree once per threshold
interval holding a grid value and gives the same numbers).

Recursion (Friedman 2001; N. Hug, "Efficient Partial Dependence Plots with decision
trees"; scikit-learn ``method="recursion"``) is delegated to the
estimator's own ``_compute_partial_dependence_recursion`` -- the function scikit-learn's
``partial_dependence`` calls -- so the numbers are scikit-learn's.  It reads no rows
(only the feature columns when the grid comes from the data) and averages over the
*training* data through the node sample fractions; see docs/model.md for when that
differs from brute force.
"""
from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np
import pandas as pd

from .._validation import NO_VALIDATION, StrOptions, validate_params
from .._errors import InvalidParameterError, SklearnDifferenceWarning
from .._errors import DataError
from ..results import CurveResult, curve_frame
from ..results.curves import DEFAULT_BAND, band_columns, band_is_flat, band_note, trial_band
from ._common import (DEFAULT_METHOD, all_classes, auto_recursion, class_columns, is_class_output, response_label,
                      response_note, warn_method)
from ._grids import build_grids, check_grid_arg
from ._passes import TRIAL_CONSTRAINTS, Plan, Trials, run_jobs, set_sums, trial_params, trial_row_id
from ._predictor import DEFAULT_BATCH_ROWS, Predictor, resolve_predictor
from ._arrays import grid_names, open_model_input, resolve_columns
from ._setup import GRID_CONSTRAINTS, MODEL_CONSTRAINTS, check_features, prepare_model_run
from ._tree_interval import TREE_CELLS
from .._engine.progress import stage_label

__all__ = ["partial_dependence", "PDResult"]


# ---------------------------------------------------------------------------------
# result


@dataclass(repr=False)
class PDResult(CurveResult):
    """Partial dependence of the model's response on one feature or a pair.

    ``grid_values``  list (one or two arrays) of the grid values of ``features``
    ``average``      PD, shape ``(len(g0),)`` or ``(len(g0), len(g1))``
    ``kinds``        "numeric" | "categorical" per feature
    """

    features: tuple
    grid_values: list
    average: np.ndarray
    kinds: tuple
    method: str
    engine: str | None = None
    response: str = "predict"
    target_class: object = None
    n_rows: int = 0
    weight_sum: float = 0.0
    params: dict = field(default_factory=dict)
    outputs: list | None = None
    individual: np.ndarray | None = None
    pd_kind: str = "average"
    trials_pd: np.ndarray | None = None  # (n_trials, *grid), (n_outputs, n_trials, *grid) with outputs

    # -- bootstrap trials and their band (n_trials > 1; the model is fixed)

    @property
    def n_trials(self) -> int:
        return 1 if self.trials_pd is None else self.trials_pd.shape[0 if self.outputs is None else 1]

    def band(self) -> dict | None:
        """``{"std", "lo", "hi", "n"}`` over the trials at every grid cell (one output;
        see :func:`daskpd.results.curves.trial_band`), None without trials."""
        if self.trials_pd is None or self.outputs is not None:
            return None
        return trial_band(self.trials_pd, tuple(self.params.get("band", DEFAULT_BAND)), center=self.average)

    def is_flat(self) -> bool:
        """Whether the curve is not distinguishable from flat (a flat line fits its
        simultaneous band: :func:`daskpd.results.curves.flat_test`; the plot then draws
        it on the scale of ``params["target_std"]`` or ``params["response_std"]``);
        False without a band."""
        return band_is_flat(self)

    # -- scikit-learn's Bunch: result["average"], result["grid_values"], result["individual"]

    @property
    def n_outputs(self) -> int:
        return 1 if self.outputs is None else len(self.outputs)

    def keys(self) -> list:
        """scikit-learn's keys for this ``kind``: ``grid_values`` and ``average`` and/or ``individual``."""
        return ["grid_values", *(["average"] if self.pd_kind in ("average", "both") else []),
                *(["individual"] if self.pd_kind in ("individual", "both") else [])]

    def __getitem__(self, key):
        """scikit-learn's shapes: ``average`` ``(n_outputs, *grid)``, ``individual``
        ``(n_outputs, n_rows, *grid)``.  (The attributes keep daskpd's shapes: ``.average``
        is ``(*grid)`` for one output.)"""
        if key not in self.keys():
            raise KeyError(f"{key!r}: this partial dependence (kind={self.pd_kind!r}) has the keys {self.keys()}"
                           + ("; the average is the attribute .average" if key == "average" else ""))
        if key == "grid_values":
            return list(self.grid_values)
        arr = self.average if key == "average" else self.individual
        return arr if self.outputs is not None else arr[np.newaxis]

    def __contains__(self, key) -> bool:
        return key in self.keys()

    def __iter__(self):
        return iter(self.keys())

    def to_bunch(self):
        """A ``sklearn.utils.Bunch`` with scikit-learn's keys and shapes (what
        ``sklearn.inspection.partial_dependence`` returns, and what
        ``PartialDependenceDisplay`` draws)."""
        from sklearn.utils import Bunch

        return Bunch(**{k: self[k] for k in self.keys()})

    def output(self, target_class) -> "PDResult":
        """The PD of one class, when the result holds every class (``outputs``)."""
        if self.outputs is None:
            if target_class is None or target_class == self.target_class:
                return self
            raise InvalidParameterError(f"parameter target_class: this result holds class {self.target_class!r} only")
        hits = [i for i, c in enumerate(self.outputs) if c == target_class]
        if not hits:
            raise InvalidParameterError(f"parameter target_class={target_class!r} is not one of {self.outputs}")
        k = hits[0]
        return replace(self, average=self.average[k], target_class=self.outputs[k], outputs=None,
                       individual=None if self.individual is None else self.individual[k],
                       trials_pd=None if self.trials_pd is None else self.trials_pd[k])

    @property
    def feature(self) -> str:
        return self.features[0] if len(self.features) == 1 else self.features

    @property
    def x(self) -> np.ndarray:
        return self.grid_values[0]

    @property
    def pd(self) -> np.ndarray:
        return self.average

    def __repr__(self) -> str:
        shape = "x".join(str(len(g)) for g in self.grid_values)
        return (f"PDResult(features={self.features}, grid={shape}, method={self.method!r}, engine={self.engine!r}, "
                f"response={self.response!r}, rows={self.n_rows})")

    @property
    def kind(self) -> str:
        return self.kinds[0]

    def curve(self) -> dict:
        """1-way: the grid and the PD.  2-way: one row per cell (row-major), the first
        feature in the head, the second in ``feature_2``, ``kind_2``, ``x_2`` | ``category_2``.
        A result holding every class stacks them, with a ``target_class`` column."""
        if self.outputs is None:
            c = self._curve(self.average, self.band())
            c["extra"].update(class_columns(self, len(c["pd"])))
            return c
        cs = [self._curve(self.average[k], self.output(self.outputs[k]).band()) for k in range(self.n_outputs)]
        extra = {k: np.concatenate([c["extra"][k] for c in cs]) for k in cs[0]["extra"]}
        labels = np.empty(sum(len(c["pd"]) for c in cs), dtype=object)
        labels[:] = [lab for lab, c in zip(self.outputs, cs) for _ in range(len(c["pd"]))]
        extra["target_class"] = labels
        return {"positions": np.concatenate([np.asarray(c["positions"], dtype=object if self.kinds[0] != "numeric"
                                                        else "float64") for c in cs]),
                "pd": np.concatenate([c["pd"] for c in cs]), "extra": extra}

    def _curve(self, average, band=None) -> dict:
        cols = {k: np.asarray(v).reshape(-1) for k, v in band_columns(band).items()}
        if len(self.features) == 1:
            return {"positions": self.grid_values[0], "pd": average, "extra": cols}
        g0, g1 = self.grid_values
        second = np.tile(np.asarray(g1, dtype="float64" if self.kinds[1] == "numeric" else object), len(g0))
        extra = {"feature_2": np.full(len(second), self.features[1], dtype=object),
                 "kind_2": np.full(len(second), self.kinds[1], dtype=object),
                 ("x_2" if self.kinds[1] == "numeric" else "category_2"): second, **cols}
        return {"positions": np.repeat(g0, len(g1)), "pd": average.reshape(-1), "extra": extra}

    def to_frame(self) -> pd.DataFrame:
        c = self.curve()
        return curve_frame(self.features[0], self.kinds[0], c["positions"], c["pd"], n_rows=self.n_rows,
                           extra=c["extra"])

    def summary(self) -> str:
        """A few lines: the grid, the range, the rows; a classifier's response (for a
        binary one, that it is the positive class); with every class, one line each."""
        if self.outputs is None:
            return super().summary() + response_note(self) + band_note(self)
        what = "categories" if self.kinds[0] == "categorical" else "positions"
        classes = is_class_output(self)
        name = self.feature if len(self.features) == 1 else " x ".join(self.features)
        lines = [f"{name}: {self.n_outputs} {'classes' if classes else 'outputs'}, one curve each "
                 f"(result.output(c) for one){f', {self.n_rows:,} rows' if self.n_rows else ''}"]
        width = max(len(self._output_label(c)) for c in self.outputs)
        for c in self.outputs:
            y = np.asarray(self.output(c).average, dtype="float64").reshape(-1)
            ok = np.isfinite(y)
            rng = f"[{np.min(y[ok]):.4g}, {np.max(y[ok]):.4g}]" if ok.any() else "[nan, nan]"
            lines.append(f"  {self._output_label(c):<{width}}  {y.size} {what}, range {rng}")
        return "\n".join(lines)

    def _output_label(self, c) -> str:
        return response_label(self.response, c) or f"output {c}"

    def metadata(self) -> dict:
        return {"method": "partial_dependence", "pd_method": self.method, "engine": self.engine,
                "features": list(self.features), "kinds": list(self.kinds), "response": self.response,
                "target_class": self.target_class, "n_rows": self.n_rows, "weight_sum": self.weight_sum,
                "kind": self.pd_kind, "outputs": self.outputs, "params": self.params}

    def plot(self, ax=None, target_class=None, **kwargs):
        """The curve (1-way) or surface (2-way).  A result holding every class draws one
        curve per class on one axes (1-way) or one panel per class (2-way, returning
        the panels); ``target_class`` draws that class alone."""
        from ..plotting.model import plot_pd

        if target_class is not None:
            return plot_pd(self.output(target_class), ax=ax, **kwargs)
        return plot_pd(self, ax=ax, **kwargs)


# ---------------------------------------------------------------------------------
# the kernels


def cell_assignments(features: Sequence[str], grids: Sequence[np.ndarray]):
    """Assignments (column, values per cell) for the cartesian grid, row-major."""
    if len(features) == 1:
        return [(features[0], np.asarray(grids[0]))], len(grids[0])
    g0, g1 = (np.asarray(g) for g in grids)
    return [(features[0], np.repeat(g0, len(g1))), (features[1], np.tile(g1, len(g0)))], len(g0) * len(g1)


def pd_results(items, grids: dict, kinds: dict, pred: Predictor, part, params: dict) -> dict:
    """``{item: PDResult}`` from a finished :class:`PDJob` partial (brute), or by tree
    recursion when ``part`` is None."""
    results = {}
    if part is None:
        for it in items:
            avg = recursion_average(pred, it, [grids[f] for f in it])
            results[it] = PDResult(features=it, grid_values=[grids[f] for f in it], average=avg,
                                   kinds=tuple(kinds[f] for f in it), method="recursion", engine=None,
                                   response=pred.response, target_class=pred.target_class, params=params)
        return results
    if part.wsum <= 0:
        raise DataError("data has no rows" if part.n_rows == 0 else "the sample weights sum to 0")
    for it, s in zip(items, part.sums):
        gs = [grids[f] for f in it]
        eng = engine_of(pred, it, kinds, need_rows=part.rows is not None,
                        sets=1 if part.set_wsum is None else len(part.set_wsum))
        shape = [len(g) for g in gs]
        trials = None
        if part.set_wsum is not None:  # bootstrap trials: one row of sums per weight set
            with np.errstate(invalid="ignore", divide="ignore"):
                trials = (s[1:] / part.set_wsum[1:, None]).reshape([len(s) - 1, *shape])
            s = s[0]
        results[it] = PDResult(features=it, grid_values=gs, average=(s / part.wsum).reshape(shape),
                               kinds=tuple(kinds[f] for f in it), method="brute", engine=eng,
                               response=pred.response, target_class=pred.target_class, n_rows=part.n_rows,
                               weight_sum=part.wsum, params=params, trials_pd=trials)
    return results


def use_tree(pred: Predictor, features, kinds) -> bool:
    """Does a tree engine (exact or interval) compute this PD?"""
    return pred.tree is not None


def engine_of(pred: Predictor, features, kinds, need_rows: bool = False, sets: int = 1) -> str:
    """The engine computing a PD of ``features``: ``"tree-exact"`` (leaf weights, FastPD),
    ``"tree-interval"`` (per row, each tree once per class of grid values) or ``"predict"``
    (the model called on stacked copies).  ``sets``: the weight sets (1 + bootstrap trials)
    the exact engine's per-node weights would hold."""
    if not use_tree(pred, features, kinds):
        return "predict"
    if need_rows or pred.tree.exact is None:
        return "tree-interval"
    if sets > 1 and pred.tree.flat().n_nodes * sets * (1 << len(features)) > EXACT_SET_CELLS:
        return "tree-interval"
    return "tree-exact"


#: per-node weights (nodes x walk states x weight sets) held by one partition's tree-exact
#: walk with bootstrap trials; a larger forest's trials run on the per-row engine
EXACT_SET_CELLS = 1 << 25


#: rows x grid cells predicted by brute force with ``predict`` above which a warning advises
SLOW_PREDICTIONS = 10 ** 8

_ENGINE_WORDS = {
    "tree-exact": "one tree walk per row and tree, the cells from per-leaf weights",
    "tree-interval": "per row, each tree once per class of grid values taking the same branches",
    "predict": "the model called on every row at every grid cell",
}


def known_rows(dataset, filters=None) -> int | None:
    """The number of rows when known without reading the data (pandas input, or a
    parquet lake's footers without filters), else None."""
    if dataset is None:
        return None
    if dataset.is_pandas:
        return int(len(dataset.frame))
    if dataset.lake is not None and not filters:
        try:
            return int(dataset.lake.num_rows)
        except (AttributeError, TypeError, ValueError):
            return None
    return None


def _item_name(it) -> str:
    return it[0] if len(it) == 1 else f"{it[0]} x {it[1]}"


def engine_notice(who: str, pred: Predictor, items, grids: dict, kinds: dict, n_rows: int | None, *,
                  need_rows: bool = False, model=None, stacklevel: int = 4, sets: int = 1, cells: dict | None = None,
                  knob: str = "grid_resolution (the cost grows with the grid cells)"):
    """Which engine computes each PD item and what it costs, before the pass: ``(params,
    label)`` -- a dict for the result's params and a one-line label for the progress
    lines -- and a UserWarning with advice when brute force with ``predict`` has more
    than :data:`SLOW_PREDICTIONS` rows x grid cells to predict.  ``cells`` ({item: number
    of cells}): items evaluated at given points, not on the cartesian grid; ``knob``: the
    parameter the advice says to reduce."""
    per = {}
    for it in items:
        n_cells = int(np.prod([len(grids[f]) for f in it])) if cells is None else int(cells[it])
        per[_item_name(it)] = (engine_of(pred, it, kinds, need_rows, sets), n_cells)
    total = sum(c for _, c in per.values())
    slow = sum(c for e, c in per.values() if e == "predict")
    engines = list(dict.fromkeys(e for e, _ in per.values()))
    calls = None if n_rows is None else n_rows * total
    params = {"engine": engines[0] if len(engines) == 1 else engines, "rows": n_rows, "grid_cells": total,
              "rows_x_cells": calls, "model_calls": None if n_rows is None else n_rows * slow,
              "per_item": {k: {"engine": e, "grid_cells": c} for k, (e, c) in per.items()}}
    rows = f"{n_rows:,} rows" if n_rows is not None else "rows not known before reading"
    if calls is None:
        cost = f"{total:,} predictions per row for brute force with predict"
    elif slow == total:
        cost = f"{calls:.1e} predicted rows"
    elif not slow:
        cost = f"no model calls, brute force with predict would predict {calls:.1e} rows"
    else:
        cost = f"{calls:.1e} predicted rows for brute force with predict, {n_rows * slow:.1e} here"
    label = (f"{who}: engine {'/'.join(engines)} - {'; '.join(_ENGINE_WORDS[e] for e in engines)} - "
             f"{rows} x {total:,} grid cells, {cost}")
    if slow and n_rows is not None and n_rows * slow > SLOW_PREDICTIONS:
        warnings.warn(f"{who}: brute force calls the model on {n_rows * slow:.1e} rows ({n_rows:,} rows x {slow:,} "
                      "grid cells). " + _advice(pred, model, knob), UserWarning, stacklevel=stacklevel)
    return params, label


def _advice(pred: Predictor, model, knob: str = "grid_resolution (the cost grows with the grid cells)") -> str:
    """Why the tree engine is not used, and what to do."""
    model = pred.model if model is None else model
    tips = []
    steps = getattr(model, "steps", None)
    if steps:
        last = steps[-1][1]
        if type(last).__module__.startswith("sklearn.") and any(k in type(last).__name__ for k in (
                "Tree", "Forest", "GradientBoosting")):
            tips.append(f"the tree engine reads a scikit-learn tree model directly, not a {type(model).__name__}: "
                        f"for a {type(last).__name__} pass the fitted estimator itself (a HistGradientBoosting "
                        "model handles categorical columns on its own: categorical_features='from_dtype'), or the "
                        "final step with the data transformed by the earlier steps")
    elif pred.tree is None and pred.method != "call" and any(k in type(model).__name__ for k in (
            "Tree", "Forest", "GradientBoosting")):
        tips.append("engine='auto' uses the tree engine for this model (unless engine='predict' was passed)")
    tips.append(f"reduce {knob}, or pass a sample of the rows")
    return "To make it faster: " + "; ".join(tips) + "."


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


# ---------------------------------------------------------------------------------
# recursion


def _recursion_supported(model) -> bool:
    from sklearn.ensemble import RandomForestRegressor
    from sklearn.ensemble._gb import BaseGradientBoosting
    from sklearn.ensemble._hist_gradient_boosting.gradient_boosting import BaseHistGradientBoosting
    from sklearn.tree import DecisionTreeRegressor

    return isinstance(model, (BaseGradientBoosting, BaseHistGradientBoosting, DecisionTreeRegressor,
                              RandomForestRegressor))


def recursion_average(pred: Predictor, features, grids) -> np.ndarray:
    from sklearn.utils.extmath import cartesian

    model = pred.model
    idx = np.asarray([pred.columns.index(f) for f in features], dtype=np.intp)
    grid = cartesian([np.asarray(g, dtype="float64") for g in grids])
    try:
        avg = model._compute_partial_dependence_recursion(grid, idx)
    except NotImplementedError as exc:
        raise DataError(f"method='recursion' is not available for this model: {exc}") from None
    avg = np.asarray(avg, dtype="float64")
    if avg.ndim == 1:
        avg = avg.reshape(1, -1)
    if pred.kind == "classifier" and len(pred.classes) > 2:
        row = pred.column
    else:
        row = 0
    out = avg[row]
    if pred.negate:
        out = -out
    return out.reshape([len(g) for g in grids])


# ---------------------------------------------------------------------------------
# the public function


def resolve_pd_method(method, pred: Predictor, kinds, items, weight) -> str:
    """``method`` (brute / recursion / auto) checked against the model, weights and kinds: brute or recursion."""
    """Resolve method='auto' and check method='recursion' is applicable."""
    feats = {f for it in items for f in it}
    if method == "auto":
        ok = (weight is None and pred.method != "call" and auto_recursion(pred.model)
              and (pred.kind == "regressor" or pred.method == "decision_function")
              and all(kinds[f] == "numeric" for f in feats))
        return "recursion" if ok else "brute"
    if method == "recursion":
        if pred.method == "call" or not _recursion_supported(pred.model):
            raise DataError("method='recursion' needs one of scikit-learn's GradientBoostingClassifier/Regressor, "
                            "HistGradientBoostingClassifier/Regressor, DecisionTreeRegressor or "
                            f"RandomForestRegressor; got {type(pred.model).__name__}. Use method='brute'.")
        if weight is not None:
            raise DataError("method='recursion' averages over the training data and cannot use sample_weight; "
                            "use method='brute'")
        if pred.kind == "classifier" and pred.method != "decision_function":
            raise DataError("with method='recursion' a classifier's response is its decision function; pass "
                            "response='decision_function' (or use method='brute' for probabilities)")
        cats = [f for f in feats if kinds[f] != "numeric"]
        if cats:
            raise DataError(f"method='recursion' supports numeric features only; {cats} are categorical")
    return method


class PDResults(dict):
    """``{feature or pair: PDResult}``, what a list of features gives.  Asking it for a
    scikit-learn key (``"average"``, ...) raises a KeyError that says which entry to take."""

    def __missing__(self, key):
        if key in ("average", "individual", "grid_values"):
            raise KeyError(f"{key!r}: features was a list, so this is a dict {{feature or pair: PDResult}} with keys "
                           f"{list(self)}; take one first, e.g. result[{next(iter(self))!r}][{key!r}] (or pass one "
                           "feature, or one pair, for one result)")
        raise KeyError(key)


KINDS = ("average", "individual", "both")


def _warn_features(features, items, single) -> None:
    """scikit-learn reads a list of names as ONE multi-way PD; daskpd as one PD each."""
    if single or not isinstance(features, (list, tuple)) or len(features) < 2:
        return
    if not all(isinstance(f, str) for f in features):
        return
    names = list(features)
    other = (f"pass {tuple(names)!r} (or [{tuple(names)!r}])" if len(names) == 2
             else "pass the pairs you want, e.g. [" + repr(tuple(names[:2])) + "] (daskpd computes 1- and 2-way PDs)")
    warnings.warn(
        f"partial_dependence: features={names!r} gives {len(names)} 1-way partial dependences here, a dict "
        f"{{feature: PDResult}}; scikit-learn's partial_dependence reads the same list as ONE {len(names)}-way "
        f"partial dependence. For the {len(names)}-way reading {other}; to keep the 1-way reading without this "
        f"warning pass {[(n,) for n in names]!r}.", SklearnDifferenceWarning, stacklevel=4)


@validate_params({
    **MODEL_CONSTRAINTS,
    **GRID_CONSTRAINTS,
    "features": NO_VALIDATION,  # check_features: names, pairs and lists of them, against the data
    "method": [StrOptions("brute", "recursion", "auto")],
    "kind": [StrOptions(*KINDS)],
    **TRIAL_CONSTRAINTS,
})
def partial_dependence(
    model,
    data,
    features,
    *,
    kind: str = "average",
    grid_resolution: int = 100,
    percentiles=(0.05, 0.95),
    grid=None,
    method: str = DEFAULT_METHOD,
    sample_weight=None,
    response: str = "auto",
    target_class=None,
    columns=None,
    categorical_features=None,
    engine: str = "auto",
    batch_rows: int = DEFAULT_BATCH_ROWS,
    progress=None,
    storage_options=None,
    filters=None,
    n_trials: int = 1,
    bootstrap: bool = True,
    subsample_size: float = 0.75,
    band=(0.05, 0.95),
    random_state: int = 0,
    row_id=None,
    feature_names=None,
):
    """Friedman partial dependence of a fitted model, computed over all rows of ``data``.

    Parameters
    ----------
    model : fitted model or function
        An object with ``predict`` / ``predict_proba`` / ``decision_function`` (e.g. a
        scikit-learn estimator or pipeline), or a function ``f(DataFrame) -> array``.
    data : pandas DataFrame, dask DataFrame, numpy or dask array, or parquet path / glob / directory / URL
        The rows to average over (scikit-learn's ``X``).  Only the model's input
        columns (and the weight column) are read.  An array's columns are named by
        ``feature_names`` (else the model's ``feature_names_in_``, else ``x0, x1, ...``).
    features : str or int, pair of them, or list of them and pairs
        A feature (1-way PD), a tuple ``(a, b)`` (2-way PD), or a list of them; all are
        computed in one pass over the data.  A feature is a column name or a column
        index (``0`` is data's first column, as in scikit-learn).  **A list is one
        1-way PD per entry** (scikit-learn reads ``["x1", "x2"]`` as one 2-way PD;
        daskpd warns, see docs/model.md); ``("x1",)`` is an explicit 1-way entry.
    kind : {"average", "individual", "both"}, default "average"
        scikit-learn's ``kind``: ``individual`` keeps every row's curve (ICE, all rows,
        in data order: the driver holds rows x grid cells numbers -- small data only; for
        a sample of curves on big data use :func:`daskpd.ice`); it needs brute force.
    grid_resolution : int, default 100
        Grid size for a numeric feature with at least this many distinct values; a
        feature with fewer distinct values uses them all (scikit-learn's rule).
    percentiles : (float, float), default (0.05, 0.95)
        The grid spans these percentiles (``scipy.stats.mstats.mquantiles``, computed
        exactly over all rows).
    grid : dict {feature: values} or array, optional
        Custom grid values (an array is accepted when a single feature is requested);
        overrides ``grid_resolution`` and ``percentiles`` for that feature.  A key is
        a column name or index.  (scikit-learn's ``custom_values``.)
    method : {"brute", "recursion", "auto"}, default "brute"
        ``brute`` averages the predictions over ``data``; ``recursion`` delegates to
        scikit-learn's tree recursion (averages over the training data; tree models
        only; classifiers give the decision function); ``auto`` picks recursion where
        scikit-learn's ``method="auto"`` would and the response allows it.  The default
        differs from scikit-learn's (``"auto"``): a
        :class:`~daskpd.SklearnDifferenceWarning` says so when scikit-learn would have
        used recursion.
    sample_weight : str or array, optional
        Name of a weight column (or, for pandas data, one weight per row): weighted
        average of the predictions (brute only; the individual curves are unweighted).
    response : {"auto", "predict", "predict_proba", "decision_function"}
        ``auto``: ``predict_proba`` for classifiers, ``predict`` otherwise.
        (scikit-learn's ``response_method``.)
    target_class : optional
        Class whose probability/decision is explained (default: the positive class
        ``classes_[1]`` of a binary classifier; for a multi-class classifier, every class,
        as in scikit-learn: ``average`` then has one row per class, see ``outputs``).
        For a model without ``classes_`` returning a 2-D array: the column index (a
        multi-output regressor without it gives every output, as scikit-learn).
    columns : list of str, optional
        The model's input columns in order; needed only when the model has no
        ``feature_names_in_`` and ``data`` has other columns.
    categorical_features : list of str or int, or boolean mask, optional
        Numeric columns to treat as categorical (grid = their distinct values), by name,
        index, or a mask of one entry per column (scikit-learn's forms).  Non-numeric
        columns are categorical anyway.
    engine : {"auto", "tree", "predict"}, default "auto"
        Brute-force engine: ``tree`` walks scikit-learn tree models interval by
        interval (same numbers as ``predict``, much faster); ``auto`` uses it when the
        model and features allow; ``predict`` always calls the model on stacked copies.
    batch_rows : int, default 1,048,576
        Maximum rows (rows x grid cells) per model call.
    progress : bool or None
        Progress on stderr: None/True (default): a bar on a terminal, one line per
        stage (tasks done, elapsed time; no carriage returns) in a log or pipe;
        "bar" / "log" force a form; False: nothing.
    storage_options, filters
        Passed to ``dask.dataframe.read_parquet`` for path inputs.
    n_trials : int, default 1
        T > 1: T bootstrap trials in the same pass (every row's predictions summed with
        T+1 weight sets; weights from a seeded row hash, so reproducible and
        independent of partitioning); the result carries ``trials_pd`` and a band
        (``band()``, ``to_frame()``'s ``pd_std, pd_lo, pd_hi``).  The model is fixed:
        the band is the variability of the average over the rows (as H2O's
        ``plot_stddev``), not of the model.  Brute force only.
    bootstrap, subsample_size : default True, 0.75
        Poisson(1) bootstrap weights, or (False) 0/1 subsamples of that fraction.
    band : (float, float), default (0.05, 0.95)
        The percentiles of the trials the band spans.
    random_state : int, default 0
        Seeds the trial weights.
    row_id : str or list of str, optional
        With ``n_trials`` > 1: columns that tell rows apart (an identifier, a
        timestamp), hashed into the trial weights besides the model's inputs, so that
        rows with the same inputs draw their own weights.  Without it such rows draw
        the same weights and the band is about ``sqrt(params["row_repeats"])`` times a
        row bootstrap's (a ``RepeatedRowsWarning`` says so).
    feature_names : list of str, optional
        The names of an array's columns (scikit-learn's ``feature_names``); with a
        table it may only repeat the table's own column names.

    Returns
    -------
    PDResult, or a dict ``{feature or pair: PDResult}`` when ``features`` is a list.
    A PDResult is also scikit-learn's Bunch: ``result["average"]`` (shape
    ``(n_outputs, *grid)``), ``result["grid_values"]``, ``result["individual"]``
    (``(n_outputs, n_rows, *grid)``), ``result.keys()``, ``result.to_bunch()``; its
    attributes keep daskpd's shapes (``result.average`` is ``(*grid)`` for one output).
    """
    trials = Trials.of(n_trials, bootstrap, subsample_size, random_state, row_id)
    if trials is not None and method == "recursion":
        raise InvalidParameterError("partial_dependence: n_trials > 1 re-weights the rows of data; "
                                    "method='recursion' reads no rows. Use method='brute'")
    if kind != "average" and method == "recursion":
        raise InvalidParameterError(f"partial_dependence: kind={kind!r} needs every row's predictions; "
                                    "method='recursion' gives only the average. Use method='brute' (or 'auto')")
    mi = open_model_input(data, feature_names=feature_names, model=model, sample_weight=sample_weight,
                          storage_options=storage_options, filters=filters)  # the request's one opening
    ds, sample_weight = mi.dataset, mi.sample_weight
    features = resolve_columns(features, ds)
    items, single = check_features(features, ds, allow_pairs=True)
    _warn_features(features, items, single)
    flat = list(dict.fromkeys(f for it in items for f in it))
    grid = check_grid_arg(grid_names(grid, ds), flat)
    classes = all_classes(model, response, target_class)
    run = prepare_model_run(model, ds, flat, columns=columns, response=response,
                            target_class=classes[0] if classes else target_class,
                            engine=engine, sample_weight=sample_weight, categorical_features=categorical_features,
                            storage_options=storage_options, filters=filters, row_id=trial_row_id(trials))
    pred = run.predictor
    warn_method(method, pred, run.weight, kind)
    method = "brute" if kind != "average" else resolve_pd_method(method, pred, run.kinds, items, run.weight)
    if trials is not None:
        method = "brute"  # "auto" resolves to brute: trials re-weight the rows
    preds = [pred]
    if classes:
        preds += [resolve_predictor(model, pred.columns, run.dtypes, columns=columns, response=response,
                                    target_class=c, engine=engine) for c in classes[1:]]
    grids = build_grids(run.ddf[flat] if method == "recursion" else run.ddf, flat, run.kinds,
                        grid_resolution=grid_resolution, percentiles=percentiles, grid=grid, progress=progress)
    params = {"grid_resolution": grid_resolution, "percentiles": list(percentiles), "custom_grid": sorted(grid),
              "sample_weight": run.weight, "model": pred.describe(), "kind": kind, **trial_params(trials, band)}
    parts = [None] * len(preds)
    if method == "brute":
        job_items = [(it, [grids[f] for f in it]) for it in items]
        jobs = [PDJob(job_items, run.kinds, individual=kind != "average") for _ in preds]
        job = jobs[0] if len(preds) == 1 else OutputsJob(jobs, preds)
        plan = Plan([job], predictor=pred, weight=run.weight, batch_rows=batch_rows, trials=trials)
        notice, label = engine_notice("partial_dependence", pred, items, grids, run.kinds,
                                      known_rows(run.dataset, filters),
                                      need_rows=kind != "average", model=model,
                                      sets=1 if trials is None else 1 + trials.n)
        params["engine"] = notice
        with stage_label(label):
            (part,), _ = run_jobs(run.ddf, plan, progress=progress, name="daskpd-pd", rows=known_rows(run.dataset))
        # the response's spread: of the one output drawn (every class at once has no band to flatten)
        params.update(trial_params(trials, band, plan.repeats, plan.response_std if len(preds) == 1 else None))
        parts = [part] if len(preds) == 1 else part.parts
    per_output = []
    for p, part in zip(preds, parts):
        res = pd_results(items, grids, run.kinds, p, part, params)
        for i, it in enumerate(items):
            res[it].pd_kind = kind
            if part is not None and part.rows is not None:
                res[it].individual = part.rows[i].reshape([part.n_rows, *[len(grids[f]) for f in it]])
        per_output.append(res)
    results = per_output[0]
    if classes:
        results = {it: replace(r, average=np.stack([o[it].average for o in per_output]), target_class=None,
                               outputs=classes,
                               individual=None if r.individual is None else
                               np.stack([o[it].individual for o in per_output]),
                               trials_pd=None if r.trials_pd is None else
                               np.stack([o[it].trials_pd for o in per_output]))
                   for it, r in results.items()}
    if single:
        return results[items[0]]
    return PDResults({(it[0] if len(it) == 1 else it): r for it, r in results.items()})
