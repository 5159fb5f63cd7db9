#!/usr/bin/env python
"""Issue 13, item 4: StratPD of california housing_median_age, histogram tree vs exact tree
vs stratx 0.5 -- the cause, and which tree is nearer the truth on a synthetic twin.

    .venv/bin/python benchmarks/bench_houseage.py [--parts real,sub,synth] [--seeds 10]
        [--sizes 2e3,2e4,2e5] [--stratx-json FILE]

Part ``real``: /work/shared/data/california_housing.csv (``../shared/data`` relative to the
repo), target median_house_value, feature housing_median_age, every other column as a
stratifier (ocean_proximity a string: daskpd codes it by sorted level, as
benchmarks/stratx_runner.py does for stratx).  daskpd with ``tree_method="exact"`` and
``"hist"`` at 1023 (default), 4095, 16383 and 65535 bins per stratifying column (set by
overriding the module constants; on this branch ``"hist-adaptive"`` is the proposed
default: one bin per distinct value up to 65535), against stratx's curve
(``--stratx-json``: the runner's output, see below; default: look for
/tmp/h13/stratx_cal_all_age.json).  Printed: correlation and max |difference| with stratx
over the common positions, the mean slope over [2, 3) and its slope count.

Part ``sub``: 15 random 90 % subsamples of the rows (pandas ``sample(frac=0.9,
random_state=rep)``): mean and sd of the [2, 3) slope and of pd(52) for exact and hist-1023,
i.e. how much the estimate moves when the leaves move.

Part ``leaves``: the leaf segments covering x = 2 in the hist-1023 and exact trees (the five
most negative).  Part ``cost``: HistTree grow time with 1023 vs 65535 bins (california;
2e5 x 9 continuous columns) and scikit-learn's exact tree; stratpd's fit stage and x1 RMSE on
``Quadratic(decimals=2, x1_max=10)`` at 1e5 and 1e6 rows, 1023 vs adaptive bins.  (Neither is in the default
``--parts``.)

Part ``synth``: :class:`CalLike`, a synthetic twin with a known truth (see its docstring):
anchor-free RMSE of the whole curve against the truth and error of the first interval's
slope, for exact / hist-1023 / hist-adaptive, over ``--seeds`` data seeds at each size.

The stratx curve for part ``real``:

    python -c "import pandas as pd; pd.read_csv('../shared/data/california_housing.csv').to_parquet('/tmp/h13/cal_all.parquet', index=False)"
    ~/.cache/daskpd-bench/stratx-new/bin/python benchmarks/stratx_runner.py --method stratpd \\
        --data /tmp/h13/cal_all.parquet --target median_house_value --feature housing_median_age \\
        --out /tmp/h13/stratx_cal_all_age.json
"""
from __future__ import annotations

import argparse
import json
import os
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "..", "shared", "data")
if not os.path.isdir(DATA):
    DATA = "/work/shared/data"

T, F = "median_house_value", "housing_median_age"


def stratpd(df, target, feature, method, **kw):
    """daskpd.stratpd with tree method ``exact``, ``hist`` (the fixed 1023 bins per column of
    main), ``hist-<bins>`` or ``hist-adaptive`` (one bin per distinct value, at most 65535:
    the default since issue 13, ``TREE_BINS = "auto"`` in daskpd._strat.trees).
    Works without the proposal too (then the bins are set through ``MAX_TREE_BINS``)."""
    import daskpd

    ht, st = _tree_modules()
    if method == "exact":
        return daskpd.stratpd(df, target, feature, tree_method="exact", **kw)
    if method == "hist-adaptive":
        bins = "auto" if hasattr(st, "TREE_BINS") else adaptive_bins(df, target, feature, kw.get("features"))
    elif method.startswith("hist-"):
        bins = int(method.split("-")[1])
    else:
        bins = 1023
    old = ht.MAX_TREE_BINS, getattr(st, "TREE_BINS", None)
    try:
        if hasattr(st, "TREE_BINS"):
            st.TREE_BINS = bins
        else:
            ht.MAX_TREE_BINS = bins
        return daskpd.stratpd(df, target, feature, tree_method="hist", **kw)
    finally:
        ht.MAX_TREE_BINS = old[0]
        if hasattr(st, "TREE_BINS"):
            st.TREE_BINS = old[1]


def _tree_modules():
    """(histtree module, trees module): daskpd._strat.* (engine of 0c071f2) or the older daskpd.*."""
    try:
        import daskpd._strat.histtree as ht
        import daskpd._strat.trees as st
    except ImportError:  # daskpd before the engine rewrite
        import daskpd.histtree as ht
        import daskpd.stratify as st
    return ht, st


def adaptive_bins(df, target, feature, features=None):
    cols = features or [c for c in df.columns if c not in (target, feature)]
    distinct = max(int(df[c].nunique()) for c in cols)
    return int(min(65535, max(1023, distinct)))


def anchor_free_rmse(a, b):
    d = np.asarray(a, float) - np.asarray(b, float)
    return float(np.sqrt(np.mean((d - d.mean()) ** 2)))


# ------------------------------------------------------------------------------------ real

def part_real(stratx_json):
    df = pd.read_csv(os.path.join(DATA, "california_housing.csv"))
    sx = None
    if stratx_json and os.path.exists(stratx_json):
        s = json.load(open(stratx_json))
        sx = pd.Series(s["pd"], index=s["x"])
        sall = pd.Series(s["slope_at_x_all"], index=s["x_all"], dtype=float)
        call = pd.Series(s["slope_counts_at_x_all"], index=s["x_all"])
        print(f"stratx 0.5: slope[2,3) {sall[2.0]:9.1f} (n={call[2.0]:.0f}), {len(sx)} positions, "
              f"range {sx.max() - sx.min():.0f}")
    print("distinct values per stratifying column:",
          {c: int(df[c].nunique()) for c in df.columns if c not in (T, F)})
    for method in ["exact", "hist", "hist-4095", "hist-16383", "hist-65535", "hist-adaptive"]:
        r = stratpd(df, T, F, method)
        f = r.to_frame().set_index("x")
        line = (f"{method:14s} leaves {r.n_leaves:5d}  slope[2,3) {f.slope[2.0]:9.1f} (n={f.slope_count[2.0]:.0f})  "
                f"range {f.pd.max() - f.pd.min():6.0f}")
        if sx is not None:
            common = sx.index.intersection(f.index[f.supported])
            a, b = sx[common], f.pd[common]
            line += f"  vs stratx: corr {np.corrcoef(a, b)[0, 1]:.4f} max|diff| {np.max(np.abs(a - b)):8.1f}"
        print(line)


def part_sub(reps=15):
    df = pd.read_csv(os.path.join(DATA, "california_housing.csv"))
    rows = []
    for rep in range(reps):
        sub = df.sample(frac=0.9, random_state=rep)
        for method in ["exact", "hist"]:
            f = stratpd(sub, T, F, method).to_frame().set_index("x")
            rows.append(dict(rep=rep, method=method, slope_2=f.slope.get(2.0), pd_52=f.pd.get(52.0)))
    r = pd.DataFrame(rows)
    print(f"{reps} subsamples of 90 % of the rows:")
    print(r.groupby("method")[["slope_2", "pd_52"]].agg(["mean", "std"]).round(0).to_string())
    w = r.pivot(index="rep", columns="method", values="slope_2")
    d = w["hist"] - w["exact"]
    print(f"slope[2,3) hist - exact, paired: mean {d.mean():.0f}, sd {d.std():.0f}, "
          f"|diff| > 3000 in {int((d.abs() > 3000).sum())} of {reps}")


def part_leaves():
    """The leaf segments covering x = 2 (the [2, 3) slope) for hist-1023 and exact.

    The trees are fitted here directly (all rows: california is smaller than the default
    sample; ocean_proximity coded by sorted level, as daskpd and stratx_runner.py do), the
    per-(leaf, x) means and forward differences computed with pandas."""
    from sklearn.tree import DecisionTreeRegressor

    ht, _ = _tree_modules()
    df = pd.read_csv(os.path.join(DATA, "california_housing.csv"))
    df["ocean_proximity"] = pd.factorize(df.ocean_proximity, sort=True)[0]
    X = df.drop(columns=[T, F]).to_numpy(float)
    y = df[T].to_numpy(float)
    leaves = {
        "hist": ht.HistTree(15, max_bins=1023).fit(X, y).apply(X),
        "exact": DecisionTreeRegressor(min_samples_leaf=15, random_state=0).fit(X.astype("float32"), y)
        .apply(X.astype("float32")),
    }
    for method, leaf in leaves.items():
        g = (pd.DataFrame({"leaf": leaf, "x": df[F], "y": y}).groupby(["leaf", "x"]).y.agg(["size", "mean"])
             .reset_index())
        nxt = g.groupby("leaf").shift(-1)
        seg = pd.DataFrame({"leaf": g.leaf, "x0": g.x, "x1": nxt.x, "n0": g["size"], "n1": nxt["size"],
                            "y0": g["mean"], "y1": nxt["mean"]}).dropna()
        seg["slope"] = (seg.y1 - seg.y0) / (seg.x1 - seg.x0)
        cov = seg[(seg.x0 <= 2) & (seg.x1 > 2)].sort_values("slope")
        print(f"{method}: {len(cov)} segments cover x=2, mean slope {cov.slope.mean():.1f}")
        print(cov[["leaf", "x0", "x1", "slope", "n0", "n1", "y0", "y1"]].head(5).to_string(index=False))


def part_cost():
    """Fit time of the histogram tree with 1023 bins vs one bin per distinct value (<= 65535)."""
    import time

    from sklearn.tree import DecisionTreeRegressor

    ht, _ = _tree_modules()
    HistTree, bin_columns = ht.HistTree, ht.bin_columns

    def best(fn, k=3):
        t = []
        out = None
        for _ in range(k):
            a = time.perf_counter()
            out = fn()
            t.append(time.perf_counter() - a)
        return min(t), out

    rng = np.random.default_rng(0)
    cal = pd.read_csv(os.path.join(DATA, "california_housing.csv"))
    cal["ocean_proximity"] = pd.factorize(cal.ocean_proximity, sort=True)[0]
    Xc = cal.drop(columns=[T, F]).to_numpy(float)
    yc = cal[T].to_numpy(float)
    n = 200_000
    Xs = np.column_stack([rng.normal(size=n) for _ in range(8)] + [np.round(rng.uniform(0, 10, n), 3)])
    ys = Xs[:, 0] ** 2 + Xs[:, 1] + rng.normal(size=n)
    HistTree(15).fit(Xc[:1000], yc[:1000])  # compile
    for name, X, y in [("california 20640 x 9", Xc, yc), ("continuous 2e5 x 9", Xs, ys)]:
        for mb in (1023, 65535):
            B, bins = bin_columns(X, mb)
            tg, tree = best(lambda: HistTree(15, max_bins=mb).fit_binned(B, bins, y))
            print(f"{name}: HistTree grow, {mb} bins: {tg:.3f} s, {tree.get_n_leaves()} leaves")
        te, tr = best(lambda: DecisionTreeRegressor(min_samples_leaf=15, random_state=0).fit(X.astype("float32"), y), 1)
        print(f"{name}: sklearn DecisionTreeRegressor: {te:.3f} s, {tr.get_n_leaves()} leaves")
    # the whole fit stage of daskpd.stratpd (binning + grow), docs/stratpd.md's codependent case
    from daskpd.datasets import Quadratic

    for n in (100_000, 1_000_000):
        g = Quadratic(random_state=0, decimals=2, x1_max=10.0)
        df = g.frame(n)
        for method in ("hist", "hist-adaptive"):
            fits, rmse = [], None
            for _ in range(3):
                r = stratpd(df, "y", "x1", method)
                fits.append(r.params["timings"]["fit_s"])
                f = r.to_frame()
                f = f[f.supported]
                rmse = float(np.sqrt(np.mean((f.pd - g.truth("x1", f.x.to_numpy())) ** 2)))
            print(f"Quadratic(decimals=2, x1_max=10) n={n:,}: {method:13s} fit_s best of 3 {min(fits):.3f}, "
                  f"x1 RMSE vs truth {rmse:.4f}")


# ------------------------------------------------------------------------------------ synthetic

@dataclass
class CalLike:
    """A synthetic twin of california housing for StratPD of ``age``, with a known truth.

    * ``age``: integer 1..52 with P(k) proportional to exp(-((k - 29) / 12)^2 / 2) (few rows
      at the low end, like housing_median_age: ~0.2-0.4 % of rows at each of ages 1-3);
    * ``income``: lognormal, 4 decimals (tens of thousands of distinct values), falling
      slightly with age;
    * ``rooms``: integer, lognormal, newer blocks larger (codependent with age);
      ``population``: rooms x lognormal, integer; ``lat``, ``lon``: 2 decimals, ``region``
      (0..4) from lon;
    * ``y = f(age) + 40000 income + 15 sqrt(rooms) - 8 sqrt(population) + 20000 region
      + 30000 t_3`` (heavy-tailed noise, as the capped real target's residuals).

    f(age) = 800 age + 30000 exp(-age / 5): falls steeply over the first ages, then rises.
    ``truth(age) = f(age) - f(min age)``.
    """

    random_state: int = 0

    @staticmethod
    def f(age):
        age = np.asarray(age, float)
        return 800.0 * age + 30000.0 * np.exp(-age / 5.0)

    def frame(self, n):
        r = np.random.default_rng([self.random_state, 13])
        k = np.arange(1, 53)
        p = np.exp(-0.5 * ((k - 29) / 12.0) ** 2)
        age = r.choice(k, n, p=p / p.sum()).astype(float)
        income = np.round(np.exp(r.normal(1.3 - 0.004 * (age - 29), 0.45)), 4)
        rooms = np.round(np.exp(r.normal(7.8 - 0.015 * age, 0.7)))
        population = np.round(rooms * np.exp(r.normal(-0.1, 0.4, n)))
        lon = np.round(r.uniform(-124, -114, n), 2)
        lat = np.round(42 - 0.8 * (lon + 124) + r.normal(0, 1, n), 2)
        region = np.clip(((lon + 124) // 2).astype(int), 0, 4)
        y = (self.f(age) + 40000 * income + 15 * np.sqrt(rooms) - 8 * np.sqrt(population) + 20000 * region
             + 30000 * r.standard_t(3, n))
        return pd.DataFrame({"lon": lon, "lat": lat, "age": age, "rooms": rooms, "population": population,
                             "income": income, "region": region, "y": y})

    def truth(self, x):
        x = np.asarray(x, float)
        return self.f(x) - self.f(x.min())


def part_synth(sizes, seeds, methods=("exact", "hist", "hist-adaptive")):
    rows = []
    for n in sizes:
        for seed in range(seeds):
            g = CalLike(seed)
            df = g.frame(n)
            curves = {}
            for m in methods:
                f = stratpd(df, "y", "age", m).to_frame()
                f = f[f.supported]
                curves[m] = f
                tr = g.f(f.x.to_numpy())  # anchor-free RMSE: the constant f(min) does not matter
                first = f.x.iloc[0]
                s0 = f.slope.iloc[0]
                true_s0 = (g.f(f.x.iloc[1]) - g.f(first)) / (f.x.iloc[1] - first)
                rows.append(dict(n=n, seed=seed, method=m, rmse=anchor_free_rmse(f.pd, tr),
                                 slope0_err=abs(s0 - true_s0), first_x=first, positions=len(f)))
            a, b = curves["exact"], curves["hist"]
            common = np.intersect1d(a.x, b.x)
            pa = a.set_index("x").pd[common]
            pb = b.set_index("x").pd[common]
            rows[-1]["corr_hist_exact"] = float(np.corrcoef(pa, pb)[0, 1])
    r = pd.DataFrame(rows)
    print("anchor-free RMSE of the age curve vs the truth (the truth spans "
          f"{np.ptp(CalLike.f(np.arange(1, 53))):.0f} over ages 1..52); mean (sd) over {seeds} seeds")
    tab = r.groupby(["n", "method"]).agg(rmse_mean=("rmse", "mean"), rmse_sd=("rmse", "std"),
                                         slope0_err=("slope0_err", "mean")).round(0)
    print(tab.to_string())
    w = r.pivot_table(index=["n", "seed"], columns="method", values="rmse")
    for m in methods:
        if m != "exact":
            d = w[m] - w["exact"]
            print(f"{m} - exact, paired RMSE difference: " + ", ".join(
                f"n={n:g}: {d.xs(n).mean():+.0f} (sd {d.xs(n).std():.0f}; {m} better in "
                f"{int((d.xs(n) < -1e-6).sum())}/{int((d.xs(n).abs() > 1e-6).sum())} that differ)" for n in sizes))
    c = r.dropna(subset=["corr_hist_exact"]).groupby("n").corr_hist_exact.agg(["min", "median"])
    print("correlation of the hist and exact curves (min, median over seeds):")
    print(c.round(4).to_string())
    return r


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", default="real,sub,synth")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--sizes", default="2e3,2e4,2e5")
    ap.add_argument("--stratx-json", default="/tmp/h13/stratx_cal_all_age.json")
    a = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    parts = a.parts.split(",")
    if "real" in parts:
        print("== part real: california housing_median_age")
        part_real(a.stratx_json)
    if "sub" in parts:
        print("\n== part sub: subsample variability")
        part_sub()
    if "leaves" in parts:
        print("\n== part leaves: the segments behind slope[2,3)")
        part_leaves()
    if "cost" in parts:
        print("\n== part cost: histogram tree grow time")
        part_cost()
    if "synth" in parts:
        print("\n== part synth: CalLike, known truth")
        part_synth([int(float(s)) for s in a.sizes.split(",")], a.seeds)


if __name__ == "__main__":
    main()
