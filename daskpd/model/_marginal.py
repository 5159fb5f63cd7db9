"""Marginal plots (M-plots; Apley & Zhu 2020, FesianXu 2022): the mean of ``y`` -- or of the model's
prediction -- per bin of ``x``, with its spread.

    M(x_bin) = E[y | x in bin]          (and/or E[f(X) | x in bin])

Unlike PD (which averages over the *marginal* distribution of the other features), the
M-plot averages over the *conditional* distribution of the rows in the bin, so it also
carries the effect of every feature correlated with ``x``.  A numeric feature with at
most ``bins`` distinct values gets one bin per value; otherwise ``bins`` quantile bins
(type-1 quantile edges, each bin ``(z_{k-1}, z_k]``, computed exactly) or ``bins``
equal-width bins over ``[min, max]`` (``binning="uniform"``, as FesianXu 2022).  The
values, edges and levels are computed over the rows that are averaged: with ``target``,
the rows whose target is finite (rows with a missing or infinite target are dropped and
counted in ``n_bad_y``, and do not move the edges).
Categorical features get one bin per level.  Each bin is placed at the (weighted) mean
``x`` of its rows.  Per partition: per bin, weight, mean and sum of squared deviations
(merged exactly), so the spread is the weighted standard deviation within the bin.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .._data.encode import as_float
from .._data.options import ReadOptions
from .._data.request import open_request
from .._engine.plan import merge_keyed, sum_fields
from .._engine.stats import order_statistics, summarize, type1_ranks
from .._errors import DataError, InvalidParameterError
from .._validation import validate_params
from ..plotting.model import plot_marginal
from ..results import CurveResult
from ..results.curves import DEFAULT_BAND, band_columns, band_is_flat, band_note, trial_band
from ._arrays import categorical_names, model_read, open_model_input
from ._common import BinStats, class_columns, level_codes, require_class, response_note
from ._params import SPECS
from ._passes import Plan, Trials, run_jobs, trial_bin_sums, trial_params, trial_row_id
from ._predictor import resolve_predictor
from ._setup import check_features, check_weight, model_available

__all__ = ["marginal", "MarginalResult"]


@dataclass(repr=False)
class MarginalResult(CurveResult):
    """Per bin of ``feature``: position ``x`` (mean x of the rows, or the level), edges
    ``lo``/``hi`` (numeric), ``count``, ``weight``, and the mean / std of the target
    (``y_mean``, ``y_std``) and of the prediction (``pred_mean``, ``pred_std``) when
    requested (else None)."""

    feature: str
    kind: str
    x: np.ndarray
    lo: np.ndarray | None
    hi: np.ndarray | None
    count: np.ndarray
    weight: np.ndarray
    y_mean: np.ndarray | None
    y_std: np.ndarray | None
    pred_mean: np.ndarray | None
    pred_std: np.ndarray | None
    target: str | None = None
    response: str | None = None
    n_rows: int = 0
    n_missing: int = 0
    n_bad_y: int = 0
    binning: str = "quantile"
    params: dict = field(default_factory=dict)
    trials_pd: np.ndarray | None = None  # (n_trials, bins): the bins' means (of pd's quantity) per bootstrap trial

    @property
    def pd(self) -> np.ndarray:
        return self.y_mean if self.y_mean is not None else self.pred_mean

    @property
    def target_class(self):
        """The class whose probability (decision function) ``pred_mean`` averages, or None."""
        return (self.params.get("model") or {}).get("target_class")

    @property
    def n_trials(self) -> int:
        return 1 if self.trials_pd is None else len(self.trials_pd)

    def band(self) -> dict | None:
        """``{"std", "lo", "hi", "n"}`` of the bins' means over the trials (the bins
        fixed), None without trials (see :func:`daskpd.results.curves.trial_band`)."""
        if self.trials_pd is None:
            return None
        return trial_band(self.trials_pd, tuple(self.params.get("band", DEFAULT_BAND)), center=self.pd)

    def is_flat(self) -> bool:
        """Whether the curve is not distinguishable from flat (a flat line fits its
        simultaneous band: :func:`daskpd.results.curves.flat_test`; the plot then draws
        it on the scale of ``params["target_std"]`` or ``params["response_std"]``);
        False without a band."""
        return band_is_flat(self)

    def summary(self) -> str:
        return super().summary() + response_note(self) + band_note(self)

    def __repr__(self) -> str:
        return (f"MarginalResult(feature={self.feature!r}, bins={len(self.x)}, target={self.target!r}, "
                f"prediction={self.pred_mean is not None}, rows={self.n_rows})")

    def curve(self) -> dict:
        """``pd`` is the mean target (else the mean prediction); the bins' edges, weights,
        means and spreads follow."""
        extra = {"lo": self.lo, "hi": self.hi, "weight": self.weight, "y_mean": self.y_mean, "y_std": self.y_std,
                 "pred_mean": self.pred_mean, "pred_std": self.pred_std, **band_columns(self.band()),
                 **class_columns(self, len(self.x))}
        return {"positions": self.x, "pd": self.pd, "count": self.count.astype("int64"), "extra": extra}

    def metadata(self) -> dict:
        return {"method": "marginal", "feature": self.feature, "kind": self.kind, "target": self.target,
                "response": self.response, "target_class": self.target_class, "n_rows": self.n_rows, "n_missing": self.n_missing,
                "n_bad_y": self.n_bad_y, "binning": self.binning, "params": self.params}

    def plot(self, ax=None, **kwargs):
        return plot_marginal(self, ax=ax, **kwargs)


@dataclass
class _MSpec:
    feature: str
    kind: str
    mode: str  # "edges" | "values" | "levels"
    values: np.ndarray


@dataclass
class _MFeat:
    y: BinStats | None
    p: BinStats | None
    xw: np.ndarray  # sum of w * x per bin (numeric)
    w: np.ndarray
    n: np.ndarray
    n_rows: int
    n_missing: int
    n_bad_y: int
    trials: np.ndarray | None = None  # (T, 2, bins): trial weights and weighted values of pd's quantity

    @classmethod
    def merge(cls, parts):
        y = None if parts[0].y is None else BinStats.merge_all([p.y for p in parts])
        pr = None if parts[0].p is None else BinStats.merge_all([p.p for p in parts])
        tr = None if parts[0].trials is None else np.sum([p.trials for p in parts], axis=0)
        return cls(y, pr, np.sum([p.xw for p in parts], axis=0), np.sum([p.w for p in parts], axis=0),
                   np.sum([p.n for p in parts], axis=0), **sum_fields(parts, "n_rows", "n_missing", "n_bad_y"),
                   trials=tr)


@dataclass
class _MPartial:
    feats: dict

    @classmethod
    def combine(cls, parts):
        return cls(merge_keyed(parts, "feats", _MFeat.merge))


def bin_index(sp: _MSpec, s: pd.Series):
    """(bin per row or -1, x as float or None, missing mask)."""
    if sp.mode == "levels":
        codes = level_codes(s, sp.values)
        return codes, None, s.isna().to_numpy()
    x = as_float(s)
    fin = np.isfinite(x)
    if sp.mode == "values":
        pos = np.searchsorted(sp.values, x)
        posc = np.minimum(pos, len(sp.values) - 1)
        ok = fin & (sp.values[posc] == x)
        return np.where(ok, posc, -1), x, ~fin
    z = sp.values
    k = np.clip(np.searchsorted(z, x, side="left") - 1, 0, len(z) - 2)
    ok = fin & (x >= z[0]) & (x <= z[-1])
    return np.where(ok, k, -1), x, ~fin


@dataclass
class MarginalJob:
    specs: list
    target: str | None
    with_prediction: bool

    def map(self, ctx):
        w = ctx.weights
        pred_all = None
        if self.with_prediction:
            pred_all = ctx.plan.predictor.predict(ctx.df)
        y_all = as_float(ctx.df[self.target]) if self.target is not None else None
        out = {}
        for sp in self.specs:
            K = len(sp.values) - 1 if sp.mode == "edges" else len(sp.values)
            b, x, miss = bin_index(sp, ctx.df[sp.feature])
            ok = b >= 0
            n_bad_y = 0
            if y_all is not None:
                yok = np.isfinite(y_all)
                # x present, y missing/inf (such a row may lie outside the bins, which come
                # from the rows with a finite y)
                n_bad_y = int((~miss & ~yok).sum())
                ok = ok & yok
            rows = np.flatnonzero(ok)
            k = b[rows]
            wr = None if w is None else w[rows]
            ww = np.ones(len(rows)) if wr is None else wr
            ys = BinStats.of(k, y_all[rows], wr, K) if y_all is not None else None
            ps = BinStats.of(k, pred_all[rows], wr, K) if pred_all is not None else None
            xw = np.bincount(k, weights=ww * x[rows], minlength=K) if x is not None else np.zeros(K)
            tr = None
            if ctx.n_sets > 1:  # bootstrap trials: the trial-weighted sums of pd's quantity per bin
                v = y_all[rows] if y_all is not None else pred_all[rows]
                tr = trial_bin_sums(ctx, k, v, rows, K)
            out[sp.feature] = _MFeat(ys, ps, xw, np.bincount(k, weights=ww, minlength=K),
                                     np.bincount(k, minlength=K).astype("float64"), ctx.n, int(miss.sum()), n_bad_y,
                                     tr)
        return _MPartial(out)


def marginal_ranks(summary, bins: int, binning: str):
    """Ranks of the order statistics a numeric marginal spec needs (empty when none)."""
    if summary.uniques is not None and len(summary.uniques) <= bins:
        return []
    if binning == "uniform":
        return []
    return [0, *type1_ranks(summary.n, bins)]


def marginal_spec(f, kind, summary, bins, binning, stats) -> _MSpec:
    if summary.n == 0:
        raise DataError(f"feature {f!r} has no non-missing values")
    if kind == "categorical":
        return _MSpec(f, kind, "levels", summary.uniques)
    if summary.uniques is not None and len(summary.uniques) <= bins:
        return _MSpec(f, kind, "values", np.asarray(summary.uniques, dtype="float64"))
    if binning == "uniform":
        return _MSpec(f, kind, "edges", np.linspace(summary.vmin, summary.vmax, bins + 1))
    z = np.unique([stats[r] for r in [0, *type1_ranks(summary.n, bins)]])
    return _MSpec(f, kind, "edges", z)


def finish_marginal(sp: _MSpec, part: _MFeat, *, target, response, binning, params) -> MarginalResult:
    keep = part.w > 0
    if sp.mode == "edges":
        lo, hi = sp.values[:-1], sp.values[1:]
        x = np.where(keep, part.xw / np.where(keep, part.w, 1), (lo + hi) / 2)
    elif sp.mode == "values":
        lo = hi = None
        x = sp.values
    else:
        lo = hi = None
        x = sp.values
    def sel(a):
        return None if a is None else a[keep]

    y = part.y
    p = part.p
    trials = None
    if part.trials is not None:
        W, S = part.trials[:, 0, :], part.trials[:, 1, :]
        with np.errstate(invalid="ignore", divide="ignore"):
            trials = np.where(W > 0, S / np.where(W > 0, W, 1), np.nan)[:, keep]
    return MarginalResult(
        feature=sp.feature, kind=sp.kind, x=x[keep], lo=sel(lo), hi=sel(hi), count=part.n[keep], weight=part.w[keep],
        y_mean=None if y is None else y.mean[keep], y_std=None if y is None else y.std()[keep],
        pred_mean=None if p is None else p.mean[keep], pred_std=None if p is None else p.std()[keep],
        target=target, response=response, n_rows=part.n_rows, n_missing=part.n_missing, n_bad_y=part.n_bad_y,
        binning=binning if sp.mode == "edges" else ("distinct values" if sp.mode == "values" else "levels"),
        params=params, trials_pd=trials)


def rows_with_finite(df: pd.DataFrame, column: str) -> pd.DataFrame:
    """The rows of ``df`` whose ``column`` is finite (not NaN, not +-inf)."""
    ok = np.isfinite(as_float(df[column]))
    return df if ok.all() else df[ok]



@validate_params(SPECS["marginal"])
def marginal(
    data,
    features,
    *,
    target: str | None = None,
    model=None,
    bins: int = 20,
    binning: str = "quantile",
    sample_weight=None,
    response: str = "auto",
    target_class=None,
    columns=None,
    categorical_features=None,
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
    """Marginal plot (M-plot) of ``target`` and/or of ``model``'s prediction per bin of each feature.

    Parameters
    ----------
    data : pandas DataFrame, dask DataFrame, numpy or dask array, or parquet path / glob / directory / URL
    features : str or int, or a list of them
        Columns by name or index; one pass computes every feature.
    target : str or array, optional
        Numeric response column: its mean per bin (rows with a missing/inf target are
        dropped and counted in ``n_bad_y``; the bins are computed without them).  With
        in-memory data (an array, a pandas DataFrame) it may be the values themselves,
        one per row (scikit-learn's ``y``); they are named ``y`` (a Series: its name).
    model : fitted model or function, optional
        Its mean prediction per bin.  At least one of ``target`` and ``model`` is needed.
    bins : int, default 20
        Bins per numeric feature (a feature with at most ``bins`` distinct values gets
        one bin per value).
    binning : {"quantile", "uniform"}, default "quantile"
        Equal-count (exact type-1 quantile) or equal-width bins.
    sample_weight : str or array, optional
        Weighted means and spreads.
    response, target_class, columns, categorical_features, progress, storage_options, filters, feature_names
        As :func:`daskpd.partial_dependence`.
    n_trials, bootstrap, subsample_size, band, random_state, row_id
        T > 1: bootstrap trials in the same pass (as :func:`daskpd.partial_dependence`):
        each bin's mean of the target (else of the prediction) re-weighted per trial, the
        bins fixed; ``trials_pd``, ``band()`` and ``pd_std, pd_lo, pd_hi`` in ``to_frame()``.

    Returns
    -------
    MarginalResult, or a dict ``{feature: MarginalResult}`` when ``features`` is a list.
    """
    if target is None and model is None:
        raise InvalidParameterError("marginal needs target= (a column) and/or model= (a fitted model)")
    read = model_read(storage_options, filters)  # how the input is read, built once
    mi = open_model_input(data, read=read, feature_names=feature_names, model=model,
                          target=target, sample_weight=sample_weight)  # the request's one opening
    ds, target, sample_weight = mi.dataset, mi.target, mi.sample_weight
    if model is not None:
        require_class(model, response, target_class, "marginal")
    items, single = check_features(features, ds, allow_pairs=False)
    feats = [it[0] for it in items]
    if target is not None:
        ds.check([target], "parameter target")
        if target in feats:
            raise InvalidParameterError(f"feature {target!r} is the target")
    ds, wcol = check_weight(sample_weight, ds)
    dtypes = ds.dtypes
    pred = None
    if model is not None:
        # the weight may be a model input, the target never is
        inputs = model_available(model, columns, [c for c in ds.columns if c != target], [wcol])
        pred = resolve_predictor(model, inputs, dtypes, columns=columns, response=response,
                                 target_class=target_class, engine="predict")
    elif response != "auto" or target_class is not None or columns is not None:
        raise InvalidParameterError("parameters response, target_class and columns apply only with model=")
    declared = categorical_names(categorical_features, ds)
    kinds = open_request(ds, target, feats, read=ReadOptions(categorical=declared), model_free=False).kinds
    trials = Trials.of(n_trials, bootstrap, subsample_size, random_state, row_id)
    ds.check(trial_row_id(trials), "parameter row_id")
    cols = list(dict.fromkeys([*feats, *([target] if target else []), *([wcol] if wcol else []),
                               *(pred.columns if pred else []), *trial_row_id(trials)]))
    ddf = ds.project(cols)
    # Bins (distinct values, quantile or uniform edges, levels) come from the rows that are
    # averaged: with a target, only rows whose target is finite.
    ddf_bins = ddf if target is None else ddf.map_partitions(rows_with_finite, target, meta=ddf._meta)
    sums = summarize(ddf_bins, kinds)
    ranks = {f: marginal_ranks(sums[f], bins, binning) for f in feats if kinds[f] == "numeric" and sums[f].n > 0}
    ranks = {f: r for f, r in ranks.items() if r}
    stats = order_statistics(ddf_bins, sums, ranks) if ranks else {}
    specs = [marginal_spec(f, kinds[f], sums[f], bins, binning, stats.get(f, {})) for f in feats]
    plan = Plan([MarginalJob(specs, target, pred is not None)], predictor=pred, weight=wcol, trials=trials)
    (part,), _ = run_jobs(ddf, plan, name="daskpd-marginal")
    params = {"bins": bins, "sample_weight": wcol, "model": pred.describe() if pred else None,
              **trial_params(trials, band, plan.repeats, plan.response_std)}
    out = {}
    for sp in specs:
        fp = part.feats[sp.feature]
        if fp.w.sum() <= 0:
            raise DataError(f"feature {sp.feature!r}: no row has usable values")
        res = finish_marginal(sp, fp, target=target, response=pred.response if pred else None,
                              binning=binning, params=params)
        spread = bins_std(res.weight, res.y_mean, res.y_std) if trials is not None else None
        if spread is not None:  # the band is on the target's means: its spread is the flat plot's scale
            res.params = {**res.params, "target_std": spread}
        out[sp.feature] = res
    return out[feats[0]] if single else out


def bins_std(weight, mean, std) -> float | None:
    """The standard deviation of a quantity over every row of the bins, from each bin's
    weight, mean and standard deviation (the law of total variance); None without it."""
    if mean is None or std is None:
        return None
    w, m, s = (np.asarray(a, dtype="float64") for a in (weight, mean, std))
    ok = np.isfinite(m) & np.isfinite(s) & (w > 0)
    if not ok.any():
        return None
    w, m, s = w[ok], m[ok], s[ok]
    grand = float(np.average(m, weights=w))
    v = float(np.average(s ** 2 + (m - grand) ** 2, weights=w))
    return float(np.sqrt(v)) if np.isfinite(v) and v >= 0 else None
