"""Every ``from <daskpd module> import name`` in daskpd resolves, the function-local ones
included: an import inside a function runs only when the function does, so a name moved
to another module would otherwise fail in a user's call, not at import."""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _imports():
    for path in sorted((ROOT / "daskpd").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        package = list(parts[:-1]) if parts[-1] != "__init__" else list(parts[:-1])
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module.split(".")[0] == "daskpd":
                yield path, node.lineno, module, [a.name for a in node.names if a.name != "*"]


def test_every_daskpd_import_names_something_that_exists():
    missing, seen = [], 0
    for path, line, module, names in _imports():
        mod = importlib.import_module(module)
        for name in names:
            seen += 1
            if hasattr(mod, name):
                continue
            try:
                importlib.import_module(f"{module}.{name}")
            except ImportError:
                missing.append(f"{path.relative_to(ROOT)}:{line}: {module} has no {name}")
    assert seen > 500, seen
    assert not missing, "\n".join(missing)
