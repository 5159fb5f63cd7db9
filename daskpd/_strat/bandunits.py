"""How many leaves a StratPD band really rests on: the effective units of its trials.

The trials resample the leaves (:mod:`daskpd._strat.leafboot`), and the band's Student-t
quantile wants the degrees of freedom of the trials' spread.  With ``m`` leaves of about
equal weight that is ``m - 1``; but the curve is a mean of the leaves' slopes that
does not weigh them by their rows (a binned feature's weights are their x gaps,
:mod:`daskpd._strat.numeric`), so a leaf holding one or two rows at a position weighs
as much as a leaf holding thousands, and its noise can carry most of the curve's variance.  The spread then rests
on a few leaves, and a band with ``m - 1`` degrees of freedom is too narrow (the
Studentised error has the heavy tails of a t with few degrees of freedom).

Per position, this module counts the leaves the spread rests on, Kish's effective
number ``(sum_u v_u)^2 / sum_u v_u^2`` (the Satterthwaite degrees of freedom of a
cluster-robust variance, as in Bell and McCaffrey's correction), where ``v_u`` is leaf
``u``'s share of the variance of ``pd`` at the position under a working model of rows
with equal variance.  A leaf's contribution to ``pd`` at ``x_k`` is, but for the
number of leaves averaged at each interval (binned: the sum of their x-gap weights),
its mean y at ``x_k`` (interpolated between its cells) less its mean y at its first
position -- for a binned feature's segment whose weight is below 1 exactly so over the
anchors' gap, and the terms do not depend on the weights; so

* ``v_u(k) = 0`` up to the leaf's first position ``p_0``;
* ``1 / n_0 + 1 / n_k`` at a position of the leaf with ``n_k`` rows;
* ``1 / n_0 + (1 / n_i + 1 / n_{i+1}) / 3`` between two of its positions (the mean over
  the gap of the interpolation's variance);
* ``1 / n_0 + 1 / n_r`` after its last position ``p_r``.

The sums over the leaves of ``v`` and ``v^2`` are made of terms keyed by the leaves'
present cells: per cell, the change of the level that holds *after* it (a running sum
over the positions gives the level) and a correction *at* it -- so they are sums over
cells like the curve's, folded per virtual bucket in virtual-bucket order (the same bits
for any bucket count), recoded with the feature's vocabulary, and updated by the leaves
an incremental night touches (:func:`leaf_terms`).
"""
from __future__ import annotations

import numba
import numpy as np

from .._engine.sums import Table, reduce_tables

__all__ = ["N_TERMS", "unit_terms", "terms_table", "fold_terms", "effective_units", "leaf_terms"]

#: per cell: the change after it of sum v, the correction at it of sum v, the same of sum v^2
N_TERMS = 4


@numba.njit(cache=True, nogil=True)
def unit_terms(leaf, n):
    """Per group of a grouped (leaf, code) table (sorted by leaf, then code; ``n`` its
    rows): ``(groups, 4)`` -- the change of ``v`` after the cell, the correction of ``v``
    at the cell, and the same for ``v^2`` (see the module docstring).  Groups without
    rows, and leaves with fewer than two present cells (no slope), give zeros."""
    G = leaf.shape[0]
    out = np.zeros((G, 4))
    g = 0
    while g < G:
        h = g
        while h < G and leaf[h] == leaf[g]:
            h += 1
        # the leaf's present cells, in code order
        first = -1
        prev = -1  # the previous present cell
        level = 0.0  # v's level after the previous present cell
        a = 0.0
        for j in range(g, h):
            nj = n[j]
            if not nj > 0.0:
                continue
            if first < 0:
                first = j
                a = 1.0 / nj
                prev = j
                continue
            # the gap after the previous cell, then this cell
            gap = a + (1.0 / n[prev] + 1.0 / nj) / 3.0
            out[prev, 0] += gap - level
            out[prev, 2] += gap * gap - level * level
            at = a + 1.0 / nj
            out[j, 1] += at - gap
            out[j, 3] += at * at - gap * gap
            level = gap
            prev = j
        if prev >= 0 and prev != first:  # after the last cell: its own level
            tail = a + 1.0 / n[prev]
            out[prev, 0] += tail - level
            out[prev, 2] += tail * tail - level * level
        g = h
    return out


def terms_table(table: Table, vb: np.ndarray, n_codes: int) -> Table:
    """A bucket's merged (leaf, code) sums -> the sums of :func:`unit_terms` per
    (virtual bucket ``vb`` of each group, code), in group order."""
    if not len(table):
        return Table.empty(N_TERMS)
    terms = unit_terms(np.asarray(table.leaf, np.int64), np.ascontiguousarray(table.values[:, 0], dtype=np.float64))
    t = Table(np.asarray(vb, np.int32), np.asarray(table.key, dtype=np.int64), terms, grouped=False)
    return reduce_tables([t], n_codes)


def fold_terms(tables: list, n_codes: int) -> np.ndarray:
    """(4, codes): the per-(virtual bucket, code) tables given in virtual-bucket order,
    each code's terms added in that order."""
    tabs = [t for t in tables if t is not None and len(t)]
    out = np.zeros((N_TERMS, n_codes))
    if not tabs:
        return out
    key = np.concatenate([t.key for t in tabs])
    vals = np.concatenate([t.values for t in tabs])
    for j in range(N_TERMS):
        out[j] = np.bincount(key, weights=vals[:, j], minlength=n_codes)
    return out


def effective_units(terms: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Per position ``pos`` (codes with rows, increasing): the effective number of leaves
    ``(sum v)^2 / sum v^2`` from the folded terms (NaN where no leaf contributes)."""
    terms = np.asarray(terms, dtype="float64")
    after = np.cumsum(terms[[0, 2]], axis=1)
    # the level at a code is the changes after the cells *before* it, plus its correction
    s1 = np.concatenate([[0.0], after[0, :-1]]) + terms[1]
    s2 = np.concatenate([[0.0], after[1, :-1]]) + terms[3]
    s1, s2 = s1[pos], s2[pos]
    with np.errstate(invalid="ignore", divide="ignore"):
        m = np.where((s2 > 0) & (s1 > 0), s1 * s1 / s2, np.nan)
    return m


def leaf_terms(leaf: np.ndarray, code: np.ndarray, n: np.ndarray, n_codes: int) -> np.ndarray:
    """(4, codes): the terms of whole leaves given as (leaf, code, rows) cells in any
    order, a cell possibly split over several entries (summed first)."""
    leaf = np.asarray(leaf, np.int64)
    code = np.asarray(code, np.int64)
    out = np.zeros((N_TERMS, n_codes))
    if not len(leaf):
        return out
    key = leaf * int(n_codes) + code
    uk, inv = np.unique(key, return_inverse=True)
    rows = np.bincount(inv, weights=np.asarray(n, dtype=np.float64), minlength=len(uk))
    terms = unit_terms(uk // int(n_codes), rows)
    for j in range(N_TERMS):
        out[j] = np.bincount(uk % int(n_codes), weights=terms[:, j], minlength=n_codes)
    return out
