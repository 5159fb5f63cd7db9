"""The benchmark scripts import only what the package has: every ``import daskpd...`` and
``from daskpd... import name`` in benchmarks/*.py (also inside functions) resolves.  A
restructuring of the package once left five scripts importing modules that were gone;
a benchmark that cannot start is a figure nobody can reproduce.  Imports guarded by an
``except ImportError`` fallback are left out (the fallback is the point)."""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
SCRIPTS = sorted(BENCH.glob("*.py"))


def _guarded(tree: ast.AST) -> set[int]:
    """ids of the nodes of a ``try`` whose handlers catch ImportError (body and handlers:
    a script may fall back to the modules of an older daskpd, to compare versions)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
                h.type is None or "ImportError" in ast.unparse(h.type) or "ModuleNotFoundError" in ast.unparse(h.type)
                for h in node.handlers):
            for inner in [*node.body, *node.handlers]:  # the guarded imports and their fallbacks
                out.update(id(n) for n in ast.walk(inner))
    return out


def _daskpd_imports(path: Path) -> list[tuple[int, str, str | None]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    guarded = _guarded(tree)
    found = []
    for node in ast.walk(tree):
        if id(node) in guarded:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name, None) for a in node.names if a.name.split(".")[0] == "daskpd"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "daskpd":
            found += [(node.lineno, node.module, a.name) for a in node.names]
    return found


def test_there_are_benchmark_scripts():
    assert len(SCRIPTS) >= 5 and any(_daskpd_imports(p) for p in SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_benchmark_imports_resolve(script):
    missing = []
    for line, module, name in _daskpd_imports(script):
        try:
            mod = importlib.import_module(module)
        except ImportError as exc:
            missing.append(f"{script.name}:{line}: import {module} ({exc})")
            continue
        if name is not None and name != "*" and not hasattr(mod, name):
            try:
                importlib.import_module(f"{module}.{name}")
            except ImportError:
                missing.append(f"{script.name}:{line}: from {module} import {name} (no such name)")
    assert not missing, "\n".join(missing)
