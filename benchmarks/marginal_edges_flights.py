#!/usr/bin/env python
"""Issue 13 item 5: marginal-plot bins over all rows vs over the rows averaged (finite y),
on flights (target delay, feature distance, 20 quantile bins).

    .venv/bin/python benchmarks/marginal_edges_flights.py [path/to/flights_3m.parquet]

flights_3m.parquet as stored has no missing delay, so both ways give the same bins; the
variants make delay missing (over 120 min; 5 % at random; 10 % below 300 miles and 1 %
above).  Per variant: the largest |difference| in rows per bin between type-1 quantile
edges over every row with a distance and edges over the rows with a finite delay (both
computed here with pandas), and whether ``daskpd.marginal`` (this checkout) matches the
latter.
"""
import os
import sys
import warnings

import numpy as np
import pandas as pd

warnings.simplefilter("ignore")


def bins_over(x_edges, x_rows, bins):
    from daskpd._engine.stats import type1_ranks

    xs = np.sort(x_edges)
    z = np.unique(xs[[0, *type1_ranks(len(xs), bins)]])
    k = np.clip(np.searchsorted(z, x_rows, side="left") - 1, 0, len(z) - 2)
    ok = (x_rows >= z[0]) & (x_rows <= z[-1])
    return z, np.bincount(k[ok], minlength=len(z) - 1)


def main():
    import daskpd

    here = os.path.dirname(os.path.abspath(__file__))
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "..", "shared", "data", "flights_3m.parquet")
    if not os.path.exists(path):
        path = "/work/shared/data/flights_3m.parquet"
    df = pd.read_parquet(path, columns=["delay", "distance"])
    rng = np.random.default_rng(0)
    variants = {
        "as stored (no missing delay)": df.delay.astype(float),
        "delay > 120 min missing": df.delay.where(df.delay <= 120).astype(float),
        "5% missing at random": df.delay.where(rng.uniform(size=len(df)) > 0.05).astype(float),
        "10% missing below 300 miles, 1% above": df.delay.where(
            rng.uniform(size=len(df)) > np.where(df.distance < 300, 0.10, 0.01)).astype(float),
    }
    for name, y in variants.items():
        d = pd.DataFrame({"distance": df.distance.astype(float), "delay": y})
        fin = np.isfinite(d.delay.to_numpy())
        x_ok = d.distance.to_numpy()[fin]
        z_all, c_all = bins_over(d.distance.to_numpy(), x_ok, 20)
        z_ok, c_ok = bins_over(x_ok, x_ok, 20)
        diff = int(np.max(np.abs(c_all - c_ok))) if len(c_all) == len(c_ok) else "edges differ in number"
        res = daskpd.marginal(d, "distance", target="delay", bins=20)
        z_d = np.r_[res.lo[:1], res.hi]
        matches = (len(z_d) == len(z_ok) and np.array_equal(z_d, z_ok) and np.array_equal(res.count, c_ok))
        print(f"{name:40s} missing {int((~fin).sum()):7d}  max |rows per bin, all-row edges - averaged-row edges| "
              f"{diff}  daskpd.marginal uses averaged-row edges: {matches}")


if __name__ == "__main__":
    main()
