#!/usr/bin/env python
"""Probe how stratx 0.5's partial_dependence integrates: empty intervals, positions under
min_slopes_per_x, the last x, NaN slopes, leaves with gaps.  Prints, per case, stratx's
grid, slope counts, slopes, the kept curve (pdpx, pdpy) and ``ignored``.

    ~/.cache/daskpd-bench/stratx-new/bin/python benchmarks/stratx_integration_probe.py
    .venv/bin/python benchmarks/stratx_integration_probe.py --daskpd   # the same cases through daskpd

Every case stratifies on one column ``s`` (one leaf per value of s, min_samples_leaf=1;
y differs between strata so the tree splits them all), so the leaves are known.  Imports
only stratx, numpy, pandas.  Its findings are in docs/stratpd.md ("How stratx 0.5 integrates").
"""
import os
import warnings

os.environ.setdefault("MPLBACKEND", "Agg")
warnings.simplefilter("ignore")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import sys  # noqa: E402

DASKPD = "--daskpd" in sys.argv


def run(title, s, x, y, min_slopes_per_x=1, min_samples_leaf=1):
    df = pd.DataFrame({"s": s, "x": np.asarray(x, dtype=float), "y": np.asarray(y, dtype=float)})
    if DASKPD:
        return run_daskpd(title, df, min_slopes_per_x, min_samples_leaf)
    from stratx.partdep import partial_dependence
    np.random.seed(0)
    _, _, counts, _, slope_at_x, pdpx, pdpy, ignored = partial_dependence(
        df[["s", "x"]], df["y"], "x", min_samples_leaf=min_samples_leaf, min_slopes_per_x=min_slopes_per_x)
    grid = np.unique(df["x"].values.round(10))
    print(f"== {title}  (min_slopes_per_x={min_slopes_per_x})")
    print("   x          ", grid.tolist())
    print("   slope_count", np.asarray(counts).astype(int).tolist())
    print("   slope      ", [None if np.isnan(v) else round(float(v), 6) for v in slope_at_x])
    print("   pdpx       ", np.asarray(pdpx).tolist())
    print("   pdpy       ", [round(float(v), 6) for v in pdpy])
    print("   ignored    ", ignored)


def run_daskpd(title, df, min_slopes_per_x, min_samples_leaf):
    import daskpd

    r = daskpd.stratpd(df, "y", "x", features=["s"], min_samples_leaf=min_samples_leaf,
                       min_slopes_per_x=min_slopes_per_x, tree_method="exact", max_bins=None)
    print(f"== {title}  (min_slopes_per_x={min_slopes_per_x}) [daskpd]")
    print("   x          ", r.x.tolist())
    print("   slope_count", r.slope_count.astype(int).tolist())
    print("   slope      ", [None if np.isnan(v) else round(float(v), 6) for v in r.slope])
    print("   supported  ", r.supported.astype(int).tolist())
    print("   pd         ", [None if np.isnan(v) else round(float(v), 6) for v in r.pd])
    print("   ignored    ", r.n_ignored, " missing x", r.n_missing_x)


def main():
    # 1. the case: x in {0,1,2} in one stratum, {10,11,12} in the other, y = x^2 + 100 z
    x = [0, 1, 2, 10, 11, 12]
    z = [0, 0, 0, 1, 1, 1]
    run("empty interval [2,10): y = x^2 + 100 z", z, x, [v * v + 100 * w for v, w in zip(x, z)])

    # 2. positions with fewer than min_slopes_per_x slopes inside the range.
    # strata 0 and 1 cover x = 0..4; stratum 2 only {0, 1} (segment [0,1)); stratum 3 only {3, 4}
    # (segment [3,4)) -> slope counts [3, 2, 2, 3, 0]
    s = [0] * 5 + [1] * 5 + [2] * 2 + [3] * 2
    x = [0, 1, 2, 3, 4] + [0, 1, 2, 3, 4] + [0, 1] + [3, 4]
    y = [v * v + 10 * k for v, k in zip(x, s)]
    run("under-min positions: y = x^2 (+ level per stratum)", s, x, y, min_slopes_per_x=1)
    run("under-min positions: y = x^2 (+ level per stratum)", s, x, y, min_slopes_per_x=3)

    # 3. the last x: kept iff the slope at the second-to-last x is valid
    s = [0] * 4 + [1] * 3
    x = [0, 1, 2, 3] + [0, 1, 2]
    y = [v + 10 * k for v, k in zip(x, s)]
    run("last x: only one leaf reaches x=3", s, x, y, min_slopes_per_x=1)
    run("last x: only one leaf reaches x=3", s, x, y, min_slopes_per_x=2)

    # 4. a run of NaN slopes (two empty intervals): only the first position of the run is kept
    s = [0, 0, 1, 2, 2]
    x = [0, 1, 5, 9, 10]
    y = [0, 1, 50, 90, 100]
    run("run of unsupported positions: x=1 (end of leaf 0), x=5 (single-x leaf), x=9", s, x, y)

    # 5. NaN slopes.  NaN (or inf) y cannot reach the slopes: scikit-learn's fit refuses it
    # ("Input y contains NaN").  A NaN x can: np.unique keeps one NaN as the last grid
    # position, the leaf's last segment is [x_max, nan) with a NaN slope (mean of no rows)
    s = [0, 0, 0, 1, 1]
    x = [0, 1, np.nan, 0, 1]
    y = [0, 1, 5, 10, 12]
    run("NaN x in leaf 0", s, x, y)

    # 6. a leaf with a gap: its segment [1,3) covers the grid position x=2 of another leaf
    s = [0, 0, 1, 1, 1]
    x = [1, 3, 1, 2, 3]
    y = [0, 4, 10, 11, 14]
    run("leaf 0 has x {1,3}: slope 2 applies at x=1 and x=2", s, x, y)

    # 7. leading unsupported positions: the curve starts at 0 at the first kept x
    s = [0, 0, 1, 1, 1, 2, 2, 2]
    x = [0, 1, 1, 2, 3, 1, 2, 3]
    y = [0, 5, 10, 12, 14, 20, 22, 24]
    run("leading position under min_slopes_per_x", s, x, y, min_slopes_per_x=2)

    # 8. uneven spacing, quadratic, one leaf: the flat rule is exact where slopes exist
    x = [0, 0.1, 0.3, 1.0, 2.5]
    run("one leaf, uneven x, y = x^2", [0] * 5, x, [v * v for v in x])


if __name__ == "__main__":
    main()
