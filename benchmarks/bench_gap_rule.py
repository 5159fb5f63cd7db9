#!/usr/bin/env python
"""Issue 13: how should StratPD integrate across x positions that have some leaf slopes but
fewer than ``min_slopes_per_x``?  Evidence for the rule.

    .venv/bin/python benchmarks/bench_gap_rule.py [--parts synth,semi,real] [--sizes 1e3,1e4,1e5]
        [--seeds 5] [--msx 5,10,20] [--stratx-venv ~/.cache/daskpd-bench/stratx-new] [--check-engine]

(``--check-engine``: on the synthetic part, also run daskpd itself with each threshold and
``few_slopes="flat"`` / ``"interpolate"`` and report the largest difference from the
re-integration below -- 0 up to rounding when the engine implements the rules measured.)

How the curves are made.  daskpd is run ONCE per dataset with ``min_slopes_per_x=1`` (and
``max_bins=None``: the grid is the distinct x values, as stratx's).  ``res.to_frame()`` then
has, at every distinct x, the mean leaf slope over [x_i, x_{i+1}) of every position that has
at least one slope (``slope``) and how many slopes were averaged (``slope_count``).  For a
threshold m (``--msx``), a position is *valid* when slope_count >= m, and the curve is
re-integrated here, pd = [0] + cumsum(s_i * (x_{i+1} - x_i)), with s_i chosen by a rule:

* ``flat``      stratx 0.5: s_i = 0 wherever the position is not valid (NaN slope).
* ``interp``    proposal: at positions with 0 < slope_count < m between two valid positions,
                s_i = linear interpolation in x of the neighbouring valid slopes; where
                slope_count = 0 (no leaf covers [x_i, x_{i+1})), s_i = 0 (flat, as stratx).
* ``carry``     at 0 < slope_count < m between valid positions, s_i = the slope of the
                valid position to the left (seed 000's pseudo-code drops thin positions
                and integrates across them with the left slope); slope_count = 0: flat.
* ``interp0``   daskpd before issue 13: interpolation also across slope_count = 0 (shown
                for reference; issue 13 forbids it).
* ``raw``       no threshold: the mean of the few slopes is used as is (= m of 1).
* ``shrink``    at 0 < slope_count = c < m between valid positions, (c * mean of the c slopes
                + (m - c) * interpolated slope) / m: the few slopes, shrunk towards the
                interpolation in proportion to what they lack (not asked for; shown because
                ``raw`` does so well).

All rules are scored on the same positions: those stratx keeps for threshold m (x_i kept iff
position i or i-1 is valid), with pd anchored by its mean (anchor-free RMSE: the curve is
defined up to a constant).  ``rmse`` is unweighted over positions, ``wrmse`` weighted by the
rows at each position.

Parts:

* ``synth``: y = f(x1) + x2 + N(0, 0.3), x2 = x1 + N(0, 0.5) (codependent stratifier), x3 ~
  U(0, 1) irrelevant; x1 from ``uniform`` U(0, 3), ``clusters`` (4 clusters N(mu, 0.12),
  mu = 0.5, 1.2, 2.0, 2.8, sparse in between), ``lognormal`` exp(N(0, 0.6)), ``exponential``
  Exp(1), ``pareto`` Lomax(3) (skewed: long sparse right tails), ``bridge`` (60 % U(0, 1),
  5 % U(1, 4), 35 % U(4, 5): a sparse stretch inside the range), all rounded to 2 decimals
  (so the grid is uneven where data is sparse); f = x^2 (``quad``), 2 sin(2 x) (``sin``),
  3 sqrt(x) (``sqrt``).  Truth: f.
* ``semi``: the real x columns with a known response: california (housing_median_age,
  median_income rounded to 2 decimals, longitude), rent (bathrooms, bedrooms) and boston
  (lstat), y = f(x) + the other
  columns' real codependence (a linear function of the standardized other numeric columns)
  + heavy-tailed noise; f = a quadratic over the column's range.
* ``census`` (not in the default ``--parts``): on 23 real curves (california, rent, bike
  hour, boston), how many interior positions have 0 < slope_count < m (where the rule
  matters) or slope_count = 0.
* ``real``: agreement with stratx 0.5 on the real targets (median_house_value; rent price,
  1000 < price < 10000, latitude != 0), stratx run through benchmarks/stratx_runner.py
  (``--stratx-venv``), daskpd with tree_method="exact" (the same kind of tree).  Scored as
  anchor-free RMSE between each rule's curve and stratx's pdpy at stratx's pdpx, and
  max |difference| with both curves anchored at stratx's first position.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import pandas as pd

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "..", "shared", "data")
if not os.path.isdir(DATA):
    DATA = "/work/shared/data"

RULES = ("flat", "interp", "carry", "interp0", "raw", "shrink")


# ----------------------------------------------------------------------------- the rules

def rule_slopes(x, slope1, count, m, rule):
    """Effective slope over [x_i, x_{i+1}) and which positions have a defined slope."""
    n = len(x)
    slope1 = np.where(count > 0, slope1, np.nan)
    valid = count >= m
    eff = np.where(valid, slope1, 0.0)
    defined = valid.copy()
    if rule == "raw":
        defined = count > 0
        eff = np.where(defined, slope1, 0.0)
    elif rule != "flat":
        k = np.flatnonzero(valid)
        if len(k):
            inside = np.zeros(n, bool)
            inside[k[0]:k[-1] + 1] = True
            fill = ~valid & inside
            if rule != "interp0":
                fill &= count > 0
            i = np.flatnonzero(fill)
            if rule in ("interp", "interp0"):
                eff[i] = np.interp(x[i], x[k], slope1[k])
            elif rule == "shrink":
                w = count[i] / m
                eff[i] = w * slope1[i] + (1 - w) * np.interp(x[i], x[k], slope1[k])
            elif rule == "carry":
                eff[i] = slope1[k[np.searchsorted(k, i, side="right") - 1]]
            else:
                raise ValueError(rule)
            defined |= fill
    return eff, defined


def integrate(x, eff):
    return np.r_[0.0, np.cumsum(eff[:-1] * np.diff(x))]


def kept(defined):
    """stratx's kept positions: x_i iff slope i or i-1 is defined."""
    return defined | np.r_[False, defined[:-1]]


def curves(frame, m):
    """{rule: pd over frame.x} and the evaluation mask (stratx's kept set for threshold m)."""
    x = frame.x.to_numpy(float)
    s1 = frame.slope.to_numpy(float)
    c = frame.slope_count.to_numpy()
    out = {}
    for r in RULES:
        eff, _ = rule_slopes(x, s1, c, m, r)
        out[r] = integrate(x, eff)
    _, flat_defined = rule_slopes(x, s1, c, m, "flat")
    return out, kept(flat_defined)


def anchor_free_rmse(a, b, w=None):
    d = np.asarray(a, float) - np.asarray(b, float)
    w = np.ones_like(d) if w is None else np.asarray(w, float)
    mu = np.sum(w * d) / np.sum(w)
    return float(np.sqrt(np.sum(w * (d - mu) ** 2) / np.sum(w)))


def daskpd_frame(df, target, feature, **kw):
    import daskpd

    res = daskpd.stratpd(df, target, feature, min_slopes_per_x=1, max_bins=None, **kw)
    return res.to_frame()


def score_truth(frame, truth, m):
    cs, E = curves(frame, m)
    x = frame.x.to_numpy(float)
    t = truth(x)
    w = frame["count"].to_numpy(float)
    c = frame.slope_count.to_numpy()
    valid = c >= m
    k = np.flatnonzero(valid)
    inside = np.zeros(len(x), bool)
    if len(k):
        inside[k[0]:k[-1] + 1] = True
    row = {"positions": int(E.sum()), "under_min": int(np.sum(inside & ~valid & (c > 0))),
           "empty": int(np.sum(inside & (c == 0)))}
    for r in RULES:
        row[r] = anchor_free_rmse(cs[r][E], t[E])
        row["w_" + r] = anchor_free_rmse(cs[r][E], t[E], w[E])
    return row


# ----------------------------------------------------------------------------- synthetic

SHAPES = {
    "quad": lambda x: x ** 2,
    "sin": lambda x: 2 * np.sin(2 * x),
    "sqrt": lambda x: 3 * np.sqrt(np.maximum(x, 0)),
}


DISTS = ("uniform", "clusters", "lognormal", "exponential", "pareto", "bridge")


def draw_x(dist, n, rng):
    if dist == "uniform":
        x = rng.uniform(0, 3, n)
    elif dist == "lognormal":
        x = np.exp(rng.normal(0, 0.6, n))
    elif dist == "clusters":
        mu = np.array([0.5, 1.2, 2.0, 2.8])
        x = np.abs(mu[rng.integers(0, 4, n)] + rng.normal(0, 0.12, n))
    elif dist == "exponential":
        x = rng.exponential(1.0, n)
    elif dist == "pareto":
        x = rng.pareto(3.0, n)
    elif dist == "bridge":  # dense [0, 1], a sparse bridge over (1, 4] (5 % of rows), dense [4, 5]
        u = rng.uniform(0, 1, n)
        x = np.where(u < 0.6, rng.uniform(0, 1, n), np.where(u < 0.65, rng.uniform(1, 4, n), rng.uniform(4, 5, n)))
    else:
        raise ValueError(dist)
    return np.round(x, 2)


def synth_frame(dist, shape, n, seed):
    rng = np.random.default_rng([seed, n, 13])
    x1 = draw_x(dist, n, rng)
    x2 = x1 + rng.normal(0, 0.5, n)
    x3 = rng.uniform(0, 1, n)
    y = SHAPES[shape](x1) + x2 + rng.normal(0, 0.3, n)
    return pd.DataFrame({"x1": x1, "x2": x2, "x3": x3, "y": y})


def engine_check(df, fr, m):
    """max |difference| between daskpd's own curve with min_slopes_per_x=m (each
    ``few_slopes`` rule) and this script's re-integration with the same rule, over the
    positions daskpd supports (both are 0 at the first supported position); and whether
    the supported positions are the rule's kept ones.  0.0 / True: the script measures
    exactly what the engine does."""
    import daskpd

    x = fr.x.to_numpy(float)
    s1, c = fr.slope.to_numpy(float), fr.slope_count.to_numpy()
    out = {}
    for rule, engine_rule in (("flat", "flat"), ("interp", "interpolate")):
        res = daskpd.stratpd(df, "y", "x1", min_slopes_per_x=m, max_bins=None, few_slopes=engine_rule)
        eff, defined = rule_slopes(x, s1, c, m, rule)
        mine = integrate(x, eff)
        sup = res.supported
        same_support = bool(np.array_equal(sup, kept(defined)))
        diff = float(np.max(np.abs(res.pd[sup] - (mine[sup] - mine[sup][0])), initial=0.0))
        out[f"engine_{rule}_maxdiff"] = diff
        out[f"engine_{rule}_support"] = same_support
    return out


def part_synth(sizes, seeds, msx, check_engine=False):
    rows = []
    for dist in DISTS:
        for shape in SHAPES:
            for n in sizes:
                for seed in range(seeds):
                    df = synth_frame(dist, shape, n, seed)
                    fr = daskpd_frame(df, "y", "x1")
                    for m in msx:
                        row = score_truth(fr, SHAPES[shape], m)
                        if check_engine:
                            row.update(engine_check(df, fr, m))
                        rows.append(dict(dist=dist, shape=shape, n=n, seed=seed, m=m, **row))
    r = pd.DataFrame(rows)
    report(r, ["dist", "shape", "n", "m"], "synthetic: anchor-free RMSE vs the truth, mean over seeds")
    if check_engine:
        for rule in ("flat", "interp"):
            print(f"engine check, rule {rule}: max |daskpd - re-integration| {r[f'engine_{rule}_maxdiff'].max():.3g} "
                  f"; supported = kept positions in "
                  f"{int(r[f'engine_{rule}_support'].sum())}/{len(r)} runs")
    return r


# ----------------------------------------------------------------------------- semi-synthetic

def semi_cases():
    cal = pd.read_csv(os.path.join(DATA, "california_housing.csv"))
    cal["median_income"] = cal.median_income.round(2)
    cal = cal.drop(columns=["ocean_proximity", "median_house_value"])
    rent = pd.read_csv(os.path.join(DATA, "rent.csv"))
    rent = rent[(rent.price > 1_000) & (rent.price < 10_000) & (rent.latitude != 0)].drop(columns=["price"])
    boston = pd.read_csv(os.path.join(DATA, "boston.csv")).drop(columns=["rownames", "medv"], errors="ignore")
    return [("california", cal, "housing_median_age"), ("california", cal, "median_income"),
            ("california", cal, "longitude"), ("rent", rent, "bathrooms"), ("rent", rent, "bedrooms"),
            ("boston", boston, "lstat")]


def semi_frame(X, feature, seed):
    """y = f(feature) + linear(other columns, standardized, NaN -> 0) + 0.3 t_3 noise, with
    f a quadratic that rises by 10 over the 1st..99th percentile of the feature."""
    rng = np.random.default_rng([seed, 7])
    x = X[feature].to_numpy(float)
    lo, hi = np.nanpercentile(x, [1, 99])
    a = 10.0 / (hi - lo) ** 2

    def f(v):
        return a * (np.asarray(v, float) - lo) ** 2

    others = [c for c in X.columns if c != feature and pd.api.types.is_numeric_dtype(X[c])]
    Z = X[others].to_numpy(float)
    Z = np.nan_to_num((Z - np.nanmean(Z, 0)) / np.nanstd(Z, 0))
    beta = rng.normal(0, 1, Z.shape[1])
    df = X.copy()
    df["y"] = f(x) + Z @ beta + 0.3 * rng.standard_t(3, len(x))
    return df, f


def part_semi(seeds, msx):
    rows = []
    for data, X, feature in semi_cases():
        for seed in range(seeds):
            df, f = semi_frame(X, feature, seed)
            fr = daskpd_frame(df, "y", feature)
            for m in msx:
                rows.append(dict(data=data, feature=feature, seed=seed, m=m, **score_truth(fr, f, m)))
    r = pd.DataFrame(rows)
    report(r, ["data", "feature", "m"], "semi-synthetic (real x, known f): anchor-free RMSE vs the truth, mean over seeds")
    return r


# ----------------------------------------------------------------------------- real vs stratx

def run_stratx(venv, df, target, feature, m, workdir):
    path = os.path.join(workdir, f"{feature}.parquet")
    df.to_parquet(path, index=False)
    out = os.path.join(workdir, f"{feature}_{m}.json")
    cmd = [os.path.join(os.path.expanduser(venv), "bin", "python"), os.path.join(HERE, "stratx_runner.py"),
           "--method", "stratpd", "--data", path, "--target", target, "--feature", feature,
           "--min-slopes-per-x", str(m), "--out", out]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=900)
    s = json.load(open(out))
    if not s["ok"]:
        raise RuntimeError(s["error"])
    return s


def part_real(venv, msx):
    cal = pd.read_csv(os.path.join(DATA, "california_housing.csv"))
    cal["median_income"] = cal.median_income.round(2)
    rent = pd.read_csv(os.path.join(DATA, "rent.csv"))
    rent = rent[(rent.price > 1_000) & (rent.price < 10_000) & (rent.latitude != 0)]
    boston = pd.read_csv(os.path.join(DATA, "boston.csv")).drop(columns=["rownames"], errors="ignore")
    cases = [(cal, "median_house_value", "housing_median_age"), (cal, "median_house_value", "median_income"),
             (cal, "median_house_value", "longitude"), (rent, "price", "bathrooms"), (rent, "price", "bedrooms"),
             (boston, "medv", "lstat")]
    rows = []
    with tempfile.TemporaryDirectory() as wd:
        for df, target, feature in cases:
            # the same leaves as stratx: stratx's own slopes at every position (its run with m = 1)
            s1 = run_stratx(venv, df, target, feature, 1, wd)
            frames = {
                "stratx": pd.DataFrame({"x": s1["x_all"], "slope": np.asarray(s1["slope_at_x_all"], dtype=float),
                                        "slope_count": s1["slope_counts_at_x_all"]}),
                "daskpd": daskpd_frame(df, target, feature, tree_method="exact"),
            }
            for m in msx:
                s = run_stratx(venv, df, target, feature, m, wd)
                sx = np.asarray(s["x"], float)
                sy = np.asarray(s["pd"], float)
                for leaves, fr in frames.items():
                    x = fr.x.to_numpy(float)
                    cs, E = curves(fr, m)
                    pos = np.searchsorted(x, sx)
                    ok = (pos < len(x)) & np.isclose(x[np.minimum(pos, len(x) - 1)], sx)
                    c = fr.slope_count.to_numpy()
                    v = c >= m
                    k = np.flatnonzero(v)
                    inside = np.zeros(len(x), bool)
                    if len(k):
                        inside[k[0]:k[-1] + 1] = True
                    row = dict(target=target, feature=feature, m=m, leaves=leaves, positions=len(sx),
                               under_min=int(np.sum(inside & ~v & (c > 0))),
                               same_kept=bool(ok.all() and np.array_equal(np.flatnonzero(E), pos)),
                               stratx_range=float(np.ptp(sy)) if len(sy) else np.nan)
                    for r in RULES:
                        cv = cs[r][pos[ok]]
                        row["max_" + r] = float(np.max(np.abs((cv - cv[0]) - (sy[ok] - sy[ok][0]))))
                    rows.append(row)
    r = pd.DataFrame(rows)
    print("\n== real data: max |curve - stratx's curve| (both anchored at stratx's first x), at stratx's positions;")
    print("   leaves=stratx: the rules applied to stratx's own slopes (its run with min_slopes_per_x=1);")
    print("   leaves=daskpd: daskpd's slopes, tree_method='exact'")
    cols = ["target", "feature", "m", "leaves", "positions", "under_min", "same_kept", "stratx_range"]
    print(r[cols + ["max_" + x for x in RULES]].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    return r


# ----------------------------------------------------------------------------- census

def part_census(msx):
    """How often does the rule matter on real data?  Interior positions with
    0 < slope_count < m (between the first and the last valid position) and interior
    positions with slope_count = 0, for 23 real curves (daskpd, tree_method="exact")."""
    cal = pd.read_csv(os.path.join(DATA, "california_housing.csv"))
    rent = pd.read_csv(os.path.join(DATA, "rent.csv"))
    rent = rent[(rent.price > 1_000) & (rent.price < 10_000) & (rent.latitude != 0)]
    bike = pd.read_csv(os.path.join(DATA, "bike_hour.csv")).drop(
        columns=["instant", "dteday", "casual", "registered"], errors="ignore")
    boston = pd.read_csv(os.path.join(DATA, "boston.csv")).drop(columns=["rownames"], errors="ignore")
    cases = [(cal, "median_house_value", c) for c in ["housing_median_age", "total_rooms", "total_bedrooms",
                                                      "population", "households", "median_income", "latitude",
                                                      "longitude"]]
    cases += [(rent, "price", c) for c in ["bathrooms", "bedrooms", "latitude", "longitude"]]
    cases += [(bike, "cnt", c) for c in ["temp", "atemp", "hum", "windspeed", "hr"]]
    cases += [(boston, "medv", c) for c in ["crim", "lstat", "rm", "age", "dis", "tax"]]
    rows = []
    for df, t, f in cases:
        c = daskpd_frame(df, t, f, tree_method="exact").slope_count.to_numpy()
        for m in msx:
            v = c >= m
            k = np.flatnonzero(v)
            inside = np.zeros(len(c), bool)
            if len(k):
                inside[k[0]:k[-1] + 1] = True
            rows.append(dict(target=t, feature=f, m=m, positions=len(c), valid=int(v.sum()),
                             interior_under_min=int(np.sum(inside & ~v & (c > 0))),
                             interior_empty=int(np.sum(inside & (c == 0)))))
    r = pd.DataFrame(rows)
    print("\n== census: interior positions where the rule matters, real curves")
    print(r.to_string(index=False))
    print(r.groupby("m")[["interior_under_min", "interior_empty"]].agg(
        lambda v: f"{int((v > 0).sum())} curves, {int(v.sum())} positions").to_string())
    return r


# ----------------------------------------------------------------------------- report

def report(r, keys, title):
    print(f"\n== {title}")
    g = r.groupby(keys)
    tab = g[list(RULES)].mean()
    tab["best"] = tab[list(RULES[:3])].idxmin(axis=1)  # among the rules that keep empty intervals flat
    tab["under_min"] = g.under_min.mean().round(1)
    tab["empty"] = g.empty.mean().round(1)
    tab["positions"] = g.positions.mean().round(0)
    print(tab.to_string(float_format=lambda v: f"{v:.4g}"))
    # paired comparison over the runs (dataset, seed, m) where flat and interp give different curves
    d = r[(r["interp"] - r["flat"]).abs() > 1e-9 * r["flat"].abs().clip(lower=1e-12)]
    print(f"runs where the rules give different curves: {len(d)} of {len(r)}")
    if not len(d):
        return
    by = "n" if "n" in d else None
    groups = list(d.groupby(by)) if by else []
    groups.append(("all", d))
    out = []
    for key, g in groups:
        row = {by or "runs": key, "runs": len(g)}
        for a in ("interp", "carry", "raw", "shrink"):
            ratio = g[a] / g["flat"]
            row[f"{a}/flat"] = np.exp(np.log(ratio).mean())
            row[f"{a} wins"] = f"{int((ratio < 1).sum())}/{len(g)}"
        for a in ("flat", "interp", "carry", "raw", "shrink"):
            row["mean " + a] = g[a].mean()
        out.append(row)
    print("geometric mean of RMSE ratios vs flat (< 1: nearer the truth than flat), wins = runs with lower RMSE "
          "than flat; mean RMSE of each rule over those runs:")
    print(pd.DataFrame(out).to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    for a, b in (("interp", "flat"), ("shrink", "interp")):
        ratio = d[a] / d[b]
        print(f"{a}/{b} over all {len(d)} runs: min {ratio.min():.3g}, 90th percentile {ratio.quantile(0.9):.3g}, "
              f"max {ratio.max():.3g}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", default="synth,semi,real")
    ap.add_argument("--sizes", default="1e3,1e4,1e5")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--msx", default="5,10,20", help="min_slopes_per_x thresholds to evaluate")
    ap.add_argument("--stratx-venv", default="~/.cache/daskpd-bench/stratx-new")
    ap.add_argument("--csv", default=None, help="write every row of every part to this CSV prefix")
    ap.add_argument("--check-engine", action="store_true",
                    help="synth: also run daskpd with each min_slopes_per_x and few_slopes rule and compare")
    a = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    pd.set_option("display.width", 250)
    parts = a.parts.split(",")
    msx = [int(v) for v in a.msx.split(",")]
    out = {}
    if "synth" in parts:
        out["synth"] = part_synth([int(float(s)) for s in a.sizes.split(",")], a.seeds, msx, a.check_engine)
    if "semi" in parts:
        out["semi"] = part_semi(a.seeds, msx)
    if "real" in parts:
        out["real"] = part_real(a.stratx_venv, msx)
    if "census" in parts:
        out["census"] = part_census(msx)
    if a.csv:
        for k, v in out.items():
            v.to_csv(f"{a.csv}_{k}.csv", index=False)


if __name__ == "__main__":
    sys.exit(main())
