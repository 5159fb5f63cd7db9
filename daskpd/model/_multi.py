"""Several model-based methods over the same features in one merged plan (as
:func:`daskpd.model._compare.compare` does for one feature).

The job runner asks for any of partial dependence, ICE, ALE, marginal plots and PD
variance at once.  Called one by one they would each summarise the columns, resolve
their quantiles and scan the data (3 features x 5 methods: 21 passes).  Here:

1. ONE summary pass over every feature (and the columns ALE's level ordering needs);
2. ONE order-statistics resolution for every grid, bin edge and quantile the methods need
   (one pass on data whose candidate ranges fit in memory, more on a lake);
3. (only for unordered categorical features with ALE) the level-ordering pass, and
   (only when the marginal plot's target has missing values: its bins come from the rows
   it averages) the marginal plot's own summary and quantiles;
4. ONE pass of every method's job (:func:`daskpd.model._passes.run_jobs`);

then each method's own finisher.  The results are the ones the public functions return
(same grids, same sums, bit for bit).  Passes 1 to 3 are
:func:`daskpd.model._multi_layout.resolve_layout`'s.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field


from .._engine.repeats import warn_repeats
from .._errors import DataError
from ._ale import ALEJob, ale, finish_ale
from .._engine.progress import stage_label
from ._fpd import partial_dependence
from ._pd_engine import engine_notice, known_rows
from ._pd_pass import PDJob
from ._pd_recursion import resolve_pd_method
from ._pd_result import pd_results
from ._hstat import h_items, h_notice, h_pass, h_points, h_statistic
from ._ice import ICEJob, finish_ice, ice
from ._marginal import MarginalJob, finish_marginal, marginal
from ._multi_layout import grid_key, resolve_layout
from ._params import PER_REQUEST, ModelOptions, TrialOptions, check_trials_method
from ._passes import Plan, Trials, run_jobs, trial_params, trial_row_id
from ._common import warn_method
from ._arrays import open_model_data
from ._setup import prepare_model_run
from ._variance import finish_pd_variance, pd_variance

__all__ = ["model_methods", "MethodsRun", "Layout", "Increment", "RequestOptions"]

#: the methods :func:`model_methods` runs, in output order
MODEL_METHODS = ("partial_dependence", "ice", "ale", "marginal", "pd_variance", "h_statistic")


def _defaults(method: str) -> dict:
    fn = {"partial_dependence": partial_dependence, "ice": ice, "ale": ale, "marginal": marginal,
          "pd_variance": pd_variance, "h_statistic": h_statistic}[method]
    sig = inspect.signature(fn)
    return {k: sig.parameters[k].default for k in PER_REQUEST[method]}


@dataclass
class MethodsRun:
    """What :func:`model_methods` returns: ``results[method]`` is ``{feature: result}``
    for the curve methods, one :class:`~daskpd.model._variance.PDVarianceResult` for
    ``pd_variance`` and one :class:`~daskpd.model._hstat.HStatisticResult` for
    ``h_statistic`` (every pair of the features, and each one's total H²); ``phases``
    names the phases that ran, in order ("summary", "order statistics", "level order",
    "marginal bins", "h points", "model").  "marginal bins" (a summary and quantiles of
    the rows whose target is finite) runs only when some target is missing; "h points"
    (the H-statistic's evaluation sample) only with ``h_statistic`` and no ``layout``.  Each is one pass over the data, except "order
    statistics": none when the summaries' distinct values answer, one when the candidate
    ranges fit in memory, a few more on a lake."""

    results: dict
    phases: list = field(default_factory=list)
    layout: "Layout | None" = None  # what fixed the sums (to run the same plan again on more rows)
    parts: list = field(default_factory=list)  # the pass's merged partials (with ``base_parts``: their sum)
    #: with ``apart``: ``(results of this pass's rows alone, results of base_parts alone)``
    apart: tuple | None = None
    #: with ``quantiles``: ``{feature: values}``, each numeric feature's exact quantiles
    quantiles: dict = field(default_factory=dict)


@dataclass
class Layout:
    """What fixes a merged plan's sums, given the model and the methods' parameters:
    every grid (``{(grid_resolution, percentiles): {feature: grid}}``), ALE's bin edges /
    level orders and where each order came from, the marginal plot's bins, partial
    dependence's resolved method and the H-statistic's evaluation points.  Given a layout, the pass's partials are sums over the
    rows (ICE's sampled lines: the rows of smallest seeded hash), so the partials of two
    sets of rows add up to those of their union (:func:`model_methods`' :class:`Increment`)."""

    features: list
    grids: dict
    ale: list | None = None
    ale_sources: dict | None = None
    marginal: list | None = None
    pd_method: str = "brute"
    h_points: object = None  # the H-statistic's evaluation points (EvalPoints)
    #: what the layout was built from, per feature: ``{"kind", "vmin", "vmax"}`` (numeric) or ``{"kind",
    #: "levels"}`` (categorical), so a later call can tell which new values fall outside it (None: not recorded)
    ranges: dict | None = None


@dataclass(frozen=True)
class Increment:
    """An earlier call's plan, extended by this one (:func:`model_methods`): its
    ``layout`` (:attr:`MethodsRun.layout`, the same model, features and parameters),
    used as it is; its ``base_parts`` (:attr:`MethodsRun.parts`), added to this pass's
    partials (None: this pass's rows alone, under the earlier grids); ``apart`` (with
    ``base_parts``): the curves of this pass's rows alone and of the earlier rows alone
    are finished too (:attr:`MethodsRun.apart`), for a new-against-old comparison."""

    layout: Layout
    base_parts: list | None = None
    apart: bool = False


@dataclass(frozen=True)
class RequestOptions:
    """What :func:`daskpd.model_curves` adds to a request of :func:`model_methods`
    (validated there): ``items`` (``{method: [tuple of features, ...]}``, each method's
    own entries among the features; pairs for partial dependence only; a method not in it
    takes every feature), ``grid`` (``{feature: values}``, the grid-based methods' custom
    grids), ``quantiles`` (probabilities: every numeric feature's exact ``mquantiles``,
    resolved with the grids, in :attr:`MethodsRun.quantiles`), ``warn_default`` (partial
    dependence's default method warns where scikit-learn's default would use tree
    recursion, as :func:`daskpd.partial_dependence`) and ``name`` (the pass's task name)."""

    items: dict | None = None
    grid: dict | None = None
    quantiles: object = None
    warn_default: bool = False
    name: str = "daskpd-model-methods"


def model_methods(model, data, features, methods: dict, *, target: str | None = None,
                  model_options: ModelOptions = ModelOptions(), trial_options: TrialOptions = TrialOptions(),
                  request: RequestOptions = RequestOptions(), increment: Increment | None = None) -> MethodsRun:
    """Run ``methods`` (``{method: {parameter: value}}``, parameters as the public
    functions') for ``features`` in one merged plan (see the module docstring).

    ``target`` is the marginal plot's response column (else it plots the prediction
    only).  ``model_options`` (:class:`~daskpd.model._params.ModelOptions`): how the
    model is called, for every method.  ``trial_options``
    (:class:`~daskpd.model._params.TrialOptions`): ``random_state`` seeds ICE's line
    sample and the trials; ``n_trials`` > 1: every method's bootstrap trials ride the one
    pass (the public functions' ``n_trials``, ``bootstrap``, ``subsample_size``, ``band``,
    ``row_id``: the same weights for every method), so every curve carries its band and
    pd_variance its ``importance_std`` / ``_lo`` / ``_hi``; partial dependence's
    ``method="auto"`` is then brute force.  Parameters are taken as valid (the job spec
    validated them against the public functions' constraints).

    ``increment`` (an :class:`Increment`: an earlier call's layout, with the same model,
    features and parameters): its grids and bins are used as they are (no summary or
    quantile pass: the only pass is the methods' one), and its ``base_parts`` (that
    call's ``parts``) are added to this pass's partials, so the results are those of the
    earlier rows and these together, under the earlier grids.  The result's ``layout``
    and ``parts`` are what a later call takes.  With ``apart``, the curves of this pass's
    rows alone and of the earlier rows alone are finished too (``MethodsRun.apart``: the
    same finishers on each side's partials).

    ``request`` (a :class:`RequestOptions`): what :func:`daskpd.model_curves` adds
    (each method's items, custom grids, quantiles, the default method's warning, the
    pass's name).
    """
    mo, to = model_options, trial_options
    response, target_class, columns, engine = mo.response, mo.target_class, mo.columns, mo.engine
    categorical_features, sample_weight, batch_rows, filters = (mo.categorical_features, mo.sample_weight,
                                                                mo.batch_rows, mo.filters)
    random_state, band = to.random_state, to.band
    items, grid, quantiles, warn_default, name = (request.items, request.grid, request.quantiles,
                                                  request.warn_default, request.name)
    layout, base_parts, apart = ((increment.layout, increment.base_parts, increment.apart) if increment is not None
                                 else (None, None, False))
    unknown = [m for m in methods if m not in MODEL_METHODS]
    if unknown:
        raise ValueError(f"unknown model-based method(s) {unknown}; expected some of {list(MODEL_METHODS)}")
    params = {m: {**_defaults(m), **(methods[m] or {})} for m in MODEL_METHODS if m in methods}
    feats = list(dict.fromkeys(features))
    its = {m: [tuple(it) for it in (items or {}).get(m) or [(f,) for f in feats]] for m in params}
    fe = {m: list(dict.fromkeys(f for it in its[m] for f in it)) for m in params}  # each method's features
    grid = dict(grid or {})
    ds = open_model_data(data)
    with_target = "marginal" in params and target is not None
    if with_target and columns is None and getattr(model, "feature_names_in_", None) is None:
        columns = [c for c in ds.columns if c != target]  # the target is never a model input
    trials = Trials.of(to.n_trials, to.bootstrap, to.subsample_size, random_state, to.row_id)
    run = prepare_model_run(model, ds, feats, columns=columns, response=response, target_class=target_class,
                            engine=engine, sample_weight=sample_weight, categorical_features=categorical_features,
                            extra_columns=[target] if with_target else [], row_id=trial_row_id(trials))
    pred, kinds = run.predictor, run.kinds
    phases: list[str] = []
    wcol = run.weight

    tparams = trial_params(trials, band)
    metas: list[dict] = []
    sets = 1 if trials is None else 1 + trials.n
    pd_method = "brute"
    if "partial_dependence" in params and trials is not None:
        check_trials_method("partial_dependence", trials.n, params["partial_dependence"]["method"])
    elif "partial_dependence" in params:
        if warn_default:
            warn_method(params["partial_dependence"]["method"], pred, run.weight, "average")
        pd_method = resolve_pd_method(params["partial_dependence"]["method"], pred, kinds, its["partial_dependence"],
                                      run.weight)

    ranges, qout = None, {}
    if layout is not None:
        if list(layout.features) != feats:
            raise ValueError(f"the layout is of features {layout.features}, not {feats}")
        grids, ale_specs_, sources, mspecs = layout.grids, layout.ale, layout.ale_sources, layout.marginal
        pd_method, ranges = layout.pd_method, getattr(layout, "ranges", None)
    elif set(params) - {"h_statistic"}:  # the H-statistic needs no grid: its own points
        grids, ale_specs_, sources, mspecs, ranges, qout = resolve_layout(run, fe, params, target, with_target,
                                                                   phases, grid, quantiles)
    else:
        grids, ale_specs_, sources, mspecs = {}, None, None, None
    mp = params.get("marginal")
    hpts = getattr(layout, "h_points", None) if layout is not None else None
    if "h_statistic" in params and hpts is None:
        hpts = h_points(run, params["h_statistic"]["n_points"], random_state, trials)
        phases.append("h points")

    # 3. the jobs, one pass
    jobs, finish, labels = [], [], []
    # ALE and the marginal plot call the model on rows (never the tree engine), as their
    # public functions record
    predict_only = {**pred.describe(), "tree_engine": False}
    if "partial_dependence" in params:
        p = params["partial_dependence"]
        g = grids[grid_key("partial_dependence", p)]
        items = its["partial_dependence"]
        meta = {"grid_resolution": p["grid_resolution"], "percentiles": list(p["percentiles"]),
                "custom_grid": sorted(f for f in grid if f in fe["partial_dependence"]),
                "sample_weight": wcol, "model": pred.describe(), "kind": "average", **tparams}
        metas.append(meta)  # the trials' params, completed once the pass has run
        if pd_method == "brute":
            meta["engine"], lab = engine_notice("partial_dependence", pred, items, g, kinds,
                                                known_rows(run.dataset, filters), model=model, sets=sets)
            labels.append(lab)
            job = PDJob([(it, [g[f] for f in it]) for it in items], kinds)
            jobs.append(job)
            finish.append(("partial_dependence", lambda part, g=g, meta=meta, items=items: {
                _key(it): r for it, r in pd_results(items, g, kinds, pred, part, meta).items()}))
        else:
            finish.append(("partial_dependence", lambda part, g=g, meta=meta, items=items: {
                _key(it): r for it, r in pd_results(items, g, kinds, pred, None, meta).items()}))
    if "ice" in params:
        p = params["ice"]
        g = grids[grid_key("ice", p)]
        for f in fe["ice"]:
            meta = {"grid_resolution": p["grid_resolution"], "percentiles": list(p["percentiles"]),
                    "n_lines": p["n_lines"], "random_state": random_state, "sample_weight": wcol,
                    "model": pred.describe(), "custom_grid": f in grid, "id_columns": [], **tparams}
            metas.append(meta)  # the trials' params, completed once the pass has run
            job = ICEJob(f, g[f], kinds, p["n_lines"], random_state)
            jobs.append(job)
            finish.append((("ice", f), lambda part, job=job, meta=meta, p=p: finish_ice(
                job, part, pred, centered=p["centered"], params=meta)))
    if "ale" in params:
        meta = {"bins": params["ale"]["bins"], "sample_weight": wcol, "model": predict_only, **tparams}
        metas.append(meta)  # the trials' params, completed once the pass has run
        jobs.append(ALEJob(ale_specs_))
        finish.append(("ale", lambda part, meta=meta, side=False: _kept({
            sp.feature: _side(side, finish_ale, sp, part.feats[sp.feature], pred, meta, sources.get(sp.feature))
            for sp in ale_specs_})))
    if mp is not None:
        meta = {"bins": mp["bins"], "sample_weight": wcol, "model": predict_only, **tparams}
        metas.append(meta)  # the trials' params, completed once the pass has run
        jobs.append(MarginalJob(mspecs, target if with_target else None, True))
        finish.append(("marginal", lambda part, meta=meta, side=False: _finish_marginals(mspecs, part, target, pred,
                                                                                          mp, meta, side)))
    if "pd_variance" in params:
        p = params["pd_variance"]
        key = grid_key("pd_variance", p)
        g = grids[key]
        vitems = its["pd_variance"]
        for f in fe["pd_variance"]:
            if len(g[f]) < 2:
                raise DataError(f"feature {f!r} has a single grid value (a constant column); its PD variance is "
                                "undefined")
        meta = {"grid_resolution": key[0], "percentiles": list(p["percentiles"]), "sample_weight": wcol,
                "model": pred.describe(), "custom_grid": sorted(f for f in grid if f in fe["pd_variance"]), **tparams}
        metas.append(meta)  # the trials' params, completed once the pass has run
        meta["engine"], lab = engine_notice("pd_variance", pred, vitems, g, kinds, known_rows(run.dataset, filters),
                                            model=model, sets=sets)
        labels.append(lab)
        jobs.append(PDJob([(it, [g[it[0]]]) for it in vitems], kinds))
        finish.append(("pd_variance", lambda part, g=g, meta=meta: finish_pd_variance(
            "importance", vitems, pd_results(vitems, g, kinds, pred, part, meta), kinds, pred, part.n_rows, meta)))
    if "h_statistic" in params:
        p = params["h_statistic"]
        pairs, totals = h_items(None, fe["h_statistic"], pred.columns, p["total"])
        hp = h_pass(run, pairs, totals, hpts)
        meta = {"n_points": p["n_points"], "sample_weight": wcol, "model": pred.describe(),
                "random_state": random_state, **tparams}
        metas.append(meta)  # the trials' params, completed once the pass has run
        meta["engine"], lab = h_notice(hp, run, pred, model, sets=sets)
        labels.append(lab)
        jobs.append(hp.job)
        finish.append(("h_statistic", lambda part, hp=hp, meta=meta: hp.finish(part, pred, kinds, meta)))
    parts, own = [], None
    if jobs:
        plan = Plan(jobs, predictor=pred, weight=run.weight, batch_rows=batch_rows, trials=trials)
        with stage_label(" | ".join(labels) or None):
            parts, _ = run_jobs(run.ddf, plan, name=name, warn=False,
                                rows=known_rows(run.dataset))
        if trials is not None:  # how often rows repeat: kept, and summed, with the partials
            parts.append(plan.sketch)
        phases.append("model")
        if base_parts is not None:  # the earlier rows' partials: the same jobs, summed
            if len(base_parts) != len(parts):
                raise ValueError(f"base_parts holds {len(base_parts)} partials; this plan makes {len(parts)}")
            own = parts
            parts = [type(b).combine([b, p]) for b, p in zip(base_parts, parts)]
        if trials is not None:  # the rows' repeats, with the earlier rows' when they are added
            repeats = parts[-1].repeats()
            warn_repeats(repeats, plan.weight_columns(run.ddf.columns))
            for m in metas:
                m.update(trial_params(trials, band, repeats, plan.response_std))

    # 4. each method's finisher
    def finish_all(parts, side=False):
        """``side``: one side of ``apart`` (its rows may leave a feature of ALE or the
        marginal plot with no row inside the kept bins: that curve is left out)."""
        results: dict = {}
        it_parts = iter(parts)
        for name, fin in finish:
            brute_free = name == "partial_dependence" and pd_method != "brute"
            part = None if brute_free else next(it_parts)
            out = fin(part, side=True) if side and name in ("ale", "marginal") else fin(part)
            if isinstance(name, tuple):
                results.setdefault(name[0], {})[name[1]] = out
            else:
                results[name] = out
        return {m: results[m] for m in MODEL_METHODS if m in results}

    sides = (finish_all(own, True), finish_all(base_parts, True)) if apart and own is not None else None
    return MethodsRun(finish_all(parts), phases,
                      Layout(feats, grids, ale_specs_, sources, mspecs, pd_method, hpts, ranges), parts, sides,
                      qout)


def _key(item):
    """A partial dependence's key, as :func:`daskpd.partial_dependence`'s dict: the
    feature, or the pair."""
    return item[0] if len(item) == 1 else item


def _side(side: bool, fn, *args):
    """``fn(*args)``; on one side of ``apart`` (``side``), None when its rows leave the
    curve undefined (a :class:`DataError`: no row inside the kept bins)."""
    try:
        return fn(*args)
    except DataError:
        if side:
            return None
        raise


def _kept(d: dict) -> dict:
    return {k: v for k, v in d.items() if v is not None}


def _finish_marginals(mspecs, part, target, pred, mp, meta, side=False) -> dict:
    out = {}
    for sp in mspecs:
        fp = part.feats[sp.feature]
        if fp.w.sum() <= 0:
            if side:
                continue
            raise DataError(f"feature {sp.feature!r}: no row has usable values")
        out[sp.feature] = _side(side, lambda: finish_marginal(sp, fp, target=target, response=pred.response,
                                                              binning=mp["binning"], params=meta))
    return _kept(out)
