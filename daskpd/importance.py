"""Deprecated module name: the importance functions are ``daskpd.importances``,
``daskpd.strat_curves_and_importances`` and ``daskpd.ImportanceResult``; the measures of
one curve are ``daskpd.importance.curve_measures`` until 0.3.0."""
from __future__ import annotations

import warnings

from . import _importance

_NAMES = ("importances", "strat_curves_and_importances", "ImportanceResult", "curve_measures", "MEASURES")


def __getattr__(name):
    if name in _NAMES:
        warnings.warn(f"daskpd.importance.{name} is deprecated and will be removed in daskpd 0.3.0; use "
                      f"{'daskpd.' + name if name not in ('curve_measures', 'MEASURES') else 'the importance table'}",
                      FutureWarning, stacklevel=2)
        return getattr(_importance, name)
    raise AttributeError(f"module 'daskpd.importance' has no attribute {name!r}")
