"""Benchmark: daskpd.partial_dependence vs scikit-learn's brute-force partial_dependence.

One feature, 100 grid points, a HistGradientBoostingRegressor (100 trees, fitted once
on 100,000 rows of the same distribution, without feature names).
For each size, both run on the same rows and report their wall time, the ratio and the
largest absolute difference between the two curves (and between the two grids).  For
sizes above ``--sklearn-max`` (default 1e6) scikit-learn is skipped: it keeps every
prediction (rows x grid x 8 bytes: 8 GB at 1e7) on top of a copy of X; daskpd reads the
data from a chunked parquet directory written without ever holding the table.

    python benchmarks/bench_model.py --sizes 1e5,1e6,1e7

Options: ``--grid 100``, ``--feature 1``, ``--cluster`` (a LocalCluster, one worker per
core; default: dask's threads), ``--data-dir`` (where the parquet goes; default a temp
dir), ``--engine`` (auto | predict: force daskpd to call predict on stacked copies),
``--fit-rows`` (rows the model is fitted on, default 1e5).
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time

import numpy as np
import pandas as pd

N_FEATURES = 5
COLUMNS = [f"x{i}" for i in range(N_FEATURES)]


def make_rows(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.uniform(0.0, 1.0, size=(n, N_FEATURES))


def target(X: np.ndarray, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed + 10_000)
    return (3 * X[:, 0] + np.sin(6 * X[:, 1]) + 2 * X[:, 2] * X[:, 3] + X[:, 4] ** 2
            + rng.normal(0, 0.1, len(X)))


def fit_model(rows: int = 100_000):
    from sklearn.ensemble import HistGradientBoostingRegressor

    X = make_rows(rows, seed=1)
    return HistGradientBoostingRegressor(max_iter=100, early_stopping=False, random_state=0).fit(X, target(X, 1))


def write_parquet(path: str, n: int, chunk: int = 1_000_000) -> None:
    """n rows as one parquet file per ``chunk`` rows, generated chunk by chunk."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(path, exist_ok=True)
    for i, start in enumerate(range(0, n, chunk)):
        m = min(chunk, n - start)
        X = make_rows(m, seed=100 + i)
        pq.write_table(pa.Table.from_pandas(pd.DataFrame(X, columns=COLUMNS), preserve_index=False),
                       os.path.join(path, f"part.{i:05d}.parquet"))


def parse_sizes(s: str) -> list[int]:
    return [int(float(x)) for x in s.split(",") if x.strip()]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1e5,1e6", help="comma-separated row counts, e.g. 1e5,1e6,1e7")
    ap.add_argument("--grid", type=int, default=100)
    ap.add_argument("--feature", type=int, default=1, help="feature index (0..4)")
    ap.add_argument("--sklearn-max", type=float, default=1e6, help="skip scikit-learn above this many rows")
    ap.add_argument("--cluster", action="store_true", help="run daskpd on a LocalCluster (one worker per core)")
    ap.add_argument("--data-dir", default=None, help="where the parquet data is written (default: a temp dir)")
    ap.add_argument("--engine", default="auto", choices=["auto", "predict"])
    ap.add_argument("--fit-rows", type=float, default=1e5, help="rows the model is fitted on")
    args = ap.parse_args(argv)

    import sklearn
    from sklearn.inspection import partial_dependence as sk_pd

    import daskpd

    sizes = parse_sizes(args.sizes)
    feat = COLUMNS[args.feature]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"# python {platform.python_version()}, scikit-learn {sklearn.__version__}, daskpd {daskpd.__version__}, "
          f"cores {os.cpu_count()}, load average at start {load:.1f}", flush=True)
    t = time.perf_counter()
    model = fit_model(int(args.fit_rows))
    print(f"# model: HistGradientBoostingRegressor, {model.n_iter_} trees, fitted in "
          f"{time.perf_counter() - t:.1f}s; feature {feat}, grid {args.grid}, engine {args.engine}", flush=True)
    client = cluster = None
    if args.cluster:
        from distributed import Client, LocalCluster

        cluster = LocalCluster(n_workers=os.cpu_count() or 1, threads_per_worker=1, host="127.0.0.1",
                               dashboard_address=None)
        client = Client(cluster)
        print(f"# daskpd on {client}", flush=True)
    tmp = args.data_dir or tempfile.mkdtemp(prefix="daskpd-bench-model-")
    rows = []
    try:
        for n in sizes:
            sk_s = diff = gdiff = None
            if n <= args.sklearn_max:
                X = make_rows(n, seed=2)
                df = pd.DataFrame(X, columns=COLUMNS)
                t = time.perf_counter()
                sk = sk_pd(model, X, [args.feature], method="brute", grid_resolution=args.grid)
                sk_s = time.perf_counter() - t
                print(f"  n={n:,}: scikit-learn brute {sk_s:.1f}s", flush=True)
                data = df
            else:
                path = os.path.join(tmp, f"rows-{n}")
                t = time.perf_counter()
                if not os.path.exists(path):
                    write_parquet(path, n)
                print(f"  n={n:,}: parquet ready in {time.perf_counter() - t:.1f}s at {path}", flush=True)
                data = path
            t = time.perf_counter()
            res = daskpd.partial_dependence(model, data, feat, grid_resolution=args.grid, method="brute",
                                            engine=args.engine, progress=False)
            dp_s = time.perf_counter() - t
            print(f"  n={n:,}: daskpd {dp_s:.1f}s (engine {res.engine})", flush=True)
            if sk_s is not None:
                diff = float(np.max(np.abs(res.average - sk["average"][0])))
                gdiff = float(np.max(np.abs(res.grid_values[0] - sk["grid_values"][0])))
                del sk
            rows.append((n, sk_s, dp_s, diff, gdiff))
            print(f"  (load average now {os.getloadavg()[0]:.1f})" if hasattr(os, "getloadavg") else "", flush=True)
    finally:
        if client is not None:
            client.close()
            cluster.close()
        if args.data_dir is None:
            shutil.rmtree(tmp, ignore_errors=True)

    print()
    print("| rows | scikit-learn brute (s) | daskpd (s) | speed-up | max abs diff (PD) | max abs diff (grid) |")
    print("|---:|---:|---:|---:|---:|---:|")
    for n, sk_s, dp_s, diff, gdiff in rows:
        if sk_s is None:
            print(f"| {n:,} | skipped | {dp_s:.1f} | - | - | - |")
        else:
            print(f"| {n:,} | {sk_s:.1f} | {dp_s:.1f} | {sk_s / dp_s:.1f}x | {diff:.1e} | {gdiff:.1e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
