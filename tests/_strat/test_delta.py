"""The incremental finish: a state's numeric curves updated by the cells appended rows
touch (daskpd._strat.delta) and its categorical effects solved from normal equations
updated leaf by leaf (daskpd._strat.catdelta) equal a full finish of the merged sums
under the same stratification -- binned and exact features (new values), a categorical
feature with a new level, trials, two successive appends through saved (memory-mapped)
states, and a compaction of the runs."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from test_state import FEATURES, _frame

import daskpd
from daskpd import ScanState
from daskpd._engine.sums import Table
from daskpd._strat import categorical_system as system_mod
from daskpd._strat import catstratpd_estimator as cat_estimator_mod
from daskpd._strat import state as state_mod
from daskpd._strat.categorical_solve import solve_table
from daskpd._strat.catruns import effects_of_runs, runs_block
from daskpd._strat.delta_lookup import RunView

RTOL = 1e-12


def _appended(seed: int, rows: int, x1_value: float, level: str) -> pd.DataFrame:
    b = _frame(rows, seed)
    b.loc[b.index[:30], "x1"] = x1_value  # a value the stratification never saw
    b.loc[b.index[30:60], "c"] = level  # a level it never saw
    b["y"] = b["x1"] ** 2 / 10 + b["x2"] + b["c"].map({"a": 0.0, "b": 1.0, "c": 2.0, "d": 4.0, "z": 9.0, "w": 6.0})
    return b


@pytest.fixture(scope="module")
def data():
    a = _frame(6000, 1)
    return a, _appended(2, 1500, 3.7, "z"), _appended(3, 1500, 4.1, "w")


@pytest.fixture(scope="module")
def strat(data):
    return daskpd.fit_stratification(data[0], target="y", features=FEATURES, sample_size=4000, progress=False)


def _close(a, b):
    a, b = np.asarray(a, float), np.asarray(b, float)
    assert a.shape == b.shape
    scale = np.nanmax(np.abs(b)) if np.isfinite(b).any() else 1.0
    np.testing.assert_allclose(a, b, rtol=RTOL, atol=RTOL * scale, equal_nan=True)


def _same_results(got: dict, want: dict, n_trials: int):
    for f in FEATURES:
        g, w = got[f], want[f]
        if f == "c":  # the kept normal equations, the touched leaves' terms replaced
            pd.testing.assert_frame_equal(g.to_frame(), w.to_frame(), rtol=1e-9)
            _close(g.pd, w.pd)
            if n_trials > 1:
                _close(g.trials_pd, w.trials_pd)
            assert (g.n_groups, g.n_leaves, g.n_leaves_used, g.n_ignored) == \
                (w.n_groups, w.n_leaves, w.n_leaves_used, w.n_ignored)
            continue
        _close(g.x, w.x)  # binned: sum x / rows, sums added in another order
        _close(g.pd, w.pd)
        _close(g.slope, w.slope)
        np.testing.assert_array_equal(g.slope_count, w.slope_count)
        np.testing.assert_array_equal(g.count, w.count)
        assert (g.n_used, g.n_ignored, g.n_leaves, g.n_rows) == (w.n_used, w.n_ignored, w.n_leaves, w.n_rows)
        if n_trials > 1:
            _close(g.trials_pd, w.trials_pd)
            # the band's effective units: the touched leaves' terms replaced, as a full finish counts them
            assert g.band_units is not None and np.isfinite(w.band_units).any()
            _close(g.band_units, w.band_units)
            _close(g.band()["hi"], w.band()["hi"])
        else:
            assert g.band_units is None and w.band_units is None
        if f != "x1":  # the vocabulary of x1 grows: its sample is rehashed (module docstring of delta.py)
            for k in ("x0", "x1", "slope"):
                _close(np.sort(g.segments[k]), np.sort(w.segments[k]))


@pytest.mark.parametrize("n_trials", [1, 3])
def test_two_appends_through_saved_states_equal_full_finishes(data, strat, n_trials, tmp_path, monkeypatch):
    a, b1, b2 = data
    kw = {"n_trials": n_trials} if n_trials > 1 else {}
    state = daskpd.scan_state(a, strat, progress=False, **kw)
    monkeypatch.setattr(state_mod, "COMPACT_SHARE", 10.0)
    seen = a
    for step, b in enumerate([b1, b2]):
        if step == 1:  # the second append compacts the runs into one
            monkeypatch.setattr(state_mod, "MAX_RUNS", 2)
        new = daskpd.scan_state(b, strat, progress=False, **kw)
        merged, got = state.delta_finish(new, strat)
        seen = pd.concat([seen, b], ignore_index=True)
        whole = daskpd.scan_state(seen, strat, progress=False, **kw)
        _same_results(got, whole.finish(strat), n_trials)
        # the base state had no numeric summary: merged in full once, then updated by deltas
        want = "merge" if step == 0 else "delta"
        assert merged.finish_modes == {"x1": want, "x2": want, "x3": want, "c": "delta"}
        assert {len(merged.features[f].runs) for f in FEATURES} == {2 if step == 0 else 1}
        merged.save(tmp_path / f"s{step}")
        state = ScanState.load(tmp_path / f"s{step}")
        assert state.features["x1"].summary is not None
        # the runs on disk merge to the whole scan's sums
        for f in FEATURES:
            np.testing.assert_array_equal(state.features[f].table.key, whole.features[f].table.key)
            np.testing.assert_allclose(state.features[f].table.values, whole.features[f].table.values, rtol=1e-12)
    # the second state's runs: the first state's files, hard-linked
    assert state.features["x2"].runs[0].sources is not None


def test_a_full_run_keeps_the_summaries_and_the_next_run_is_a_delta(data, strat, tmp_path):
    a, b1, b2 = data
    full = daskpd.strat_curves_and_importances(a, target="y", features=FEATURES, stratification=strat,
                                               keep_state=True, progress=False)
    full.state.save(tmp_path / "s")
    st = ScanState.load(tmp_path / "s")
    assert all(st.features[f].summary is not None for f in FEATURES)
    inc = daskpd.strat_curves_and_importances(b1, target="y", features=FEATURES, stratification=strat,
                                              base_state=st, keep_state=True, progress=False)
    assert inc.state.finish_modes == {"x1": "delta", "x2": "delta", "x3": "delta", "c": "delta"}
    ab = pd.concat([a, b1], ignore_index=True)
    whole = daskpd.strat_curves_and_importances(ab, target="y", features=FEATURES, stratification=strat,
                                                progress=False)
    _same_results(inc.curves, whole.curves, 1)
    pd.testing.assert_frame_equal(inc.table, whole.table, rtol=1e-9)
    # the state written next holds the base run's files and one more run
    inc.state.save(tmp_path / "s2")
    assert len(ScanState.read_meta(tmp_path / "s2")["features"][0]["runs"]) == 2


@pytest.mark.parametrize("n_trials", [1, 3])
def test_many_categories_are_solved_over_the_runs_unmerged(data, strat, n_trials, tmp_path, monkeypatch):
    # above EXPLICIT_MAX_KEYS categories no normal equations are kept: conjugate gradients
    # whose products run over the kept runs (memory-mapped) and the new one, unmerged
    monkeypatch.setattr(cat_estimator_mod, "EXPLICIT_MAX_KEYS", 3)
    monkeypatch.setattr(state_mod, "COMPACT_SHARE", 10.0)
    a, b1, b2 = data
    kw = {"n_trials": n_trials} if n_trials > 1 else {}
    state = daskpd.scan_state(a, strat, progress=False, **kw)
    assert state.features["c"].summary is None
    # the full finish of the merged sums (a scan of the data at once has the same sums but
    # for the copies of a record, whose folds follow their order within a partition)
    whole = state
    for step, b in enumerate([b1, b2]):  # a new level each time; the second over two saved runs
        new = daskpd.scan_state(b, strat, progress=False, **kw)
        merged, got = state.delta_finish(new, strat)
        assert merged.finish_modes["c"] == "runs" and merged.features["c"].summary is None
        assert len(merged.features["c"].runs) == step + 2
        whole = whole + new
        want = whole.finish(strat)["c"]
        g = got["c"]
        assert g.params["solver"] == want.params["solver"] == "cg"
        # the same system, its products summed in another order: equal to the CG's tolerance
        pd.testing.assert_frame_equal(g.to_frame(), want.to_frame(), rtol=1e-10)
        _close(g.pd, want.pd)
        if n_trials > 1:
            _close(g.trials_pd, want.trials_pd)
        assert (g.n_groups, g.n_leaves, g.n_leaves_used, g.n_ignored) == \
            (want.n_groups, want.n_leaves, want.n_leaves_used, want.n_ignored)
        merged.save(tmp_path / f"s{step}")
        state = ScanState.load(tmp_path / f"s{step}")
    # conjugate gradients that do not converge: the explicit system, summed from the runs
    monkeypatch.setattr(system_mod, "CG_MAXITER", 1)
    again = daskpd.scan_state(b1, strat, progress=False, **kw)
    _, got = state.delta_finish(again, strat)
    want = (whole + again).finish(strat)["c"]
    assert got["c"].params["solver"] == want.params["solver"] == "cg+dense"
    pd.testing.assert_frame_equal(got["c"].to_frame(), want.to_frame(), rtol=1e-10)


def test_runs_block_solves_the_merged_table():
    # disjoint families of categories (several groups), single-category leaves, cells of a
    # leaf split between an old run (its own codes, mapped out of order) and the new one
    rng = np.random.default_rng(5)
    K, rows = 12, []
    for leaf in range(300):
        fam = leaf % 3
        cats = rng.choice(np.arange(4 * fam, 4 * fam + 4), size=rng.integers(1, 5), replace=False)
        for c in cats:
            rows.append((leaf, c, rng.integers(1, 6), 0.0))
    t = pd.DataFrame(rows, columns=["leaf", "code", "n", "s"])
    t["s"] = t["n"] * (t["code"] * 0.5 + t["leaf"] * 0.01) + rng.normal(0, 0.1, len(t))
    old = t.sample(frac=0.7, random_state=1).sort_values(["leaf", "code"])
    new = t.drop(old.index).sort_values(["leaf", "code"])
    extra = old.sample(frac=0.2, random_state=2)  # cells in both runs
    new = pd.concat([new, extra.assign(n=1, s=0.3)]).groupby(["leaf", "code"], as_index=False).sum()
    both = pd.concat([old, new]).groupby(["leaf", "code"], as_index=False).sum()
    kmap = rng.permutation(K)  # the old run's code -> current code
    inv = np.argsort(kmap)
    old_codes = inv[old["code"].to_numpy()]
    order = np.lexsort((old_codes, old["leaf"].to_numpy()))
    ov = old.to_numpy()[order]
    old_vals = np.c_[ov[:, 2], ov[:, 3]]
    view = RunView(ov[:, 0].astype(np.uint16), old_codes[order].astype(np.uint16), kmap, lambda j: old_vals[:, j])
    delta = Table(new["leaf"].to_numpy(np.int32), new["code"].to_numpy(np.int64),
                  new[["n", "s"]].to_numpy(np.float64))
    from daskpd._strat.leafboot import weights_of_leaves

    sets = effects_of_runs(runs_block([view], delta, K, 3, "c", 4))
    W = weights_of_leaves("c", np.arange(300), 2, 4)
    lf = both["leaf"].to_numpy()
    for st, got in enumerate(sets):  # the curve's, then each trial's: every leaf's cells times its weight
        w = np.ones(len(both)) if st == 0 else W[lf, st - 1].astype(float)
        keep = w > 0
        want = solve_table(lf[keep], both["code"].to_numpy()[keep], (both["n"].to_numpy(float) * w)[keep],
                           (both["s"].to_numpy(float) * w)[keep], K, solver="direct")
        assert want.n_groups == got.n_groups and want.n_ignored > 0
        assert st > 0 or got.n_groups == 3
        np.testing.assert_array_equal(got.group, want.group)
        for k in ("count", "sum_y", "count_used", "n_leaves_cat"):
            np.testing.assert_allclose(getattr(got, k), getattr(want, k), rtol=1e-12)
        np.testing.assert_allclose(got.effect, want.effect, rtol=1e-9, atol=1e-9)
        assert (got.n_ignored, got.n_leaves, got.n_leaves_used) == (want.n_ignored, want.n_leaves,
                                                                   want.n_leaves_used)
