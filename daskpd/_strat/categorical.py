"""CatStratPD's finish and result: category effects from the accumulated sums.

The distributed part is the scan (:mod:`daskpd._strat.scan`); the least-squares sums
and their solution are in :mod:`daskpd._strat.categorical_solve`.  Here the solved
effects are placed and shifted:

* groups of categories never seen together in a leaf are placed relative to each other
  by their marginal mean y (as Parr & Wilson's CatStratPD does): each group is shifted
  so that the count-weighted mean of its effects equals the mean y of its rows; a
  category seen only in single-category leaves is a group of its own;
* the whole vector is shifted so that the smallest effect is 0 (like StratPD, which
  starts at 0) or, with ``centered=True``, so that the count-weighted mean effect is 0.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from dask.sizeof import sizeof

from .._engine.distinct import sort_labels
from ..plotting.catstrat import plot_catstratpd
from ..results import CurveResult
from ..results.curves import (
    DEFAULT_BAND,
    anchored_trials,
    band_columns,
    band_is_flat,
    band_note,
    band_settings,
    boolean_note,
    trial_band,
)
from .categorical_gram_solve import solve_gram
from .categorical_system import fold_summaries, solve_buckets, solve_explicit
from .trees import tree_method_of

__all__ = ["CatStratPDResult", "effects_explicit", "result_of_effects", "effects_iterative", "result_from_effects", "result_from_sums",
           "place_groups", "category_index", "category_values", "no_shared_leaf_message"]


def place_groups(effect, group, count, sum_y):
    """Shift each group so that its count-weighted mean effect is its rows' mean y."""
    ok = group >= 0
    out = np.full(len(effect), np.nan)
    if not ok.any():
        return out
    g = group[ok]
    G = int(g.max()) + 1
    cnt = np.bincount(g, weights=count[ok], minlength=G)
    num = np.bincount(g, weights=sum_y[ok] - count[ok] * effect[ok], minlength=G)
    out[ok] = effect[ok] + (num / cnt)[g]
    return out


def _shift(pd_, count, centered):
    ok = np.isfinite(pd_)
    if not ok.any():
        return pd_
    if centered:
        return pd_ - np.sum(pd_[ok] * count[ok]) / np.sum(count[ok])
    return pd_ - np.min(pd_[ok])


def _known_categories(dtype) -> bool:
    return "__UNKNOWN_CATEGORIES__" not in set(map(str, dtype.categories))


def _index_with_dtype(uniques, dtype):
    if dtype is not None:
        try:
            return pd.Index(pd.array(list(uniques), dtype=dtype))
        except (TypeError, ValueError):
            pass
    return pd.Index(uniques, dtype=object) if len(uniques) else pd.Index([], dtype=object)




@dataclass(repr=False)
class CatStratPDResult(CurveResult):
    """CatStratPD partial dependence of ``target`` on categorical ``feature``.

    Arrays are indexed like ``categories`` (the labels as given: strings, ints, or a
    pandas Categorical's values; sorted, or in the Categorical's category order; a
    missing-value level, with ``nan_as_level=True``, comes last):

    Attributes
    ----------
    pd : ndarray
        Effect of the category on the target; min 0 (default) or count-weighted
        mean 0 (``centered=True``).
    count : ndarray
        Rows of the category (x and y present), all leaves.
    count_used : ndarray
        Of those, rows in leaves holding >= 2 categories.
    n_leaves_cat : ndarray
        Leaves holding the category and at least one other.
    group : ndarray
        Disjoint group (0 = most rows): categories connected through shared leaves;
        groups are placed by their marginal mean y.
    marginal_mean : ndarray
        Mean y of the category's rows (no stratification).
    """

    feature: str
    target: str
    categories: pd.Index
    pd: np.ndarray
    count: np.ndarray
    count_used: np.ndarray
    n_leaves_cat: np.ndarray
    group: np.ndarray
    marginal_mean: np.ndarray
    n_rows: int  # rows read
    n_used: int  # rows in leaves with >= 2 categories
    n_ignored: int  # rows in single-category leaves
    n_missing_x: int  # rows dropped: category missing (unless nan_as_level)
    n_bad_y: int  # rows dropped: y missing or +-inf
    n_leaves: int
    n_leaves_used: int
    n_groups: int
    centered: bool = False
    params: dict = field(default_factory=dict)
    trials_pd: np.ndarray | None = None  # (n_trials, n_categories) when bootstrap trials were run
    set_counts: np.ndarray | None = None  # (1 + n_trials, n_categories): rows (trial weight) per category

    kind = "categorical"

    # -- trials and their band (n_trials > 1)

    @property
    def n_trials(self) -> int:
        """Trials run (1: the effects alone, no band)."""
        return 1 if self.trials_pd is None else len(self.trials_pd)

    @property
    def trials_supported(self) -> np.ndarray | None:
        """``(n_trials, n_categories)``: where each trial has an effect (a trial that drew
        no row of a category has none)."""
        return None if self.trials_pd is None else np.isfinite(self.trials_pd)

    def _anchor(self) -> int | None:
        """The category every trial is aligned on: the lowest one (its effect is 0 by
        definition); None for centred effects (each trial is centred by its own rows)."""
        ok = np.isfinite(self.pd)
        if self.centered or not ok.any():
            return None
        return int(np.flatnonzero(ok)[np.argmin(self.pd[ok])])

    def trial_curves(self) -> np.ndarray | None:
        """The trials' effects aligned on ``pd`` (at its lowest category, or by their mean
        difference for a trial without it, or for centred effects); None without trials."""
        return anchored_trials(self.trials_pd, self.pd, self._anchor())

    def band(self) -> dict | None:
        """``{"std", "lo", "hi", "n"}`` per category: the band centred on ``pd`` from the
        leaf-bootstrap trials (see :func:`daskpd.results.curves.trial_band`), the leaves
        a category appears in (with another) as its clusters; None with fewer than 2
        trials."""
        if self.trials_pd is None or len(self.trials_pd) < 2:
            return None
        return trial_band(self.trials_pd, tuple(self.params.get("band", DEFAULT_BAND)), center=self.pd, align=True,
                          anchor=self._anchor(), clusters=np.maximum(self.n_leaves_cat, 1))

    def is_flat(self) -> bool:
        """Whether the effects are not distinguishable from flat (the plot then draws them on the
        target's scale); False without trials."""
        return band_is_flat(self)

    def __repr__(self) -> str:
        return (f"CatStratPDResult(feature={self.feature!r}, target={self.target!r}, "
                f"categories={len(self.categories)}, groups={self.n_groups}, leaves={self.n_leaves}, "
                f"rows={self.n_rows}, ignored={self.n_ignored}, centered={self.centered})")

    def __len__(self) -> int:
        return len(self.categories)

    def to_series(self) -> pd.Series:
        """``pd`` indexed by category label."""
        return pd.Series(self.pd, index=self.categories, name=f"pd_{self.feature}")

    def curve(self) -> dict:
        extra = {"count_used": self.count_used, "leaves": self.n_leaves_cat.astype("int64"),
                 "group": self.group.astype("int64"), "marginal_mean": self.marginal_mean,
                 **band_columns(self.band())}
        return {"positions": self.categories, "pd": self.pd, "count": self.count, "supported": None,
                "extra": extra}

    def metadata(self) -> dict:
        return {
            "method": "catstratpd", "feature": self.feature, "target": self.target, "n_rows": self.n_rows,
            "n_used": self.n_used, "n_ignored": self.n_ignored, "n_missing_x": self.n_missing_x,
            "n_bad_y": self.n_bad_y, "n_leaves": self.n_leaves, "n_leaves_used": self.n_leaves_used,
            "n_groups": self.n_groups, "n_categories": len(self.categories), "centered": self.centered,
            "params": self.params,
        }

    def summary(self) -> str:
        """A few lines of at most about 100 characters: the curve, then where the rows went."""
        ok = np.isfinite(self.pd)
        lo, hi = (np.min(self.pd[ok]), np.max(self.pd[ok])) if ok.any() else (np.nan, np.nan)
        big = int(np.sum(self.group == 0)) if self.n_groups else 0
        return (f"{self.feature}: {len(self.categories):,} categories, pd range [{lo:.4g}, {hi:.4g}]"
                f"{' (mean-centred)' if self.centered else ''}\n"
                f"  {self.n_groups:,} disjoint group(s) (largest: {big:,} categories); {self.n_leaves:,} leaves, "
                f"{self.n_leaves_used:,} with >= 2 categories\n"
                f"  rows used {self.n_used:,} of {self.n_rows:,}; ignored {self.n_ignored:,} in single-category "
                f"leaves\n"
                f"  dropped {self.n_missing_x:,} missing {self.feature}, {self.n_bad_y:,} missing/inf {self.target}"
                f"{boolean_note(self)}{band_note(self)}")

    def plot(self, ax=None, **kwargs):
        """Sorted effects; bars with counts for few categories, a strip for many.

        See :func:`daskpd.plotting.catstrat.plot_catstratpd` for the options
        (``kind='auto'|'bar'|'strip'``, ``top_k``, ``label_k``, ...).
        """
        return plot_catstratpd(self, ax=ax, **kwargs)



def category_values(distinct: np.ndarray, dtype) -> np.ndarray:
    """A categorical feature's levels in result order: a pandas Categorical's category
    order (levels it does not list last), else sorted (as :func:`sort_labels`)."""
    if isinstance(dtype, pd.CategoricalDtype) and _known_categories(dtype):
        vals = np.asarray(distinct, dtype=object)
        pos = dtype.categories.get_indexer(pd.Index(vals, dtype=object))
        pos = np.where(pos < 0, len(dtype.categories), pos)
        return vals[np.argsort(pos, kind="stable")]
    return sort_labels(distinct)


def category_index(values: np.ndarray, dtype) -> pd.Index:
    """The result's labels (``values`` as :func:`category_values` orders them, a missing
    level possibly last), with the feature's dtype."""
    if isinstance(dtype, pd.CategoricalDtype):
        if _known_categories(dtype):
            return pd.CategoricalIndex(values, dtype=dtype)
        return pd.CategoricalIndex(values)
    return _index_with_dtype(values, dtype)


def no_shared_leaf_message(res: CatStratPDResult) -> str | None:
    """The warning when no leaf compares two categories (None when one does)."""
    if not len(res.categories) or res.n_leaves_used > 0:
        return None
    return (f"CatStratPD for feature {res.feature!r}: no leaf of the stratifying tree holds two or more "
            "categories, so every category is its own group, placed at its marginal mean y: the other columns "
            "separate the categories completely. Raise min_samples_leaf, stratify on fewer columns "
            "(stratify_on=...), or give more rows.")



def _params(fs, job) -> dict:
    return {
        "min_samples_leaf": fs.min_samples_leaf,
        "tree_method": tree_method_of(fs.tree),
        "tree_leaves": fs.n_leaves,
        "stratified_on": list(fs.other),
        "random_state": job.random_state,
        "n_trials": job.n_trials,
        "nan_as_level": bool(fs.coder.nan_level),
        **(job.finish_options.run_params or {}),
        **band_settings(job.finish_options, job.n_sets),
    }


def _counters(summaries: list):
    return next((s.counters for s in summaries if s.counters is not None), None)


def _result(fs, job, effects, summaries):
    return result_of_effects(fs, job, effects, _counters(summaries))


def result_of_effects(fs, job, effects: list, counters=None):
    """The CatStratPDResult of one feature of a scan job from its solved effects (one
    :class:`~daskpd._strat.categorical_solve.Effects` per statistics set)."""
    opts = job.finish_options
    return result_from_effects(fs.feature, job.target, fs.coder.labels(), effects, counters,
                               dtype=opts.dtypes.get(fs.feature), centered=bool(opts.centered),
                               params=_params(fs, job))


def effects_explicit(fs, states: list, summaries: list, job):
    """The CatStratPDResult of one feature from its explicit G per set (summed over the
    buckets) and its buckets' summaries: direct solves."""
    setups = fold_summaries(summaries, fs.coder.n_keys, job.n_sets)
    effects = [solve_explicit(st, su, fs.coder.n_keys) for st, su in zip(states, setups)]
    return _result(fs, job, effects, summaries)


def effects_iterative(fs, refs: list, summaries, job, local: bool = False):
    """The CatStratPDResult of one feature whose buckets stayed on the workers
    (``refs``), by conjugate gradients with products summed over the buckets
    (``local``: buckets held by this process, their products computed here).
    ``summaries``: the buckets' summaries, or their :func:`fold_for_solve` (folded where
    they were made: the driver then receives the folded vectors, not every bucket's)."""
    folded = summaries if isinstance(summaries, Folded) else fold_for_solve(summaries, fs.coder.n_keys, job.n_sets)
    effects = solve_buckets(refs, folded.setups, fs.coder.n_keys, local=local)
    return result_of_effects(fs, job, effects, folded.counters)


@dataclass
class Folded:
    """A feature's bucket summaries folded for its solve: the per-set ``setups`` of
    :func:`~daskpd._strat.categorical_system.fold_summaries` and the scan's counters."""

    setups: list
    counters: tuple | None


def fold_for_solve(summaries: list, K: int, n_sets: int) -> Folded:
    """:class:`Folded` of the buckets' summaries (a task next to them, on a cluster)."""
    return Folded(fold_summaries(summaries, K, n_sets), _counters(summaries))


# dask's memory manager counts it by its arrays
sizeof.register(Folded)(lambda o: sum(v.nbytes for su in o.setups for v in su.values() if isinstance(v, np.ndarray)))


def result_from_sums(feature: str, target: str, labels, per_set: list, **kw) -> "CatStratPDResult":
    """:func:`result_from_effects` of summed normal equations (one per statistics set)."""
    return result_from_effects(feature, target, labels, [solve_gram(s) for s in per_set], per_set[0].counters, **kw)


def result_from_effects(feature: str, target: str, labels, effects: list, counters=None, *, dtype=None,
                        centered: bool = False, params: dict | None = None) -> "CatStratPDResult":
    """Place and shift the effects of every statistics set (``effects[0]``: all rows;
    ``effects[t]``: trial t) and build the result (categories with rows only)."""
    out = [(_shift(place_groups(e.effect, e.group, e.count, e.sum_y), e.count, centered), e) for e in effects]
    pd0, e = out[0]
    counters = counters or (0, 0, 0)
    keep = e.count > 0
    labels = np.asarray(labels, dtype=object) if np.asarray(labels).dtype == object else np.asarray(labels)
    index = category_index(labels[keep], dtype)
    count, count_used = e.count[keep], e.count_used[keep]
    if np.all(count == np.round(count)):
        count, count_used = count.astype("int64"), count_used.astype("int64")
    with np.errstate(invalid="ignore", divide="ignore"):
        marginal = e.sum_y[keep] / e.count[keep]
    p = dict(params or {})
    p["solver"] = e.solver
    return CatStratPDResult(
        feature=feature, target=target, categories=index, pd=pd0[keep], count=count, count_used=count_used,
        n_leaves_cat=e.n_leaves_cat[keep], group=e.group[keep], marginal_mean=marginal, n_rows=int(counters[0]),
        n_used=int(round(float(e.count_used.sum()))), n_ignored=int(round(e.n_ignored)),
        n_missing_x=int(counters[1]), n_bad_y=int(counters[2]), n_leaves=e.n_leaves,
        n_leaves_used=e.n_leaves_used, n_groups=e.n_groups, centered=bool(centered), params=p,
        trials_pd=np.vstack([o[0][keep] for o in out[1:]]) if len(out) > 1 else None,
        set_counts=np.vstack([o[1].count[keep] for o in out]))
