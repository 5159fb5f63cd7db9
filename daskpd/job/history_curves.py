"""The measures between two runs' curves of one feature (:mod:`daskpd.job.history`).

A curve is the rows of one (method, feature) of a run's ``curves.parquet``.  Their
points (numeric or categorical), aligned on the common support; the distance, the
largest local move and the support overlap; the noise of the pair (the bands, else the
rows per point) and the band test :func:`band_z`.  The definitions are the drift table's
columns, in :mod:`daskpd.job.history`'s docstring.
"""
from __future__ import annotations

import numpy as np
import pandas as pd


#: points of the common grid for numeric curves
GRID_POINTS = 101


#: grid points the local differences are averaged over before ``curve_max`` takes their maximum
MAX_WINDOW = 5
#: categorical ``curve_max``: only categories holding at least this share of the rows in both runs
MAX_CATEGORY_SHARE = 0.01


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
