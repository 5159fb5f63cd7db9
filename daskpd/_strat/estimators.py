"""The registry of model-free estimators (:class:`~daskpd._strat.estimator.ModelFreeEstimator`):
the kind name a feature's scan and a saved state record -> the estimator.

The names are the on-disk ones ("numeric" for StratPD, "categorical" for CatStratPD),
so stratifications and states written before the protocol load unchanged.  A new
estimator is its own module and one line here.
"""
from __future__ import annotations

from .._errors import DataError
from .catstratpd_estimator import CatStratPDEstimator
from .estimator import ModelFreeEstimator
from .binned_mean_estimator import BinnedMeanEstimator
from .stratpd_estimator import StratPDEstimator

__all__ = ["ESTIMATORS", "estimator_named", "estimator_of_method", "method_of", "entry_key", "feature_of",
           "EXTRA_METHODS", "extra_kinds"]

#: kind name -> estimator (one instance each: they hold no data)
ESTIMATORS: dict[str, ModelFreeEstimator] = {e.name: e for e in (StratPDEstimator(), CatStratPDEstimator(),
                                                                   BinnedMeanEstimator())}


def estimator_named(kind: str, where: str = "") -> ModelFreeEstimator:
    """The estimator of a kind name; a DataError naming the kind (and ``where`` it was
    read, e.g. a state's path and feature) when no estimator has that name."""
    try:
        return ESTIMATORS[kind]
    except (KeyError, TypeError):
        at = f" ({where})" if where else ""
        raise DataError(f"unknown model-free estimator kind {kind!r}{at}; this daskpd knows "
                        f"{', '.join(map(repr, ESTIMATORS))}") from None


def estimator_of_method(method: str) -> ModelFreeEstimator:
    """The estimator of a public method name ("stratpd", "catstratpd")."""
    for e in ESTIMATORS.values():
        if e.method == method:
            return e
    raise DataError(f"unknown model-free method {method!r}; this daskpd knows "
                    f"{', '.join(repr(e.method) for e in ESTIMATORS.values())}")


def method_of(result) -> str:
    """The public method name of a model-free result (the estimator whose result type it is)."""
    for e in ESTIMATORS.values():
        if isinstance(result, e.result_type):
            return e.method
    raise TypeError(f"{type(result).__name__} is not the result of a model-free estimator")


#: the public names of the estimators a request may add to its features' own (StratPD for a
#: numeric feature, CatStratPD for a categorical one): those whose name is not a kind of feature
EXTRA_METHODS: tuple[str, ...] = tuple(e.method for e in ESTIMATORS.values() if e.name != e.column_kind)


def extra_kinds(methods, where: str = "estimators") -> tuple[str, ...]:
    """The kind names of the extra estimators ``methods`` (public names, in
    :data:`EXTRA_METHODS`), in registry order; a DataError naming ``where`` and the
    allowed names for any other."""
    methods = [methods] if isinstance(methods, str) else list(methods or ())
    bad = [m for m in methods if m not in EXTRA_METHODS]
    if bad:
        raise DataError(f"{where}: unknown model-free estimator(s) {', '.join(map(repr, bad))}; expected some of "
                        f"{', '.join(map(repr, EXTRA_METHODS))}")
    return tuple(e.name for e in ESTIMATORS.values() if e.method in methods)


def entry_key(feature: str, kind: str):
    """The name of a (feature, estimator) entry in a scan's tables and results and in a
    state: the feature itself for its kind's own estimator (StratPD, CatStratPD: the
    estimator whose name is the feature's kind, so every state and result keeps its
    names), ``(feature, kind)`` for another estimator of the same feature."""
    est = estimator_named(kind, f"feature {feature!r}")
    return feature if est.name == est.column_kind else (feature, kind)


def feature_of(key) -> str:
    """The feature of an entry key (:func:`entry_key`)."""
    return key[0] if isinstance(key, tuple) else key
