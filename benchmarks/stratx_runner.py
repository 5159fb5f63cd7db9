#!/usr/bin/env python
"""Time one call of the reference implementation stratx 0.5 on a parquet table.

Executed by the python of the reference venvs made by setup_stratx.sh
(stratx-new / stratx-old), never by the project's venv. It therefore imports
only stratx, numpy, pandas, pyarrow (through pandas) and the standard library
-- in particular NOT daskpd.

    python stratx_runner.py --method stratpd|catstratpd|importances \
        --data FILE.parquet|DIR --target y --feature x1 \
        [--features a,b,c] [--catcolumns c1,c2] [--min-samples-leaf 15] \
        [--min-slopes-per-x 5] [--out result.json]

Only the stratx call itself is timed (time.perf_counter). Loading the data,
dtype fixes and the numba JIT warm-up happen before the clock starts.
Memory: ``peak_rss_bytes`` is ru_maxrss of this process at the end,
``rss_before_call_bytes`` is ru_maxrss just before the call (after loading
and warm-up); the difference is what the call added to the peak.

Any exception (MemoryError included) is caught: the JSON then has
``"ok": false`` and ``"error": "MemoryError: ..."`` and the exit status is
still 0. A non-zero exit status means the runner itself could not run or could
not write its JSON (or the process was killed, e.g. by the OOM killer; use
--max-memory-bytes to turn that into a MemoryError).
"""
import argparse
import contextlib
import glob
import json
import math
import os
import platform
import resource
import sys
import time
import traceback

# stratx imports matplotlib.pyplot at import time: never need a display.
os.environ.setdefault("MPLBACKEND", "Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

METHODS = ("stratpd", "catstratpd", "importances")
# stratx 0.5 defaults (partial_dependence / cat_partial_dependence / importances)
DEFAULT_MIN_SAMPLES_LEAF = {"stratpd": 15, "catstratpd": 5, "importances": 15}


def _maxrss_bytes():
    # Linux: ru_maxrss is in KiB (macOS: bytes)
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(r) if sys.platform == "darwin" else int(r) * 1024


def _current_rss_bytes():
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _jsonable(v):
    """numpy / pandas values -> plain JSON values; NaN/inf -> null."""
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, np.ndarray):
        return _jsonable(v.tolist())
    if isinstance(v, (np.bool_, bool)):
        return bool(v)
    if isinstance(v, (np.integer, int)):
        return int(v)
    if isinstance(v, (np.floating, float)):
        f = float(v)
        return f if math.isfinite(f) else None
    if v is None or isinstance(v, str):
        return v
    if v is pd.NA or v is pd.NaT:
        return None
    return str(v)


def _split(s):
    return [c.strip() for c in s.split(",") if c.strip()] if s else []


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--method", required=True, choices=METHODS)
    p.add_argument("--data", required=True,
                   help="a parquet file or a directory of parquet files")
    p.add_argument("--target", required=True)
    p.add_argument("--feature", help="column whose PD is computed (stratpd/catstratpd)")
    p.add_argument("--features", default="",
                   help="comma list of the X columns (default: every column but the target)")
    p.add_argument("--catcolumns", default="",
                   help="comma list of categorical columns (importances: passed as "
                        "catcolnames; other methods: only encoded to integer codes)")
    p.add_argument("--min-samples-leaf", type=int, default=None,
                   help="default: stratx's own (15 stratpd/importances, 5 catstratpd)")
    p.add_argument("--cat-min-samples-leaf", type=int, default=5,
                   help="importances only: min_samples_leaf of its CatStratPD calls")
    p.add_argument("--min-slopes-per-x", type=int, default=5)
    p.add_argument("--n-trees", type=int, default=1)
    p.add_argument("--n-trials", type=int, default=1, help="importances only")
    p.add_argument("--seed", type=int, default=0,
                   help="np.random.seed before the call (stratx's forests use the "
                        "global numpy RNG); -1 = do not seed")
    p.add_argument("--no-warmup", action="store_true",
                   help="do not JIT-compile stratx's numba kernel on tiny data before "
                        "the timed call (then the timing includes ~5 s of compilation)")
    p.add_argument("--max-memory-bytes", type=int,
                   default=int(os.environ.get("STRATX_MAX_MEMORY_BYTES", "0") or 0),
                   help="RLIMIT_AS for this process (0 = none) so that running out of "
                        "memory raises MemoryError instead of summoning the OOM killer")
    p.add_argument("--out", help="JSON result file (default: stdout)")
    a = p.parse_args(argv)
    a.features = _split(a.features)
    a.catcolumns = _split(a.catcolumns)
    if a.method in ("stratpd", "catstratpd") and not a.feature:
        p.error(f"--feature is required for --method {a.method}")
    if a.min_samples_leaf is None:
        a.min_samples_leaf = DEFAULT_MIN_SAMPLES_LEAF[a.method]
    return a


# ------------------------------------------------------------------ data
def load_parquet(path, columns):
    """A parquet file or a directory of them (dask/pyarrow layout or plain files)."""
    try:
        return pd.read_parquet(path, columns=columns, engine="pyarrow")
    except Exception:
        if not os.path.isdir(path):
            raise
        files = sorted(glob.glob(os.path.join(path, "**", "*.parquet"), recursive=True))
        files = [f for f in files if not os.path.basename(f).startswith(("_", "."))]
        if not files:
            raise
        return pd.concat([pd.read_parquet(f, columns=columns, engine="pyarrow")
                          for f in files], ignore_index=True)


def to_plain_numpy(df):
    """stratx works on .values: make every column a plain numpy numeric dtype.

    category -> its integer codes (NaN -> -1), strings/objects -> sorted
    factorize codes, bool -> int64, nullable/arrow numerics -> numpy (float64
    with NaN when there are missing values). Returns (df, {col: labels}).
    """
    labels = {}
    out = {}
    for c in df.columns:
        s = df[c]
        if isinstance(s.dtype, pd.CategoricalDtype):
            out[c] = s.cat.codes.to_numpy().astype(np.int64)
            labels[c] = list(s.cat.categories)
        elif pd.api.types.is_bool_dtype(s.dtype):
            out[c] = s.to_numpy(dtype=np.int64, na_value=-1) if s.isna().any() \
                else s.to_numpy().astype(np.int64)
        elif pd.api.types.is_numeric_dtype(s.dtype):
            if isinstance(s.dtype, np.dtype):
                out[c] = s.to_numpy()
            elif s.isna().any():
                out[c] = s.to_numpy(dtype=np.float64, na_value=np.nan)
            else:
                out[c] = s.to_numpy(dtype=s.dtype.numpy_dtype)
        else:
            codes, uniques = pd.factorize(s, sort=True)
            out[c] = codes.astype(np.int64)
            labels[c] = list(uniques)
    return pd.DataFrame(out), labels


# ------------------------------------------------------------------ warm-up
def warmup_numba(partial_dependence, dtypes):
    """Compile stratx's numba kernel (avg_slopes_at_x_jit) for the x dtypes used.

    numba specialises on the dtype of the unique-x array, so warm up each one.
    """
    rng = np.random.RandomState(12345)
    n = 400
    for dt in sorted({np.dtype(d).str for d in dtypes}):
        x = (np.arange(n) % 20).astype(dt)
        z = rng.uniform(0, 1, n)
        X = pd.DataFrame({"x": x, "z": z})
        y = pd.Series(x.astype(float) + z)
        partial_dependence(X, y, "x", min_samples_leaf=15, min_slopes_per_x=1)


# ------------------------------------------------------------------ main
def run(a):
    res = {"method": a.method, "ok": False, "error": None, "n_rows": None,
           "seconds": None, "peak_rss_bytes": None, "rss_before_call_bytes": None,
           "data": os.path.abspath(a.data), "target": a.target, "feature": a.feature,
           "params": {"min_samples_leaf": a.min_samples_leaf,
                      "min_slopes_per_x": a.min_slopes_per_x,
                      "n_trees": a.n_trees, "seed": a.seed},
           "python": platform.python_version(), "numpy_version": np.__version__,
           "pandas_version": pd.__version__}
    if a.method == "importances":
        res["params"].update(n_trials=a.n_trials,
                             cat_min_samples_leaf=a.cat_min_samples_leaf,
                             catcolnames=a.catcolumns)
    t_start = time.perf_counter()
    t_call = None
    try:
        if a.max_memory_bytes and a.max_memory_bytes > 0:
            resource.setrlimit(resource.RLIMIT_AS,
                               (a.max_memory_bytes, a.max_memory_bytes))
            res["params"]["max_memory_bytes"] = a.max_memory_bytes

        import stratx  # noqa: F401  (imports matplotlib, sklearn, numba)
        from stratx.partdep import partial_dependence, cat_partial_dependence
        from stratx.featimp import importances
        try:
            from importlib.metadata import version
            res["stratx_version"] = version("stratx")
            res["sklearn_version"] = version("scikit-learn")
            res["numba_version"] = version("numba")
        except Exception:
            pass

        # ---- load
        features = list(a.features)
        if a.feature and features and a.feature not in features:
            features.append(a.feature)
        cols = (features + [a.target]) if features else None
        t0 = time.perf_counter()
        df = load_parquet(a.data, cols)
        if not features:
            features = [c for c in df.columns if c != a.target]
        missing = [c for c in features + [a.target] + a.catcolumns if c not in df.columns]
        if missing:
            raise KeyError(f"columns not in the data: {missing}")
        if a.feature and a.feature not in features:
            raise KeyError(f"--feature {a.feature} is not among the X columns")
        X, labels = to_plain_numpy(df[features])
        y = pd.Series(pd.to_numeric(df[a.target]).to_numpy(dtype=np.float64),
                      name=a.target)
        del df
        res["n_rows"] = int(len(X))
        res["n_features"] = int(X.shape[1])
        res["features"] = list(X.columns)
        res["encoded_columns"] = sorted(labels)
        res["load_seconds"] = time.perf_counter() - t0

        # ---- warm-up (numba JIT), outside the timed region
        res["warmup_seconds"] = 0.0
        if not a.no_warmup and a.method in ("stratpd", "importances"):
            if a.method == "stratpd":
                dts = [X[a.feature].dtype]
            else:
                dts = [X[c].dtype for c in X.columns if c not in a.catcolumns]
            t0 = time.perf_counter()
            with contextlib.redirect_stdout(sys.stderr):
                warmup_numba(partial_dependence, dts)
            res["warmup_seconds"] = time.perf_counter() - t0

        if a.seed >= 0:
            np.random.seed(a.seed)
        res["rss_before_call_bytes"] = _maxrss_bytes()
        res["rss_current_before_call_bytes"] = _current_rss_bytes()
        cpu0 = time.process_time()

        # ---- the timed call (stratx prints to stdout: keep stdout for JSON)
        with contextlib.redirect_stdout(sys.stderr):
            if a.method == "stratpd":
                t0 = t_call = time.perf_counter()
                out = partial_dependence(X, y, a.feature,
                                         min_slopes_per_x=a.min_slopes_per_x,
                                         n_trees=a.n_trees,
                                         min_samples_leaf=a.min_samples_leaf)
                res["seconds"] = time.perf_counter() - t0
            elif a.method == "catstratpd":
                t0 = t_call = time.perf_counter()
                out = cat_partial_dependence(X, y, a.feature,
                                             n_trees=a.n_trees,
                                             min_samples_leaf=a.min_samples_leaf)
                res["seconds"] = time.perf_counter() - t0
            else:
                t0 = t_call = time.perf_counter()
                out = importances(X, y, catcolnames=set(a.catcolumns),
                                  n_trials=a.n_trials,
                                  min_slopes_per_x=a.min_slopes_per_x,
                                  min_samples_leaf=a.min_samples_leaf,
                                  cat_min_samples_leaf=a.cat_min_samples_leaf,
                                  n_trees=a.n_trees)
                res["seconds"] = time.perf_counter() - t0
        res["peak_rss_bytes"] = _maxrss_bytes()
        # user+sys of all threads: a load-independent companion to "seconds"
        res["cpu_seconds"] = time.process_time() - cpu0

        # ---- result curves
        if a.method == "stratpd":
            (leaf_xranges, leaf_slopes, slope_counts_at_x, dx, slope_at_x,
             pdpx, pdpy, ignored) = out
            x_all = np.unique(X[a.feature].values.round(decimals=10))  # = stratx's grid
            pos = np.searchsorted(x_all, pdpx)
            res.update(
                x=pdpx, pd=pdpy,
                slope_counts=np.asarray(slope_counts_at_x)[pos],
                slope_at_x=np.asarray(slope_at_x)[pos],
                x_all=x_all, slope_at_x_all=slope_at_x,
                slope_counts_at_x_all=slope_counts_at_x,
                n_unique_x=int(len(x_all)), n_slopes=int(len(leaf_slopes)),
                ignored=int(ignored))
        elif a.method == "catstratpd":
            leaf_deltas, leaf_counts, avg_per_cat, count_per_cat, ignored = out
            codes = np.unique(X[a.feature].values)
            avg = np.asarray(avg_per_cat, dtype=float)[codes]
            lab = labels.get(a.feature)
            res.update(
                categories=codes,
                labels=[lab[c] if lab is not None and 0 <= c < len(lab) else c
                        for c in codes.tolist()],
                effects=avg,
                effects_centered=avg - np.nanmean(avg) if np.isfinite(avg).any() else avg,
                counts=np.asarray(count_per_cat)[codes],
                n_leaves=int(leaf_deltas.shape[1]),
                ignored=int(ignored))
        else:
            tbl = out.reset_index()
            res["importances"] = [
                {("feature" if k == "Feature" else k): v for k, v in row.items()}
                for row in tbl.to_dict(orient="records")]
            res["importance_columns"] = list(out.columns)
        res["ok"] = True
    except BaseException as e:  # MemoryError, numba errors, KeyboardInterrupt too
        if isinstance(e, SystemExit):
            raise
        res["ok"] = False
        res["error_type"] = type(e).__name__
        msg = str(e).strip().splitlines()
        res["error"] = f"{type(e).__name__}: {msg[0] if msg else ''}"[:2000]
        res["traceback"] = traceback.format_exc()[-4000:]
        res["peak_rss_bytes"] = _maxrss_bytes()
        if t_call is not None:  # failed inside the stratx call
            res["seconds_until_error"] = time.perf_counter() - t_call
        del e
    res["total_seconds"] = time.perf_counter() - t_start
    return res


def main(argv=None):
    a = parse_args(argv)
    res = run(a)
    text = json.dumps(_jsonable(res), allow_nan=False)
    if a.out:
        tmp = a.out + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, a.out)
    else:
        sys.stdout.write(text + "\n")
    status = (f"{res['seconds']:.3f}s" if res["ok"] else f"FAILED {res['error']}")
    print(f"stratx_runner: {a.method} n={res['n_rows']} {status} "
          f"peak_rss={res['peak_rss_bytes']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
