"""The old sums of an incremental StratPD finish, looked up: a sorted run of a kept
state's (leaf, code) sums (:class:`RunView`, possibly memory-mapped) and the compiled
kernels :func:`daskpd._strat.delta.apply_delta` runs on it -- the neighbours of the
touched cells in their leaves (binary search: only the pages of those cells are read),
the window cells' old sums gathered, the windows' old and new segments
(:func:`window_segments`) and their terms added position by position in the order
``np.bincount`` adds them (:func:`add_diff`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

__all__ = ["RunView", "run_ranks", "neighbours", "gather_exact", "merge_cells", "is_sorted", "add_diff",
           "window_segments", "member"]


@dataclass
class RunView:
    """One sorted run of old (leaf, code) sums, arrays possibly memory-mapped: ``leaf``,
    ``key`` (the run's own codes), ``kmap`` (run code -> current code, increasing) and
    ``column(j)`` (statistic ``j`` of every cell: a view, not a copy)."""

    leaf: np.ndarray
    key: np.ndarray
    kmap: np.ndarray
    column: object  # callable j -> 1-D array

    def __len__(self) -> int:
        return len(self.leaf)


@numba.njit(cache=True, nogil=True)
def run_ranks(kmap, P):
    """Per current code ``c < P``: ``2 r + h``, ``r`` the count of the run's codes whose
    current code is below ``c`` (``kmap`` increasing: the run code a query of code ``c``
    is compared with) and ``h`` 1 when one of them is ``c`` (the run may hold the cell)."""
    out = np.empty(P, np.int64)
    n = kmap.shape[0]
    j = 0
    for c in range(P):
        while j < n and kmap[j] < c:
            j += 1
        out[c] = 2 * j + (1 if j < n and kmap[j] == c else 0)
    return out


@numba.njit(cache=True, nogil=True, inline="always")
def _rank(ranks, n, c):
    """:func:`run_ranks`'s value of code ``c`` (``ranks`` empty: the identity map of ``n`` codes)."""
    if ranks.shape[0]:
        return ranks[c]
    return 2 * min(c, n) + (1 if c < n else 0)


@numba.njit(cache=True, nogil=True, inline="always")
def _before(oleaf, okey, i, a, r):
    """Whether cell ``i`` of the run comes before (leaf ``a``, run code rank ``r``)."""
    lm = np.int64(oleaf[i])
    return lm < a or (lm == a and np.int64(okey[i]) < r)


@numba.njit(cache=True, nogil=True, inline="always")
def _seek(oleaf, okey, lo, a, r):
    """The first cell at or after (leaf ``a``, rank ``r``), at or after cell ``lo``: by
    doubling steps from ``lo`` then halving them."""
    m = oleaf.shape[0]
    if lo < m and _before(oleaf, okey, lo, a, r):
        step = 1
        while lo + step < m and _before(oleaf, okey, lo + step, a, r):
            lo += step
            step *= 2
        hi = min(lo + step, m)  # cell lo comes before the query; cell hi does not (or is the end)
        lo += 1
        while lo < hi:
            mid = (lo + hi) // 2
            if _before(oleaf, okey, mid, a, r):
                lo = mid + 1
            else:
                hi = mid
    return lo


@numba.njit(cache=True, nogil=True)
def _lower_bound(oleaf, okey, ranks, nk, ql, qk):
    """Per query (leaf, current code): the first cell of the run at or after it, and
    the query's rank (:func:`run_ranks`; ``ranks`` empty: the run's ``nk`` codes are the
    current ones).  A query's code is compared with the run's own codes through its
    rank (one look-up a query, none a step).  Queries in order (a grouped table's cells)
    are searched from the previous query's answer, by doubling steps then halving them:
    the pages of the run are read in order, and a dense batch of queries costs about one
    pass over the run instead of a search from the whole range each (a query out of
    order starts from the beginning again)."""
    q = ql.shape[0]
    out = np.empty(q, np.int64)
    rks = np.empty(q, np.int64)
    start = 0
    pa, pr = np.int64(-1), np.int64(-1)
    for t in range(q):
        a = np.int64(ql[t])
        rk = _rank(ranks, nk, np.int64(qk[t]))
        r = rk >> 1
        if a < pa or (a == pa and r < pr):
            start = 0
        pa, pr = a, r
        start = _seek(oleaf, okey, start, a, r)
        out[t] = start
        rks[t] = rk
    return out, rks


@numba.njit(cache=True, nogil=True)
def neighbours(oleaf, okey, ranks, nk, kmap, n, ql, qk):
    """Per query: the code of the previous and of the next present cell (n > 0) of its
    leaf in the run (-1: none)."""
    m = oleaf.shape[0]
    q = ql.shape[0]
    prev = np.full(q, -1, np.int64)
    nxt = np.full(q, -1, np.int64)
    pos, rks = _lower_bound(oleaf, okey, ranks, nk, ql, qk)
    for t in range(q):
        i = pos[t]
        a = np.int64(ql[t])
        j = i - 1
        while j >= 0 and np.int64(oleaf[j]) == a and n[j] <= 0:
            j -= 1
        if j >= 0 and np.int64(oleaf[j]) == a:
            prev[t] = kmap[np.int64(okey[j])]
        j = i
        if j < m and np.int64(oleaf[j]) == a and (rks[t] & 1) and np.int64(okey[j]) == rks[t] >> 1:
            j += 1
        while j < m and np.int64(oleaf[j]) == a and n[j] <= 0:
            j += 1
        if j < m and np.int64(oleaf[j]) == a:
            nxt[t] = kmap[np.int64(okey[j])]
    return prev, nxt


@numba.njit(cache=True, nogil=True)
def gather_exact(oleaf, okey, ranks, nk, ncol, ycol, xcol, binned, ql, qk, on, osy, osx):
    """The old sums of the query cells (in order) that the run holds, added to ``on``,
    ``osy`` (and ``osx``, binned): the lookup and the gathers in one pass."""
    pos, rks = _lower_bound(oleaf, okey, ranks, nk, ql, qk)
    m = oleaf.shape[0]
    for t in range(ql.shape[0]):
        i = pos[t]
        if i < m and np.int64(oleaf[i]) == ql[t] and (rks[t] & 1) and np.int64(okey[i]) == rks[t] >> 1:
            on[t] += ncol[i]
            osy[t] += ycol[i]
            if binned:
                osx[t] += xcol[i]


@numba.njit(cache=True, nogil=True)
def merge_cells(q, a, b):
    """The distinct values of three sorted arrays (``np.unique`` of their concatenation,
    by merging) and the index of each ``q`` value among them."""
    nq, na, nb = q.shape[0], a.shape[0], b.shape[0]
    out = np.empty(nq + na + nb, np.int64)
    iq = np.empty(nq, np.int64)
    i = j = k = 0
    u = 0
    big = np.iinfo(np.int64).max
    while i < nq or j < na or k < nb:
        v = q[i] if i < nq else big
        if j < na and a[j] < v:
            v = a[j]
        if k < nb and b[k] < v:
            v = b[k]
        if u == 0 or out[u - 1] != v:
            out[u] = v
            u += 1
        while i < nq and q[i] == v:
            iq[i] = u - 1
            i += 1
        while j < na and a[j] == v:
            j += 1
        while k < nb and b[k] == v:
            k += 1
    return out[:u], iq


def is_sorted(a: np.ndarray) -> bool:
    return len(a) < 2 or bool(np.all(a[1:] >= a[:-1]))


@numba.njit(cache=True, nogil=True)
def add_diff(out, ia, wa, va, ib, wb, vb, acc_a, acc_b):
    """``out[s] += bincount(ia, wa[:, s] * va) - bincount(ib, wb[:, s] * vb)`` (length
    of ``out``'s rows) per set ``s``, bit for bit, touching only the positions indexed:
    each position's terms added in order into the scratch arrays ``acc_a`` / ``acc_b``
    (zero, and left zero).  ``wa`` / ``wb`` of one column of zero rows: weights 1; ``va``
    / ``vb`` of length 0: no factor; ``ib`` of length 0: nothing taken off."""
    S = out.shape[0]
    for s in range(S):
        for i in range(ia.shape[0]):
            w = wa[i, s] if wa.shape[0] else 1.0
            acc_a[ia[i]] += w * va[i] if va.shape[0] else w
        for i in range(ib.shape[0]):
            w = wb[i, s] if wb.shape[0] else 1.0
            acc_b[ib[i]] += w * vb[i] if vb.shape[0] else w
        for i in range(ia.shape[0]):
            p = ia[i]
            if acc_a[p] != 0.0 or acc_b[p] != 0.0:
                out[s, p] += acc_a[p] - acc_b[p]
                acc_a[p] = 0.0
                acc_b[p] = 0.0
        for i in range(ib.shape[0]):
            p = ib[i]
            if acc_a[p] != 0.0 or acc_b[p] != 0.0:
                out[s, p] += acc_a[p] - acc_b[p]
                acc_a[p] = 0.0
                acc_b[p] = 0.0


@numba.njit(cache=True, nogil=True)
def window_segments(uleaf, ucode, on, osy, osx, dn, dsy, dsx, xv, binned, av, weighted):
    """The old and the new segments of the windows around touched cells (dn > 0) of
    the sorted cells ``u`` (the touched cells and their old neighbours): per segment
    (start code, end code, slope, leaf, weight) -- the weight as the finish's kernel
    gives it (``weighted``: ``min(1, x gap / anchor gap)``; else no weights, length 0);
    ``xv`` / ``av``: the cells' x values (exact features) and bin anchors (weighted),
    gathered.  The segments are counted first (the arrays made to size), and a cell's
    mean and x are worked out once (the same divisions)."""
    U = uleaf.shape[0]
    # the counts: old segments, consecutive old-present cells with a touched cell in [u, v];
    # new segments, consecutive present cells one of which is touched
    ko = 0
    kn = 0
    lu = -1
    flag = False
    ln = -1
    for e in range(U):
        if lu >= 0 and uleaf[e] != uleaf[lu]:
            lu = -1
            flag = False
        if ln >= 0 and uleaf[e] != uleaf[ln]:
            ln = -1
        touched = dn[e] > 0
        if on[e] > 0:
            if lu >= 0 and (flag or touched):
                ko += 1
            lu = e
            flag = touched
        elif touched:
            flag = True
        if on[e] + dn[e] > 0:
            if ln >= 0 and (dn[ln] > 0 or touched):
                kn += 1
            ln = e
    oa = np.empty(ko, np.int64)
    ob = np.empty(ko, np.int64)
    os_ = np.empty(ko)
    ol = np.empty(ko, np.int64)
    ow = np.ones(ko if weighted else 0)
    na = np.empty(kn, np.int64)
    nb = np.empty(kn, np.int64)
    ns = np.empty(kn)
    nl = np.empty(kn, np.int64)
    nw = np.ones(kn if weighted else 0)
    ko = 0
    kn = 0
    lu = -1
    flag = False
    m0 = 0.0
    x0 = 0.0
    for e in range(U):
        if lu >= 0 and uleaf[e] != uleaf[lu]:
            lu = -1
            flag = False
        touched = dn[e] > 0
        if on[e] > 0:
            m1 = osy[e] / on[e]
            x1 = osx[e] / on[e] if binned else xv[e]
            if lu >= 0 and (flag or touched):
                oa[ko] = ucode[lu]
                ob[ko] = ucode[e]
                os_[ko] = (m1 - m0) / (x1 - x0)
                if weighted:
                    ow[ko] = min(1.0, (x1 - x0) / (av[e] - av[lu]))
                ol[ko] = uleaf[e]
                ko += 1
            lu = e
            flag = touched
            m0 = m1
            x0 = x1
        elif touched:
            flag = True
    lu = -1
    for e in range(U):
        if lu >= 0 and uleaf[e] != uleaf[lu]:
            lu = -1
        n1 = on[e] + dn[e]
        if n1 <= 0:
            continue
        m1 = (osy[e] + dsy[e]) / n1
        x1 = (osx[e] + dsx[e]) / n1 if binned else xv[e]
        if lu >= 0 and (dn[lu] > 0 or dn[e] > 0):
            na[kn] = ucode[lu]
            nb[kn] = ucode[e]
            ns[kn] = (m1 - m0) / (x1 - x0)
            if weighted:
                nw[kn] = min(1.0, (x1 - x0) / (av[e] - av[lu]))
            nl[kn] = uleaf[e]
            kn += 1
        lu = e
        m0 = m1
        x0 = x1
    return oa, ob, os_, ol, ow, na, nb, ns, nl, nw


def member(small: np.ndarray, big: np.ndarray) -> np.ndarray:
    """``np.isin(small, big)`` for a small first array: the big one is searched in it."""
    if not len(small) or not len(big):
        return np.zeros(len(small), bool)
    big = big[big <= small.max()]  # (the others match none)
    order = np.argsort(small)
    s = small[order]
    i = np.minimum(np.searchsorted(s, big), len(s) - 1)
    hit = np.zeros(len(s), bool)
    hit[i[s[i] == big]] = True
    out = np.empty(len(small), bool)
    out[order] = hit
    return out
