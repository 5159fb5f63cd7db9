#!/usr/bin/env python
"""StratPD: daskpd.stratpd vs stratx 0.5 on y = x1^2 + x2 + noise, wall time and peak memory.

    .venv/bin/python benchmarks/bench_stratpd.py --sizes 1e4,1e5,1e6,1e7 --stratx-max 1e6

Data: ``daskpd.datasets.Quadratic(decimals=2, x1_max=10)`` written as parquet files of
250,000 rows into ``--workdir`` (a temporary directory by default; reused when there).
Every measurement runs in a fresh subprocess and reports its own peak resident set size
(``ru_maxrss``) and wall time as JSON, so one run cannot inherit another's memory.  The
reference (stratx) runs through ``stratx_runner.py`` (next to this script) in its own
virtualenv (``setup_stratx.sh``), side by side in the same run; without that virtualenv
its columns say so.  See docs/benchmarks.md.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
STRATX_ROOT = Path(os.environ.get("STRATX_VENV_ROOT", Path.home() / ".cache" / "daskpd-bench"))


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def measure_in_subprocess(kind: str, timeout: float = 3600, **kwargs) -> dict:
    """Run ``_measure(kind, **kwargs)`` in a new interpreter; return its JSON report."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "measure", kind, json.dumps(kwargs)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"timeout after {timeout:.0f} s"}
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        return {"ok": False, "error": (out.stderr or out.stdout).strip().splitlines()[-1:] or ["failed"]}
    return json.loads(lines[-1])


def _measure(kind: str, args: dict) -> dict:
    import daskpd

    # Library imports are not part of the measurement (stratx's runner likewise loads
    # its data and warms numba up before its clock starts).
    import dask.dataframe  # noqa: F401
    import pyarrow.parquet  # noqa: F401
    import sklearn.tree  # noqa: F401

    rss0 = _peak_rss_bytes()
    t0 = time.perf_counter()
    if kind == "stratpd":
        res = daskpd.stratpd(args["data"], target=args["target"], feature=args["feature"], progress=False,
                             **args.get("params", {}))
        extra = {"positions": int(len(res.x)), "supported": int(res.supported.sum()), "leaves": res.n_leaves,
                 "binned": res.binned, "timings": res.params.get("timings"), "x": res.x.tolist(), "pd": [None if v != v else v for v in res.pd.tolist()]}
    else:
        raise ValueError(f"unknown measurement {kind!r}")
    secs = time.perf_counter() - t0
    return {"ok": True, "seconds": secs, "peak_rss_bytes": _peak_rss_bytes(), "rss_before_call_bytes": rss0, **extra}


def stratx_python(which: str = "stratx-new") -> Path | None:
    py = STRATX_ROOT / which / "bin" / "python"
    return py if py.exists() else None


def run_stratx(method: str, data: str, target: str, *, which: str = "stratx-new", timeout: float = 1800,
               **opts) -> dict:
    """Run stratx in its own venv through stratx_runner.py (next to this script); JSON report."""
    py = stratx_python(which)
    if py is None:
        return {"ok": False, "error": f"no {which} venv under {STRATX_ROOT} (run benchmarks/setup_stratx.sh)"}
    out_json = Path(data).with_suffix(f".stratx-{method}-{os.getpid()}.json")
    cmd = [str(py), str(HERE / "stratx_runner.py"), "--method", method, "--data", str(data),
           "--target", target, "--out", str(out_json)]
    for k, v in opts.items():
        cmd += [f"--{k.replace('_', '-')}", str(v)]
    env = dict(os.environ, MPLBACKEND="Agg")
    try:
        subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"timeout after {timeout:.0f} s"}
    if not out_json.exists():
        return {"ok": False, "error": "stratx runner wrote no result"}
    rep = json.loads(out_json.read_text())
    out_json.unlink()
    return rep


def _fmt_s(rep):
    return f"{rep['seconds']:.2f}" if rep.get("ok") else "n/a"


def _fmt_mb(rep, key="peak_rss_bytes"):
    return f"{rep[key] / 2**20:,.0f}" if rep.get("ok") and rep.get(key) else "n/a"


def bench_stratpd(sizes, workdir: Path, decimals: int, stratx_max: float, params: dict) -> list[dict]:
    import numpy as np

    from daskpd.datasets import Quadratic, write_parquet

    rows = []
    for n in sizes:
        n = int(n)
        gen = Quadratic(random_state=0, decimals=decimals, x1_max=10.0)
        path = workdir / f"quad-{decimals}-{n}"
        t0 = time.perf_counter()
        write_parquet(gen, n, path, rows_per_file=min(n, 250_000), overwrite=False)
        gen_s = time.perf_counter() - t0
        ours = measure_in_subprocess("stratpd", data=str(path), target="y", feature="x1", params=params)
        ref = {"ok": False, "error": "skipped (n > --stratx-max)"}
        if n <= stratx_max:
            ref = run_stratx("stratpd", str(path), "y", feature="x1")
        err = ""
        if ours.get("ok"):
            x = np.array(ours["x"], float)
            p = np.array([np.nan if v is None else v for v in ours["pd"]], float)
            ok = np.isfinite(p)
            truth = x[ok] ** 2 - x[ok].min() ** 2
            err = f"{np.sqrt(np.mean((p[ok] - truth) ** 2)):.3f}"
        row = {"n": n, "distinct_x": int(10 ** decimals * 10 + 1), "daskpd_s": _fmt_s(ours),
               "daskpd_peak_MiB": _fmt_mb(ours), "daskpd_rmse": err, "stratx_s": _fmt_s(ref),
               "stratx_peak_MiB": _fmt_mb(ref),
               "speedup": f"{ref['seconds'] / ours['seconds']:.1f}x" if ref.get("ok") and ours.get("ok") else
               ("stratx: " + str(ref.get("error", "?"))[:40]),
               "datagen_s": f"{gen_s:.1f}"}
        rows.append(row)
        print(_row_line(row), flush=True)
    return rows


def _row_line(row: dict) -> str:
    return "| " + " | ".join(str(v) for v in row.values()) + " |"


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["measure"]:  # one measurement, in the subprocess started by measure_in_subprocess
        print(json.dumps(_measure(argv[1], json.loads(argv[2]))))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1e4,1e5,1e6,1e7")
    ap.add_argument("--decimals", type=int, default=2, help="x1 ~ U(0,10) rounded: 2 -> 1,001 distinct values")
    ap.add_argument("--stratx-max", type=float, default=1e6, help="largest n to run stratx on (0: never)")
    ap.add_argument("--workdir", default=os.environ.get("DASKPD_BENCH_DIR",
                                                      os.path.join(tempfile.gettempdir(), "daskpd-bench")))
    ap.add_argument("--max-bins", type=int, default=None)
    a = ap.parse_args(argv)
    workdir = Path(a.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    sizes = [float(x) for x in a.sizes.split(",")]
    params = {} if a.max_bins is None else {"max_bins": a.max_bins}
    print(f"# daskpd.stratpd vs stratx.partial_dependence; {os.cpu_count()} cores; command: "
          f"benchmarks/bench_stratpd.py {' '.join(argv)}")
    print("| n | distinct x | daskpd s | daskpd peak MiB | daskpd RMSE vs truth | stratx s | stratx peak MiB | "
          "speed-up | data gen s |")
    print("|---|---|---|---|---|---|---|---|---|")
    rows = bench_stratpd(sizes, workdir, a.decimals, a.stratx_max, params)
    return 0 if all(r["daskpd_rmse"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
