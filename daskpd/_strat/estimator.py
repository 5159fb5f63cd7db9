"""The model-free estimator protocol: what the scan, the state and the comparison ask
of an estimator (StratPD, CatStratPD), so that none of them branches on which one it is.

Every model-free estimator of daskpd reads the same data the same way: a stratifying
tree per feature sends each row to a leaf, the feature's value to a *position* (a
:class:`~daskpd._data.encode.KeyCoder`: bins, exact values or levels), and one pass sums
``[n, sum y]`` (plus ``sum x`` for a binned feature) per (leaf, position).  Those sums
are exact and mergeable, so the engine -- the scan's per-partition map and merges
(:class:`daskpd._strat.scan.StratScan`), the kept state's merge, save and load
(:class:`daskpd._strat.state.ScanState`), the new-against-old comparison
(:mod:`daskpd._strat.apart`) -- owns them.  What differs is what a merged bucket of
leaves becomes, how buckets are folded into a result, what summary an incremental run
updates, and how positions are chosen: the methods below.

The shape follows dask's ``ApplyConcatApply`` (chunk / combine / aggregate): the
engine's ``chunk`` and ``combine`` are shared (the sums), the estimator's part begins
at the last combine of a bucket (:meth:`ModelFreeEstimator.finish_bucket`, run next to
the data) and its ``aggregate`` is a small graph it wires itself
(:meth:`ModelFreeEstimator.wire`), because CatStratPD's aggregate is not one task (a
chain of tasks summing its normal equations, or buckets kept on the workers for
conjugate-gradient rounds, :meth:`ModelFreeEstimator.solve_kept`).

Design choices:

* an abstract base class rather than a ``typing.Protocol``: most methods have a default
  that is right for an estimator keeping no incremental summary (:meth:`delta_finish`
  returns None, so the state merges and finishes in full; :meth:`comparison_positions`
  keeps the positions), so a new estimator writes only the map, the bucket finish, the
  wiring and the finish;
* an estimator holds no data (as scikit-learn's estimators hold only parameters; here
  there are none): a stateless singleton, never pickled, found by its
  :attr:`~ModelFreeEstimator.name`, which is what a scan's
  :class:`~daskpd._strat.scan.FeatureScan` and a saved state record.  Every method
  receives what it works on (the scan job and the feature's index, the tables);
* :attr:`~ModelFreeEstimator.name` (the estimator) and
  :attr:`~ModelFreeEstimator.column_kind` (the kind of feature it reads, the positions'
  kind) are distinct: StratPD's and CatStratPD's coincide ("numeric", "categorical"),
  which keeps every saved state's format; another estimator of a numeric feature has
  its own name and column kind "numeric";
* the aggregate is a graph, not a function: the estimator wires its own tasks with the
  job's ``node`` (as ``Job.reduce`` does) and names them by its method
  (``node("call", index, "method", ...)``), so the engine never learns its steps;
* left out: what the public functions do with a result on the driver (warnings,
  importance measures, the job's curve tables): that is the result's, by its type
  (:attr:`~ModelFreeEstimator.result_type`, :attr:`~ModelFreeEstimator.method`).

Who calls what:

* pass 1 and the fit (:mod:`daskpd._strat.pipeline`): :attr:`column_kind` (the
  feature kind it reads, checked against a request), :meth:`sample_values`,
  :meth:`keeps_missing` (is a sample column usable), :attr:`values_cap` (how many distinct
  values pass 1 keeps), :attr:`needs_other_columns` (a one-leaf tree makes no curve),
  :meth:`coder` (the positions);
* the scan's map (``StratScan.map``): :meth:`read_x`, :meth:`keys`;
* a bucket's last combine (``StratScan.finish_bucket``): :meth:`finish_bucket`, and with a
  kept state :meth:`bucket_state` (what the state's finish summary is made of);
* the aggregate (``StratScan.reduce``): :meth:`wire`, whose tasks call the estimator's
  own methods through ``StratScan.call``; after the scan, :meth:`solve_kept`;
* the state (:mod:`daskpd._strat.state`): :meth:`finish_state` (one bucket holding every
  leaf: ``ScanState.finish``), :meth:`summary_from_buckets` and :meth:`attach_summary`
  (the finish summary kept with a state), :meth:`delta_finish` (an incremental run's
  update of that summary; None: merge and finish in full) and :meth:`merged_summary`,
  :meth:`load_summary` (a saved summary's arrays), :attr:`finish_first` (finished first
  when features are finished on threads: the longest);
* the comparison (:mod:`daskpd._strat.apart`): :meth:`comparison_positions`.

The registry (:mod:`daskpd._strat.estimators`) maps each estimator's :attr:`name` --
the ``kind`` a :class:`~daskpd._strat.scan.FeatureScan` and a saved state record
("numeric", "categorical") -- to its singleton, so stratifications and states written
before the protocol load unchanged.  A new estimator is one module implementing this
class and one registry line.

A feature's own estimator is the one whose :attr:`name` is its kind (StratPD's,
CatStratPD's); another estimator of the same column kind runs besides it when a request
asks for it by its :attr:`method` (``estimators=``, a job's ``methods``:
``daskpd._strat.estimators.EXTRA_METHODS``), as one more entry of the same scan, named
``(feature, name)`` in the scan's tables, its results and the state
(``daskpd._strat.estimators.entry_key``; the feature's own entry keeps the feature's
name), scanned with the feature's positions (``daskpd._strat.stratification.extra_scan``; without
a tree when it does not read the strata, :attr:`reads_strata`).
"""
from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Callable, ClassVar

import numpy as np

__all__ = ["ModelFreeEstimator", "DeltaInputs"]


@dataclass
class DeltaInputs:
    """What an incremental finish of one feature works from (:meth:`ModelFreeEstimator.delta_finish`):
    the scan job coded in the union vocabulary (``scan``, its feature ``index``), the
    kept finish summary (``summary``, or None), the merged counters, the random state,
    and -- computed only when asked -- the old code -> union code map (``kmap()``: None
    when the same), the kept runs as :class:`~daskpd._strat.delta_lookup.RunView` s in the
    union codes (``old_views()``) and the new sums in the union codes (``new_table()``)."""

    scan: object
    index: int
    summary: object | None
    counters: tuple
    random_state: int
    kmap: Callable
    old_views: Callable
    new_table: Callable

    @property
    def fs(self):
        return self.scan.features[self.index]

    @property
    def n_sets(self) -> int:
        return int(self.scan.n_sets)

    @property
    def n_segments(self) -> int:
        return int(self.scan.finish_options.n_segments)


class ModelFreeEstimator(abc.ABC):
    """A model-free estimator over the scan's (leaf, position) sums (see the module docstring)."""

    #: the kind name stored with a feature's scan and state ("numeric", "categorical")
    name: ClassVar[str]
    #: the public method whose results it makes ("stratpd", "catstratpd")
    method: ClassVar[str]
    #: the class of its results
    result_type: ClassVar[type]
    #: the kind of feature it reads (a request's and its positions' kind: "numeric", "categorical")
    column_kind: ClassVar[str]
    #: pass 1 keeps a feature's exact distinct values only up to this many
    values_cap: ClassVar[int]
    #: whether a feature needs another column to stratify on (else its tree is one leaf)
    needs_other_columns: ClassVar[bool] = False
    #: finished before the others when features are finished on threads (the longest)
    finish_first: ClassVar[bool] = False
    #: whether it reads the strata (the leaves); one that does not is scanned without a
    #: tree when it runs besides a feature's own estimator, its rows in parts by hash
    #: (``daskpd._strat.stratification.extra_scan``)
    reads_strata: ClassVar[bool] = True

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    # -- pass 1: the sample and the positions ---------------------------------------

    @abc.abstractmethod
    def sample_values(self, col) -> tuple[np.ndarray, np.ndarray]:
        """``(values, valid)`` of a sample column: its values and which have one."""

    def keeps_missing(self, nan_as_level: bool) -> bool:
        """Whether a missing value is a position of its own (then an all-missing or
        one-valued column with missing values is usable)."""
        return False

    @abc.abstractmethod
    def coder(self, feature: str, sample, max_bins, nan_as_level: bool, dtype):
        """The feature's :class:`~daskpd._data.encode.KeyCoder` from pass 1's ``sample``
        (:class:`daskpd._engine.sample_pass.Sample`: the tree sample and the distinct values)."""

    # -- the map --------------------------------------------------------------------

    @abc.abstractmethod
    def read_x(self, fs, s) -> tuple[np.ndarray, np.ndarray | None]:
        """``(x_ok, x)`` of a partition's column ``s``: which rows have a position and
        their x as float64 (None when the positions are labels)."""

    @abc.abstractmethod
    def keys(self, fs, s, x, ok, every: bool) -> np.ndarray:
        """The position codes of the rows ``ok`` (``every``: all of them)."""

    # -- a bucket's finish (inside its last combine) --------------------------------

    @abc.abstractmethod
    def finish_bucket(self, scan, index: int, table, counters, span):
        """A bucket's merged (leaf, position) ``table`` of feature ``index`` turned into
        what :meth:`wire` folds (``span``: the bucket's virtual buckets,
        ``StratScan.virtual_span``; ``counters``: the scan's row counters, bucket 0)."""

    def bucket_state(self, scan, index: int, table, part):
        """With a kept state: what the state's finish summary is made of for this bucket
        (:meth:`summary_from_buckets`), or None."""
        return None

    # -- the aggregate -------------------------------------------------------------

    @abc.abstractmethod
    def wire(self, scan, index: int, merged: list, node):
        """``(result node, kept)``: feature ``index``'s result wired from the buckets
        ``merged`` (``node(method, *args, key=...)`` as in ``Job.reduce``; a task
        picking a bucket's part is ``node("pick", merged[b], index[, k])``, a task of
        the estimator ``node("call", index, "method", *args)``); ``kept``: bucket refs
        kept on the workers for :meth:`solve_kept`, or None."""

    def solve_kept(self, scan, index: int, refs: list, partial):
        """The result of a feature whose buckets :meth:`wire` kept (``partial``: what
        its result node gave)."""
        raise NotImplementedError(f"{type(self).__name__} keeps no buckets")

    @abc.abstractmethod
    def finish_state(self, scan, index: int, part):
        """The result from one bucket holding every leaf (:meth:`finish_bucket`'s
        ``part``), finished here: ``ScanState.finish``."""

    # -- the state's finish summary (incremental runs) --------------------------------

    def summary_from_buckets(self, scan, index: int, pieces: list):
        """A kept state's finish summary from the buckets' :meth:`bucket_state` (None
        where a bucket has none), or None."""
        return None

    def attach_summary(self, fs, state, n_sets: int, random_state: int, table: Callable):
        """The finish summary a full scan's state keeps when it had none from the
        buckets (``table()``: its sums), or ``state.summary``."""
        return state.summary

    def delta_finish(self, d: DeltaInputs):
        """``(summary, result, mode)`` of an incremental finish that updates the kept
        summary (mode "delta") or works over the runs unmerged ("runs"), or None: the
        state merges the runs and finishes them in full (then :meth:`merged_summary`)."""
        return None

    def merged_summary(self, fs, table, n_sets: int, random_state: int, n_segments: int):
        """The finish summary of merged sums (None: none kept)."""
        return None

    def load_summary(self, arrays: dict):
        """A saved finish summary from its arrays (``summary.arrays()``)."""
        raise NotImplementedError(f"{type(self).__name__} keeps no finish summary")

    # -- the new-against-old comparison ---------------------------------------------

    def comparison_positions(self, coder, new_counts: np.ndarray, max_positions: int):
        """``(coder, mapping, xval)``: the comparison's positions of a feature whose
        union coder is ``coder`` (``new_counts``: the new rows per position), each
        union code's comparison code, and each code's x (None: labels or bins).  By
        default the positions themselves."""
        return coder, np.arange(coder.n_keys, dtype=np.int64), None

