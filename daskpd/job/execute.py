"""Compute a job: every model-free method in ONE ``run_strat`` (StratPD, CatStratPD and
the importances share the sample and the scan), every model-based method in ONE merged
model plan (:func:`daskpd.model.multi.model_methods`), on the cluster the job names.
"""
from __future__ import annotations

import contextlib
import os

from ..io import DataError
from .spec import JobSpec

__all__ = ["RunResult", "model_free", "model_based", "method_defaults", "connect", "close", "dashboard"]


class RunResult:
    """What a run computed, before it is written: result objects in the shared format."""

    def __init__(self):
        self.curves: dict = {}  # (method, feature) -> a CurveResult
        self.tables: dict = {}  # method -> a result whose to_frame() is an importance table
        self.figures: dict = {}
        self.phases: list = []  # the model plan's phases, by name


def model_free(spec: JobSpec, data, feats, cats, progress, res: RunResult, stats: dict) -> None:
    from ..importance import strat_curves_and_importances

    want = spec.model_free
    numeric = [f for f in feats if f not in cats]
    p_num = spec.params.get("stratpd") or method_defaults("stratpd")
    p_cat = spec.params.get("catstratpd") or method_defaults("catstratpd")
    p_imp = spec.params.get("importances") or method_defaults("importances")
    # the features whose curves are wanted (importances need them all)
    if "importances" in want:
        curve_feats = list(feats)
    else:
        curve_feats = ([f for f in numeric] if "stratpd" in want else []) + \
                      ([f for f in cats] if "catstratpd" in want else [])
        curve_feats = [f for f in feats if f in curve_feats]
    if not curve_feats:
        kinds = "numeric" if "stratpd" in want else "categorical"
        raise DataError(f"methods {', '.join(want)}: none of the features is {kinds} "
                        f"(features: {', '.join(feats)}; categorical: {', '.join(cats) or 'none'})")
    subsample = p_imp["subsample_size"] if 0 < p_imp["subsample_size"] < 1 else 0.75  # unused when bootstrapping
    out = strat_curves_and_importances(
        data, spec.target, features=curve_feats, stratify_on=list(feats), categorical=list(cats),
        n_trials=p_imp["n_trials"], bootstrap=p_imp["bootstrap"], subsample_size=subsample,
        pvalues=p_imp["pvalues"], pvalues_n_trials=p_imp["pvalues_n_trials"],
        pvalues_sample_size=p_imp["pvalues_sample_size"], min_samples_leaf=p_num["min_samples_leaf"],
        cat_min_samples_leaf=p_cat["min_samples_leaf"], min_slopes_per_x=p_num["min_slopes_per_x"],
        max_bins=p_num["max_bins"], nan_as_level=p_cat["nan_as_level"], sample_size=spec.sample_size,
        tree_method=spec.tree_method, random_state=spec.random_state, progress=progress)
    stats["kinds_used"] = dict(out.kinds)
    for f in curve_feats:
        r = out.curves[f]
        method = "catstratpd" if r.kind == "categorical" else "stratpd"
        if method in want:
            res.curves[(method, f)] = r
    if "importances" in want:
        res.tables["importances"] = out


def method_defaults(method: str) -> dict:
    from .spec import METHOD_PARAMS

    return {k: v.default for k, v in METHOD_PARAMS[method].items()}


def model_based(spec: JobSpec, ddf, model, inputs, mfeats, cats, progress, res: RunResult) -> None:
    """Every requested model-based method over the model's input columns, in one merged plan."""
    from ..model.multi import model_methods

    methods = {m: dict(spec.params.get(m) or method_defaults(m)) for m in spec.model_based}
    out = model_methods(model, ddf, list(mfeats), methods, target=spec.target, response=spec.model.response,
                        target_class=spec.model.target_class, columns=list(inputs),
                        categorical_features=[c for c in cats if c in inputs] or None,
                        random_state=spec.random_state, progress=progress)
    for method in spec.model_based:  # the spec's order
        r = out.results[method]
        if method == "pd_variance":
            res.tables[method] = r
        else:
            for f in mfeats:
                res.curves[(method, f)] = r[f]
    res.phases = list(out.phases)


def dashboard(client) -> str | None:
    try:
        link = client.dashboard_link
    except Exception:
        return None
    return link or None


def connect(spec: JobSpec, scheduler, security, n_workers, threads_per_worker):
    from .._engine import scheduler as _cluster

    where = scheduler or os.environ.get("DASK_SCHEDULER_ADDRESS") or spec.cluster.scheduler or None
    if where and where != "local":
        if where.startswith("tls://"):
            from distributed.security import Security

            sec = security if security is not None else Security()
            if sec.get_connection_args("client").get("ssl_context") is None:
                raise ConnectionError(
                    f"the scheduler {where} speaks TLS but no client certificate is configured: pass "
                    "--tls-ca-file, --tls-cert and --tls-key, or set Dask's distributed.comm.tls.* config "
                    "(e.g. DASK_CONFIG=certs/dask-tls.yaml from cluster/tls/make-certs.sh)")
        try:
            client, cl = _cluster.connect(where, security=security)
        except (OSError, TimeoutError) as exc:
            raise ConnectionError(f"cannot connect to the Dask scheduler at {where}: {exc} (is it running, and "
                                  "does it speak this protocol? a TLS-only scheduler needs tls:// and "
                                  "certificates)") from exc
        return client, cl, where
    client, cl = _cluster.connect(
        "local", n_workers=n_workers or spec.cluster.n_workers,
        threads_per_worker=threads_per_worker or spec.cluster.threads_per_worker,
        memory_limit=spec.cluster.memory_limit, security=security)
    return client, cl, "local"


def close(client, cluster) -> None:
    """Close the client, then the LocalCluster we started (never an existing cluster)."""
    for obj in (client, cluster):
        if obj is not None:
            with contextlib.suppress(Exception):
                obj.close(timeout=10)

