"""CatStratPD's normal equations summed explicitly, leaf by leaf: the direct solve.

(See :mod:`daskpd._strat.categorical_solve` for the notation.)  ``Lap b = r``,
``Lap = diag(count_used) - G``, ``G = sum_l n_l n_l' / N_l``: :class:`LeafSums` holds
these sums over some leaves, O(K^2) at most (the upper triangle of a dense ``G`` for up
to ``DENSE_MAX_KEYS`` categories, sparse above), whatever the number of rows;
:func:`gram_link` adds a bucket of leaves to it, so a chain of tasks can sum G over the
buckets of a large table when conjugate gradients do not converge, and
:func:`daskpd._strat.categorical_gram_solve.solve_gram` solves it.

Sums run over leaves in a fixed order, in fixed chunks (virtual buckets, then runs of
``CHUNK_LEAVES`` leaves), so the system is the same bits however the reduction was cut.
A chunk's part of G is one BLAS product when its categories are few enough for a dense
(leaves x categories) block, else a cache-tiled scatter of the leaves' outer products.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import llvmlite.binding as llvm_binding
import numba
import numpy as np
from dask.sizeof import sizeof
from numba.extending import get_cython_function_address

from .._engine.sums import group_sums
from .categorical_solve import TILE, pairs_upper, scatter_upper, symmetric_csr, tile_cuts

__all__ = ["LeafSums", "TrialGrams", "gram_link", "gram_sets", "leaf_sums", "updatable", "DENSE_MAX_KEYS",
           "CHUNK_LEAVES"]

#: up to this many categories, G is a dense K x K array (8 K^2 bytes); sparse above
DENSE_MAX_KEYS = 8192
#: leaves per chunk of the Gram sums (a chunk picks BLAS or a scatter by its own shape;
#: chunks never span a virtual bucket, so they are the same however buckets are cut)
CHUNK_LEAVES = 256
#: a chunk's Gram is one BLAS product (syrk) when its dense block has at most this many
#: multiply-adds per scatter update: syrk runs ~100x more of them per second (0.13 s for
#: 250 leaves x 5,000 categories here, against ~5 ns per scattered update)
BLAS_FACTOR = 100.0
#: sparse Gram entries kept uncompacted before they are merged
_COMPACT_AT = 4_000_000


@dataclass
class LeafSums:
    """The least-squares sums of one feature (one statistics set), over some leaves."""

    K: int
    count: np.ndarray
    sum_y: np.ndarray
    count_used: np.ndarray
    n_leaves_cat: np.ndarray
    r: np.ndarray
    gram: object  # upper triangle: dense (K, K) array, or sparse Tables (row, col, value) in order
    n_ignored: float = 0.0
    n_leaves: int = 0
    n_leaves_used: int = 0
    counters: tuple | None = None
    _pending: int = field(default=0, repr=False)

    @classmethod
    def empty(cls, K: int) -> "LeafSums":
        z = lambda: np.zeros(K)  # noqa: E731
        gram = np.zeros((K, K), order="F") if K <= DENSE_MAX_KEYS else []  # Fortran: BLAS's syrk updates it
        return cls(K, z(), z(), z(), z(), z(), gram)

    @property
    def dense(self) -> bool:
        return isinstance(self.gram, np.ndarray)

    @property
    def nbytes(self) -> int:
        g = self.gram.nbytes if self.dense else sum(t.nbytes for t in self.gram)
        return int(g + 5 * 8 * self.K)

    # -- adding leaves ----------------------------------------------------------------

    def add(self, leaf, code, n, s, chunk):
        """Add leaves (rows sorted by leaf, then code; n > 0) cut into ``chunk`` runs.

        The vectors are summed per group of chunks (``chunk >> 40``: a virtual bucket) and
        G leaf by leaf within each chunk, so the result only depends on the chunks, not on
        how calls cut them.
        """
        vec = np.stack([self.count, self.sum_y, self.count_used, self.n_leaves_cat, self.r])
        scal = np.array([self.n_ignored, self.n_leaves, self.n_leaves_used], dtype="float64")
        w = _leaf_vectors(leaf, code, n, s, chunk >> 40, vec, scal)
        self.count, self.sum_y, self.count_used, self.n_leaves_cat, self.r = vec
        self.n_ignored, self.n_leaves, self.n_leaves_used = float(scal[0]), int(scal[1]), int(scal[2])
        # G: the rows of leaves holding >= 2 categories (w > 0: 1 / the leaf's rows)
        rows = np.flatnonzero(w > 0)
        if not len(rows):
            return
        c, nn, ww, ch = code[rows], n[rows], w[rows], chunk[rows]
        lf = leaf[rows]
        starts = np.flatnonzero(np.r_[True, lf[1:] != lf[:-1]]).astype(np.int64)
        self.add_gram(c, nn, ww, starts, ch)

    def add_gram(self, code, n, w, starts, chunk):
        """Add to G the leaves starting at ``starts`` (rows of leaves holding >= 2
        categories; ``w``: 1 / the leaf's rows), dense in place or as a sparse piece."""
        if self.dense:
            self.gram = updatable(self.gram)
            _add_dense(self.gram, code, n, w, starts, chunk)
        else:
            r_, c_, v_ = pairs_upper(code, n, w, starts)
            self.gram.append(group_sums(r_, c_, v_))
            self._pending += len(v_)
            if self._pending > _COMPACT_AT:
                self.compact()

    def compact(self):
        """Merge the sparse Gram pieces (in order) into one."""
        if self.dense or len(self.gram) <= 1:
            return
        t = group_sums(np.concatenate([g.leaf for g in self.gram]), np.concatenate([g.key for g in self.gram]),
                       np.concatenate([g.values for g in self.gram], axis=0))
        self.gram = [t]
        self._pending = 0

    def fold(self, other: "LeafSums") -> "LeafSums":
        """These sums followed by ``other``'s (a fixed order: the result is canonical)."""
        if other is None:
            return self
        for a in ("count", "sum_y", "count_used", "n_leaves_cat", "r"):
            setattr(self, a, getattr(self, a) + getattr(other, a))
        if self.dense:
            self.gram += other.gram
        else:
            self.gram = self.gram + other.gram
            self.compact()
        self.n_ignored += other.n_ignored
        self.n_leaves += other.n_leaves
        self.n_leaves_used += other.n_leaves_used
        self.counters = self.counters or other.counters
        return self

    def full_gram(self) -> np.ndarray:
        """The dense G (its upper triangle is what is summed)."""
        g = self.gram
        return np.triu(g) + np.triu(g, 1).T

    def gram_csr(self):
        """The sparse G (symmetric), from its summed upper triangle."""
        import scipy.sparse as sp

        self.compact()
        if not self.gram:
            return sp.csr_matrix((self.K, self.K))
        t = self.gram[0]
        return symmetric_csr(t.leaf.astype(np.int64), t.key, t.values[:, 0], self.K)


def updatable(G: np.ndarray) -> np.ndarray:
    """``G`` when BLAS can update it in place (float64, Fortran-ordered, aligned,
    writeable), else a copy that it can.

    A state that a dask worker spilled to disk, or received from another worker, comes
    back as views into the spill file's or the message's bytes, at offsets that need not
    be multiples of 8: an *unaligned* array, which f2py's ``overwrite_c`` cannot update
    in place (it silently works on a copy)."""
    f = G.flags
    if G.dtype == np.float64 and f.f_contiguous and f.aligned and f.writeable:
        return G
    return np.array(G, dtype=np.float64, order="F", copy=True)


@numba.njit(cache=True, nogil=True)
def _leaf_vectors(leaf, code, n, s, group, vec, scal):
    """Add the leaves' terms to the vectors ``vec`` = [count, sum_y, count_used,
    n_leaves_cat, r] and ``scal`` = [n_ignored, n_leaves, n_leaves_used], summed per run
    of ``group`` then added; return each row's 1 / N_l (0 in single-category leaves)."""
    m = leaf.shape[0]
    K = vec.shape[1]
    w = np.zeros(m)
    tmp = np.zeros((5, K))
    touched = np.empty(m, np.int64)
    n_touched = 0
    ign = 0.0
    a = 0
    while a < m:
        g = group[a]
        z = a
        while z < m and group[z] == g:
            z += 1
        # leaves of this group
        i = a
        while i < z:
            j = i
            N = 0.0
            S = 0.0
            while j < z and leaf[j] == leaf[i]:
                N += n[j]
                S += s[j]
                j += 1
            scal[1] += 1
            multi = j - i >= 2
            if multi:
                scal[2] += 1
            for r in range(i, j):
                c = code[r]
                if tmp[0, c] == 0.0 and tmp[1, c] == 0.0 and tmp[2, c] == 0.0 and tmp[3, c] == 0.0:
                    touched[n_touched] = c
                    n_touched += 1
                tmp[0, c] += n[r]
                tmp[1, c] += s[r]
                if multi:
                    tmp[2, c] += n[r]
                    tmp[3, c] += 1.0
                    tmp[4, c] += s[r] - n[r] * (S / N)
                    w[r] = 1.0 / N
                else:
                    ign += n[r]
            i = j
        for t in range(n_touched):
            c = touched[t]
            for q in range(5):
                vec[q, c] += tmp[q, c]
                tmp[q, c] = 0.0
        n_touched = 0
        scal[0] += ign
        ign = 0.0
        a = z
    return w


def _add_dense(G, c, n, w, starts, chunk):
    """Upper triangle of G += n_l n_l' / N_l for every leaf (``starts``: first row of each
    leaf; ``chunk``: each row's chunk).  A chunk whose categories are few enough for a
    dense (leaves x categories) block is one BLAS product; runs of the other chunks are
    one cache-tiled scatter.  The choice depends on the chunk only, and each entry's
    terms are added chunk after chunk, leaf after leaf, whichever way.  One compiled pass
    (:func:`_dense_add`; the BLAS products by the same ``dsyrk`` as
    :func:`scipy.linalg.blas.dsyrk`, on the same blocks): ``G`` must be a Fortran-ordered
    float64 array (:func:`updatable`)."""
    if len(starts):
        _add_dense_leaves(G, c, n, w, starts, np.asarray(chunk)[starts])


def _add_dense_leaves(G, c, n, w, starts, lchunk):
    """:func:`_add_dense` given each leaf's chunk (``lchunk``)."""
    if len(starts):
        _dense_add(G.T, np.ascontiguousarray(c, dtype=np.int64), np.ascontiguousarray(n, dtype=np.float64),
                   np.ascontiguousarray(w, dtype=np.float64), np.ascontiguousarray(starts, dtype=np.int64),
                   np.ascontiguousarray(lchunk, dtype=np.int64), TILE, float(BLAS_FACTOR))


# scipy's BLAS dsyrk (the one scipy.linalg.blas.dsyrk calls), callable from compiled code:
# bound by symbol name, so the kernels that call it stay cached across processes
_DSYRK_SYMBOL = "daskpd_scipy_dsyrk"
llvm_binding.add_symbol(_DSYRK_SYMBOL, get_cython_function_address("scipy.linalg.cython_blas", "dsyrk"))
_dsyrk = numba.types.ExternalFunction(_DSYRK_SYMBOL, numba.types.void(*([numba.types.voidptr] * 10)))


@numba.njit(cache=True, nogil=True)
def _syrk_t(At, Ct, beta):
    """``C = A'A + beta C``, upper triangle, by BLAS's dsyrk: ``At`` (n, k) C-ordered is
    the Fortran-ordered (k, n) A, ``Ct`` (n, n) C-ordered the Fortran-ordered C."""
    n, k = At.shape
    iv = np.empty(4, np.int32)
    iv[0] = n
    iv[1] = k
    iv[2] = max(k, 1)
    iv[3] = max(n, 1)
    dv = np.empty(2)
    dv[0] = 1.0
    dv[1] = beta
    ch = np.empty(2, np.uint8)
    ch[0] = 85  # "U": the upper triangle
    ch[1] = 84  # "T": A'A
    _dsyrk(ch[0:].ctypes, ch[1:].ctypes, iv[0:].ctypes, iv[1:].ctypes, dv[0:].ctypes, At.ctypes, iv[2:].ctypes,
           dv[1:].ctypes, Ct.ctypes, iv[3:].ctypes)


@numba.njit(cache=True, nogil=True)
def _dense_add(Gt, c, n, w, starts, lchunk, tile, blas_factor):
    """:func:`_add_dense` compiled: ``Gt`` is G transposed (C-ordered: the memory of the
    Fortran-ordered G), ``lchunk`` each leaf's chunk.  The same operations in the same
    order as the chunk-by-chunk calls it replaces (:func:`_syrk_chunk`, :func:`scatter_upper`)."""
    K = Gt.shape[0]
    L = starts.shape[0]
    R = c.shape[0]
    ends = np.empty(L, np.int64)
    for q in range(L):
        ends[q] = starts[q + 1] if q + 1 < L else R
    bounds = np.empty(L + 1, np.int64)  # leaf ranges per chunk
    nb = 0
    bounds[0] = 0
    for q in range(1, L):
        if lchunk[q] != lchunk[q - 1]:
            nb += 1
            bounds[nb] = q
    nb += 1
    bounds[nb] = L
    mark = np.full(K, -1, np.int64)
    blas = np.zeros(nb, np.bool_)
    for k in range(nb):
        a, b = bounds[k], bounds[k + 1]
        pairs = 0.0
        for q in range(a, b):
            sz = ends[q] - starts[q]
            pairs += np.float64(sz) * (sz + 1) / 2
        n_u = 0
        for r in range(starts[a], ends[b - 1]):
            if mark[c[r]] != k:
                mark[c[r]] = k
                n_u += 1
        blas[k] = (b - a) * n_u * n_u / 2 <= blas_factor * pairs
    G = Gt.T
    rank = np.full(K, -1, np.int64)
    k = 0
    while k < nb:
        a = bounds[k]
        if blas[k]:
            b = bounds[k + 1]
            r0, r1 = starts[a], ends[b - 1]
            # the chunk's distinct categories, ascending, and each row's place among them
            for r in range(r0, r1):
                rank[c[r]] = 0
            n_u = 0
            u = np.empty(min(K, r1 - r0), np.int64)
            for j in range(K):
                if rank[j] >= 0:
                    rank[j] = n_u
                    u[n_u] = j
                    n_u += 1
            At = np.zeros((n_u, b - a))
            for q in range(a, b):
                for r in range(starts[q], ends[q]):
                    At[rank[c[r]], q - a] = n[r] * np.sqrt(w[r])
            if n_u == K:  # every category: G updated in place
                _syrk_t(At, Gt, 1.0)
            else:
                Ct = np.zeros((n_u, n_u))
                _syrk_t(At, Ct, 0.0)
                for i in range(n_u):
                    for j in range(n_u):
                        Gt[u[j], u[i]] += Ct[j, i]
            for j in range(n_u):
                rank[u[j]] = -1
            k += 1
            continue
        z = k
        while z < nb and not blas[z]:
            z += 1
        b = bounds[z]
        r0, r1 = starts[a], ends[b - 1]
        scatter_upper(G, c[r0:r1], n[r0:r1], w[r0:r1], starts[a:b] - r0, tile)
        k = z


@numba.njit(cache=True, nogil=True)
def _distinct_codes(c, K):
    """(sorted distinct codes of c, each row's position among them), in O(rows + K)."""
    rank = np.full(K, -1, np.int64)
    for i in range(c.shape[0]):
        rank[c[i]] = 0
    u = np.flatnonzero(rank >= 0)
    for j in range(u.shape[0]):
        rank[u[j]] = j
    pos = np.empty(c.shape[0], np.int64)
    for i in range(c.shape[0]):
        pos[i] = rank[c[i]]
    return u, pos


def _syrk_chunk(G, c, v, sizes):
    """Upper triangle of G += A'A, A the chunk's (leaves x categories) block of values v."""
    from scipy.linalg import blas

    u, pos = _distinct_codes(c, G.shape[0])
    A = np.zeros((len(sizes), len(u)), order="F")
    A[np.repeat(np.arange(len(sizes)), sizes), pos] = v
    if len(u) == G.shape[0]:  # every category: update G in place
        out = blas.dsyrk(1.0, A, c=G, beta=1.0, trans=1, lower=0, overwrite_c=1)
        if not np.shares_memory(out, G):  # f2py updated a copy (G not an aligned Fortran array)
            G[...] = out
    else:
        G[np.ix_(u, u)] += blas.dsyrk(1.0, A, trans=1, lower=0)


def gram_link(state, bucket, stats_set: int):
    """Add a :class:`~daskpd._strat.categorical_buckets.CGBucket`'s leaves (one set) to
    the explicit G of ``state`` (None: a new one); the vectors are the caller's."""
    state = LeafSums.empty(bucket.K) if state is None else state
    code, n, w, starts, vb, leaf = bucket.set_rows(stats_set)
    if not len(code):
        return state
    lchunk = vb * (1 << 40) + leaf // CHUNK_LEAVES  # each leaf's chunk
    if state.dense:
        state.gram = updatable(state.gram)
        _add_dense_leaves(state.gram, code, n, w, starts, lchunk)
        return state
    sizes = np.diff(np.r_[starts, len(code)])
    state.add_gram(code.astype(np.int64), n, w, starts, np.repeat(lchunk, sizes))
    return state


@dataclass
class TrialGrams:
    """The explicit G of several statistics sets (the trials), summed together:
    ``gram`` (K, K, sets) holds set ``sets[j]``'s upper triangle in ``gram[:, :, j]``
    (:func:`gram_sets`), or ``per_set`` one :class:`LeafSums` per set (a sparse G, or a
    bucket that keeps its sets apart: :func:`gram_link` set by set)."""

    K: int
    sets: list
    gram: np.ndarray | None = None
    per_set: list | None = None

    @property
    def nbytes(self) -> int:
        if self.per_set is not None:
            return int(sum(0 if s is None else s.nbytes for s in self.per_set))
        return int(self.gram.nbytes)

    def leaf_sums(self) -> list:
        """One :class:`LeafSums` per set (its G only; the vectors are the caller's)."""
        if self.per_set is not None:
            return list(self.per_set)
        out = []
        for j in range(len(self.sets)):
            z = np.zeros(self.K)
            out.append(LeafSums(self.K, z, z.copy(), z.copy(), z.copy(), z.copy(),
                                np.asfortranarray(self.gram[:, :, j])))
        return out


def gram_sets(state: TrialGrams | None, bucket, sets) -> TrialGrams:
    """Add a :class:`~daskpd._strat.categorical_buckets.CGBucket`'s leaves to the explicit
    G of every set of ``sets`` at once (``state``: theirs so far, or None).

    A bucket holding every set's rows in one block (``bucket.block``) with a dense G is
    summed in one pass over its leaves (:func:`_sets_gram`): each leaf's pair terms
    ``n_i w_l n_j`` of every set, set by set as :func:`scatter_upper` computes them, are
    added to each entry leaf after leaf, whatever the buckets -- the sums do not depend
    on how the leaves were cut.  Otherwise each set is linked on its own
    (:func:`gram_link`)."""
    sets = [int(s) for s in sets]
    K = int(bucket.K)
    block = getattr(bucket, "block", None)
    if state is None:
        dense = K <= DENSE_MAX_KEYS and block is not None
        state = TrialGrams(K, sets, np.zeros((K, K, len(sets))) if dense else None,
                           None if dense else [None] * len(sets))
    if state.per_set is not None:
        state.per_set = [gram_link(st, bucket, s) for st, s in zip(state.per_set, sets)]
        return state
    if not len(block.code):
        return state
    f = state.gram.flags
    if not (f.c_contiguous and f.aligned and f.writeable):  # received from another worker, or read back from a
        state.gram = np.array(state.gram, dtype=np.float64, order="C", copy=True)  # spill: a view of its bytes
    _sets_gram(state.gram, np.ascontiguousarray(block.code, dtype=np.int64), np.ascontiguousarray(block.n),
               np.ascontiguousarray(block.w, dtype=np.float64), np.ascontiguousarray(block.starts, dtype=np.int64),
               np.asarray(sets, np.int64), TILE)
    return state


@numba.njit(cache=True, nogil=True)
def _sets_gram(G3, code, n, w, starts, cols, tile):
    """Upper triangle of ``G3[:, :, j] += n_i w_l n_j`` over every leaf of a
    :class:`~daskpd._strat.categorical_buckets.CGBlock` for set ``cols[j]`` (``n``: (rows,
    sets) its rows, ``w``: (leaves, sets) 1 / the leaf's rows, 0 where the set's leaf
    holds fewer than 2 categories; codes ascending within a leaf), tile pair by tile pair
    of G as :func:`scatter_upper`; per entry the leaves' terms are added in leaf order,
    the sets side by side."""
    K = G3.shape[0]
    T = cols.shape[0]
    L = starts.shape[0]
    n_tiles = (K + tile - 1) // tile
    ends, cut = tile_cuts(code, starts, n_tiles, tile)
    big = 0
    for q in range(L):
        big = max(big, ends[q] - starts[q])
    nf = np.empty((big, T))  # the leaf's rows of every set, as floats
    ai = np.empty(T)
    live = np.empty(T, np.bool_)
    for ti in range(n_tiles):
        for tj in range(ti, n_tiles):
            for q in range(L):
                a0, a1 = cut[q, ti], cut[q, ti + 1]
                b0, b1 = cut[q, tj], cut[q, tj + 1]
                if a0 == a1 or b0 == b1:
                    continue
                any_live = False
                for t in range(T):
                    live[t] = w[q, cols[t]] > 0
                    any_live = any_live or live[t]
                if not any_live:
                    continue
                s0 = starts[q]
                for r in range(a0, b1):
                    for t in range(T):
                        nf[r - s0, t] = np.float64(n[r, cols[t]]) if live[t] else 0.0
                for i in range(a0, a1):
                    ci = code[i]
                    for t in range(T):
                        ai[t] = nf[i - s0, t] * w[q, cols[t]] if live[t] else 0.0
                    j0 = i if ti == tj else b0
                    for j in range(j0, b1):
                        row = G3[ci, code[j]]
                        for t in range(T):
                            row[t] += ai[t] * nf[j - s0, t]


def leaf_sums(leaf, cat, n, s, n_categories: int) -> LeafSums:
    """:class:`LeafSums` of aligned per-(leaf, category) sums (any leaf ids, any order)."""
    leaf = np.asarray(leaf)
    cat = np.asarray(cat, dtype="int64")
    n = np.asarray(n, dtype="float64")
    s = np.asarray(s, dtype="float64")
    _, lid = np.unique(leaf, return_inverse=True)
    t = group_sums(lid.reshape(-1), cat, np.c_[n, s])
    m = t.values[:, 0] > 0
    state = LeafSums.empty(int(n_categories))
    lf, cd, nn, ss = t.leaf[m].astype(np.int64), t.key[m], t.values[m, 0], t.values[m, 1]
    state.add(lf, cd, nn, ss, lf // CHUNK_LEAVES)
    return state


# dask's memory manager counts these by their arrays (spilling decisions need it)
sizeof.register(LeafSums)(lambda o: o.nbytes)
sizeof.register(TrialGrams)(lambda o: o.nbytes)
