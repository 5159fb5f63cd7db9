#!/usr/bin/env python
"""The spread of StratPD's bootstrap trials: daskpd against stratx 0.5 on the same data.

    .venv/bin/python benchmarks/bench_bands_stratx.py [--n 2000] [--trials 20] [--seed 0]
        [--workdir DIR] [--skip-stratx]

Writes ``--n`` rows of ``y = 0.5 x1^2 + 4 x2 + N(0, 1)`` (x1 integers 0..10, x2 ~ U(0, 1))
as parquet into ``--workdir`` and computes StratPD of y on x1 with ``--trials``
bootstrap trials (resampling the rows with replacement; min_samples_leaf=15,
min_slopes_per_x=5, the defaults of both):

* **daskpd**: ``daskpd.stratpd(df, target="y", feature="x1", n_trials=T)``: Poisson(1)
  row weights from the row hash in the same scan, the stratifying tree fitted once;
* **stratx 0.5**, in its own virtualenv (``benchmarks/setup_stratx.sh new``; the venv's
  python is ``$STRATX_VENV_ROOT/stratx-new/bin/python``, default root
  ``~/.cache/daskpd-bench``): stratx's ``plot_stratpd(n_trials=T, bootstrap=True)``
  loop -- ``sklearn.utils.resample(range(n), n_samples=n, replace=True)`` then
  ``partial_dependence`` on the resample, which fits a new tree every trial.

Both sides' trial curves are 0 at x1 = 0; the table prints the standard deviation over
trials at every x1 and its mean over x1 = 1..10, for each side and their ratio.
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


def make(n: int, seed: int):
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    x1 = rng.integers(0, 11, n).astype(float)
    x2 = rng.uniform(0, 1, n)
    return pd.DataFrame({"x1": x1, "x2": x2, "y": 0.5 * x1 ** 2 + 4 * x2 + rng.normal(0, 1, n)})


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=float, default=2000)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", default=os.environ.get("DASKPD_BENCH_DIR", os.path.join(tempfile.gettempdir(),
                                                                                        "daskpd-bench")))
    ap.add_argument("--skip-stratx", action="store_true")
    a = ap.parse_args(argv)
    import warnings

    import numpy as np

    import daskpd

    warnings.simplefilter("ignore")
    n, T = int(a.n), a.trials
    print(f"# command: {' '.join([sys.argv[0], *(argv or sys.argv[1:])])}", flush=True)
    os.makedirs(a.workdir, exist_ok=True)
    df = make(n, a.seed)
    path = os.path.join(a.workdir, f"bands-stratx-{n}-{a.seed}.parquet")
    df.to_parquet(path)
    xs = np.arange(11.0)
    t0 = time.perf_counter()
    res = daskpd.stratpd(df, target="y", feature="x1", n_trials=T, random_state=a.seed, progress=False)
    ours_s = time.perf_counter() - t0
    sd_ours = np.full(11, np.nan)
    sd_ours[np.searchsorted(xs, res.x)] = res.band()["std"]
    rows = [("daskpd", sd_ours, ours_s)]
    if not a.skip_stratx:
        root = os.environ.get("STRATX_VENV_ROOT", os.path.join(os.path.expanduser("~"), ".cache", "daskpd-bench"))
        py = os.path.join(root, "stratx-new", "bin", "python")
        t0 = time.perf_counter()
        out = subprocess.run([py, "-c", STRATX_SIDE, path, str(T), str(a.seed)], capture_output=True, text=True)
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
    print(f"\n{n:,} rows, {T} bootstrap trials; the standard deviation of the trials' pd at x1 = 0..10")
    print("\n| curve | who | trials | mean sd over x1 = 1..10 | sd at x1 = 1, 5, 10 | seconds |")
    print("|---|---|---|---|---|---|")
    for who, sd, secs in rows:
        print(f"| StratPD x1 | {who} | {T} | {np.nanmean(sd[1:]):.4f} | {sd[1]:.3f}, {sd[5]:.3f}, {sd[10]:.3f} | "
              f"{secs:.1f} |")
    if len(rows) == 2:
        ratio = np.nanmean(rows[0][1][1:]) / np.nanmean(rows[1][1][1:])
        print(f"\nspread ratio daskpd / stratx (mean sd): {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
