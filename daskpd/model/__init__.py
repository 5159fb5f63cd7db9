"""The model-based family on Dask: Friedman PD (brute or tree recursion), ICE, 2-way PD,
PD variance (importance and interaction), Friedman's H-statistic, marginal plots (M-plots)
and ALE; :func:`model_curves` asks for several of them at once, in one pass.

Every function reads only the columns it needs, builds every requested curve in one
partition map/reduce (plus, for data-driven grids and bins, one summary pass and a few
cheap passes over the feature columns for exact quantiles), and returns a small result
object with ``to_frame()``, ``to_parquet()`` and ``plot()``.

The public functions and result classes (also importable from :mod:`daskpd`) are
listed below; the implementation modules (``daskpd.model._fpd``, ...) are private.
"""
from __future__ import annotations

from ._ale import ALEResult, ale
from ._ale2d import ALE2DResult
from ._compare import ComparisonResult, compare
from ._curves import ModelCurves, model_curves
from ._fpd import partial_dependence
from ._hstat import HStatisticResult, h_statistic
from ._ice import ice
from ._ice_result import ICEResult
from ._marginal import MarginalResult, marginal
from ._pd_result import PDResult
from ._variance import PDVarianceResult, pd_variance

__all__ = ["ALE2DResult", "ALEResult", "ComparisonResult", "HStatisticResult", "ICEResult", "MarginalResult",
           "ModelCurves", "PDResult", "PDVarianceResult", "ale", "compare", "h_statistic", "ice", "marginal",
           "model_curves", "partial_dependence", "pd_variance"]
