"""The model-free scan's typed options: how its curves are finished (:class:`FinishOptions`)
and what it keeps of its sums (:class:`StateMode`, :class:`KeepState`).

The public functions keep their keyword parameters (``min_slopes_per_x``, ``few_slopes``,
``band``, ``centered``, ``keep_state``) and build these once; the pipeline, the scan job,
the state and the estimators read them by attribute.
"""
from __future__ import annotations

import enum
import os
from dataclasses import dataclass, field, fields, replace
from typing import Mapping

import numpy as np

from .._errors import InvalidParameterError
from ..results.curves import DEFAULT_FEW_SLOPES

__all__ = ["FinishOptions", "StateMode", "KeepState", "DEFAULT_N_SEGMENTS"]

#: the segments a StratPD result keeps for its plot (a bottom-k sample by hash)
DEFAULT_N_SEGMENTS = 500


@dataclass(frozen=True)
class FinishOptions:
    """How a scan's curves are finished (:func:`daskpd._strat.numeric.curve_from_sums`,
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

