"""Compile daskpd's numba kernels ahead of the first request (``daskpd compile``).

daskpd's kernels are numba functions compiled on first call and kept in numba's on-disk
cache (``cache=True``: under ``NUMBA_CACHE_DIR`` when set, else next to the modules).  On a cold
cache the first request of a kind pays the compile: tens of seconds on a laptop, and on
a cluster every worker process compiles the same kernels at the same time.

:func:`compile_kernels` runs every method once on a small synthetic table (the lake
generator's column kinds: small and large integers, floats, strings, a high-cardinality
integer code, a boolean), in this process with dask's threads, with one and with several
trials, so that the cache holds the kernels for the argument types the methods
pass.  Run it where the cache will be read: after installing into an image or a shared
environment, or once on a machine before its first job.  Nothing is written but numba's
cache; the results are discarded.
"""
from __future__ import annotations

import time
import warnings
from collections.abc import Callable

import daskpd

from .datasets import Lake

__all__ = ["compile_kernels"]


def _frame(rows: int):
    df = Lake(random_state=0).frame(rows)
    df["flag"] = (df["x1"] % 3) == 0
    return df


def _steps(rows: int) -> list[tuple[str, Callable]]:
    from sklearn.ensemble import GradientBoostingRegressor, HistGradientBoostingRegressor


    df = _frame(rows)
    num = ["x1", "x2", "x5", "x7"]
    models = {}

    def model(kind):
        if kind not in models:
            X = df[num]
            if kind == "hgb":
                models[kind] = HistGradientBoostingRegressor(max_iter=20, random_state=0).fit(X, df["y"])
            else:
                models[kind] = GradientBoostingRegressor(n_estimators=10, max_depth=3, random_state=0).fit(X, df["y"])
        return models[kind]

    q = {"progress": False}
    cat = {"categorical_features": ["k5000"], **q}
    return [
        ("importances", lambda: daskpd.importances(df, target="y", **cat)),
        ("importances, 3 trials", lambda: daskpd.importances(df, target="y", n_trials=3, **cat)),
        ("stratpd", lambda: [daskpd.stratpd(df, target="y", feature=f, **q) for f in ("x1", "x7", "flag")]),
        ("stratpd, 3 trials", lambda: [daskpd.stratpd(df, target="y", feature=f, n_trials=3, **q) for f in ("x1", "x7")]),
        ("stratpd, one tree", lambda: daskpd.stratpd(df, target="y", feature="x5", n_trials=3, honest=False, **q)),
        ("catstratpd", lambda: [daskpd.catstratpd(df, target="y", feature=f, **q) for f in ("s50", "flag")]),
        ("catstratpd, 3 trials", lambda: daskpd.catstratpd(df, target="y", feature="s50", n_trials=3, **q)),
        # two leaves of 70,000 rows (one tree: honest folds would halve them): groups whose
        # trial counts can pass 2^16 (the CG block in float64 instead of uint16,
        # categorical_buckets._count_type)
        ("catstratpd, 3 trials, large groups", lambda: daskpd.catstratpd(
            _frame(140_000)[["x1", "flag", "y"]], target="y", feature="flag", stratify_on=["x1"],
            min_samples_leaf=70_000, n_trials=3, honest=False, **q)),
        ("partial_dependence, recursion", lambda: daskpd.partial_dependence(
            model("hgb"), df, [("x1",), ("x7",), ("x1", "x7")], method="recursion", columns=num, **q)),
        ("partial_dependence, brute, gradient boosting, 3 trials", lambda: daskpd.partial_dependence(
            model("gbr"), df, [("x1",), ("x7",)], method="brute", columns=num, n_trials=3, **q)),
        ("partial_dependence, brute, 3 trials", lambda: daskpd.partial_dependence(
            model("hgb"), df, ["x5"], method="brute", columns=num, n_trials=3, **q)),
        ("ice", lambda: daskpd.ice(model("hgb"), df, "x7", columns=num, n_lines=20, **q)),
        ("ale", lambda: daskpd.ale(model("hgb"), df, ["x1", "x7", ("x1", "x7")], columns=num, **q)),
        ("ale, 3 trials", lambda: daskpd.ale(model("hgb"), df, ["x7"], columns=num, n_trials=3, **q)),
        ("marginal", lambda: daskpd.marginal(df, ["x7", "s50"], target="y", n_trials=3, **q)),
        ("pd_variance", lambda: daskpd.pd_variance(model("hgb"), df, ["x1", "x7"], columns=num, n_trials=3, **q)),
        ("pd_variance, interaction", lambda: daskpd.pd_variance(model("hgb"), df, [("x1", "x7")], columns=num,
                                                                measure="interaction", **q)),
    ]


def compile_kernels(rows: int = 20_000, log: Callable[[str], None] | None = print) -> float:
    """Run every method once on ``rows`` synthetic rows so numba compiles and caches the
    kernels; returns the seconds taken.  ``log`` receives one line per method; the
    warm-up's warnings (notes on its synthetic table) are not shown."""
    import dask

    t0 = time.perf_counter()
    # the synthetic table's own notes (an identifier-like column, a leak) say nothing about
    # the user's data: the warm-up is silent but for its log
    with dask.config.set(scheduler="threads"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, step in _steps(rows):
            t = time.perf_counter()
            step()
            if log is not None:
                log(f"{name}: {time.perf_counter() - t:.1f} s")
    return time.perf_counter() - t0
