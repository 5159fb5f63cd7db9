#!/usr/bin/env python
"""The stratifying trees' ``apply``: ten lake trees on 500,000 rows.

    .venv/bin/python benchmarks/bench_apply.py [--rows 500000] [--repeat 5]

Fits, as ``daskpd.importances`` does on the lake benchmark, one histogram tree per feature
on a 200,000-row sample of :class:`daskpd.datasets.Lake` (every other feature, the
defaults ``min_samples_leaf=15`` and, for the categorical ``s50`` and ``k5000``,
``cat_min_samples_leaf=5``), then times ``histtree._apply`` (best of ``--repeat``)
on ``--rows`` other rows, against the kernel it replaced (rows in lockstep blocks of 8,
kept below for the comparison).  Checks that both give the same leaves.
"""
from __future__ import annotations

import argparse
import time

import numba
import numpy as np


@numba.njit(cache=False, nogil=True)
def lockstep_apply(X, thr, meta, leaf_map):
    """The previous kernel: blocks of 8 rows descend together until the deepest is done."""
    n = X.shape[0]
    out = np.empty(n, leaf_map.dtype)
    ks = np.zeros(8, np.int64)
    for i0 in range(0, n, 8):
        m = min(8, n - i0)
        for r in range(m):
            ks[r] = 0
        active = m
        while active > 0:
            active = 0
            for r in range(m):
                k = ks[r]
                mt = meta[k]
                c = mt >> 32
                if c >= 0:
                    v = X[i0 + r, c]
                    code = mt & 0xFFFFFFFF
                    go = np.int64((v <= thr[k]) | (np.isnan(v) & ((code & 1) == 1)))
                    ks[r] = (code >> 1) + 1 - go
                    active += 1
        for r in range(m):
            out[i0 + r] = leaf_map[ks[r]]
    return out


def main(argv=None):
    from daskpd._data.encode import FeatureEncoder
    from daskpd._strat.histtree import HistTree, _apply, auto_max_bins
    from daskpd.datasets import Lake

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=500_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)

    lake = Lake(random_state=0)
    sample, rows = lake.chunk(0, 200_000), lake.chunk(1, args.rows)
    features = [c for c in sample.columns if c != "y"]
    enc = FeatureEncoder.fit(sample, features)
    Xs = np.ascontiguousarray(enc.transform(sample), dtype="float64")
    X = np.ascontiguousarray(enc.transform(rows), dtype="float64")
    col = {c: j for j, c in enumerate(enc.columns)}
    y = sample["y"].to_numpy("float64")

    def best(fn, *a):
        t = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            fn(*a)
            t.append(time.perf_counter() - t0)
        return min(t)

    total_old = total_new = 0.0
    print(f"| feature | nodes | depth | lockstep s | refill s |\n|---|---:|---:|---:|---:|")
    for f in features:
        cols = np.asarray([col[c] for c in features if c != f], np.int64)
        msl = 5 if f in ("s50", "k5000") else 15
        tree = HistTree(min_samples_leaf=msl, max_bins=auto_max_bins(Xs[:, cols])).fit(Xs[:, cols], y)
        meta = tree.node_meta(cols)
        leaf_map = np.arange(tree.node_count, dtype=np.int32)
        args_ = (X, tree.threshold_, meta, leaf_map)
        if not np.array_equal(lockstep_apply(*args_), _apply(*args_)):
            raise SystemExit(f"the kernels disagree on feature {f!r}")
        old, new = best(lockstep_apply, *args_), best(_apply, *args_)
        total_old, total_new = total_old + old, total_new + new
        print(f"| {f} | {tree.node_count} | {tree.get_depth()} | {old:.4f} | {new:.4f} |")
    print(f"| all {len(features)} | | | {total_old:.4f} | {total_new:.4f} |")
    print(f"# {args.rows:,} rows: refill {total_old / total_new:.2f}x faster than lockstep (same leaves)")


if __name__ == "__main__":
    main()
