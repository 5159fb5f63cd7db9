"""PD variance: feature importance and interaction from partial dependence
(Greenwell, Boehmke & McCarthy 2018).

Importance of feature ``x_1`` with 1-way PD values ``f_1(x_11) .. f_1(x_1k)`` on its grid::

    i(x_1) = sqrt( 1/(k-1) * sum_i (f_1(x_1i) - mean_j f_1(x_1j))^2 )   (numeric: sample std, ddof=1)
    i(x_1) = (max_i f_1(x_1i) - min_i f_1(x_1i)) / 4                  (categorical: range / 4)

Interaction of ``(x_i, x_j)`` from the 2-way PD ``f_ij`` on the grid ``k_i x k_j``: hold
``x_i`` at each of its grid values and take the importance of ``x_j`` along the other
axis (std, or range/4 when ``x_j`` is categorical); the standard deviation (ddof=1) of
those ``k_i`` numbers is ``i(x_j | x_i)``.  Likewise ``i(x_i | x_j)``.  The interaction
is their mean::

    interaction(i, j) = ( SD_i[ imp_j(f_ij(x_i, .)) ] + SD_j[ imp_i(f_ij(., x_j)) ] ) / 2

(For numeric pairs this is exactly alibi's ``PartialDependenceVariance``; for a
categorical conditioning feature alibi takes range/4 in the outer step too, we follow
Greenwell et al.'s text, which takes the standard deviation.)

All 1-way or 2-way PDs are computed in ONE pass (brute force, over all rows).

With ``n_trials`` = T > 1 the same pass also sums every row's curve with T bootstrap
weight sets (the model fixed; see :func:`daskpd.partial_dependence`): each trial's PDs
give the trial's importances (interactions), whose standard deviation and percentile
interval are the ``*_std``, ``*_lo``, ``*_hi`` columns of ``to_frame()``.  The
default grid spans the full range (``percentiles=(0, 1)``), so that a linear model
``b * x`` with ``x ~ U(0, 1)`` has importance ``|b| / sqrt(12)`` up to the grid's
discretisation (``sqrt((k+1)/(k-1))``, +1% at k=100) and sampling error.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .._engine.progress import stage_label
from .._errors import DataError, InvalidParameterError
from .._validation import validate_params
from ..plotting.model import plot_pd_variance
from ..results import Result, table_frame
from ..results.curves import DEFAULT_BAND, trial_band
from ._arrays import model_read, open_model_input, resolve_columns
from ._common import class_columns, require_class
from ._grids import GridOptions, build_grids
from ._params import SPECS
from ._passes import Plan, Trials, run_jobs, trial_params, trial_row_id
from ._pd_engine import engine_notice, known_rows
from ._pd_pass import PDJob
from ._pd_result import pd_results
from ._predictor import DEFAULT_BATCH_ROWS
from ._setup import prepare_model_run

__all__ = ["pd_variance", "PDVarianceResult"]


def importance_of(values: np.ndarray, kind: str, axis: int = -1) -> np.ndarray:
    """Greenwell's flatness measure along ``axis``: std (ddof=1), or range/4 for categoricals."""
    values = np.asarray(values, dtype="float64")
    if kind == "categorical":
        return (np.max(values, axis=axis) - np.min(values, axis=axis)) / 4
    return np.std(values, axis=axis, ddof=1)


def interaction_of(pd2: np.ndarray, kinds: tuple[str, str]):
    """``(interaction, (i(x_j|x_i), i(x_i|x_j)), (cond_j_given_i, cond_i_given_j))`` for a 2-way PD."""
    cond_j = importance_of(pd2, kinds[1], axis=1)  # importance of x_j at each x_i
    cond_i = importance_of(pd2, kinds[0], axis=0)  # importance of x_i at each x_j
    a = float(np.std(cond_j, ddof=1))
    b = float(np.std(cond_i, ddof=1))
    return (a + b) / 2, (a, b), (cond_j, cond_i)


@dataclass(repr=False)
class PDVarianceResult(Result):
    """``method`` "importance": ``features`` (names) and ``values`` (importances);
    "interaction": ``features`` (pairs), ``values`` (interactions), ``conditional``
    (per pair: ``(i(x_j|x_i), i(x_i|x_j))``) and ``conditional_values`` (per pair: the
    two curves of conditional importances).  ``pd`` maps each feature / pair to its
    :class:`PDResult` (for the detailed plots).  With bootstrap trials, ``trials_values``
    (``(n_trials, len(features))``: every trial's importances or interactions) and
    :meth:`band`."""

    method: str
    features: list
    values: np.ndarray
    pd: dict
    conditional: list | None = None
    conditional_values: list | None = None
    response: str = "predict"
    target_class: object = None
    n_rows: int = 0
    params: dict = field(default_factory=dict)
    trials_values: np.ndarray | None = None  # (n_trials, len(features)) with bootstrap trials

    @property
    def n_trials(self) -> int:
        return 1 if self.trials_values is None else len(self.trials_values)

    def band(self) -> dict | None:
        """``{"std", "lo", "hi", "n"}`` per feature (pair) over the trials' values (see
        :func:`daskpd.results.curves.trial_band`), None without trials."""
        if self.trials_values is None:
            return None
        return trial_band(self.trials_values, tuple(self.params.get("band", DEFAULT_BAND)), center=self.values)

    def _band_columns(self, name: str) -> dict:
        b = self.band()
        if b is None:
            return {}
        return {f"{name}_std": b["std"], f"{name}_lo": b["lo"], f"{name}_hi": b["hi"]}

    def __repr__(self) -> str:
        top = self.ranking()[:3]
        return (f"PDVarianceResult(method={self.method!r}, n={len(self.features)}, "
                f"top={[(f, round(v, 4)) for f, v in top]})")

    def ranking(self) -> list:
        order = np.argsort(-self.values, kind="stable")
        return [(self.features[i], float(self.values[i])) for i in order]

    def to_frame(self) -> pd.DataFrame:
        """"importance": the importance table head (feature, kind, importance, rank) and
        ``n_rows``, most important first; "interaction": one row per pair, strongest first."""
        if self.method == "importance":
            kinds = [self.pd[f].kinds[0] for f in self.features]
            frame = table_frame(self.features, kinds, self.values,
                                {"n_rows": np.full(len(self.features), self.n_rows, dtype="int64"),
                                 **self._band_columns("importance"), **class_columns(self, len(self.features))})
            return frame.sort_values("rank", kind="stable").reset_index(drop=True)
        frame = pd.DataFrame({
            "feature_1": [p[0] for p in self.features], "feature_2": [p[1] for p in self.features],
            "interaction": self.values,
            "importance_2_given_1": [c[0] for c in self.conditional],
            "importance_1_given_2": [c[1] for c in self.conditional],
            **self._band_columns("interaction"), **class_columns(self, len(self.features)),
        })
        order = frame["interaction"].sort_values(ascending=False, kind="stable", na_position="last").index
        return frame.loc[order].reset_index(drop=True)

    def metadata(self) -> dict:
        return {"method": "pd_variance", "kind": self.method, "response": self.response,
                "target_class": self.target_class, "n_rows": self.n_rows, "params": self.params}

    def plot(self, ax=None, kind: str = "summary", **kwargs):
        return plot_pd_variance(self, ax=ax, kind=kind, **kwargs)


@validate_params(SPECS["pd_variance"])
def pd_variance(
    model,
    data,
    features=None,
    *,
    measure: str = "importance",
    grid_resolution: int | None = None,
    percentiles=(0.05, 0.95),
    grid=None,
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
) -> PDVarianceResult:
    """Feature importance or pairwise interaction from the variance of partial dependence.

    Parameters
    ----------
    model, data, sample_weight, response, target_class, columns, categorical_features,
    engine, batch_rows, progress, storage_options, filters, feature_names
        As :func:`daskpd.partial_dependence` (``data`` may be a numpy or dask array).
    features : list, optional
        ``measure="importance"``: features, by name or index (default: every model
        input column).  ``measure="interaction"``: pairs ``(a, b)``, or features (every
        pair of them is used); default: every pair of model input columns.
    measure : {"importance", "interaction"}, default "importance"
        What is measured: each feature's importance (the variance of its 1-way PD) or
        each pair's interaction.  (``method`` is :func:`daskpd.partial_dependence`'s
        brute / recursion.)
    grid_resolution : int, optional
        Grid size per numeric feature; default 100 for importance, 20 for interaction
        (a 2-way PD costs ``grid_resolution**2`` predictions per row).
    percentiles : (float, float), default (0.05, 0.95)
        Grid range, as :func:`daskpd.partial_dependence` (scikit-learn's default);
        ``(0, 1)`` spans the full range (alibi's).
    grid : dict {feature: values}, optional
        Custom grids.
    n_trials, bootstrap, subsample_size, band, random_state, row_id
        T > 1 bootstrap trials in the same pass (as :func:`daskpd.partial_dependence`;
        the model and the grids are fixed): ``trials_values`` holds every trial's
        importances (interactions) and ``to_frame()`` adds ``importance_std``,
        ``importance_lo``, ``importance_hi`` (``interaction_*``): their standard
        deviation (ddof=1) and ``band`` percentiles over the trials.

    Returns
    -------
    PDVarianceResult
    """
    if grid_resolution is None:
        grid_resolution = 100 if measure == "importance" else 20
    read = model_read(storage_options, filters)  # how the input is read, built once
    mi = open_model_input(data, read=read, feature_names=feature_names, model=model,
                          sample_weight=sample_weight)  # the request's one opening
    ds, sample_weight = mi.dataset, mi.sample_weight
    require_class(model, response, target_class, "pd_variance")
    features = resolve_columns(features, ds)
    # the model's columns first (features default to them)
    probe = prepare_model_run(model, ds, [], columns=columns, response=response, target_class=target_class,
                              engine=engine, sample_weight=sample_weight, categorical_features=None, read=read)
    model_cols = probe.predictor.columns
    if features is None:
        names = list(model_cols)
        items = [(f,) for f in names] if measure == "importance" else list(itertools.combinations(names, 2))
    else:
        if isinstance(features, (str, tuple)) or not isinstance(features, list) or not features:
            raise InvalidParameterError(f"parameter features must be a non-empty list; got {features!r}")
        if measure == "importance":
            if not all(isinstance(f, str) for f in features):
                raise InvalidParameterError("parameter features: with measure='importance' every entry must be a column name")
            items = [(f,) for f in features]
        elif all(isinstance(f, str) for f in features):
            items = list(itertools.combinations(list(dict.fromkeys(features)), 2))
        elif all(isinstance(f, (tuple, list)) and len(f) == 2 and all(isinstance(c, str) for c in f)
                 for f in features):
            items = [tuple(f) for f in features]
            bad = [p for p in items if p[0] == p[1]]
            if bad:
                raise InvalidParameterError(f"parameter features: a pair needs two different columns; got {bad[0]}")
        else:
            raise InvalidParameterError("parameter features: with measure='interaction' give pairs (a, b) or column names")
    if not items:
        raise DataError("no features to compute (an interaction needs at least two features)")
    if len(set(items)) != len(items):
        raise InvalidParameterError("parameter features lists an entry more than once")
    flat = list(dict.fromkeys(f for it in items for f in it))
    ds.check(flat, "parameter features")
    grid_options = GridOptions.of(grid_resolution, percentiles, grid, flat, ds, caller="pd_variance")
    trials = Trials.of(n_trials, bootstrap, subsample_size, random_state, row_id)
    run = prepare_model_run(model, ds, flat, columns=columns, response=response, target_class=target_class,
                            engine=engine, sample_weight=sample_weight, categorical_features=categorical_features,
                            read=read, row_id=trial_row_id(trials))
    grids, _ = build_grids(run.ddf, flat, run.kinds, grid_options)
    for f in flat:
        if len(grids[f]) < 2:
            raise DataError(f"feature {f!r} has a single grid value (a constant column); its PD variance is undefined")
    job_items = [(it, [grids[f] for f in it]) for it in items]
    pred = run.predictor
    plan = Plan([PDJob(job_items, run.kinds)], predictor=pred, weight=run.weight, batch_rows=batch_rows,
                trials=trials)
    notice, label = engine_notice("pd_variance", pred, items, grids, run.kinds, known_rows(run.dataset, filters),
                                  need_rows=trials is not None, model=model)
    with stage_label(label):
        (part,), _ = run_jobs(run.ddf, plan, name="daskpd-pdvar",
                              rows=known_rows(run.dataset, filters))
    params = {**grid_options.params(), "sample_weight": run.weight, "model": pred.describe(),
              "custom_grid": sorted(grid_options.grid), "engine": notice,
              **trial_params(trials, band, plan.repeats, plan.response_std)}
    return finish_pd_variance(measure, items, pd_results(items, grids, run.kinds, pred, part, params), run.kinds,
                              pred, part.n_rows, params)


def finish_pd_variance(method: str, items, results: dict, kinds: dict, pred, n_rows: int,
                       params: dict) -> PDVarianceResult:
    """The importances (or interactions) of ``items`` from their PD results ``{item: PDResult}``."""
    pds = {(it if len(it) == 2 else it[0]): r for it, r in results.items()}
    with_trials = all(r.trials_pd is not None for r in pds.values())
    if method == "importance":
        feats = [it[0] for it in items]
        vals = np.array([float(importance_of(pds[f].average, kinds[f])) for f in feats])
        tv = (np.column_stack([importance_of(pds[f].trials_pd, kinds[f], axis=-1) for f in feats])
              if with_trials else None)
        return PDVarianceResult("importance", feats, vals, pds, response=pred.response,
                                target_class=pred.target_class, n_rows=n_rows, params=params, trials_values=tv)
    vals, cond, cond_vals = [], [], []
    for it in items:
        v, ab, cv = interaction_of(pds[it].average, (kinds[it[0]], kinds[it[1]]))
        vals.append(v)
        cond.append(ab)
        cond_vals.append(cv)
    tv = None
    if with_trials:  # every trial's interactions, from the trial's 2-way PDs
        tv = np.array([[interaction_of(pds[it].trials_pd[t], (kinds[it[0]], kinds[it[1]]))[0] for it in items]
                       for t in range(len(pds[items[0]].trials_pd))])
    return PDVarianceResult("interaction", list(items), np.array(vals), pds, cond, cond_vals,
                            response=pred.response, target_class=pred.target_class, n_rows=n_rows,
                            params=params, trials_values=tv)
