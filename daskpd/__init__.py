"""daskpd: partial dependence on Dask, for tables too large for one machine.

Model-free: :func:`stratpd` (numeric features), :func:`catstratpd` (categorical
features), :func:`importances` and :func:`strat_curves_and_importances` (every feature,
one scan).  Model-based: :func:`partial_dependence` (Friedman PD, brute or tree
recursion), :func:`ice`, :func:`pd_variance`, :func:`h_statistic`, :func:`marginal`, :func:`ale`,
:func:`compare`, and :func:`model_curves` (several of them in one pass).  Input:
:func:`read_csv` (CSV with reader options), :func:`read_delta` (a Delta Lake table at a
version), :func:`read_iceberg` (an Apache Iceberg table at a snapshot); any function also takes a pandas or dask DataFrame or a parquet path, glob,
directory (a Delta table's too) or URL.

Every function runs on the current ``distributed.Client`` if there is one (else dask's
threads) and returns a small result object (``to_frame()``, ``to_parquet()``,
``plot()``).  The implementation modules are private; the names below are the API.
They are imported on first use, so ``import daskpd`` is cheap.
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

#: public name -> the private module that defines it
_API = {
    # model-free
    "stratpd": "daskpd._stratpd",
    "catstratpd": "daskpd._catstratpd",
    "importances": "daskpd._importance",
    "strat_curves_and_importances": "daskpd._importance",
    "fit_stratification": "daskpd._stratification",
    "scan_state": "daskpd._stratification",
    "Stratification": "daskpd._strat.state",
    "ScanState": "daskpd._strat.state",
    "FirstPassCache": "daskpd._strat.firstpass_cache",
    # model-based
    "partial_dependence": "daskpd.model._fpd",
    "ice": "daskpd.model._ice",
    "ale": "daskpd.model._ale",
    "marginal": "daskpd.model._marginal",
    "pd_variance": "daskpd.model._variance",
    "compare": "daskpd.model._compare",
    "h_statistic": "daskpd.model._hstat",
    "model_curves": "daskpd.model._curves",
    # input
    "read_csv": "daskpd._data.read",
    "read_delta": "daskpd._data.tables",
    "read_iceberg": "daskpd._data.tables",
    # result classes
    "StratPDResult": "daskpd.results.curves",
    "CatStratPDResult": "daskpd._strat.categorical",
    "ImportanceResult": "daskpd._importance_result",
    "BinnedMeanResult": "daskpd._strat.binned_mean_estimator",
    "PDResult": "daskpd.model._pd_result",
    "ICEResult": "daskpd.model._ice_result",
    "ALEResult": "daskpd.model._ale",
    "ALE2DResult": "daskpd.model._ale2d",
    "MarginalResult": "daskpd.model._marginal",
    "PDVarianceResult": "daskpd.model._variance",
    "ComparisonResult": "daskpd.model._compare",
    "HStatisticResult": "daskpd.model._hstat",
    "ModelCurves": "daskpd.model._curves",
    # errors and warnings
    "DataError": "daskpd._errors",
    "InvalidParameterError": "daskpd._errors",
    "SklearnDifferenceWarning": "daskpd._errors",
    "RepeatedRowsWarning": "daskpd._errors",
}

#: public subpackages and modules, imported on first use
_SUBMODULES = ("datasets", "io", "job", "model", "plotting", "results", "cli")

__all__ = sorted(_API)


def __getattr__(name):
    if name in _API:
        value = getattr(importlib.import_module(_API[name]), name)
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        return importlib.import_module(f"daskpd.{name}")
    raise AttributeError(f"module 'daskpd' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *__all__, *_SUBMODULES])
