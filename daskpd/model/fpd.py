"""Friedman partial dependence (1-way and 2-way), brute force or tree recursion.

Brute force (Friedman 2001; scikit-learn ``method="brute"``)::

    PD_S(v) = sum_i w_i f(v, x_C^(i)) / sum_i w_i

for every grid value (or 2-way grid cell) ``v``.  Per partition the kernel returns,
per grid cell, the weighted sum of predictions and the sum of weights; the combine adds
them; the driver divides.  Every requested feature and pair is computed in the same
pass.  Predictions are made on the partition's rows stacked once per grid cell, in
batches of at most ``batch_rows`` rows (or, for scikit-learn tree models, by the tree
engine of :mod:`daskpd.model.tree_engine`, which evaluates each tree once per threshold
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

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

from .._validation import NO_VALIDATION, StrOptions, validate_params
from ..io import DataError
from ..results import CurveResult, curve_frame
from .grids import build_grids, check_grid_arg
from .passes import Plan, run_jobs
from .predictor import DEFAULT_BATCH_ROWS, Predictor
from .setup import GRID_CONSTRAINTS, MODEL_CONSTRAINTS, check_features, open_model_data, prepare_model_run
from .tree_engine import TREE_CELLS

__all__ = ["partial_dependence", "PDResult", "PDJob", "cell_assignments", "curves_matrix", "curve_sums",
           "use_tree", "pd_results", "resolve_pd_method", "recursion_average"]


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
        feature in the head, the second in ``feature_2``, ``kind_2``, ``x_2`` | ``category_2``."""
        if len(self.features) == 1:
            return {"positions": self.grid_values[0], "pd": self.average, "extra": {}}
        g0, g1 = self.grid_values
        second = np.tile(np.asarray(g1, dtype="float64" if self.kinds[1] == "numeric" else object), len(g0))
        extra = {"feature_2": np.full(len(second), self.features[1], dtype=object),
                 "kind_2": np.full(len(second), self.kinds[1], dtype=object),
                 ("x_2" if self.kinds[1] == "numeric" else "category_2"): second}
        return {"positions": np.repeat(g0, len(g1)), "pd": self.average.reshape(-1), "extra": extra}

    def to_frame(self) -> pd.DataFrame:
        c = self.curve()
        return curve_frame(self.features[0], self.kinds[0], c["positions"], c["pd"], n_rows=self.n_rows,
                           extra=c["extra"])

    def metadata(self) -> dict:
        return {"method": "partial_dependence", "pd_method": self.method, "engine": self.engine,
                "features": list(self.features), "kinds": list(self.kinds), "response": self.response,
                "target_class": self.target_class, "n_rows": self.n_rows, "weight_sum": self.weight_sum,
                "params": self.params}

    def plot(self, ax=None, **kwargs):
        from ..plotting.model import plot_pd

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
        eng = "tree" if use_tree(pred, it, kinds) else "predict"
        results[it] = PDResult(features=it, grid_values=gs, average=(s / part.wsum).reshape([len(g) for g in gs]),
                               kinds=tuple(kinds[f] for f in it), method="brute", engine=eng,
                               response=pred.response, target_class=pred.target_class, n_rows=part.n_rows,
                               weight_sum=part.wsum, params=params)
    return results


def use_tree(pred: Predictor, features, kinds) -> bool:
    return pred.tree is not None and all(kinds[f] == "numeric" for f in features)


def curves_matrix(ctx, features, grids, kinds, r0: int, r1: int) -> np.ndarray:
    """Responses of rows ``r0:r1`` at every grid cell: shape ``(cells, rows)`` (cells flattened)."""
    pred = ctx.plan.predictor
    if use_tree(pred, features, kinds):
        targets = [pred.columns.index(f) for f in features]
        R = pred.tree.curves(ctx.X64()[r0:r1], targets, [np.asarray(g, dtype="float64") for g in grids], None,
                             need_rows=True)
        return R.reshape(-1, r1 - r0)
    assignments, n_cells = cell_assignments(features, grids)
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


def curve_sums(ctx, features, grids, kinds) -> np.ndarray:
    """Weighted sums over the partition's rows of the response at every grid cell (flat)."""
    pred = ctx.plan.predictor
    n = ctx.n
    n_cells = int(np.prod([len(g) for g in grids]))
    w = ctx.weights
    if n == 0:
        return np.zeros(n_cells)
    if use_tree(pred, features, kinds) and pred.tree.linear:
        targets = [pred.columns.index(f) for f in features]
        gs = [np.asarray(g, dtype="float64") for g in grids]
        X = ctx.X64()
        step = max(1, TREE_CELLS // max(1, X.shape[1]))  # bounds the engine's working copy of X
        out = np.zeros(n_cells)
        for r0 in range(0, n, step):
            r1 = min(n, r0 + step)
            out += pred.tree.curves(X[r0:r1], targets, gs, None if w is None else w[r0:r1],
                                    need_rows=False).reshape(-1)
        return out
    out = np.zeros(n_cells)
    step = row_chunk(ctx, n_cells)
    for r0 in range(0, n, step):
        r1 = min(n, r0 + step)
        R = curves_matrix(ctx, features, grids, kinds, r0, r1)
        out += R @ w[r0:r1] if w is not None else R.sum(axis=1)
    return out


@dataclass
class _PDPartial:
    sums: list
    wsum: float
    n_rows: int

    @classmethod
    def combine(cls, parts):
        return cls([np.sum([p.sums[i] for p in parts], axis=0) for i in range(len(parts[0].sums))],
                   float(sum(p.wsum for p in parts)), int(sum(p.n_rows for p in parts)))


@dataclass
class PDJob:
    items: list  # list of (features tuple, grids list)
    kinds: dict

    def map(self, ctx):
        sums = [curve_sums(ctx, feats, grids, self.kinds) for feats, grids in self.items]
        return _PDPartial(sums, ctx.wsum(), ctx.n)


# ---------------------------------------------------------------------------------
# recursion


def _recursion_supported(model) -> bool:
    from sklearn.ensemble import RandomForestRegressor
    from sklearn.ensemble._gb import BaseGradientBoosting
    from sklearn.ensemble._hist_gradient_boosting.gradient_boosting import BaseHistGradientBoosting
    from sklearn.tree import DecisionTreeRegressor

    return isinstance(model, (BaseGradientBoosting, BaseHistGradientBoosting, DecisionTreeRegressor,
                              RandomForestRegressor))


def _auto_recursion(model) -> bool:
    """scikit-learn's rule for method='auto'."""
    from sklearn.ensemble import RandomForestRegressor
    from sklearn.ensemble._gb import BaseGradientBoosting
    from sklearn.ensemble._hist_gradient_boosting.gradient_boosting import BaseHistGradientBoosting
    from sklearn.tree import DecisionTreeRegressor

    if isinstance(model, BaseGradientBoosting):
        return model.init is None
    return isinstance(model, (BaseHistGradientBoosting, DecisionTreeRegressor, RandomForestRegressor))


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
        ok = (weight is None and pred.method != "call" and _auto_recursion(pred.model)
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


@validate_params({
    **MODEL_CONSTRAINTS,
    **GRID_CONSTRAINTS,
    "features": NO_VALIDATION,  # check_features: names, pairs and lists of them, against the data
    "method": [StrOptions("brute", "recursion", "auto")],
})
def partial_dependence(
    model,
    data,
    features,
    *,
    grid_resolution: int = 100,
    percentiles=(0.05, 0.95),
    grid=None,
    method: str = "brute",
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
):
    """Friedman partial dependence of a fitted model, computed over all rows of ``data``.

    Parameters
    ----------
    model : fitted model or function
        An object with ``predict`` / ``predict_proba`` / ``decision_function`` (e.g. a
        scikit-learn estimator or pipeline), or a function ``f(DataFrame) -> array``.
    data : pandas DataFrame, dask DataFrame, or parquet path / glob / directory / URL
        The rows to average over.  Only the model's input columns (and the weight
        column) are read.
    features : str, pair of str, or list of str and pairs
        A feature (1-way PD), a tuple ``(a, b)`` (2-way PD), or a list of them; all are
        computed in one pass over the data.
    grid_resolution : int, default 100
        Grid size for a numeric feature with at least this many distinct values; a
        feature with fewer distinct values uses them all (scikit-learn's rule).
    percentiles : (float, float), default (0.05, 0.95)
        The grid spans these percentiles (``scipy.stats.mstats.mquantiles``, computed
        exactly over all rows).
    grid : dict {feature: values} or array, optional
        Custom grid values (an array is accepted when a single feature is requested);
        overrides ``grid_resolution`` and ``percentiles`` for that feature.
    method : {"brute", "recursion", "auto"}, default "brute"
        ``brute`` averages the predictions over ``data``; ``recursion`` delegates to
        scikit-learn's tree recursion (averages over the training data; tree models
        only; classifiers give the decision function); ``auto`` picks recursion where
        scikit-learn's ``method="auto"`` would and the response allows it.
    sample_weight : str or array, optional
        Name of a weight column (or, for pandas data, one weight per row): weighted
        average of the predictions (brute only).
    response : {"auto", "predict", "predict_proba", "decision_function"}
        ``auto``: ``predict_proba`` for classifiers, ``predict`` otherwise.
    target_class : optional
        Class whose probability/decision is explained (default: the positive class
        ``classes_[1]`` of a binary classifier; required for multiclass).  For a model
        without ``classes_`` returning a 2-D array: the column index.
    columns : list of str, optional
        The model's input columns in order; needed only when the model has no
        ``feature_names_in_`` and ``data`` has other columns.
    categorical_features : list of str, optional
        Numeric columns to treat as categorical (grid = their distinct values).
        Non-numeric columns are categorical anyway.
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

    Returns
    -------
    PDResult, or a dict ``{feature or pair: PDResult}`` when ``features`` is a list.
    """
    ds = open_model_data(data, storage_options, filters)  # the request's one opening
    items, single = check_features(features, ds, allow_pairs=True)
    flat = list(dict.fromkeys(f for it in items for f in it))
    grid = check_grid_arg(grid, flat)
    run = prepare_model_run(model, ds, flat, columns=columns, response=response, target_class=target_class,
                            engine=engine, sample_weight=sample_weight, categorical_features=categorical_features,
                            storage_options=storage_options, filters=filters)
    pred = run.predictor
    method = resolve_pd_method(method, pred, run.kinds, items, run.weight)
    grids = build_grids(run.ddf[flat] if method == "recursion" else run.ddf, flat, run.kinds,
                        grid_resolution=grid_resolution, percentiles=percentiles, grid=grid, progress=progress)
    params = {"grid_resolution": grid_resolution, "percentiles": list(percentiles), "custom_grid": sorted(grid),
              "sample_weight": run.weight, "model": pred.describe()}
    part = None
    if method == "brute":
        job_items = [(it, [grids[f] for f in it]) for it in items]
        plan = Plan([PDJob(job_items, run.kinds)], predictor=pred, weight=run.weight, batch_rows=batch_rows)
        (part,), _ = run_jobs(run.ddf, plan, progress=progress, name="daskpd-pd")
    results = pd_results(items, grids, run.kinds, pred, part, params)
    if single:
        return results[items[0]]
    return {(it[0] if len(it) == 1 else it): r for it, r in results.items()}
