"""Accumulated local effects (Apley & Zhu 2020), distributed over partitions.

Numeric feature (as the authors' R package ALEPlot, which PyALE follows):

1. edges ``z_0 = min(x)``, ``z_k`` = type-1 (inverse-ECDF) quantile of ``x`` at ``k/K``,
   ``k = 1..K``, duplicates removed (so discrete features keep their values);
   computed exactly over all rows;
2. a row with ``x`` in bin ``k`` = ``(z_{k-1}, z_k]`` (the first bin also holds
   ``z_0``) gives the local effect ``f(z_k, x_C) - f(z_{k-1}, x_C)``;
3. ``Delta_k`` = (weighted) mean local effect in bin ``k``; ``f(z_0) = 0``,
   ``f(z_k) = sum_{j<=k} Delta_j``;
4. centring: subtract ``sum_k w_k (f(z_{k-1}) + f(z_k)) / 2 / sum_k w_k`` (the mean of
   the effect over the rows, each bin's effect taken at its midpoint), so the curve
   has mean zero over the data.

Categorical feature: the levels are first *ordered* (as ALEPlot / PyALE do) by a 1-D
classical multidimensional scaling of the distance between levels, summed over the
model's other input columns: the Kolmogorov-Smirnov distance between the level's
distributions of a numeric column (its ECDFs compared at 100 quantiles of the column),
and half the L1 distance between the level's frequency tables of a categorical column.
An ordered pandas categorical keeps its own order; ``order=`` sets it explicitly.  Then
with ordered levels ``L_0 .. L_{K-1}``: rows at level ``k < K-1`` give
``f(L_{k+1}) - f(L_k)`` and rows at level ``k > 0`` give ``f(L_k) - f(L_{k-1})``, both
to the boundary between the two levels; ``Delta_k`` is their (weighted) mean,
``f(L_0) = 0``, accumulate, and centre by the level frequencies.

The edges and the level orders are built in :mod:`daskpd.model._ale_specs`.  Per
partition the kernel returns, per bin (boundary), the weight, mean and sum of
squared deviations of the local effects (merged exactly by Chan et al.'s formula), and
the level weights; the driver accumulates and centres.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .._data.encode import as_float
from .._engine.plan import merge_keyed, sum_fields
from .._errors import DataError, InvalidParameterError
from .._validation import validate_params
from ..plotting.model import plot_ale
from ..results import CurveResult
from ..results.curves import DEFAULT_BAND, band_columns, band_is_flat, band_note, trial_band
from ._ale2d import ALE2DJob, ALE2DSpec, finish_ale2d
from ._ale_specs import ALESpec, ale_specs, check_order
from ._arrays import model_read, open_model_input
from ._common import ROW_COUNTS, BinStats, class_columns, input_rows, level_codes, require_class, response_note
from ._params import SPECS
from ._passes import Plan, Trials, run_jobs, trial_bin_sums, trial_params, trial_row_id
from ._predictor import DEFAULT_BATCH_ROWS
from ._setup import check_features, prepare_model_run

__all__ = ["ale", "ALEResult"]


# ---------------------------------------------------------------------------------
# result


@dataclass(repr=False)
class ALEResult(CurveResult):
    """ALE of ``feature``.

    Numeric: ``x`` are the bin edges ``z_0..z_K`` and ``ale`` the centred effect there;
    ``count``/``weight`` hold the rows/weight of the bin ending at each edge (0 at
    ``z_0``); ``delta``/``delta_std`` the mean and standard deviation of the local
    effects of that bin.  Categorical: ``x`` are the ordered levels, ``ale`` the
    centred effect of each level, ``count``/``weight`` per level, ``delta``/``delta_std``
    per boundary to the previous level (NaN at the first).
    """

    feature: str
    kind: str
    x: np.ndarray
    ale: np.ndarray
    count: np.ndarray
    weight: np.ndarray
    delta: np.ndarray
    delta_std: np.ndarray
    response: str = "predict"
    target_class: object = None
    n_rows: int = 0
    n_used: int = 0
    n_missing: int = 0
    n_outside: int = 0
    order_source: str | None = None
    params: dict = field(default_factory=dict)
    trials_pd: np.ndarray | None = None  # (n_trials, len(x)): the centred ALE of every bootstrap trial

    @property
    def pd(self) -> np.ndarray:
        return self.ale

    @property
    def n_trials(self) -> int:
        return 1 if self.trials_pd is None else len(self.trials_pd)

    def band(self) -> dict | None:
        """``{"std", "lo", "hi", "n"}`` over the trials at every edge (level), None
        without trials (see :func:`daskpd.results.curves.trial_band`).  The bins and the
        model are fixed; each trial re-weights the rows' local effects and the centring."""
        if self.trials_pd is None:
            return None
        return trial_band(self.trials_pd, tuple(self.params.get("band", DEFAULT_BAND)), center=self.ale)

    def is_flat(self) -> bool:
        """Whether the curve is not distinguishable from flat (a flat line fits its
        simultaneous band: :func:`daskpd.results.curves.flat_test`; the plot then draws
        it on the scale of ``params["target_std"]`` or ``params["response_std"]``);
        False without a band."""
        return band_is_flat(self)

    def summary(self) -> str:
        return super().summary() + response_note(self) + band_note(self)

    def __repr__(self) -> str:
        what = "edges" if self.kind == "numeric" else "levels"
        return (f"ALEResult(feature={self.feature!r}, kind={self.kind!r}, {what}={len(self.x)}, rows={self.n_rows}, "
                f"used={self.n_used})")

    def curve(self) -> dict:
        """``pd`` is the ALE; ``count``/``weight``/``delta``/``delta_std`` as above."""
        return {"positions": self.x, "pd": self.ale, "count": self.count.astype("int64"),
                "extra": {"weight": self.weight, "delta": self.delta, "delta_std": self.delta_std,
                          **band_columns(self.band()), **class_columns(self, len(self.x))}}

    def metadata(self) -> dict:
        return {"method": "ale", "feature": self.feature, "kind": self.kind, "response": self.response,
                "target_class": self.target_class, "n_rows": self.n_rows, "n_used": self.n_used,
                "n_missing": self.n_missing, "n_outside": self.n_outside, "order_source": self.order_source,
                "levels": [str(v) for v in self.x] if self.kind == "categorical" else None, "params": self.params}

    def plot(self, ax=None, **kwargs):
        return plot_ale(self, ax=ax, **kwargs)


# ---------------------------------------------------------------------------------
# the ALE kernel


@dataclass
class _ALEFeaturePartial:
    stats: BinStats  # per bin (numeric) or per boundary (categorical)
    level_w: np.ndarray | None  # categorical: weight per ordered level
    level_n: np.ndarray | None
    n_rows: int
    n_used: int
    n_missing: int
    n_outside: int
    # with trials: (T, 2 or 3, bins) the trial-weighted sums per bin (weight, weight x effect;
    # categorical: and the trial weight of each level)
    trials: np.ndarray | None = None

    @classmethod
    def merge(cls, parts):
        lw = None if parts[0].level_w is None else np.sum([p.level_w for p in parts], axis=0)
        ln = None if parts[0].level_n is None else np.sum([p.level_n for p in parts], axis=0)
        tr = None if parts[0].trials is None else np.sum([p.trials for p in parts], axis=0)
        return cls(BinStats.merge_all([p.stats for p in parts]), lw, ln, **sum_fields(parts, *ROW_COUNTS), trials=tr)


@dataclass
class _ALEPartial:
    feats: dict

    @classmethod
    def combine(cls, parts):
        return cls(merge_keyed(parts, "feats", _ALEFeaturePartial.merge))


@dataclass
class ALEJob:
    specs: list

    def map(self, ctx):
        pred = ctx.plan.predictor
        w = ctx.weights
        out = {}
        for sp in self.specs:
            s = ctx.df[sp.feature]
            if sp.kind == "numeric":
                z = sp.values
                K = len(z) - 1
                x = as_float(s)
                fin = np.isfinite(x)
                ok = fin & (x >= z[0]) & (x <= z[-1])
                rows = np.flatnonzero(ok)
                k = np.clip(np.searchsorted(z, x[rows], side="left") - 1, 0, K - 1)
                sub = input_rows(ctx, rows)
                P = pred.predict_rowwise(sub, [[(sp.feature, z[k])], [(sp.feature, z[k + 1])]], ctx.plan.batch_rows)
                delta = P[1] - P[0] if len(rows) else np.empty(0)
                stats = BinStats.of(k, delta, None if w is None else w[rows], K)
                tr = trial_bin_sums(ctx, k, delta, rows, K) if ctx.n_sets > 1 else None
                out[sp.feature] = _ALEFeaturePartial(stats, None, None, ctx.n, len(rows), int((~fin).sum()),
                                                     int((fin & ~ok).sum()), tr)
            else:
                levels = sp.values
                K = len(levels)
                codes = level_codes(s, levels)
                miss = s.isna().to_numpy()
                rows = np.flatnonzero(codes >= 0)
                k = codes[rows]
                up = np.asarray(levels, dtype=object)[np.minimum(k + 1, K - 1)]
                down = np.asarray(levels, dtype=object)[np.maximum(k - 1, 0)]
                sub = input_rows(ctx, rows)
                P = pred.predict_rowwise(sub, [[], [(sp.feature, up)], [(sp.feature, down)]], ctx.plan.batch_rows)
                wr = None if w is None else w[rows]
                plus = k < K - 1
                minus = k > 0
                idx = np.concatenate([k[plus], k[minus] - 1])
                vals = np.concatenate([(P[1] - P[0])[plus], (P[0] - P[2])[minus]])
                ww = None if wr is None else np.concatenate([wr[plus], wr[minus]])
                stats = BinStats.of(idx, vals, ww, max(K - 1, 0))
                lw = np.bincount(k, weights=np.ones(len(k)) if wr is None else wr, minlength=K)
                ln = np.bincount(k, minlength=K).astype("float64")
                tr = None
                if ctx.n_sets > 1:
                    tr = trial_bin_sums(ctx, idx, vals, np.concatenate([rows[plus], rows[minus]]), max(K - 1, 0),
                                     (k, rows), K)
                out[sp.feature] = _ALEFeaturePartial(stats, lw, ln, ctx.n, len(rows), int(miss.sum()),
                                                     int((~miss & (codes < 0)).sum()), tr)
        return _ALEPartial(out)


# ---------------------------------------------------------------------------------
# finishing: accumulate and centre


def finish_ale(sp: ALESpec, part: _ALEFeaturePartial, pred, params, source=None) -> ALEResult:
    st = part.stats
    if part.n_used == 0:
        raise DataError(f"feature {sp.feature!r}: no row has a usable value")
    delta = np.where(st.w > 0, st.mean, 0.0)
    fJ = np.concatenate([[0.0], np.cumsum(delta)])
    if sp.kind == "numeric":
        b = st.w
        fJ = fJ - np.sum((fJ[:-1] + fJ[1:]) / 2 * b) / np.sum(b)
        count = np.concatenate([[0.0], st.n])
        weight = np.concatenate([[0.0], st.w])
    else:
        p = part.level_w / part.level_w.sum()
        fJ = fJ - np.sum(fJ * p)
        count, weight = part.level_n, part.level_w
    dmean = np.concatenate([[np.nan], np.where(st.w > 0, st.mean, np.nan)])
    dstd = np.concatenate([[np.nan], st.std()])
    return ALEResult(feature=sp.feature, kind=sp.kind, x=sp.values, ale=fJ, count=count, weight=weight, delta=dmean,
                     delta_std=dstd, response=pred.response, target_class=pred.target_class, n_rows=part.n_rows,
                     n_used=part.n_used, n_missing=part.n_missing, n_outside=part.n_outside, order_source=source,
                     params=params, trials_pd=None if part.trials is None else _trial_curves(sp, part))


def _trial_curves(sp: ALESpec, part: _ALEFeaturePartial) -> np.ndarray:
    """The centred ALE of every trial: the finish above with the trial's weights (the
    bins, and for a categorical feature the level order, are the all-rows ones).  A
    numeric feature's trials are centred with the all-rows bins' weights: its bins are
    quantiles of the rows, which fix how many rows each holds in any sample of the data
    (centring by a trial's Poisson weights would add a spread no sample has); a
    categorical feature's level frequencies do vary from sample to sample, and its
    trials are centred by their own."""
    nb = part.stats.w.shape[0]
    b = part.stats.w
    out = []
    for tr in part.trials:
        W, S = tr[0, :nb], tr[1, :nb]
        delta = np.where(W > 0, S / np.where(W > 0, W, 1), 0.0)
        fJ = np.concatenate([[0.0], np.cumsum(delta)])
        if sp.kind == "numeric":
            fJ = fJ - np.sum((fJ[:-1] + fJ[1:]) / 2 * b) / np.sum(b) if W.sum() > 0 else np.full(len(fJ), np.nan)
        else:
            lw = tr[2, :len(fJ)]
            fJ = fJ - np.sum(fJ * lw / lw.sum()) if lw.sum() > 0 else np.full(len(fJ), np.nan)
        out.append(fJ)
    return np.vstack(out)


@validate_params(SPECS["ale"])
def ale(
    model,
    data,
    features,
    *,
    bins: int = 20,
    order=None,
    sample_weight=None,
    response: str = "auto",
    target_class=None,
    columns=None,
    categorical_features=None,
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
    """Accumulated local effects of one or more features (see the module docstring).

    Parameters
    ----------
    model, data, response, target_class, columns, categorical_features, batch_rows,
    progress, storage_options, filters, feature_names
        As :func:`daskpd.partial_dependence` (``data`` may be a numpy or dask array).
    features : str or int, pair, or list of them
        A column (name or index) gives the 1-D ALE; a pair (tuple) of two numeric columns gives
        their second-order (2-D) ALE (:mod:`daskpd.model._ale2d`), as
        :func:`daskpd.partial_dependence`'s 2-way rule.  All are computed in one pass
        over the data.
    bins : int, default 20
        Number of quantile bins ``K`` for numeric features (fewer when the feature has
        fewer distinct quantiles).
    order : dict {feature: levels}, optional
        The level order of categorical features (default: an ordered pandas
        categorical's own order, else the MDS order described above).
    sample_weight : str or array, optional
        Weighted means of the local effects and weighted centring (the bin edges are
        unweighted quantiles).
    n_trials, bootstrap, subsample_size, band, random_state, row_id
        T > 1 bootstrap trials in the same pass (as :func:`daskpd.partial_dependence`):
        each trial re-weights the rows' local effects and the centring with weights from
        a seeded row hash; the bins, the level order and the model are fixed.  Results
        carry ``trials_pd`` and ``band()`` (``pd_std, pd_lo, pd_hi`` in
        ``to_frame()``); a 2-D ALE's per grid point.

    Returns
    -------
    ALEResult (a pair: ALE2DResult), or a dict ``{feature or pair: result}`` when
    ``features`` is a list.
    """
    read = model_read(storage_options, filters)  # how the input is read, built once
    mi = open_model_input(data, read=read, feature_names=feature_names, model=model,
                          sample_weight=sample_weight)  # the request's one opening
    ds, sample_weight = mi.dataset, mi.sample_weight
    require_class(model, response, target_class, "ale")
    items, single = check_features(features, ds, allow_pairs=True)
    singles = [it[0] for it in items if len(it) == 1]
    pairs = [it for it in items if len(it) == 2]
    feats = list(dict.fromkeys(c for it in items for c in it))
    trials = Trials.of(n_trials, bootstrap, subsample_size, random_state, row_id)
    run = prepare_model_run(model, ds, feats, columns=columns, response=response, target_class=target_class,
                            engine="predict", sample_weight=sample_weight, categorical_features=categorical_features,
                            read=read, row_id=trial_row_id(trials))
    for it in pairs:
        for f in it:
            if run.kinds[f] != "numeric":
                raise InvalidParameterError(f"parameter features: the 2-D ALE of {it!r} needs two numeric features; "
                                            f"{f!r} is categorical")
    order = check_order(order, singles, run.kinds)
    specs, sources, _, _ = ale_specs(run, feats, bins=bins, order=order)
    by = {sp.feature: sp for sp in specs}
    jobs = []
    if singles:
        jobs.append(ALEJob([by[f] for f in singles]))
    if pairs:
        jobs.append(ALE2DJob([ALE2DSpec(it, by[it[0]].values, by[it[1]].values) for it in pairs]))
    plan = Plan(jobs, predictor=run.predictor, weight=run.weight, batch_rows=batch_rows, trials=trials)
    parts, _ = run_jobs(run.ddf, plan, name="daskpd-ale")
    params = {"bins": bins, "sample_weight": run.weight, "model": run.predictor.describe(),
              **trial_params(trials, band, plan.repeats, plan.response_std)}
    done = {}
    if singles:
        part = parts[0]
        done.update({f: finish_ale(by[f], part.feats[f], run.predictor, params, sources.get(f)) for f in singles})
    if pairs:
        job2, part2 = jobs[-1], parts[-1]
        done.update({sp.features: finish_ale2d(sp, part2.pairs[sp.features], run.predictor, params)
                     for sp in job2.specs})
    out = {(it[0] if len(it) == 1 else it): done[it[0] if len(it) == 1 else it] for it in items}
    return next(iter(out.values())) if single else out
