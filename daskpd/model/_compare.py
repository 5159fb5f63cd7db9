"""The comparison figure's data: StratPD (CatStratPD for a categorical feature), Friedman
PD, ALE and the marginal plot of one feature, on one set of axes (as the StratPD paper's
figures do).

The model-based curves (FPD by brute force over all rows, ALE, and the marginal means of
the target and of the prediction) come from ONE pass over the data (after the summary
and quantile passes that fix the grid and the bins); StratPD is model-free and runs its
own pipeline (:func:`daskpd.stratpd`), unless a precomputed curve is passed.

The curves live on different vertical scales (FPD and the marginal plot on the scale of
the prediction / target, ALE centred to mean zero, StratPD anchored at 0 at its leftmost
supported x), so :meth:`ComparisonResult.aligned` shifts each curve vertically:
``align="left"`` makes every curve 0 at the leftmost x where all are defined
(StratPD's convention), ``"mean"`` centres each to mean 0 over the common x range,
``None`` leaves them as computed.  Only vertical shifts: the shapes, which are what the
methods disagree on, are untouched.

For a categorical feature every curve is a value per category (CatStratPD's effects,
FPD on the observed levels, ALE on its ordered levels, the marginal means per level),
matched by the categories' labels; ``"left"`` makes every curve 0 at the first category
all of them have (in the figure's order: by the first curve's value), ``"mean"`` centres
each over the categories all have.  ``"auto"`` (the default) is ``"left"`` for a numeric
feature and ``"mean"`` for a categorical one.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .._catstratpd import catstratpd as run_catstratpd
from .._data.request import open_request
from .._engine.stats import summarize
from .._errors import DataError, InvalidParameterError
from .._stratpd import stratpd as run_stratpd
from .._validation import validate_params
from ..plotting.comparison import plot_comparison
from ..results import Result
from ..results.curves import DEFAULT_BAND, trial_band
from ._ale import ALEJob, finish_ale
from ._ale_specs import ale_specs
from ._arrays import model_read, open_model_input, resolve_columns
from ._common import require_class
from ._grids import pd_grid, pd_grid_plan
from ._marginal import MarginalJob, finish_marginal, marginal_ranks, marginal_spec
from ._params import SPECS
from ._passes import Plan, Trials, run_jobs, trial_params, trial_row_id
from ._pd_pass import PDJob
from ._pd_result import pd_results
from ._predictor import DEFAULT_BATCH_ROWS
from ._setup import prepare_model_run
from ._variance import finish_pd_variance, importance_of

__all__ = ["compare", "ComparisonResult"]

ALIGN = ("auto", "left", "mean", None)


def _finite(x, y):
    x = np.asarray(x, dtype="float64")
    y = np.asarray(y, dtype="float64")
    ok = np.isfinite(x) & np.isfinite(y)
    o = np.argsort(x[ok], kind="stable")
    return x[ok][o], y[ok][o]


def align_curves(curves: dict, how="left") -> dict:
    """Vertically shifted copies of ``curves`` ({name: (x, y)}); see the module docstring."""
    if how not in ALIGN:
        raise InvalidParameterError(f"parameter align must be 'auto', 'left', 'mean' or None; got {how!r}")
    how = "left" if how == "auto" else how
    clean = {k: _finite(*v) for k, v in curves.items()}
    clean = {k: v for k, v in clean.items() if len(v[0])}
    if how is None or not clean:
        return clean
    lo = max(v[0][0] for v in clean.values())
    hi = min(v[0][-1] for v in clean.values())
    if lo > hi:  # no common range: align each at its own left end
        return {k: (x, y - y[0]) for k, (x, y) in clean.items()}
    out = {}
    for k, (x, y) in clean.items():
        if how == "left":
            shift = np.interp(lo, x, y)
        else:
            xs = np.linspace(lo, hi, 201) if hi > lo else np.array([lo])
            shift = float(np.mean(np.interp(xs, x, y)))
        out[k] = (x, y - shift)
    return out


def _labels(x) -> np.ndarray:
    out = np.empty(len(x), dtype=object)
    out[:] = [str(v) for v in x]
    return out


def category_order(curves: dict) -> list:
    """The categories of every curve, as text, in the figure's order: the first curve's
    categories by its value (unsupported last), then those only other curves have."""
    order = []
    for i, (x, y) in enumerate(curves.values()):
        lab, y = _labels(x), np.asarray(y, dtype="float64")
        if i == 0:
            o = np.argsort(np.where(np.isfinite(y), y, np.inf), kind="stable")
            order.extend(lab[o])
        else:
            seen = set(order)
            order.extend(v for v in lab if v not in seen)
    return list(dict.fromkeys(order))


def align_categories(curves: dict, how="mean") -> dict:
    """:func:`align_curves` for a categorical feature: ``{name: (labels, y)}`` (labels as
    text, the finite values only) shifted to 0 at the first common category (``"left"``)
    or to mean 0 over the common categories (``"mean"``); see the module docstring."""
    if how not in ALIGN:
        raise InvalidParameterError(f"parameter align must be 'auto', 'left', 'mean' or None; got {how!r}")
    how = "mean" if how == "auto" else how
    clean = {}
    for k, (x, y) in curves.items():
        lab, y = _labels(x), np.asarray(y, dtype="float64")
        ok = np.isfinite(y)
        if ok.any():
            clean[k] = (lab[ok], y[ok])
    if how is None or not clean:
        return clean
    common = set.intersection(*(set(v[0]) for v in clean.values()))
    order = [c for c in category_order(clean) if c in common]
    out = {}
    for k, (lab, y) in clean.items():
        at = {c: v for c, v in zip(lab, y)}
        if not order:  # nothing in common: each about its own mean
            shift = float(np.mean(y))
        elif how == "left":
            shift = at[order[0]]
        else:
            shift = float(np.mean([at[c] for c in order]))
        out[k] = (lab, y - shift)
    return out


@dataclass(repr=False)
class ComparisonResult(Result):
    """Curves of one feature by several methods.

    ``curves``   {name: (x, y)} as computed (names: "StratPD", "FPD", "ALE",
                 "marginal (y)", "marginal (prediction)", plus any user curves)
    ``results``  {name: the underlying result object}; ``results["pd_variance"]`` is the
                 feature's PD-variance importance (:func:`daskpd.pd_variance` on FPD's
                 grid, from the same pass), with ``importance_std`` / ``_lo`` / ``_hi``
                 when ``n_trials`` > 1
    """

    feature: str
    target: str | None
    curves: dict
    results: dict = field(default_factory=dict)
    params: dict = field(default_factory=dict)
    kind: str = "numeric"  # "categorical": every curve is a value per category

    def __repr__(self) -> str:
        return f"ComparisonResult(feature={self.feature!r}, curves={list(self.curves)})"

    def aligned(self, how="auto") -> dict:
        """The curves shifted vertically (the module docstring): ``{name: (x, y)}``,
        ``x`` the categories as text for a categorical feature."""
        if self.kind != "numeric":
            return align_categories(self.curves, how)
        return align_curves(self.curves, how)

    def category_order(self, how="auto") -> list:
        """A categorical feature's categories (text) in the figure's order: by the first
        aligned curve's value (the model-free one when there is one), then the rest."""
        return category_order(self.aligned(how))

    def to_frame(self, align="auto") -> pd.DataFrame:
        """One row per method and position (category): ``method``, the feature's
        positions (categories), ``value`` as computed and ``aligned``."""
        al = self.aligned(align)
        rows = []
        for name, (x, y) in self.curves.items():
            if self.kind != "numeric":
                lab, ya = align_categories({name: (x, y)}, None).get(name, (np.empty(0, dtype=object), np.empty(0)))
                at = dict(zip(*al[name])) if name in al else {}
                rows.append(pd.DataFrame({"method": name, self.feature: lab, "value": ya,
                                          "aligned": np.array([at.get(c, np.nan) for c in lab], dtype="float64")}))
                continue
            xa, ya = _finite(x, y)
            yal = al[name][1] if name in al else np.full(len(xa), np.nan)
            rows.append(pd.DataFrame({"method": name, self.feature: xa, "value": ya, "aligned": yal}))
        return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(
            columns=["method", self.feature, "value", "aligned"])

    def metadata(self) -> dict:
        return {"method": "comparison", "feature": self.feature, "kind": self.kind, "target": self.target,
                "curves": list(self.curves), "params": self.params}

    def measures(self) -> pd.DataFrame:
        """One row per curve: ``method`` and ``pd_variance``, the spread of the curve over
        its positions (Greenwell et al.'s flatness: the standard deviation, ddof=1, of
        its finite values, or range/4 for a categorical feature; the FPD row is
        :func:`daskpd.pd_variance`'s importance of the feature on the same grid).  With bootstrap trials (``n_trials`` > 1) the curves
        that have them (FPD, ALE, the marginal plot's mean of y, else of the prediction,
        and StratPD run with ``stratpd_kwargs={"n_trials": T}``) add
        ``pd_variance_std``, ``pd_variance_lo``, ``pd_variance_hi``: the standard
        deviation (ddof=1) and ``band`` percentiles of the trials' spreads (NaN for the
        curves without trials)."""
        band = tuple(self.params.get("band", DEFAULT_BAND))
        rows = []
        for name, (x, y) in self.curves.items():
            y = np.asarray(y, dtype="float64")
            ok = np.isfinite(y) & (np.isfinite(np.asarray(x, dtype="float64")) if self.kind == "numeric" else True)
            row = {"method": name,
                   "pd_variance": float(importance_of(y[ok], self.kind)) if ok.sum() > 1 else np.nan}
            tr = self._trials_of(name)
            if tr is not None and tr.shape[-1] == len(y):
                with np.errstate(invalid="ignore"), warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    t = tr[:, ok]
                    spread = (np.nanstd(t, axis=1, ddof=1) if self.kind == "numeric"
                              else (np.nanmax(t, axis=1) - np.nanmin(t, axis=1)) / 4)
                b = trial_band(spread[:, None], band, center=row["pd_variance"])
                row.update({"pd_variance_std": float(b["std"][0]), "pd_variance_lo": float(b["lo"][0]),
                            "pd_variance_hi": float(b["hi"][0])})
            rows.append(row)
        cols = ["method", "pd_variance"]
        if any("pd_variance_std" in r for r in rows):
            cols += ["pd_variance_std", "pd_variance_lo", "pd_variance_hi"]
        return pd.DataFrame(rows, columns=cols)

    def _trials_of(self, name):
        """The trial curves behind curve ``name`` (None without trials)."""
        r = self.results.get("marginal" if name.startswith("marginal") else name)
        if name.startswith("marginal"):  # the trials are of the bins' mean of y (else of the prediction)
            if r is None or name != ("marginal (y)" if self.target is not None else "marginal (prediction)"):
                return None
        T = getattr(r, "trials_pd", None)
        return None if T is None else np.asarray(T, dtype="float64")

    def plot(self, ax=None, align="auto", **kwargs):
        return plot_comparison(self, ax=ax, align=align, **kwargs)


def _curve_of(obj, name):
    if isinstance(obj, (tuple, list)) and len(obj) == 2:
        return np.asarray(obj[0]), np.asarray(obj[1])
    if hasattr(obj, "categories") and hasattr(obj, "pd"):  # a CatStratPD result
        return np.asarray(obj.categories, dtype=object), np.asarray(obj.pd, dtype="float64")
    if hasattr(obj, "x") and hasattr(obj, "pd"):
        return np.asarray(obj.x), np.asarray(obj.pd)
    raise DataError(f"curve {name!r} must be a result with .x and .pd, or a pair (x, y); got {type(obj).__name__}")


@validate_params(SPECS["compare"])
def compare(
    model,
    data,
    feature: str,
    *,
    target: str | None = None,
    stratpd=None,
    curves: dict | None = None,
    grid_resolution: int = 100,
    percentiles=(0.05, 0.95),
    bins: int = 20,
    sample_weight=None,
    response: str = "auto",
    target_class=None,
    columns=None,
    stratpd_kwargs: dict | None = None,
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
    categorical_features=None,
) -> ComparisonResult:
    """StratPD (CatStratPD), FPD, ALE and marginal curves of ``feature``, for one overlaid figure.

    Parameters
    ----------
    model : fitted model or function
        For FPD, ALE and the marginal mean prediction.
    data : pandas DataFrame, dask DataFrame, numpy or dask array, or parquet path / glob / directory / URL
    feature : str or int
        A model input column (name or index), numeric or categorical.  A categorical
        feature gives a value per category for every method (CatStratPD instead of
        StratPD; FPD on the observed levels; ALE on its ordered levels; the marginal
        means per level), drawn as points.
    target : str or array, optional
        Response column: the marginal plot of ``y`` and (by default) StratPD / CatStratPD
        use it.  With in-memory data it may be the values (scikit-learn's ``y``).
    stratpd : None, bool, or a precomputed curve
        None: run :func:`daskpd.stratpd` (:func:`daskpd.catstratpd` for a categorical
        feature) when ``target`` is given; True: run it (needs ``target``); False: no
        model-free curve; a result with ``.x``/``.pd`` (``.categories``/``.pd``) or a
        pair ``(x, y)``: use it.
    curves : dict {name: result or (x, y)}, optional
        More precomputed curves to overlay.
    grid_resolution, percentiles : default 100, (0.05, 0.95)
        FPD grid of a numeric feature, as :func:`daskpd.partial_dependence` makes it
        (scikit-learn's rule, missing values included); ``percentiles=(0, 1)`` spans the
        full range.
    bins : int, default 20
        Quantile bins of ALE and of the marginal plot (numeric feature).
    sample_weight, response, target_class, columns, batch_rows, progress, storage_options, filters,
    feature_names, categorical_features
        As :func:`daskpd.partial_dependence` (weights apply to FPD, ALE and marginal;
        ``categorical_features`` makes a numeric column of codes categorical).
    stratpd_kwargs : dict, optional
        Extra arguments of :func:`daskpd.stratpd` / :func:`daskpd.catstratpd` (e.g.
        ``min_samples_leaf``).
    n_trials, bootstrap, subsample_size, band, random_state, row_id
        T > 1 bootstrap trials in the same pass (as :func:`daskpd.partial_dependence`):
        FPD, ALE and the marginal plot carry their bands (``results``), and
        :meth:`ComparisonResult.measures` the ``pd_variance_std`` / ``_lo`` / ``_hi``
        of every curve's spread; ``results["pd_variance"]`` is
        :func:`daskpd.pd_variance`'s result for the feature (``importance_std``,
        ``importance_lo``, ``importance_hi`` in its ``to_frame()``).

    Returns
    -------
    ComparisonResult
    """
    read = model_read(storage_options, filters)  # how the input is read, built once
    mi = open_model_input(data, read=read, feature_names=feature_names, model=model,
                          target=target, sample_weight=sample_weight)  # the request's one opening
    ds, target, sample_weight = mi.dataset, mi.target, mi.sample_weight
    require_class(model, response, target_class, "compare")
    feature = resolve_columns(feature, ds, "feature")
    ds.check([feature], "parameter feature")
    if target is not None:
        ds.check([target], "parameter target")
        if target == feature:
            raise DataError(f"feature {feature!r} is the target")
    if stratpd is True and target is None:
        raise InvalidParameterError("stratpd=True needs target= (StratPD is computed from the target column)")
    extra = dict(curves or {})
    extra_curves = {k: _curve_of(v, k) for k, v in extra.items()}
    ext_sp = None
    if stratpd not in (None, True, False):
        ext_sp = _curve_of(stratpd, "stratpd")

    trials = Trials.of(n_trials, bootstrap, subsample_size, random_state, row_id)
    run = prepare_model_run(model, ds, [feature], columns=columns, response=response, target_class=target_class,
                            engine="auto", sample_weight=sample_weight, extra_columns=[target] if target else [],
                            reserved=[target] if target else [], categorical_features=categorical_features,
                            read=read, row_id=trial_row_id(trials))
    kind = run.kinds[feature]
    if target is not None:
        open_request(ds, target, [], model_free=False)  # the target: a numeric column
    if kind == "numeric":
        grid, specs, mspec = _numeric_plan(run, feature, grid_resolution, percentiles, bins)
    else:  # the levels: PD's grid, ALE's ordered levels, the marginal means per level
        specs, _, sums, _ = ale_specs(run, [feature], bins=bins, order={})
        grid = np.asarray(sums[feature].uniques, dtype=object)
        mspec = marginal_spec(feature, "categorical", sums[feature], bins, "quantile", {})
    pred = run.predictor
    jobs = [PDJob([((feature,), [grid])], run.kinds), ALEJob(specs), MarginalJob([mspec], target, True)]
    plan = Plan(jobs, predictor=pred, weight=run.weight, batch_rows=batch_rows, trials=trials)
    (pdp, alep, mp), _ = run_jobs(run.ddf, plan, name="daskpd-compare")
    params = {"grid_resolution": grid_resolution, "percentiles": list(percentiles), "bins": bins,
              "sample_weight": run.weight, "model": pred.describe(), **trial_params(trials, band, plan.repeats, plan.response_std)}
    item = (feature,)
    fpd = pd_results([item], {feature: grid}, run.kinds, pred, pdp, params)[item]  # raises on no rows
    pdv = (finish_pd_variance("importance", [item], {item: fpd}, run.kinds, pred, pdp.n_rows, params)
           if len(grid) > 1 else None)  # a single grid value has no spread
    ale_res = finish_ale(specs[0], alep.feats[feature], pred, params)
    marg = finish_marginal(mspec, mp.feats[feature], target=target, response=pred.response, binning="quantile",
                           params=params)
    results, out_curves = {}, {}
    free_name = "StratPD" if kind == "numeric" else "CatStratPD"
    if ext_sp is not None:
        out_curves[free_name] = ext_sp
        results[free_name] = stratpd
    elif stratpd is True or (stratpd is None and target is not None):
        free = run_stratpd if kind == "numeric" else run_catstratpd
        sp = free(ds.frame, target=target, feature=feature,  # the frame opened above: no second read
                  progress=progress, storage_options=storage_options,
                  filters=filters, **(stratpd_kwargs or {}))
        out_curves[free_name] = _curve_of(sp, free_name)
        results[free_name] = sp
    out_curves["FPD"] = (fpd.grid_values[0], fpd.average)
    results["FPD"] = fpd
    if pdv is not None:
        results["pd_variance"] = pdv
    out_curves["ALE"] = (ale_res.x, ale_res.ale)
    results["ALE"] = ale_res
    if target is not None:
        out_curves["marginal (y)"] = (marg.x, marg.y_mean)
    out_curves["marginal (prediction)"] = (marg.x, marg.pred_mean)
    results["marginal"] = marg
    for k, v in extra_curves.items():
        out_curves[k] = v
        results[k] = extra[k]
    return ComparisonResult(feature=feature, target=target, curves=out_curves, results=results, params=params,
                            kind=kind)


def _numeric_plan(run, feature, grid_resolution, percentiles, bins):
    """A numeric feature's PD grid, ALE edges and marginal bins, every quantile they need
    resolved in the same order-statistics passes."""
    sums = summarize(run.ddf, {feature: "numeric"})
    s = sums[feature]
    if s.n == 0:
        raise DataError(f"feature {feature!r} has no non-missing values")
    extra_ranks = {}
    grid, pd_plan = pd_grid_plan(s, "numeric", grid_resolution, percentiles)  # partial_dependence's grid
    if pd_plan is not None:
        extra_ranks[feature] = [*pd_plan[0], *pd_plan[1]]
    extra_ranks.setdefault(feature, []).extend(marginal_ranks(s, bins, "quantile"))
    specs, _, _, stats = ale_specs(run, [feature], bins=bins, order={}, summaries=sums,
                                   extra_ranks=extra_ranks)
    if grid is None:
        grid = pd_grid(feature, stats[feature], pd_plan, grid_resolution)
    return grid, specs, marginal_spec(feature, "numeric", s, bins, "quantile", stats.get(feature, {}))
