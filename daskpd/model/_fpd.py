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

This module holds the public function; the result is :mod:`daskpd.model._pd_result`, the
brute-force pass :mod:`daskpd.model._pd_pass` (its engine chosen by
:mod:`daskpd.model._pd_engine`), recursion :mod:`daskpd.model._pd_recursion`.
"""
from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np

from .._validation import validate_params
from .._errors import InvalidParameterError, SklearnDifferenceWarning
from ._common import DEFAULT_METHOD, all_classes, warn_method
from ._grids import GridOptions, build_grids, feature_quantiles
from ._pd_engine import engine_notice, known_rows
from ._pd_pass import OutputsJob, PDJob
from ._pd_recursion import resolve_pd_method
from ._pd_result import pd_results
from ._passes import Plan, Trials, run_jobs, trial_params, trial_row_id
from ._predictor import DEFAULT_BATCH_ROWS, resolve_predictor
from ._arrays import model_read, open_model_input, resolve_columns
from ._setup import check_features, prepare_model_run
from ._params import SPECS, check_trials_method
from .._engine.progress import stage_label

__all__ = ["partial_dependence", "PDResults"]


class PDResults(dict):
    """``{feature or pair: PDResult}``, what a list of features gives.  Asking it for a
    scikit-learn key (``"average"``, ...) raises a KeyError that says which entry to take."""

    def __missing__(self, key):
        if key in ("average", "individual", "grid_values"):
            raise KeyError(f"{key!r}: features was a list, so this is a dict {{feature or pair: PDResult}} with keys "
                           f"{list(self)}; take one first, e.g. result[{next(iter(self))!r}][{key!r}] (or pass one "
                           "feature, or one pair, for one result)")
        raise KeyError(key)


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


@validate_params(SPECS["partial_dependence"])
def partial_dependence(
    model,
    data,
    features,
    *,
    kind: str = "average",
    grid_resolution: int = 100,
    percentiles=(0.05, 0.95),
    grid=None,
    quantiles=None,
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
    quantiles : list of float, optional
        Probabilities (e.g. ``numpy.arange(0.1, 1.0, 0.1)``, the deciles a plot marks):
        each numeric feature's ``scipy.stats.mstats.mquantiles`` at them, exact over all
        rows, from the grid's passes (as :func:`daskpd.model_curves`'), in each result's
        ``quantiles`` (``{feature: values}``).
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
        "bar" / "log" force a form; False: nothing.  None in a call made inside
        another daskpd call (a job's) keeps that call's setting.
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
    check_trials_method("partial_dependence", n_trials, method)
    if kind != "average" and method == "recursion":
        raise InvalidParameterError(f"partial_dependence: kind={kind!r} needs every row's predictions; "
                                    "method='recursion' gives only the average. Use method='brute' (or 'auto')")
    read = model_read(storage_options, filters)  # how the input is read, built once
    mi = open_model_input(data, read=read, feature_names=feature_names, model=model,
                          sample_weight=sample_weight)  # the request's one opening
    ds, sample_weight = mi.dataset, mi.sample_weight
    features = resolve_columns(features, ds)
    items, single = check_features(features, ds, allow_pairs=True)
    _warn_features(features, items, single)
    flat = list(dict.fromkeys(f for it in items for f in it))
    grid_options = GridOptions.of(grid_resolution, percentiles, grid, flat, ds, quantiles,
                                  caller="partial_dependence")
    classes = all_classes(model, response, target_class)
    run = prepare_model_run(model, ds, flat, columns=columns, response=response,
                            target_class=classes[0] if classes else target_class,
                            engine=engine, sample_weight=sample_weight, categorical_features=categorical_features,
                            read=read, row_id=trial_row_id(trials))
    pred = run.predictor
    warn_method(method, pred, run.weight, kind)
    method = "brute" if kind != "average" else resolve_pd_method(method, pred, run.kinds, items, run.weight)
    if trials is not None:
        method = "brute"  # "auto" resolves to brute: trials re-weight the rows
    preds = [pred]
    if classes:
        preds += [resolve_predictor(model, pred.columns, run.dtypes, columns=columns, response=response,
                                    target_class=c, engine=engine) for c in classes[1:]]
    grids, qs = build_grids(run.ddf[flat] if method == "recursion" else run.ddf, flat, run.kinds, grid_options)
    params = {**grid_options.params(), "custom_grid": sorted(grid_options.grid), "sample_weight": run.weight,
              "model": pred.describe(), "kind": kind, **trial_params(trials, band)}
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
            (part,), _ = run_jobs(run.ddf, plan, name="daskpd-pd", rows=known_rows(run.dataset))
        # the response's spread: of the one output drawn (every class at once has no band to flatten)
        params.update(trial_params(trials, band, plan.repeats, plan.response_std if len(preds) == 1 else None))
        parts = [part] if len(preds) == 1 else part.parts
    per_output = []
    for p, part in zip(preds, parts):
        res = pd_results(items, grids, run.kinds, p, part, params)
        for i, it in enumerate(items):
            res[it].pd_kind = kind
            res[it].quantiles = feature_quantiles(qs, it)
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
