"""New rows against old under one stratification: the two comparison states.

Given the state of some new rows (an incremental run's new files) and that of the rows
before them (or of all the rows, from which the new rows' sums are taken off), both
scanned under one :class:`~daskpd._strat.stratification.Stratification`, :func:`comparison_states`
returns two states that can be finished by the scan's own kernels
(:meth:`~daskpd._strat.state.ScanState.finish`) into two curves per feature that
differ only by what the rows say:

* **the same positions**, the feature's estimator's
  (``ModelFreeEstimator.comparison_positions``): a numeric feature's (StratPD) are merged
  into at most ``max_positions`` bins of about equal new-row mass (its exact values are
  kept when it has no more), a categorical feature (CatStratPD) keeps its levels (the
  union of both states');
* **the same cells**: both states keep only the (leaf, position) cells that both hold.
  A StratPD curve's slope in a leaf is the chord between the positions the leaf holds,
  so the curve depends on how densely the rows fill the leaves: a night's few rows
  skip positions the old rows fill, and on a curved effect the two curves then differ
  by a bias that has nothing to do with drift (on ``0.5 x1^2`` with 11 values, 3 % of
  the curve's range at 20,000 new rows against 100,000 old ones: 40 standard errors).
  Restricted to the same cells, both curves are made of the same chords, and under an
  unchanged generator their difference has mean zero.

Both states finish with ``n_trials`` trials: a state's sums hold no trial set (a trial
is a Poisson weight of every leaf, :mod:`daskpd._strat.leafboot`), so the comparison
picks its own trial count, and trial ``t`` of the two curves weights every leaf alike:
the trials are paired by leaf.  Only the cells the new rows touch are finished, so the
cost follows the new rows; the old sums are read once (memory-mapped) to merge them
into the comparison's positions.

A categorical feature's new side is not a second CatStratPD solve: its change is
measured against the old rows' cell means (:func:`cell_change`).  In every shared
(leaf, category) cell, ``r = mean_new - mean_old``; the change of a category is the
mean of ``r`` over its new rows (the cells weighted by their new rows), and trial ``t``
takes the same mean with every cell's new rows weighted by its leaf's Poisson weight.
Under an unchanged generator ``E[r] = 0`` in every cell, and every new row in a cell
the old rows hold counts -- where a CatStratPD solve of the new rows alone uses only
the leaves holding two categories among the new rows, few when a night puts less than
one new row in a leaf and category.  The new curve is the old one plus the change
(:func:`new_curve`).  What this measures is the change of ``y`` given the leaf and the
category: a change of another feature's effect moves ``r`` in the leaves it touches for
every category alike, and is taken off by the centring across the categories as long as
the categories' new rows are spread alike over those leaves; a category whose rows sit
mostly in them takes a share of that change (docs/drift.md, "Assumptions").
"""
from __future__ import annotations

import contextlib
import contextvars
import mmap
from dataclasses import dataclass, replace

import numba
import numpy as np
import pandas as pd

from .._data.encode import KeyCoder
from .._engine.allocator import limit_worker_threads
from .._engine.sums import Table
from .estimator import ModelFreeEstimator
from .estimators import feature_of
from .leafboot import weights_of_leaves
from .options import FinishOptions
from .positions import union_coder
from .state import FeatureState, Run, ScanState
from .stratification import Stratification

__all__ = ["comparison_states", "Comparison", "CellChange", "cell_change", "new_curve", "by_cells", "MAX_POSITIONS",
           "CHUNK_CELLS", "NewSide", "new_side", "pair_sides", "side_state", "check_states", "on_disk", "run_dirs", "one_feature", "pair_task", "finish_task",
           "new_state_hook", "call_new_state_hook"]

#: a numeric feature's positions in the comparison: at most this many (bins of about
#: equal new-row mass; exact values when it has no more)
MAX_POSITIONS = 12
#: the old sums are merged into the comparison's positions this many cells at a time
CHUNK_CELLS = 1 << 21


@dataclass
class Comparison:
    """What :func:`comparison_states` made: the two states (``new``, ``old``) and per
    feature the rows of each side inside the shared cells and in all (``rows``:
    ``{feature: (new_kept, new_all, old_kept, old_all)}``)."""

    new: ScanState
    old: ScanState
    rows: dict


def _labels(coder: KeyCoder) -> pd.Index:
    vals = pd.Index(np.asarray(coder.values, dtype=object), dtype=object)
    return vals


def _to_union(st: FeatureState, union: KeyCoder) -> np.ndarray:
    """The state's code -> the union coder's code."""
    c = st.coder
    if c.binned:
        return np.arange(c.n_keys, dtype=np.int64)
    if c.kind == "numeric":
        return np.searchsorted(np.asarray(union.values, "float64"), np.asarray(c.values, "float64")).astype(np.int64)
    m = _labels(union).get_indexer(_labels(c)).astype(np.int64)
    if c.nan_level:
        m = np.append(m, union.n_keys - 1)
    return m


def _reduce(leaf, key, vals, n_keys: int) -> Table:
    """Sums per (leaf, key) of raw cells, sorted."""
    if not len(leaf):
        return Table.empty(vals.shape[1])
    leaf = np.ascontiguousarray(leaf, dtype=np.int64)
    key = np.ascontiguousarray(key, dtype=np.int64)
    vals = np.ascontiguousarray(vals, dtype=np.float64)
    # already in (leaf, key) order (a run's cells, its codes kept in order): summed in one pass
    got = _reduce_sorted(leaf, key, vals)
    if got is not None:
        return Table(got[0].astype(np.int32), got[1], got[2])
    comb = leaf * n_keys + key
    u, inv = np.unique(comb, return_inverse=True)
    out = np.zeros((len(u), vals.shape[1]))
    for j in range(vals.shape[1]):
        out[:, j] = np.bincount(inv, weights=vals[:, j], minlength=len(u))
    return Table((u // n_keys).astype(np.int32), (u % n_keys).astype(np.int64), out)


@numba.njit(cache=True, nogil=True)
def _reduce_sorted(leaf, key, vals):
    """``(leaf, key, sums)`` per (leaf, key) of cells in (leaf, key) order, each cell's
    sums added in row order from 0.0 (as ``np.bincount`` adds them); None when the cells
    are not in order."""
    m = leaf.shape[0]
    for i in range(1, m):
        if leaf[i] < leaf[i - 1] or (leaf[i] == leaf[i - 1] and key[i] < key[i - 1]):
            return None
    k = vals.shape[1]
    ol = np.empty(m, np.int64)
    ok = np.empty(m, np.int64)
    out = np.empty((m, k))
    u = -1
    for i in range(m):
        if u < 0 or leaf[i] != ol[u] or key[i] != ok[u]:
            u += 1
            ol[u] = leaf[i]
            ok[u] = key[i]
            for j in range(k):
                out[u, j] = 0.0
        for j in range(k):
            out[u, j] += vals[i, j]
    return ol[:u + 1].copy(), ok[:u + 1].copy(), out[:u + 1].copy()


def _side(st: FeatureState, to_union: np.ndarray, mapping: np.ndarray, xval, target: KeyCoder,
          only: np.ndarray | None = None) -> tuple[Table, float]:
    """A feature's sums in the comparison's codes and its rows (the sum of its counts):
    every run of the state read once, ``CHUNK_CELLS`` cells at a time; ``only`` (sorted
    cells, ``leaf * n_keys + code``): the cells kept, the others only counted.  A saved
    run's files stay on disk: memory-mapped, their pages given back after each chunk
    (:func:`_give_back`), so that the memory this takes follows the chunk and the cells
    kept, not the state's size."""
    code = mapping[to_union]  # state code -> comparison code
    x_of = None if xval is None or not target.binned else xval[to_union]
    width = 3 if target.binned else 2
    K = target.n_keys
    parts, rows = [], 0.0
    for run in st.runs:
        for v in run.views(st.coder):
            for a in range(0, len(v), CHUNK_CELLS):
                b = min(len(v), a + CHUNK_CELLS)
                leaf = np.asarray(v.leaf[a:b], np.int64)
                k = v.kmap[np.asarray(v.key[a:b], np.int64)]
                n = np.asarray(v.column(0)[a:b], dtype="float64")
                rows += float(n.sum())  # whole numbers: exact in any order
                at = slice(None)
                if only is not None:
                    comb = leaf * K + code[k]
                    i = np.minimum(np.searchsorted(only, comb), max(len(only) - 1, 0))
                    at = np.flatnonzero(only[i] == comb) if len(only) else np.zeros(0, np.int64)
                    del comb, i
                    leaf, k, n = leaf[at], k[at], n[at]
                cols = [n, np.asarray(v.column(1)[a:b], dtype="float64")[at]]
                if width == 3:
                    cols.append(np.asarray(v.column(2)[a:b], dtype="float64")[at] if st.coder.binned else n * x_of[k])
                parts.append(_reduce(leaf, code[k], np.column_stack(cols), K))
                _give_back(v, width if st.coder.binned else 2)
    parts = [p for p in parts if len(p)]
    if not parts:
        return Table.empty(width), rows
    if len(parts) == 1:
        return parts[0], rows
    return _reduce(np.concatenate([p.leaf for p in parts]), np.concatenate([p.key for p in parts]),
                   np.concatenate([p.values for p in parts]), K), rows


def _give_back(v, n_columns: int) -> None:
    """Drop the pages of a saved run's memory-mapped files from this process (they stay
    in the file, read again when touched): a worker's resident memory, which its nanny
    watches, holds the chunk read, not every page of the files read so far."""
    for a in (v.leaf, v.key, *(v.column(j) for j in range(n_columns))):
        while isinstance(a, np.ndarray) and not isinstance(a, np.memmap):
            a = a.base
        mm = getattr(a, "_mmap", None)
        if mm is not None and not mm.closed and hasattr(mmap, "MADV_DONTNEED"):
            mm.madvise(mmap.MADV_DONTNEED)


def _cells(t: Table, n_keys: int) -> np.ndarray:
    return t.leaf.astype(np.int64) * n_keys + t.key


def _take(t: Table, idx: np.ndarray) -> Table:
    return Table(t.leaf[idx], t.key[idx], t.values[idx])


def check_states(new: ScanState, base: ScanState, stratification: Stratification) -> None:
    """A ValueError unless both states were scanned under ``stratification``."""
    for s in (new, base):
        if s.stratification_id != stratification.id:
            raise ValueError(f"a state was scanned under stratification {s.stratification_id}, not {stratification.id}")


@dataclass
class NewSide:
    """A feature's comparison positions and the new rows' sums on them (:func:`new_side`):
    the union coder of both states, the comparison's coder (``target``), the union code
    -> comparison code (``mapping``), the union codes' x (``xval``) and the new rows'
    sums in the comparison's codes (``table``)."""

    union: KeyCoder
    target: KeyCoder
    mapping: np.ndarray
    xval: np.ndarray | None
    table: Table


def new_side(a: FeatureState, b: FeatureState, dtype, estimator: ModelFreeEstimator,
             max_positions: int = MAX_POSITIONS) -> NewSide:
    """The first half of a feature's comparison: its positions (``estimator``'s
    ``comparison_positions`` of the new rows ``a``; ``b``: the old or all rows) and the
    new rows' sums on them."""
    union = union_coder(b.coder, a.coder, dtype)
    ua = _to_union(a, union)
    fine, _ = _side(a, ua, np.arange(union.n_keys, dtype=np.int64), None, union)
    counts = np.bincount(fine.key, weights=fine.values[:, 0], minlength=union.n_keys)
    target, mapping, xval = estimator.comparison_positions(union, counts, max_positions)
    return NewSide(union, target, mapping, xval, _side(a, ua, mapping, xval, target)[0])


def pair_sides(new_counters, b: FeatureState, ns: NewSide, whole: bool) -> tuple:
    """The second half of a feature's comparison: ``(new FeatureState, old FeatureState,
    (new_kept, new_all, old_kept, old_all))`` on the cells both hold; ``b`` the old rows'
    sums, or all the rows' (``whole``: the new rows' taken off), read once."""
    target, mapping, xval, tn = ns.target, ns.mapping, ns.xval, ns.table
    K = target.n_keys
    cn = _cells(tn, K)
    # the old rows' sums on the new rows' cells only (the others are counted): the memory
    # this takes follows the new rows, not the old ones
    tb, rows_b = _side(b, _to_union(b, ns.union), mapping, xval, target, only=np.unique(cn))
    cb = _cells(tb, K)
    both, i_n, i_b = np.intersect1d(cn, cb, assume_unique=True, return_indices=True)
    if whole:  # old = whole - new, on the new rows' cells (the others are the old rows' alone)
        vals = tb.values[i_b] - tn.values[i_n]
        keep = vals[:, 0] > 0.5  # counts are whole numbers: a cell the new rows alone fill is dropped
        old_rows = float(rows_b - tn.values[:, 0].sum())
        tb = Table(tb.leaf[i_b][keep], tb.key[i_b][keep], vals[keep])
        i_n = i_n[keep]
        counters_old = tuple(int(x) - int(y) for x, y in zip(b.counters, new_counters))
    else:
        old_rows = float(rows_b)
        tb = _take(tb, i_b)
        counters_old = tuple(b.counters)
    new_rows = float(tn.values[:, 0].sum())
    tn = _take(tn, i_n)
    rows = (float(tn.values[:, 0].sum()), new_rows, float(tb.values[:, 0].sum()), old_rows)
    return (FeatureState(target, tn, new_counters, kind=b.kind), FeatureState(target, tb, counters_old, kind=b.kind),
            rows)


def comparison_states(new: ScanState, stratification: Stratification, n_trials: int, *, old: ScanState | None = None,
                      whole: ScanState | None = None, max_positions: int = MAX_POSITIONS) -> Comparison:
    """The new rows' and the old rows' comparison states (see the module docstring):
    ``old``, the state of the rows before the new ones, or ``whole``, the state of all
    the rows (the old ones and the new ones), from which the new rows' sums are taken
    off (their counts exactly; a cell left without rows is dropped)."""
    if (old is None) == (whole is None):
        raise ValueError("give exactly one of old= (the rows before the new ones) and whole= (all the rows)")
    base = old if old is not None else whole
    check_states(new, base, stratification)
    feats_new, feats_old, rows = {}, {}, {}
    for f, a in new.features.items():
        b = base.features[f]
        c = feature_of(f)  # an entry key: the feature, or (feature, kind) for another estimator of it
        ns = new_side(a, b, new.dtypes.get(c) if new.dtypes.get(c) is not None else base.dtypes.get(c),
                      stratification.scan_of(f).estimator, max_positions)
        feats_new[f], feats_old[f], rows[f] = pair_sides(a.counters, b, ns, whole is not None)
    n_old = base.n_rows - (new.n_rows if whole is not None else 0)
    return Comparison(side_state(new, feats_new, n_trials, new.n_rows), side_state(base, feats_old, n_trials, n_old),
                      rows)


def side_state(s: ScanState, feats: dict, n_trials: int, n_rows: int) -> ScanState:
    """One side of a comparison: ``feats`` as a state of ``s``'s scan with ``n_trials``."""
    return ScanState(s.stratification_id, s.target, int(n_trials), feats, int(n_rows), s.y_range, s.n_partitions,
                     dict(s.dtypes))


# ---------------------------------------------------------------------------------
# a categorical feature's change: the new rows against the old rows' cell means


@dataclass
class CellChange:
    """A categorical feature's change from the old rows' cell means to the new rows'
    (:func:`cell_change`), indexed by the comparison's codes (``coder``): ``change``
    (K,), its trials (``trials``, (T, K), None without trials), the leaves carrying it
    (``leaves``) and the new rows it is the mean of (``rows``, (1 + T, K): the rows, then
    each trial's weighted rows).  NaN where no new row falls in a cell the old rows hold."""

    coder: KeyCoder
    change: np.ndarray
    trials: np.ndarray | None
    leaves: np.ndarray
    rows: np.ndarray


def by_cells(estimator: ModelFreeEstimator) -> bool:
    """Whether a feature's new side is its change against the old rows' cell means
    (:func:`cell_change`: a categorical feature) rather than a curve of its own."""
    return getattr(estimator, "method", None) == "catstratpd"


def cell_change(new: FeatureState, old: FeatureState, feature: str, n_trials: int, random_state: int) -> CellChange:
    """The change of every category from the old rows to the new ones on the shared
    cells of :func:`pair_sides` (``new``, ``old``: the same (leaf, category) cells in the
    same order, columns ``(n, sum y)``): per cell ``r = sum_new / n_new - sum_old / n_old``,
    per category the mean of ``r`` weighted by ``n_new``; trial ``t`` weights every
    cell's new rows by its leaf's Poisson weight (:func:`~daskpd._strat.leafboot.weights_of_leaves`
    of ``feature``, ``n_trials`` and ``random_state``: the weights the old side's trials
    give its leaves)."""
    tn, to = new.table, old.table
    if len(tn) != len(to) or not (np.array_equal(tn.leaf, to.leaf) and np.array_equal(tn.key, to.key)):
        raise ValueError(f"feature {feature!r}: the new and the old side of a comparison must hold the same cells "
                         f"(got {len(tn)} and {len(to)})")
    K = new.coder.n_keys
    n_new, n_old = tn.values[:, 0], to.values[:, 0]
    ok = (n_new > 0) & (n_old > 0)
    key = np.asarray(tn.key, np.int64)[ok]
    leaf = np.asarray(tn.leaf, np.int64)[ok]
    nn = n_new[ok]
    excess = nn * (tn.values[ok, 1] / nn - to.values[ok, 1] / n_old[ok])  # n_new * r
    T = max(int(n_trials), 0)
    rows = np.zeros((1 + T, K))
    num = np.zeros((1 + T, K))
    rows[0] = np.bincount(key, weights=nn, minlength=K)
    num[0] = np.bincount(key, weights=excess, minlength=K)
    if T:
        uleaf, inv = np.unique(leaf, return_inverse=True)
        w = weights_of_leaves(feature, uleaf, T, random_state)  # (leaves, T) uint8
        for t in range(T):
            wt = w[inv, t].astype("float64")
            rows[1 + t] = np.bincount(key, weights=nn * wt, minlength=K)
            num[1 + t] = np.bincount(key, weights=excess * wt, minlength=K)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = num / rows
    mean[rows <= 0] = np.nan
    leaves = np.bincount(key, minlength=K).astype("float64")  # one cell a (leaf, category)
    return CellChange(new.coder, mean[0], mean[1:] if T else None, leaves, rows)


def new_curve(old, change: CellChange):
    """The new rows' curve of a categorical feature: the old rows' CatStratPD result
    ``old`` plus the change (:func:`cell_change`) at its categories (matched by label),
    trial by trial; its ``count`` and ``n_leaves_cat`` are the new rows and the leaves
    the change is measured on."""
    labels = pd.Index(np.asarray(change.coder.labels(), dtype=object), dtype=object).astype(str)
    at = labels.get_indexer(pd.Index(old.categories, dtype=object).astype(str))
    if (at < 0).any():
        raise ValueError(f"feature {old.feature!r}: the old curve has categories the comparison does not")
    trials = None
    if old.trials_pd is not None and change.trials is not None:
        T = min(len(old.trials_pd), len(change.trials))
        trials = old.trials_pd[:T] + change.trials[:T, at]
    rows = change.rows[:, at]
    return replace(old, pd=old.pd + change.change[at], count=rows[0], count_used=rows[0],
                   n_leaves_cat=change.leaves[at], trials_pd=trials, set_counts=rows,
                   n_rows=round(float(rows[0].sum())), n_used=round(float(rows[0].sum())), n_ignored=0)


# ---------------------------------------------------------------------------------
# on the workers: a feature's comparison read and finished where the old sums are


def on_disk(st: FeatureState) -> FeatureState | None:
    """``st`` as a light copy that reads its runs' saved files (sent to a worker: only
    their paths travel), or None when a run is in memory."""
    if any(r.sources is None for r in st.runs):
        return None
    return FeatureState(st.coder, None, st.counters, runs=[Run(r.coder, None, r.sources) for r in st.runs],
                        kind=st.kind)


def run_dirs(st: FeatureState) -> set:
    """The directories a saved feature's runs read."""
    return {d for r in st.runs for d, _ in (r.sources or ())}


def one_feature(stratification: Stratification, feature) -> Stratification:
    """``stratification`` reduced to one feature's tree (the same id): what finishing that
    feature (an entry key: ``(feature, kind)`` for another estimator of it) needs."""
    f = feature_of(feature)
    return replace(stratification, features=[f], scans=[stratification.scan_of(feature)],
                   kinds={f: stratification.kinds.get(f)}, id=stratification.id)


def pair_task(new_counters, b: FeatureState, ns: NewSide, whole: bool) -> tuple:
    """:func:`pair_sides` on a worker (``b`` read from its saved files there)."""
    limit_worker_threads()
    return pair_sides(new_counters, b, ns, whole)


def finish_task(sides: tuple, which: int, shell: dict, stratification: Stratification, finish_options: FinishOptions | None):
    """One side of a feature's comparison finished on a worker: ``sides`` (from
    :func:`pair_sides`), ``which`` 0 (the new rows) or 1 (the old ones), ``shell`` the
    side's state fields (``stratification_id``, ``target``, ``n_trials``, ``n_rows``,
    ``y_range``, ``n_partitions``, ``dtypes``); the feature's result -- for the new
    side of a categorical feature its :class:`CellChange` (:func:`new_curve` of it and the
    old side's result is its curve)."""
    limit_worker_threads()
    f = stratification.scans[0].key
    if which == 0 and by_cells(stratification.scans[0].estimator):
        return cell_change(sides[0], sides[1], feature_of(f), int(shell["n_trials"]), stratification.random_state)
    st = ScanState(shell["stratification_id"], shell["target"], int(shell["n_trials"]), {f: sides[which]},
                   int(shell["n_rows"]), shell["y_range"], shell["n_partitions"], dict(shell["dtypes"]))
    return st.finish(stratification, finish_options)[f]


# ---------------------------------------------------------------------------------
# an incremental scan's new sums, as soon as they are gathered

_NEW_STATE_HOOK = contextvars.ContextVar("daskpd_new_state_hook", default=None)


@contextlib.contextmanager
def new_state_hook(fn):
    """Within this context, a scan of new data merged into a base state calls ``fn`` with
    the new data's sums (a :class:`ScanState`) before it merges them, so that work on
    them (a job's new-against-old comparison, on the workers) runs while the driver merges."""
    token = _NEW_STATE_HOOK.set(fn)
    try:
        yield
    finally:
        _NEW_STATE_HOOK.reset(token)


def call_new_state_hook(state: ScanState) -> None:
    """Hand the new data's sums to the hook of :func:`new_state_hook`, if any."""
    fn = _NEW_STATE_HOOK.get()
    if fn is not None:
        fn(state)
