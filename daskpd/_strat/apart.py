"""New rows against old under one stratification: the two comparison states.

Given the state of some new rows (an incremental run's new files) and that of the rows
before them (or of all the rows, from which the new rows' sums are taken off), both
scanned under one :class:`~daskpd._strat.state.Stratification`, :func:`comparison_states`
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
"""
from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass

import numba
import numpy as np
import pandas as pd

from .._data.encode import KeyCoder
from .._engine.sums import Table
from .._engine.allocator import limit_worker_threads
from .estimator import ModelFreeEstimator
from .options import FinishOptions
from .positions import union_coder
from .state import FeatureState, ScanState, Stratification

__all__ = ["comparison_states", "Comparison", "MAX_POSITIONS", "CHUNK_CELLS", "NewSide", "new_side", "pair_sides",
           "side_state", "check_states", "on_disk", "run_dirs", "one_feature", "pair_task", "finish_task",
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


def _side(st: FeatureState, to_union: np.ndarray, mapping: np.ndarray, xval, target: KeyCoder) -> Table:
    """A feature's sums in the comparison's codes: every run of the state read once,
    ``CHUNK_CELLS`` cells at a time (memory-mapped runs stay on disk)."""
    code = mapping[to_union]  # state code -> comparison code
    x_of = None if xval is None or not target.binned else xval[to_union]
    width = 3 if target.binned else 2
    parts = []
    for run in st.runs:
        for v in run.views(st.coder):
            for a in range(0, len(v), CHUNK_CELLS):
                b = min(len(v), a + CHUNK_CELLS)
                k = v.kmap[np.asarray(v.key[a:b], np.int64)]
                n = np.asarray(v.column(0)[a:b], dtype="float64")
                cols = [n, np.asarray(v.column(1)[a:b], dtype="float64")]
                if width == 3:
                    cols.append(np.asarray(v.column(2)[a:b], dtype="float64") if st.coder.binned else n * x_of[k])
                parts.append(_reduce(np.asarray(v.leaf[a:b], np.int64), code[k], np.column_stack(cols),
                                     target.n_keys))
    parts = [p for p in parts if len(p)]
    if not parts:
        return Table.empty(width)
    if len(parts) == 1:
        return parts[0]
    return _reduce(np.concatenate([p.leaf for p in parts]), np.concatenate([p.key for p in parts]),
                   np.concatenate([p.values for p in parts]), target.n_keys)


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
    fine = _side(a, ua, np.arange(union.n_keys, dtype=np.int64), None, union)
    counts = np.bincount(fine.key, weights=fine.values[:, 0], minlength=union.n_keys)
    target, mapping, xval = estimator.comparison_positions(union, counts, max_positions)
    return NewSide(union, target, mapping, xval, _side(a, ua, mapping, xval, target))


def pair_sides(new_counters, b: FeatureState, ns: NewSide, whole: bool) -> tuple:
    """The second half of a feature's comparison: ``(new FeatureState, old FeatureState,
    (new_kept, new_all, old_kept, old_all))`` on the cells both hold; ``b`` the old rows'
    sums, or all the rows' (``whole``: the new rows' taken off), read once."""
    target, mapping, xval, tn = ns.target, ns.mapping, ns.xval, ns.table
    tb = _side(b, _to_union(b, ns.union), mapping, xval, target)
    K = target.n_keys
    cn, cb = _cells(tn, K), _cells(tb, K)
    both, i_n, i_b = np.intersect1d(cn, cb, assume_unique=True, return_indices=True)
    if whole:  # old = whole - new, on the new rows' cells (the others are the old rows' alone)
        vals = tb.values[i_b] - tn.values[i_n]
        keep = vals[:, 0] > 0.5  # counts are whole numbers: a cell the new rows alone fill is dropped
        old_rows = float(tb.values[:, 0].sum() - tn.values[:, 0].sum())
        tb = Table(tb.leaf[i_b][keep], tb.key[i_b][keep], vals[keep])
        i_n = i_n[keep]
        counters_old = tuple(int(x) - int(y) for x, y in zip(b.counters, new_counters))
    else:
        old_rows = float(tb.values[:, 0].sum())
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
        ns = new_side(a, b, new.dtypes.get(f) if new.dtypes.get(f) is not None else base.dtypes.get(f),
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
# on the workers: a feature's comparison read and finished where the old sums are


def on_disk(st: FeatureState) -> FeatureState | None:
    """``st`` as a light copy that reads its runs' saved files (sent to a worker: only
    their paths travel), or None when a run is in memory."""
    from .state import Run

    if any(r.sources is None for r in st.runs):
        return None
    return FeatureState(st.coder, None, st.counters, runs=[Run(r.coder, None, r.sources) for r in st.runs],
                        kind=st.kind)


def run_dirs(st: FeatureState) -> set:
    """The directories a saved feature's runs read."""
    return {d for r in st.runs for d, _ in (r.sources or ())}


def one_feature(stratification: Stratification, feature: str) -> Stratification:
    """``stratification`` reduced to one feature's tree (the same id): what finishing that
    feature needs."""
    from dataclasses import replace

    return replace(stratification, features=[feature], scans=[stratification.scan_of(feature)],
                   kinds={feature: stratification.kinds.get(feature)}, id=stratification.id)


def pair_task(new_counters, b: FeatureState, ns: NewSide, whole: bool) -> tuple:
    """:func:`pair_sides` on a worker (``b`` read from its saved files there)."""
    limit_worker_threads()
    return pair_sides(new_counters, b, ns, whole)


def finish_task(sides: tuple, which: int, shell: dict, stratification: Stratification, finish_options: FinishOptions | None):
    """One side of a feature's comparison finished on a worker: ``sides`` (from
    :func:`pair_sides`), ``which`` 0 (the new rows) or 1 (the old ones), ``shell`` the
    side's state fields (``stratification_id``, ``target``, ``n_trials``, ``n_rows``,
    ``y_range``, ``n_partitions``, ``dtypes``); the feature's result."""
    limit_worker_threads()
    f = stratification.features[0]
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
