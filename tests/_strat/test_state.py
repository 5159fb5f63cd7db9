"""Stratifications and scan states: the scan of A merged with the scan of B equals the
scan of A and B together (new values and levels in B included, with trials), a saved and
loaded stratification gives the same bits, and files refuse to load across formats."""
from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pytest

import daskpd
from daskpd import DataError, InvalidParameterError, ScanState, Stratification
from daskpd.datasets import Lake, Quadratic

FEATURES = ["x1", "x2", "x3", "c"]


def _frame(rows: int, seed: int) -> pd.DataFrame:
    """x1 exact (31 values), x2 and x3 binned (continuous), c categorical; y = x1^2/10 + x2 + effect(c)."""
    df = Quadratic(random_state=seed, decimals=1).chunk(0, rows)
    df["x1"] = np.round(df["x1"] * 10) / 10  # 31 exact values
    r = np.random.default_rng(seed)
    df["c"] = r.choice(["a", "b", "c", "d"], rows)
    df["y"] = df["x1"] ** 2 / 10 + df["x2"] + df["c"].map({"a": 0.0, "b": 1.0, "c": 2.0, "d": 4.0, "z": 9.0})
    return df


@pytest.fixture(scope="module")
def parts():
    a = _frame(6000, 1)
    b = _frame(2000, 2)
    b.loc[b.index[:40], "x1"] = 3.7  # a value the stratification never saw
    b.loc[b.index[40:80], "c"] = "z"  # a level it never saw
    b["y"] = b["x1"] ** 2 / 10 + b["x2"] + b["c"].map({"a": 0.0, "b": 1.0, "c": 2.0, "d": 4.0, "z": 9.0})
    return a, b, pd.concat([a, b], ignore_index=True)


@pytest.fixture(scope="module")
def strat(parts):
    return daskpd.fit_stratification(parts[0], target="y", features=FEATURES, sample_size=4000, progress=False)


def _assert_same_sums(merged: ScanState, whole: ScanState):
    assert merged.n_rows == whole.n_rows and merged.y_range == whole.y_range
    for f in FEATURES:
        m, w = merged.features[f], whole.features[f]
        assert m.counters == w.counters
        if m.coder.binned:
            np.testing.assert_array_equal(m.coder.edges, w.coder.edges)
        else:
            assert list(m.coder.values) == list(w.coder.values)
        np.testing.assert_array_equal(m.table.leaf, w.table.leaf)
        np.testing.assert_array_equal(m.table.key, w.table.key)
        np.testing.assert_allclose(m.table.values, w.table.values, rtol=1e-12,
                                   atol=1e-12 * np.abs(w.table.values).max())


@pytest.mark.parametrize("n_trials", [1, 3])
def test_merged_states_equal_the_scan_of_the_union(parts, strat, n_trials):
    a, b, ab = parts
    sa = daskpd.scan_state(a, strat, n_trials=n_trials, progress=False)
    sb = daskpd.scan_state(b, strat, n_trials=n_trials, progress=False)
    whole = daskpd.scan_state(ab, strat, n_trials=n_trials, progress=False)
    merged = sa + sb
    _assert_same_sums(merged, whole)
    assert merged.n_sets == (1 + n_trials if n_trials > 1 else 1)
    # the new value and the new level have positions of their own
    assert 3.7 in set(merged.features["x1"].coder.values) and 3.7 not in set(sa.features["x1"].coder.values)
    assert "z" in list(merged.features["c"].coder.values)
    got, want = merged.finish(strat), whole.finish(strat)
    for f in FEATURES:
        np.testing.assert_allclose(np.asarray(got[f].pd, float), np.asarray(want[f].pd, float), rtol=1e-9, atol=1e-9)
        if n_trials > 1:
            np.testing.assert_allclose(got[f].trials_pd, want[f].trials_pd, rtol=1e-9, atol=1e-9, equal_nan=True)
    # the new level's effect is estimated, close to its truth (9 above "a")
    cat = got["c"].to_frame().set_index("category")["pd"]
    assert abs((cat["z"] - cat["a"]) - 9.0) < 0.2
    x1 = got["x1"].to_frame().set_index("x")["pd"]
    assert abs((x1[3.7] - x1[0.0]) - 3.7 ** 2 / 10) < 0.3


def test_importances_from_a_base_state_equal_the_whole_scan(parts, strat):
    a, b, ab = parts
    base = daskpd.scan_state(a, strat, progress=False)
    inc = daskpd.strat_curves_and_importances(b, target="y", features=FEATURES, stratification=strat,
                                              base_state=base, keep_state=True, progress=False)
    whole = daskpd.strat_curves_and_importances(ab, target="y", features=FEATURES, stratification=strat,
                                                progress=False)
    _assert_same_sums(inc.state, daskpd.scan_state(ab, strat, progress=False))
    pd.testing.assert_frame_equal(inc.table, whole.table, rtol=1e-9)
    assert inc.state.n_rows == len(ab) and inc.stratification is strat


def test_saved_stratification_gives_the_same_bits(parts, strat, tmp_path):
    a = parts[0]
    # a run that fits its own trees, and the same request under the saved, loaded stratification
    path = strat.save(tmp_path / "strat.pkl")
    loaded = Stratification.load(path)
    assert loaded.id == strat.id and loaded.fitted_rows == len(a)
    direct = daskpd.stratpd(a, target="y", feature="x1", features=FEATURES, sample_size=4000, progress=False)
    under = daskpd.stratpd(a, target="y", feature="x1", features=FEATURES, stratification=loaded, progress=False)
    np.testing.assert_array_equal(direct.x, under.x)
    np.testing.assert_array_equal(np.asarray(direct.pd, float), np.asarray(under.pd, float))
    # the sample hashes the columns read in request order (the feature first): fit in that order
    order = ["c", "x1", "x2", "x3"]
    cat_strat = daskpd.fit_stratification(a, target="y", features=order, sample_size=4000, progress=False)
    cd = daskpd.catstratpd(a, target="y", feature="c", features=order, sample_size=4000, progress=False)
    cu = daskpd.catstratpd(a, target="y", feature="c", features=order, stratification=cat_strat, progress=False)
    pd.testing.assert_frame_equal(cd.to_frame(), cu.to_frame(), check_exact=True)
    # a state round trip: the same sums, the same curves
    st = daskpd.scan_state(a, loaded, n_trials=2, progress=False)
    st.save(tmp_path / "state")
    st.save(tmp_path / "state")  # replacing a state
    back = ScanState.load(tmp_path / "state")
    _assert_same_sums(back, st)
    assert back.nbytes == st.nbytes > 0
    r1, r2 = st.finish(loaded), back.finish(loaded)
    for f in FEATURES:
        np.testing.assert_array_equal(np.asarray(r1[f].pd, float), np.asarray(r2[f].pd, float))


def test_many_levels_merge_through_conjugate_gradients():
    """k5000 (5,000 levels: the iterative solver) and x6 (binned) from the lake generator."""
    gen = Lake(random_state=0)
    a, b = gen.chunk(0, 6000), gen.chunk(1, 3000)
    feats = ["x1", "x6", "s50", "k5000"]
    strat = daskpd.fit_stratification(a, target="y", features=feats, categorical_features=["k5000"], progress=False)
    merged = daskpd.scan_state(a, strat, progress=False) + daskpd.scan_state(b, strat, progress=False)
    whole = daskpd.scan_state(pd.concat([a, b], ignore_index=True), strat, progress=False)
    assert merged.features["k5000"].coder.n_keys > 3000
    got, want = merged.finish(strat), whole.finish(strat)
    for f in feats:
        np.testing.assert_allclose(np.asarray(got[f].pd, float), np.asarray(want[f].pd, float), rtol=1e-7,
                                   atol=1e-7)


def test_bad_inputs_are_named(parts, strat, tmp_path):
    a = parts[0]
    with pytest.raises(InvalidParameterError, match="stratification"):
        daskpd.stratpd(a, target="y", feature="x1", stratification="strat.pkl")
    with pytest.raises(DataError, match="fitted for target 'y', not 'x2'"):
        daskpd.stratpd(a, target="x2", feature="x1", features=["x1", "x3", "c", "y"], stratification=strat)
    with pytest.raises(DataError, match="pvalues"):
        daskpd.importances(a, target="y", features=FEATURES, stratification=strat, pvalues=True)
    other = daskpd.fit_stratification(a, target="y", features=FEATURES, sample_size=4000, random_state=5,
                                      progress=False)
    with pytest.raises(DataError, match="different stratifications"):
        daskpd.scan_state(a, strat, progress=False) + daskpd.scan_state(a, other, progress=False)
    # a file of another format version is refused with the versions named
    path = strat.save(tmp_path / "s.pkl")
    payload = pickle.loads(open(path, "rb").read())
    payload["format_version"] = 99
    open(path, "wb").write(pickle.dumps(payload))
    with pytest.raises(DataError, match="format 99.*refit"):
        Stratification.load(path)
    (tmp_path / "junk.pkl").write_bytes(b"not a pickle")
    with pytest.raises(DataError, match="cannot be read"):
        Stratification.load(tmp_path / "junk.pkl")


def test_state_files_keep_every_bit_of_the_sums(tmp_path):
    """The compact files (small integer leaf / key, integral columns as uint32) give back
    the exact float64 sums: integral and not, negative, above 2**32, an empty table."""
    from daskpd._engine.sums import Table
    from daskpd._strat.runs import read_table as _read_table, write_table as _write_table

    n = 1000
    r = np.random.default_rng(0)
    values = np.column_stack([r.integers(1, 50, n).astype(float),  # counts: uint32
                              r.normal(size=n),  # sums
                              -r.integers(1, 9, n).astype(float),  # integral but negative: float64
                              np.full(n, 2.0 ** 33)])  # integral, above uint32
    cases = [Table(np.sort(r.integers(0, 70_000, n)).astype(np.int32), r.integers(0, 2 ** 20, n).astype(np.int64),
                   values),
             Table(np.arange(n, dtype=np.int32), np.arange(n, dtype=np.int64) % 7, values),
             Table.empty(3)]
    for i, t in enumerate(cases):
        counts = _write_table(str(tmp_path), f"t{i}", t)
        back = _read_table(str(tmp_path), f"t{i}", counts)
        assert back.leaf.dtype == np.int32 and back.key.dtype == np.int64 and back.values.dtype == np.float64
        np.testing.assert_array_equal(back.leaf, t.leaf)
        np.testing.assert_array_equal(back.key, t.key)
        np.testing.assert_array_equal(back.values, t.values)
    assert _write_table(str(tmp_path), "t0", cases[0]) == [0]
    assert np.load(tmp_path / "t1.leaf.npy").dtype == np.uint16
