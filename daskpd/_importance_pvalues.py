"""The importances' permutation p-values: the home of the permutation null, made on
the in-memory tree sample (no data pass): the trees refitted on a shuffled target, the
scan's own kernels run in memory (:func:`_null_measures`), one task per permutation on
the workers (:func:`permutation_pvalues`).
"""
from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np
import pandas as pd

from ._engine import scheduler
from ._engine.plan import run_local
from ._engine.progress import stage
from ._importance_result import MEASURES, curve_arrays, curve_measures
from ._strat.scan import leaf_numbering
from ._strat.trees import DEFAULT_TREE_METHOD, fit_tree

__all__ = ["permutation_pvalues"]


def _null_measures(sub: pd.DataFrame, scan, msl_for: dict, perm_seed, tree_method: str = DEFAULT_TREE_METHOD
                   ) -> np.ndarray:
    """(p, 3) raw measures on ``sub`` with y permuted by ``perm_seed`` (None: not permuted).

    The trees are refitted on the permuted y (as the reference's p-values do; one tree
    fitted on the rows it stratifies, for the observed statistic as for every
    permutation, so the test is exact); the keys (bins, values, levels) are the main
    run's.  The scan's own kernels, in memory.
    """

    target = scan.target
    df = sub
    if perm_seed is not None:
        df = sub.copy()
        perm = np.random.default_rng([int(scan.random_state), 7919, int(perm_seed)]).permutation(len(sub))
        df[target] = sub[target].to_numpy()[perm]
    feats = []
    for i, fs in enumerate(scan.features):
        tree = fit_tree(df, target, fs.other, scan.encoder, msl_for[fs.feature], scan.random_state,
                        tree_method=tree_method)
        index, n_leaves = leaf_numbering(tree, scan.random_state, i)
        feats.append(replace(fs, tree=tree, leaf_index=index, n_leaves=n_leaves, split=1))
    opts = replace(scan.finish_options, n_segments=0)
    job = replace(scan, features=feats, n_trials=0, n_buckets=1, expected_rows=len(df), finish_options=opts)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (results,) = run_local([df], [job])
    out = np.full((len(feats), 3), np.nan)
    for i, fs in enumerate(feats):
        (pdv, cnt), = curve_arrays(results[fs.feature], 1)
        out[i] = curve_measures(pdv, cnt, fs.estimator.column_kind)  # a curve over numbers or over levels
    return out


def permutation_pvalues(run, feats, msl_for, n_perm, k, tree_method=DEFAULT_TREE_METHOD):
    from dask import delayed

    sub = run.sample.iloc[:k]  # hash-ordered bottom-k rows: itself the bottom-k' sample
    dsub = scheduler.embed(sub)
    dscan = scheduler.embed(run.scan)
    tasks = [delayed(_null_measures, pure=True)(dsub, dscan, msl_for, seed, tree_method)
             for seed in [None, *range(n_perm)]]
    # Raw measures (units of y), not normalised ones: under a shuffled y every feature's
    # *share* is ~1/p, so a normalised statistic would test "larger than 1/p", not
    # "y depends on this feature".
    with stage("p-values"):
        out = np.stack(scheduler.compute(*tasks))  # (1 + n_perm, p, 3)
    obs, null = out[0], out[1:]
    with np.errstate(invalid="ignore"):
        reach = (null >= obs[None] - 1e-12 * np.abs(obs[None])).sum(axis=0)
    pv = (reach + 1.0) / (n_perm + 1.0)
    pv[~np.isfinite(obs)] = np.nan
    null_df = pd.DataFrame({
        "permutation": np.repeat(np.arange(1, n_perm + 1), len(feats)),
        "feature": np.tile(feats, n_perm),
        **{m: null[:, :, j].ravel() for j, m in enumerate(MEASURES)},
    })
    return pv, null_df
