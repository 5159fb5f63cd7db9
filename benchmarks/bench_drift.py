#!/usr/bin/env python
"""How often a nightly job's drift test fires, on data with a known generator.

    .venv/bin/python benchmarks/bench_drift.py [--test new-vs-old] [--nights 200] [--null-nights N] [--old 20000] [--new 2000]
        [--trials 100] [--job-trials 1] [--designs discrete,continuous] [--refit never,always]
        [--changes none,x2,c] [--step 0.25] [--skew 0] [--threshold 0.1] [--alpha 0.01]
    .venv/bin/python benchmarks/bench_drift.py --test between-runs [--pairs 100] [--n 2000] [--trials 20]
        [--change 2.0] [--designs discrete,continuous] [--threshold 0.1] [--alpha 0.01]

``--test new-vs-old`` (the default test of a nightly job): for every night i (in
memory, dask's threads; the calls a nightly job makes, without its files), ``--old``
rows of seed 2i and ``--new`` appended rows of seed 2i + 1 of
``y = 0.5 x1^2 + 4 x2 + effect[c] + N(0, 1)``; the appended rows, under a planted
change, follow another generator:

* ``none``: the same generator (every flag is a false alarm);
* ``x2``: x2's curve is ``--step`` (0.25) of its range (4) higher above x2 = 0.9 (10% of
  its positions; discrete: x2 = 1, one of its 5 positions);
* ``c``: the effect of category ``3`` is ``--step`` of the effects' range (3) higher
  (one of 4 categories).

``--skew s`` (old and new rows alike): a row above x2 = 0.9 is of category ``3`` with
probability ``s`` (else its category is uniform, as every row's is with ``s = 0``), so
that the categories are unevenly spread over the x2 step's rows: under the ``x2`` change,
how much of it the categorical curve takes ("another curve flagged").

``--refit never``: the trees fitted on the old rows (``daskpd.strat_curves_and_importances
(old, keep_state=True)``), the new rows scanned under them (``stratification=``,
``base_state=``), the new rows' sums against the old ones; ``always``: the trees fitted
on all the rows, the new rows scanned again under them, their sums against all the
rows' less theirs.  ``daskpd.job.newold.compare_states`` then finishes both sides on
shared positions and cells with ``--trials`` paired leaf-bootstrap trials, and
``daskpd.job.drift.decide`` tests the night's curves together (Holm at ``--alpha``,
``--threshold`` of the curve's scale).

Prints, per design, refit and change, the share of nights with any curve ``drifted``
(under ``none``: the false-alarm rate of a nightly comparison), the share flagging the
changed curve and the share flagging another one; then, under ``none``, every curve's
points' calibration: the share of points with ``|t|`` beyond Student's 0.975 quantile
at their degrees of freedom (5% for a calibrated test) and the standard deviation of
``t`` (about 1).

``--test between-runs`` measures ``daskpd history``'s comparison of two consecutive
runs' curves: for every seed pair i, three runs' tables, made by the in-memory API and
written by the job's own writers (``daskpd.strat_curves_and_importances(..., n_trials=T)``
-> ``daskpd.job.outputs.curves_frame`` / ``importances_frame``):

* run A: ``--n`` rows of seed 2i of the generator above;
* run B: seed 2i + 1 of the same generator (new rows, new stratifying trees: no change);
* run B': the rows of seed 2i + 1 with x2's coefficient changed from 4 to ``4 + --change``
  above x2 = 0.5 (a change in the upper half of one curve).

``daskpd.job.history.compare`` compares A with B (every flag is a false alarm) and A with
B' (x2 should be flagged, x1 and c not).  Designs: ``discrete`` (x1 in 0..10, x2 in
{0, .25, .., 1}: the stratifying tree separates the other columns exactly) and
``continuous`` (x2 uniform).
"""
from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import pandas as pd

EFFECTS = np.array([0.0, 1.0, 3.0, 2.5])


#: the planted changes of ``--test new-vs-old``: the changed curve (None: no change)
CHANGED = {"none": None, "x2": "x2", "c": "c"}
METHODS = {"x1": "stratpd", "x2": "stratpd", "c": "catstratpd"}


def data(seed: int, n: int, change: float, discrete: bool, planted: str = "none", step: float = 0.0,
         skew: float = 0.0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x1 = rng.integers(0, 11, n).astype(float)
    x2 = rng.integers(0, 5, n) / 4 if discrete else rng.uniform(0, 1, n)
    c = rng.integers(0, 4, n)
    noise = rng.normal(0, 1, n)
    if skew:  # category 3 over-represented above x2 = 0.9
        c = np.where((x2 > 0.9) & (rng.uniform(0, 1, n) < skew), 3, c)
    y = 0.5 * x1 ** 2 + 4 * x2 + change * np.maximum(x2 - 0.5, 0.0) + EFFECTS[c] + noise
    if planted == "x2":  # step of its range (4) over the top 10% of x2
        y = y + step * 4.0 * (x2 > 0.9)
    elif planted == "c":  # step of the effects' range (3) for one category of 4
        y = y + step * float(np.ptp(EFFECTS)) * (c == 3)
    return pd.DataFrame({"x1": x1, "x2": x2, "c": c.astype(str), "y": y})


def night(i: int, a, design: str, refit: str, planted: str) -> list:
    """One night's decided records: ``a.old`` rows of seed 2i, ``a.new`` rows of seed
    2i + 1 under the planted change."""
    import daskpd
    from daskpd.job.drift import decide
    from daskpd.job.newold import compare_states

    disc = design == "discrete"
    old = data(2 * i, int(a.old), 0.0, disc, skew=a.skew)
    new = data(2 * i + 1, int(a.new), 0.0, disc, planted, a.step, skew=a.skew)
    kw = dict(target="y", categorical_features=["c"], n_trials=a.job_trials, random_state=i, progress=False)
    if refit == "never":  # an incremental night: the new rows scanned under the old rows' trees
        base = daskpd.strat_curves_and_importances(old, keep_state=True, **kw)
        got = daskpd.strat_curves_and_importances(new, stratification=base.stratification, base_state=base.state,
                                                  keep_state=True, **kw)
        recs = compare_states(got.new_state, base.stratification, METHODS, a.trials, old_state=base.state,
                              max_positions=a.positions)
    else:  # a night that refits: the trees fitted on all the rows, the new rows scanned again under them
        whole = daskpd.strat_curves_and_importances(pd.concat([old, new], ignore_index=True), keep_state=True, **kw)
        got = daskpd.strat_curves_and_importances(new, stratification=whole.stratification, keep_state=True, **kw)
        recs = compare_states(got.state, whole.stratification, METHODS, a.trials, whole_state=whole.state,
                              max_positions=a.positions)
    return decide(recs, a.alpha, a.threshold)


def new_vs_old(a) -> int:
    from scipy import stats

    warnings.simplefilter("ignore")
    calib = []
    night(10_000, argparse.Namespace(**{**vars(a), "old": 500, "new": 200}), "discrete", "never", "none")  # warm up
    print(f"{a.nights} nights x ({int(a.old):,} old + {int(a.new):,} new rows); comparison trials {a.trials}, "
          f"job trials {a.job_trials}; step {a.step:g} of the curve's range; skew {a.skew:g}; alpha {a.alpha:g} "
          f"a night, threshold {a.threshold:g}\n")
    print("| design | refit | planted change | nights flagged | changed curve flagged | another curve flagged "
          "| median z / z_crit (changed) | median detectable change | seconds |")
    print("|---|---|---|---|---|---|---|---|---|")
    for design in a.designs.split(","):
        for refit in a.refit.split(","):
            for planted in a.changes.split(","):
                t0 = time.perf_counter()
                any_, right, wrong, ratio, mdc = [], [], [], [], []
                nights = a.null_nights if planted == "none" and a.null_nights else a.nights
                for i in range(nights):
                    recs = night(i, a, design, refit, planted)
                    target = CHANGED[planted]
                    flags = {r.feature for r in recs if r.status == "drifted"}
                    any_.append(bool(flags))
                    right.append(target in flags)
                    wrong.append(bool(flags - {target}))
                    for r in recs:
                        if r.feature == (target or "x2"):
                            ratio.append(r.z / r.z_crit)
                            mdc.append(r.mdc)
                        if target is None and len(r.points):
                            p = r.points[r.points["testable"]]
                            t, df = p["t"].to_numpy(float), p["df"].to_numpy(float)
                            calib.append(pd.DataFrame({"design": design, "refit": refit, "curve": r.feature, "t": t,
                                                       "over": np.abs(t) > stats.t.ppf(0.975, df)}))
                secs = time.perf_counter() - t0
                changed = "n/a" if CHANGED[planted] is None else f"{np.mean(right):.3f}"
                print(f"| {design} | {refit} | {planted} | {np.mean(any_):.3f} ({sum(any_)}/{nights}) | {changed} "
                      f"| {np.mean(wrong):.3f} | {np.nanmedian(ratio):.2f} | {np.nanmedian(mdc):.3f} | {secs:.0f} |",
                      flush=True)
    if calib:
        print("\nunder no change, every curve's points:\n")
        print("| design | refit | curve | points | share of abs(t) > t_0.975(df) | sd of t |")
        print("|---|---|---|---|---|---|")
        for (design, refit, curve), g in pd.concat(calib).groupby(["design", "refit", "curve"], sort=False):
            print(f"| {design} | {refit} | {curve} | {len(g)} | {g['over'].mean():.3f} | {g['t'].std():.2f} |")
    return 0


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
    ap.add_argument("--test", choices=("new-vs-old", "between-runs"), default="new-vs-old")
    ap.add_argument("--nights", type=int, default=200, help="new-vs-old: simulated nights per setting")
    ap.add_argument("--null-nights", type=int, default=None,
                    help="new-vs-old: nights without a planted change (default --nights)")
    ap.add_argument("--old", type=float, default=20000, help="new-vs-old: the old rows")
    ap.add_argument("--new", type=float, default=2000, help="new-vs-old: the appended rows")
    ap.add_argument("--job-trials", type=int, default=1, help="new-vs-old: the job's [importances] n_trials")
    ap.add_argument("--refit", default="never,always", help="new-vs-old: never (incremental) and/or always")
    ap.add_argument("--changes", default="none,x2,c", help="new-vs-old: planted changes")
    ap.add_argument("--step", type=float, default=0.25, help="new-vs-old: the planted step, a share of the range")
    ap.add_argument("--skew", type=float, default=0.0,
                    help="new-vs-old: the probability that a row above x2 = 0.9 is of category 3 (else uniform)")
    ap.add_argument("--positions", type=int, default=None,
                    help="new-vs-old: a numeric feature's positions in the comparison (default: the job's)")
    ap.add_argument("--pairs", type=int, default=100, help="between-runs: seed pairs")
    ap.add_argument("--n", type=float, default=2000, help="between-runs: rows of a run")
    ap.add_argument("--trials", type=int, default=None,
                    help="the trials: of the comparison (new-vs-old, default 100) or of each run (between-runs, 20)")
    ap.add_argument("--change", type=float, default=2.0, help="between-runs: x2's coefficient change above 0.5")
    ap.add_argument("--designs", default="discrete,continuous")
    ap.add_argument("--threshold", type=float, default=0.1)
    ap.add_argument("--alpha", type=float, default=0.01)
    a = ap.parse_args(argv)
    if a.test == "new-vs-old":
        a.trials = 100 if a.trials is None else a.trials
        return new_vs_old(a)
    a.trials = 20 if a.trials is None else a.trials
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
