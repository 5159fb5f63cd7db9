#!/usr/bin/env python
"""How often ``daskpd history`` flags a curve, on data with a known generator.

    .venv/bin/python benchmarks/bench_drift.py [--pairs 100] [--n 2000] [--trials 20] [--change 2.0]
        [--designs discrete,continuous] [--threshold 0.1] [--alpha 0.01]

For every seed pair i (in memory, dask's threads; no job is run): three runs' tables,
made by the in-memory API and written by the job's own writers
(``daskpd.strat_curves_and_importances(..., n_trials=T)`` ->
``daskpd.job.outputs.curves_frame`` / ``importances_frame``):

* run A: ``--n`` rows of seed 2i of ``y = 0.5 x1^2 + 4 x2 + effect[c] + N(0, 1)``;
* run B: seed 2i + 1 of the same generator (new rows, new stratifying trees: no change);
* run B': the rows of seed 2i + 1 with x2's coefficient changed from 4 to ``4 + --change``
  above x2 = 0.5 (a change in the upper half of one curve).

``daskpd.job.history.compare`` compares A with B (every flag is a false alarm) and A with
B' (x2 should be flagged, x1 and c not).  Designs: ``discrete`` (x1 in 0..10, x2 in
{0, .25, .., 1}: the stratifying tree separates the other columns exactly, so the band
holds the curve's noise) and ``continuous`` (x2 uniform: the tree only approximates it
when it stratifies x1, and two samples' trees differ by more than the band says).

Prints, per design and curve, the rate of ``status == "drifted"`` under no change (false
alarms), what the test alone (z > z_crit) and the threshold alone (drift > threshold)
would have flagged, and the rate under the change (detection for x2).
"""
from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import pandas as pd

EFFECTS = np.array([0.0, 1.0, 3.0, 2.5])


def data(seed: int, n: int, change: float, discrete: bool) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x1 = rng.integers(0, 11, n).astype(float)
    x2 = rng.integers(0, 5, n) / 4 if discrete else rng.uniform(0, 1, n)
    c = rng.integers(0, 4, n)
    y = 0.5 * x1 ** 2 + 4 * x2 + change * np.maximum(x2 - 0.5, 0.0) + EFFECTS[c] + rng.normal(0, 1, n)
    return pd.DataFrame({"x1": x1, "x2": x2, "c": c.astype(str), "y": y})


def run(seed: int, n: int, trials: int, change: float, discrete: bool):
    import daskpd
    from daskpd.job.history import Run
    from daskpd.job.outputs import curves_frame, importances_frame

    res = daskpd.strat_curves_and_importances(data(seed, n, change, discrete), target="y",
                                              categorical_features=["c"],
                                              n_trials=trials, random_state=seed, progress=False)
    curves = curves_frame({("catstratpd" if r.kind == "categorical" else "stratpd", f): r
                           for f, r in res.curves.items()})
    return Run(f"seed{seed}", None, {"spec": {"params": {"importances": {"n_trials": trials}}}}, curves,
               importances_frame({"importances": res}))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=100)
    ap.add_argument("--n", type=float, default=2000)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--change", type=float, default=2.0)
    ap.add_argument("--designs", default="discrete,continuous")
    ap.add_argument("--threshold", type=float, default=0.1)
    ap.add_argument("--alpha", type=float, default=0.01)
    a = ap.parse_args(argv)
    from daskpd.job.history import compare

    warnings.simplefilter("ignore")
    n = int(a.n)
    run(0, 500, 2, 0.0, True)  # warm up: imports and numba kernels
    print(f"{a.pairs} seed pairs x {n:,} rows, {a.trials} trials; change: x2's coefficient 4 -> {4 + a.change:g} "
          f"above x2 = 0.5; threshold {a.threshold:g}, alpha {a.alpha:g} per curve\n")
    print("| design | curve | no change: drifted | no change: z > z_crit | no change: drift > threshold "
          "| changed: drifted | changed: median z / z_crit | seconds |")
    print("|---|---|---|---|---|---|---|---|")
    for design in a.designs.split(","):
        t0 = time.perf_counter()
        rec = []
        for i in range(a.pairs):
            disc = design == "discrete"
            A, B = run(2 * i, n, a.trials, 0.0, disc), run(2 * i + 1, n, a.trials, 0.0, disc)
            B2 = run(2 * i + 1, n, a.trials, a.change, disc)
            for kind, other in (("null", B), ("changed", B2)):
                t = compare(A, other, a.threshold, a.alpha)
                for r in t.itertuples(index=False):
                    rec.append({"kind": kind, "feature": r.feature, "drifted": r.status == "drifted",
                                "z_over": bool(r.z > r.z_crit), "raw_over": bool(r.drift > a.threshold),
                                "z_ratio": r.z / r.z_crit, "pair": i})
        secs = time.perf_counter() - t0
        df = pd.DataFrame(rec)
        for f in ("x1", "x2", "c"):
            nul, ch = df[(df.kind == "null") & (df.feature == f)], df[(df.kind == "changed") & (df.feature == f)]
            print(f"| {design} | {f} | {nul.drifted.mean():.3f} | {nul.z_over.mean():.3f} | {nul.raw_over.mean():.3f} "
                  f"| {ch.drifted.mean():.3f} | {ch.z_ratio.median():.2f} | {secs:.0f} |")
        nul = df[df.kind == "null"].groupby("pair").drifted.any()
        print(f"| {design} | any of the 3 curves | {nul.mean():.3f} | | | | | |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
