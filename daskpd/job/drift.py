"""The new-against-old drift test: do the new rows' curve and the old rows' curve differ?

:func:`compare_curves` takes two curves of one feature with bootstrap trials (any
:class:`~daskpd.results.base.CurveResult` holding ``trials_pd``: the new rows' and the
old rows'; docs/drift.md) and returns a :class:`DriftRecord`; :func:`decide` tests the
records of one comparison (a job's curves) together at a family-wise level.

At every test point p (a position both curves have, or a category), the change is
``d(p) = new(p) - old(p)``, taken less its median over the points (per group of connected
categories: partial dependence is defined up to a constant; the median keeps the
points that did not move at 0), and trial ``t`` gives
``d_t(p) = new_t(p) - old_t(p)`` centred the same way.  For the model-free curves the
two trials weight every leaf alike (the same stratification): ``d_t`` is a cluster
bootstrap of ``d``; for the model-based curves the new and the old rows are disjoint,
their row weights independent, and the spread of ``d_t`` is that of the sum of two
independent estimates.  With ``se(p)`` the trials' standard deviation (times
``sqrt(m / (m - 1))`` for ``m`` resampled clusters, as the bands) and ``df(p) =
min(T, m) - 1``, ``t(p) = d(p) / se(p)`` and the curve's p-value is Bonferroni's over
its ``G`` points, ``min(1, G min_p 2 P(T_df > |t(p)|))``: valid whatever the points'
correlation, and from few trials (Student's t).  :func:`decide` adjusts the curves'
p-values by Holm's step-down at level ``alpha`` (the false alarms of a comparison are
at most ``alpha``), and a curve is ``drifted`` when a point is beyond its adjusted
critical value ``z_crit`` *and* that point moved by more than ``threshold`` of the
curve's scale (the old curve's range, at least ``SCALE_FLOOR`` of the largest range of
the method's curves).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

__all__ = ["DriftRecord", "compare_curves", "decide", "critical", "trials_needed", "ALPHA", "THRESHOLD",
           "SCALE_FLOOR", "POWER", "MAX_TRIALS", "POINT_COLUMNS"]

#: family-wise false-alarm level of one comparison (all its curves)
ALPHA = 0.01
#: a drifted curve moved, beyond the noise, by more than this share of its scale
THRESHOLD = 0.1
#: the scale of a curve is at least this share of the largest range of its method's curves
SCALE_FLOOR = 0.1
#: the minimal detectable change is the change found with this probability
POWER = 0.8
#: the most trials :func:`trials_needed` names (the job's bound on ``n_trials``)
MAX_TRIALS = 10_000


@dataclass
class DriftRecord:
    """One curve's comparison: ``points`` (a frame, one row a test point: ``x`` or
    ``category``, ``x_lo``/``x_hi``, the centred ``new``/``old`` curves and their
    standard errors, ``change``, ``se``, ``df``, ``t``, ``group``) and its figures;
    :func:`decide` fills the decision (``status``, ``z_crit``, ``level``, ``why``...)."""

    method: str
    feature: str
    kind: str
    points: pd.DataFrame
    n_trials: int
    paired: bool
    scale: float
    rows_new: float = np.nan
    rows_old: float = np.nan
    note: str = ""
    # the decision (decide)
    p_value: float = np.nan
    level: float = np.nan
    z: float = np.nan
    z_crit: float = np.nan
    drift: float = np.nan
    drift_sig: float = np.nan
    mdc: float = np.nan
    trials_needed: float = np.nan
    status: str = "untested"
    where: str = ""
    why: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def n_points(self) -> int:
        return int(self.points["testable"].sum()) if len(self.points) else 0


def _curve_points(res) -> dict:
    """A curve's supported points: kind, positions (x or labels), slots (what aligns two
    curves' numeric points), pd, trials (T, P) or None, clusters (P), group (P)."""
    c = res.curve()
    pos = np.asarray(c["positions"])
    pdv = np.asarray(c["pd"], dtype="float64")
    kind = getattr(res, "kind", "numeric")
    ok = np.isfinite(pdv)
    if c.get("supported") is not None:
        ok &= np.asarray(c["supported"], dtype=bool)
    trials = getattr(res, "trials_pd", None)
    if trials is not None:
        trials = np.asarray(trials, dtype="float64")
        if trials.ndim != 2 or trials.shape[1] != len(pdv):
            trials = None
    params = getattr(res, "params", {}) or {}
    if kind == "categorical":
        nlc = getattr(res, "n_leaves_cat", None)
        clusters = np.full(len(pdv), np.inf) if nlc is None else np.maximum(np.asarray(nlc, dtype="float64"), 1.0)
        group = np.asarray(getattr(res, "group", np.zeros(len(pdv))), dtype="float64")
        labels = pd.Index(pos, dtype=object).astype(str).to_numpy()
        return {"kind": kind, "at": labels[ok], "slot": labels[ok], "pd": pdv[ok],
                "trials": None if trials is None else trials[:, ok], "clusters": clusters[ok], "group": group[ok],
                "count": np.asarray(c.get("count", np.full(len(pdv), np.nan)), dtype="float64")[ok]}
    m = params.get("band_clusters")
    clusters = np.full(len(pdv), float(m) if m else np.inf)
    x = pos.astype("float64")
    extra = c.get("extra") or {}
    lo = extra.get("lo")  # a marginal plot's bins: their edges (None: a bin a value)
    slot = np.asarray(lo, dtype="float64") if lo is not None and np.ndim(lo) == 1 and len(lo) == len(x) else x
    return {"kind": "numeric", "at": x[ok], "slot": slot[ok], "pd": pdv[ok],
            "trials": None if trials is None else trials[:, ok], "clusters": clusters[ok], "group": np.zeros(ok.sum()),
            "count": np.asarray(c.get("count", np.full(len(pdv), np.nan)), dtype="float64")[ok]}


def _interp_rows(x, xp, rows) -> np.ndarray:
    """Each row of ``rows`` (values at ``xp``) linearly interpolated at ``x`` (NaN outside)."""
    out = np.full((len(rows), len(x)), np.nan)
    for t in range(len(rows)):
        f = np.isfinite(rows[t])
        if f.sum() >= 2:
            out[t] = np.interp(x, xp[f], rows[t][f], left=np.nan, right=np.nan)
    return out


def _align(a: dict, b: dict, edges=None):
    """(at, x_lo, x_hi, new pd, old pd, new trials, old trials, clusters, group) on the
    points both curves have: categories by label; numeric points by their slot (the
    comparison's bin when ``edges`` are given, else the exact position), else -- when
    fewer than half of them match -- the old curve interpolated at the new positions
    inside the overlap of both ranges."""
    if a["kind"] == "categorical" or b["kind"] == "categorical":
        A, B = pd.Index(a["at"]), pd.Index(b["at"])
        common = A.intersection(B, sort=False)
        ia, ib = A.get_indexer(common), B.get_indexer(common)
        ga, gb = a["group"][ia], b["group"][ib]
        group = pd.factorize(pd.Series([f"{x}/{y}" for x, y in zip(ga, gb)], dtype=object))[0].astype(float)
        nan = np.full(len(common), np.nan)
        return (common.to_numpy(), nan, nan, a["pd"][ia], b["pd"][ib], _cols(a["trials"], ia), _cols(b["trials"], ib),
                np.minimum(a["clusters"][ia], b["clusters"][ib]), group)
    if edges is not None:
        e = np.asarray(edges, dtype="float64")
        sa = np.searchsorted(e, a["at"], side="right") - 1
        sb = np.searchsorted(e, b["at"], side="right") - 1
    else:
        sa, sb = a["slot"], b["slot"]
    common, ia, ib = np.intersect1d(sa, sb, return_indices=True)
    if len(common) >= max(2, 0.5 * min(len(sa), len(sb))):
        at = b["at"][ib]
        if edges is not None:
            lo, hi = e[common], e[common + 1]
            lo = np.where(np.isfinite(lo), lo, np.minimum(a["at"][ia], b["at"][ib]))
            hi = np.where(np.isfinite(hi), hi, np.maximum(a["at"][ia], b["at"][ib]))
        else:
            lo = hi = at
        return (at, lo, hi, a["pd"][ia], b["pd"][ib], _cols(a["trials"], ia), _cols(b["trials"], ib),
                np.minimum(a["clusters"][ia], b["clusters"][ib]), np.zeros(len(common)))
    if len(a["at"]) < 2 or len(b["at"]) < 2:
        return None
    lo, hi = max(a["at"][0], b["at"][0]), min(a["at"][-1], b["at"][-1])
    x = a["at"][(a["at"] >= lo) & (a["at"] <= hi)]
    if len(x) < 2:
        return None
    old = np.interp(x, b["at"], b["pd"])
    ia = np.flatnonzero((a["at"] >= lo) & (a["at"] <= hi))
    tb = None if b["trials"] is None else _interp_rows(x, b["at"], b["trials"])
    return (x, x, x, a["pd"][ia], old, _cols(a["trials"], ia), tb, np.full(len(x), min(a["clusters"].min(),
                                                                                    b["clusters"].min())),
            np.zeros(len(x)))


def _cols(trials, idx):
    return None if trials is None else trials[:, idx]


def _centre(v: np.ndarray, group: np.ndarray) -> np.ndarray:
    """``v`` (points last) less its median over the finite points of each group: the
    points that did not move stay at 0 while fewer than half of them moved."""
    out = np.array(v, dtype="float64", copy=True)
    if out.shape[-1] == 0:
        return out
    # every group's median at once (pandas' grouped median skips NaN as np.nanmedian
    # does, and gives the same values): a group at a time was a nanmedian call per
    # category, most of an incremental night's new-against-old comparison
    _, codes = np.unique(np.asarray(group), return_inverse=True)
    flat = out.reshape(-1, out.shape[-1])
    med = pd.DataFrame(flat.T).groupby(codes.ravel(), sort=True).median().to_numpy()
    with np.errstate(invalid="ignore"):
        flat -= med[codes.ravel()].T
    return flat.reshape(out.shape)


def _spread(trials, clusters):
    """(se, df, n) per point: the trials' standard deviation with the few-cluster
    correction, and Student's degrees of freedom, ``min(T, m) - 1``."""
    if trials is None or len(trials) < 2:
        P = 0 if trials is None else trials.shape[1]
        return np.full(P, np.nan), np.full(P, np.nan), np.zeros(P, dtype=int)
    n = np.isfinite(trials).sum(axis=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        sd = np.nanstd(trials, axis=0, ddof=1)
    m = np.asarray(clusters, dtype="float64")
    with np.errstate(divide="ignore", invalid="ignore"):
        corr = np.where(np.isfinite(m), np.sqrt(np.where(m > 1, m / (m - 1), np.nan)), 1.0)
    df = np.minimum(n, np.where(np.isfinite(m), m, np.inf)) - 1.0
    ok = n >= 2
    return np.where(ok, sd * corr, np.nan), np.where(ok & (df >= 1), df, np.nan), n


def compare_curves(new, old, *, method: str, feature: str, paired: bool = True, edges=None,
                   rows_new: float = np.nan, rows_old: float = np.nan, note: str = "") -> DriftRecord:
    """The comparison of ``new`` (the new rows' curve) with ``old`` (the old rows'), both
    with ``trials_pd`` (see the module docstring); ``edges``: the numeric positions'
    bins shared by both (a binned comparison), aligning their points by bin.  A curve
    without trials, or with fewer than two points in common, gives a record that
    cannot be tested (``status`` "untested", ``why`` says so)."""
    a, b = _curve_points(new), _curve_points(old)
    T = min(len(a["trials"]) if a["trials"] is not None else 0, len(b["trials"]) if b["trials"] is not None else 0)
    al = _align(a, b, edges)
    empty = pd.DataFrame(columns=POINT_COLUMNS)
    if al is None or len(al[0]) < 2:
        return DriftRecord(method, feature, a["kind"], empty, T, paired, np.nan, rows_new, rows_old,
                           note or "fewer than two positions in common")
    at, x_lo, x_hi, pn, po, tn, to, clusters, group = al
    # a group of one point carries no change (its constant is free)
    sizes = pd.Series(group).map(pd.Series(group).value_counts()).to_numpy()
    co = _centre(po, group)
    change = _centre(pn - po, group)
    cn = co + change  # the new curve on the old one's constant, where the points that did not move meet it
    if T >= 2:
        dt = _centre(tn[:T] - to[:T], group)
        se, df, _ = _spread(dt, clusters)
        sn, _, _ = _spread(_centre(tn[:T], group), clusters)
        so, _, _ = _spread(_centre(to[:T], group), clusters)
    else:
        se = df = sn = so = np.full(len(at), np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(se > 0, change / se, np.where(np.abs(change) <= 1e-12 * max(np.nanmax(np.abs(co)), 1e-300),
                                                    0.0, np.inf))
    testable = np.isfinite(se) & np.isfinite(df) & (sizes >= 2) & ~np.isnan(t)
    pts = pd.DataFrame({
        "method": method, "feature": feature,
        "x": at.astype("float64") if a["kind"] != "categorical" else np.nan,
        "category": at.astype(str) if a["kind"] == "categorical" else None,
        "x_lo": x_lo, "x_hi": x_hi, "group": group.astype("int64"),
        "new": cn, "old": co, "new_se": sn, "old_se": so, "change": change, "se": se, "df": df, "t": t,
        "testable": testable,
    })
    scale = float(np.nanmax(co) - np.nanmin(co)) if np.isfinite(co).any() else np.nan
    return DriftRecord(method, feature, a["kind"], pts, T, paired, scale, rows_new, rows_old, note)


def critical(level: float, n_points: int, df) -> np.ndarray:
    """Bonferroni's critical value of ``n_points`` two-sided tests at family-wise level
    ``level``: Student's t quantile ``1 - level / (2 n_points)`` at ``df`` degrees of
    freedom (the normal one where ``df`` is infinite)."""
    from scipy.special import ndtri, stdtrit

    q = 1.0 - float(level) / (2.0 * max(int(n_points), 1))
    df = np.asarray(df, dtype="float64")
    with np.errstate(invalid="ignore"):
        return np.where(np.isfinite(df), stdtrit(np.where(np.isfinite(df), np.maximum(df, 1.0), 1.0), q), ndtri(q))


def _pvalues(t, df, n_points: int) -> np.ndarray:
    """Bonferroni-adjusted two-sided p-values of the points."""
    from scipy.special import ndtr, stdtr

    t, df = np.abs(np.asarray(t, dtype="float64")), np.asarray(df, dtype="float64")
    with np.errstate(invalid="ignore"):
        tail = np.where(np.isfinite(df), stdtr(np.where(np.isfinite(df), np.maximum(df, 1.0), 1.0), -t), ndtr(-t))
    return np.minimum(1.0, 2.0 * tail * max(int(n_points), 1))


def trials_needed(level: float, n_points: int, se: float, scale: float, threshold: float, clusters: float,
                  have: int) -> float:
    """The fewest trials (up to :data:`MAX_TRIALS`) at which a change of ``threshold``
    of the scale is found with probability :data:`POWER` at this noise: the smallest T
    with ``(critical(level, n_points, min(T, m) - 1) + z_power) se <= threshold scale``;
    NaN when ``have`` suffices, inf when no count of trials does (more rows needed: the
    noise, or the clusters, bound it)."""
    from scipy.special import ndtri

    zp = float(ndtri(POWER))
    if not (np.isfinite(se) and np.isfinite(scale) and scale > 0):
        return np.nan

    def mdc(T):
        df = min(T, clusters) - 1.0
        return (float(critical(level, n_points, df if df >= 1 else 1.0)) + zp) * se / scale

    if mdc(max(int(have), 2)) <= threshold:
        return np.nan
    if mdc(MAX_TRIALS) > threshold:
        return np.inf
    lo, hi = max(int(have), 2), MAX_TRIALS  # mdc(lo) > threshold >= mdc(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if mdc(mid) > threshold else (lo, mid)
    return float(hi)


def _fmt(v: float) -> str:
    return f"{v:+.3g}"


def _where(rec: DriftRecord, sig: np.ndarray, crit: np.ndarray, limit: int = 5) -> str:
    """The points that moved: numeric runs of adjacent significant points (each with its
    largest change and that change's simultaneous band), categories by size of change."""
    p = rec.points
    if not sig.any():
        return ""
    lo = p["change"].to_numpy() - crit * p["se"].to_numpy()
    hi = p["change"].to_numpy() + crit * p["se"].to_numpy()
    out = []
    if rec.kind == "categorical":
        idx = np.flatnonzero(sig)
        idx = idx[np.argsort(-np.abs(p["change"].to_numpy()[idx]), kind="stable")]
        for i in idx[:limit]:
            out.append(f"{p['category'].iat[i]}: {_fmt(p['change'].iat[i])} [{_fmt(lo[i])}, {_fmt(hi[i])}]")
        more = len(idx) - limit
    else:
        runs, start = [], None
        for i, s in enumerate(list(sig) + [False]):
            if s and start is None:
                start = i
            elif not s and start is not None:
                runs.append((start, i))
                start = None
        runs.sort(key=lambda r: -np.max(np.abs(p["change"].to_numpy()[r[0]:r[1]])))
        for a, b in runs[:limit]:
            i = a + int(np.argmax(np.abs(p["change"].to_numpy()[a:b])))
            out.append(f"{rec.feature} in [{p['x_lo'].iat[a]:.4g}, {p['x_hi'].iat[b - 1]:.4g}]: "
                       f"{_fmt(p['change'].iat[i])} [{_fmt(lo[i])}, {_fmt(hi[i])}]")
        more = len(runs) - limit
    return "; ".join(out) + (f"; and {more} more" if more > 0 else "")


def _holm(pvals: list[float], alpha: float) -> list[float]:
    """Each test's level under Holm's step-down at family-wise ``alpha``: ``alpha / (K -
    i)`` for the i-th smallest p-value while the smaller ones are rejected; from the
    first one not rejected on, that one's level (nothing after it is rejected)."""
    K = len(pvals)
    order = np.argsort(np.where(np.isfinite(pvals), pvals, np.inf), kind="stable")
    levels = [np.nan] * K
    stop = None
    for rank, i in enumerate(order):
        lv = alpha / (K - rank)
        if stop is None and not (np.isfinite(pvals[i]) and pvals[i] <= lv):
            stop = lv
        levels[i] = lv if stop is None else stop
    return levels


def decide(records: list[DriftRecord], alpha: float = ALPHA, threshold: float = THRESHOLD) -> list[DriftRecord]:
    """Test the records of one comparison together (in place; returned): the scale
    floors per method, Holm's levels over the testable curves, each curve's ``z``,
    ``z_crit``, ``drift`` and ``drift_sig``, ``status`` (``drifted`` | ``ok`` |
    ``untested``), the minimal detectable change (``mdc``: the change of a point, as a
    share of the scale, found with probability :data:`POWER`), the trials a change of
    ``threshold`` would need when these are too few (``trials_needed``), ``where`` it
    changed and ``why``."""
    from scipy.special import ndtri

    floors: dict = {}
    for r in records:
        if np.isfinite(r.scale):
            floors[r.method] = max(floors.get(r.method, 0.0), r.scale)
    testable = [r for r in records if r.n_points >= 2 and r.n_trials >= 2]
    for r in records:
        p = r.points
        floor = SCALE_FLOOR * floors.get(r.method, 0.0)
        r.scale = max(r.scale, floor) if np.isfinite(r.scale) else floor
        if r in testable:
            k = p["testable"].to_numpy()
            r.p_value = float(np.min(_pvalues(p["t"].to_numpy()[k], p["df"].to_numpy()[k], r.n_points)))
    for r, lv in zip(testable, _holm([r.p_value for r in testable], alpha)):
        r.level = float(lv)
    zp = float(ndtri(POWER))
    for r in records:
        p = r.points
        ch = np.abs(p["change"].to_numpy()) if len(p) else np.zeros(0)
        with np.errstate(divide="ignore", invalid="ignore"):
            r.drift = float(np.nanmax(ch) / r.scale) if len(ch) and r.scale > 0 else np.nan
        if r not in testable:
            r.status = "untested"
            r.why = ("untested: " + (r.note or ("no trials (n_trials <= 1): the change cannot be told from the noise"
                                                 if r.n_trials < 2 else "fewer than two positions to compare")))
            continue
        k = p["testable"].to_numpy()
        G = r.n_points
        crit = critical(r.level, G, p["df"].to_numpy())
        sig = k & (np.abs(p["t"].to_numpy()) > crit)
        tk = np.abs(p["t"].to_numpy())[k]
        i = int(np.argmax(tk))
        r.z = float(tk[i])
        r.z_crit = float(crit[k][i])
        r.drift_sig = float(ch[sig].max() / r.scale) if sig.any() and r.scale > 0 else 0.0
        se_med = float(np.nanmedian(p["se"].to_numpy()[k]))
        df_med = float(np.nanmedian(p["df"].to_numpy()[k]))
        c_med = float(critical(r.level, G, df_med))
        r.mdc = (c_med + zp) * se_med / r.scale if r.scale > 0 else np.nan
        clusters = df_med + 1.0 if np.isfinite(df_med) and df_med < r.n_trials - 1 else np.inf
        r.trials_needed = trials_needed(r.level, G, se_med, r.scale, threshold, clusters, r.n_trials)
        drifted = bool(sig.any()) and r.drift_sig > threshold
        r.status = "drifted" if drifted else "ok"
        r.where = _where(r, sig, crit)
        r.why = _why(r, bool(sig.any()), threshold)
    return records


def _why(r: DriftRecord, beyond: bool, threshold: float) -> str:
    """One line: why the status, and what the test could see."""
    if r.status == "drifted":
        head = (f"drifted: moved by {r.drift_sig:.3g} of the curve's scale beyond the noise (z {r.z:.3g} > "
                f"{r.z_crit:.3g})")
    elif beyond:
        head = (f"ok: a change beyond the noise (z {r.z:.3g} > {r.z_crit:.3g}), but of {r.drift_sig:.3g} of the "
                f"curve's scale, not more than the threshold {threshold:g}")
    else:
        head = f"ok: within the noise (z {r.z:.3g} <= {r.z_crit:.3g}); largest change {r.drift:.3g} of the scale"
    tail = f"; detectable: {r.mdc:.3g} of the scale" if np.isfinite(r.mdc) else ""
    if np.isfinite(r.trials_needed) and r.trials_needed > r.n_trials:
        tail += (f"; {r.n_trials} trials are too few to find a change of {threshold:g}: T >= "
                 f"{int(r.trials_needed)} would")
    elif r.trials_needed == np.inf:
        tail += f"; a change of {threshold:g} is below what any number of trials finds here (more rows needed)"
    return head + tail + (f"; {r.note}" if r.note else "")


#: the columns of a comparison's points (:func:`daskpd.job.newold.points_frame`)
POINT_COLUMNS = ["method", "feature", "x", "category", "x_lo", "x_hi", "group", "new", "old", "new_se", "old_se",
                 "change", "se", "df", "t", "testable", "change_lo", "change_hi", "significant"]
