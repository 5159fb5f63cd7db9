"""Column summaries and exact order statistics, over all rows, without collecting a column.

* :func:`summarize`: ONE pass gives, per column, its counts, range and (when few) its
  distinct values with their counts (:class:`ColumnSummary`).
* :func:`order_statistics`: exact order statistics by histogram refinement -- each pass
  histograms the candidate value ranges and narrows every rank to one bin, until a
  range is small enough to collect; usually two passes over the feature columns.
* The rank arithmetic of the quantile definitions used by the model-based family:
  :func:`mquantile_ranks` (``scipy.stats.mstats.mquantiles``, scikit-learn's grid),
  :func:`type1_ranks` (inverse ECDF) and :func:`type7_ranks` (numpy's default).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from .._data.encode import as_float
from .._errors import DataError
from .plan import Job, merge_keyed, run_pass

__all__ = ["ColumnSummary", "summarize", "summarize_column", "order_statistics", "mquantile_ranks", "type1_ranks",
           "type7_ranks", "sort_levels", "MAX_UNIQUE", "MAX_LEVELS"]

#: distinct values kept per numeric column in the summary pass
MAX_UNIQUE = 1024
#: distinct levels allowed for a categorical column
MAX_LEVELS = 10_000


@dataclass
class ColumnSummary:
    """One pass over a column: counts, range and (when few) its distinct values."""

    name: str
    kind: str  # "numeric" | "categorical"
    n: int = 0  # non-missing (finite, for numeric) values
    n_missing: int = 0
    vmin: float = np.inf
    vmax: float = -np.inf
    uniques: np.ndarray | None = None  # sorted distinct values (None: more than the cap)
    counts: np.ndarray | None = None  # rows per distinct value

    @classmethod
    def combine(cls, parts: Sequence["ColumnSummary"]) -> "ColumnSummary":
        p0 = parts[0]
        out = cls(p0.name, p0.kind, sum(p.n for p in parts), sum(p.n_missing for p in parts),
                  min(p.vmin for p in parts), max(p.vmax for p in parts))
        if any(p.uniques is None for p in parts):
            return out
        if p0.kind == "numeric":
            vals = np.concatenate([p.uniques for p in parts])
            cnts = np.concatenate([p.counts for p in parts])
            u, inv = np.unique(vals, return_inverse=True)
            if len(u) > MAX_UNIQUE:
                return out
            out.uniques, out.counts = u, np.bincount(inv, weights=cnts, minlength=len(u)).astype("int64")
        else:
            acc: dict = {}
            for p in parts:
                for v, c in zip(p.uniques, p.counts):
                    acc[v] = acc.get(v, 0) + int(c)
            if len(acc) > MAX_LEVELS:
                return out
            u = sort_levels(list(acc))
            out.uniques = u
            out.counts = np.array([acc[v] for v in u], dtype="int64")
        return out


def sort_levels(levels: list) -> np.ndarray:
    arr = np.empty(len(levels), dtype=object)
    arr[:] = levels
    try:
        return arr[np.argsort(arr, kind="stable")]
    except TypeError:
        return arr[np.argsort(np.array([str(v) for v in levels]), kind="stable")]


def summarize_column(s: pd.Series, kind: str) -> ColumnSummary:
    name = str(s.name)
    if kind == "numeric":
        v = as_float(s)
        fin = np.isfinite(v)
        vals = v[fin]
        out = ColumnSummary(name, kind, int(fin.sum()), int((~fin).sum()))
        if len(vals):
            out.vmin, out.vmax = float(vals.min()), float(vals.max())
            u, cnt = np.unique(vals, return_counts=True)
            if len(u) <= MAX_UNIQUE:
                out.uniques, out.counts = u, cnt.astype("int64")
        else:
            out.uniques, out.counts = vals, np.zeros(0, dtype="int64")
        return out
    miss = s.isna().to_numpy()
    vc = s[~miss].value_counts(sort=False)
    if isinstance(vc.index.dtype, pd.CategoricalDtype):
        vc = vc[vc > 0]
    out = ColumnSummary(name, kind, int((~miss).sum()), int(miss.sum()))
    if len(vc) <= MAX_LEVELS:
        levels = sort_levels(list(vc.index.astype(object)))
        out.uniques = levels
        out.counts = vc.reindex(pd.Index(levels, dtype=vc.index.dtype) if not isinstance(
            vc.index.dtype, pd.CategoricalDtype) else pd.CategoricalIndex(levels, dtype=vc.index.dtype)
        ).to_numpy().astype("int64")
    return out


@dataclass
class _Summaries:
    cols: dict

    @classmethod
    def combine(cls, parts):
        return cls(merge_keyed(parts, "cols", ColumnSummary.combine))


class SummaryJob(Job):
    """Per partition: a :class:`ColumnSummary` of every column of ``kinds``."""

    def __init__(self, kinds: dict):
        self.kinds = kinds  # column -> kind

    def map(self, ctx):
        return _Summaries({c: summarize_column(ctx.df[c], k) for c, k in self.kinds.items()})

    def combine(self, parts, bucket=0):
        return _Summaries.combine(list(parts))


def summarize(ddf, kinds: dict) -> dict[str, ColumnSummary]:
    """One pass: a :class:`ColumnSummary` per column in ``kinds``."""
    if not kinds:
        return {}
    (res,) = run_pass(ddf, [SummaryJob(dict(kinds))], name="daskpd-summary")
    out = res.cols
    for c, s in out.items():
        if s.kind == "categorical" and s.uniques is None:
            raise DataError(f"categorical column {c!r} has more than {MAX_LEVELS:,} distinct levels")
    return out


def _edges(lo: float, hi: float, nbins: int) -> np.ndarray:
    return np.linspace(lo, hi, nbins + 1)


@dataclass
class _RefineResult:
    hists: dict  # key -> (counts, vmin, vmax)
    values: dict  # key -> sorted values

    @classmethod
    def combine(cls, parts):
        hists, values = {}, {}
        for key in parts[0].hists:
            hs = [p.hists[key] for p in parts]
            hists[key] = (np.sum([h[0] for h in hs], axis=0), min(h[1] for h in hs), max(h[2] for h in hs))
        for key in parts[0].values:
            values[key] = np.sort(np.concatenate([p.values[key] for p in parts]), kind="mergesort")
        return cls(hists, values)


class RefineJob(Job):
    """Per column: histograms of some value ranges, or the values in some ranges."""

    def __init__(self, requests: dict):
        self.requests = requests  # column -> list of (key, lo, hi, hi_inclusive, nbins or 0 for "collect")

    def combine(self, parts, bucket=0):
        return _RefineResult.combine(list(parts))

    def map(self, ctx):
        hists, values = {}, {}
        for col, reqs in self.requests.items():
            v = as_float(ctx.df[col])
            v = np.sort(v[np.isfinite(v)])
            for key, lo, hi, incl, nbins in reqs:
                i0 = np.searchsorted(v, lo, side="left")
                i1 = np.searchsorted(v, hi, side="right" if incl else "left")
                seg = v[i0:i1]
                if nbins == 0:
                    values[key] = seg
                else:
                    idx = np.searchsorted(seg, _edges(lo, hi, nbins), side="left")
                    idx[-1] = len(seg)
                    counts = np.diff(idx).astype("int64")
                    mn, mx = (float(seg[0]), float(seg[-1])) if len(seg) else (np.inf, -np.inf)
                    hists[key] = (counts, mn, mx)
        return _RefineResult(hists, values)


def order_statistics(ddf, summaries: dict[str, ColumnSummary], ranks: dict[str, Sequence[int]], *,
                     collect_cap: int = 2_000_000) -> dict[str, dict[int, float]]:
    """Exact order statistics (0-based ``ranks`` among a column's finite values).

    Distinct values from the summary answer directly; otherwise each pass histograms
    the candidate value ranges (up to 4096 equal-width bins) and narrows every rank to
    one bin, until a range holds few enough values to be collected (or a single value).
    Usually two passes over the columns; memory is bounded by ``collect_cap`` values.
    """
    out: dict[str, dict[int, float]] = {}
    pending = []  # [col, rank, lo, hi, incl, below, count]
    for col, rs in ranks.items():
        s = summaries[col]
        rs = sorted({int(r) for r in rs})
        out[col] = {}
        if not rs:
            continue
        if rs[0] < 0 or rs[-1] >= s.n:
            raise ValueError(f"rank out of range for {col!r}: {rs[0]}..{rs[-1]} of {s.n}")
        if s.uniques is not None:
            cum = np.cumsum(s.counts)
            for r in rs:
                out[col][r] = float(s.uniques[np.searchsorted(cum, r, side="right")])
            continue
        for r in rs:
            pending.append([col, r, s.vmin, s.vmax, True, 0, s.n])
    for _ in range(64):
        if not pending:
            return out
        ranges = {}
        for t in pending:
            ranges.setdefault((t[0], t[2], t[3], t[4]), t[6])
        cap = max(4096, collect_cap // max(1, len(ranges)))
        nbins = int(max(256, min(4096, (1 << 21) // max(1, len(ranges)))))
        requests: dict = {}
        keys = {}
        for i, ((col, lo, hi, incl), count) in enumerate(ranges.items()):
            mode = 0 if count <= cap else nbins
            keys[(col, lo, hi, incl)] = (i, mode)
            requests.setdefault(col, []).append((i, lo, hi, incl, mode))
        (res,) = run_pass(ddf, [RefineJob(requests)], name="daskpd-quantiles")
        nxt = []
        for t in pending:
            col, r, lo, hi, incl, below, count = t
            key, mode = keys[(col, lo, hi, incl)]
            if mode == 0:
                out[col][r] = float(res.values[key][r - below])
                continue
            counts, mn, mx = res.hists[key]
            if mn == mx:
                out[col][r] = mn
                continue
            cum = np.cumsum(counts)
            j = int(np.searchsorted(cum, r - below, side="right"))
            e = _edges(lo, hi, nbins)
            new_below = below + (int(cum[j - 1]) if j > 0 else 0)
            nlo, nhi = float(e[j]), float(e[j + 1])
            nincl = incl and j == nbins - 1
            nxt.append([col, r, nlo, nhi, nincl, new_below, int(counts[j])])
        pending = nxt
    raise RuntimeError("order statistics did not converge")  # pragma: no cover


def mquantile_ranks(n: int, percentiles) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``scipy.stats.mstats.mquantiles`` (alphap=betap=0.4, scikit-learn's grid) as ranks.

    Returns ``(lo_rank, hi_rank, gamma)``: quantile = (1-gamma)*x[lo] + gamma*x[hi].
    """
    p = np.atleast_1d(np.asarray(percentiles, dtype="float64"))
    alphap = betap = 0.4
    m = alphap + p * (1.0 - alphap - betap)
    if n == 1:
        z = np.zeros(len(p), dtype=int)
        return z, z, np.zeros(len(p))
    aleph = n * p + m
    k = np.floor(aleph.clip(1, n - 1)).astype(int)
    gamma = (aleph - k).clip(0, 1)
    return k - 1, k, gamma


def type1_ranks(n: int, K: int) -> np.ndarray:
    """0-based ranks of the type-1 (inverse ECDF) quantiles at k/K, k = 1..K (exact integers)."""
    k = np.arange(1, K + 1, dtype=np.int64)
    return -(-n * k // K) - 1


def type7_ranks(n: int, probs: np.ndarray):
    """Ranks and weights of the linear-interpolation (R type 7, numpy default) quantiles."""
    h = (n - 1) * np.asarray(probs, dtype="float64")
    lo = np.floor(h).astype(np.int64)
    hi = np.minimum(lo + 1, n - 1)
    return lo, hi, h - lo
