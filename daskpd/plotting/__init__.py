"""Plotting, kept apart from computation; matplotlib is imported only when drawing.

One module per family: :mod:`.strat` (StratPD), :mod:`.catstrat` (CatStratPD),
:mod:`.importance` (importance bars and curve grids), :mod:`.model` (FPD, ICE, ALE,
marginal, PD variance), :mod:`.comparison` (the comparison figure), :mod:`.interaction` (the
H-statistic's heat map).  Result objects' ``plot()`` methods call
these functions.  :class:`PartialDependenceDisplay` (:mod:`.display`) is scikit-learn's
display, computed by daskpd (imported on first use).  What they all draw with (pyplot,
axes, tick labels, count bars) is in :mod:`._base`, which imports nothing of daskpd.
"""
from ._base import (COUNT_FRACTION, MAX_LABELS, count_bars, fit_figure, fit_ticklabels, get_axes, label_categories,
                    new_figure, pyplot)

def __getattr__(name):
    if name == "PartialDependenceDisplay":
        from .display import PartialDependenceDisplay

        return PartialDependenceDisplay
    raise AttributeError(f"module 'daskpd.plotting' has no attribute {name!r}")
