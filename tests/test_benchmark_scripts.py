"""The benchmark scripts run, use only daskpd's public API, and are documented.

Every script in benchmarks/ is run here at a tiny size, in a subprocess, exactly as a
user runs it (``python benchmarks/NAME.py ...``, data written into a temporary
directory), and must exit 0 and print its table.  A benchmark that cannot start is a
figure nobody can reproduce.  The reference side (stratx, in its own virtualenv) is
skipped with the scripts' own switches; its runner, ``stratx_runner.py``, needs stratx
and is only checked for syntax.

Public API: ``import daskpd`` and its public modules (``daskpd.datasets``,
``daskpd.io``, ``daskpd.plotting``, ...); never a module or attribute whose name starts
with an underscore (``daskpd._strat``, ``daskpd._engine``, ...), so that the benchmarks
measure what users call and survive refactors of the internals.
"""
from __future__ import annotations

import ast
import importlib
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "benchmarks"
SCRIPTS = sorted(BENCH.glob("*.py"))
BENCH_DOC = REPO / "docs" / "benchmarks.md"

#: script (then, for a second run of one script, a label) -> (arguments for a tiny run, given a temporary
#: directory; what its output must contain)
TINY = {
    "bench_stratpd.py": (lambda d: ["--sizes", "2e3", "--stratx-max", "0", "--seeds", "2", "--workdir", d],
                         # one row per scheme (seconds, MiB, RMSE, max err, slope), then their ratios
                         r"\| 2000 \| 1001 \| honest \| [0-9.]+ \| [0-9,]+ \| [0-9.]+ \| [0-9.]+ \| -?[0-9.]+ \|[\s\S]*"
                         r"\| 2000 \| 1001 \| one-tree \| [0-9.]+ \| [0-9,]+ \| [0-9.]+ \| [0-9.]+ \| -?[0-9.]+ \|[\s\S]*"
                         r"honest / one-tree[\s\S]*\| 2,000 \| [0-9.]+x \| [0-9.]+x \| [0-9.]+x \| [0-9.]+x \|"
                         # --seeds 2: each scheme's error over both data sets, honest against one-tree
                         r"[\s\S]*over 2 data sets[\s\S]*\| 2,000 \| honest \| 2 \| [0-9.]+ \([0-9.]+-[0-9.]+\) \| "
                         r"[0-9.]+-[0-9.]+ \| [0-9.]+x \([0-9.]+-[0-9.]+\) \| [0-2] of 2 \|"),
    "bench_catstratpd.py": (lambda d: ["--sizes", "2e3", "--levels", "20", "--skip-stratx", "--seeds", "2",
                                       "--workdir", d],
                            r"\| 2,000 \| 20 \| honest \| [0-9.]+ \| n/a \| - \| [0-9,]+ \| - \| [0-9.]+ \| [0-9.]+ \| "
                            r"-?[0-9.]+ \|[\s\S]*\| 2,000 \| 20 \| one-tree \| [0-9.]+ \| n/a \| - \| [0-9,]+ \| - \| "
                            r"[0-9.]+ \| [0-9.]+ \| -?[0-9.]+ \|[\s\S]*honest / one-tree[\s\S]*"
                            r"\| 2,000 \| [0-9.]+x \| [0-9.]+x \| [0-9.]+x \| [0-9.]+x \|"
                            r"[\s\S]*over 2 data sets[\s\S]*\| 2,000 \| one-tree \| 2 \| [0-9.]+ \("),
    "bench_importances.py": (lambda d: ["--n-small", "2e3", "--n-large", "4e3", "--trials", "2", "--skip-stratx",
                                        "--workdir", d],
                             # the partition reads: daskpd's map tasks, counted (never 0)
                             r"\| mixed \| daskpd, defaults, bootstrap trials \| 4,000 \| 2 \| [0-9.]+ \|  \| [0-9,]+ \| "
                             r"[1-9][0-9]* \([0-9]+\) \|"),
    "bench_scan_memory.py": (lambda d: ["--n", "4e3", "--trials", "1,2", "--split-every", "auto,2", "--workdir", d],
                             r"\| 2 \| 2 \| [0-9.]+ \| [0-9.]+ / [0-9.]+ / [0-9.]+ \|"),
    "bench_tree.py": (lambda d: ["--sizes", "3e3", "--seeds", "1", "--n-importances", "4e3", "--stratpd-sizes", "3e3",
                                 "--workdir", d],
                      r"exact / hist fit time: [0-9.]+x[\s\S]*numeric3: time hist[\s\S]*3,000 +exact"),
    "bench_model.py": (lambda d: ["--sizes", "2e3,3e3", "--sklearn-max", "2e3", "--grid", "10", "--fit-rows", "2e3",
                                 "--data-dir", d],
                       r"\| 2,000 \| [0-9.]+ \| [0-9.]+ \| [0-9.]+x \| [0-9.e+-]+ \| [0-9.e+-]+ \|\n\| 3,000 \| skipped"),
    "bench_pd_engines.py": (lambda d: ["--rows", "2e3", "--ref-rows", "300", "--ref-rows-2way", "100", "--trees", "5",
                                       "--grid", "4", "--skip-h2o"],
                            r"GBR +1-way 3 x 4 +[0-9.]+ +[0-9.]+ +[0-9.]+x[\s\S]*HGB categorical +2-way 4 x 4 +[0-9.]+"),
    "bench_lake.py": (lambda d: ["--rows", "2e4", "--workers", "1", "--threads", "--memory-limit", "1GiB",
                                 "--workdir", d],
                      r"\| 1 x 1 thread, 1GiB \| [0-9.]+ \| [0-9.]+ \|[\s\S]*importances equal \(5 decimals\) threads vs 1 worker processes: True"),
    "bench_small_files.py": (lambda d: ["--rows", "2e4", "--files", "200,4", "--workers", "1", "--memory-limit", "1GiB",
                                       "--workdir", d],
                             r"\| 200 \| 100 \| [0-9.]+ \| [0-9.]+x \| 0\.0e\+00 \|\n\| 4 \| 5,000 \| [0-9.]+ \| 1\.00x \|"),
    "bench_bands.py": (lambda d: ["--rows", "2e4", "--workers", "0", "--sync", "--trials", "2", "--grid", "4",
                                  "--fit-rows", "2e3", "--no-warmup", "--repeat", "2", "--workdir", d],
                       r"dask's synchronous scheduler \(1 thread\), fastest of 2 alternating runs[\s\S]*"
                       r"\| importances of every feature \(StratPD/CatStratPD\) \| [0-9.]+ \| [0-9.]+ \| [0-9.]+x \| "
                       r"[0-9.]+ -> [0-9.]+ \| [0-9.]+x \|[\s\S]*# strat: every run's wall s, n_trials=1: [0-9.]+, [0-9.]+; "
                       r"n_trials=2: [0-9.]+, [0-9.]+"),
    "bench_bands_duplicates.py": (lambda d: ["--rows", "4e3", "--binary", "4", "--trials", "20", "--strat-rows", "2e3"],
                                  r"\| binary features only \| 16 \| 0 \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \|[\s\S]*"
                                  r"\| plus a continuous feature \| 4,000 \| 1 \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \|[\s\S]*"
                                  r"StratPD of x1, 2,000 rows[\s\S]*\| 5 \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \|"),
    "bench_nightly.py": (lambda d: ["--tiny", "--workdir", d],
                         r"\| incremental rerun \(\+4,000 rows, 2 files\) \| [0-9.]+ \| [0-9.]+ \| incremental \|[\s\S]*"
                         r"rows True, importance max \|diff\| [0-9.e+-]+[\s\S]*"
                         r"first-pass cache: incremental rerun [0-9.]+ s vs [0-9.]+ s"),
    # the same nights on a Delta Lake table: the rows appended as two commits of its log
    "bench_nightly.py --source delta": (lambda d: ["--tiny", "--source", "delta", "--workdir", d],
                                        r"\| incremental rerun \(\+4,000 rows, 2 commits\) \| [0-9.]+ \| [0-9.]+ \| "
                                        r"incremental \|[\s\S]*rows True, importance max \|diff\| [0-9.e+-]+"),
    "bench_first_pass_cache.py": (lambda d: ["--tiny", "--workdir", d],
                                  r"\| next night \(\+4,000 rows\), cache on \| [0-9.]+ \| [0-9.]+ \| 2 of 6 \|[\s\S]*"
                                  r"bit for bit: True"),
    "bench_bands_stratx.py": (lambda d: ["--n", "1000", "--trials", "3", "--skip-stratx", "--workdir", d],
                              r"\| StratPD x1 \| daskpd \| 3 \| [0-9.]+ \|[\s\S]*\| CatStratPD c \| daskpd \| 3 \| [0-9.]+ \|"),
    "bench_h_statistic.py": (lambda d: ["--rows", "2e3", "--brute-rows", "1e3", "--points", "30", "--trees", "5",
                                        "--accuracy-rows", "150", "--accuracy-points", "40", "--seeds", "2",
                                        "--population-rows", "1e3"],
                             r"max \|H² brute - tree\| = [0-9.e+-]+[\s\S]*\| 2,000 \| [0-9.]+ \| [0-9.]+ \(2 x [0-9.]+\) \| "
                             r"[0-9.]+x \|[\s\S]*\| 40 \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \|"),
    "bench_bands.py coverage": (lambda d: ["--coverage", "--seeds", "2", "--n", "600", "--coverage-trials", "3",
                                           "--designs", "discrete", "--workdir", d],
                                r"\| StratPD \| discrete \| honest \| 3 \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \([0-9.]+\) \|[\s\S]*"
                                r"\| StratPD \| discrete \| one tree \| 3 \|[\s\S]*\| marginal \| fixed model \| - \| 3 \|"),
    "bench_drift.py": (lambda d: ["--nights", "1", "--old", "2000", "--new", "500", "--trials", "20", "--designs",
                                  "discrete", "--refit", "never,always", "--changes", "none,c", "--skew", "0.5"],
                       r"\| discrete \| never \| none \| [0-9.]+ \([01]/1\) \| n/a \| [0-9.]+ \|[\s\S]*"
                       r"\| discrete \| always \| c \| [0-9.]+ \([01]/1\) \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \|[\s\S]*"
                       r"under no change, every curve's points:[\s\S]*\| discrete \| always \| c \| [0-9]+ \| [0-9.]+ \| "
                       r"[0-9.]+ \|"),
    # the comparison of consecutive runs' curves (daskpd history)
    "bench_drift.py --test between-runs": (lambda d: ["--test", "between-runs", "--pairs", "1", "--n", "500",
                                                      "--trials", "2", "--designs", "discrete"],
                                           r"\| discrete \| x2 \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| "
                                           r"[0-9.]+ \| [0-9]+ \|"),
}
#: scripts that need stratx (its own virtualenv); compiled, not run
NEEDS_STRATX = {"stratx_runner.py"}
#: modules of a script (imported by it, run through its tiny runs), not scripts themselves
MODULES = {"coverage_designs.py": "bench_bands.py"}


def test_every_benchmark_is_run_or_needs_stratx():
    names = {p.name for p in SCRIPTS}
    assert names == {n.split()[0] for n in TINY} | NEEDS_STRATX | set(MODULES), \
        "add a tiny run to TINY for every new benchmark script"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_a_benchmark_module_is_imported_by_its_script(module):
    script = (BENCH / MODULES[module]).read_text(encoding="utf-8")
    assert f"from {module[:-3]} import" in script or f"import {module[:-3]}" in script


@pytest.mark.parametrize("name", sorted(NEEDS_STRATX))
def test_stratx_runner_compiles(name):
    compile((BENCH / name).read_text(), name, "exec")


def _names_used(tree: ast.AST):
    """(line, dotted name) of every daskpd import and every ``daskpd.x.y`` attribute chain."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "daskpd")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "daskpd":
            yield node.lineno, node.module
            yield from ((node.lineno, f"{node.module}.{a.name}") for a in node.names)
        elif isinstance(node, ast.Attribute):
            parts, n = [], node
            while isinstance(n, ast.Attribute):
                parts.append(n.attr)
                n = n.value
            if isinstance(n, ast.Name) and n.id == "daskpd":
                yield node.lineno, ".".join(["daskpd", *reversed(parts)])


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_benchmark_uses_only_the_public_api(script):
    tree = ast.parse(script.read_text(), filename=str(script))
    private = [f"{script.name}:{line}: {name}" for line, name in _names_used(tree)
               if any(part.startswith("_") and not part.endswith("__") for part in name.split("."))]
    assert not private, "benchmarks must use daskpd's public API:\n" + "\n".join(private)
    missing = []
    for line, name in _names_used(tree):
        parts = name.split(".")
        k = 0  # the longest importable module, then the attributes after it
        for i in range(1, len(parts) + 1):
            try:
                importlib.import_module(".".join(parts[:i]))
            except ImportError:
                break
            k = i
        if k == 0:
            missing.append(f"{script.name}:{line}: {name}")
            continue
        obj = importlib.import_module(".".join(parts[:k]))
        for attr in parts[k:]:
            if not hasattr(obj, attr):
                missing.append(f"{script.name}:{line}: {name}")
                break
            obj = getattr(obj, attr)
    assert not missing, "names the package does not have:\n" + "\n".join(missing)


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_benchmark_is_documented(script):
    text = BENCH_DOC.read_text(encoding="utf-8")
    assert f"benchmarks/{script.name}" in text, f"docs/benchmarks.md does not mention benchmarks/{script.name}"


def test_installed_package_has_no_benchmark_harness():
    """Installed code never reaches into the source tree's benchmarks/ folder: no module
    ``daskpd.bench``, and no string in daskpd's code (docstrings aside) naming it."""
    assert not (REPO / "daskpd" / "bench.py").exists() and not (REPO / "daskpd" / "bench").exists()
    offenders = []
    for path in (REPO / "daskpd").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}
        offenders += [f"{path.relative_to(REPO)}:{n.lineno}" for n in ast.walk(tree)
                      if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings
                      and "benchmarks" in n.value]
    assert not offenders, offenders


#: the tiny runs that take longest start first (they are run two at a time)
SLOW_FIRST = ["bench_importances.py", "bench_small_files.py", "bench_scan_memory.py", "bench_lake.py"]


def _run_tiny(name: str, tmp_path: Path):
    args, _ = TINY[name]
    work = tmp_path / "work"
    work.mkdir(parents=True)
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONPATH=os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]))
    return subprocess.run([sys.executable, str(BENCH / name.split()[0]), *args(str(work))], capture_output=True,
                          text=True,
                          cwd=tmp_path, env=env, timeout=600)


@pytest.fixture(scope="module")
def tiny_runs(request, tmp_path_factory):
    """The selected tiny runs, started together on first use, two subprocesses at a time
    (a tiny run is mostly one process importing and starting dask: two overlap on two
    cores); each test then waits for its own."""
    names = {item.callspec.params["name"] for item in request.session.items
             if getattr(item, "originalname", "") == "test_benchmark_runs_at_tiny_size"}
    order = sorted(names, key=lambda n: (SLOW_FIRST.index(n) if n in SLOW_FIRST else len(SLOW_FIRST), n))
    pool = ThreadPoolExecutor(max_workers=2)
    root = tmp_path_factory.mktemp("bench")
    futures = {n: pool.submit(_run_tiny, n, root / n.replace(".py", "").replace(" ", "_")) for n in order}
    yield futures
    pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.cluster) if n == "bench_lake.py" else n
                                  for n in sorted(TINY)])
def test_benchmark_runs_at_tiny_size(name, tiny_runs):
    _, expected = TINY[name]
    proc = tiny_runs[name].result()
    assert proc.returncode == 0, f"{name} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    assert re.search(expected, proc.stdout), f"{name} printed no result table:\n{proc.stdout[-3000:]}"
    # nothing written outside the temporary directory (in particular not into the repository)
    assert not (REPO / "benchmarks" / "work").exists()
