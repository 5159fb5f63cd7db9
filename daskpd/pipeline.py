"""The model-free pipeline shared by stratpd, catstratpd and importances.

read (needed columns only) -> bottom-k sample (pass 1) -> fit one stratifying tree per
feature, in parallel, on the workers -> ONE scan applying every tree and building every
feature's per-(leaf, key) sums (pass 2) -> the caller's finish, one task per feature next
to its merged sums (on a worker when a Client is active), so that only results reach the
driver.

Passes over the data: exactly two per request, whatever the number of features and
bootstrap trials (sampling cannot be fused with the scan: the trees that the scan
applies are fitted on the sample).
"""
from __future__ import annotations

import numbers
import os
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from . import cluster
from .aggregate import FeatureAgg, StratPlan, map_reduce, strat_combine, strat_map
from .io import DataError, FeatureEncoder, as_float, check_columns, column_kinds, load
from .stratify import DEFAULT_TREE_METHOD, TREE_METHODS, bin_sample, fit_spec, sample_graph

__all__ = ["StratRun", "run_strat", "check_int", "resolve_columns"]


@dataclass
class StratRun:
    plan: StratPlan
    aggs: dict[str, FeatureAgg] | None  # None when the run was finished on the workers
    sample_rows: int
    n_partitions: int
    kinds: dict[str, str]
    timings: dict[str, float]
    sample: pd.DataFrame | None = None  # the tree-fitting sample (hash-ordered bottom-k rows)
    finished: dict | None = None  # {feature: finish(run, feature)} when run_strat was given ``finish``


def _finish_on_worker(aggs: dict, feature: str, plan: StratPlan, meta: dict, finish: Callable):
    """``finish`` of one feature, as a task next to the merged aggregate (see :func:`run_strat`)."""
    view = StratRun(plan=plan, aggs={feature: aggs[feature]}, sample_rows=meta["sample_rows"],
                    n_partitions=meta["n_partitions"], kinds=meta["kinds"], timings=dict(meta["timings"]))
    return finish(view, feature)


def check_int(name: str, value, minimum: int, allow_none: bool = False):
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise DataError(f"parameter {name} must be an integer >= {minimum}; got {value!r}")
    return int(value)


def resolve_columns(data, target: str, features: Sequence[str] | None, storage_options=None, filters=None):
    """The lazily-opened dataset (all columns) and the feature list (default: all but target)."""
    ddf = load(data, None, storage_options=storage_options, filters=filters)
    cols = [str(c) for c in ddf.columns]
    source = repr(os.fspath(data)) if isinstance(data, (str, os.PathLike)) else "data"
    if not isinstance(target, str):
        raise DataError(f"target must be a column name (str); got {target!r}")
    check_columns(cols, [target], source=source)
    if features is None:
        features = [c for c in cols if c != target]
    else:
        if isinstance(features, str):
            features = [features]
        features = [str(f) for f in features]
        check_columns(cols, features, source=source)
    return ddf, list(dict.fromkeys(features))


def run_strat(
    data,
    target: str,
    features: Sequence[str],
    *,
    stratify_on: Sequence[str] | None = None,
    kinds: dict[str, str] | None = None,
    min_samples_leaf: int = 15,
    sample_size: int = 200_000,
    max_bins: int | None = 1000,
    random_state: int = 0,
    n_trials: int = 0,
    nan_as_level: bool = False,
    expect_kind: str | None = None,
    min_samples_leaf_for: dict[str, int] | None = None,
    trial_fraction: float | None = None,
    tree_method: str = DEFAULT_TREE_METHOD,
    progress=None,
    storage_options=None,
    filters=None,
    finish: Callable | None = None,
) -> StratRun:
    """Run the pipeline for ``features`` (each stratified on ``stratify_on`` minus itself).

    ``finish(run, feature)``, if given, turns a feature's merged aggregate into its (small)
    result inside the scan's graph: one task per feature, run where the last combine ran
    (on a worker when a ``distributed.Client`` is active), so the per-(leaf, position)
    tables never travel to the driver; ``run`` there is a view holding only that
    feature's aggregate (no sample; timings of the sample and fit stages).  The results
    are in ``StratRun.finished`` and ``StratRun.aggs`` is None.  Without ``finish`` the
    merged aggregates come back in ``StratRun.aggs``.
    """
    min_samples_leaf = check_int("min_samples_leaf", min_samples_leaf, 1)
    sample_size = check_int("sample_size", sample_size, 2)
    max_bins = check_int("max_bins", max_bins, 2, allow_none=True)
    random_state = check_int("random_state", random_state, 0)
    n_trials = check_int("n_trials", n_trials, 0)
    # per-feature overrides of min_samples_leaf (e.g. importances: 5 for categorical features)
    min_samples_leaf_for = {str(f): check_int(f"min_samples_leaf for {f!r}", v, 1)
                            for f, v in (min_samples_leaf_for or {}).items()}
    if trial_fraction is not None and not (isinstance(trial_fraction, (int, float)) and 0 < trial_fraction < 1):
        raise DataError(f"parameter trial_fraction must be a number in (0, 1) or None; got {trial_fraction!r}")
    if tree_method not in TREE_METHODS:
        raise DataError(f"parameter tree_method must be one of {', '.join(map(repr, TREE_METHODS))}; "
                        f"got {tree_method!r}")
    features = [str(f) for f in features]
    if not features:
        raise DataError("no features to compute")
    if target in features:
        raise DataError(f"feature {target!r} is the target; partial dependence of a column on itself is meaningless")
    ddf_all, strat_cols = resolve_columns(data, target, stratify_on, storage_options, filters)
    strat_cols = [c for c in strat_cols if c != target]
    columns = list(dict.fromkeys([target, *features, *strat_cols]))
    check_columns(ddf_all.columns, features,
                  source=repr(os.fspath(data)) if isinstance(data, (str, os.PathLike)) else "data")
    ddf = load(ddf_all, columns)
    dkinds = column_kinds(ddf.dtypes)
    if dkinds[target] != "numeric":
        raise DataError(f"target {target!r} must be numeric; it has dtype {ddf.dtypes[target]}")
    kinds = {**{f: dkinds[f] for f in features}, **(kinds or {})}
    for f in features:
        if expect_kind == "numeric" and kinds[f] == "categorical":
            raise DataError(
                f"feature {f!r} is categorical (dtype {ddf.dtypes[f]}); StratPD needs a numeric feature. "
                f"Use daskpd.catstratpd(data, {target!r}, {f!r}) for categorical features.")
        if kinds[f] == "datetime":
            raise DataError(f"feature {f!r} is a datetime ({ddf.dtypes[f]}); convert it to a number first "
                            "(e.g. days since an epoch, or the year)")

    # pass 1: the sample
    t0 = time.perf_counter()
    (sample,) = cluster.compute(sample_graph(ddf, sample_size, random_state), progress=progress)
    if len(sample) == 0:
        raise DataError("data has no rows")
    y = as_float(sample[target])
    if not np.isfinite(y).any():
        raise DataError(f"target {target!r} has no finite values (in a sample of {len(sample):,} rows)")
    for f in features:
        col = sample[f]
        vals = as_float(col) if kinds[f] == "numeric" else col
        valid = np.isfinite(vals) if kinds[f] == "numeric" else col.notna().to_numpy()
        if not valid.any() and not (nan_as_level and kinds[f] == "categorical"):
            raise DataError(f"feature {f!r} has no non-missing values (in a sample of {len(sample):,} rows)")
        nuniq = pd.Series(np.asarray(vals)[valid]).nunique()
        if nuniq < 2 and not (nan_as_level and kinds[f] == "categorical" and not valid.all()):
            raise DataError(f"feature {f!r} is constant (a single distinct value in a sample of "
                            f"{len(sample):,} rows); its partial dependence is undefined")

    t1 = time.perf_counter()
    encoder = FeatureEncoder.fit(sample, list(dict.fromkeys([*strat_cols, *features])))

    # fit every feature's tree in parallel (on the workers when there is a cluster)
    from dask import delayed

    dsample = cluster.share(sample)
    # hist trees: the stratifying columns are binned once, for every feature's tree
    binned = delayed(bin_sample, pure=True)(dsample, target, strat_cols, encoder) if tree_method == "hist" else None
    tasks = []
    for f in features:
        other = [c for c in strat_cols if c != f]
        tasks.append(delayed(fit_spec, pure=True)(
            dsample, target, f, kinds[f], other, encoder, min_samples_leaf_for.get(f, min_samples_leaf), random_state,
            max_bins if kinds[f] == "numeric" else None, nan_as_level, tree_method, binned))
    specs = list(cluster.compute(*tasks, progress=False))
    t2 = time.perf_counter()

    plan = StratPlan(target=target, specs=specs, encoder=encoder, n_trials=n_trials, trial_fraction=trial_fraction,
                     random_state=random_state, weight_columns=columns)
    timings = {"sample_s": t1 - t0, "fit_s": t2 - t1}
    # pass 2: one scan, every feature (and, with ``finish``, every feature's result)
    shared_plan = cluster.share(plan)
    merged = map_reduce(ddf, strat_map, strat_combine, shared_plan, name="daskpd-strat")
    aggs = finished = None
    if finish is None:
        (aggs,) = cluster.compute(merged, progress=progress)
    else:
        meta = {"sample_rows": len(sample), "n_partitions": ddf.npartitions, "kinds": kinds, "timings": timings}
        tasks = [delayed(_finish_on_worker, pure=True)(merged, f, shared_plan, meta, finish,
                                                       dask_key_name=f"daskpd-finish-{i}-{merged.key}")
                 for i, f in enumerate(features)]
        finished = dict(zip(features, cluster.compute(*tasks, progress=progress)))
    timings["scan_s"] = time.perf_counter() - t2
    return StratRun(plan=plan, aggs=aggs, sample_rows=len(sample), n_partitions=ddf.npartitions, kinds=kinds,
                    timings=timings, sample=sample, finished=finished)
