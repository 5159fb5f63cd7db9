"""A bucket's groups, for the finishers' one pass over every weight set: the groups'
statistics and their leaves' trial weights (:func:`group_inputs`), every set's sums a chunk
of groups at a time (:func:`chunk_sets`), and a one-pass check that weights are whole
numbers (:func:`whole_range`).
"""
from __future__ import annotations


import numba
import numpy as np

from .sums import Table

__all__ = ["group_inputs", "chunk_sets", "whole_range"]


def group_inputs(table: Table, k: int, weights: np.ndarray | None, n_trials: int):
    """A bucket's merged table as the finishers' one-pass kernels read it: ``(vals,
    gw)`` -- the groups' statistics (``k`` a group: ``n``, ``sum y`` and, binned, ``sum
    x``) and each group's leaf bootstrap weights (groups x trials, uint8: the weights of
    the group's leaf, :func:`daskpd._engine.hashing.leaf_weights`, given per leaf of the
    table in ``weights`` (leaves ``table.leaf[0]`` on), None without trials)."""
    vals = np.ascontiguousarray(table.values[:, :k])
    if not n_trials or not len(table):
        return vals, np.zeros((len(table), max(0, int(n_trials))), np.uint8)
    leaf = np.asarray(table.leaf, np.int64)
    return vals, np.ascontiguousarray(weights[leaf - leaf[0]])


@numba.njit(cache=True, nogil=True)
def chunk_sets(g0, m, vals, gw, has_x, cn, cy, cx):
    """Every set's ``(n, sum y, sum x)`` of groups ``g0 <= g < g0 + m`` (the inputs of
    :func:`group_inputs`) into rows ``0 .. m - 1`` of ``cn``, ``cy``, ``cx`` (groups x
    sets): set 0 read from the merged table's row, set t its leaf's trial-t weight times
    set 0's (a leaf drawn ``w`` times counts ``w`` times, rows and sums alike).  ``cx``
    is 0 without x.

    The finishers call it once a chunk of groups, never once a group: a helper taking
    arrays, called (or inlined) in a large kernel's loop, kept numba's reference counts
    of its arrays in that loop (atomic calls every group, most of a numeric finish's
    time with one trial)."""
    S = cn.shape[1]
    for j in range(m):
        g = g0 + j
        n0 = vals[g, 0]
        y0 = vals[g, 1]
        x0 = vals[g, 2] if has_x else 0.0
        cn[j, 0] = n0
        cy[j, 0] = y0
        cx[j, 0] = x0
        for t in range(S - 1):
            wt = float(gw[g, t])
            cn[j, t + 1] = wt * n0
            cy[j, t + 1] = wt * y0
            cx[j, t + 1] = wt * x0


@numba.njit(cache=True, nogil=True)
def whole_range(n):
    """``(whole, top)``: whether every value of ``n`` is a whole number >= 0, and the
    largest (one pass; NaN is not whole)."""
    top = 0.0
    for v in n.ravel():
        if not (v >= 0.0 and v == np.floor(v)):
            return False, top
        if v > top:
            top = v
    return True, top

