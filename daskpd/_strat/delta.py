"""StratPD's finish updated by the cells appended rows change (incremental runs).

A StratPD curve is a function of per-position aggregates of a feature's (leaf, position)
sums (:mod:`daskpd._strat.numeric`): per statistics set (the curve's, and each trial's:
the same segments, each weighted by its leaf's bootstrap weight) the rows, the segments
starting and ending at each position and the sums of their slopes, plus ``sum x`` per
position (binned features), the rows in single-position leaves, the leaves with rows
and a bottom-k sample of the segments keyed by a hash of (leaf, start).  A
:class:`NumericSummary` keeps them, with each leaf's present cells and rows (which give
the ignored rows and the leaf counts), ``sets x positions + leaves`` numbers.

Rows appended to the data add sums to some cells (new or present ones).  A segment
changes only when one of its ends is such a cell or such a cell appears inside it, so
for every touched cell the neighbours of its window -- the previous and next present
cells of its leaf in the old sums -- are looked up (binary search in the sorted runs of
the old state, which may be memory-mapped: only the pages of those cells are read), the
window's old segments are taken off the aggregates and its new segments (old + new
sums) are put on (:func:`apply_delta`), in every trial with their leaf's weight.  The curve is then the same sweep and integral
(:func:`daskpd._strat.numeric_curve.curve_from_sums`, given the summary as one bucket).  The
result equals a full finish of the merged sums up to rounding (float sums added in
another order).  The segment sample (a display sample, set 0's segments with the k
smallest hashes of (leaf, start code)) is the same too, except after an exact feature's
vocabulary grew: its codes, hence every hash, change, and the sample is then the bottom
k of the old sample rehashed (a segment's leaf is read back from its hash, a bijection)
and the new segments -- a sample of the same kind, not the one a full finish draws.
"""
from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from .._engine.hashing import keyed_hash
from .._engine.sums import Table
from .._engine.tree_fold import TreeNodes
from .bandunits import fold_terms, leaf_terms
from .delta_lookup import add_diff, gather_exact, is_sorted, member, merge_cells, neighbours, run_ranks, window_segments
from .leafboot import weights_of_leaves
from .numeric import BucketSums, bin_anchors, bucket_sums, fold_slope_sums
from .virtual import N_VIRTUAL

__all__ = ["NumericSummary", "numeric_summary", "summary_from_buckets", "apply_delta", "summary_bucket",
           "leaf_stats", "bucket_leaf_stats", "gather_leaf_stats"]


@dataclass
class NumericSummary:
    """The finish aggregates of one numeric feature (see the module docstring); arrays
    over the codes of the feature's positions (``P``) and its tree's leaves (``L``)."""

    n_segments: int
    random_state: int
    count: np.ndarray  # (sets, P)
    starts: np.ndarray  # (sets, P)
    ends: np.ndarray  # (sets, P)
    add: np.ndarray  # (sets, P) sums of the slopes of segments starting at a position (weighted: of w * slope)
    sub: np.ndarray  # (sets, P) ... ending there
    sum_x: np.ndarray | None  # (P,) the sum of x (binned features)
    leaf_cells: np.ndarray  # (L,) present cells per leaf
    leaf_rows: np.ndarray  # (L,) rows per leaf
    segments: tuple  # (hash, start code, end code, slope), the bottom k
    # (4, P) with trials: the terms of the band's effective units per code (daskpd._strat.bandunits)
    units: np.ndarray | None = None
    # (sets, P) a binned feature's sums of the segments' weights (numeric.bin_anchors), starting
    # and ending at a position (None: unweighted segments)
    wadd: np.ndarray | None = None
    wsub: np.ndarray | None = None

    @property
    def n_sets(self) -> int:
        return int(self.count.shape[0])

    @property
    def nbytes(self) -> int:
        arrs = [self.count, self.starts, self.ends, self.add, self.sub, self.leaf_cells, self.leaf_rows,
                *self.segments, *([] if self.sum_x is None else [self.sum_x]),
                *([] if self.units is None else [self.units]),
                *([] if self.wadd is None else [self.wadd, self.wsub])]
        return int(sum(a.nbytes for a in arrs))

    def arrays(self) -> dict:
        out = {k: getattr(self, k) for k in ("count", "starts", "ends", "add", "sub", "leaf_cells", "leaf_rows")}
        if self.sum_x is not None:
            out["sum_x"] = self.sum_x
        if self.units is not None:
            out["units"] = self.units
        if self.wadd is not None:
            out["wadd"], out["wsub"] = self.wadd, self.wsub
        out.update({f"seg{j}": a for j, a in enumerate(self.segments)})
        out["meta"] = np.array([self.n_segments, self.random_state], dtype=np.int64)
        return out

    @classmethod
    def from_arrays(cls, a) -> "NumericSummary":
        meta = a["meta"]
        return cls(int(meta[0]), int(meta[1]), a["count"], a["starts"], a["ends"], a["add"], a["sub"],
                   a["sum_x"] if "sum_x" in a else None, a["leaf_cells"], a["leaf_rows"],
                   tuple(a[f"seg{j}"] for j in range(4)), a["units"] if "units" in a else None,
                   a["wadd"] if "wadd" in a else None, a["wsub"] if "wsub" in a else None)

    def recode(self, mapping: np.ndarray | None, n_keys: int) -> "NumericSummary":
        """The summary over a superset vocabulary (``mapping``: old code -> new code,
        increasing; None: the same codes)."""
        if mapping is None:
            return self

        def grow(a):
            out = np.zeros(a.shape[:-1] + (n_keys,), dtype=a.dtype)
            out[..., mapping] = a
            return out

        h, a, b, s = self.segments
        seg = (_seg_hash(_seg_leaf(h, self.random_state), mapping[a], self.random_state), mapping[a], mapping[b], s)
        return NumericSummary(self.n_segments, self.random_state, grow(self.count), grow(self.starts),
                              grow(self.ends), grow(self.add), grow(self.sub),
                              None if self.sum_x is None else grow(self.sum_x), self.leaf_cells, self.leaf_rows,
                              seg, None if self.units is None else grow(self.units),
                              None if self.wadd is None else grow(self.wadd),
                              None if self.wsub is None else grow(self.wsub))


def _seg_hash(leaf, start, random_state):
    """The hash of numeric._segment_sample, keyed by (leaf, start code):
    ``keyed_hash((leaf << 32) | start, random_state, salt=0xF00D)``, the same bits, in
    one compiled loop (no temporaries)."""
    leaf, start = np.asarray(leaf), np.asarray(start)
    if leaf.ndim != 1 or len(leaf) < 64:
        return keyed_hash((leaf.astype(np.uint64) << np.uint64(32)) | start.astype(np.uint64),
                          random_state, salt=0xF00D)
    seed = keyed_hash(np.zeros(1, np.uint64), random_state, salt=0xF00D)  # mix64(0 + s): gives s back below
    return _seg_hash_kernel(leaf.astype(np.int64, copy=False), start.astype(np.int64, copy=False),
                            _unmix64(seed)[0])


@numba.njit(cache=True, nogil=True)
def _seg_hash_kernel(leaf, start, seed):
    """splitmix64's finaliser of ``((leaf << 32) | start) + seed`` (hashing._mix64)."""
    out = np.empty(leaf.shape[0], np.uint64)
    c1, c2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
    s30, s27, s31, s32 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(32)
    for i in range(leaf.shape[0]):
        z = ((np.uint64(leaf[i]) << s32) | np.uint64(start[i])) + seed
        z = (z ^ (z >> s30)) * c1
        z = (z ^ (z >> s27)) * c2
        out[i] = z ^ (z >> s31)
    return out


def _unmix64(z: np.ndarray) -> np.ndarray:
    """The inverse of splitmix64's finaliser (``hashing._mix64``)."""
    z = z.astype("uint64", copy=True)
    with np.errstate(over="ignore"):
        for mult, shift in ((0x94D049BB133111EB, 31), (0xBF58476D1CE4E5B9, 27), (None, 30)):
            y = z.copy()  # x ^= x >> shift, undone
            for _ in range(64 // shift + 1):
                y = z ^ (y >> np.uint64(shift))
            z = y
            if mult is not None:
                z *= np.uint64(pow(mult, -1, 2 ** 64))
    return z


def _seg_leaf(h: np.ndarray, random_state: int) -> np.ndarray:
    """The leaf of a sampled segment from its hash (the hash is a bijection of (leaf, start))."""
    seed = _unmix64(keyed_hash(np.zeros(1, np.uint64), random_state, salt=0xF00D))[0]
    with np.errstate(over="ignore"):
        return ((_unmix64(np.asarray(h, np.uint64)) - seed) >> np.uint64(32)).astype(np.int64)


def _bottom_k(seg, k: int):
    if len(seg[0]) > k:
        keep = np.sort(np.argpartition(seg[0], k - 1)[:k]) if k > 0 else np.zeros(0, np.int64)
        seg = tuple(a[keep] for a in seg)
    return seg


def _leaf_stats(table: Table, n_leaves: int):
    leaf = np.asarray(table.leaf, dtype=np.int64)
    n = table.values[:, 0]
    return np.bincount(leaf[n > 0], minlength=n_leaves).astype(np.int64), np.bincount(leaf, weights=n,
                                                                                      minlength=n_leaves)


def summary_from_buckets(sums: list, table_stats, fs, n_sets: int, random_state: int,
                         n_segments: int) -> NumericSummary:
    """The summary of a feature from its buckets' :class:`BucketSums` (in bucket order)
    and the per-leaf ``(cells, rows)`` (:func:`leaf_stats`): the aggregates
    :func:`curve_from_sums` folds, folded once."""
    P = fs.coder.n_keys

    def fold(tables, s=0):
        tabs = [t for t in tables if len(t)]
        if not tabs:
            return np.zeros(P)
        return np.bincount(np.concatenate([t.key for t in tabs]),
                           weights=np.concatenate([t.values[:, s] for t in tabs]), minlength=P)

    # the slope sums: set 0's per virtual bucket, the trials' as tree nodes (what the curve folds)
    add, sub, wadd, wsub = fold_slope_sums(sums, P, n_sets)
    sum_x = fold([b.sum_x[0] for b in sums]) if fs.binned else None
    seg = _bottom_k(tuple(np.concatenate([b.segments[j] for b in sums]) for j in range(4)), n_segments)
    cells, rows = table_stats
    units = fold_terms([b.units for b in sums], P) if n_sets > 1 and all(b.units is not None for b in sums) else None
    return NumericSummary(int(n_segments), int(random_state), np.sum([b.count for b in sums], axis=0),
                          np.sum([b.starts for b in sums], axis=0), np.sum([b.ends for b in sums], axis=0), add, sub,
                          sum_x, cells, rows, seg, units, wadd, wsub)


def leaf_stats(table: Table, fs):
    """Per leaf: present cells and rows of a feature's merged table."""
    return _leaf_stats(table, fs.n_leaves)


def bucket_leaf_stats(table: Table, fs) -> tuple:
    """``(first leaf, cells, rows)``: :func:`leaf_stats` over the leaves of one bucket's
    table (a run of leaves), for :func:`summary_from_buckets`."""
    if not len(table):
        return 0, np.zeros(0, np.int64), np.zeros(0)
    lo, hi = int(table.leaf[0]), int(table.leaf[-1]) + 1
    t = Table(np.asarray(table.leaf, np.int64) - lo, table.key, table.values)
    cells, rows = _leaf_stats(t, hi - lo)
    return lo, cells, rows


def gather_leaf_stats(parts: list, n_leaves: int) -> tuple:
    """The buckets' :func:`bucket_leaf_stats` as ``(cells, rows)`` over every leaf."""
    cells = np.zeros(n_leaves, np.int64)
    rows = np.zeros(n_leaves)
    for lo, c, r in parts:
        cells[lo:lo + len(c)] += c
        rows[lo:lo + len(r)] += r
    return cells, rows


def numeric_summary(table: Table, fs, n_sets: int, random_state: int, n_segments: int) -> NumericSummary:
    """The summary of a feature's merged (leaf, code) sums (by the finish's own kernel)."""
    b = bucket_sums(table, fs, n_sets, random_state=random_state, n_segments=n_segments)
    return summary_from_buckets([b], leaf_stats(table, fs), fs, n_sets, random_state, n_segments)


def summary_bucket(summary: NumericSummary, counters, feature: str) -> BucketSums:
    """The summary as the one bucket :func:`curve_from_sums` finishes."""
    P = summary.count.shape[1]
    zeros = np.zeros(P, np.int32)
    codes = np.arange(P, dtype=np.int64)

    def tab(a):  # (P,) or (columns, P) -> one virtual bucket's table
        a = np.asarray(a, dtype="float64")
        return Table(zeros, codes, np.ascontiguousarray(a[:, None] if a.ndim == 1 else a.T))

    def trials(a):  # (sets, P) or [(sets, P), ...] -> the trials' sums as the tree's root (None without trials)
        a = np.vstack([np.asarray(x, dtype="float64")[1:] for x in a]) if isinstance(a, list) else \
            np.asarray(a, dtype="float64")[1:]
        return TreeNodes.root(a.T, N_VIRTUAL) if summary.n_sets > 1 else None

    weighted = summary.wadd is not None
    add0 = np.vstack([summary.add[:1], summary.wadd[:1]]) if weighted else summary.add[0]
    sub0 = np.vstack([summary.sub[:1], summary.wsub[:1]]) if weighted else summary.sub[0]
    add_t = [summary.add, summary.wadd] if weighted else summary.add
    sub_t = [summary.sub, summary.wsub] if weighted else summary.sub

    single = np.flatnonzero(summary.leaf_cells == 1)
    ignored = np.zeros(summary.n_sets)
    ignored[0] = summary.leaf_rows[single].sum()
    if summary.n_sets > 1 and len(single):  # a trial's: its leaves' weights times their rows
        w = weights_of_leaves(feature, single, summary.n_sets - 1, summary.random_state)
        ignored[1:] = summary.leaf_rows[single] @ w.astype(np.float64)
    n_leaves = int((summary.leaf_cells > 0).sum())
    return BucketSums(summary.count, summary.starts, summary.ends, ignored, n_leaves,
                      tab(add0), tab(sub0),
                      None if summary.sum_x is None else [tab(summary.sum_x)], summary.segments,
                      tuple(counters) if counters is not None else None, trials(add_t), trials(sub_t),
                      int((summary.leaf_cells >= 2).sum()),
                      None if summary.units is None else Table(zeros, codes, np.ascontiguousarray(summary.units.T)),
                      weighted)


def apply_delta(summary: NumericSummary, runs: list, delta: Table, fs, n_sets: int, *,
                overwrite: bool = False) -> NumericSummary:
    """The summary of the old sums (``runs``: :class:`RunView` s, current codes through
    their ``kmap``; ``summary`` over the current codes) plus ``delta`` (a grouped table
    in the current codes): see the module docstring.  ``overwrite``: the summary's
    per-position arrays are the caller's own copies (:meth:`NumericSummary.recode`'s),
    updated in place."""
    P = fs.coder.n_keys
    binned = bool(fs.binned)
    xv = np.zeros(1) if binned else np.asarray(fs.coder.values, dtype="float64")
    anchors = bin_anchors(fs.coder)
    weighted = anchors is not None
    if weighted != (summary.wadd is not None):
        raise ValueError(f"feature {fs.feature!r}: the finish summary's slope weights do not match the feature's bins "
                         "(a summary saved by another version): merge the sums in full")

    def own(x):
        return x if x is None or overwrite else x.copy()

    count, starts, ends, add, sub = (own(x) for x in (summary.count, summary.starts, summary.ends, summary.add,
                                                      summary.sub))
    wadd, wsub, sum_x, units = (own(x) for x in (summary.wadd, summary.wsub, summary.sum_x, summary.units))
    cells, rows = summary.leaf_cells.copy(), summary.leaf_rows.copy()
    seg = summary.segments
    dleaf = np.asarray(delta.leaf, np.int64)
    dkey = np.asarray(delta.key, np.int64)
    dn_all = delta.values[:, 0]
    t = np.flatnonzero(dn_all > 0)
    # each run (or part of one) holds a range of leaves: only the delta cells in its range
    # are looked up there (a scan's parts hold disjoint ranges); the parts of a run share
    # its code map, and the ranks of the current codes in it (none for the identity)
    ranks = {}
    spans = []
    for r in runs:
        if not len(r):
            continue
        if id(r.kmap) not in ranks:
            nk = len(r.kmap)
            ident = nk == 0 or (int(r.kmap[0]) == 0 and int(r.kmap[nk - 1]) == nk - 1)
            ranks[id(r.kmap)] = (r.kmap, np.zeros(0, np.int64) if ident else run_ranks(r.kmap, P), nk)
        spans.append((r, int(r.leaf[0]), int(r.leaf[len(r) - 1]), *ranks[id(r.kmap)][1:]))
    if len(t):
        ql, qk = dleaf[t], dkey[t]
        prev = np.full(len(t), -1, np.int64)
        nxt = np.full(len(t), np.iinfo(np.int64).max, np.int64)
        for r, lo, hi, rk, nk in spans:
            ta, tb = int(np.searchsorted(ql, lo, "left")), int(np.searchsorted(ql, hi, "right"))
            if tb <= ta:
                continue
            pa, pb = neighbours(r.leaf, r.key, rk, nk, r.kmap, r.column(0), ql[ta:tb], qk[ta:tb])
            prev[ta:tb] = np.maximum(prev[ta:tb], pa)
            nxt[ta:tb] = np.minimum(nxt[ta:tb], np.where(pb < 0, np.iinfo(np.int64).max, pb))
        # the window cells: touched cells and their neighbours, as leaf * P + code, distinct
        # and in order (the three lists are each in order for a grouped delta: merged)
        has_p, has_n = prev >= 0, nxt < np.iinfo(np.int64).max
        qc, pc, nc = ql * P + qk, ql[has_p] * P + prev[has_p], ql[has_n] * P + nxt[has_n]
        if is_sorted(qc) and is_sorted(pc) and is_sorted(nc):
            ck, di = merge_cells(qc, pc, nc)
        else:
            ck = np.sort(np.concatenate([qc, pc, nc]))
            ck = ck[np.concatenate([[True], ck[1:] != ck[:-1]])]  # distinct (np.unique hashes: slower here)
            di = np.searchsorted(ck, qc)
        ul, uc = ck // P, ck % P
        U = len(ck)
        on, osy, osx = np.zeros(U), np.zeros(U), np.zeros(U)
        for r, lo, hi, rk, nk in spans:
            ua, ub = np.searchsorted(ul, [lo, hi + 1])
            if ub > ua:
                ycol = r.column(1)
                gather_exact(r.leaf, r.key, rk, nk, r.column(0), ycol, r.column(2) if binned else ycol, binned,
                              ul[ua:ub], uc[ua:ub], on[ua:ub], osy[ua:ub], osx[ua:ub])
        dn, dsy, dsx = np.zeros(U), np.zeros(U), np.zeros(U)
        dn[di] = dn_all[t]
        dsy[di] = delta.values[t, 1]
        if binned:
            dsx[di] = delta.values[t, 2]
        oa, ob, osl, ol, ow, na, nb, nsl, nl, nw = window_segments(ul, uc, on, osy, osx, dn, dsy, dsx,
                                                           xv if binned else xv[uc], binned,
                                                           anchors[uc] if weighted else np.zeros(1), weighted)
        # what the sums add (the kernel's w * slope) and the display sample's slopes
        osum, nsum = (ow * osl, nw * nsl) if weighted else (osl, nsl)
        # every set: the windows' segments (and the new rows), each with its leaf's weight
        # (1 for the curve; none without trials), added position by position as bincount adds them
        T = n_sets - 1
        if T:
            touched = np.unique(np.concatenate([ql, ol, nl]))
            lw = np.ones((len(touched), 1 + T))
            lw[:, 1:] = weights_of_leaves(fs.feature, touched, T, summary.random_state)
            wq, wo, wn = (lw[np.searchsorted(touched, a)] for a in (ql, ol, nl))
        else:
            wq = wo = wn = np.ones((0, 1))
        acc_a, acc_b = np.zeros(P), np.zeros(P)  # scratch (pages touched only where written)
        no_i, no_v = np.zeros(0, np.int64), np.zeros(0)
        add_diff(count, qk, wq, np.asarray(dn_all[t], np.float64), no_i, wq, no_v, acc_a, acc_b)
        add_diff(starts, na, wn, no_v, oa, wo, no_v, acc_a, acc_b)
        add_diff(ends, nb, wn, no_v, ob, wo, no_v, acc_a, acc_b)
        add_diff(add, na, wn, nsum, oa, wo, osum, acc_a, acc_b)
        add_diff(sub, nb, wn, nsum, ob, wo, osum, acc_a, acc_b)
        if weighted:
            add_diff(wadd, na, wn, nw, oa, wo, ow, acc_a, acc_b)
            add_diff(wsub, nb, wn, nw, ob, wo, ow, acc_a, acc_b)
        L = cells.shape[0]
        cells += np.bincount(ul[(dn > 0) & (on <= 0)], minlength=L)
        rows += np.bincount(ql, weights=dn_all[t], minlength=L)
        if binned:
            add_diff(sum_x[None, :], qk, wq[:0], np.asarray(delta.values[t, 2], np.float64), no_i, wq, no_v,
                      acc_a, acc_b)
        if units is not None:  # the touched leaves' terms, old and new (each a function of its whole leaf)
            units += _touched_terms(runs, dleaf[t], dkey[t], dn_all[t], P)
        if summary.n_segments > 0 and len(na):
            h = _seg_hash(nl, na, summary.random_state)
            # a kept segment a window took off (its start keeps its hash): replaced
            keep = ~member(seg[0], _seg_hash(ol, oa, summary.random_state))
            kept, new = tuple(a[keep] for a in seg), (h, na, nb, nsl)
            k = summary.n_segments
            if len(kept[0]) >= k:  # the new segments that can be among the k smallest hashes (distinct ones)
                pick = np.flatnonzero(h <= np.partition(kept[0], k - 1)[k - 1])
                few = tuple(a[pick] for a in new)
                both = np.concatenate([kept[0], few[0]])
                if len(np.unique(both)) == len(both):
                    new = few
            seg = _bottom_k(tuple(np.concatenate([a, b]) for a, b in zip(kept, new)), k)
    return NumericSummary(summary.n_segments, summary.random_state, count, starts, ends, add, sub, sum_x, cells,
                          rows, seg, units, wadd, wsub)


def _touched_terms(runs: list, dleaf, dkey, dn, P: int) -> np.ndarray:
    """(4, P): the change of the band's effective-unit terms (:mod:`.bandunits`) of the
    leaves the delta cells (``dleaf``, ``dkey``, rows ``dn``) touch: their old cells (read
    from the runs, a leaf's cells consecutive in each) give the old terms, with the delta
    the new ones."""
    touched = np.unique(dleaf)
    ol, oc, on = [], [], []
    for r in runs:
        if not len(r):
            continue
        a = np.searchsorted(r.leaf, touched, "left")
        b = np.searchsorted(r.leaf, touched, "right")
        has = b > a
        if not has.any():
            continue
        idx = np.concatenate([np.arange(i, j) for i, j in zip(a[has], b[has])])
        ol.append(np.asarray(r.leaf[idx], np.int64))
        oc.append(r.kmap[np.asarray(r.key[idx], np.int64)])
        on.append(np.asarray(r.column(0)[idx], np.float64))
    ol, oc, on = (np.concatenate(x) if x else np.zeros(0) for x in (ol, oc, on))
    old = leaf_terms(ol, oc, on, P)
    new = leaf_terms(np.concatenate([ol, dleaf]), np.concatenate([oc, dkey]), np.concatenate([on, dn]), P)
    return new - old
