"""Second-order (2-D) accumulated local effects of two numeric features, distributed.

Apley & Zhu (2020), section 3, in the convention of their R package ALEPlot as PyALE
1.2.0 implements it (``PyALE._src.ALE_2D.aleplot_2D_continuous``):

1. edges of each feature as the 1-D ALE's: ``z_0 = min``, the type-1 quantiles at
   ``k/K``, duplicates dropped (exact, over all rows); cell ``(i, j)`` is
   ``(z1_{i-1}, z1_i] x (z2_{j-1}, z2_j]`` (the first bin of each axis also holds its
   minimum);
2. a row in cell ``(i, j)`` gives the second-order difference of the predictions at the
   cell's four corners, the row's other inputs kept::

       (f(z1_i, z2_j) - f(z1_i, z2_{j-1})) - (f(z1_{i-1}, z2_j) - f(z1_{i-1}, z2_{j-1}))

   and ``Delta_ij`` is the (weighted) mean over the cell's rows;
3. a cell with no rows takes the ``Delta`` of the nearest cell with rows, the distance
   measured between cell centres with each axis divided by its range (ALEPlot/PyALE
   do this with a nearest-neighbour search; ties here go to the first cell in row-major
   order);
4. ``F_ij = sum_{a<=i, b<=j} Delta_ab`` (0 on the row ``i = 0`` and the column ``j = 0``);
5. the first-order effects are removed: along ``x1``, ``fJ1_i = sum_{a<=i}
   sum_j w_aj (D_a,j-1 + D_aj) / 2 / w_a.`` with ``D_aj = F_aj - F_a-1,j`` (and
   symmetrically along ``x2``), ``F - fJ1 - fJ2``;
6. then the mean over the rows (each cell's value the mean of its four corners) is
   removed, so the surface has mean zero over the data.

Per partition the kernel predicts the four corners of every row's cell and returns per
cell the weight, the row count, the mean and the sum of squared deviations of the
differences (merged exactly across partitions, as the 1-D ALE's bins); the driver does
steps 3-6 on the ``K1 x K2`` cell table.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .._data.encode import as_float
from .._engine.plan import merge_keyed, sum_fields
from .._errors import DataError
from ..plotting.model import plot_ale2d
from ..results import CurveResult, curve_frame
from ..results.curves import DEFAULT_BAND, band_columns, band_note, trial_band
from ._common import ROW_COUNTS, BinStats, input_rows, response_note
from ._passes import trial_bin_sums

__all__ = ["ALE2DResult"]


@dataclass(repr=False)
class ALE2DResult(CurveResult):
    """Second-order ALE of the pair ``features``.

    ``x`` / ``x2`` are the edges of the two features and ``ale`` the centred pure
    interaction effect at the grid points, shape ``(len(x), len(x2))``.  ``count``,
    ``weight``, ``delta``, ``delta_std`` and ``imputed`` describe the cell ending at each
    grid point (``(x_{i-1}, x_i] x (x2_{j-1}, x2_j]``; 0 / NaN / False on the first row
    and column, which end no cell): rows, weight, mean and standard deviation of the
    second-order differences, and whether the cell had no rows and took its neighbour's
    ``delta``.

    With bootstrap trials (``n_trials`` > 1), ``trials_pd`` holds every trial's centred
    surface, shape ``(n_trials, len(x), len(x2))``, and :meth:`band` their spread per
    grid point.
    """

    features: tuple
    x: np.ndarray
    x2: np.ndarray
    ale: np.ndarray
    count: np.ndarray
    weight: np.ndarray
    delta: np.ndarray
    delta_std: np.ndarray
    imputed: np.ndarray
    response: str = "predict"
    target_class: object = None
    n_rows: int = 0
    n_used: int = 0
    n_missing: int = 0
    n_outside: int = 0
    params: dict = field(default_factory=dict)
    trials_pd: np.ndarray | None = None  # (n_trials, len(x), len(x2)): every bootstrap trial's surface

    kind = "numeric"
    kinds = ("numeric", "numeric")

    @property
    def n_trials(self) -> int:
        return 1 if self.trials_pd is None else len(self.trials_pd)

    def band(self) -> dict | None:
        """``{"std", "lo", "hi", "n"}`` over the trials at every grid point, each of
        shape ``(len(x), len(x2))``; None without trials (see
        :func:`daskpd.results.curves.trial_band`).  The edges and the model are fixed;
        each trial re-weights the rows' second-order differences, the imputation of the
        cells it leaves empty, the first-order corrections and the centring."""
        if self.trials_pd is None:
            return None
        return trial_band(self.trials_pd, tuple(self.params.get("band", DEFAULT_BAND)), center=self.ale)

    def summary(self) -> str:
        return super().summary() + response_note(self) + band_note(self)

    @property
    def feature(self) -> tuple:
        return tuple(self.features)

    @property
    def pd(self) -> np.ndarray:
        return self.ale

    @property
    def supported(self) -> np.ndarray:
        """A grid point is supported when at least one of the (up to four) cells it is a
        corner of holds rows."""
        cell = np.asarray(self.count) > 0  # the cell ending at (i, j); False on the first row/column
        out = cell.copy()
        out[:-1, :] |= cell[1:, :]  # the cell ending at (i+1, j) has (i, j) as a corner
        out[:, :-1] |= cell[:, 1:]
        out[:-1, :-1] |= cell[1:, 1:]
        return out

    def __repr__(self) -> str:
        return (f"ALE2DResult(features={self.features}, grid={len(self.x)}x{len(self.x2)}, "
                f"empty_cells={int(self.imputed.sum())}, rows={self.n_rows}, used={self.n_used})")

    def curve(self) -> dict:
        """One row per grid point (row-major): the first feature in the head, the
        second in ``feature_2``, ``kind_2``, ``x_2``; then the cell columns."""
        n0, n1 = len(self.x), len(self.x2)
        extra = {"feature_2": np.full(n0 * n1, self.features[1], dtype=object),
                 "kind_2": np.full(n0 * n1, "numeric", dtype=object),
                 "x_2": np.tile(np.asarray(self.x2, dtype="float64"), n0),
                 "weight": self.weight.reshape(-1), "delta": self.delta.reshape(-1),
                 "delta_std": self.delta_std.reshape(-1), "imputed": self.imputed.reshape(-1)}
        b = self.band()
        if b is not None:
            extra.update({k: v.reshape(-1) for k, v in band_columns(b).items()})
        return {"positions": np.repeat(np.asarray(self.x, dtype="float64"), n1), "pd": self.ale.reshape(-1),
                "count": self.count.reshape(-1).astype("int64"), "supported": self.supported.reshape(-1),
                "extra": extra}

    def to_frame(self):
        c = self.curve()
        return curve_frame(self.features[0], "numeric", c["positions"], c["pd"], count=c["count"],
                           supported=c["supported"], n_rows=self.n_rows, extra=c["extra"])

    def grid_frame(self):
        """The surface as a pandas DataFrame: index the edges of ``features[0]``,
        columns those of ``features[1]`` (PyALE's return shape)."""
        return pd.DataFrame(self.ale, index=pd.Index(self.x, name=self.features[0]),
                            columns=pd.Index(self.x2, name=self.features[1]))

    def metadata(self) -> dict:
        return {"method": "ale", "order": 2, "features": list(self.features), "kinds": list(self.kinds),
                "response": self.response, "target_class": self.target_class, "n_rows": self.n_rows,
                "n_used": self.n_used, "n_missing": self.n_missing, "n_outside": self.n_outside,
                "empty_cells": int(self.imputed.sum()), "params": self.params}

    def plot(self, ax=None, **kwargs):
        return plot_ale2d(self, ax=ax, **kwargs)


@dataclass
class ALE2DSpec:
    features: tuple
    z0: np.ndarray  # edges of features[0]
    z1: np.ndarray  # edges of features[1]


@dataclass
class _ALE2DPairPartial:
    stats: BinStats  # per cell, row-major (K0 x K1)
    n_rows: int
    n_used: int
    n_missing: int
    n_outside: int
    trials: np.ndarray | None = None  # with trials: (T, 2, cells) trial weight and weighted delta per cell

    @classmethod
    def merge(cls, parts):
        tr = None if parts[0].trials is None else np.sum([p.trials for p in parts], axis=0)
        return cls(BinStats.merge_all([p.stats for p in parts]), **sum_fields(parts, *ROW_COUNTS), trials=tr)


@dataclass
class _ALE2DPartial:
    pairs: dict

    @classmethod
    def combine(cls, parts):
        return cls(merge_keyed(parts, "pairs", _ALE2DPairPartial.merge))


def _cells(x: np.ndarray, z: np.ndarray) -> np.ndarray:
    """The bin of each x among the edges z: ``(z_{k}, z_{k+1}]`` is bin k, z_0 in bin 0."""
    return np.clip(np.searchsorted(z, x, side="left") - 1, 0, len(z) - 2)


@dataclass
class ALE2DJob:
    """Per partition: the four corner predictions of every row's cell, summed per cell."""

    specs: list

    def map(self, ctx):
        pred = ctx.plan.predictor
        w = ctx.weights
        out = {}
        for sp in self.specs:
            f0, f1 = sp.features
            z0, z1 = sp.z0, sp.z1
            a, b = as_float(ctx.df[f0]), as_float(ctx.df[f1])
            fin = np.isfinite(a) & np.isfinite(b)
            ok = fin & (a >= z0[0]) & (a <= z0[-1]) & (b >= z1[0]) & (b <= z1[-1])
            rows = np.flatnonzero(ok)
            i, j = _cells(a[rows], z0), _cells(b[rows], z1)
            sub = input_rows(ctx, rows)
            lo0, hi0, lo1, hi1 = z0[i], z0[i + 1], z1[j], z1[j + 1]
            P = pred.predict_rowwise(sub, [[(f0, lo0), (f1, lo1)], [(f0, lo0), (f1, hi1)],
                                           [(f0, hi0), (f1, lo1)], [(f0, hi0), (f1, hi1)]], ctx.plan.batch_rows)
            # PyALE's order of operations: (y22 - y21) - (y12 - y11)
            delta = (P[3] - P[2]) - (P[1] - P[0]) if len(rows) else np.empty(0)
            K1 = len(z1) - 1
            cells = (len(z0) - 1) * K1
            stats = BinStats.of(i * K1 + j, delta, None if w is None else w[rows], cells)
            tr = trial_bin_sums(ctx, i * K1 + j, delta, rows, cells) if ctx.n_sets > 1 else None
            out[sp.features] = _ALE2DPairPartial(stats, ctx.n, len(rows), int((~fin).sum()), int((fin & ~ok).sum()),
                                                 tr)
        return _ALE2DPartial(out)


def _impute_nearest(delta: np.ndarray, filled: np.ndarray, z0: np.ndarray, z1: np.ndarray) -> np.ndarray:
    """Empty cells take the delta of the nearest filled cell (centres scaled by range)."""
    out = delta.copy()
    if filled.all() or not filled.any():
        return out
    c0 = (z0[:-1] + z0[1:]) / (2 * (z0[-1] - z0[0]))
    c1 = (z1[:-1] + z1[1:]) / (2 * (z1[-1] - z1[0]))
    C0, C1 = np.meshgrid(c0, c1, indexing="ij")
    have = np.flatnonzero(filled.reshape(-1))
    empty = np.flatnonzero(~filled.reshape(-1))
    p0, p1 = C0.reshape(-1), C1.reshape(-1)
    flat = out.reshape(-1)
    step = max(1, 2_000_000 // len(have))
    for s in range(0, len(empty), step):
        e = empty[s:s + step]
        d = (p0[e, None] - p0[None, have]) ** 2 + (p1[e, None] - p1[None, have]) ** 2
        flat[e] = flat[have[np.argmin(d, axis=1)]]
    return flat.reshape(delta.shape)


def ale2d_surface(delta: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Steps 4-6 of the module docstring: the centred ``(K0+1) x (K1+1)`` surface from
    the per-cell ``delta`` (empty cells already imputed) and the cell weights ``w``."""
    K0, K1 = delta.shape
    F = np.zeros((K0 + 1, K1 + 1))
    F[1:, 1:] = np.cumsum(np.cumsum(delta, axis=1), axis=0)
    # first-order effect along x1 (rows): local differences along x1 at each x2 edge
    D0 = F[1:, :] - F[:-1, :]  # (K0, K1+1), D0[a-1, j] = F[a, j] - F[a-1, j]
    w0 = w.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        m0 = np.where(w0 > 0, (w * (D0[:, :-1] + D0[:, 1:]) / 2).sum(axis=1) / np.where(w0 > 0, w0, 1), 0.0)
    fJ0 = np.concatenate([[0.0], np.cumsum(m0)])
    D1 = F[:, 1:] - F[:, :-1]  # (K0+1, K1)
    w1 = w.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        m1 = np.where(w1 > 0, (w * (D1[:-1, :] + D1[1:, :]) / 2).sum(axis=0) / np.where(w1 > 0, w1, 1), 0.0)
    fJ1 = np.concatenate([[0.0], np.cumsum(m1)])
    G = F - fJ0[:, None] - fJ1[None, :]
    corners = (G[:-1, :-1] + G[1:, 1:] + G[:-1, 1:] + G[1:, :-1]) / 4
    return G - (w * corners).sum() / w.sum()


def finish_ale2d(sp: ALE2DSpec, part: _ALE2DPairPartial, pred, params) -> ALE2DResult:
    if part.n_used == 0:
        raise DataError(f"features {sp.features!r}: no row has usable values of both")
    K0, K1 = len(sp.z0) - 1, len(sp.z1) - 1
    st = part.stats
    W, N = st.w.reshape(K0, K1), st.n.reshape(K0, K1)
    filled = (N > 0) & (W > 0)
    mean = np.where(filled, st.mean.reshape(K0, K1), np.nan)
    delta = _impute_nearest(mean, filled, sp.z0, sp.z1)
    surface = ale2d_surface(delta, np.where(filled, W, 0.0))

    def pad(a, fill, dtype="float64"):
        out = np.full((K0 + 1, K1 + 1), fill, dtype=dtype)
        out[1:, 1:] = a
        return out

    return ALE2DResult(features=tuple(sp.features), x=sp.z0, x2=sp.z1, ale=surface, count=pad(N, 0.0),
                       weight=pad(W, 0.0), delta=pad(delta, np.nan), delta_std=pad(st.std().reshape(K0, K1), np.nan),
                       imputed=pad(~filled, False, bool), response=pred.response, target_class=pred.target_class,
                       n_rows=part.n_rows, n_used=part.n_used, n_missing=part.n_missing, n_outside=part.n_outside,
                       params=params, trials_pd=None if part.trials is None else _trial_surfaces(sp, part.trials))


def _trial_surfaces(sp: ALE2DSpec, trials: np.ndarray) -> np.ndarray:
    """Every trial's centred surface: the finish above with the trial's weights (a cell
    the trial leaves without weight is imputed from its nearest cell with weight; a trial
    with no weight at all is NaN)."""
    K0, K1 = len(sp.z0) - 1, len(sp.z1) - 1
    out = np.full((len(trials), K0 + 1, K1 + 1), np.nan)
    for t, tr in enumerate(trials):
        W, S = tr[0].reshape(K0, K1), tr[1].reshape(K0, K1)
        filled = W > 0
        if not filled.any():
            continue
        mean = np.where(filled, S / np.where(filled, W, 1.0), np.nan)
        out[t] = ale2d_surface(_impute_nearest(mean, filled, sp.z0, sp.z1), np.where(filled, W, 0.0))
    return out
