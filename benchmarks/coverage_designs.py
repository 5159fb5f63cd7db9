"""The coverage studies of ``bench_bands.py --coverage``: designs with a known truth.

Each model-free design draws a table from a generator whose partial dependence is known
and names the feature, the truth and whether the stratifying columns can be separated by
the trees (``separable``: discrete stratifying columns; the band should then hold the
truth at its nominal rate) or only approximated (continuous codependent columns: the
curve carries the stratification's bias, which no band holds).  The model-based designs
fit nothing: a fixed function of the rows is the model, and its partial dependence, ALE
and marginal means are computed exactly on the population.

For every design, seed and scheme (``honest`` True: 2-fold cross-fitted trees, the
default; False: one tree on every row, stratx's) the study records, at the positions
with a band of nonzero width: how often the truth lies in the 90 % band (coverage), the
standard deviation of ``(estimate - truth) / std`` (1 when the band's width is right),
the slope of the estimate regressed on the truth (1: no shrinkage), and for a feature
with no effect how often the summary says "NOT distinguishable from flat".
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

EFFECTS = np.array([0.0, 1.0, 3.0, 2.5])


@dataclass
class Design:
    name: str
    kind: str  # "numeric" | "categorical"
    separable: bool
    make: Callable  # (rng, n) -> (frame, feature, truth): truth(x) for numeric, {category: effect} otherwise
    note: str


def _discrete(rng, n):
    x1 = rng.integers(0, 11, n).astype(float)
    x2 = rng.integers(0, 5, n) / 4
    c = rng.integers(0, 4, n)
    y = 0.5 * x1 ** 2 + 4 * x2 + EFFECTS[c] + rng.normal(0, 1, n)
    return pd.DataFrame({"x1": x1, "x2": x2, "c": c.astype(str), "y": y}), "x1", lambda v: 0.5 * v ** 2


def _codependent_discrete(rng, n):
    x1 = rng.integers(0, 11, n).astype(float)
    x2 = np.clip(np.round(x1 / 2 + rng.normal(0, 1.5, n)), 0, 6)
    y = 0.5 * x1 ** 2 + 2 * x2 + rng.normal(0, 1, n)
    return pd.DataFrame({"x1": x1, "x2": x2, "y": y}), "x1", lambda v: 0.5 * v ** 2


def _continuous_x_discrete_strata(rng, n):
    x2 = rng.integers(0, 6, n)
    x1 = np.clip(x2 / 5 + rng.normal(0, 0.3, n), -0.5, 1.5)
    y = 2 * x1 + x2 + rng.normal(0, 0.5, n)
    return pd.DataFrame({"x1": x1, "x2": x2.astype(float), "y": y}), "x1", lambda v: 2 * v


def _codependent_continuous(rng, n):
    x1 = rng.uniform(0, 1, n)
    x2 = x1 + rng.normal(0, 0.3, n)
    y = x1 + x2 + rng.normal(0, 0.5, n)
    return pd.DataFrame({"x1": x1, "x2": x2, "y": y}), "x1", lambda v: v


def _three(rng, n):
    x1 = rng.uniform(0, 1, n)
    x2 = x1 + rng.normal(0, 0.3, n)
    x3 = rng.uniform(0, 1, n)
    y = x1 + x2 + x3 + rng.normal(0, 0.3, n)
    return pd.DataFrame({"x1": x1, "x2": x2, "x3": x3, "y": y}), "x1", lambda v: v


def _noise(rng, n):
    x1 = rng.integers(0, 11, n).astype(float)
    x2 = rng.integers(0, 5, n) / 4
    y = 4 * x2 + rng.normal(0, 1, n)
    return pd.DataFrame({"x1": x1, "x2": x2, "y": y}), "x1", lambda v: 0 * v


def _cat_discrete(rng, n):
    x2 = rng.integers(0, 5, n)
    c = np.clip((x2 + rng.normal(0, 1.5, n)).astype(int), 0, 5)
    eff = np.linspace(0, 2, 6)
    y = eff[c] + 3 * x2 + rng.normal(0, 1, n)
    return (pd.DataFrame({"c": c.astype(str), "x2": x2.astype(float), "y": y}), "c",
            {str(k): eff[k] for k in range(6)})


def _cat_continuous(rng, n):
    x2 = rng.uniform(0, 1, n)
    c = np.clip((x2 * 6 + rng.normal(0, 1.5, n)).astype(int), 0, 5)
    eff = np.linspace(0, 2, 6)
    y = eff[c] + 3 * x2 + rng.normal(0, 1, n)
    return (pd.DataFrame({"c": c.astype(str), "x2": x2, "y": y}), "c",
            {str(k): eff[k] for k in range(6)})


DESIGNS = {d.name: d for d in (
    Design("discrete", "numeric", True, _discrete,
           "y = 0.5 x1^2 + 4 x2 + effect[c] + N(0,1); x1 in 0..10, x2 5 levels, c 4 levels, independent"),
    Design("codependent discrete", "numeric", True, _codependent_discrete,
           "y = 0.5 x1^2 + 2 x2 + N(0,1); x2 = round(x1 / 2 + N(0, 1.5)) clipped to 0..6"),
    Design("continuous x and discrete strata", "numeric", True, _continuous_x_discrete_strata,
           "y = 2 x1 + x2 + N(0, .5); x2 in 0..5, x1 = x2 / 5 + N(0, .3) (binned x, 1-row cells)"),
    Design("codependent continuous", "numeric", False, _codependent_continuous,
           "y = x1 + x2 + N(0, .5); x2 = x1 + N(0, .3)"),
    Design("three: x2 codependent and x3 continuous", "numeric", False, _three,
           "y = x1 + x2 + x3 + N(0, .3); x2 = x1 + N(0, .3), x3 ~ U(0, 1)"),
    Design("no effect", "numeric", True, _noise, "y = 4 x2 + N(0,1); x1 in 0..10 has no effect"),
    Design("categorical: discrete codependent", "categorical", True, _cat_discrete,
           "y = effect[c] + 3 x2 + N(0,1); x2 in 0..4, c = x2 + N(0, 1.5) clipped to 0..5"),
    Design("categorical: continuous codependent", "categorical", False, _cat_continuous,
           "y = effect[c] + 3 x2 + N(0,1); x2 ~ U(0,1), c = 6 x2 + N(0, 1.5) clipped to 0..5"),
)}


def _slope(est, truth) -> float:
    """The least-squares slope of the estimate on the truth (with an intercept)."""
    t = truth - truth.mean()
    d = float((t * t).sum())
    return float((t * (est - est.mean())).sum() / d) if d > 0 else float("nan")


def _moments(est, truth) -> tuple:
    """``(sum (t - t_mean)(e - e_mean), sum (t - t_mean)^2)``: a seed's share of the
    slope pooled over seeds."""
    t = truth - truth.mean()
    return float((t * (est - est.mean())).sum()), float((t * t).sum())


def model_free(design: Design, seed: int, n: int, n_trials: int, honest: bool) -> dict:
    import daskpd
    from daskpd.results.curves import flat_test

    rng = np.random.default_rng(seed)
    df, feature, truth = design.make(rng, n)
    fn = daskpd.stratpd if design.kind == "numeric" else daskpd.catstratpd
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = fn(df, target="y", feature=feature, n_trials=n_trials, random_state=seed, honest=honest, progress=False)
    b = r.band()
    if design.kind == "numeric":
        a = int(np.flatnonzero(r.supported)[0])
        tv = truth(r.x) - truth(r.x[a])
    else:
        tv = np.array([truth[str(c)] for c in r.categories])
        tv = tv - tv[int(np.nanargmin(r.pd))]  # 0 where the curve is 0
    ok = np.isfinite(r.pd) & np.isfinite(b["std"]) & (b["std"] > 0)
    z = (r.pd[ok] - tv[ok]) / b["std"][ok]
    hit = (tv[ok] >= b["lo"][ok]) & (tv[ok] <= b["hi"][ok])
    return {"hits": int(hit.sum()), "m": int(ok.sum()), "z": z, "slope": _slope(r.pd[ok], tv[ok]),
            "sxy_sxx": _moments(r.pd[ok], tv[ok]),
            "flat": bool(flat_test(r)), "in_band": bool(np.all((b["lo"][ok] <= r.pd[ok]) & (r.pd[ok] <= b["hi"][ok])))}


def _model(d: pd.DataFrame) -> np.ndarray:
    x1, x2 = d["x1"].to_numpy(float), d["x2"].to_numpy(float)
    return x1 ** 2 + 3 * x1 * x2 + np.sin(4 * x2)


SIN_MEAN = (1 - np.cos(4.0)) / 4  # E[sin(4 x2)], x2 ~ U(0, 1)


def model_based(curve: str, seed: int, n: int, n_trials: int) -> dict:
    """One seed of a model-based curve of the fixed model ``f = x1^2 + 3 x1 x2 +
    sin(4 x2)`` (x1, x2 independent U(0, 1)) against its population value."""
    import daskpd

    rng = np.random.default_rng(seed)
    d = pd.DataFrame({"x1": rng.uniform(0, 1, n), "x2": rng.uniform(0, 1, n)})
    kw = dict(n_trials=n_trials, random_state=seed, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if curve == "Friedman PD":
            r = daskpd.partial_dependence(_model, d, "x1", grid={"x1": np.linspace(0, 1, 11)}, **kw)
            v = r.grid_values[0]
            est, tv = r.average, v ** 2 + 1.5 * v + SIN_MEAN
        elif curve == "ICE average":
            r = daskpd.ice(_model, d, "x1", grid={"x1": np.linspace(0, 1, 11)}, **kw)
            est, tv = r.pd, r.grid ** 2 + 1.5 * r.grid + SIN_MEAN
        elif curve == "ALE":
            r = daskpd.ale(_model, d, "x1", bins=10, **kw)
            z = r.x
            f = z ** 2 - z[0] ** 2 + 1.5 * (z - z[0])
            w = np.asarray(r.count, float)[1:]  # the rows of the bin ending at each edge (0 at z_0)
            mid = (f[:-1] + f[1:]) / 2
            est, tv = r.ale, f - float((w * mid).sum() / w.sum())
        else:  # marginal means of y = f + N(0, 1) per quantile bin of x1
            d["y"] = _model(d) + rng.normal(0, 1, n)
            r = daskpd.marginal(d, "x1", target="y", bins=10, **kw)
            lo, hi = np.asarray(r.lo, float), np.asarray(r.hi, float)
            est = r.pd
            tv = (hi ** 3 - lo ** 3) / (3 * (hi - lo)) + 1.5 * (hi + lo) / 2 + SIN_MEAN
    b = r.band()
    est = np.asarray(est, float).ravel()
    tv = np.asarray(tv, float).ravel()
    lo_, hi_, sd = (np.asarray(b[k], float).ravel() for k in ("lo", "hi", "std"))
    ok = np.isfinite(est) & np.isfinite(sd) & (sd > 0)
    return {"hits": int(((tv[ok] >= lo_[ok]) & (tv[ok] <= hi_[ok])).sum()), "m": int(ok.sum()),
            "z": (est[ok] - tv[ok]) / sd[ok], "slope": _slope(est[ok], tv[ok]), "sxy_sxx": _moments(est[ok], tv[ok]),
            "flat": False,
            "in_band": bool(np.all((lo_[ok] <= est[ok]) & (est[ok] <= hi_[ok])))}


MODEL_CURVES = ("Friedman PD", "ICE average", "ALE", "marginal")


def summarise(recs: list) -> dict:
    hits, m = sum(r["hits"] for r in recs), sum(r["m"] for r in recs)
    slopes = np.array([r["slope"] for r in recs if np.isfinite(r["slope"])])
    z = np.concatenate([r["z"] for r in recs]) if recs else np.zeros(0)
    sxy = sum(r["sxy_sxx"][0] for r in recs)
    sxx = sum(r["sxy_sxx"][1] for r in recs)
    return {"coverage": hits / m if m else float("nan"), "positions": m, "z_sd": float(np.std(z)) if len(z) else np.nan,
            "pooled_slope": sxy / sxx if sxx > 0 else float("nan"),
            "slope": float(np.median(slopes)) if len(slopes) else np.nan,
            "slope_mean": float(slopes.mean()) if len(slopes) else np.nan,
            "slope_se": float(slopes.std(ddof=1) / np.sqrt(len(slopes))) if len(slopes) > 1 else np.nan,
            "flat_rate": float(np.mean([r["flat"] for r in recs])), "in_band": all(r["in_band"] for r in recs)}


def coverage(seeds: int, n: int, trials_list, designs=None, schemes=(True, False), models: bool = True,
             log=print) -> list:
    """Every design x scheme x T: the summary over ``seeds`` seeds of ``n`` rows."""
    import time

    out = []
    names = list(DESIGNS) if designs is None else list(designs)
    for T in trials_list:
        for name in names:
            for honest in schemes:
                t0 = time.perf_counter()
                recs = [model_free(DESIGNS[name], s, n, T, honest) for s in range(seeds)]
                out.append({"curve": "StratPD" if DESIGNS[name].kind == "numeric" else "CatStratPD",
                            "design": name, "honest": honest, "separable": DESIGNS[name].separable, "trials": T,
                            "seconds": time.perf_counter() - t0, **summarise(recs)})
                log(out[-1])
        if models:
            for curve in MODEL_CURVES:
                t0 = time.perf_counter()
                recs = [model_based(curve, s, n, T) for s in range(seeds)]
                out.append({"curve": curve, "design": "fixed model", "honest": None, "separable": True, "trials": T,
                            "seconds": time.perf_counter() - t0, **summarise(recs)})
                log(out[-1])
    return out
