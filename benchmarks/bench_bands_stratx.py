#!/usr/bin/env python
"""The spread of StratPD's and CatStratPD's bootstrap trials: daskpd against stratx 0.5
on the same data.

    .venv/bin/python benchmarks/bench_bands_stratx.py [--n 2000] [--trials 20] [--seed 0]
        [--curves stratpd,catstratpd] [--workdir DIR] [--skip-stratx]

Writes ``--n`` rows of ``y = 0.5 x1^2 + 4 x2 + N(0, 1)`` (x1 integers 0..10, x2 ~ U(0, 1))
as parquet into ``--workdir`` and computes StratPD of y on x1 with ``--trials``
bootstrap trials (min_samples_leaf=15, min_slopes_per_x=5, the defaults of both):

* **daskpd**: ``daskpd.stratpd(df, target="y", feature="x1", n_trials=T)``, its
  defaults: honest trees fitted once, each trial a bootstrap of their leaves (every
  stratum a Poisson(1) weight), finished from the same sums;
* **stratx 0.5**, in its own virtualenv (``benchmarks/setup_stratx.sh new``; the venv's
  python is ``$STRATX_VENV_ROOT/stratx-new/bin/python``, default root
  ``~/.cache/daskpd-bench``): stratx's ``plot_stratpd(n_trials=T, bootstrap=True)``
  loop -- ``sklearn.utils.resample(range(n), n_samples=n, replace=True)`` then
  ``partial_dependence`` on the resample, which fits a new tree every trial.

Both sides' trial curves are 0 at x1 = 0; the table prints the standard deviation over
trials at every x1 and its mean over x1 = 1..10, for each side and their ratio.

**CatStratPD** (``--curves`` with ``catstratpd``): ``--n`` rows of
``y = 0.5 x1^2 + 4 x2 + effect[c] + N(0, 1)`` (c integer codes 0..3, effects 0, 1, 3,
2.5), the effects of c stratified on x1 and x2 with ``--trials`` bootstrap trials
(min_samples_leaf=5, the default of both): daskpd's ``catstratpd(df, target="y",
feature="c", n_trials=T)`` against stratx's ``plot_catstratpd(n_trials=T)`` loop
(``resample`` with replacement, then ``cat_partial_dependence`` on the resample: a new
tree every trial).  stratx's CatStratPD uses ``np.float`` / ``np.int``, gone since
numpy 1.24: its side restores these aliases (``np.float = float``, ...) before importing
stratx, so it runs in the same ``stratx-new`` venv.  Every trial is shifted to 0 at
category 0 on both sides; the table prints the standard deviation over trials of the
effects of categories 1..3, their mean, and the ratio.

``--skip-stratx`` prints daskpd's side only.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

STRATX_SIDE = r'''
import json, sys, warnings
import numpy as np, pandas as pd
from sklearn.utils import resample
from stratx.partdep import partial_dependence
warnings.simplefilter("ignore")
path, T, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
df = pd.read_parquet(path)
X, y = df[["x1", "x2"]], df["y"]
n = len(df)
curves = []
for t in range(T):
    idx = resample(range(n), n_samples=n, replace=True, random_state=seed + t)
    out = partial_dependence(X.iloc[idx].reset_index(drop=True), y.iloc[idx].reset_index(drop=True), "x1",
                             min_samples_leaf=15, min_slopes_per_x=5)
    pdpx, pdpy = out[5], out[6]
    curves.append({str(float(a)): float(b) for a, b in zip(pdpx, pdpy)})
print(json.dumps(curves))
'''

STRATX_CAT_SIDE = r'''
import json, sys, warnings
import numpy as np, pandas as pd
np.float, np.int, np.bool = float, int, bool  # the aliases stratx 0.5's CatStratPD still uses
from sklearn.utils import resample
from stratx.partdep import cat_partial_dependence
warnings.simplefilter("ignore")
path, T, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
df = pd.read_parquet(path)
X, y = df[["x1", "x2", "c"]], df["y"]
n = len(df)
trials = []
for t in range(T):
    idx = resample(range(n), n_samples=n, replace=True, random_state=seed + t)
    out = cat_partial_dependence(X.iloc[idx].reset_index(drop=True), y.iloc[idx].reset_index(drop=True), "c",
                                 min_samples_leaf=5)
    avg_per_cat = np.asarray(out[2], dtype=float)  # indexed by category code, NaN where absent
    trials.append([None if not np.isfinite(v) else float(v) for v in avg_per_cat[:4]])
print(json.dumps(trials))
'''

EFFECTS = (0.0, 1.0, 3.0, 2.5)


def make(n: int, seed: int):
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    x1 = rng.integers(0, 11, n).astype(float)
    x2 = rng.uniform(0, 1, n)
    return pd.DataFrame({"x1": x1, "x2": x2, "y": 0.5 * x1 ** 2 + 4 * x2 + rng.normal(0, 1, n)})


def make_cat(n: int, seed: int):
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng([seed, 1])
    x1 = rng.integers(0, 11, n).astype(float)
    x2 = rng.uniform(0, 1, n)
    c = rng.integers(0, 4, n)
    y = 0.5 * x1 ** 2 + 4 * x2 + np.asarray(EFFECTS)[c] + rng.normal(0, 1, n)
    return pd.DataFrame({"x1": x1, "x2": x2, "c": c, "y": y})


def _stratx_python():
    root = os.environ.get("STRATX_VENV_ROOT", os.path.join(os.path.expanduser("~"), ".cache", "daskpd-bench"))
    return os.path.join(root, "stratx-new", "bin", "python")


def cat_rows(n: int, T: int, seed: int, workdir: str, skip_stratx: bool):
    """(who, sd per category 0..3, seconds) for daskpd and stratx; None when stratx failed."""
    import numpy as np

    import daskpd

    df = make_cat(n, seed)
    path = os.path.join(workdir, f"bands-stratx-cat-{n}-{seed}.parquet")
    df.to_parquet(path)
    t0 = time.perf_counter()
    res = daskpd.catstratpd(df, target="y", feature="c", n_trials=T, random_state=seed, progress=False)
    ours_s = time.perf_counter() - t0
    cats = [int(v) for v in res.categories]
    sd_ours = np.full(4, np.nan)
    sd_ours[cats] = res.band()["std"]
    rows = [("daskpd", sd_ours, ours_s)]
    if skip_stratx:
        return rows
    t0 = time.perf_counter()
    out = subprocess.run([_stratx_python(), "-c", STRATX_CAT_SIDE, path, str(T), str(seed)], capture_output=True,
                         text=True)
    theirs_s = time.perf_counter() - t0
    if out.returncode != 0:
        print("stratx CatStratPD failed:", "\n".join(out.stderr.strip().splitlines()[-5:]))
        return None
    M = np.array([[np.nan if v is None else v for v in t] for t in json.loads(out.stdout.strip().splitlines()[-1])])
    M = M - M[:, [0]]  # every trial 0 at category 0, as daskpd's band
    rows.append(("stratx 0.5 (tree refitted per trial)", np.nanstd(M, axis=0, ddof=1), theirs_s))
    return rows


def print_spread(rows, n: int, T: int, curve: str, what: str, span: str, var: str, at: tuple, ratio_label: str):
    """The table of the trials' standard deviation per point (``rows``: ``(who, sd, seconds)``,
    sd[0] the anchor), its mean over the points after the anchor, and daskpd's over stratx's."""
    import numpy as np

    print(f"\n{n:,} rows, {T} bootstrap trials; the standard deviation of the trials' {what}")
    print(f"\n| curve | who | trials | mean sd over {span} | sd at {var} = {', '.join(map(str, at))} | seconds |")
    print("|---|---|---|---|---|---|")
    for who, sd, secs in rows:
        print(f"| {curve} | {who} | {T} | {np.nanmean(sd[1:]):.4f} | {', '.join(f'{sd[i]:.3f}' for i in at)} | "
              f"{secs:.1f} |")
    if len(rows) == 2:
        ratio = np.nanmean(rows[0][1][1:]) / np.nanmean(rows[1][1][1:])
        print(f"\n{ratio_label} daskpd / stratx (mean sd): {ratio:.2f}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=float, default=2000)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", default=os.environ.get("DASKPD_BENCH_DIR", os.path.join(tempfile.gettempdir(),
                                                                                        "daskpd-bench")))
    ap.add_argument("--curves", default="stratpd,catstratpd", help="stratpd, catstratpd or both (comma-separated)")
    ap.add_argument("--skip-stratx", action="store_true")
    a = ap.parse_args(argv)
    curves_wanted = {c.strip() for c in a.curves.split(",") if c.strip()}
    if not curves_wanted <= {"stratpd", "catstratpd"}:
        ap.error(f"--curves: expected stratpd and/or catstratpd; got {a.curves!r}")
    import warnings

    warnings.simplefilter("ignore")
    n, T = int(a.n), a.trials
    print(f"# command: {' '.join([sys.argv[0], *(argv or sys.argv[1:])])}", flush=True)
    os.makedirs(a.workdir, exist_ok=True)
    status = 0
    if "stratpd" in curves_wanted:
        status |= stratpd_part(n, T, a.seed, a.workdir, a.skip_stratx)
    if "catstratpd" in curves_wanted:
        rows = cat_rows(n, T, a.seed, a.workdir, a.skip_stratx)
        if rows is None:
            return 1
        print_spread(rows, n, T, "CatStratPD c", "effects of c = 1, 2, 3 (0 at c = 0)", "c = 1..3", "c", (1, 2, 3),
                     "CatStratPD spread ratio")
    return status


def stratpd_part(n: int, T: int, seed: int, workdir: str, skip_stratx: bool) -> int:
    import numpy as np

    import daskpd

    df = make(n, seed)
    path = os.path.join(workdir, f"bands-stratx-{n}-{seed}.parquet")
    df.to_parquet(path)
    xs = np.arange(11.0)
    t0 = time.perf_counter()
    res = daskpd.stratpd(df, target="y", feature="x1", n_trials=T, random_state=seed, progress=False)
    ours_s = time.perf_counter() - t0
    sd_ours = np.full(11, np.nan)
    sd_ours[np.searchsorted(xs, res.x)] = res.band()["std"]
    rows = [("daskpd", sd_ours, ours_s)]
    if not skip_stratx:
        t0 = time.perf_counter()
        out = subprocess.run([_stratx_python(), "-c", STRATX_SIDE, path, str(T), str(seed)], capture_output=True,
                             text=True)
        theirs_s = time.perf_counter() - t0
        if out.returncode != 0:
            print("stratx failed:", "\n".join(out.stderr.strip().splitlines()[-5:]))
            return 1
        curves = json.loads(out.stdout.strip().splitlines()[-1])
        M = np.full((T, 11), np.nan)
        for t, c in enumerate(curves):
            for k, v in c.items():
                M[t, int(round(float(k)))] = v
        M = M - M[:, [0]]  # every trial 0 at x1 = 0, as daskpd's
        rows.append(("stratx 0.5 (tree refitted per trial)", np.nanstd(M, axis=0, ddof=1), theirs_s))
    print_spread(rows, n, T, "StratPD x1", "pd at x1 = 0..10", "x1 = 1..10", "x1", (1, 5, 10), "spread ratio")
    return 0


if __name__ == "__main__":
    sys.exit(main())
