"""The model-based family on Dask: Friedman PD (brute or tree recursion), ICE, 2-way PD,
PD variance (importance and interaction), marginal plots (M-plots) and ALE.

Every function reads only the columns it needs, builds every requested curve in one
partition map/reduce (plus, for data-driven grids and bins, one summary pass and a few
cheap passes over the feature columns for exact quantiles), and returns a small result
object with ``to_frame()``, ``to_parquet()`` and ``plot()``.

Public entry points (also importable from :mod:`daskpd`):
:func:`daskpd.partial_dependence`, :func:`daskpd.ice`, :func:`daskpd.ale`,
:func:`daskpd.marginal`, :func:`daskpd.pd_variance`, and
:func:`daskpd.model.compare.compare` (the StratPD / FPD / ALE / marginal overlay).
"""
from __future__ import annotations

import importlib

_API = {
    "partial_dependence": "daskpd.model.fpd",
    "PDResult": "daskpd.model.fpd",
    "ice": "daskpd.model.ice",
    "ICEResult": "daskpd.model.ice",
    "ale": "daskpd.model.ale",
    "ALEResult": "daskpd.model.ale",
    "ALE2DResult": "daskpd.model.ale2d",
    "marginal": "daskpd.model.marginal",
    "MarginalResult": "daskpd.model.marginal",
    "pd_variance": "daskpd.model.variance",
    "PDVarianceResult": "daskpd.model.variance",
    "compare": "daskpd.model.compare",
    "ComparisonResult": "daskpd.model.compare",
}

__all__ = sorted(_API)


def __getattr__(name):
    if name in _API:
        value = getattr(importlib.import_module(_API[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'daskpd.model' has no attribute {name!r}")
