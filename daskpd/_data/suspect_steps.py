"""A column of few levels as a thresholded or binned copy of the target: the home of
the step rule of the suspect columns (:func:`step_copy`: the levels, ordered by their
mean target, cut the sorted target into consecutive intervals where it is dense;
:class:`Step`, its scores, and the thresholds ``STEP_*`` that make it a leak or a
warning).  :mod:`daskpd._data.suspects` applies it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .kinds import is_text

__all__ = ["Step", "step_copy", "STEP_MAX_LEVELS", "STEP_MIN_ROWS", "STEP_PURITY", "STEP_DENSE", "STEP_LEAK_R2",
           "STEP_WARN_R2", "STEP_WARN_PURITY"]

#: a column of at most this many levels (and at most a tenth as many as rows) may be a
#: binned copy of the target
STEP_MAX_LEVELS = 100
#: the fewest rows (target and column both present) :func:`step_copy` judges: on fewer,
#: the target's density at a cut rests on a handful of rows (120 rows of
#: ``y = 2 x + z + noise``, x of 4 levels, made x look like a binned copy of y)
STEP_MIN_ROWS = 500
#: the share of a level's rows whose target lies in its interval (the levels, ordered by
#: their mean, cutting the sorted target at their counts), averaged over the levels, at
#: which the levels are a step function of the target: a thresholded / binned copy scores
#: 1.0, one cut at the median after a little noise 0.98 (noise 0.05 target sds)
STEP_PURITY = 0.97
#: a cut between two levels that is not a valley of the target's distribution: its density
#: at the cut at least this share of the lower of its densities at the two levels' medians
#: (a binned copy cuts where the target is dense; a strong discrete cause separates modes,
#: and its cuts fall in the empty space between them); averaged over the cuts by rows
STEP_DENSE = 0.6
#: the R^2 of a step column's level means on the target's ranks from which it is left out
#: as a leak (a cut at the target's median explains 0.75 of the ranks' variance, at its
#: 90th percentile 0.27, at its 99th 0.03)
STEP_LEAK_R2 = 0.5
#: the R^2 from which a step column -- or a column of few levels cutting the target's dense
#: part into nearly consecutive intervals (``STEP_WARN_PURITY``) -- gets a warning
STEP_WARN_R2 = 0.2
STEP_WARN_PURITY = 0.92


@dataclass(frozen=True)
class Step:
    """How much a column of few levels looks like a binned copy of the target
    (:func:`step_copy`): ``levels``; ``purity``, the share of a level's rows whose target
    lies in its interval, averaged over the levels; ``dense``, how far its cuts lie in the target's dense part
    rather than in valleys between modes (1: no valley); ``r2``, the share of the
    variance of the target's ranks its level means explain."""

    levels: int
    purity: float
    dense: float
    r2: float

    @property
    def is_step(self) -> bool:
        return self.purity >= STEP_PURITY and self.dense >= STEP_DENSE

    @property
    def is_leak(self) -> bool:
        return self.is_step and self.r2 >= STEP_LEAK_R2

    @property
    def is_warning(self) -> bool:
        return not self.is_leak and self.dense >= STEP_DENSE and self.r2 >= STEP_WARN_R2 and (
            self.purity >= STEP_WARN_PURITY)


def step_copy(values, y) -> Step | None:
    """The :class:`Step` of a column's ``values`` against the target ``y`` (rows where
    both are present), or None for fewer than ``STEP_MIN_ROWS`` such rows, fewer than 2 levels or more
    than ``STEP_MAX_LEVELS`` (or a tenth of the rows).

    The levels, ordered by their mean target, cut the sorted target at their counts; the
    purity is the share of a level's rows whose target's rank gives that level, averaged
    over the levels.  At each
    cut between neighbouring levels the density of the target within 0.05 of its sd is
    compared with its density at the two levels' medians (the lower of the two): a binned
    copy cuts a unimodal target where it is dense (ratio about 1), a strong discrete cause
    (``y = 10 g + x + noise``) separates modes and its cuts fall in valleys (ratio near 0)."""
    values = pd.Series(values).reset_index(drop=True)
    y = np.asarray(y, dtype=float)
    ok = values.notna().to_numpy() & np.isfinite(y)
    if ok.sum() < STEP_MIN_ROWS:
        return None
    values, y = values[ok], y[ok]
    codes, uniq = pd.factorize(values.astype(object) if is_text(values.dtype) else values)
    k = len(uniq)
    if k < 2 or k > STEP_MAX_LEVELS or k > len(y) / 10:
        return None
    counts = np.bincount(codes, minlength=k)
    means = np.bincount(codes, weights=y, minlength=k) / counts
    rank = np.empty(k, dtype=np.int64)
    rank[np.argsort(means, kind="stable")] = np.arange(k)
    level = rank[codes]
    counts = counts[np.argsort(means, kind="stable")]
    order = np.argsort(y, kind="stable")
    ys = y[order]
    # each level's share of rows in its own interval, averaged over the levels (a rare
    # level would make the share of all rows high whatever it holds)
    hit = level[order] == np.repeat(np.arange(k), counts)
    purity = float(np.mean(np.bincount(level[order], weights=hit, minlength=k) / counts))
    # the share of the variance of the target's ranks the level means explain: a heavy
    # tail (a few prices in the millions) would make any cut of the raw target look weak
    ranks = np.empty(len(ys))
    ranks[order] = np.arange(len(ys), dtype=float)
    ties = np.unique(ys, return_inverse=True)[1]
    ranks[order] = (np.bincount(ties, weights=ranks[order]) / np.bincount(ties))[ties]
    tot = float(((ranks - ranks.mean()) ** 2).sum())
    if tot <= 0:
        return None
    rank_means = np.bincount(level, weights=ranks, minlength=k) / counts
    r2 = float((counts * (rank_means - ranks.mean()) ** 2).sum()) / tot
    h = 0.05 * float(y.std())
    ends = np.cumsum(counts)
    starts = ends - counts

    # a target on a lattice (counts, ratings): a cut between two neighbouring values of it
    # is no valley; the window spans them
    spacing = float(np.median(np.diff(np.unique(ys)))) if len(ys) > 1 else 0.0

    def density(at: float, w: float) -> float:
        return float(np.searchsorted(ys, at + w, "right") - np.searchsorted(ys, at - w, "left")) / w

    medians = [float(ys[(a + b - 1) // 2]) for a, b in zip(starts, ends)]
    ratios, weights = [], []
    for j in range(k - 1):
        lo, hi = ys[ends[j] - 1], ys[ends[j]]
        w = max(h, 0.51 * (hi - lo)) if hi - lo <= 1.5 * spacing else h
        inside = min(density(medians[j], w), density(medians[j + 1], w))
        ratios.append(min(1.0, density(0.5 * (lo + hi), w) / inside) if inside > 0 else 1.0)
        weights.append(counts[j] + counts[j + 1])
    dense = float(np.average(ratios, weights=weights))
    return Step(k, purity, dense, r2)
