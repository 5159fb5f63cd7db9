"""A sorted run of (leaf, key) sums as raw ``.npy`` files (the scan state's unit on disk).

Leaf and key are stored as the smallest unsigned integers holding them, the sums
columns that hold non-negative integers below 2**32 (the row counts) as ``uint32``, the
others as ``float64``: read at disk speed (no zip), or memory-mapped.  Written by the
driver (:mod:`daskpd._strat.state`) or, in a scan keeping its state on a filesystem its
workers share, by each bucket's finish (:mod:`daskpd._strat.scan`).
"""
from __future__ import annotations

import os

import numpy as np

from .._engine.sums import Table

__all__ = ["write_table", "read_table", "write_part", "PARTS"]

#: the files of a run: ``{name}.{part}.npy``
PARTS = ("leaf", "key", "counts", "sums")


def _smallest_uint(high: int):
    return np.uint16 if high < 2 ** 16 else np.uint32 if high < 2 ** 32 else np.int64


def write_table(directory: str, name: str, t: Table) -> list:
    """One feature's sums as raw ``.npy`` files (read at disk speed, no zip): leaf and key
    as the smallest unsigned integers holding them, the sums columns that hold
    non-negative integers below 2**32 (the row counts) as ``uint32``, the others as
    ``float64``; returns the indices of the integer columns."""
    for part, a in (("leaf", t.leaf), ("key", t.key)):
        lo, hi = (int(a.min()), int(a.max())) if len(a) else (0, 0)
        np.save(os.path.join(directory, f"{name}.{part}.npy"),
                a.astype(_smallest_uint(hi + 1) if lo >= 0 else np.int64, copy=False))
    counts = []
    for j in range(t.values.shape[1]):
        col = t.values[:, j]
        as_int = col.astype(np.uint32)
        if np.array_equal(as_int, col):
            counts.append(j)
    floats = [j for j in range(t.values.shape[1]) if j not in counts]
    np.save(os.path.join(directory, f"{name}.counts.npy"),
            np.ascontiguousarray(t.values[:, counts].astype(np.uint32)))
    np.save(os.path.join(directory, f"{name}.sums.npy"), np.ascontiguousarray(t.values[:, floats]))
    return counts


def read_table(directory: str, name: str, counts: list) -> Table:
    leaf = np.load(os.path.join(directory, f"{name}.leaf.npy"), allow_pickle=False).astype(np.int32)
    key = np.load(os.path.join(directory, f"{name}.key.npy"), allow_pickle=False).astype(np.int64)
    ints = np.load(os.path.join(directory, f"{name}.counts.npy"), allow_pickle=False)
    sums = np.load(os.path.join(directory, f"{name}.sums.npy"), allow_pickle=False)
    values = np.empty((len(leaf), ints.shape[1] + sums.shape[1]))
    floats = [j for j in range(values.shape[1]) if j not in counts]
    values[:, counts] = ints
    values[:, floats] = sums
    return Table(leaf, key, values)


def write_part(directory: str, name: str, t: Table) -> dict:
    """:func:`write_table` and the run's description (what :class:`daskpd._strat.state.Run`
    reads it back from)."""
    counts = write_table(directory, name, t)
    return {"name": name, "n_cells": len(t), "counts": counts, "n_values": int(t.values.shape[1])}
