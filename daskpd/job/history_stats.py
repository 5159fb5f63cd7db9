"""The drift table of a job's runs (:mod:`daskpd.job.history`): :func:`compare` of two
runs (every curve's measures, its noise and its test, its status and cause),
:func:`drift_table` of every consecutive pair, :func:`rank_rows`, the :class:`History`
of a job and its JSON :func:`summary`.  The measures between two curves are
:mod:`.history_curves`; the drawing is :mod:`.history_render`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..results.base import atomic_path, dump_json
from . import history_newold
from .history_curves import align_curves, band_z, curve_noise, curve_range
from .history_runs import Run


#: which importance table a curve's importance comes from
IMPORTANCE_FOR = {"stratpd": "importances", "catstratpd": "importances", "partial_dependence": "pd_variance",
                  "ice": "pd_variance", "ale": "pd_variance", "marginal": "pd_variance"}


#: curve distance scale floor, as a fraction of the largest curve range of the previous run
SCALE_FLOOR = 0.1


#: ``drift_noise`` divides by at least this noise (a fraction of the curve's size)
NOISE_FLOOR = 0.01
#: family-wise false-alarm level of each curve's test (Bonferroni over its points), ``--alpha``
ALPHA = 0.01
#: the order of the statuses in the drift table of the last two runs and on the page
STATUS_ORDER = ("drifted", "noisy", "ok", "n/a", "new", "gone")
#: what the drift table of the last two runs (and the page's sections) are ordered by
RANKED_BY = "status (drifted, noisy, ok, n/a, new, gone), then z (the change in noise units), largest first; then drift"


def _raw(imp: pd.DataFrame, method: str) -> pd.Series:
    """Unnormalised importance per feature (``importance_raw`` when the table has it)."""
    t = imp[imp["method"] == method]
    if not len(t):
        return pd.Series(dtype=float)
    col = "importance_raw" if "importance_raw" in t.columns and t["importance_raw"].notna().any() else "importance"
    return pd.Series(t[col].to_numpy(dtype=float), index=t["feature"].astype(str).to_numpy())


def importance_shares(imp: pd.DataFrame, method: str) -> pd.Series:
    v = _raw(imp, method)
    tot = np.nansum(np.abs(v.to_numpy()))
    return v / tot if tot > 0 else v


def _trial_std(imp: pd.DataFrame, method: str) -> pd.DataFrame:
    """``importance`` and its trial standard deviation ``importance_std`` per feature
    (empty when the table has no ``importance_std``)."""
    t = imp[imp["method"] == method] if "method" in imp.columns else imp.iloc[:0]
    if not len(t) or "importance_std" not in t.columns:
        return pd.DataFrame(columns=["importance", "importance_std"], dtype=float)
    out = pd.DataFrame({"importance": pd.to_numeric(t["importance"], errors="coerce").to_numpy(dtype=float),
                        "importance_std": pd.to_numeric(t["importance_std"], errors="coerce").to_numpy(dtype=float)},
                       index=t["feature"].astype(str).to_numpy())
    return out[~out.index.duplicated()]


def critical_z(m: int, alpha: float = ALPHA, df: float | None = None) -> float:
    """The Bonferroni critical value of ``m`` two-sided tests at family-wise level ``alpha``:
    the ``1 - alpha / (2 m)`` quantile of Student's t with ``df`` degrees of freedom (the
    standard normal when ``df`` is None)."""
    from scipy import stats

    q = 1.0 - alpha / (2.0 * max(int(m), 1))
    return float(stats.norm.ppf(q) if df is None or not np.isfinite(df) else stats.t.ppf(q, df))


def _ranks(imp: pd.DataFrame, method: str) -> pd.Series:
    t = imp[imp["method"] == method]
    return pd.Series(t["rank"].to_numpy(), index=t["feature"].astype(str).to_numpy()) if len(t) else pd.Series(dtype=float)


def _dig(d, *keys):
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def run_trials(manifest: dict, method: str = "importances") -> int | None:
    """The bootstrap trials behind a run's bands of ``method``'s curves: ``[importances]
    n_trials`` for the model-free curves, ``[model] n_trials`` for the model-based ones
    (and their ``pd_variance`` table); None if unknown."""
    paths = ((("spec", "params", "importances", "n_trials"), ("params", "importances", "n_trials"))
             if method in ("importances", *MODEL_FREE_CURVES) else (("spec", "model", "n_trials"),))
    for path in paths:
        v = _dig(manifest, *path)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return int(v)
    return None


#: the stratifying trees matter only to these methods
STRATIFIED = ("stratpd", "catstratpd")
#: the model-free curves (their bands' trials are [importances] n_trials); the binned mean
#: of y reads no tree
MODEL_FREE_CURVES = (*STRATIFIED, "binned_mean")


def pair_cause(prev: dict, cur: dict, method: str) -> str:
    """What changed between two runs of a curve (see the module docstring): ``none``,
    ``data``, ``refit``, ``data+refit`` or ``unknown``."""
    fa, fb = _dig(prev, "input", "fingerprint", "sha256"), _dig(cur, "input", "fingerprint", "sha256")
    same_data = fa is not None and fa == fb
    if method not in STRATIFIED:
        return "none" if same_data else "data"
    sa, sb = _dig(prev, "stratification", "id"), _dig(cur, "stratification", "id")
    if sa is None or sb is None:
        return "unknown"
    if sa == sb:
        return "none" if same_data else "data"
    return "refit" if same_data else "data+refit"


def _status(row: dict, threshold: float) -> str:
    drift = row["drift"]
    over = bool(np.isfinite(drift) and drift > threshold)
    if row["n_common"] < 2 and not np.isfinite(row["curve_distance"]):
        return "noisy" if over else "n/a"
    if row["noise_source"] in ("rows", "none"):  # no calibrated noise to test the drift against
        return "noisy" if over else "ok"
    return "drifted" if np.isfinite(row["drift_sig"]) and row["drift_sig"] > threshold else "ok"


def compare(prev: Run, cur: Run, threshold: float = 0.1, alpha: float = ALPHA) -> pd.DataFrame:
    """Drift rows of ``cur`` against ``prev``, one per (method, feature) curve in either."""
    rows = []
    keys_prev = set(map(tuple, prev.curves[["method", "feature"]].astype(str).drop_duplicates().to_numpy()))
    keys_cur = set(map(tuple, cur.curves[["method", "feature"]].astype(str).drop_duplicates().to_numpy()))
    floors = {}
    for m in {k[0] for k in keys_prev}:
        ranges = [curve_range(prev.curves[(prev.curves["method"] == m) & (prev.curves["feature"] == f)])
                  for (mm, f) in keys_prev if mm == m]
        ranges = [r for r in ranges if np.isfinite(r)]
        floors[m] = SCALE_FLOOR * max(ranges) if ranges else 0.0
    shares, raw, ranks, totals, stds = {}, {}, {}, {}, {}
    for run, tag in ((prev, "prev"), (cur, "cur")):
        for m in set(IMPORTANCE_FOR.values()):
            stds[(tag, m)] = _trial_std(run.importances, m)
            shares[(tag, m)] = importance_shares(run.importances, m)
            raw[(tag, m)] = _raw(run.importances, m)
            ranks[(tag, m)] = _ranks(run.importances, m)
            totals[(tag, m)] = float(np.nansum(np.abs(raw[(tag, m)].to_numpy())))
    empty = pd.Series(dtype=float)
    for method, feature in sorted(keys_prev | keys_cur, key=lambda k: (k[0], k[1])):
        imp_m = IMPORTANCE_FOR.get(method)
        trials = [run_trials(prev.manifest, method), run_trials(cur.manifest, method)]
        dof = float(min(trials) - 1) if None not in trials and min(trials) > 1 else None
        ip = shares.get(("prev", imp_m), empty).get(feature, np.nan)
        ic = shares.get(("cur", imp_m), empty).get(feature, np.nan)
        rawp = raw.get(("prev", imp_m), empty).get(feature, np.nan)
        rawc = raw.get(("cur", imp_m), empty).get(feature, np.nan)
        tot = totals.get(("prev", imp_m), 0.0)
        change = (rawc - rawp) / tot if tot > 0 else np.nan
        rp = ranks.get(("prev", imp_m), empty).get(feature, np.nan)
        rc = ranks.get(("cur", imp_m), empty).get(feature, np.nan)
        row = {"run_id": cur.run_id, "prev_run_id": prev.run_id, "method": method, "feature": feature,
               "importance_prev": float(ip), "importance": float(ic), "importance_change": float(change),
               "rank_prev": float(rp), "rank": float(rc), "cause": pair_cause(prev.manifest, cur.manifest, method)}
        if (method, feature) not in keys_prev or (method, feature) not in keys_cur:
            row.update({"curve_rms": np.nan, "curve_distance": np.nan, "curve_max": np.nan, "support_overlap": np.nan,
                        "n_common": 0, "scale": np.nan,
                        "drift": np.nan, "status": "new" if (method, feature) not in keys_prev else "gone",
                        "noise": np.nan, "noise_source": "none", "drift_noise": np.nan, "z": np.nan,
                        "z_crit": np.nan, "drift_sig": np.nan})
            rows.append(row)
            continue
        a = prev.curves[(prev.curves["method"] == method) & (prev.curves["feature"] == feature)]
        b = cur.curves[(cur.curves["method"] == method) & (cur.curves["feature"] == feature)]
        al = align_curves(a, b, floors.get(method, 0.0))
        row.update({k: v for k, v in al.items() if not k.startswith("_")})
        shape = [al["curve_distance"], al["curve_max"], abs(row["importance_change"])]
        shape = [t for t in shape if np.isfinite(t)]
        terms = shape + ([1.0 - al["support_overlap"]] if np.isfinite(al["support_overlap"]) else [])
        row["drift"] = float(max(terms)) if terms else np.nan
        shape = float(max(shape)) if shape else np.nan
        sp, sc = stds.get(("prev", imp_m)), stds.get(("cur", imp_m))
        sp = tuple(sp.loc[feature]) if sp is not None and feature in sp.index else None
        sc = tuple(sc.loc[feature]) if sc is not None and feature in sc.index else None
        bz = band_z(a, b, al) if al.get("_at") is not None else None
        if bz is not None:
            zc = critical_z(len(bz["z"]), alpha, dof)
            sig = bz["local"][bz["z"] > zc]
            row.update({"noise": float(np.median(bz["se"])), "noise_source": "band", "z": float(np.max(bz["z"])),
                        "z_crit": zc, "drift_sig": float(sig.max()) if len(sig) else 0.0})
        else:
            noise, source = curve_noise(a, b, sp, sc)
            z = float(shape / max(noise, NOISE_FLOOR)) if np.isfinite(noise) and np.isfinite(shape) else np.nan
            # only the trials are a calibrated noise; the rows' estimate ranks, it does not test
            zc = critical_z(1, alpha, dof) if source == "trials" else np.nan
            row.update({"noise": noise, "noise_source": source, "z": z, "z_crit": zc,
                        "drift_sig": (shape if z > zc else 0.0) if np.isfinite(z) and np.isfinite(zc) else np.nan})
        row["drift_noise"] = float(row["drift"] / max(row["noise"], NOISE_FLOOR)) \
            if np.isfinite(row["noise"]) and np.isfinite(row["drift"]) else np.nan
        row["status"] = _status(row, threshold)
        rows.append(row)
    return pd.DataFrame(rows, columns=COLUMNS)


#: the drift table's columns
COLUMNS = ["run_id", "prev_run_id", "method", "feature", "importance_prev", "importance", "importance_change",
           "rank_prev", "rank", "curve_rms", "curve_distance", "curve_max", "support_overlap", "n_common", "scale",
           "drift", "noise", "noise_source", "drift_noise", "z", "z_crit", "drift_sig", "status", "cause"]


def drift_table(runs: list[Run], threshold: float = 0.1, alpha: float = ALPHA) -> pd.DataFrame:
    frames = [compare(a, b, threshold, alpha) for a, b in zip(runs[:-1], runs[1:])]
    if not frames:
        return pd.DataFrame(columns=COLUMNS)
    return pd.concat(frames, ignore_index=True)


def rank_rows(t: pd.DataFrame) -> pd.DataFrame:
    """Drift rows ordered by :data:`RANKED_BY` (NaN last), then by method and feature."""
    if not len(t):
        return t
    order = {s: i for i, s in enumerate(STATUS_ORDER)}
    key = t.assign(_s=t["status"].map(order).fillna(len(order)), _z=t["z"], _d=t["drift"])
    return key.sort_values(["_s", "_z", "_d", "method", "feature"], ascending=[True, False, False, True, True],
                           na_position="last", kind="stable").drop(columns=["_s", "_z", "_d"])


@dataclass
class History:
    job_dir: Path
    runs: list[Run]
    table: pd.DataFrame
    threshold: float
    written: Path | None = None
    features: list[str] | None = field(default=None)
    alpha: float = ALPHA
    #: the newest run's new-against-old comparisons (:mod:`.history_newold`): one row a curve, and their points
    new_vs_old: pd.DataFrame = field(default_factory=pd.DataFrame)
    new_vs_old_points: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: ``--against`` / ``--window``: the pinned run and the newest run's curves against its (``compare``)
    pinned: "Run | None" = None
    against: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: what named the pinned run: "--against RUN_ID", "--window N", or the job spec's [history] key
    pinned_by: str = ""
    #: the job spec's [history] baseline / window when the run it names is not there (not compared), else ""
    pin_note: str = ""
    #: where ``threshold`` / ``alpha`` came from when not given: the job spec's [history] keys, or ""
    levels_by: str = ""

    def drifted(self) -> bool:
        """Whether a curve drifted: between the last two runs, in the newest run's
        new-against-old comparisons, or against the pinned run."""
        return any(len(t) and (t["status"] == "drifted").any()
                   for t in (self.latest_pair(), self.new_vs_old, self.against))

    def latest_pair(self) -> pd.DataFrame:
        if not len(self.table):
            return self.table
        last = self.runs[-1].run_id
        t = self.table[self.table["run_id"] == last]
        return rank_rows(t)

    def summary(self) -> dict:
        """What a scheduler acts on (:func:`summary`)."""
        return summary(self)

    def section_order(self, runs: list[Run] | None = None) -> list[tuple[str, str, str]]:
        """``(method, feature, subtitle)`` of every curve in ``runs`` (default all), in the
        order of the drift table of the last two runs (:data:`RANKED_BY`), curves not in
        that comparison last (by method and feature); restricted to ``features``."""
        runs = self.runs if runs is None else runs
        keys = {(str(m), str(f)) for r in runs for m, f in
                r.curves[["method", "feature"]].drop_duplicates().itertuples(index=False)}
        if self.features is not None:
            keys = {k for k in keys if k[1] in self.features}
        out = []
        for row in self.latest_pair().itertuples(index=False):
            k = (str(row.method), str(row.feature))
            if k in keys:
                keys.discard(k)
                out.append((*k, _subtitle(row)))
        out += [(*k, "") for k in sorted(keys)]
        return out

    def format_latest(self) -> str:
        t = self.latest_pair()
        extra = "\n\n" + history_newold.format_table(self.runs[-1], self.new_vs_old)
        if self.pinned is not None:
            a = rank_rows(self.against)
            extra += (f"\n\n{self.pinned.run_id} -> {self.runs[-1].run_id} (against run {self.pinned.run_id}, "
                      f"from {self.pinned_by}: the curves of the two runs)\n" + a[["method", "feature", "drift", "z", "z_crit", "drift_sig", "status",
                                              "cause"]].to_string(index=False, float_format=lambda v: f"{v:.4f}",
                                                                  na_rep="-"))
        elif self.pin_note:
            extra += f"\n\nno pinned run: {self.pin_note}"
        if len(self.runs) < 2:
            return f"{self.job_dir.name}: 1 run ({self.runs[0].run_id}); nothing to compare yet" + extra
        head = (f"{self.job_dir.name}: {len(self.runs)} runs; {self.runs[-2].run_id} -> {self.runs[-1].run_id} "
                f"(drifted: the change beyond the noise > {self.threshold:g} of the curve's size, at family-wise "
                f"level {self.alpha:g} per curve{'; from ' + self.levels_by if self.levels_by else ''}; sorted by "
                f"{RANKED_BY})")
        cols = ["method", "feature", "importance_change", "curve_distance", "curve_max", "support_overlap", "drift",
                "noise_source", "z", "z_crit", "drift_sig", "status", "cause"]
        with pd.option_context("display.width", 220, "display.max_columns", 20):
            body = t[cols].to_string(index=False, float_format=lambda v: f"{v:.4f}", na_rep="-")
        counts = t["status"].value_counts()
        n, noisy = int(counts.get("drifted", 0)), int(counts.get("noisy", 0))
        tail = f"{n} curve(s) drifted" if n else "no drift beyond the noise and the threshold"
        if noisy:
            tail += (f"; {noisy} curve(s) noisy: drift above the threshold that has no noise estimate to test it "
                     "against (raw drift)")
        return f"{head}\n{body}\n{tail}{extra}"


def _subtitle(row) -> str:
    """A curve's line under its plot title: its status and why."""
    if row.status in ("new", "gone"):
        return str(row.status)
    if not np.isfinite(row.drift):
        return str(row.status)
    if np.isfinite(row.z):
        why = (f"drift {row.drift:.3g}, beyond the noise {row.drift_sig:.3g}; z {row.z:.3g} vs {row.z_crit:.3g} "
               f"({row.noise_source})")
    else:
        why = f"raw drift {row.drift:.3g} (no noise estimate)"
    return f"{row.status}: {why}; cause {row.cause}"


#: version of the drift.json layout
SUMMARY_VERSION = 1


def summary(h: History) -> dict:
    """The JSON summary of the last two runs (``drift.json``, ``--json``): the runs, the
    settings, the counts of each status, every drifted curve with its figures, and every
    curve's row of the drift table."""
    t = h.latest_pair()
    counts = {s: int((t["status"] == s).sum()) for s in STATUS_ORDER} if len(t) else {s: 0 for s in STATUS_ORDER}
    keys = ["method", "feature", "drift", "drift_sig", "noise", "noise_source", "z", "z_crit", "cause"]
    drifted = t[t["status"] == "drifted"][keys].to_dict("records") if len(t) else []
    noisy = t[t["status"] == "noisy"][keys].to_dict("records") if len(t) else []
    pair = [r.run_id for r in h.runs[-2:]] if len(h.runs) >= 2 else []
    strat = {r.run_id: _dig(r.manifest, "stratification") for r in h.runs[-2:]} if pair else {}
    incr = _dig(h.runs[-1].manifest, "incremental") if pair else None
    nvo = history_newold.summary(h.runs[-1], h.new_vs_old)
    out = {"daskpd_drift": SUMMARY_VERSION, "job": h.job_dir.name, "runs": len(h.runs), "compared": pair,
           "threshold": h.threshold, "alpha": h.alpha,
           "status": "drift" if h.drifted() else ("no-drift" if pair or nvo["status"] != "not-compared"
                                                  else "one-run"),
           "counts": counts, "drifted": drifted, "noisy": noisy,
           "stratification": strat, "incremental": incr,
           "curves": t.drop(columns=["n_common"]).to_dict("records") if len(t) else [], "new_vs_old": nvo}
    if h.levels_by:
        out["levels_by"] = h.levels_by
    if h.pinned is not None:
        a = rank_rows(h.against)
        out["against"] = {"run_id": h.pinned.run_id, "by": h.pinned_by,
                          "counts": {st: int((a["status"] == st).sum()) for st in STATUS_ORDER} if len(a) else {},
                          "drifted": a[a["status"] == "drifted"][keys].to_dict("records") if len(a) else [],
                          "curves": a.drop(columns=["n_common"]).to_dict("records") if len(a) else []}
    elif h.pin_note:
        out["against"] = {"run_id": None, "not_compared": h.pin_note}
    return out


def write_summary(h: History, path) -> Path:
    """Write :func:`summary` to ``path`` atomically (strict JSON: NaN as null)."""
    path = Path(path)
    with atomic_path(path) as tmp:
        Path(tmp).write_text(dump_json(summary(h)), encoding="utf-8")
    return path
