"""Every name daskpd shows resolves: ``dir(daskpd)`` and ``__all__`` hold only what
exists, so ``inspect.getmembers(daskpd)``, tab completion and documentation tools that
walk the package never meet a name that raises."""
from __future__ import annotations

import importlib
import inspect

import daskpd


def test_every_name_in_dir_resolves():
    missing = []
    for name in dir(daskpd):
        try:
            getattr(daskpd, name)
        except Exception as exc:  # noqa: BLE001 - any failure is a name that does not exist
            missing.append((name, repr(exc)))
    assert not missing, missing


def test_all_is_public_and_resolves():
    assert all(not n.startswith("_") for n in daskpd.__all__)
    for name in daskpd.__all__:
        assert getattr(daskpd, name) is not None


def test_getmembers_walks_the_package():
    names = {n for n, _ in inspect.getmembers(daskpd)}
    assert {"stratpd", "catstratpd", "importances", "partial_dependence", "datasets", "io"} <= names


def test_public_submodules_import():
    for name in ("datasets", "io", "job", "model", "plotting", "results", "cli"):
        assert importlib.import_module(f"daskpd.{name}") is getattr(daskpd, name)


def test_no_former_names():
    """No aliases kept for names that changed before the first release: the importance
    functions are ``daskpd.importances`` / ``daskpd.strat_curves_and_importances``."""
    assert "importance" not in dir(daskpd) and not hasattr(daskpd, "importance")
