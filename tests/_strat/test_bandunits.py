"""The effective units of a StratPD band (daskpd._strat.bandunits): the per-cell terms
sum to the working model's ``(sum v)^2 / sum v^2`` computed leaf by leaf, whatever the
virtual buckets; the band takes its degrees of freedom from them, so it widens where a
few leaves with one or two rows at a position carry the curve's variance; a kept state
without the terms is merged in full, not updated."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.stats import t as student

import daskpd
from daskpd import ScanState
from daskpd._engine.sums import Table, reduce_tables
from daskpd._strat.bandunits import effective_units, fold_terms, leaf_terms, terms_table


def _reference(leaf, code, n, P):
    """Per code, ``(sum v)^2 / sum v^2`` over the leaves, ``v`` from the module's
    definition, written leaf by leaf and position by position."""
    s1, s2 = np.zeros(P), np.zeros(P)
    for lf in np.unique(leaf):
        m = (leaf == lf) & (n > 0)
        p, c = code[m], n[m]
        o = np.argsort(p)
        p, c = p[o], c[o]
        if len(p) < 2:
            continue
        a = 1 / c[0]
        for k in range(P):
            if k <= p[0]:
                v = 0.0
            elif k > p[-1]:
                v = a + 1 / c[-1]
            elif k in p:
                v = a + 1 / c[np.searchsorted(p, k)]
            else:
                i = np.searchsorted(p, k) - 1
                v = a + (1 / c[i] + 1 / c[i + 1]) / 3
            s1[k] += v
            s2[k] += v * v
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(s2 > 0, s1 * s1 / s2, np.nan)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_terms_give_the_working_models_effective_units(seed):
    rng = np.random.default_rng(seed)
    P, L = 15, 9
    cells = [(lf, c) for lf in range(L) for c in range(P) if rng.random() < 0.45]
    leaf = np.array([lf for lf, _ in cells], np.int64)
    code = np.array([c for _, c in cells], np.int64)
    n = rng.integers(1, 6, len(cells)).astype(float) ** 2  # rows: 1 .. 25, unequal
    table = reduce_tables([Table(leaf.astype(np.int32), code, np.c_[n, rng.normal(size=len(n))], grouped=False)], P)
    pos = np.arange(P)
    want = _reference(leaf, code, n, P)
    # one table, or the leaves cut into virtual buckets and folded in their order
    for vb in (np.zeros(len(table), np.int64), np.asarray(table.leaf, np.int64) // 3):
        got = effective_units(fold_terms([terms_table(table, vb, P)], P), pos)
        np.testing.assert_allclose(got, want, rtol=1e-12, equal_nan=True)
    # the same from cells in any order, split in two entries (an incremental night's old runs)
    perm = rng.permutation(len(leaf))
    half = n[perm] / 2
    got = effective_units(leaf_terms(np.r_[leaf[perm], leaf[perm]], np.r_[code[perm], code[perm]], np.r_[half, half],
                                     P), pos)
    np.testing.assert_allclose(got, want, rtol=1e-12, equal_nan=True)
    # equal leaves, every cell alike: the units are the leaves holding the position
    full = reduce_tables([Table(np.repeat(np.arange(4), P).astype(np.int32), np.tile(np.arange(P), 4),
                                np.c_[np.full(4 * P, 7.0), np.zeros(4 * P)], grouped=False)], P)
    u = effective_units(fold_terms([terms_table(full, np.zeros(len(full), np.int64), P)], P), pos)
    assert np.isnan(u[0]) and np.allclose(u[1:], 4)


def _codependent(seed, n):
    rng = np.random.default_rng(seed)
    x1 = rng.integers(0, 11, n).astype(float)
    x2 = np.clip(np.round(x1 / 2 + rng.normal(0, 1.5, n)), 0, 6)
    import pandas as pd

    return pd.DataFrame({"x1": x1, "x2": x2, "y": 0.5 * x1 ** 2 + 2 * x2 + rng.normal(0, 1, n)})


def test_the_band_rests_on_the_leaves_that_carry_its_variance():
    """x2 = 5 or 6 is rare at x1 = 0: the leaves' parts holding one or two rows there
    carry most of the curve's variance, so the spread rests on far fewer units than the
    42 the trials resample, and the band's t quantile takes that many degrees of freedom
    (with 41 it is too narrow: benchmarks/bench_bands.py --coverage)."""
    df = _codependent(1, 60_000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = daskpd.stratpd(df, target="y", feature="x1", n_trials=40, random_state=1, progress=False)
    m = r.params["band_clusters"]
    u = r.band_units
    a = int(np.flatnonzero(r.supported)[0])
    assert m == 42 and np.isnan(u[a]) and np.isfinite(u[a + 1:]).all()
    assert np.nanmedian(u) < m / 2 and (u[a + 1:] <= m).all()
    b = r.band()
    T = r.trial_curves()
    std = np.nanstd(T, axis=0, ddof=1) * np.sqrt(m / (m - 1))
    df_ = np.minimum(np.minimum(39, m - 1), np.maximum(u - 1, 4))
    ok = np.isfinite(u)
    np.testing.assert_allclose(b["hi"][ok], (r.pd + student.ppf(0.95, df_) * std)[ok], rtol=1e-9)
    # wider than a band on m - 1 degrees of freedom
    ratio = (b["hi"][ok] - r.pd[ok]) / (student.ppf(0.95, m - 1) * std[ok])
    assert (ratio > 1).all() and np.median(ratio) > 1.05, ratio
    # the numbers ride the result; n_trials=1 has none
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        one = daskpd.stratpd(df, target="y", feature="x1", random_state=1, progress=False)
    assert one.band_units is None


def test_a_kept_summary_without_the_terms_is_merged_in_full(tmp_path):
    """A state kept before the band's terms existed: its next night merges the runs
    (the terms are a function of whole leaves) and counts them as a full finish does."""
    a, b = _codependent(2, 4000), _codependent(3, 1000)
    strat = daskpd.fit_stratification(a, target="y", features=["x1"], stratify_on=["x2"], progress=False)
    kw = dict(n_trials=5, progress=False)
    base = daskpd.scan_state(a, strat, **kw)
    merged, _ = base.delta_finish(daskpd.scan_state(a.iloc[:10], strat, **kw), strat)
    assert merged.features["x1"].summary.units is not None
    merged.features["x1"].summary.units = None  # as an older daskpd kept it
    merged.save(tmp_path / "s")
    st = ScanState.load(tmp_path / "s")
    assert st.features["x1"].summary.units is None
    again, got = st.delta_finish(daskpd.scan_state(b, strat, **kw), strat)
    assert again.finish_modes["x1"] == "merge" and again.features["x1"].summary.units is not None
    whole = (daskpd.scan_state(a, strat, **kw) + daskpd.scan_state(a.iloc[:10], strat, **kw)
             + daskpd.scan_state(b, strat, **kw)).finish(strat)["x1"]
    np.testing.assert_allclose(got["x1"].band_units, whole.band_units, rtol=1e-12, equal_nan=True)
