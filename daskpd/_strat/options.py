"""The model-free scan's typed options: how its trees are fitted (:class:`TreeOptions`),
its trials (:class:`Trials`), what of earlier runs it reuses (:class:`Reuse`), how its
curves are finished (:class:`FinishOptions`) and what it keeps of its sums
(:class:`StateMode`, :class:`KeepState`).

The public functions keep their keyword parameters (``min_samples_leaf``,
``sample_size``, ``n_trials``, ``band``, ``min_slopes_per_x``, ``few_slopes``,
``centered``, ``stratification``, ``keep_state``, ...), validate them and build these
once; the pipeline, the scan job, the state and the estimators read them by attribute.
"""
from __future__ import annotations

import enum
import os
from dataclasses import dataclass, field, fields, replace
from typing import Mapping

import numpy as np

from .._errors import InvalidParameterError
from ..results.curves import DEFAULT_FEW_SLOPES
from .trees import DEFAULT_MAX_BINS, DEFAULT_SAMPLE_SIZE, DEFAULT_TREE_METHOD

__all__ = ["TreeOptions", "Trials", "Reuse", "FinishOptions", "StateMode", "KeepState", "DEFAULT_N_SEGMENTS",
           "DEFAULT_MIN_SAMPLES_LEAF"]

#: the numeric features' leaf size (stratx's; CatStratPD's public default is 5)
DEFAULT_MIN_SAMPLES_LEAF = 15


@dataclass(frozen=True)
class TreeOptions:
    """How a scan's stratifying trees are fitted (:func:`daskpd._strat.pipeline.run_strat`),
    as the public parameters of the same names give them (validated there).  A scan
    under a fitted stratification uses the stratification's instead."""

    #: a tree's leaf size, for the features ``min_samples_leaf_for`` does not name
    min_samples_leaf: int = DEFAULT_MIN_SAMPLES_LEAF
    #: {feature: its tree's leaf size} (e.g. the categorical features' ``cat_min_samples_leaf``)
    min_samples_leaf_for: Mapping = field(default_factory=dict, hash=False)
    #: the rows a tree is fitted on (twice as many drawn when ``honest``:
    #: :func:`daskpd._strat.pipeline.drawn_sample_size`)
    sample_size: int = DEFAULT_SAMPLE_SIZE
    #: StratPD: a feature with more distinct values in the sample is cut into this many bins (None: never)
    max_bins: int | None = DEFAULT_MAX_BINS
    #: "hist" (daskpd's histogram tree) or "exact" (scikit-learn's)
    tree_method: str = DEFAULT_TREE_METHOD
    #: 2-fold cross-fitting: every row stratified by the tree of the other fold
    honest: bool = True
    #: CatStratPD: a missing category is a level of its own
    nan_as_level: bool = False
    #: seeds the sample, the trees, the folds and the trials' leaf weights
    random_state: int = 0

    def __post_init__(self):
        object.__setattr__(self, "min_samples_leaf_for",
                           {str(f): int(v) for f, v in (self.min_samples_leaf_for or {}).items()})

    def leaf_size(self, feature: str) -> int:
        """``feature``'s tree's leaf size."""
        return self.min_samples_leaf_for.get(feature, self.min_samples_leaf)


@dataclass(frozen=True)
class Trials:
    """A scan's trials: ``n_trials`` bootstraps of the leaves made by the finish (0: none)
    and the band's lower and upper probabilities (None: no band in the results' params).
    :meth:`of` builds them from the public ``n_trials`` and ``band``."""

    n_trials: int = 0
    band: tuple[float, float] | None = None

    @classmethod
    def of(cls, n_trials: int, band=None) -> "Trials":
        """The public ``n_trials`` (1: no trials) and ``band`` (None: none recorded, as
        the importances' table keeps no band): no trial set and no band at all for
        ``n_trials=1`` (the curve is then the same, bit for bit)."""
        if n_trials <= 1:
            return cls()
        return cls(int(n_trials), None if band is None else (float(band[0]), float(band[1])))


@dataclass(frozen=True)
class Reuse:
    """What of earlier runs a scan reuses: a fitted ``stratification`` (no sample, no
    fit: :func:`daskpd._strat.pipeline.run_under`), the ``base_state`` of other data
    scanned under it (the new sums are added to it) and a ``first_pass_cache`` (pass 1
    from the files' cached partials: :mod:`daskpd._strat.firstpass`)."""

    #: a :class:`daskpd._strat.stratification.Stratification`, or None
    stratification: object = None
    #: a :class:`daskpd._strat.state.ScanState` under ``stratification``, or None
    base_state: object = None
    #: a :class:`daskpd._strat.firstpass.FirstPassCache`, or None
    first_pass_cache: object = None

#: the segments a StratPD result keeps for its plot (a bottom-k sample by hash)
DEFAULT_N_SEGMENTS = 500


@dataclass(frozen=True)
class FinishOptions:
    """How a scan's curves are finished (:func:`daskpd._strat.numeric_curve.curve_from_sums`,
    :func:`daskpd._strat.categorical.result_of_effects`), and what of the run their
    results' ``params`` record."""

    #: StratPD: the slopes a position needs for its own slope (the public ``min_slopes_per_x``)
    min_slopes_per_x: int = 5
    #: StratPD: a position with fewer slopes: "interpolate" or "flat" (the public ``few_slopes``)
    few_slopes: str = DEFAULT_FEW_SLOPES
    #: with trials: the band's lower and upper probabilities (None: no trials, no band in the params)
    band: tuple[float, float] | None = None
    #: CatStratPD: effects centred on their mean (the public ``centered``)
    centered: bool = False
    #: StratPD: the segments a result keeps (0: none, as the permutation importances' refits)
    n_segments: int = DEFAULT_N_SEGMENTS
    #: {feature: its dtype in the data}, set by the scan job
    dtypes: Mapping = field(default_factory=dict, hash=False)
    #: what the results' params record of the run (``sample_rows``, ``n_partitions``,
    #: ``n_buckets``, ``fan_in``), set by the scan job; None: not set yet
    run_params: Mapping | None = field(default=None, hash=False)

    @classmethod
    def of(cls, options) -> "FinishOptions":
        """``options`` as finish options: these, the defaults (None), or a mapping of
        field names (:meth:`from_dict`)."""
        if options is None:
            return cls()
        if isinstance(options, cls):
            return options
        if isinstance(options, Mapping):
            return cls.from_dict(options)
        raise InvalidParameterError(f"finish_options must be FinishOptions, a dict of its fields or None; "
                                    f"got {type(options).__name__}")

    @classmethod
    def from_dict(cls, d: Mapping) -> "FinishOptions":
        """The options of a dict of their fields (as :meth:`to_dict` writes it); a key that
        is no field is refused, naming it."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(map(str, d)) - names)
        if unknown:
            raise InvalidParameterError(f"finish_options: unknown option(s) {', '.join(map(repr, unknown))}; "
                                        f"expected some of {', '.join(sorted(names))}")
        kw = dict(d)
        if kw.get("band") is not None:
            kw["band"] = (float(kw["band"][0]), float(kw["band"][1]))
        return cls(**kw)

    def to_dict(self) -> dict:
        """The options as a dict of the fields that are set (``band`` a list, as the
        results' params record it; ``run_params`` left out when not set)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["dtypes"] = dict(self.dtypes)
        if self.band is None:
            del out["band"]
        else:
            out["band"] = [float(self.band[0]), float(self.band[1])]
        if self.run_params is None:
            del out["run_params"]
        else:
            out["run_params"] = dict(self.run_params)
        return out

    def with_run(self, dtypes: Mapping, run_params: Mapping | None = None, *, keep_run_params: bool = False
                 ) -> "FinishOptions":
        """These options for one scan job: its features' ``dtypes`` and its ``run_params``
        (with ``keep_run_params``, those already set win)."""
        rp = self.run_params if keep_run_params and self.run_params is not None else run_params
        return replace(self, dtypes=dict(dtypes), run_params=None if rp is None else dict(rp))

    def band_params(self) -> dict:
        """``{"band": [lo, hi]}`` as a result's params record it, or nothing without a band."""
        return {} if self.band is None else {"band": [float(self.band[0]), float(self.band[1])]}


class StateMode(enum.Enum):
    """What a scan keeps of its merged (leaf, key) sums (:mod:`daskpd._strat.state`)."""

    #: nothing kept (the results only)
    NONE = "none"
    #: kept besides the results, gathered by the client
    MEMORY = "memory"
    #: kept besides the results, each bucket writing its own sums under a directory the
    #: workers share (gathered by the client when they do not share it)
    SAVE = "save"
    #: kept, no finish (no results)
    ONLY = "only"

    @property
    def keeps(self) -> bool:
        """The scan keeps its sums."""
        return self is not StateMode.NONE

    @property
    def finishes(self) -> bool:
        """The scan finishes its curves."""
        return self is not StateMode.ONLY


@dataclass(frozen=True)
class KeepState:
    """The public ``keep_state`` once normalised: its mode and, for :attr:`StateMode.SAVE`,
    the directory (absolute)."""

    mode: StateMode = StateMode.NONE
    path: str | None = None

    def __post_init__(self):
        if (self.mode is StateMode.SAVE) != (self.path is not None):
            raise InvalidParameterError(f"KeepState: a path goes with StateMode.SAVE alone (mode {self.mode.name}, "
                                        f"path {self.path!r})")

    @property
    def keeps(self) -> bool:
        return self.mode.keeps

    @classmethod
    def of(cls, keep_state, *, only: bool = False) -> "KeepState":
        """The public ``keep_state`` normalised: False (nothing kept), True (kept, gathered
        by the client), a directory (str or PathLike: kept, written there by the buckets;
        made absolute) or already a :class:`KeepState`.  ``only``: also the string
        ``"only"`` (kept, no finish; an internal mode -- for the public parameter every
        string is a directory)."""
        if isinstance(keep_state, KeepState):
            return keep_state
        if isinstance(keep_state, StateMode) and keep_state is not StateMode.SAVE:
            return cls(keep_state)
        if isinstance(keep_state, (bool, np.bool_)):
            return cls(StateMode.MEMORY if keep_state else StateMode.NONE)
        if only and isinstance(keep_state, str) and keep_state == "only":
            return cls(StateMode.ONLY)
        if isinstance(keep_state, (str, os.PathLike)):
            return cls(StateMode.SAVE, os.path.abspath(keep_state))
        accepted = "True or False, an instance of str or an instance of PathLike" + (' or "only"' if only else "")
        raise InvalidParameterError(f"parameter keep_state must be {accepted}; got {keep_state!r}")

