"""``daskpd history OUTPUT/JOB_NAME``: how each feature moved between consecutive runs.

Runs are the complete run directories of the job (those holding ``manifest.json``),
ordered by run id (the default ids are UTC timestamps and sort in time order; so do
ISO dates).  For every consecutive pair (previous, current) and every curve
(method, feature) the drift table has:

``importance_prev``, ``importance``
    the feature's share of the total importance in each run (its importance divided
    by the sum over the run's features).  Curves of StratPD/CatStratPD use the
    ``importances`` table, model-based curves the ``pd_variance`` one; NaN if the job
    computed no importance.
``importance_change``
    the change of the feature's *unnormalised* importance (``importance_raw``, in
    units of the target), divided by the previous run's total (sum over features):
    0.05 = the feature gained five percent of the previous total.  Unlike a change
    of shares, this does not move every feature when one of them changes.
``curve_rms``
    root-mean-square difference of the two curves, in units of the target, after
    centring each on the common support (partial dependence is defined up to an
    additive constant: StratPD is 0 at its leftmost supported x, which moves when
    the support does).  Numeric features: both curves are linearly interpolated on
    101 evenly spaced points of the *overlap* of their supported x ranges.
    Categorical features: the categories both runs estimated.
``curve_distance``
    ``curve_rms / scale`` with ``scale`` the larger of the two curves' ranges (max -
    min on the common support), floored at 10% of the largest curve range of the
    previous run (all features of the same method).  So 0.1 means "the curve moved
    by a tenth of its own size", and the noise of a flat, irrelevant feature is
    measured against the effects that matter rather than against its own noise.
``curve_max``
    the largest local move of the curve, a fraction of the same ``scale``: the two
    curves' difference on the common points, less its row-weighted median (so the
    rows whose part of the curve did not move stay at 0, whatever the constant PD is
    defined up to),
    smoothed over a window of 5 of the 101 grid points (numeric: 5% of the range, so
    a single noisy point does not count as a move), then the largest absolute value.
    A change confined to part of the range (the right end of a curve moving from
    -50k to -35k over the last quarter of the rows) is diluted by ``curve_distance``'s
    average (0.07) but not by this maximum (0.3).  Categorical: the common
    categories holding at least 1% of the rows in both runs (all common categories
    when the curves have no counts), unsmoothed.
``support_overlap``
    numeric: length of the overlap of the supported x ranges / length of their
    union; categorical: Jaccard index of the sets of estimated categories.
``scale``
    the unit of the fractions: the larger of the two curves' ranges on the common
    support, floored as ``curve_distance`` says.
``drift``
    the raw drift: ``max(curve_distance, curve_max, |importance_change|, 1 -
    support_overlap)``; missing terms (NaN) are ignored.
``noise``, ``noise_source``, ``z``, ``z_crit``, ``drift_sig``
    the drift against the noise of the two runs.  ``"band"`` when both curves have a
    band (``pd_std``, from bootstrap trials): :func:`band_z` re-anchors both curves at a
    common point and divides their difference at every common point by
    ``sqrt(s_prev^2 + s_cur^2)`` (plus the anchor's spread); ``z`` is the largest,
    ``z_crit`` the Bonferroni critical value of the points at family-wise level
    ``alpha`` (Student's t with the trials' degrees of freedom: ``[importances] n_trials``
    for StratPD/CatStratPD, ``[model] n_trials`` for the model-based curves), ``drift_sig`` the
    largest local move (``curve_max``'s measure) among the points beyond ``z_crit``;
    ``noise`` the median standard error (a fraction of ``scale``).  Otherwise
    ``"trials"`` (the importance's trial standard deviation: ``noise = sqrt(std_prev**2
    + std**2) / max(importance_prev, importance)``, ``z`` = the shape's drift / noise),
    ``"rows"`` (``sqrt(P_prev / N_prev + P / N)``, the relative standard error of a point
    estimated from ``N / P`` rows: a ranking, not a test, so ``z_crit`` is NaN) or
    ``"none"``.
``drift_noise``
    ``drift / max(noise, 0.01)``.
``status``
    ``drifted`` when ``drift_sig > threshold`` (the change is beyond the noise and
    larger than the threshold); ``ok``; ``noisy`` when the raw drift exceeds the
    threshold and there is no calibrated noise (``rows`` or ``none``) to test it
    against; ``n/a`` when the curves share fewer than two points; ``new`` / ``gone``
    when the curve exists in only one of the two runs.
``cause``
    :func:`pair_cause`: ``data`` (both runs' ``manifest["stratification"]["id"]``
    agree), ``refit`` (the ids differ, the input fingerprint does not), ``data+refit``,
    ``none`` (same id, same input) or ``unknown`` (no id); model-based curves, which
    use no trees: ``data`` or ``none``.

The table of the last two runs and the history page's sections are ordered by
:data:`RANKED_BY`.  docs/jobs.md, "History and drift", has the full account.

Outputs (``OUTPUT/JOB_NAME/history/`` by default, replaced atomically):
``drift.parquet`` (every consecutive pair), ``drift.json`` (:func:`summary`, for a
scheduler), ``history.html`` (self-contained: the
drift table of the last two runs, the importance of each feature across runs, and a
plot of each feature's curves across the last ``N`` runs) and ``plots/*.png``.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from .history_newold import HistoryError

__all__ = ["HistoryError", "History", "history", "load_runs", "unfinished_newest", "curve_distance", "drift_table", "compare", "band_z",
           "critical_z", "pair_cause", "run_trials", "summary", "write_summary", "rank_rows", "Run", "COLUMNS",
           "IMPORTANCE_FOR", "GRID_POINTS", "SCALE_FLOOR", "MAX_WINDOW", "NOISE_FLOOR", "ALPHA", "STATUS_ORDER",
           "RANKED_BY", "curve_noise"]

#: which importance table a curve's importance comes from
IMPORTANCE_FOR = {"stratpd": "importances", "catstratpd": "importances", "partial_dependence": "pd_variance",
                  "ice": "pd_variance", "ale": "pd_variance", "marginal": "pd_variance"}
#: points of the common grid for numeric curves
GRID_POINTS = 101
#: curve distance scale floor, as a fraction of the largest curve range of the previous run
SCALE_FLOOR = 0.1
#: grid points the local differences are averaged over before ``curve_max`` takes their maximum
MAX_WINDOW = 5
#: categorical ``curve_max``: only categories holding at least this share of the rows in both runs
MAX_CATEGORY_SHARE = 0.01
#: ``drift_noise`` divides by at least this noise (a fraction of the curve's size)
NOISE_FLOOR = 0.01
#: family-wise false-alarm level of each curve's test (Bonferroni over its points), ``--alpha``
ALPHA = 0.01
#: the order of the statuses in the drift table of the last two runs and on the page
STATUS_ORDER = ("drifted", "noisy", "ok", "n/a", "new", "gone")
#: what the drift table of the last two runs (and the page's sections) are ordered by
RANKED_BY = "status (drifted, noisy, ok, n/a, new, gone), then z (the change in noise units), largest first; then drift"


@dataclass
class Run:
    run_id: str
    path: Path
    manifest: dict
    curves: pd.DataFrame
    importances: pd.DataFrame


def load_runs(job_dir: str | os.PathLike) -> list[Run]:
    from .store import list_runs

    job_dir = Path(job_dir)
    if not job_dir.is_dir():
        raise HistoryError(f"{str(job_dir)!r} is not a directory (expected OUTPUT/JOB_NAME of a daskpd job)")
    runs = []
    for rid in list_runs(job_dir):
        p = job_dir / rid
        try:
            manifest = json.loads((p / "manifest.json").read_text())
            curves = pd.read_parquet(p / "curves.parquet")
            imp = pd.read_parquet(p / "importances.parquet")
        except (OSError, ValueError) as exc:
            raise HistoryError(f"run {rid!r} in {str(job_dir)!r} is unreadable: {exc}") from exc
        if not isinstance(manifest, dict):
            raise HistoryError(f"run {rid!r} in {str(job_dir)!r} is unreadable: its manifest.json is not a JSON object")
        runs.append(Run(rid, p, manifest, curves, imp))
    if not runs:
        hint = ""
        if any(c.is_dir() and any(c.glob("*/manifest.json")) for c in job_dir.iterdir()):
            hint = " (this looks like an output root: pass OUTPUT/JOB_NAME)"
        raise HistoryError(f"no runs in {str(job_dir)!r}: expected run directories holding manifest.json{hint}")
    return runs


#: directories of a job directory that are not runs (the history's default output, the first-pass cache)
NOT_RUNS = ("history", "cache")
#: what a run directory holds besides its manifest
_RUN_FILES = ("curves.parquet", "importances.parquet", "ice.parquet", "report.html", "plots", "state")
_DEFAULT_ID = re.compile(r"^\d{8}T\d{6}Z(-\d+)?$")


def _manifest_problem(p: Path) -> str | None:
    """Why the run directory ``p`` has no readable manifest, or None."""
    try:
        got = json.loads((p / "manifest.json").read_text())
    except FileNotFoundError:
        return "has no manifest.json (the run did not complete, or its manifest was removed)"
    except (OSError, ValueError) as exc:
        return f"has a manifest.json that cannot be read ({type(exc).__name__})"
    if not isinstance(got, dict):
        return "has a manifest.json that is not a JSON object"
    return None


def unfinished_newest(job_dir: str | os.PathLike) -> str | None:
    """When the newest run directory of the job (by run id, as :func:`load_runs` orders
    them) has no readable manifest: a one-line sentence naming it and why; else None.
    A run directory is a visible directory (not ``history`` or ``cache``) holding a
    manifest or a run's files, or named like a default run id."""
    job_dir = Path(job_dir)
    try:
        entries = sorted(p for p in job_dir.iterdir() if not p.name.startswith(".") and not p.is_symlink()
                         and p.is_dir() and p.name not in NOT_RUNS)
    except OSError:
        return None
    runs = [p for p in entries if (p / "manifest.json").exists() or _DEFAULT_ID.match(p.name)
            or any((p / f).exists() for f in _RUN_FILES)]
    if not runs:
        return None
    newest = max(runs, key=lambda p: p.name)
    why = _manifest_problem(newest)
    return None if why is None else f"the newest run directory {newest.name!r} of {str(job_dir)!r} {why}"


def numeric_points(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    d = df[df["supported"].astype(bool) & np.isfinite(df["pd"]) & np.isfinite(df["x"])]
    d = d.sort_values("x", kind="stable")
    return d["x"].to_numpy(dtype=float), d["pd"].to_numpy(dtype=float)


def categorical_points(df: pd.DataFrame) -> pd.Series:
    d = df[df["supported"].astype(bool) & np.isfinite(df["pd"]) & df["category"].notna()]
    return pd.Series(d["pd"].to_numpy(dtype=float), index=d["category"].astype(str).to_numpy()).groupby(level=0).mean()


def _big_categories(df: pd.DataFrame, share: float):
    """Categories holding >= ``share`` of the curve's rows (None when the curve has no counts)."""
    d = df[df["supported"].astype(bool) & df["category"].notna()]
    if "count" not in d.columns:
        return None
    c = pd.to_numeric(d["count"], errors="coerce").to_numpy(dtype=float)
    if not np.isfinite(c).any() or np.nansum(c) <= 0:
        return None
    keep = np.nan_to_num(c) >= share * np.nansum(c)
    return pd.Index(d["category"].astype(str).to_numpy()[keep]).unique()


def is_categorical(df: pd.DataFrame) -> bool:
    return bool(df["category"].notna().any())


def curve_range(df: pd.DataFrame) -> float:
    if is_categorical(df):
        s = categorical_points(df)
        return float(s.max() - s.min()) if len(s) else np.nan
    _, y = numeric_points(df)
    return float(y.max() - y.min()) if len(y) else np.nan


def _weighted_median(v: np.ndarray, w: np.ndarray) -> float:
    ok = np.isfinite(v) & np.isfinite(w) & (w > 0)
    if not ok.any():
        return float(np.median(v)) if len(v) else 0.0
    v, w = v[ok], w[ok]
    o = np.argsort(v, kind="stable")
    c = np.cumsum(w[o])
    return float(v[o][np.searchsorted(c, 0.5 * c[-1])])


def _moving_abs(d: np.ndarray, offset: float, window: int) -> np.ndarray:
    """|moving average of (d - offset)| over ``window`` points (shrinking at the ends)."""
    d = d - offset
    if window > 1 and len(d) >= window:
        c = np.r_[0.0, np.cumsum(d)]
        h = window // 2
        i = np.arange(len(d))
        lo, hi = np.maximum(0, i - h), np.minimum(len(d), i + h + 1)
        d = (c[hi] - c[lo]) / (hi - lo)
    return np.abs(d)


def _local_max(d: np.ndarray, offset: float, window: int) -> float:
    """max |moving average of (d - offset)| over ``window`` points (shrinking at the ends)."""
    m = _moving_abs(d, offset, window)
    return float(np.max(m)) if len(m) else np.nan


def _counts(df: pd.DataFrame, key: str) -> pd.Series:
    """Rows per x (numeric) or per category, from the curve's ``count`` column (1 when absent)."""
    d = df[df["supported"].astype(bool) & np.isfinite(df["pd"])]
    c = pd.to_numeric(d["count"], errors="coerce") if "count" in d.columns else pd.Series(1.0, index=d.index)
    c = c.fillna(0.0).to_numpy(dtype=float) if np.isfinite(c.to_numpy(dtype=float)).any() else np.ones(len(d))
    k = d[key].astype(str).to_numpy() if key == "category" else d[key].to_numpy(dtype=float)
    return pd.Series(c, index=k).groupby(level=0).sum()


def curve_distance(prev: pd.DataFrame, cur: pd.DataFrame, floor: float = 0.0) -> dict:
    """``{curve_rms, curve_distance, curve_max, support_overlap, n_common, scale}`` of two curves of one feature."""
    return {k: v for k, v in align_curves(prev, cur, floor).items() if not k.startswith("_")}


def align_curves(prev: pd.DataFrame, cur: pd.DataFrame, floor: float = 0.0) -> dict:
    """:func:`curve_distance`'s figures, plus (keys starting with ``_``) the common points
    (``_at``: grid x or categories), the local move at each as a fraction of ``scale``
    (``_local``: what ``curve_max`` is the maximum of; 0 where it is not counted)."""
    nan = {"curve_rms": np.nan, "curve_distance": np.nan, "curve_max": np.nan, "support_overlap": np.nan,
           "n_common": 0, "scale": np.nan}
    if is_categorical(prev) or is_categorical(cur):
        a, b = categorical_points(prev), categorical_points(cur)
        union = a.index.union(b.index)
        common = a.index.intersection(b.index)
        overlap = len(common) / len(union) if len(union) else np.nan
        if len(common) < 2:
            return {**nan, "support_overlap": overlap, "n_common": len(common)}
        ya, yb = a.loc[common].to_numpy(), b.loc[common].to_numpy()
        window = 1
        bp, bc = _big_categories(prev, MAX_CATEGORY_SHARE), _big_categories(cur, MAX_CATEGORY_SHARE)
        big = bp.intersection(bc) if bp is not None and bc is not None else (bp if bc is None else bc)
        in_max = np.asarray(common.isin(big)) if big is not None else np.ones(len(common), bool)
        # the parts that did not move stay at 0: offset = the row-weighted median difference
        offset = _weighted_median(yb - ya, _counts(prev, "category").reindex(common).to_numpy())
    else:
        xa, pa = numeric_points(prev)
        xb, pb = numeric_points(cur)
        if len(xa) < 2 or len(xb) < 2:
            return nan
        lo, hi = max(xa[0], xb[0]), min(xa[-1], xb[-1])
        span = max(xa[-1], xb[-1]) - min(xa[0], xb[0])
        overlap = max(0.0, hi - lo) / span if span > 0 else 1.0
        if not hi > lo:
            return {**nan, "support_overlap": overlap}
        grid = np.linspace(lo, hi, GRID_POINTS)
        ya, yb = np.interp(grid, xa, pa), np.interp(grid, xb, pb)
        common = grid
        window = MAX_WINDOW
        in_max = np.ones(len(grid), bool)
        # offset: the row-weighted median of the difference at the previous curve's positions
        # (the x grid is even, the rows are not: a change in a quarter of the rows may span
        # most of the x range)
        inside = (xa >= lo) & (xa <= hi)
        w = _counts(prev, "x").reindex(xa[inside]).to_numpy()
        offset = _weighted_median(np.interp(xa[inside], xb, pb) - pa[inside], w)
    raw_diff = yb - ya
    ya, yb = ya - ya.mean(), yb - yb.mean()
    rms = float(np.sqrt(np.mean((yb - ya) ** 2)))
    scale = max(float(ya.max() - ya.min()), float(yb.max() - yb.min()), float(floor))
    dist = rms / scale if scale > 0 else (0.0 if rms == 0 else np.inf)
    local = np.zeros(len(common))
    if in_max.sum() >= 2:
        moves = _moving_abs(raw_diff[in_max], offset, window)
        with np.errstate(divide="ignore", invalid="ignore"):
            local[in_max] = moves / scale if scale > 0 else np.where(moves == 0, 0.0, np.inf)
        dmax = float(local[in_max].max())
    else:
        dmax = np.nan
    return {"curve_rms": rms, "curve_distance": dist, "curve_max": dmax, "support_overlap": float(overlap),
            "n_common": len(common), "scale": float(scale), "_at": common, "_local": local}


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


def _support_noise(df: pd.DataFrame) -> float:
    """``P / N`` of a curve: supported positions (or categories) over its rows; NaN without counts."""
    if "count" not in df.columns:
        return np.nan
    d = df[df["supported"].astype(bool) & np.isfinite(df["pd"])]
    c = pd.to_numeric(d["count"], errors="coerce").to_numpy(dtype=float)
    n = float(np.nansum(c))
    if not len(d) or not np.isfinite(c).any() or n <= 0:
        return np.nan
    return len(d) / n


def curve_noise(prev: pd.DataFrame, cur: pd.DataFrame, std_prev=None, std_cur=None) -> tuple[float, str]:
    """``(noise, source)`` of one curve between two runs without bands (see the module
    docstring): ``"trials"`` from the importance's trial standard deviation, else
    ``"rows"`` from the curve's rows per point, else ``(nan, "none")``.

    ``std_prev`` / ``std_cur``: ``(importance, importance_std)`` of the feature in each
    run, or None."""
    if std_prev is not None and std_cur is not None:
        (ip, sp), (ic, sc) = std_prev, std_cur
        size = max(abs(ip), abs(ic)) if np.isfinite(ip) and np.isfinite(ic) else np.nan
        if np.isfinite(sp) and np.isfinite(sc) and size > 0:
            return float(np.hypot(sp, sc) / size), "trials"
    a, b = _support_noise(prev), _support_noise(cur)
    if np.isfinite(a) and np.isfinite(b):
        return float(np.sqrt(a + b)), "rows"
    return np.nan, "none"


def critical_z(m: int, alpha: float = ALPHA, df: float | None = None) -> float:
    """The Bonferroni critical value of ``m`` two-sided tests at family-wise level ``alpha``:
    the ``1 - alpha / (2 m)`` quantile of Student's t with ``df`` degrees of freedom (the
    standard normal when ``df`` is None)."""
    from scipy import stats

    q = 1.0 - alpha / (2.0 * max(int(m), 1))
    return float(stats.norm.ppf(q) if df is None or not np.isfinite(df) else stats.t.ppf(q, df))


def _band_series(df: pd.DataFrame, key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(positions, pd, pd_std) of a curve's supported points; pd_std NaN without a band."""
    d = df[df["supported"].astype(bool) & np.isfinite(df["pd"])]
    d = d[d[key].notna()] if key == "category" else d[np.isfinite(d[key])]
    std = pd.to_numeric(d["pd_std"], errors="coerce").to_numpy(dtype=float) if "pd_std" in d.columns \
        else np.full(len(d), np.nan)
    if key == "category":
        g = pd.DataFrame({"k": d["category"].astype(str).to_numpy(), "pd": d["pd"].to_numpy(dtype=float),
                          "s": std}).groupby("k", sort=True).mean()
        return g.index.to_numpy(), g["pd"].to_numpy(), g["s"].to_numpy()
    o = np.argsort(d["x"].to_numpy(dtype=float), kind="stable")
    return d["x"].to_numpy(dtype=float)[o], d["pd"].to_numpy(dtype=float)[o], std[o]


def _has_band(df: pd.DataFrame) -> bool:
    return "pd_std" in df.columns and bool(np.isfinite(pd.to_numeric(df["pd_std"], errors="coerce")).any())


def band_z(prev: pd.DataFrame, cur: pd.DataFrame, aligned: dict | None = None) -> dict | None:
    """The pointwise test of two curves against their bands (``pd_std`` per point), None
    when either curve has no band or no point can be tested.

    Both curves are re-anchored at a common point (numeric: the left end of the overlap
    of their supports; categorical: per group, the common category whose effect is
    best determined) -- partial dependence is defined up to a constant, and a band
    describes the curve anchored at its own zero.  At every other common point ``p``,
    ``diff(p) = (cur(p) - cur(ref)) - (prev(p) - prev(ref))`` and
    ``se(p) = sqrt(s_prev(p)^2 + s_cur(p)^2 + s_prev(ref)^2 + s_cur(ref)^2)`` (the two
    runs independent; the anchor's own spread added, which is 0 at a curve's zero), and
    ``z(p) = |diff(p)| / se(p)``.  Numeric points: the union of both curves' positions
    inside the overlap, or the 101-point grid when there are more.

    Returns ``{"z": the points' z, "local": the local move at each point (a fraction of
    the curve's scale, :func:`curve_distance`'s ``curve_max`` measure), "se": se / scale}``.
    """
    if not (_has_band(prev) and _has_band(cur)):
        return None
    al = aligned if aligned is not None else align_curves(prev, cur)
    if al.get("_at") is None or not np.isfinite(al["scale"]):
        return None
    scale = al["scale"]
    if is_categorical(prev) or is_categorical(cur):
        ka, pa, sa = _band_series(prev, "category")
        kb, pb, sb = _band_series(cur, "category")
        A = pd.DataFrame({"pd": pa, "s": sa}, index=ka)
        B = pd.DataFrame({"pd": pb, "s": sb}, index=kb)
        common = A.index.intersection(B.index)
        groups = pd.Series(0, index=common)
        if "group" in prev.columns:
            gp = prev.dropna(subset=["category"]).assign(category=lambda t: t["category"].astype(str))
            gp = gp.groupby("category")["group"].first()
            groups = pd.Series(gp.reindex(common).fillna(-1).to_numpy(), index=common)
        z, se, at = [], [], []
        for _, members in groups.groupby(groups):
            cs = members.index
            var = A.loc[cs, "s"].to_numpy() ** 2 + B.loc[cs, "s"].to_numpy() ** 2
            if len(cs) < 2 or not np.isfinite(var).any():
                continue
            r = cs[int(np.nanargmin(var))]
            d = (B.loc[cs, "pd"] - B.loc[r, "pd"]) - (A.loc[cs, "pd"] - A.loc[r, "pd"])
            e = np.sqrt(var + var[list(cs).index(r)])
            keep = (cs != r) & np.isfinite(e)
            z.append(_z(d.to_numpy()[keep], e[keep], scale))
            se.append(e[keep])
            at.extend(cs[keep])
        if not at:
            return None
        z, se = np.concatenate(z), np.concatenate(se)
        local = pd.Series(al["_local"], index=pd.Index(al["_at"]).astype(str)).reindex(at).fillna(0.0).to_numpy()
    else:
        xa, pa, sa = _band_series(prev, "x")
        xb, pb, sb = _band_series(cur, "x")
        grid = al["_at"]
        lo, hi = grid[0], grid[-1]
        pts = np.unique(np.r_[xa[(xa >= lo) & (xa <= hi)], xb[(xb >= lo) & (xb <= hi)]])
        if len(pts) > GRID_POINTS:
            pts = grid
        pts = pts[pts > lo]
        if not len(pts):
            return None
        ia = lambda v, x=xa, y=pa: np.interp(v, x, y)  # noqa: E731
        d = (np.interp(pts, xb, pb) - np.interp(lo, xb, pb)) - (ia(pts) - ia(lo))
        var = (np.interp(pts, xa, sa) ** 2 + np.interp(pts, xb, sb) ** 2
               + np.interp(lo, xa, sa) ** 2 + np.interp(lo, xb, sb) ** 2)
        e = np.sqrt(var)
        keep = np.isfinite(e)
        if not keep.any():
            return None
        z, se = _z(d[keep], e[keep], scale), e[keep]
        local = np.interp(pts[keep], grid, al["_local"])
    return {"z": z, "local": local, "se": se / scale if scale > 0 else se}


def _z(d: np.ndarray, e: np.ndarray, scale: float) -> np.ndarray:
    """|d| / e; where e is 0, 0 for no difference (beyond rounding) and inf for one."""
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.abs(d) / e
    tiny = np.abs(d) <= 1e-12 * max(scale, 1e-300)
    return np.where(e > 0, z, np.where(tiny, 0.0, np.inf))


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
             if method in ("importances", *STRATIFIED) else (("spec", "model", "n_trials"),))
    for path in paths:
        v = _dig(manifest, *path)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return int(v)
    return None


#: the stratifying trees matter only to these methods
STRATIFIED = ("stratpd", "catstratpd")


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
        from . import history_newold

        extra = "\n\n" + history_newold.format_table(self.runs[-1], self.new_vs_old)
        if self.pinned is not None:
            a = rank_rows(self.against)
            extra += (f"\n\n{self.pinned.run_id} -> {self.runs[-1].run_id} (--against / --window: the curves of "
                      "the two runs)\n" + a[["method", "feature", "drift", "z", "z_crit", "drift_sig", "status",
                                              "cause"]].to_string(index=False, float_format=lambda v: f"{v:.4f}",
                                                                  na_rep="-"))
        if len(self.runs) < 2:
            return f"{self.job_dir.name}: 1 run ({self.runs[0].run_id}); nothing to compare yet" + extra
        head = (f"{self.job_dir.name}: {len(self.runs)} runs; {self.runs[-2].run_id} -> {self.runs[-1].run_id} "
                f"(drifted: the change beyond the noise > {self.threshold:g} of the curve's size, at family-wise "
                f"level {self.alpha:g} per curve; sorted by {RANKED_BY})")
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
    from . import history_newold

    nvo = history_newold.summary(h.runs[-1], h.new_vs_old)
    out = {"daskpd_drift": SUMMARY_VERSION, "job": h.job_dir.name, "runs": len(h.runs), "compared": pair,
           "threshold": h.threshold, "alpha": h.alpha,
           "status": "drift" if h.drifted() else ("no-drift" if pair or nvo["status"] != "not-compared"
                                                  else "one-run"),
           "counts": counts, "drifted": drifted, "noisy": noisy,
           "stratification": strat, "incremental": incr,
           "curves": t.drop(columns=["n_common"]).to_dict("records") if len(t) else [], "new_vs_old": nvo}
    if h.pinned is not None:
        a = rank_rows(h.against)
        out["against"] = {"run_id": h.pinned.run_id,
                          "counts": {st: int((a["status"] == st).sum()) for st in STATUS_ORDER} if len(a) else {},
                          "drifted": a[a["status"] == "drifted"][keys].to_dict("records") if len(a) else [],
                          "curves": a.drop(columns=["n_common"]).to_dict("records") if len(a) else []}
    return out


def write_summary(h: History, path) -> Path:
    """Write :func:`summary` to ``path`` atomically (strict JSON: NaN as null)."""
    from ..results.base import atomic_path, dump_json

    path = Path(path)
    with atomic_path(path) as tmp:
        Path(tmp).write_text(dump_json(summary(h)), encoding="utf-8")
    return path


#: the newest run's colour (strong); older runs are drawn in OLD_COLOR, fading with age
NEWEST_COLOR = "#c0392b"
PREVIOUS_COLOR = "#1f4e8c"
OLD_COLOR = "#7f8c8d"
#: smallest font of the history plots
FONT = 8


def run_styles(n: int) -> list[dict]:
    """Line styles of ``n`` runs, oldest first: the newest in a strong red on top, the
    previous one in blue, older ones grey and fainter the older they are."""
    out = []
    for i in range(n):
        if i == n - 1:
            out.append(dict(color=NEWEST_COLOR, alpha=1.0, lw=2.6, zorder=4))
        elif i == n - 2:
            out.append(dict(color=PREVIOUS_COLOR, alpha=0.9, lw=1.6, zorder=3))
        else:
            age = (n - 2 - i) / max(1, n - 2)  # 0 (just before the previous run) .. 1 (oldest)
            out.append(dict(color=OLD_COLOR, alpha=0.6 - 0.45 * age, lw=1.1, zorder=2))
    return out


def _run_label(run_id: str) -> str:
    """A run id on two lines when it is a timestamp (``20260101T020000Z``), so it fits horizontally."""
    if "T" in run_id and run_id.split("T", 1)[0].isdigit():
        d, t = run_id.split("T", 1)
        return f"{d}\nT{t}"
    return run_id


def _plot_feature(runs: list[Run], method: str, feature: str, path: Path, subtitle: str = "") -> None:
    from ..plotting import pyplot

    fig = feature_figure(runs, method, feature, subtitle)
    fig.savefig(path, dpi=100)
    pyplot().close(fig)


def feature_figure(runs: list[Run], method: str, feature: str, subtitle: str = ""):
    """One curve across ``runs`` (oldest first): the newest in a strong colour on top, the
    previous one in blue, older ones grey and fading; categories in the newest run's
    order, at most 30 named; labels >= 8 pt, horizontal where they fit."""
    from ..plotting import label_categories, new_figure

    n = len(runs)
    styles = run_styles(n)
    fig, ax = new_figure(figsize=(8, 4.4))
    cat = False
    order = None
    for i, r in enumerate(runs):
        d = r.curves[(r.curves["method"] == method) & (r.curves["feature"] == feature)]
        if not len(d):
            continue
        st = styles[i]
        label = f"{r.run_id} (newest)" if i == n - 1 else (f"{r.run_id} (previous)" if i == n - 2 else r.run_id)
        if is_categorical(d):
            cat = True
            if order is None:
                order = _cat_order(runs[-1], method, feature, None) or list(categorical_points(d).index)
            s = categorical_points(d)
            s = s - s.mean() if len(s) else s
            y = s.reindex(order).to_numpy()
            ms = (5 if i == n - 1 else 3.5) if len(order) <= 40 else (3 if i == n - 1 else 2)
            ax.plot(np.arange(len(order)), y, "o", ms=ms, color=st["color"], alpha=st["alpha"], zorder=st["zorder"],
                    label=label)
        else:
            x, y = numeric_points(d)
            ax.plot(x, y, "-", label=label, **st)
    if cat:
        hidden = label_categories(ax, np.arange(len(order)), order) if order else 0
        more = f"; \u2026 and {hidden:,} more not named" if hidden else ""
        ax.set_xlabel(f"{feature}: {len(order):,} categories, sorted by the newest run's effect{more}", fontsize=9)
        ax.set_ylabel("partial dependence (mean-centred)", fontsize=9)
    else:
        ax.set_xlabel(feature, fontsize=9)
        ax.set_ylabel("partial dependence", fontsize=9)
    ax.tick_params(labelsize=FONT)
    ax.set_title(f"{method}: {feature} across {n} run(s)" + (f"\n{subtitle}" if subtitle else ""), fontsize=10)
    if n <= 12:
        handles, labels = ax.get_legend_handles_labels()
        ax.legend(handles[::-1], labels[::-1], fontsize=FONT, loc="best", title="newest first", title_fontsize=FONT)
    return fig


def _cat_order(run: Run, method: str, feature: str, fallback) -> list[str]:
    d = run.curves[(run.curves["method"] == method) & (run.curves["feature"] == feature)]
    s = categorical_points(d) if len(d) else fallback
    if s is None or not len(s):
        return []
    return list(s.sort_values(kind="stable").index)


#: the importance-across-runs plot draws at most this many features (the largest in the newest run)
MAX_IMPORTANCE_LINES = 10


def _plot_importance(runs: list[Run], method: str, path: Path, features=None) -> bool:
    from ..plotting import pyplot

    fig = importance_figure(runs, method, features)
    if fig is None:
        return False
    fig.savefig(path, dpi=100)
    pyplot().close(fig)
    return True


def importance_figure(runs: list[Run], method: str, features=None):
    """Each feature's share of the importance across ``runs`` (the 10 largest in the newest
    run), run ids horizontal (timestamps on two lines) and thinned to what fits; None
    when no run has the ``method`` table."""
    from ..plotting import label_categories, new_figure

    rows = []
    for r in runs:
        for f, v in importance_shares(r.importances, method).items():
            if features is None or f in features:
                rows.append((r.run_id, f, v))
    if not rows:
        return None
    df = pd.DataFrame(rows, columns=["run_id", "feature", "share"]).pivot(index="run_id", columns="feature",
                                                                         values="share")
    df = df.reindex([r.run_id for r in runs])
    latest = df.iloc[-1].fillna(-np.inf).sort_values(ascending=False, kind="stable")
    cols = list(latest.index[:MAX_IMPORTANCE_LINES])
    fig, ax = new_figure(figsize=(8, 4.4))
    x = np.arange(len(df))
    import matplotlib as mpl

    cmap = mpl.colormaps["tab10"]
    for k, f in enumerate(cols):
        ax.plot(x, df[f].to_numpy(), "-o", ms=3.5, lw=1.6, color=cmap(k % 10), label=str(f))
    ax.axvline(x[-1], color=NEWEST_COLOR, lw=1, alpha=0.5, zorder=0)
    # run ids horizontal (timestamps on two lines), as many as fit side by side, the newest always
    labels = [_run_label(str(i)) for i in df.index]
    width_px = 0.75 * 8 * 100
    per = max(len(line) for lab in labels for line in lab.split("\n")) * 0.6 * FONT * 100 / 72 + 10
    label_categories(ax, x, labels, max_labels=max(2, int(width_px // per)))
    for t in ax.get_xticklabels():
        t.set_rotation(0)
    ax.set_xlabel("run (newest at the right)", fontsize=9)
    ax.set_ylabel("share of total importance", fontsize=9)
    ax.tick_params(labelsize=FONT)
    more = f" (the {len(cols)} largest; \u2026 and {df.shape[1] - len(cols)} more)" if df.shape[1] > len(cols) else ""
    ax.set_title(f"{method}: importance across runs{more}", fontsize=10)
    ax.legend(fontsize=FONT, loc="center left", bbox_to_anchor=(1.01, 0.5), title="newest run's order",
              title_fontsize=FONT)
    return fig


def write_history(h: History, out_dir: Path, last: int) -> Path:
    from .report import embed_png, esc, html_table, page
    from ..results.base import write_parquet
    from .store import commit, rmtree, safe_name

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.parent / f".{out_dir.name}.tmp-{os.getpid()}"
    rmtree(tmp)
    (tmp / "plots").mkdir(parents=True)
    try:
        write_parquet(h.table, tmp / "drift.parquet")
        write_summary(h, tmp / "drift.json")
        shown = h.runs[-last:]
        parts = [f"<h1>daskpd history: {esc(h.job_dir.name)}</h1>",
                 f"<p class=\"meta\">{len(h.runs)} run(s): {esc(h.runs[0].run_id)} &hellip; "
                 f"{esc(h.runs[-1].run_id)}; plots show the last {len(shown)}; drift threshold {h.threshold:g}, "
                 f"level {h.alpha:g} per curve</p>"]
        latest = h.latest_pair()
        parts.append("<h2>Drift, last two runs</h2>")
        if len(latest):
            parts.append(f"<p class=\"meta\">Sorted by {esc(RANKED_BY)}.</p>")
            cols = ["method", "feature", "importance", "importance_change", "curve_distance", "curve_max",
                    "support_overlap", "drift", "noise_source", "z", "z_crit", "drift_sig", "status", "cause"]
            parts.append(html_table(latest[cols].reset_index(drop=True)))
        else:
            parts.append("<p>Only one run: nothing to compare yet.</p>")
        parts.append("<p class=\"meta\">drift = max(curve distance, curve max, |importance change|, "
                     "1 - support overlap), raw; z: the largest change in units of its noise (noise_source: "
                     "the curves' bands, else the importance's trials, else the rows per point); drift_sig: the "
                     "part of the drift beyond the noise (z &gt; z_crit, Bonferroni); drifted = drift_sig &gt; "
                     "threshold; noisy = raw drift above the threshold with no noise estimate; cause: data, "
                     "refit (the stratifying trees were refitted) or data+refit; see docs/jobs.md.</p>")
        from . import history_newold

        parts.append(history_newold.html_section(h.runs[-1], h.new_vs_old, h.new_vs_old_points, tmp / "plots"))
        if h.pinned is not None and len(h.against):
            parts.append(f"<h2>Against run {esc(h.pinned.run_id)} (--against / --window)</h2>")
            parts.append(html_table(rank_rows(h.against)[["method", "feature", "curve_distance", "curve_max", "drift",
                                                           "noise_source", "z", "z_crit", "drift_sig", "status",
                                                           "cause"]].reset_index(drop=True)))
        parts.append("<h2>Importance across runs</h2>")
        for m in ("importances", "pd_variance"):
            fn = tmp / "plots" / f"importance-{m}.png"
            if _plot_importance(shown, m, fn, h.features):
                parts.append(embed_png(fn, f"{m} across runs"))
        parts.append("<h2>Curves across runs</h2>")
        parts.append(f"<p class=\"meta\">In the order of the drift table: {esc(RANKED_BY)} between the last "
                     "two runs.</p>")
        for m, f, sub in h.section_order(shown):
            fn = tmp / "plots" / f"{safe_name(m)}-{safe_name(f)}.png"
            _plot_feature(shown, m, f, fn, sub)
            parts.append(f"<h3>{esc(m)}: {esc(f)}</h3>" + embed_png(fn, f"{m} {f} across runs"))
        if len(h.table):
            parts.append("<h2>All consecutive pairs</h2>")
            parts.append("<p class=\"meta\">The main columns; drift.parquet has every column.</p>")
            cols = ["run_id", "prev_run_id", "method", "feature", "importance_change", "curve_distance", "curve_max",
                    "support_overlap", "drift", "noise_source", "z", "z_crit", "drift_sig", "status", "cause"]
            parts.append(html_table(h.table[cols].reset_index(drop=True), max_rows=500))
        (tmp / "history.html").write_text(page(f"daskpd history: {h.job_dir.name}", "\n".join(parts)),
                                          encoding="utf-8")
        commit(tmp, out_dir)
        tmp = None
    finally:
        if tmp is not None:
            rmtree(tmp)
    return out_dir


def history(job_dir: str | os.PathLike, *, features=None, last: int = 10, threshold: float = 0.1,
            alpha: float = ALPHA, output=True, against: str | None = None, window: int | None = None) -> History:
    """Compare the runs of a job.  ``output``: True (JOB_DIR/history), a directory, or None/False.
    ``against`` (a run id) or ``window`` (N): also compare the newest run's curves with
    that run's (the N-th run before the newest)."""
    job_dir = Path(job_dir)
    runs = load_runs(job_dir)
    if features:
        known = {str(f) for r in runs for f in r.curves["feature"].unique()}
        unknown = [f for f in features if f not in known]
        if unknown:
            raise HistoryError(f"feature{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} not in any "
                               f"run of {job_dir.name!r}; features: {', '.join(sorted(known))}")
    table = drift_table(runs, threshold, alpha)
    if features and len(table):
        table = table[table["feature"].isin(list(features))].reset_index(drop=True)
    from . import history_newold

    nvo, nvo_pts = history_newold.latest(runs[-1], features)
    pin = history_newold.pinned(runs, against, window)
    pinned_table = pd.DataFrame()
    if pin is not None:
        pinned_table = compare(pin, runs[-1], threshold, alpha)
        if features and len(pinned_table):
            pinned_table = pinned_table[pinned_table["feature"].isin(list(features))].reset_index(drop=True)
    h = History(job_dir=job_dir, runs=runs, table=table, threshold=threshold,
                features=list(features) if features else None, alpha=alpha, new_vs_old=nvo,
                new_vs_old_points=nvo_pts, pinned=pin, against=pinned_table)
    if output:
        out_dir = job_dir / "history" if output is True else Path(output)
        h.written = write_history(h, out_dir.resolve(), last)
    return h
