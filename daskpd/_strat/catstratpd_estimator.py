"""CatStratPD as a :class:`~daskpd._strat.estimator.ModelFreeEstimator`: a categorical
feature's effects from the least-squares system of the categories each leaf holds.

The kernels are those of :mod:`daskpd._strat.categorical_buckets` (a bucket's
least-squares terms, :func:`~daskpd._strat.categorical_buckets.prepare`),
:mod:`daskpd._strat.categorical` (the solves), :mod:`daskpd._strat.catdelta` (the
explicit normal equations an incremental run updates) and :mod:`daskpd._strat.catruns`
(conjugate gradients over a state's runs, unmerged).  Its aggregate is either a chain
of tasks summing the explicit normal equations over the buckets (up to
``EXPLICIT_MAX_KEYS`` categories) or, above, the buckets kept on the workers for
conjugate-gradient rounds after the scan (:meth:`CatStratPDEstimator.solve_kept`).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .._data.encode import KeyCoder
from .._errors import DataError
from . import categorical_buckets
from .catdelta import CatSummary, apply_cat_delta, cat_summary, effects_of_summary
from .catruns import effects_of_runs, runs_block
from .categorical import CatStratPDResult, category_values, effects_explicit, effects_iterative, fold_for_solve, \
    result_of_effects
from .categorical_buckets import EXPLICIT_MAX_KEYS, prepare
from .categorical_gram import gram_link, gram_sets
from .estimator import DeltaInputs, ModelFreeEstimator

__all__ = ["CatStratPDEstimator", "CATEGORY_LEVELS_CAP", "CAT_GRAM_MAX_BYTES", "GRAM_CHAIN_BYTES"]

#: the most levels a categorical feature may have
CATEGORY_LEVELS_CAP = 1 << 20
#: a categorical feature's finish summary keeps its explicit G (one dense K x K array per
#: statistics set) only up to this many bytes; above, it is merged and finished in full
CAT_GRAM_MAX_BYTES = 1 << 28
#: a chain of tasks summing a categorical feature's explicit G over the buckets sums as
#: many statistics sets at once as this many bytes of dense G hold (at least one)
GRAM_CHAIN_BYTES = 256 << 20


def explicit_summary(K: int, n_sets: int) -> bool:
    """Whether a categorical feature's state summary keeps its explicit G."""
    return K <= EXPLICIT_MAX_KEYS and 8 * n_sets * K * K <= CAT_GRAM_MAX_BYTES


def sets_per_chain(K: int, n_sets: int) -> int:
    """The statistics sets whose explicit G one chain sums at once (``GRAM_CHAIN_BYTES``)."""
    return max(1, min(n_sets, GRAM_CHAIN_BYTES // (8 * K ** 2 or 1)))


def link_sets(states, bucket, sets) -> tuple:
    """A bucket's leaves added to the explicit G of every set of ``sets`` (``states``:
    theirs so far, as this returned them, or None): ``(set 0's LeafSums or None, the
    trials' TrialGrams or None)``."""
    sets = list(sets)
    zero, trials = (None, None) if states is None else states
    if sets and sets[0] == 0:
        zero = gram_link(zero, bucket, 0)
    rest = [s for s in sets if s != 0]
    if rest:
        trials = gram_sets(trials, bucket, rest)
    return zero, trials


def chain_states(chain) -> list:
    """The per-set LeafSums of a :func:`link_sets` state, in set order."""
    zero, trials = chain
    return ([] if zero is None else [zero]) + ([] if trials is None else trials.leaf_sums())


class CatStratPDEstimator(ModelFreeEstimator):
    """CatStratPD (see the module docstring)."""

    name = "categorical"
    column_kind = "categorical"
    method = "catstratpd"
    result_type = CatStratPDResult
    values_cap = CATEGORY_LEVELS_CAP
    finish_first = True  # the longest: its solve may run on the cluster while the others finish

    # -- pass 1 -----------------------------------------------------------------------

    def sample_values(self, col):
        return col, col.notna().to_numpy()

    def keeps_missing(self, nan_as_level):
        return bool(nan_as_level)

    def coder(self, feature, sample, max_bins, nan_as_level, dtype) -> KeyCoder:
        distinct = sample.distinct.get(feature)
        if distinct is None:
            raise DataError(f"categorical feature {feature!r} has more than {CATEGORY_LEVELS_CAP:,} distinct levels")
        vals = category_values(distinct, dtype)
        if dtype is not None and pd.api.types.is_float_dtype(dtype):
            keys = np.asarray(vals, dtype="float64")
            bad = keys[np.isfinite(keys) & (keys != np.round(keys))]
            if len(bad):
                raise DataError(
                    f"feature {feature!r} is a float column with non-integer values (e.g. {bad[0]!r}); CatStratPD "
                    "treats every distinct value as a category. Use daskpd.stratpd for a numeric feature, or cast "
                    "the column to int/str if its values really are category codes.")
        return KeyCoder("categorical", values=vals, nan_level=bool(nan_as_level))

    # -- the map ------------------------------------------------------------------------

    def read_x(self, fs, s):
        return fs.coder.valid(s), None

    def keys(self, fs, s, x, ok, every):
        return fs.coder.encode(s if every else s[ok])

    # -- buckets and aggregate ---------------------------------------------------------

    def finish_bucket(self, scan, index, table, counters, span):
        """``(CGBucket, BucketSummary)``: the bucket's least-squares terms."""
        return prepare((table, counters), scan.features[index], scan, span=span)

    def wire(self, scan, index, merged, node):
        i, fs, B, n_sets = index, scan.features[index], len(merged), scan.n_sets
        buckets = [node("pick", merged[b], i, 0, key=f"cat-bucket-{b}-f{i}") for b in range(B)]
        summaries = [node("pick", merged[b], i, 1, key=f"cat-summary-{b}-f{i}") for b in range(B)]
        if fs.coder.n_keys > categorical_buckets.EXPLICIT_MAX_KEYS:
            # the buckets stay where they are; CG rounds follow (solve_kept)
            return node("call", i, "fold", *summaries, key=f"cat-summaries-f{i}"), buckets
        # G summed over the buckets, solved directly: one chain of tasks over the buckets sums G of
        # several sets (each bucket travels to a chain once, not once per set), as many as GRAM_CHAIN_BYTES holds
        per = sets_per_chain(fs.coder.n_keys, n_sets)
        chains = []
        for q, first in enumerate(range(0, n_sets, per)):
            sets = list(range(first, min(n_sets, first + per)))
            state = None
            for b in range(B):
                state = node("call", i, "gram_links", state, buckets[b], sets, key=f"cat-gram-{q}-{b}-f{i}")
            chains.append(state)
        return node("call", i, "explicit_chains", len(chains), *chains, *summaries,
                    key=f"finish-categorical-f{i}"), None

    def gram_links(self, scan, index, states, bucket, sets: list) -> list:
        """The explicit G of every set of ``sets`` (``states``: theirs so far, or None)
        with a bucket's leaves added: set 0's by :func:`~daskpd._strat.categorical_gram.gram_link`,
        the trials' all at once (:func:`~daskpd._strat.categorical_gram.gram_sets`)."""
        return link_sets(states, bucket, sets)

    def explicit_chains(self, scan, index, n_chains: int, *args):
        """The result from the states of :meth:`gram_links` chains (in set order) and the
        buckets' summaries."""
        states = [st for chain in args[:n_chains] for st in chain_states(chain)]
        return effects_explicit(scan.features[index], states, list(args[n_chains:]), scan)

    def fold(self, scan, index, *summaries):
        """A CG feature's bucket summaries folded for its solve, next to them."""
        return fold_for_solve(list(summaries), scan.features[index].coder.n_keys, scan.n_sets)

    def solve_kept(self, scan, index, refs, partial):
        return effects_iterative(scan.features[index], refs, partial, scan)

    def finish_state(self, scan, index, part):
        fs = scan.features[index]
        bucket, summary = part
        if fs.coder.n_keys <= EXPLICIT_MAX_KEYS:
            per = sets_per_chain(fs.coder.n_keys, scan.n_sets)
            states = [st for first in range(0, scan.n_sets, per)
                      for st in chain_states(link_sets(None, bucket, range(first, min(scan.n_sets, first + per))))]
            return effects_explicit(fs, states, [summary], scan)
        # conjugate gradients where the sums are: here (sending the whole merged bucket to
        # one worker can exceed that worker's memory; the rounds are sequential)
        return effects_iterative(fs, [bucket], [summary], scan, local=True)

    # -- the finish summary -------------------------------------------------------------

    def attach_summary(self, fs, state, n_sets, random_state, table):
        if state.summary is None and explicit_summary(state.coder.n_keys, n_sets):
            return cat_summary(table(), state.coder.n_keys, n_sets, fs.feature, random_state)
        return state.summary

    def delta_finish(self, d: DeltaInputs):
        fs, n_sets, summary = d.fs, d.n_sets, d.summary
        K = fs.coder.n_keys
        if not explicit_summary(K, n_sets):
            # too many categories for kept normal equations: conjugate gradients over the runs, unmerged
            block = runs_block(d.old_views(), d.new_table(), K, n_sets, fs.feature, d.random_state)
            return None, result_of_effects(fs, d.scan, effects_of_runs(block), d.counters), "runs"
        if not (isinstance(summary, CatSummary) and summary.n_sets == n_sets):
            return None
        summary = summary.recode(d.kmap(), K)
        summary = apply_cat_delta(summary, d.old_views(), d.new_table(), fs.feature, d.random_state)
        result = result_of_effects(fs, d.scan, effects_of_summary(summary, d.counters), d.counters)
        return summary, result, "delta"

    def merged_summary(self, fs, table, n_sets, random_state, n_segments):
        # the next run updates it (None: too many categories for explicit normal equations)
        K = fs.coder.n_keys
        return cat_summary(table, K, n_sets, fs.feature, random_state) if explicit_summary(K, n_sets) else None

    def load_summary(self, arrays):
        return CatSummary.from_arrays(arrays)
