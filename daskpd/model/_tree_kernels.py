"""The compiled walks of the tree-exact engine (:mod:`daskpd.model._flat_trees`), in
scikit-learn's node semantics: ``x <= threshold``, NaN to the node's
``missing_go_to_left`` branch, HistGradientBoosting's categorical bitsets (see
:mod:`daskpd.model._tree_engine`).  One module: the walks call each other's inlined
helpers.
"""
from __future__ import annotations

import numba
import numpy as np

#: rows walked together through one tree by tree-exact's level-by-level walk
LEVEL_BLOCK = 2048
#: ... when the rows carry trial counts: a leaf's group of rows sums its counts into
#: every set's weight, so larger groups (fewer of them) cost less per row (the PD's
#: bands, docs/benchmarks.md); the sums are whole numbers, so the block size leaves
#: their bits as they are
LEVEL_BLOCK_COUNTS = 4096


# ---------------------------------------------------------------------------------
# compiled walks (scikit-learn's node semantics)


@numba.njit(cache=True, nogil=True)
def goes_left(x, nd, thr, mgl, iscat, bsrow, kfrow, rawbits, knownbits):
    """Does value ``x`` take the left branch at node ``nd``? (sklearn's ``_tree.pyx`` and
    HistGradientBoosting's ``_predictor.pyx``)."""
    if np.isnan(x):
        return mgl[nd] != 0
    if iscat[nd] != 0:
        if x < 0:
            return mgl[nd] != 0
        c = np.int64(x) & 255 if x < 2147483648.0 else 0  # (uint8_t)data_val
        if (rawbits[bsrow[nd], c >> 5] >> np.uint32(c & 31)) & np.uint32(1):
            return True
        k = kfrow[nd]
        if k >= 0 and (knownbits[k, c >> 5] >> np.uint32(c & 31)) & np.uint32(1):
            return False
        return mgl[nd] != 0
    return x <= thr[nd]


@numba.njit(cache=True, nogil=True, inline="always")
def _push(h_nd, h_sl, h_a, h_n, k, node, state, start, count):
    """Queue the group of ``count`` rows from ``start`` at ``node`` in walk ``state``
    (nothing when it is empty); returns the next free slot."""
    if count == 0:
        return k
    h_nd[k] = node
    h_sl[k] = state
    h_a[k] = start
    h_n[k] = count
    return k + 1


@numba.njit(cache=True, nogil=True, inline="always")
def _sum_rows(M, cur, a, L, acc):
    """``acc`` = the sum of the rows ``M[cur[r]]``, ``a <= r < a + L`` (in that order)."""
    acc[:] = 0
    for r in range(a, a + L):
        mr = M[cur[r]]
        for s in range(acc.shape[0]):
            acc[s] += mr[s]


#: the even and the odd bytes of a 64-bit word, each in a 16-bit lane
_LANES = np.uint64(0x00FF00FF00FF00FF)
#: trial counts summed as 16-bit lanes of 64-bit words (:func:`count_words`): at most
#: this many trials (four words)
WORD_TRIALS = 32


@numba.njit(cache=True, nogil=True, inline="always")
def _add_lanes(x, even, odd):
    """``even`` + the even bytes of word ``x``, ``odd`` + its odd bytes (16-bit lanes)."""
    return even + (x & _LANES), odd + ((x >> np.uint64(8)) & _LANES)


@numba.njit(cache=True, nogil=True, inline="always")
def _sum_words(C8, cur, a, L, ol):
    """``ol[1 + s] +=`` the rows ``C8[cur[r]]``'s trial-``s`` counts summed over
    ``a <= r < a + L``: every row's counts are 8 a word (:func:`count_words`), the even and
    the odd bytes added as four 16-bit lanes each, in registers (a lane's sum stays
    below 2^16: the caller's bound), then each trial's lane added to ``ol`` -- whole
    numbers, so the sums of :func:`_sum_rows`, to the bit."""
    W = C8.shape[1]
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = np.uint64(0)
    for r in range(a, a + L):
        row = cur[r]
        a0, a1 = _add_lanes(C8[row, 0], a0, a1)
        if W > 1:
            a2, a3 = _add_lanes(C8[row, 1], a2, a3)
        if W > 2:
            a4, a5 = _add_lanes(C8[row, 2], a4, a5)
        if W > 3:
            a6, a7 = _add_lanes(C8[row, 3], a6, a7)
    for s in range(ol.shape[0] - 1):
        q = 2 * (s >> 3) + (s & 1)
        acc = a0 if q == 0 else a1 if q == 1 else a2 if q == 2 else a3 if q == 3 else \
            a4 if q == 4 else a5 if q == 5 else a6 if q == 6 else a7
        ol[s + 1] += float((acc >> np.uint64(16 * ((s & 7) >> 1))) & np.uint64(0xFFFF))


def count_words(C: np.ndarray, block: int) -> np.ndarray:
    """The (rows x trials) uint8 counts ``C`` as (rows x words) uint64, 8 trials a word
    (zero bytes after the last), for :func:`_sum_words`; or an empty array when a sum of
    ``block`` rows' counts could reach 2^16 in a lane, or with more than
    ``WORD_TRIALS`` trials (the walk then sums the bytes one by one)."""
    n, T = C.shape
    if n == 0 or T == 0 or T > WORD_TRIALS or int(C.max()) * block >= 1 << 16:
        return np.zeros((0, 1), np.uint64)
    words = (T + 7) // 8
    padded = np.zeros((n, 8 * words), np.uint8)
    padded[:, :T] = C
    return padded.view(np.uint64)


@numba.njit(cache=True, nogil=True)
def walk_leaf_weights(roots, feat, thr, left, right, mgl, iscat, bsrow, kfrow, rawbits, knownbits, tbit,
                      trans, XT, W, C, unit, block, out, C8):
    """One walk of every row through every tree for every requested PD item at once.

    A walk's state is a *slot*: the set of target features at whose splits the walk took
    the branch the row does not take (``trans[slot, tbit[f]]``: the slot after leaving the
    row's branch at a split on target ``f``, -1 when no item's features hold that set).
    At a leaf the row's weights (one per weight set, ``W[i]``) go to ``out[leaf, slot]``;
    an item's ``W_S`` is then the sum of the slots that are subsets of its features.

    The walk goes level by level over a block of rows and one tree: the rows reaching a
    node in a slot are a *group* (a segment of an index buffer); a split partitions a
    group's rows into its two children without a branch per row, and at a split on a
    target feature the two parts also go to the other child in the next slot (sharing
    their segment).  At a leaf the group's weights are summed (its size, with ``unit``
    weights; with counts ``C`` (rows x trials, uint8; ``W`` empty), set 0's weights are
    1 and set t's are column t - 1 of ``C``: whole numbers, summed exactly, so the same
    sums as their float64 columns; ``C8``, when not empty, the same counts as words,
    :func:`count_words`, summed 8 at a time).  ``XT``: the rows transposed (features x rows)."""
    n = XT.shape[1]
    S = out.shape[2]
    T = C.shape[1]
    counts = C.shape[0] > 0
    words = C8.shape[0] > 0
    acc = np.zeros(S)
    cnt = np.zeros(T, np.int64)
    gcap = 64
    g_nd = np.empty(gcap, np.int64)
    g_sl = np.empty(gcap, np.int64)
    g_a = np.empty(gcap, np.int64)
    g_n = np.empty(gcap, np.int64)
    h_nd = np.empty(gcap, np.int64)
    h_sl = np.empty(gcap, np.int64)
    h_a = np.empty(gcap, np.int64)
    h_n = np.empty(gcap, np.int64)
    icap = 4 * block
    cur = np.empty(icap, np.int32)
    nxt = np.empty(icap, np.int32)
    for b0 in range(0, n, block):
        b1 = min(n, b0 + block)
        for t in range(roots.shape[0]):
            if cur.shape[0] < b1 - b0:
                cur = np.empty(2 * (b1 - b0), np.int32)
            for r in range(b1 - b0):
                cur[r] = b0 + r
            g_nd[0] = roots[t]
            g_sl[0] = 0
            g_a[0] = 0
            g_n[0] = b1 - b0
            ng = 1
            while ng > 0:
                need = 0
                ngn = 0
                for g in range(ng):
                    if feat[g_nd[g]] >= 0:
                        need += g_n[g]
                        ngn += 4
                if nxt.shape[0] < need:
                    nxt = np.empty(2 * need, np.int32)
                if h_nd.shape[0] < ngn:
                    h_nd = np.empty(2 * ngn, np.int64)
                    h_sl = np.empty(2 * ngn, np.int64)
                    h_a = np.empty(2 * ngn, np.int64)
                    h_n = np.empty(2 * ngn, np.int64)
                p = 0
                k = 0
                for g in range(ng):
                    nd = g_nd[g]
                    sl = g_sl[g]
                    a = g_a[g]
                    L = g_n[g]
                    f = feat[nd]
                    if f < 0:
                        if unit:
                            out[nd, sl, 0] += L
                        elif words:
                            ol = out[nd, sl]
                            ol[0] += L
                            _sum_words(C8, cur, a, L, ol)
                        elif counts:
                            _sum_rows(C, cur, a, L, cnt)
                            ol = out[nd, sl]
                            ol[0] += L
                            for s in range(T):
                                ol[s + 1] += cnt[s]
                        else:
                            _sum_rows(W, cur, a, L, acc)
                            ol = out[nd, sl]
                            for s in range(S):
                                ol[s] += acc[s]
                        continue
                    lo = p
                    hi = p + L - 1
                    if iscat[nd] == 0:
                        th = thr[nd]
                        mg = mgl[nd] != 0
                        for r in range(a, a + L):
                            i = cur[r]
                            x = XT[f, i]
                            gl = (x <= th) | (mg & (x != x))
                            nxt[lo] = i
                            nxt[hi] = i
                            lo += gl
                            hi -= 1 - gl
                    else:
                        for r in range(a, a + L):
                            i = cur[r]
                            gl = goes_left(XT[f, i], nd, thr, mgl, iscat, bsrow, kfrow, rawbits, knownbits)
                            nxt[lo] = i
                            nxt[hi] = i
                            lo += gl
                            hi -= 1 - gl
                    nl = lo - p
                    k = _push(h_nd, h_sl, h_a, h_n, k, left[nd], sl, p, nl)
                    k = _push(h_nd, h_sl, h_a, h_n, k, right[nd], sl, p + nl, L - nl)
                    b = tbit[f]
                    if b >= 0:
                        ns = trans[sl, b]
                        if ns >= 0:  # the other branch too, in the state that disagrees on f
                            k = _push(h_nd, h_sl, h_a, h_n, k, right[nd], ns, p, nl)
                            k = _push(h_nd, h_sl, h_a, h_n, k, left[nd], ns, p + nl, L - nl)
                    p += L
                cur, nxt = nxt, cur
                g_nd, h_nd = h_nd, g_nd
                g_sl, h_sl = h_sl, g_sl
                g_a, h_a = h_a, g_a
                g_n, h_n = h_n, g_n
                ng = k


@numba.njit(cache=True, nogil=True)
def walk_cell_sums(roots, feat, thr, left, right, mgl, iscat, bsrow, kfrow, rawbits, knownbits, s_pos, value,
                   W, cells, stack, out):
    S = W.shape[1]
    acc = np.zeros(S)
    for c in range(cells.shape[0]):
        acc[:] = 0.0
        for t in range(roots.shape[0]):
            stack[0] = roots[t]
            top = 1
            while top > 0:
                top -= 1
                nd = stack[top]
                while True:
                    f = feat[nd]
                    if f < 0:
                        v = value[nd]
                        for s in range(S):
                            acc[s] += v * W[nd, s]
                        break
                    d = s_pos[f]
                    if d < 0:
                        stack[top] = right[nd]
                        top += 1
                        nd = left[nd]
                    elif goes_left(cells[c, d], nd, thr, mgl, iscat, bsrow, kfrow, rawbits, knownbits):
                        nd = left[nd]
                    else:
                        nd = right[nd]
        for s in range(S):
            out[c, s] = acc[s]

