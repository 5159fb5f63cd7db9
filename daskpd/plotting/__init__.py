"""Plotting, kept apart from computation; matplotlib is imported only when drawing.

One module per family: :mod:`.strat` (StratPD), :mod:`.catstrat` (CatStratPD),
:mod:`.importance` (importance bars and curve grids), :mod:`.model` (FPD, ICE, ALE,
marginal, PD variance), :mod:`.comparison` (the comparison figure), :mod:`.interaction` (the
H-statistic's heat map).  Result objects' ``plot()`` methods call
these functions.  :class:`PartialDependenceDisplay` (:mod:`.display`) is scikit-learn's
display, computed by daskpd (imported on first use).  What they all draw with (pyplot,
axes, tick labels, count bars) is in :mod:`._base`, which imports nothing of daskpd.
"""
# what the plotting functions of daskpd draw with, re-exported (``from daskpd.plotting import pyplot``)
from ._base import COUNT_FRACTION as COUNT_FRACTION
from ._base import MAX_LABELS as MAX_LABELS
from ._base import count_bars as count_bars
from ._base import fit_figure as fit_figure
from ._base import fit_ticklabels as fit_ticklabels
from ._base import get_axes as get_axes
from ._base import label_categories as label_categories
from ._base import new_figure as new_figure
from ._base import pyplot as pyplot


def __getattr__(name):
    if name == "PartialDependenceDisplay":
        from .display import PartialDependenceDisplay

        return PartialDependenceDisplay
    raise AttributeError(f"module 'daskpd.plotting' has no attribute {name!r}")
