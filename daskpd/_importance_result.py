"""The importance table of a model-free request: the three measures of one curve
(:func:`curve_measures`: importance, impact, pd_variance; their definitions in
:mod:`daskpd._importance`), normalised over the features, and :class:`ImportanceResult`
(the table, the curves it was measured on, its trials' spread and notes).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .plotting.importance import plot_curves, plot_importances
from .results import Result, table_frame
from .results.curves import repeats_note
from .results.support import SUPPORT_NOTE, support_order

__all__ = ["ImportanceResult", "curve_measures", "normalize_measures", "curve_arrays", "MEASURES", "MEASURE_SHORT",
           "MEASURE_SENTENCES"]

#: the three measures, in table-column order
MEASURES = ("importance", "impact", "pd_variance")

#: a few words per measure, for summaries
MEASURE_SHORT = {"importance": "mean |PD| weighted by rows", "impact": "mean |PD| over values",
                 "pd_variance": "spread of the curve"}

#: one sentence per measure, for the HTML report
MEASURE_SENTENCES = {
    "importance": "importance: how far the feature moves the target for the typical row -- the mean |PD| "
                  "weighted by the rows at each value (stratx's importance); tables are sorted by it by default, "
                  "because it ranks the features by their effect on the data as they are.",
    "impact": "impact: the same mean |PD| with every value (or category) counted once, whatever its rows -- "
              "high for a feature that matters a lot over values few rows have.",
    "pd_variance": "pd_variance: how much the curve varies (Greenwell et al.'s flatness: the standard deviation "
                   "of PD over the values, the range / 4 over categories), whatever its zero.",
}


def curve_measures(pd_values, counts, kind: str) -> tuple[float, float, float]:
    """``(importance, impact, pd_variance)`` of one curve, in units of the target.

    ``pd_values``: PD at each position (NaN where there is no estimate; such positions
    are ignored); ``counts``: rows at each position (the importance weights); ``kind``:
    ``"numeric"`` or ``"categorical"``.  A curve with no estimate gives NaNs; a
    single-position curve has ``pd_variance`` NaN for a numeric feature (ddof=1).
    """
    if kind not in ("numeric", "categorical"):
        raise ValueError(f"kind must be 'numeric' or 'categorical'; got {kind!r}")
    pdv = np.asarray(pd_values, dtype="float64")
    cnt = np.asarray(counts, dtype="float64")
    if pdv.shape != cnt.shape:
        raise ValueError(f"pd_values and counts differ in shape: {pdv.shape} vs {cnt.shape}")
    m = np.isfinite(pdv)
    if not m.any():
        return np.nan, np.nan, np.nan
    v, c = pdv[m], cnt[m]
    if kind == "categorical":
        v = v - v.mean()
    a = np.abs(v)
    impact = float(a.mean())
    tot = c.sum()
    importance = float((a * c).sum() / tot) if tot > 0 else impact
    if kind == "numeric":
        pd_var = float(np.std(v, ddof=1)) if len(v) > 1 else np.nan
    else:
        pd_var = float((v.max() - v.min()) / 4.0)
    return importance, impact, pd_var


def normalize_measures(values: np.ndarray) -> np.ndarray:
    """Divide each column by its (NaN-ignoring) sum over the rows (features)."""
    values = np.asarray(values, dtype="float64")
    tot = np.nansum(values, axis=0, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(tot > 0, values / np.where(tot > 0, tot, 1.0), values)


def curve_arrays(res, n_sets: int):
    """[(pd, counts) for statistics set 0..n_sets-1] on the curve's positions (set 0:
    all rows; set t: trial t's curve and weights)."""
    counts = np.asarray(res.set_counts, dtype="float64")
    out = [(np.asarray(res.pd, dtype="float64"), counts[0])]
    for t in range(1, n_sets):
        if res.trials_pd is None:
            raise RuntimeError(f"feature {res.feature!r}: trial columns were aggregated but the curve has no trials_pd")
        out.append((np.asarray(res.trials_pd[t - 1], dtype="float64"), counts[t]))
    return out


@dataclass(repr=False)
class ImportanceResult(Result):
    """Importances of every feature plus the curves they were computed from.

    The three measures, each from the feature's StratPD / CatStratPD curve:

    * **importance**: how far the feature moves the target for the typical row -- the
      mean ``|PD|`` weighted by the rows at each value (stratx's importance).  The table is
      sorted by it (``sort_by``) because it ranks the features by their effect on the
      data as they are distributed, which is what a reader of the top rows wants.
    * **impact**: the same mean ``|PD|`` with every value (or category) counted once,
      whatever its rows: high for a feature that matters a lot over values few rows have.
    * **pd_variance**: how much the curve varies (Greenwell et al.'s flatness: the
      standard deviation of PD over the values, range / 4 over categories), whatever
      its zero.

    Attributes
    ----------
    table : DataFrame
        Indexed by feature, sorted by ``sort_by`` (descending): ``kind``,
        ``importance``, ``impact``, ``pd_variance`` (normalised to sum to 1 when
        ``normalize``), with ``*_std`` (trials), ``*_pvalue`` (permutations), ``*_raw``
        (units of the target), ``n_positions`` (positions/categories with an estimate)
        and ``n_rows`` (rows at them).
    curves : dict
        ``{feature: StratPDResult | CatStratPDResult}``.
    extra_curves : dict
        The curves of the extra estimators asked for (``estimators=``), by estimator
        then feature: ``{"binned_mean": {feature: BinnedMeanResult}}`` (empty when none).
    trials : DataFrame or None
        Long table (trial, feature, the three measures).
    null : DataFrame or None
        Long table of the permutation draws (permutation, feature, raw measures).
    n_passes : int
        Passes over the data (2: sample + one scan; 3 when the sample was drawn again,
        see ``daskpd._engine.sample_pass.SampleJob``).
    """

    table: pd.DataFrame
    curves: dict
    target: str
    kinds: dict
    n_rows: int
    n_partitions: int
    n_passes: int
    sample_rows: int
    n_trials: int
    trials: pd.DataFrame | None = None
    null: pd.DataFrame | None = None
    params: dict = field(default_factory=dict)
    # seconds: sample_s, fit_s, scan_s (pipeline; the scan's graph also finishes the curves), finalize_s
    # (the measures, on the driver), pvalues_s
    timings: dict = field(default_factory=dict)
    # with keep_state / stratification=: the stratification the scan ran under and the merged sums
    stratification: object = field(default=None, repr=False, compare=False)
    state: object = field(default=None, repr=False, compare=False)
    # with base_state: the sums of ``data`` alone (the new files), before they were added to base_state's
    new_state: object = field(default=None, repr=False, compare=False)
    # estimators=: {estimator: {feature: result}}
    extra_curves: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def n_partition_reads(self) -> int:
        """Partition reads: every partition once per pass."""
        return self.n_passes * self.n_partitions

    @property
    def features(self) -> list[str]:
        """Features, most important first."""
        return list(self.table.index)

    def __repr__(self) -> str:
        top = ", ".join(f"{f}={v:.3g}" for f, v in self.table[self.params.get("sort_by", "importance")].head(5).items())
        return (f"ImportanceResult(target={self.target!r}, features={len(self.table)}, rows={self.n_rows}, "
                f"trials={self.n_trials}, passes={self.n_passes}; top: {top})")

    def to_frame(self) -> pd.DataFrame:
        """:attr:`table` as an importance table: feature, kind, importance, rank (1 = most
        important among the supported features; then ``low_support``, then
        ``no_support``), then the other measures, in the table's order."""
        t = self.table
        ranked = support_order(t, "importance").index
        rank = pd.Series(np.arange(1, len(t) + 1), index=ranked).reindex(t.index).to_numpy()
        return table_frame(t.index, t["kind"], t["importance"],
                           {c: t[c].to_numpy() for c in t.columns if c not in ("kind", "importance")}, rank=rank)

    def metadata(self) -> dict:
        return {"method": "importances", "target": self.target, "kinds": self.kinds, "n_rows": self.n_rows,
                "n_partitions": self.n_partitions, "n_passes": self.n_passes, "sample_rows": self.sample_rows,
                "n_trials": self.n_trials, "params": self.params, "timings": self.timings}

    def summary(self) -> str:
        cols = [c for c in ("importance", "importance_std", "impact", "pd_variance", "importance_pvalue",
                            "support_share", "support") if c in self.table]
        sort_by = self.params.get("sort_by", "importance")
        shown = self.table[cols].copy()
        if "support_share" in shown:
            shown["support_share"] = [f"{v:.0%}" for v in shown["support_share"]]
        flagged = "support" in shown and (shown["support"] != "ok").any()
        left = self.params.get("skipped_features") or {}
        target = f"{self.target!r}" + (" (boolean, read as 0/1)" if self.params.get("target_boolean") else "")
        return (f"importances of {len(self.table)} features for {target} ({self.n_rows:,} rows, "
                f"{self.n_passes} passes over {self.n_partitions} partitions, trials={self.n_trials})\n"
                f"sorted by {sort_by} ({MEASURE_SHORT[sort_by]}); "
                + "; ".join(f"{m}: {MEASURE_SHORT[m]}" for m in MEASURES if m != sort_by) + "\n"
                + shown.to_string(float_format=lambda v: f"{v:.4g}")
                + (f"\n{SUPPORT_NOTE}" if flagged else "")
                + (f"\nleft out of the default features: {', '.join(f'{f} ({w})' for f, w in left.items())}"
                   if left else "")
                + repeats_note(self.params))

    def plot(self, ax=None, **kwargs):
        """Horizontal bars (error bars = trial standard deviation); see plot_importances."""
        return plot_importances(self, ax=ax, **kwargs)

    def plot_curves(self, top_k: int = 6, **kwargs):
        """Grid of the top-k features' curves; see plotting.importance.plot_curves."""
        return plot_curves(self, top_k=top_k, **kwargs)
