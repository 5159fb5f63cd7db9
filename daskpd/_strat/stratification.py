"""A fitted stratification (:class:`Stratification`): what pass 1 and the tree fit
produce -- the sample's identity, one stratifying tree per feature (its leaves
numbered), the encoder of the stratifying columns, each feature's positions, the random
state and the parameters -- saved as one versioned pickle; the scan of an extra
estimator made from it (:func:`extra_scan`); and the format check its file and a scan
state's share (:data:`FORMAT_VERSION`, :func:`check_format`).  The scan state under a
stratification is :mod:`daskpd._strat.state`'s.
"""
from __future__ import annotations

import hashlib
import json
import os
import pickle
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from .. import __version__
from .._errors import DataError
from ..results.base import atomic_path
from .estimators import estimator_named
from .scan import MIN_UNITS, FeatureScan

__all__ = ["Stratification", "FORMAT_VERSION", "sample_id", "extra_scan", "check_format", "minor_version"]

#: the on-disk format of stratifications and states (raised on any incompatible change; 5: a state's
#: entries are keyed (feature, kind), an extra estimator's kind recorded next to its feature's own)
FORMAT_VERSION = 5
_STRAT_MAGIC = "daskpd-stratification"


def minor_version(version: str) -> str:
    return ".".join(str(version).split(".")[:2])


def check_format(what: str, path, meta: dict, magic: str) -> None:
    if meta.get("format") != magic:
        raise DataError(f"{path!s} is not a daskpd {what} file")
    if meta.get("format_version") != FORMAT_VERSION or minor_version(meta.get("daskpd_version", "")) != minor_version(__version__):
        raise DataError(f"{what} {str(path)!r} was written by daskpd {meta.get('daskpd_version')} (format "
                        f"{meta.get('format_version')}); this is daskpd {__version__} (format {FORMAT_VERSION}): "
                        "refit it (a full run)")


def sample_id(frame: pd.DataFrame) -> str:
    """A hash of the tree sample's rows (its identity: the same rows, the same id)."""
    h = hashlib.sha256()
    h.update(",".join(map(str, frame.columns)).encode())
    h.update(pd.util.hash_pandas_object(frame, index=False).to_numpy().tobytes())
    return h.hexdigest()[:16]


@dataclass
class Stratification:
    """The fitted stratification of a model-free request (see the module docstring).

    ``scans``: one :class:`FeatureScan` per feature (its tree, leaf numbering and the
    positions found by pass 1); ``fitted_rows``: the rows of the data the trees were
    fitted for (pass 1's row count); ``id``: a hash of the sample's identity, the
    trees and the parameters."""

    target: str
    features: list
    kinds: dict
    stratify_on: list
    scans: list  # of FeatureScan
    encoder: object  # FeatureEncoder
    random_state: int
    params: dict  # min_samples_leaf (per feature), sample_size, max_bins, tree_method, nan_as_level
    dtypes: dict
    fitted_rows: int
    sample_rows: int
    sample_id: str
    id: str = ""
    #: the columns, in order, of the rows' hashes (pass 1's frame): a row's fold and part of a leaf
    hash_columns: list = field(default_factory=list)

    def __post_init__(self):
        if not self.id:
            h = hashlib.sha256()
            h.update(self.sample_id.encode())
            h.update(json.dumps([self.target, self.features, self.stratify_on, self.random_state,
                                 {k: self.params[k] for k in sorted(self.params)}], default=str).encode())
            for fs in self.scans:
                h.update(pickle.dumps((fs.feature, fs.other, fs.n_leaves, fs.tree), protocol=4))
                if fs.leaf_index is not None:
                    h.update(np.ascontiguousarray(fs.leaf_index).tobytes())
            self.id = h.hexdigest()[:16]

    def __repr__(self) -> str:
        return (f"Stratification(id={self.id!r}, target={self.target!r}, features={self.features!r}, "
                f"fitted_rows={self.fitted_rows:,}, sample_rows={self.sample_rows:,})")

    def scan_of(self, feature, kind: str | None = None) -> FeatureScan:
        """The scan of ``feature`` by its own estimator, or by the estimator ``kind`` (or
        of an entry key, ``(feature, kind)``: :func:`~daskpd._strat.estimators.entry_key`):
        another estimator of a feature is scanned with the feature's positions, under its
        tree, or as one leaf when it ignores the strata (:func:`extra_scan`)."""
        if isinstance(feature, tuple):
            feature, kind = feature
        for fs in self.scans:
            if fs.feature == feature and (kind is None or fs.kind == kind):
                return fs
        if kind is not None and feature in self.features:
            return extra_scan(self.scan_of(feature), kind)
        raise DataError(f"feature {feature!r} is not in the stratification (its features: "
                        f"{', '.join(self.features)})")

    def check_request(self, target: str, features, stratify_on) -> None:
        """A one-line DataError unless a request (target, features, stratifying columns)
        can be scanned under this stratification."""
        if target != self.target:
            raise DataError(f"stratification= was fitted for target {self.target!r}, not {target!r}")
        missing = [f for f in features if f not in self.features]
        if missing:
            raise DataError(f"stratification= has no tree for feature(s) {', '.join(map(repr, missing))} (its "
                            f"features: {', '.join(self.features)})")
        if list(stratify_on) != list(self.stratify_on):
            raise DataError(f"stratification= stratifies on {self.stratify_on!r}, the request on "
                            f"{list(stratify_on)!r}: pass the same features / stratify_on")

    # -- files ---------------------------------------------------------------------

    def save(self, path) -> str:
        """Write to one file (a versioned pickle), atomically; return the path."""
        path = os.fspath(path)
        payload = {"format": _STRAT_MAGIC, "format_version": FORMAT_VERSION, "daskpd_version": __version__,
                   "stratification": self}
        with atomic_path(path) as tmp:
            with open(tmp, "wb") as fh:
                pickle.dump(payload, fh, protocol=4)
        return path

    @classmethod
    def load(cls, path) -> "Stratification":
        """Read a file written by :meth:`save` (a pickle: load only files you trust)."""
        path = os.fspath(path)
        try:
            with open(path, "rb") as fh:
                payload = pickle.load(fh)
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ModuleNotFoundError) as exc:
            raise DataError(f"stratification {path!r} cannot be read: {type(exc).__name__}: {exc}") from None
        if not isinstance(payload, dict):
            raise DataError(f"{path!r} is not a daskpd stratification file")
        check_format("stratification", path, payload, _STRAT_MAGIC)
        return payload["stratification"]


def extra_scan(fs: FeatureScan, kind: str) -> FeatureScan:
    """The scan of estimator ``kind`` on ``fs``'s feature, besides the feature's own:
    the same positions, and the same tree, or none for an estimator that ignores the
    strata (``ModelFreeEstimator.reads_strata``): one leaf split into ``MIN_UNITS``
    parts by row hash (nothing to apply; the units its trials resample).  Not part of
    the stratification (its id, its file): made again from it wherever it is needed."""
    est = estimator_named(kind, f"feature {fs.feature!r}")
    if est.column_kind != fs.estimator.column_kind:
        raise DataError(f"the {est.method} estimator reads {est.column_kind} features; feature {fs.feature!r} is "
                        f"{fs.estimator.column_kind}")
    if est.reads_strata:
        return replace(fs, kind=kind)
    # no tree: the rows' parts by hash are its units (those its trials resample)
    return replace(fs, kind=kind, other=[], tree=None, leaf_index=None, n_leaves=MIN_UNITS, min_samples_leaf=None,
                   split=MIN_UNITS)
