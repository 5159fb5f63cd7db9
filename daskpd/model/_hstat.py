"""Friedman and Popescu's (2008) H-statistic: :func:`h_statistic` and its result.

The statistic, the evaluation points and the passes are described in
:mod:`daskpd.model._hstat_pass`; docs/model.md has the user's account.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .._engine.progress import stage_label
from .._errors import DataError, InvalidParameterError
from .._validation import validate_params
from ..plotting.interaction import plot_h_statistic
from ..results import Result
from ..results.curves import DEFAULT_BAND, repeats_note, trial_band
from ._arrays import model_read, open_model_input, resolve_columns
from ._common import class_columns, require_class, response_note
from ._hstat_pass import EvalPoints, HJob, PointsJob, RestJob, finish_h, h_plan, value_classes
from ._params import SPECS
from ._passes import Plan, Trials, run_jobs, trial_params, trial_row_id
from ._pd_engine import engine_notice, known_rows
from ._pd_pass import PDJob
from ._predictor import DEFAULT_BATCH_ROWS
from ._setup import prepare_model_run

__all__ = ["h_statistic", "HStatisticResult", "h_items", "h_points", "h_pass", "h_notice", "HPass", "DEFAULT_POINTS"]

#: the evaluation points' default number (R hstats' ``n_max``)
DEFAULT_POINTS = 500


@dataclass(repr=False)
class HStatisticResult(Result):
    """Friedman and Popescu's H² of ``pairs`` (``h2``) and each of ``features``' total
    H² (``h2_total``: its interaction with all other inputs), at ``n_points`` evaluation
    points, every PD averaged over ``n_rows`` rows.  ``h_raw`` / ``h_raw_total``: the
    unnormalised statistic, ``sqrt`` of the numerator's weighted mean (in the response's
    units).  With bootstrap trials, ``trials_h2`` ``(n_trials, len(pairs))`` and
    ``trials_h2_total`` ``(n_trials, len(features))``, and :meth:`band`."""

    pairs: list
    h2: np.ndarray
    h_raw: np.ndarray
    features: list
    h2_total: np.ndarray
    h_raw_total: np.ndarray
    kinds: dict
    n_points: int = 0
    n_rows: int = 0
    response: str = "predict"
    target_class: object = None
    params: dict = field(default_factory=dict)
    trials_h2: np.ndarray | None = None
    trials_h2_total: np.ndarray | None = None

    @property
    def n_trials(self) -> int:
        return 1 if self.trials_h2 is None else len(self.trials_h2)

    def band(self) -> dict | None:
        """``{"pairs": {"std", "lo", "hi", "n"}, "total": {...}}`` over the trials (see
        :func:`daskpd.results.curves.trial_band`), None without trials."""
        if self.trials_h2 is None:
            return None
        b = tuple(self.params.get("band", DEFAULT_BAND))
        return {"pairs": trial_band(self.trials_h2, b, center=self.h2),
                "total": trial_band(self.trials_h2_total, b, center=self.h2_total)}

    def __repr__(self) -> str:
        top = self.ranking()[:3]
        return (f"HStatisticResult(pairs={len(self.pairs)}, features={len(self.features)}, "
                f"points={self.n_points}, rows={self.n_rows}, top={[(p, round(v, 4)) for p, v in top]})")

    def ranking(self) -> list:
        """The pairs, strongest H² first (NaN last): ``[((a, b), h2), ...]``."""
        order = pd.Series(self.h2, dtype="float64").sort_values(ascending=False, kind="stable",
                                                                na_position="last").index
        return [(self.pairs[i], float(self.h2[i])) for i in order]

    def to_frame(self) -> pd.DataFrame:
        """One row per pair (strongest first), then one per feature's total H² (strongest
        first; ``feature_2`` missing): ``feature_1, feature_2, h2, h_raw, statistic``
        ("pair" | "total"), ``n_points, n_rows``, and with trials ``h2_std, h2_lo, h2_hi``."""
        b = self.band()
        frames = []
        for stat, names, h2, raw, key in (("pair", self.pairs, self.h2, self.h_raw, "pairs"),
                                          ("total", [(f, None) for f in self.features], self.h2_total,
                                           self.h_raw_total, "total")):
            n = len(names)
            cols = {"feature_1": pd.array([p[0] for p in names], dtype="string"),
                    "feature_2": pd.array([p[1] for p in names], dtype="string"),
                    "h2": np.asarray(h2, dtype="float64"), "h_raw": np.asarray(raw, dtype="float64"),
                    "statistic": pd.array([stat] * n, dtype="string"),
                    "n_points": np.full(n, self.n_points, dtype="int64"),
                    "n_rows": np.full(n, self.n_rows, dtype="int64"), **class_columns(self, n)}
            if b is not None:
                cols.update({"h2_std": b[key]["std"], "h2_lo": b[key]["lo"], "h2_hi": b[key]["hi"]})
            f = pd.DataFrame(cols)
            frames.append(f.sort_values("h2", ascending=False, kind="stable", na_position="last"))
        return pd.concat(frames, ignore_index=True)

    def matrix(self) -> pd.DataFrame:
        """The pairwise H² as a symmetric feature x feature table (NaN where a pair was
        not computed, and on the diagonal)."""
        names = list(dict.fromkeys([*(f for p in self.pairs for f in p), *self.features]))
        m = pd.DataFrame(np.nan, index=names, columns=names)
        for (a, b), v in zip(self.pairs, self.h2):
            m.loc[a, b] = m.loc[b, a] = v
        return m

    def summary(self) -> str:
        """A few lines: the points and rows, the strongest pairs and totals."""
        b = self.band()

        def fmt(v, i, key):
            s = f"{v:.3g}" if np.isfinite(v) else "nan"
            if b is not None and np.isfinite(b[key]["lo"][i]):
                s += f" [{b[key]['lo'][i]:.3g}, {b[key]['hi'][i]:.3g}]"
            return s

        lines = [f"H-statistic (Friedman & Popescu) at {self.n_points:,} points, PDs over {self.n_rows:,} rows"
                 + (f", {100 * (self.params['band'][1] - self.params['band'][0]):.0f}% band over "
                    f"{self.n_trials} trials" if b is not None else "")]
        idx = {p: i for i, p in enumerate(self.pairs)}
        top = self.ranking()[:5]
        if top:
            items = [f"{a} x {c} {fmt(v, idx[(a, c)], 'pairs')}" for (a, c), v in top]
            more = [f"(and {len(self.pairs) - len(top)} more)"] if len(self.pairs) > len(top) else []
            lines += _wrapped("  pairs H²: ", items, more)
        if self.features:
            order = np.argsort(-np.nan_to_num(self.h2_total, nan=-np.inf), kind="stable")
            lines += _wrapped("  total H²: ", [f"{self.features[i]} {fmt(self.h2_total[i], i, 'total')}"
                                               for i in order])
        return "\n".join(lines) + response_note(self) + repeats_note(self.params)

    def metadata(self) -> dict:
        return {"method": "h_statistic", "pairs": [list(p) for p in self.pairs], "features": list(self.features),
                "kinds": dict(self.kinds), "response": self.response, "target_class": self.target_class,
                "n_points": self.n_points, "n_rows": self.n_rows, "params": self.params}

    def plot(self, ax=None, **kwargs):
        return plot_h_statistic(self, ax=ax, **kwargs)


def _wrapped(head: str, items: list, tail=(), width: int = 96) -> list:
    """``head`` and ``items`` joined by commas in lines of at most ``width`` characters
    (an item is never cut), continued under the first item; ``tail`` ends the last line."""
    lines, cur = [], head
    for i, it in enumerate(items):
        piece = it + ("," if i < len(items) - 1 else "")
        if cur.strip() and cur != head and len(cur) + 1 + len(piece) > width:
            lines.append(cur)
            cur = " " * len(head) + piece
        else:
            cur += ("" if cur == head else " ") + piece
    for t in tail:
        if len(cur) + 1 + len(t) > width:
            lines.append(cur)
            cur = " " * len(head) + t
        else:
            cur += " " + t
    return lines + [cur]


# ---------------------------------------------------------------------------------
# the request


def h_items(pairs, features, model_cols: list, total: bool) -> tuple[list, list]:
    """``(pairs, totals)`` of a request, checked: ``pairs`` None (every pair of
    ``features``, default every model input), a list of pairs, or a list of names (every
    pair of them); the totals are ``features`` (default: the features of the pairs)."""
    if features is not None:
        if isinstance(features, str) or not isinstance(features, (list, tuple)) or not features \
                or not all(isinstance(f, str) for f in features):
            raise InvalidParameterError(f"parameter features must be a non-empty list of column names; got {features!r}")
        if len(set(features)) != len(features):
            raise InvalidParameterError("parameter features lists a column more than once")
    if pairs is None:
        names = list(features) if features is not None else list(model_cols)
        items = list(itertools.combinations(names, 2))
    elif isinstance(pairs, (str, tuple)) or not isinstance(pairs, list):
        raise InvalidParameterError(f"parameter pairs must be a list of pairs (a, b) or of column names; got {pairs!r}")
    elif all(isinstance(p, str) for p in pairs):
        names = list(dict.fromkeys(pairs))
        if len(names) == 1:
            raise InvalidParameterError(f"parameter pairs: an interaction needs two features; got only {names[0]!r} "
                                        "(for its interaction with all other inputs pass features=[...], pairs=[])")
        items = list(itertools.combinations(names, 2))
    elif all(isinstance(p, (tuple, list)) and len(p) == 2 and all(isinstance(c, str) for c in p) for p in pairs):
        items = [tuple(p) for p in pairs]
        bad = [p for p in items if p[0] == p[1]]
        if bad:
            raise InvalidParameterError(f"parameter pairs: a pair needs two different columns; got {bad[0]}")
        if len(set(map(frozenset, items))) != len(items):
            raise InvalidParameterError("parameter pairs lists a pair more than once")
    else:
        raise InvalidParameterError("parameter pairs: give pairs (a, b) or column names, not a mix")
    totals = [] if not total else (list(features) if features is not None
                                   else list(dict.fromkeys(f for p in items for f in p)) if pairs is not None
                                   else list(model_cols))
    if not items and not totals:
        raise DataError("no statistic to compute: an interaction needs at least two features (pairs), or total=True "
                        "with features")
    if len(model_cols) < 2:
        raise DataError(f"the model has one input column ({model_cols[0]!r}): it has no interaction")
    return items, totals


@dataclass
class HPass:
    """The H-statistic's jobs of one model pass, given its evaluation points."""

    plan: object  # _hstat_pass.HPlan
    points: EvalPoints
    job: HJob

    def finish(self, part, pred, kinds: dict, params: dict) -> HStatisticResult:
        """The result from the pass's finished :class:`HJob` partial."""
        pd_part = part.parts[0]
        rest = part.parts[1] if len(part.parts) > 1 else None
        response = pred.predict(self.points.frame) if self.plan.totals else None
        got = finish_h(self.plan, self.points, pd_part, rest, response)
        with_trials = self.points.weights.shape[0] > 1

        def col(lst, k):
            return np.array([v[k][0] for v in lst], dtype="float64")

        def trials(lst):
            if not with_trials:
                return None
            T = self.points.weights.shape[0] - 1
            return np.array([v[0][1:] for v in lst], dtype="float64").T if lst else np.zeros((T, 0))

        return HStatisticResult(self.plan.pairs, col(got["pairs"], 0), col(got["pairs"], 1), self.plan.totals,
                                col(got["totals"], 0), col(got["totals"], 1),
                                {f: kinds[f] for f in self.plan.features}, self.points.m, pd_part.n_rows,
                                pred.response, pred.target_class, params, trials(got["pairs"]),
                                trials(got["totals"]))


def h_points(run, n_points: int, random_state: int, trials) -> EvalPoints:
    """Pass 1: the evaluation points (the ``n_points`` rows of smallest keyed hash)."""
    plan1 = Plan([PointsJob(int(n_points), int(random_state))], predictor=run.predictor, weight=run.weight,
                 trials=trials)
    with stage_label(f"h_statistic: the evaluation points ({n_points:,} rows of smallest keyed hash)"):
        (pts,), _ = run_jobs(run.ddf, plan1, name="daskpd-hpoints", warn=False)
    points = EvalPoints.of(pts, run.weight, trials)
    if points.m == 0:
        raise DataError("data has no rows")
    return points


def h_pass(run, pairs: list, totals: list, points: EvalPoints) -> HPass:
    """The job of the statistics' pass at ``points`` (:func:`h_points`)."""
    pred = run.predictor
    hp = h_plan(points, pairs, totals)
    jobs = [PDJob(hp.pd_items, run.kinds)]
    if totals:
        thr = None
        if pred.tree is not None:
            thr = [value_classes(pred.tree, pred.tree.position(pred.columns.index(f))) for f in totals]
        jobs.append(RestJob(list(totals), points.frame[pred.columns].reset_index(drop=True), thr))
    return HPass(hp, points, HJob(jobs))


@validate_params(SPECS["h_statistic"])
def h_statistic(
    model,
    data,
    pairs=None,
    *,
    features=None,
    total: bool = True,
    n_points: int = DEFAULT_POINTS,
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
) -> HStatisticResult:
    """Friedman and Popescu's H-statistic: pairwise H²_jk and each feature's total H²_j.

    H²_jk is the share of the joint partial dependence of ``(x_j, x_k)`` that the sum of
    their 1-way PDs does not explain; H²_j the share of the response's variation that
    ``F_j(x_j) + F_-j(x_-j)`` does not explain (0: x_j interacts with nothing).  Both are
    evaluated at ``n_points`` rows of the data (a seeded, partition-independent sample;
    every row when there are fewer), each PD an exact average over all rows.

    Parameters
    ----------
    model, data, sample_weight, response, target_class, columns, categorical_features,
    engine, batch_rows, progress, storage_options, filters, feature_names
        As :func:`daskpd.partial_dependence` (``data`` may be a numpy or dask array;
        a multi-class classifier needs ``target_class``).
    pairs : list, optional
        Pairs ``(a, b)``, or columns (every pair of them), by name or index.  Default:
        every pair of ``features``.  ``[]``: the totals only.
    features : list of str or int, optional
        The features whose total H² is computed (and, when ``pairs`` is None, whose
        pairs are).  Default: the features of ``pairs``, or every model input.
    total : bool, default True
        Compute each feature's total H² (one more PD per feature: that of every other
        input).
    n_points : int, default 500
        Evaluation points (R ``hstats``' ``n_max``).  Brute force with ``predict``
        makes ``n_points`` predictions per row and statistic; the tree engine's cost
        barely depends on it.
    n_trials, bootstrap, subsample_size, band, random_state, row_id
        Bootstrap trials in the same pass (as :func:`daskpd.partial_dependence`):
        every PD's sums and every evaluation point get each trial's weights;
        ``to_frame()`` adds ``h2_std, h2_lo, h2_hi``.  ``random_state`` also seeds
        the evaluation sample.

    Returns
    -------
    HStatisticResult
    """
    read = model_read(storage_options, filters)  # how the input is read, built once
    mi = open_model_input(data, read=read, feature_names=feature_names, model=model,
                          sample_weight=sample_weight)  # the request's one opening
    ds, sample_weight = mi.dataset, mi.sample_weight
    require_class(model, response, target_class, "h_statistic")
    pairs, features = resolve_columns(pairs, ds, "pairs"), resolve_columns(features, ds)
    probe = prepare_model_run(model, ds, [], columns=columns, response=response, target_class=target_class,
                              engine=engine, sample_weight=sample_weight, read=read)
    model_cols = list(probe.predictor.columns)
    items, totals = h_items(pairs, features, model_cols, total)
    flat = list(dict.fromkeys([*(f for p in items for f in p), *totals]))
    ds.check(list(dict.fromkeys(f for p in items for f in p)), "parameter pairs")
    ds.check(totals, "parameter features")
    trials = Trials.of(n_trials, bootstrap, subsample_size, random_state, row_id)
    run = prepare_model_run(model, ds, flat, columns=columns, response=response, target_class=target_class,
                            engine=engine, sample_weight=sample_weight, categorical_features=categorical_features,
                            read=read, row_id=trial_row_id(trials))
    hp = h_pass(run, items, totals, h_points(run, n_points, random_state, trials))
    pred = run.predictor
    plan = Plan([hp.job], predictor=pred, weight=run.weight, batch_rows=batch_rows, trials=trials)
    notice, label = h_notice(hp, run, pred, model, filters, sets=1 if trials is None else 1 + trials.n)
    with stage_label(label):
        (part,), _ = run_jobs(run.ddf, plan, name="daskpd-hstat")
    params = {"n_points": int(n_points), "sample_weight": run.weight, "model": pred.describe(), "engine": notice,
              "random_state": int(random_state), **trial_params(trials, band, plan.repeats, plan.response_std)}
    return hp.finish(part, pred, run.kinds, params)


def h_notice(hp: HPass, run, pred, model, filters=None, sets: int = 1):
    """The engine notice of the statistics' pass (see :func:`daskpd.model._pd_engine.engine_notice`):
    every PD at the points' values, and (brute force with ``predict``) each total's
    ``F_-j``, the points predicted at every distinct value."""
    items = [it[0] for it in hp.plan.pd_items]
    cells = {it[0]: (len(it[2]) if len(it) > 2 else len(it[1][0])) for it in hp.plan.pd_items}
    if pred.tree is None:
        for f in hp.plan.totals:
            items.append((f"{f} | the rest",))
            cells[items[-1]] = hp.points.m
    return engine_notice("h_statistic", pred, items, hp.plan.grids, run.kinds, known_rows(run.dataset, filters),
                         model=model, sets=sets, cells=cells, stacklevel=5,
                         knob="n_points (each point costs one prediction per row and statistic)")
