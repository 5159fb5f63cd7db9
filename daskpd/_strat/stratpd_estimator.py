"""StratPD as a :class:`~daskpd._strat.estimator.ModelFreeEstimator`: a numeric
feature's curve from the slopes between the positions each leaf holds.

The kernels are those of :mod:`daskpd._strat.numeric` (a bucket's slope segments summed
per position, :func:`~daskpd._strat.numeric.bucket_sums`; the buckets folded and
integrated, :func:`~daskpd._strat.numeric_curve.curve_from_sums`) and :mod:`daskpd._strat.delta`
(the finish summary an incremental run updates); this module only says which one runs
where.  Its aggregate is one task per feature over the buckets' small per-position
arrays.
"""
from __future__ import annotations

from ..results.curves import StratPDResult
from .delta import NumericSummary, apply_delta, bucket_leaf_stats, gather_leaf_stats, numeric_summary, \
    summary_bucket, summary_from_buckets
from .estimator import DeltaInputs
from .numeric import bin_anchors, bucket_sums
from .numeric_curve import curve_from_sums
from .numeric_positions import NUMERIC_VALUES_CAP, NumericPositions, equal_mass_positions

__all__ = ["StratPDEstimator", "NUMERIC_VALUES_CAP", "equal_mass_positions"]


class StratPDEstimator(NumericPositions):
    """StratPD (see the module docstring; its positions: :class:`~daskpd._strat.numeric_positions.NumericPositions`)."""

    name = "numeric"
    method = "stratpd"
    result_type = StratPDResult
    needs_other_columns = True

    # -- buckets and aggregate ---------------------------------------------------------

    def finish_bucket(self, scan, index, table, counters, span):
        return bucket_sums(table, scan.features[index], scan.n_sets, counters=counters,
                           random_state=scan.random_state,
                           n_segments=scan.finish_options.n_segments, span=span)

    def bucket_state(self, scan, index, table, part):
        # the bucket's slope sums and per-leaf counts: the state's finish summary (this bucket's leaves)
        return part, bucket_leaf_stats(table, scan.features[index])

    def wire(self, scan, index, merged, node):
        picks = [node("pick", merged[b], index, key=f"numeric-{b}-f{index}") for b in range(len(merged))]
        return node("call", index, "final", *picks, key=f"finish-numeric-f{index}"), None

    def final(self, scan, index, *sums):
        """The feature's StratPDResult from its buckets' :class:`~daskpd._strat.numeric.BucketSums`."""
        return curve_from_sums(scan.features[index], list(sums), scan)

    def finish_state(self, scan, index, part):
        return self.final(scan, index, part)

    # -- the finish summary -------------------------------------------------------------

    def summary_from_buckets(self, scan, index, pieces):
        if not all(p is not None for p in pieces):
            return None
        fs = scan.features[index]
        return summary_from_buckets([p[0] for p in pieces], gather_leaf_stats([p[1] for p in pieces], fs.n_leaves),
                                    fs, scan.n_sets, scan.random_state, int(scan.finish_options.n_segments))

    def delta_finish(self, d: DeltaInputs):
        summary, fs, n_sets = d.summary, d.fs, d.n_sets
        # (a summary kept without the band's terms, or without a binned feature's slope weights: merged)
        if not (isinstance(summary, NumericSummary) and summary.n_sets == n_sets and
                summary.n_segments == d.n_segments and summary.random_state == d.random_state and
                (summary.units is not None or n_sets == 1) and
                (summary.wadd is not None) == (bin_anchors(fs.coder) is not None)):
            return None
        kmap = d.kmap()
        summary = summary.recode(kmap, fs.coder.n_keys)  # (a copy when the vocabulary grew: updated in place)
        summary = apply_delta(summary, d.old_views(), d.new_table(), fs, n_sets, overwrite=kmap is not None)
        return summary, self.final(d.scan, d.index, summary_bucket(summary, d.counters, fs.feature)), "delta"

    def merged_summary(self, fs, table, n_sets, random_state, n_segments):
        return numeric_summary(table, fs, n_sets, random_state, n_segments)

    def load_summary(self, arrays):
        return NumericSummary.from_arrays(arrays)
