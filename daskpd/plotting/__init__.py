"""Plotting, kept apart from computation; matplotlib is imported only when drawing.

One module per family: :mod:`.strat` (StratPD), :mod:`.catstrat` (CatStratPD),
:mod:`.importance` (importance bars and curve grids), :mod:`.model` (FPD, ICE, ALE,
marginal, PD variance, comparison figure).  Result objects' ``plot()`` methods call
these functions.  :class:`PartialDependenceDisplay` (:mod:`.display`) is scikit-learn's
display, computed by daskpd (imported on first use).
"""


def _plt():
    """Import pyplot lazily, with a non-interactive backend when there is no display."""
    import os

    import matplotlib

    if not os.environ.get("DISPLAY") and not os.environ.get("MPLBACKEND"):
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _ax(ax=None, figsize=(6, 4)):
    plt = _plt()
    if ax is None:
        _, ax = plt.subplots(figsize=figsize)
    return ax


#: pyplot, imported lazily (the public name for modules outside plotting/)
pyplot = _plt


def __getattr__(name):
    if name == "PartialDependenceDisplay":
        from .display import PartialDependenceDisplay

        return PartialDependenceDisplay
    raise AttributeError(f"module 'daskpd.plotting' has no attribute {name!r}")
