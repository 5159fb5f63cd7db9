"""The model-based family on Dask: Friedman PD (brute or tree recursion), ICE, 2-way PD,
PD variance (importance and interaction), marginal plots (M-plots) and ALE.

Every function reads only the columns it needs, builds every requested curve in one
partition map/reduce (plus, for data-driven grids and bins, one summary pass and a few
cheap passes over the feature columns for exact quantiles), and returns a small result
object with ``to_frame()``, ``to_parquet()`` and ``plot()``.

The public functions and result classes (also importable from :mod:`daskpd`) are
listed below; the implementation modules (``daskpd.model._fpd``, ...) are private.
"""
from __future__ import annotations

import importlib

_API = {
    "partial_dependence": "daskpd.model._fpd",
    "PDResult": "daskpd.model._fpd",
    "ice": "daskpd.model._ice",
    "ICEResult": "daskpd.model._ice",
    "ale": "daskpd.model._ale",
    "ALEResult": "daskpd.model._ale",
    "ALE2DResult": "daskpd.model._ale2d",
    "marginal": "daskpd.model._marginal",
    "MarginalResult": "daskpd.model._marginal",
    "pd_variance": "daskpd.model._variance",
    "PDVarianceResult": "daskpd.model._variance",
    "compare": "daskpd.model._compare",
    "ComparisonResult": "daskpd.model._compare",
}

__all__ = sorted(_API)


def __getattr__(name):
    if name in _API:
        value = getattr(importlib.import_module(_API[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'daskpd.model' has no attribute {name!r}")
