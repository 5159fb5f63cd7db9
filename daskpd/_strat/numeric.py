"""StratPD's finish, the buckets' side: slopes within leaves, summed per position.

From a feature's merged per-(leaf, key) sums (Parr & Wilson 2021, algorithm StratPD):

1. In each leaf, mean y per position (ybar = sum y / n); forward differences between the
   leaf's adjacent positions are slope segments over [x_i, x_{i+1}).  A leaf holding a
   single position carries no slope; its rows are counted as ignored.
2. The mean slope at every position is a sweep: ``+slope`` where a segment starts,
   ``-slope`` where it ends, cumulative sums of slopes and of segment counts -- never a
   positions x segments matrix.  This is additive over leaves, so each bucket of leaves
   turns its own segments into per-position sums (:func:`bucket_sums`) and the buckets'
   sums are added (:func:`fold_slope_sums`).  A binned feature's segments are weighted:
   a leaf's segment from bin a to bin b weighs ``w = min(1, (its mean x in b - its mean
   x in a) / (anchor[b] - anchor[a]))`` (:func:`bin_anchors`: the middle of a bin's
   edges), and the mean slope is ``sum w * slope / sum w`` (counts stay counts).  A
   leaf's rows near the common edge of two bins make its x gap arbitrarily small and its
   slope's variance infinite; weighted, it adds ``w * slope = dy / (anchor gap)``,
   bounded.  ``w`` depends on x only, so unbiased slopes stay unbiased.  Exact features
   keep the plain mean (their leaves' positions are the curve's: ``w`` would be 1).
3. The sweep, the integral and the result: :mod:`daskpd._strat.numeric_curve`.

Float sums over leaves are made per virtual bucket (a fixed group of consecutive
leaves) and added in virtual-bucket order, so the curve does not depend on how many
buckets the reduction used.
"""
from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
from dask.sizeof import sizeof

from .._engine.hashing import keyed_hash
from .._engine.group_sets import chunk_sets, group_inputs, whole_range
from .._engine.sums import Table, reduce_tables
from .._engine.tree_fold import TreeNodes, fold_tree, tree_nodes
from .bandunits import terms_table
from .leafboot import table_leaf_weights
from .virtual import N_VIRTUAL, virtual_of

__all__ = ["bin_anchors", "bucket_sums", "fold_slope_sums", "BucketSums"]


@dataclass
class BucketSums:
    """One bucket's contribution to a numeric curve (arrays over the feature's codes;
    float sums as per-virtual-bucket tables, in virtual-bucket order)."""

    count: np.ndarray  # (sets, P) rows (or trial weight) per position
    starts: np.ndarray  # (sets, P) segments starting at each position
    ends: np.ndarray  # (sets, P) segments ending at each position
    ignored: np.ndarray  # (sets,) rows in single-position leaves
    n_leaves: int  # leaves with rows
    # (leaf=virtual bucket, key=start code, values=set 0's sum of slopes; ``weighted``: its
    # sums of w * slope and of w, two columns)
    add: Table
    sub: Table  # (..., key=end code, ...)
    sum_x: list | None  # [set 0's Table(..., key=code, values=sum of x)], binned features only
    segments: tuple  # a bottom-k sample of set 0's segments: (hash, start code, end code, slope)
    counters: tuple | None  # (rows read, missing x, bad y) in bucket 0
    # the trials' sums of slopes (a column per trial; ``weighted``: the trials' sums of
    # w * slope, then of w), folded over the virtual buckets by the fixed tree of
    # TreeNodes (None without trials)
    add_trials: TreeNodes | None = None
    sub_trials: TreeNodes | None = None
    n_slope_leaves: int = 0  # leaves with >= 2 positions: the independent units of the trials
    # per (virtual bucket, code) the terms of the band's effective units (None without trials;
    # :mod:`daskpd._strat.bandunits`)
    units: Table | None = None
    # a binned feature's segments weighted by their x gaps (:func:`bin_anchors`)
    weighted: bool = False

    @property
    def nbytes(self) -> int:
        tabs = [self.add, self.sub, *(self.sum_x or []), *(t for t in (self.add_trials, self.sub_trials) if t),
                *([self.units] if self.units is not None else [])]
        return int(self.count.nbytes * 3 + sum(t.nbytes for t in tabs))


def bin_anchors(coder) -> np.ndarray | None:
    """A binned feature's fixed place per code, against which a leaf's x gap weighs
    its slope (:func:`_segments`): the middle of the bin's edges; an end bin open to
    -inf / +inf is as wide as its neighbour.  None (segments unweighted) when the
    feature is exact, or binned with no bin of finite width."""
    if coder is None or not coder.binned:
        return None
    e = np.asarray(coder.edges, dtype="float64")
    width = np.diff(e)
    finite = np.isfinite(width)
    if not finite.any():
        return None
    if not finite[0]:
        width[0] = width[1] if len(width) > 1 and finite[1] else np.nan
    if not finite[-1]:
        width[-1] = width[-2] if len(width) > 1 and finite[-2] else np.nan
    if not np.isfinite(width).all():
        return None
    return np.where(np.isfinite(e[:-1]), e[:-1] + width / 2, e[1:] - width / 2)


def _vsum(vb, code, values, n_codes: int) -> Table:
    """Sums of ``values`` per (virtual bucket, code), in input order."""
    t = Table(vb.astype(np.int32), np.asarray(code, dtype=np.int64), np.asarray(values, dtype="float64")[:, None],
              grouped=False)
    return reduce_tables([t], n_codes)


def _segment_sample(leaf, start, end, slope, k: int, random_state: int):
    """The ``k`` segments with the smallest keyed hashes of (leaf, start): a sample that
    does not depend on how leaves are cut into buckets (the bottom k of the union of
    the buckets' bottom k)."""
    if k <= 0 or len(slope) == 0:
        return (np.zeros(0, np.uint64), start[:0], end[:0], slope[:0])
    h = keyed_hash((leaf.astype(np.uint64) << np.uint64(32)) | start.astype(np.uint64), random_state, salt=0xF00D)
    if len(h) > k:
        # most hashes are far above the k-th smallest: select among a few candidates
        cut = np.uint64(min(2 ** 64 - 1, int(2 ** 64 * 8 * k / len(h))))
        cand = np.flatnonzero(h < cut)
        if len(cand) < k:
            cand = np.arange(len(h))
        keep = np.sort(cand[np.argpartition(h[cand], k - 1)[:k]])
        return h[keep], start[keep], end[keep], slope[keep]
    return h, start, end, slope


@numba.njit(cache=True, nogil=True)
def _flush(acc, touched, codes, nt, vb, out_v, out_c, out_x, n_out):
    """The current virtual bucket's touched (code, every set) sums of ``acc`` (sets x
    codes) appended to the output table in code order; the scratch zeroed.  Returns the
    new output length."""
    keys = np.sort(codes[:nt])
    S = acc.shape[0]
    for j in range(nt):
        c = keys[j]
        out_v[n_out] = vb
        out_c[n_out] = c
        for s in range(S):
            out_x[n_out, s] = acc[s, c]
            acc[s, c] = 0.0
        touched[c] = False
        n_out += 1
    return n_out


#: :func:`_segments` makes every set's sums of this many groups, then walks them set by set
CHUNK = 128


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _segments(leaf, code, vb, vals, gw, k, binned, xvals, P, S, shift, anchors, weighted):
    """One pass over a bucket's (leaf, code) groups, sorted: the leaves' slope segments
    between adjacent present positions, and every trial's (leaf bootstrap: a leaf drawn
    ``w`` times counts ``w`` times) from the same segments.  Returns, as (sets, P)
    arrays, per code the rows and the segments starting and ending there (set t: each
    weighted by its leaf's weight ``gw``); per set the rows in single-position leaves;
    the leaves with rows; the per-(virtual bucket, code) sums of the slopes of segments
    starting (``add``) and ending (``sub``) there, every set a column, in (virtual
    bucket, code) order, each cell's terms in group order; the segments (start, end,
    slope, leaf); and the sum of x per group (binned features).  ``shift``: the bits of
    the packed counts' rows (:func:`_count_bits`).

    ``weighted`` (a binned feature, :func:`bin_anchors`): a segment between codes a < b
    weighs ``w = min(1, (its leaf's x gap) / (anchors[b] - anchors[a]))``; the slope sums
    are then of ``w * slope`` and ``add`` / ``sub`` carry ``2 * sets`` columns, the
    sets' sums of ``w * slope`` then the sets' sums of ``w`` (the counts stay counts).

    The groups are read a chunk at a time (:data:`CHUNK` groups, never across a virtual
    bucket, :func:`~daskpd._engine.group_sets.chunk_sets`)."""
    G = leaf.shape[0]
    T = S - 1
    # per code one word a group: its rows (whole numbers, below bit ``shift``) and its
    # present groups (above); starts = present groups - the leaf's last, ends = present
    # groups - the leaf's first
    unit = np.int64(1) << np.int64(shift)
    packed = np.zeros(P, np.int64)
    firsts = np.zeros(P, np.int64)
    lasts = np.zeros(P, np.int64)
    tcount = np.zeros((S, P))
    tstarts = np.zeros((S, P))
    tends = np.zeros((S, P))
    ignored = np.zeros(S)
    n_leaves = 0
    n_multi = 0  # leaves with >= 2 positions (a slope)
    has_prev = False
    pcode = np.int64(0)
    pyb = 0.0
    px = 0.0
    run_rows = 0.0
    run_len = 0
    pleaf = np.int64(-1)
    pg = 0  # the previous present group (its leaf's weights)
    cn = np.empty((CHUNK, 1))
    cy = np.empty((CHUNK, 1))
    cx = np.empty((CHUNK, 1))
    # per virtual bucket scratch of the slope sums (weighted: then of the weights),
    # flushed when the virtual bucket changes
    SW = 2 * S if weighted else S
    acc_a = np.zeros((SW, P))
    acc_s = np.zeros((SW, P))
    t_a = np.zeros(P, np.bool_)
    t_s = np.zeros(P, np.bool_)
    c_a = np.empty(P, np.int64)
    c_s = np.empty(P, np.int64)
    na = 0
    ns = 0
    add_v = np.empty(G, np.int32)
    add_c = np.empty(G, np.int64)
    add_x = np.empty((G, SW))
    sub_v = np.empty(G, np.int32)
    sub_c = np.empty(G, np.int64)
    sub_x = np.empty((G, SW))
    n_add = 0
    n_sub = 0
    seg_a = np.empty(G, np.int64)
    seg_b = np.empty(G, np.int64)
    seg_s = np.empty(G)
    seg_l = np.empty(G, np.int64)
    k0 = 0
    sx0 = np.zeros(G if binned else 0)
    cur_vb = -1
    g0 = 0
    while g0 < G:
        v = vb[g0]
        g1 = g0 + 1
        while g1 < G and g1 - g0 < CHUNK and vb[g1] == v:
            g1 += 1
        if v != cur_vb:
            if cur_vb >= 0:
                n_add = _flush(acc_a, t_a, c_a, na, cur_vb, add_v, add_c, add_x, n_add)
                n_sub = _flush(acc_s, t_s, c_s, ns, cur_vb, sub_v, sub_c, sub_x, n_sub)
                na = 0
                ns = 0
            cur_vb = v
        m = g1 - g0
        chunk_sets(g0, m, vals, gw, binned, cn, cy, cx)
        for j in range(m):
            g = g0 + j
            n = cn[j, 0]
            if not n > 0.0:
                continue
            if binned:
                sx0[g] = cx[j, 0]
            lf = leaf[g]
            if lf != pleaf:  # the first group of a leaf
                if run_len == 1:
                    ignored[0] += run_rows
                    for t in range(T):
                        ignored[1 + t] += gw[pg, t] * run_rows
                if run_len > 0:
                    lasts[pcode] += 1
                run_len = 0
                run_rows = 0.0
                has_prev = False
                pleaf = lf
                n_leaves += 1
            c = code[g]
            packed[c] += np.int64(n) + unit
            for t in range(T):
                tcount[1 + t, c] += gw[g, t] * n
            yb = cy[j, 0] / n
            xx = cx[j, 0] / n if binned else xvals[c]
            if has_prev:
                if run_len == 1:
                    n_multi += 1
                slope = (yb - pyb) / (xx - px)
                if weighted:
                    wseg = min(1.0, (xx - px) / (anchors[c] - anchors[pcode]))
                    ws = wseg * slope
                    acc_a[0, pcode] += ws
                    acc_s[0, c] += ws
                    acc_a[S, pcode] += wseg
                    acc_s[S, c] += wseg
                    for t in range(T):
                        w = float(gw[g, t])
                        acc_a[1 + t, pcode] += w * ws
                        acc_s[1 + t, c] += w * ws
                        acc_a[S + 1 + t, pcode] += w * wseg
                        acc_s[S + 1 + t, c] += w * wseg
                        tstarts[1 + t, pcode] += w
                        tends[1 + t, c] += w
                else:
                    acc_a[0, pcode] += slope
                    acc_s[0, c] += slope
                    for t in range(T):
                        w = float(gw[g, t])
                        acc_a[1 + t, pcode] += w * slope
                        acc_s[1 + t, c] += w * slope
                        tstarts[1 + t, pcode] += w
                        tends[1 + t, c] += w
                if not t_a[pcode]:
                    t_a[pcode] = True
                    c_a[na] = pcode
                    na += 1
                if not t_s[c]:
                    t_s[c] = True
                    c_s[ns] = c
                    ns += 1
                seg_a[k0] = pcode
                seg_b[k0] = c
                seg_s[k0] = slope
                seg_l[k0] = lf
                k0 += 1
            else:
                firsts[c] += 1
            run_rows += n
            run_len += 1
            has_prev = True
            pcode = c
            pyb = yb
            px = xx
            pg = g
        g0 = g1
    if run_len == 1:
        ignored[0] += run_rows
        for t in range(T):
            ignored[1 + t] += gw[pg, t] * run_rows
    if run_len > 0:
        lasts[pcode] += 1
    present = packed >> np.int64(shift)
    tcount[0] = (packed & (unit - 1)).astype(np.float64)
    tstarts[0] = (present - lasts).astype(np.float64)
    tends[0] = (present - firsts).astype(np.float64)
    if cur_vb >= 0:
        n_add = _flush(acc_a, t_a, c_a, na, cur_vb, add_v, add_c, add_x, n_add)
        n_sub = _flush(acc_s, t_s, c_s, ns, cur_vb, sub_v, sub_c, sub_x, n_sub)
    return (tcount, tstarts, tends, ignored, n_leaves, n_multi, add_v[:n_add].copy(), add_c[:n_add].copy(),
            add_x[:n_add].copy(), sub_v[:n_sub].copy(), sub_c[:n_sub].copy(), sub_x[:n_sub].copy(),
            seg_a[:k0], seg_b[:k0], seg_s[:k0], seg_l[:k0], sx0)


def _count_bits(table, k: int, leaf: np.ndarray) -> int:
    """The bits :func:`_segments` gives a position's rows in its packed word, the rest
    counting its present groups (at most one a leaf): enough for the bucket's rows (the
    merged table's sum of counts, which must be whole numbers)."""
    if len(table):
        n = np.ascontiguousarray(table.values[:, 0])
        if not whole_range(n)[0]:
            raise ValueError("StratPD's per-(leaf, position) counts must be whole numbers >= 0")
        total = int(n.sum())
    else:
        total = 0
    leaves = 1 + int(np.count_nonzero(leaf[1:] != leaf[:-1])) if len(leaf) else 0
    shift = max(1, total.bit_length())
    if shift + (leaves + 1).bit_length() > 63:
        raise ValueError(f"a bucket of {leaves:,} leaves and {total:,} rows is too large for StratPD's finish "
                         "(64-bit counts); use more buckets (dask config daskpd.buckets)")
    return shift


def bucket_sums(table: Table, fs, n_sets: int, *, counters=None, random_state: int = 0,
                n_segments: int = 500, span=None) -> BucketSums:
    """A bucket's merged (leaf, code) sums of one numeric feature -> :class:`BucketSums`:
    one pass for every set (:func:`_segments`; the trials a bootstrap of the leaves,
    :mod:`daskpd._strat.leafboot`).  ``span``: the bucket's virtual buckets ``(lo, hi,
    shared_lo, shared_hi)`` (:func:`daskpd._engine.tree_fold.tree_nodes`; None: every one,
    none shared)."""
    P = fs.coder.n_keys
    k = fs.stats_per_set
    leaf = table.leaf.astype(np.int64)
    code = np.asarray(table.key, dtype=np.int64)
    vb = virtual_of(leaf, fs.n_leaves)
    xvals = np.zeros(1) if fs.binned else np.asarray(fs.coder.values, dtype="float64")
    anchors = bin_anchors(fs.coder)
    weighted = anchors is not None
    T = int(n_sets) - 1
    S = int(n_sets)
    vals, gw = group_inputs(table, k, table_leaf_weights(table, fs.feature, T, random_state), T)
    (count, starts, ends, ignored, n_leaves, n_multi, av, ac, ax, sv, sc, sx_, sa, sb, ss, sl, sx0) = _segments(
        leaf, code, vb, vals, gw, k, bool(fs.binned), xvals, P, S, _count_bits(table, k, leaf),
        anchors if weighted else np.zeros(1), weighted)
    # the positions are set 0's (every trial is read at them)
    sum_x = [_vsum(vb, code, sx0, P)] if fs.binned else None
    segments = _segment_sample(sl, sa, sb, ss, n_segments, random_state)
    add_t = sub_t = units = None
    if n_sets > 1:
        units = terms_table(table, vb, P)
    if n_sets > 1:  # set 0 per virtual bucket (folded in their order: the bits of one set); the trials by the tree
        lo, hi, shared_lo, shared_hi = span if span is not None else (0, N_VIRTUAL, False, False)
        trial_cols = np.r_[1:S, S + 1:2 * S] if weighted else slice(1, None)
        add_t = tree_nodes(av, ac, ax[:, trial_cols], lo, hi, N_VIRTUAL, shared_lo, shared_hi)
        sub_t = tree_nodes(sv, sc, sx_[:, trial_cols], lo, hi, N_VIRTUAL, shared_lo, shared_hi)
    set0 = [0, S] if weighted else slice(0, 1)
    ax, sx_ = np.ascontiguousarray(ax[:, set0]), np.ascontiguousarray(sx_[:, set0])
    return BucketSums(count, starts, ends,
                      ignored, int(n_leaves), Table(av, ac, ax), Table(sv, sc, sx_), sum_x, segments, counters,
                      add_t, sub_t, int(n_multi), units, weighted)


@numba.njit(cache=True, nogil=True)
def _fold_sets(out, key, values):
    for i in range(key.shape[0]):
        c = key[i]
        for s in range(values.shape[1]):
            out[c, s] += values[i, s]


def _fold_all(tables: list, P: int, S: int) -> np.ndarray:
    """(sets, P): the per-code sums (``numeric_curve._fold``) of every set's column of
    the tables at once (the same additions in the same order)."""
    out = np.zeros((P, S))
    for t in tables:
        if len(t):
            _fold_sets(out, np.asarray(t.key, np.int64), np.ascontiguousarray(t.values))
    return np.ascontiguousarray(out.T)


def fold_slope_sums(sums: list, P: int, n_sets: int) -> tuple:
    """``(add, sub, wadd, wsub)``, each (sets, P): the buckets' sums of slopes per code
    (weighted buckets: of w * slope) and, weighted, of the segments' weights (else
    None), set 0's folded in virtual-bucket order, the trials' by the fixed tree
    (:func:`fold_tree`)."""
    weighted = any(b.weighted for b in sums)
    if weighted and not all(b.weighted for b in sums):
        raise ValueError("StratPD's finish was given weighted and unweighted bucket sums of one feature")
    m = 2 if weighted else 1
    out = []
    for attr in ("add", "sub"):
        a = _fold_all([getattr(b, attr) for b in sums], P, m)  # (m, P): set 0's slopes (and weights)
        parts = [a[:1], a[1:]]
        if n_sets > 1:
            trials = fold_tree([getattr(b, attr + "_trials") for b in sums], P, m * (n_sets - 1), N_VIRTUAL).T
            T = n_sets - 1
            parts = [np.vstack([a[:1], trials[:T]]), np.vstack([a[1:], trials[T:]])]
        out.append(parts)
    (add, wadd), (sub, wsub) = out
    return (add, sub, wadd, wsub) if weighted else (add, sub, None, None)


# dask's memory manager counts these by their arrays (spilling decisions need it)
sizeof.register(BucketSums)(lambda o: o.nbytes)
