"""How much memory a model-free scan's tasks need, from its scans' sizes before anything is
read: the map's output per partition, a combine's peak at the reduction's fan-in, the
finish's trial sums and the results (:func:`size_scan`), and the check that refuses a
scan that cannot fit (:func:`check_scan_memory`, docs/pipeline.md "Memory is a setting").
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._engine import memory
from .._errors import DataError
from .scan import groups_at_map, index_dtype

#: a scan keeping its state holds each bucket's merged tables until the driver has them,
#: besides what the finish makes of them: its buckets are planned for this much more memory
KEEP_STATE_FACTOR = 2


def _raw_row_bytes(fs) -> int:
    """Bytes a map ships per row of a feature it does not group (see StratScan.map)."""
    index = np.dtype(index_dtype(fs.n_leaves)).itemsize + np.dtype(index_dtype(fs.coder.n_keys)).itemsize
    return index + 8 * (fs.stats_per_set - 1)  # y (and x)


def _grouped_bytes(fs) -> int:
    return 4 + 8 + 8 * fs.stats_per_set  # leaf, key, the sums


def _occupied(fs, rows: float) -> float:
    """Expected occupied (leaf, key) cells among ``rows`` rows: C (1 - exp(-rows / C))."""
    cells = max(float(fs.n_leaves) * fs.coder.n_keys, 1.0)
    return cells * -np.expm1(-rows / cells)


def _map_bytes(fs, rows_per_part: float) -> float:
    if groups_at_map(fs, rows_per_part):
        return _occupied(fs, rows_per_part) * _grouped_bytes(fs)
    return rows_per_part * _raw_row_bytes(fs)


#: a merge groups a feature's raw rows once grouping shrinks their bytes by this much
GROUP_SHRINK = 0.8


def group_from(fs, n_rows: int, n_partitions: int) -> int:
    """How many partitions a merge must cover before it groups a feature's raw rows
    (:meth:`StratScan.combine`): the fewest whose expected (leaf, key) groups take at most
    ``GROUP_SHRINK`` of the rows' bytes; ``n_partitions + 1`` when none do (the rows are
    then grouped once, next to their bucket's finish); 0 for a feature the maps group."""
    rows_per_part = n_rows / max(1, n_partitions)
    if groups_at_map(fs, rows_per_part):
        return 0
    raw, grouped = _raw_row_bytes(fs), _grouped_bytes(fs)
    for c in range(1, n_partitions + 1):
        if _occupied(fs, c * rows_per_part) * grouped <= GROUP_SHRINK * c * rows_per_part * raw:
            return c
    return n_partitions + 1


def map_output_bytes(scans: list, n_rows: int, n_partitions: int) -> float:
    """What the scan's maps ship, all partitions together, about."""
    rows_per_part = n_rows / max(1, n_partitions)
    return n_partitions * sum(_map_bytes(fs, rows_per_part) for fs in scans)


def _node_bytes(fs, covered: int, n_rows: int, n_partitions: int, g: int) -> float:
    """A merged node covering ``covered`` partitions (raw rows until ``g = group_from``)."""
    rows_per_part = n_rows / max(1, n_partitions)
    if covered < g:
        return covered * rows_per_part * _raw_row_bytes(fs)
    return _occupied(fs, covered * rows_per_part) * _grouped_bytes(fs)


def combine_peak_bytes(scans: list, n_rows: int, n_partitions: int, fan_in: int,
                       arity: int | None = None, grouping: dict | None = None) -> float:
    """The most bytes a combine task of the scan holds (its inputs, the partials of the
    arithmetic levels it adds itself and its output), about, summed over every feature,
    before the reduction is cut into buckets.

    A node of the reduction tree covering k partitions holds the occupied (leaf, key)
    cells of k partitions' rows (:func:`_occupied`); a combine task holds up to
    ``fan_in`` nodes of one task level, and its output; one that adds several
    arithmetic levels (``fan_in`` a power of ``arity``) holds up to as much again of
    intermediate partials.  Map outputs are raw rows (a feature with few cells is
    grouped in the map already), and stay raw up the tree until :func:`group_from`
    (``grouping``: its value per feature, when already known).
    """
    rows_per_part = n_rows / max(1, n_partitions)
    arity = fan_in if arity is None else arity
    if grouping is None:
        grouping = {fs.key: group_from(fs, n_rows, n_partitions) for fs in scans}
    peak = 0.0
    k = 1
    while True:
        parent = min(k * fan_in, n_partitions)
        n_children = min(fan_in, -(-n_partitions // k))
        total = 0.0
        for fs in scans:
            g = grouping[fs.key]
            ins = n_children * (_map_bytes(fs, rows_per_part) if k == 1 else
                                _node_bytes(fs, k, n_rows, n_partitions, g))
            total += ins + _node_bytes(fs, parent, n_rows, n_partitions, g) * (2 if fan_in > arity else 1)
        peak = max(peak, total)
        if parent >= n_partitions:
            return peak
        k *= fan_in


@dataclass
class ScanSizing:
    """The scan's reduction as the memory model sizes it (:func:`size_scan`): its fan-in,
    arithmetic arity, grouping level per feature and bucket count, and about how many
    bytes its largest task holds (``task_bytes``: a bucket's share of the largest combine
    plus its finish's trial arrays, ``trial_bytes``) and its results take on the driver
    (``result_bytes``)."""

    fan_in: int
    arity: int
    grouping: dict
    n_buckets: int
    task_bytes: float
    trial_bytes: float
    result_bytes: float


#: what a bucket's finish holds, with trials, per (position, statistics set) of its
#: features and per ((leaf, position) group, trial): the per-position sums and curves of
#: every set, and per group its leaf's trial weights and every set's slope sums (one
#: byte and two float64 a trial: :func:`daskpd._strat.numeric._segments`)
FINISH_BYTES_PER_POSITION_SET = 200


FINISH_BYTES_PER_GROUP_TRIAL = 17


def _finish_trial_bytes(scans, n_rows: int, n_buckets: int, n_sets: int) -> float:
    """What the trials add to a bucket's finish, about (:data:`FINISH_BYTES_PER_POSITION_SET`,
    :data:`FINISH_BYTES_PER_GROUP_TRIAL`): every feature's per-position arrays of every
    set (a bucket's leaves reach every position), and per (leaf, position) group of the
    bucket (its share of the occupied cells) the trials' weights and slope sums."""
    T = n_sets - 1
    if T <= 0:
        return 0.0
    groups = max((_occupied(fs, n_rows) for fs in scans), default=0.0) / max(1, n_buckets)
    return (FINISH_BYTES_PER_GROUP_TRIAL * groups * T
            + FINISH_BYTES_PER_POSITION_SET * n_sets * sum(fs.coder.n_keys for fs in scans))


def _result_bytes(scans, n_sets: int) -> float:
    """The results on the driver, about: per feature a curve per set over its positions
    (the trial curves and what is kept with them: 2 arrays of float64)."""
    return float(sum(2.0 * 8 * n_sets * fs.coder.n_keys for fs in scans))


def size_scan(scans, n_rows: int, n_partitions: int, n_trials: int, keep=False, parts_dir=None) -> ScanSizing:
    """The memory model's sizing of a scan of ``scans`` over ``n_partitions`` partitions
    of ``n_rows`` rows with ``n_trials`` trials: its reduction (twice the memory per
    bucket when it keeps its state, ``keep`` truthy, and sends it to the driver; a bucket
    that writes its sums to ``parts_dir`` itself lets them go at once), and the bytes of
    its largest task and of its results."""
    n_sets = 1 + n_trials
    arity = memory.arity(n_partitions)
    fan_in = memory.fan_in(n_partitions, map_output_bytes(scans, n_rows, n_partitions))
    grouping = {fs.key: group_from(fs, n_rows, n_partitions) for fs in scans}
    peak = combine_peak_bytes(scans, n_rows, n_partitions, fan_in, arity, grouping) \
        * (KEEP_STATE_FACTOR if keep and parts_dir is None else 1)
    n_buckets = memory.n_buckets(peak, n_rows=n_rows, parallel=memory.parallelism())
    trial = _finish_trial_bytes(scans, n_rows, n_buckets, n_sets)
    # a bucket's share of the largest combine, with as much again of working arrays (as n_buckets counts it)
    task = 2.0 * peak / n_buckets + trial
    return ScanSizing(fan_in, arity, grouping, n_buckets, task, trial, _result_bytes(scans, n_sets))


def check_scan_memory(scans, n_rows: int, n_partitions: int, n_trials: int, keep=False, parts_dir=None,
                      sizing: ScanSizing | None = None) -> ScanSizing:
    """:func:`size_scan`, or a :class:`DataError` with the figures when its largest task
    cannot fit in a worker thread's memory (:func:`daskpd._engine.memory.usable_thread_memory`)
    or its results in the driver's (:func:`daskpd._engine.memory.driver_memory`), before
    anything of the scan runs; the message gives the most trials that would fit."""
    sz = sizing if sizing is not None else size_scan(scans, n_rows, n_partitions, n_trials, keep, parts_dir)
    worker, driver = memory.usable_thread_memory(), memory.driver_memory()
    if sz.task_bytes <= worker and sz.result_bytes <= driver:
        return sz

    def fits(t: int) -> bool:
        z = size_scan(scans, n_rows, n_partitions, t, keep, parts_dir)
        return z.task_bytes <= worker and z.result_bytes <= driver

    lo, hi = 0, n_trials  # the most trials that fit: fits(lo), not fits(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    fb = memory.format_bytes
    if sz.task_bytes > worker:
        part = "every leaf" if sz.n_buckets == 1 else f"1/{sz.n_buckets} of the leaves"
        what = (f"its largest task (the finish of a bucket holding {part}) needs about {fb(sz.task_bytes)}"
                + (f" ({fb(sz.trial_bytes)} of it the trials' weights and per-position sums)" if sz.trial_bytes else "")
                + f" and a worker thread has {fb(worker)} (its share of memory_limit, up to dask's pause "
                  "threshold)")
    else:
        what = f"its results need about {fb(sz.result_bytes)} on the driver, which has {fb(driver)} available"
    trials = f"n_trials = {n_trials:,}" if n_trials else "the scan"
    more = (f"at most about {lo:,} trials fit: lower n_trials" if n_trials and lo >= 1 else
            "lower n_trials" if n_trials else "lower max_bins, raise min_samples_leaf or stratify on fewer columns")
    raise DataError(f"{trials} does not fit in memory: {what}; {more}, or give the workers more memory "
                    "(nothing was scanned)")
