"""ALE's bins and level orders: the home of what the ALE passes evaluate the model at.

A numeric feature's bin edges are type-1 quantiles of its values (exact, over all rows,
by :func:`daskpd._engine.stats.order_statistics`); a categorical feature's levels are
ordered as given (``order=``), by an ordered pandas categorical's own order, or by 1-D
classical multidimensional scaling of the distances between levels over the model's
other inputs (:class:`OrderJob`, one pass, then :func:`order_levels`).  The rules are
those of :mod:`daskpd.model._ale`'s docstring; :func:`ale_specs` gives the
:class:`ALESpec` of every feature.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .._data.encode import as_float
from .._data.kinds import is_numeric_like, kind_of
from .._engine.stats import order_statistics, summarize, type1_ranks, type7_ranks
from .._errors import DataError, InvalidParameterError
from ._common import level_codes
from ._passes import Plan, run_jobs

__all__ = ["ALESpec", "OrderJob", "order_levels", "check_order", "ale_summary_kinds", "ale_specs"]


@dataclass
class ALESpec:
    """What the ALE pass evaluates one feature's model at."""

    feature: str
    kind: str
    values: np.ndarray  # numeric: edges z_0..z_K; categorical: ordered levels


# ---------------------------------------------------------------------------------
# ordering categorical levels


@dataclass
class _OrderPartial:
    ecdf: dict  # col -> (L, Q) counts of values <= q
    tot: dict  # col -> (L,) non-missing counts
    cross: dict  # col -> Series indexed by (code, level)

    @classmethod
    def combine(cls, parts):
        ecdf = {c: np.sum([p.ecdf[c] for p in parts], axis=0) for c in parts[0].ecdf}
        tot = {c: np.sum([p.tot[c] for p in parts], axis=0) for c in parts[0].tot}
        cross = {c: pd.concat([p.cross[c] for p in parts]).groupby(level=[0, 1]).sum() for c in parts[0].cross}
        return cls(ecdf, tot, cross)


@dataclass
class OrderJob:
    feature: str
    levels: np.ndarray
    numeric: dict  # col -> quantile points q (sorted)
    categorical: list

    def map(self, ctx):
        df = ctx.df
        codes = level_codes(df[self.feature], self.levels)
        ok = codes >= 0
        L = len(self.levels)
        ecdf, tot, cross = {}, {}, {}
        for c, q in self.numeric.items():
            v = as_float(df[c])
            m = ok & np.isfinite(v)
            Q = len(q)
            start = np.searchsorted(q, v[m], side="left")
            H = np.bincount(codes[m] * (Q + 1) + start, minlength=L * (Q + 1)).reshape(L, Q + 1)
            ecdf[c] = np.cumsum(H, axis=1)[:, :Q].astype("float64")
            tot[c] = H.sum(axis=1).astype("float64")
        for c in self.categorical:
            s = df[c]
            m = ok & s.notna().to_numpy()
            key = pd.DataFrame({"code": codes[m], "level": s[m].astype(str).to_numpy()})
            cross[c] = key.groupby(["code", "level"]).size().astype("float64")
        return _OrderPartial(ecdf, tot, cross)


def _cmdscale_1d(D: np.ndarray) -> np.ndarray:
    n = len(D)
    J = np.eye(n) - np.ones((n, n)) / n
    B = -0.5 * J @ (D ** 2) @ J
    vals, vecs = np.linalg.eigh(B)
    i = int(np.argmax(vals))
    coord = vecs[:, i] * np.sqrt(max(vals[i], 0.0))
    j = int(np.argmax(np.abs(coord)))
    if coord[j] < 0:  # a fixed orientation: the most extreme level comes last
        coord = -coord
    return coord


def order_levels(part: _OrderPartial, levels: np.ndarray) -> np.ndarray:
    """Levels ordered by 1-D classical MDS of the summed KS / frequency-table distances."""
    L = len(levels)
    D = np.zeros((L, L))
    for c, cnt in part.ecdf.items():
        t = part.tot[c]
        F = np.where(t[:, None] > 0, cnt / np.where(t > 0, t, 1)[:, None], 0.0)
        D += np.abs(F[:, None, :] - F[None, :, :]).max(axis=2)
    for c, ser in part.cross.items():
        if len(ser) == 0:
            continue
        tab = ser.unstack(fill_value=0.0).reindex(range(L), fill_value=0.0).to_numpy()
        rs = tab.sum(axis=1, keepdims=True)
        A = np.where(rs > 0, tab / np.where(rs > 0, rs, 1), 0.0)
        D += np.abs(A[:, None, :] - A[None, :, :]).sum(axis=2) / 2
    if not D.any():
        return np.asarray(levels, dtype=object)
    coord = _cmdscale_1d(D)
    return np.asarray(levels, dtype=object)[np.argsort(coord, kind="stable")]


# ---------------------------------------------------------------------------------
# building the specs (edges, level orders)


def check_order(order, features, kinds) -> dict:
    if order is None:
        return {}
    if not isinstance(order, dict):
        raise InvalidParameterError(f"parameter order must be a dict {{feature: [levels in order]}}; got {type(order).__name__}")
    for f, lv in order.items():
        if f not in features:
            raise InvalidParameterError(f"parameter order names {f!r}, which is not among the requested features")
        if kinds[f] != "categorical":
            raise InvalidParameterError(f"parameter order: feature {f!r} is numeric; an order applies to categorical features")
        if isinstance(lv, str) or len(lv) == 0:
            raise InvalidParameterError(f"parameter order[{f!r}] must be a non-empty list of levels")
        if len(set(map(str, lv))) != len(lv):
            raise InvalidParameterError(f"parameter order[{f!r}] has duplicate levels")
    return dict(order)


def ale_summary_kinds(run, features, order: dict):
    """``(want, others, need_order)``: the columns ALE summarises (column -> kind): the
    features, and the other model inputs of the categorical features whose levels it
    orders (``need_order``, by MDS over ``others``)."""
    kinds = run.kinds
    pred = run.predictor
    # columns needing a summary: the features, and the other inputs of unordered categorical features
    need_order = []
    for f in features:
        if kinds[f] == "categorical" and f not in order:
            dt = run.dtypes[f]
            if not (isinstance(dt, pd.CategoricalDtype) and dt.ordered):
                need_order.append(f)
    others = {}
    for f in need_order:
        for c in pred.columns:
            if c != f and c not in others:
                # a distance between rows: numbers (bools as 0/1, dates as ns) or levels
                numeric = is_numeric_like(run.dtypes[c]) or kind_of(run.dtypes[c]) == "datetime"
                others[c] = "categorical" if (c in kinds and kinds[c] == "categorical") or not numeric else "numeric"
    want = {f: kinds[f] for f in features}
    for c, k in others.items():
        want.setdefault(c, k)
    return want, others, need_order


def ale_specs(run, features, *, bins: int, order: dict, summaries=None, extra_ranks=None):
    """Edges / ordered levels for ``features`` (summary, quantile and ordering passes).

    ``extra_ranks`` (column -> ranks) are resolved in the same order-statistics passes and
    returned (for callers that need more quantiles of the same columns).
    """
    kinds = run.kinds
    ddf = run.ddf
    want, others, need_order = ale_summary_kinds(run, features, order)
    sums = dict(summaries or {})
    missing = {c: k for c, k in want.items() if c not in sums}
    if missing:
        sums.update(summarize(ddf, missing))
    ranks, probs = {}, np.linspace(0.0, 1.0, 100)
    for f in features:
        s = sums[f]
        if s.n == 0:
            raise DataError(f"feature {f!r} has no non-missing values")
        if kinds[f] == "numeric":
            ranks.setdefault(f, []).extend([0, *type1_ranks(s.n, bins)])
    q_ranks = {}
    for c, k in others.items():
        if k == "numeric" and sums[c].n > 0:
            lo, hi, t = type7_ranks(sums[c].n, probs)
            q_ranks[c] = (lo, hi, t)
            ranks.setdefault(c, []).extend([*lo, *hi])
    for c, rk in (extra_ranks or {}).items():
        ranks.setdefault(c, []).extend(rk)
    stats = order_statistics(ddf, sums, ranks) if ranks else {}
    specs, sources = [], {}
    for f in features:
        if kinds[f] == "numeric":
            z = np.unique([stats[f][r] for r in [0, *type1_ranks(sums[f].n, bins)]])
            if len(z) < 2:
                raise DataError(f"feature {f!r} is constant; its ALE is undefined")
            specs.append(ALESpec(f, "numeric", z))
        else:
            observed = sums[f].uniques
            if f in order:
                lv = np.asarray(list(order[f]), dtype=object)
                missing_lv = [v for v in observed if not any(_same(v, u) for u in lv)]
                if missing_lv:
                    raise InvalidParameterError(f"parameter order[{f!r}] lacks observed level(s) {missing_lv[:10]}")
                specs.append(ALESpec(f, "categorical", _match_levels(lv, observed)))
                sources[f] = "given"
            elif f not in need_order:
                cats = list(run.dtypes[f].categories)
                obs = set(map(str, observed))
                specs.append(ALESpec(f, "categorical", np.asarray([c for c in cats if str(c) in obs], dtype=object)))
                sources[f] = "ordered categorical dtype"
            else:
                specs.append(ALESpec(f, "categorical", observed))
                sources[f] = "mds"
            if len(specs[-1].values) < 2:
                raise DataError(f"feature {f!r} has a single level; its ALE is undefined")
    jobs = []
    for sp in specs:
        if sources.get(sp.feature) == "mds":
            num = {c: _type7_values(stats[c], q_ranks[c]) for c in others if others[c] == "numeric" and c != sp.feature
                   and c in q_ranks}
            cat = [c for c in others if others[c] == "categorical" and c != sp.feature]
            jobs.append(OrderJob(sp.feature, sp.values, num, cat))
    if jobs:
        parts, _ = run_jobs(ddf, Plan(jobs), name="daskpd-ale-order")
        by = {j.feature: p for j, p in zip(jobs, parts)}
        for sp in specs:
            if sp.feature in by:
                sp.values = order_levels(by[sp.feature], sp.values)
    return specs, sources, sums, stats


def _same(a, b) -> bool:
    try:
        return bool(a == b) or str(a) == str(b)
    except (TypeError, ValueError):
        return str(a) == str(b)


def _match_levels(given, observed):
    """The given order, expressed with the observed values (types as in the data)."""
    out = []
    for g in given:
        hit = [u for u in observed if _same(u, g)]
        if hit:
            out.append(hit[0])
    return np.asarray(out, dtype=object)


def _type7_values(stats: dict, rk) -> np.ndarray:
    lo, hi, t = rk
    a = np.array([stats[int(r)] for r in lo])
    b = np.array([stats[int(r)] for r in hi])
    return a + t * (b - a)
