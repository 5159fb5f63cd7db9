"""A deliberately plain, in-memory H-statistic written for the tests.

Friedman & Popescu (2008), equations 44 and 46, as R ``hstats`` documents them: every
partial dependence function is evaluated at the evaluation rows, each an average of the
model's response over ALL rows of ``X`` (weighted by ``w``), then centred to weighted mean
0 over the evaluation rows (weights ``e``)::

    H2_jk = sum_i e_i (F_jk(x_i) - F_j(x_i) - F_k(x_i))^2 / sum_i e_i F_jk(x_i)^2
    H2_j  = sum_i e_i (F(x_i) - F_j(x_i) - F_-j(x_i))^2 / sum_i e_i F(x_i)^2

One loop per evaluation row and statistic, one model call per (row, PD): no sums
reused, no tree engine, no dask.
"""
from __future__ import annotations

import numpy as np
import pandas as pd


def _pd_at(predict, X: pd.DataFrame, w: np.ndarray, fixed: dict) -> float:
    """sum_l w_l f(fixed, x_l,rest) / sum_l w_l: the columns of ``fixed`` set for every row."""
    Z = X.copy()
    for c, v in fixed.items():
        Z[c] = pd.Series([v] * len(Z), index=Z.index, dtype=X[c].dtype)
    return float(np.sum(w * np.asarray(predict(Z), dtype=float)) / np.sum(w))


def _rest_at(predict, X: pd.DataFrame, w: np.ndarray, row: pd.Series, j: str) -> float:
    """F_-j at ``row``: the row's other columns, x_j taken from every row of X."""
    Z = X.copy()
    for c in X.columns:
        if c != j:
            Z[c] = pd.Series([row[c]] * len(Z), index=Z.index, dtype=X[c].dtype)
    return float(np.sum(w * np.asarray(predict(Z), dtype=float)) / np.sum(w))


def _centre(v, e):
    v = np.asarray(v, dtype=float)
    return v - np.sum(e * v) / np.sum(e)


def reference_h_statistic(predict, X: pd.DataFrame, eval_rows: pd.DataFrame, pairs, totals, w=None, e=None):
    """``{"pairs": {(a, b): h2}, "totals": {f: h2}}``; ``predict`` maps a DataFrame of
    the model's columns (those of ``X``) to responses."""
    w = np.ones(len(X)) if w is None else np.asarray(w, dtype=float)
    e = np.ones(len(eval_rows)) if e is None else np.asarray(e, dtype=float)
    feats = list(dict.fromkeys([*(f for p in pairs for f in p), *totals]))
    one = {f: _centre([_pd_at(predict, X, w, {f: r[f]}) for _, r in eval_rows.iterrows()], e) for f in feats}
    out = {"pairs": {}, "totals": {}}
    for a, b in pairs:
        fab = _centre([_pd_at(predict, X, w, {a: r[a], b: r[b]}) for _, r in eval_rows.iterrows()], e)
        out["pairs"][(a, b)] = float(np.sum(e * (fab - one[a] - one[b]) ** 2) / np.sum(e * fab ** 2))
    if totals:
        F = _centre(np.asarray(predict(eval_rows[list(X.columns)]), dtype=float), e)
        for j in totals:
            rest = _centre([_rest_at(predict, X, w, r, j) for _, r in eval_rows.iterrows()], e)
            out["totals"][j] = float(np.sum(e * (F - one[j] - rest) ** 2) / np.sum(e * F ** 2))
    return out
