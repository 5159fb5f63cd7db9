"""Passes 1 to 3 of a merged model plan (:func:`daskpd.model._multi.model_methods`): the
home of resolving what fixes its sums (:func:`resolve_layout`: one summary pass, the
grids', bins' and quantiles' order statistics resolved together, ALE's level order, the
marginal plot's own bins), of the grids' key per method (:func:`grid_key`) and of the
features' ranges a :class:`~daskpd.model._multi.Layout` records (:func:`feature_range`).
"""
from __future__ import annotations

from .._engine.stats import mquantile_ranks, order_statistics, summarize
from ._ale_specs import ale_specs, ale_summary_kinds
from ._grids import custom_grid, pd_grid, pd_grid_plan, quantile_values
from ._marginal import marginal_ranks, marginal_spec, rows_with_finite

__all__ = ["resolve_layout", "grid_key", "feature_range"]


def grid_key(method: str, p: dict):
    gr = p["grid_resolution"]
    if gr is None:  # pd_variance's default for importance
        gr = 100
    return gr, tuple(float(q) for q in p["percentiles"])


def resolve_layout(run, fe, params, target, with_target, phases, grid=None, quantiles=None):
    """Passes 1 and 2 (and 3): the summary, the grids' and bins' order statistics, ALE's
    level order, the marginal plot's own bins; ``fe`` is each method's features, ``grid``
    the custom grids, ``quantiles`` probabilities every numeric feature's quantiles are
    asked at.  Returns (grids, ALE specs, ALE order sources, marginal specs, the
    features' ranges: :attr:`Layout.ranges`, ``{feature: quantiles}``)."""
    kinds = run.kinds
    grid = grid or {}
    feats = list(dict.fromkeys(f for fs in fe.values() for f in fs))
    grid_methods = [m for m in ("partial_dependence", "ice", "pd_variance") if m in params]
    # 1. one summary pass (ALE may need the other model inputs too): every feature a
    # data-driven grid, a bin or a quantile needs
    need = [f for m in grid_methods for f in fe[m] if f not in grid]
    for m in ("ale", "marginal"):
        need += fe.get(m, [])
    qfeats = [f for f in feats if kinds[f] == "numeric"] if quantiles is not None else []
    want = {f: kinds[f] for f in dict.fromkeys([*need, *qfeats])}
    if "ale" in params:
        awant, _, _ = ale_summary_kinds(run, fe["ale"], {})
        want = {**want, **awant}
    if with_target:
        want = {**want, target: "numeric"}  # are the marginal plot's bins those of all rows?
    sums = {}
    if want:
        sums = summarize(run.ddf, want)
        phases.append("summary")
    # The marginal plot bins the rows it averages: with a target, those whose target is
    # finite.  When every target is finite these are all rows (the shared summaries and
    # quantiles serve); else its bins take a summary and quantiles of their own.
    marginal_own = with_target and sums[target].n_missing > 0

    # 2. every quantile, resolved together
    grid_plans: dict = {}  # (grid_resolution, percentiles) -> {feature: grid or rank plan}
    ranks: dict[str, list] = {}
    for m in grid_methods:
        key = grid_key(m, params[m])
        plans = grid_plans.setdefault(key, {})
        for f in fe[m]:
            if f in plans:
                continue
            if f in grid:
                plans[f] = custom_grid(f, grid[f], kinds[f])
                continue
            g, rk = pd_grid_plan(sums[f], kinds[f], key[0], key[1])
            plans[f] = g if g is not None else rk
            if g is None:
                ranks.setdefault(f, []).extend([*rk[0], *rk[1]])
    qplans = {}
    for f in qfeats:
        if sums[f].n > 0:
            qplans[f] = mquantile_ranks(sums[f].n, quantiles)
            ranks.setdefault(f, []).extend([*qplans[f][0], *qplans[f][1]])
    mp = params.get("marginal")
    if mp is not None and not marginal_own:
        for f in fe["marginal"]:
            if kinds[f] == "numeric" and sums[f].n > 0:
                ranks.setdefault(f, []).extend(marginal_ranks(sums[f], mp["bins"], mp["binning"]))
    ale_specs_ = sources = None
    if "ale" in params:
        ale_specs_, sources, sums, stats = ale_specs(run, fe["ale"], bins=params["ale"]["bins"], order={},
                                                     summaries=sums, extra_ranks=ranks)
    else:
        ranks = {c: r for c, r in ranks.items() if r}
        stats = order_statistics(run.ddf, sums, ranks) if ranks else {}
    if ranks or ale_specs_ is not None:
        phases.append("order statistics")
    if sources and "mds" in sources.values():
        phases.append("level order")  # ALE's ordering of unordered categorical levels

    grids = {}
    for key, plans in grid_plans.items():
        grids[key] = {f: (pd_grid(f, stats[f], pl, key[0]) if isinstance(pl, tuple) else pl)
                      for f, pl in plans.items()}
    qout = {}
    for f, plan in qplans.items():  # as build_grids: scipy's mquantiles
        qout[f] = quantile_values(stats[f], plan)
    mspecs = None
    if mp is not None:
        mf = fe["marginal"]
        msums, mstats = sums, stats
        if marginal_own:
            mddf = run.ddf.map_partitions(rows_with_finite, target, meta=run.ddf._meta)
            msums = summarize(mddf, {f: kinds[f] for f in mf})
            mranks = {f: marginal_ranks(msums[f], mp["bins"], mp["binning"]) for f in mf
                      if kinds[f] == "numeric" and msums[f].n > 0}
            mranks = {f: r for f, r in mranks.items() if r}
            mstats = order_statistics(mddf, msums, mranks) if mranks else {}
            phases.append("marginal bins")
        mspecs = [marginal_spec(f, kinds[f], msums[f], mp["bins"], mp["binning"], mstats.get(f, {}))
                  for f in mf]
    return (grids, ale_specs_, sources, mspecs, {f: feature_range(sums[f]) for f in feats if f in sums}, qout)


def feature_range(summary) -> dict:
    """:attr:`Layout.ranges`' entry of one column summary (JSON-able)."""
    if summary.kind == "categorical":
        return {"kind": "categorical", "levels": [str(v) for v in (summary.uniques if summary.uniques is not None
                                                                    else [])]}
    ok = summary.n > 0
    return {"kind": "numeric", "vmin": float(summary.vmin) if ok else None,
            "vmax": float(summary.vmax) if ok else None}
