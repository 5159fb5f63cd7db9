"""daskpd: partial dependence on Dask, for tables too large for one machine.

Model-free: :func:`stratpd` (numeric features), :func:`catstratpd` (categorical
features), :func:`importances` (every feature, one scan).  Model-based:
:func:`partial_dependence` (Friedman PD, brute or tree recursion), :func:`ice`,
:func:`pd_variance`, :func:`marginal`, :func:`ale`.

Every function takes a pandas DataFrame, a dask DataFrame, or a parquet path/glob/URL,
runs on the current ``distributed.Client`` if there is one (else dask's threads), and
returns a small result object (``to_frame()``, ``to_parquet()``, ``plot()``).
Submodules are imported on first use, so ``import daskpd`` is cheap.
"""
from __future__ import annotations

import importlib
import importlib.util

__version__ = "0.1.0"

_API = {
    "stratpd": "daskpd.stratpd",
    "catstratpd": "daskpd.catstratpd",
    "importances": "daskpd.importance",
    "partial_dependence": "daskpd.model.fpd",
    "ice": "daskpd.model.ice",
    "ale": "daskpd.model.ale",
    "marginal": "daskpd.model.marginal",
    "pd_variance": "daskpd.model.variance",
    "compare": "daskpd.model.compare",
    "read_csv": "daskpd.io",
    "DataError": "daskpd._errors",
    "InvalidParameterError": "daskpd._errors",
    "SklearnDifferenceWarning": "daskpd._errors",
}

__all__ = sorted(_API)

# A submodule named like its function (daskpd.stratpd.stratpd) would shadow the
# function as soon as anything imports the submodule; bind those functions eagerly.
for _name in ("stratpd", "catstratpd"):
    if importlib.util.find_spec(f"daskpd.{_name}") is not None:
        globals()[_name] = getattr(importlib.import_module(f"daskpd.{_name}"), _name)
del _name


def __getattr__(name):
    if name in _API:
        mod = importlib.import_module(_API[name])
        value = getattr(mod, name)
        globals()[name] = value
        return value
    if not name.startswith("_") and importlib.util.find_spec(f"daskpd.{name}") is not None:
        return importlib.import_module(f"daskpd.{name}")  # daskpd.importance, daskpd.plotting, ...
    raise AttributeError(f"module 'daskpd' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)
