"""Which brute-force engine computes a PD item (tree-exact, tree-interval or predict;
:func:`engine_of`), and the notice of what a pass costs before it runs (:func:`engine_notice`).
"""
from __future__ import annotations

import warnings

import numpy as np

from ._predictor import Predictor

__all__ = ["use_tree", "engine_of", "engine_notice", "known_rows", "EXACT_SET_CELLS", "SLOW_PREDICTIONS"]


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
