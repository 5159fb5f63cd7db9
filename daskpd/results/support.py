"""How many rows a model-free curve stands on: its support, and the flag the importance
table carries for it.

A StratPD or CatStratPD curve is estimated only from rows whose leaf of the stratifying
tree compares them with another value of the feature: a leaf holding a single x value
(or a single category) carries no slope (no delta).  :func:`curve_support` counts them
from what every curve carries:

* StratPD: the rows in leaves holding two or more x values (``n_used``), at most the
  rows at the positions the curve has an estimate at (``count`` where ``supported``);
* CatStratPD: the rows in leaves holding two or more categories (``count_used``) of the
  categories that have an effect.

:func:`support_flag` grades them against the rows with a value of the feature and of the
target (``n_used + n_ignored``):

* ``"no_support"``: no row -- there is no estimate (a categorical curve whose categories
  never share a leaf is only their marginal means, placed side by side);
* ``"low_support"``: fewer than :data:`LOW_SUPPORT_ROWS` rows, or fewer than
  :data:`LOW_SUPPORT_SHARE` of the rows with a value (most of the feature's rows sit in
  leaves that the other columns pin it down in; the curve's own warning says the same);
* ``"ok"``.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["curve_support", "support_flag", "support_order", "no_support_reason", "LOW_SUPPORT_ROWS", "LOW_SUPPORT_SHARE",
           "SUPPORT_LEVELS", "SUPPORT_NOTE"]

#: a curve estimated from fewer rows than this has low support: at the default leaf sizes
#: (15 rows numeric, 5 categorical) that is a handful of leaves, and one leaf's noise moves
#: the whole curve
LOW_SUPPORT_ROWS = 100
#: a curve estimated from less than this share of the rows with a value has low support:
#: the other columns pin the feature down in most leaves, so the estimate speaks for the
#: few leaves that still compare values (the threshold of the curve's "could not
#: contribute" warning)
LOW_SUPPORT_SHARE = 0.5
#: the flags, best first (the order of the importance table's tiers)
SUPPORT_LEVELS = ("ok", "low_support", "no_support")
#: one line saying what the flags mean
SUPPORT_NOTE = (f"low_support: fewer than {LOW_SUPPORT_ROWS} rows, or under {LOW_SUPPORT_SHARE:.0%} of the rows with a "
                "value, compared with\nanother value in their leaf (ranked after the supported features); "
                "no_support: none\n(importance NaN, ranked last)")


def curve_support(res) -> tuple[float, float]:
    """``(rows_used, rows_with_value)`` of a StratPD / CatStratPD result (see the module
    docstring); ``rows_with_value``: rows with the feature and the target present."""
    with_value = float(res.n_used) + float(res.n_ignored)
    pdv = np.asarray(res.pd, dtype="float64")
    if getattr(res, "kind", None) == "categorical":
        used = float(np.asarray(res.count_used, dtype="float64")[np.isfinite(pdv)].sum())
    else:
        ok = np.asarray(res.supported, dtype=bool) & np.isfinite(pdv)
        used = min(float(res.n_used), float(np.asarray(res.count, dtype="float64")[ok].sum()))
    return used, with_value


def support_flag(rows_used: float, rows_with_value: float) -> str:
    """``"ok"``, ``"low_support"`` or ``"no_support"`` (see the module docstring)."""
    if not rows_used > 0:
        return "no_support"
    if rows_used < LOW_SUPPORT_ROWS or rows_used < LOW_SUPPORT_SHARE * rows_with_value:
        return "low_support"
    return "ok"


def no_support_reason(res) -> str:
    """Why a curve with no support has none, and what would give it some."""
    if getattr(res, "kind", None) == "categorical":
        return ("no leaf of its tree holds two categories: the other columns separate them completely; raise "
                "min_samples_leaf (larger leaves) or stratify on fewer columns")
    if float(res.n_used) <= 0:
        return ("every row fell in a leaf holding a single x value: the other columns pin it down; raise "
                "min_samples_leaf (larger leaves) or stratify on fewer columns (a copy of the feature among them?)")
    m = res.params.get("min_slopes_per_x", 5)
    return (f"no x position has min_slopes_per_x={m} leaf slopes ({res.n_leaves} leaves); lower min_slopes_per_x or "
            "min_samples_leaf, or give more rows")


def support_order(table: pd.DataFrame, sort_by: str) -> pd.DataFrame:
    """``table`` sorted by ``sort_by`` (descending) within its support tiers: the
    supported features first, then ``low_support``, then ``no_support`` (NaN measures);
    a table without a ``support`` column by ``sort_by`` alone."""
    if "support" not in table.columns:
        return table.sort_values(sort_by, ascending=False, kind="stable", na_position="last")
    tier = table["support"].map({k: i for i, k in enumerate(SUPPORT_LEVELS)}).fillna(0).to_numpy()
    key = pd.DataFrame({"tier": tier, "v": -table[sort_by].to_numpy(dtype="float64")}, index=table.index)
    order = key.sort_values(["tier", "v"], kind="stable", na_position="last").index
    return table.loc[order]
