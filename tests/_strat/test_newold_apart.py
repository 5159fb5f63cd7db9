"""The new-against-old comparison of two states under one stratification (in memory):
the old side taken as its own state or as all the rows less the new ones gives the same
curves and test; the same rows on both sides give a change of exactly 0; Holm's levels
and the Bonferroni-t critical values are those of the textbook; too few trials say how
many would do."""
from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import daskpd
from daskpd.job.drift import _holm, critical, decide
from daskpd.job.newold import compare_states, points_frame, record_frame

EFFECTS = np.array([0.0, 1.0, 3.0, 2.5])
METHODS = {"x1": "stratpd", "x2": "stratpd", "c": "catstratpd"}


def frame(seed: int, n: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x1 = rng.integers(0, 11, n).astype(float)
    x2 = rng.uniform(0, 1, n)
    c = rng.integers(0, 4, n)
    y = 0.5 * x1 ** 2 + 4 * x2 + EFFECTS[c] + rng.normal(0, 1, n)
    return pd.DataFrame({"x1": x1, "x2": x2, "c": c.astype(str), "y": y})


KW = dict(target="y", categorical_features=["c"], n_trials=1, progress=False, random_state=0)


@pytest.fixture(scope="module")
def states():
    old, new = frame(0, 8000), frame(1, 1500)
    base = daskpd.strat_curves_and_importances(old, keep_state=True, **KW)
    strat = base.stratification
    got = daskpd.strat_curves_and_importances(new, stratification=strat, base_state=base.state, keep_state=True,
                                              **KW)
    return strat, base.state, got.new_state, got.state


def test_the_old_rows_alone_or_all_rows_less_the_new_give_the_same_test(states):
    strat, old, new, whole = states
    a = decide(compare_states(new, strat, METHODS, 40, old_state=old))
    b = decide(compare_states(new, strat, METHODS, 40, whole_state=whole))
    pa, pb = points_frame(a), points_frame(b)
    assert len(pa) > 20 and list(pa["feature"].unique()) == ["x1", "x2", "c"]
    cols = ["x", "new", "old", "change", "se", "t"]
    np.testing.assert_allclose(pa[cols].to_numpy(float), pb[cols].to_numpy(float), rtol=1e-9, atol=1e-9)
    ra, rb = record_frame(a), record_frame(b)
    assert ra["status"].tolist() == rb["status"].tolist() == ["ok", "ok", "ok"]  # one generator: no drift
    assert (ra["rows_new"] == 1500).all() and (ra["rows_old"] == 8000).all() and (rb["rows_old"] == 8000).all()
    # the continuous x2 is compared on at most 12 positions of about equal new-row mass
    assert pa[pa["feature"] == "x2"].shape[0] <= 12


def test_the_same_rows_on_both_sides_change_nothing(states):
    strat, old, _, _ = states
    recs = decide(compare_states(old, strat, METHODS, 30, old_state=old))
    pts = points_frame(recs)
    assert np.abs(pts["change"].to_numpy(float)).max() < 1e-9
    assert [r.status for r in recs] == ["ok", "ok", "ok"] and all(r.drift < 1e-9 for r in recs)


def test_too_few_trials_name_the_trials_needed(states):
    strat, old, new, _ = states
    recs = decide(compare_states(new, strat, METHODS, 3, old_state=old))
    x1 = next(r for r in recs if r.feature == "x1")
    assert x1.n_trials == 3 and np.isfinite(x1.trials_needed) and x1.trials_needed > 3
    assert f"3 trials are too few to find a change of 0.1: T >= {int(x1.trials_needed)} would" in x1.why


def test_holm_levels_and_bonferroni_t_critical_values():
    # p-values 0.001, 0.004, 0.02 at 0.01: the first two rejected at 0.01/3 and 0.01/2, the third tested at 0.01
    assert _holm([0.02, 0.001, 0.004], 0.01) == pytest.approx([0.01, 0.01 / 3, 0.01 / 2])
    # the second not rejected (0.006 > 0.005): it and everything after keep its level
    assert _holm([0.001, 0.006, 0.007], 0.01) == pytest.approx([0.01 / 3, 0.005, 0.005])
    assert float(critical(0.05, 1, np.inf)) == pytest.approx(stats.norm.ppf(0.975))
    assert float(critical(0.01, 10, 19)) == pytest.approx(stats.t.ppf(1 - 0.01 / 20, 19))



class _OneAfterTheOther:
    """An executor running each submitted call at once, in the calling thread."""

    def __init__(self, *args, **kwargs):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def submit(self, fn, *args, **kwargs):
        from concurrent.futures import Future

        fut = Future()
        fut.set_result(fn(*args, **kwargs))
        return fut


def test_the_two_sides_finished_in_threads_equal_them_finished_one_after_the_other(states, monkeypatch):
    """compare_states finishes the new and the old side in two threads: the points and
    records are bit for bit those of the two finishes run one after the other."""
    import daskpd.job.newold as newold

    strat, old, new, _ = states
    threaded = decide(compare_states(new, strat, METHODS, 25, old_state=old))
    monkeypatch.setattr(newold, "ThreadPoolExecutor", _OneAfterTheOther)
    alone = decide(compare_states(new, strat, METHODS, 25, old_state=old))
    pt, pa = points_frame(threaded), points_frame(alone)
    assert len(pt) > 20
    pd.testing.assert_frame_equal(pt, pa, check_exact=True)
    pd.testing.assert_frame_equal(record_frame(threaded), record_frame(alone), check_exact=True)


@pytest.mark.parametrize("saved", [False, True], ids=["old-sums-in-memory", "old-sums-saved"])
def test_the_comparison_on_a_cluster_equals_it_on_the_driver(states, saved, tmp_path):
    """With a distributed Client, compare_states puts the old sums on the comparison's
    cells and finishes each (feature, side) on the workers (a saved state's sums read
    from its files there): the points and records are bit for bit those of the driver."""
    from distributed import Client, LocalCluster

    from daskpd._strat.state import ScanState

    strat, old, new, whole = states
    if saved:
        old = ScanState.load(old.save(tmp_path / "old"))
        assert all(r.sources is not None for st in old.features.values() for r in st.runs)
    here = decide(compare_states(new, strat, METHODS, 25, old_state=old))
    here_whole = decide(compare_states(new, strat, METHODS, 25, whole_state=whole))
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        there = decide(compare_states(new, strat, METHODS, 25, old_state=old))
        there_whole = decide(compare_states(new, strat, METHODS, 25, whole_state=whole))
        assert any(str(k).startswith("daskpd-newold-finish") for k in client.run_on_scheduler(
            lambda dask_scheduler: list(dask_scheduler.task_prefixes)))
    for a, b in ((here, there), (here_whole, there_whole)):
        pa, pb = points_frame(a), points_frame(b)
        assert len(pa) > 20
        pd.testing.assert_frame_equal(pa, pb, check_exact=True)
        pd.testing.assert_frame_equal(record_frame(a), record_frame(b), check_exact=True)


def test_a_comparison_whose_workers_are_lost_is_made_on_the_driver(states):
    """The workers' comparison loses its tasks when its workers go (here restarted
    while it runs, as the nanny restarts a worker past its memory limit; its scattered
    inputs go with them): the comparison is made on the driver instead, with a warning
    saying so, and its records are those of the driver."""
    from distributed import Client, LocalCluster

    from daskpd.job.newold import start_compare

    strat, old, new, _ = states
    here = decide(compare_states(new, strat, METHODS, 25, old_state=old))
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                      host="127.0.0.1") as cluster, Client(cluster) as client:
        pending = start_compare(new, strat, METHODS, 25, old_state=old)
        client.restart()
        with pytest.warns(RuntimeWarning, match="comparison on the workers failed .*compared on the driver instead"):
            there = decide(pending.result())
    pd.testing.assert_frame_equal(points_frame(here), points_frame(there), check_exact=True)
    pd.testing.assert_frame_equal(record_frame(here), record_frame(there), check_exact=True)


def test_a_comparison_whose_workers_restart_is_run_again_on_them(states, tmp_path):
    """Every worker restarted while the comparison runs (as the nanny restarts a worker
    past its memory limit): no input of the comparison's tasks was scattered, so the
    scheduler runs the lost tasks again from their specs -- no fall-back to the driver,
    no warning, the driver's records bit for bit."""
    import warnings

    from distributed import Client, LocalCluster

    from daskpd._strat.state import ScanState
    from daskpd.job.newold import start_compare

    strat, old, new, _ = states
    old = ScanState.load(old.save(tmp_path / "old"))  # the old sums read from their files on the workers
    here = decide(compare_states(new, strat, METHODS, 25, old_state=old))
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                      host="127.0.0.1") as cluster, Client(cluster) as client:
        client.wait_for_workers(2)
        workers = list(client.scheduler_info()["workers"])
        pids = client.run(os.getpid)
        pending = start_compare(new, strat, METHODS, 25, old_state=old)
        client.restart_workers(workers)
        assert not set(client.run(os.getpid).values()) & set(pids.values())  # both processes new
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            there = decide(pending.result())
    pd.testing.assert_frame_equal(points_frame(here), points_frame(there), check_exact=True)
    pd.testing.assert_frame_equal(record_frame(here), record_frame(there), check_exact=True)


def _pair_in_full(apart, new_counters, b, ns, whole):
    """The sides as made before the old sums were filtered while read: every old cell put
    on the comparison's codes, then the cells both sides hold kept."""
    from daskpd._engine.sums import Table

    tn, K = ns.table, ns.target.n_keys
    tb, _ = apart._side(b, apart._to_union(b, ns.union), ns.mapping, ns.xval, ns.target)
    cn, cb = apart._cells(tn, K), apart._cells(tb, K)
    _, i_n, i_b = np.intersect1d(cn, cb, assume_unique=True, return_indices=True)
    if whole:
        vals = tb.values[i_b] - tn.values[i_n]
        keep = vals[:, 0] > 0.5
        old_rows = float(tb.values[:, 0].sum() - tn.values[:, 0].sum())
        tb, i_n = Table(tb.leaf[i_b][keep], tb.key[i_b][keep], vals[keep]), i_n[keep]
    else:
        old_rows, tb = float(tb.values[:, 0].sum()), apart._take(tb, i_b)
    new_rows, tn = float(tn.values[:, 0].sum()), apart._take(tn, i_n)
    return tn, tb, (float(tn.values[:, 0].sum()), new_rows, float(tb.values[:, 0].sum()), old_rows)


@pytest.mark.parametrize("chunk", [1 << 21, 37])
def test_the_old_sums_kept_on_the_new_cells_while_read_are_the_same_bits(tmp_path, monkeypatch, chunk):
    """The old rows' sums are read a chunk at a time and only the new rows' cells kept
    (a saved run's pages given back after each chunk): the sides are, bit for bit, those
    of every old cell put on the comparison's codes and the shared cells kept after --
    in one chunk, and in chunks of a few cells (each cell spread over several)."""
    from daskpd._strat import apart
    from daskpd._strat.state import ScanState

    def with_x3(seed, n):  # no effect; 30 exact values, merged into at most 12 positions (x carried as a sum)
        return frame(seed, n).assign(x3=np.random.default_rng(seed + 10).integers(0, 30, n).astype(float))

    first = daskpd.strat_curves_and_importances(with_x3(0, 8000), keep_state=True, **KW)
    strat, old = first.stratification, first.state
    got = daskpd.strat_curves_and_importances(with_x3(1, 1500), stratification=strat, base_state=old,
                                              keep_state=True, **KW)
    new, whole = got.new_state, got.state
    saved = ScanState.load(old.save(tmp_path / "old"))
    monkeypatch.setattr(apart, "CHUNK_CELLS", chunk)
    for base, is_whole in ((saved, False), (old, False), (whole, True)):
        for f in new.features:
            a = new.features[f]
            ns = apart.new_side(a, base.features[f], new.dtypes.get(f), strat.scan_of(f).estimator)
            got_new, got_old, rows = apart.pair_sides(a.counters, base.features[f], ns, is_whole)
            want_new, want_old, want_rows = _pair_in_full(apart, a.counters, base.features[f], ns, is_whole)
            assert rows == want_rows and 0 < rows[2] < rows[3]
            for x, y in ((got_new.table, want_new), (got_old.table, want_old)):
                for col in ("leaf", "key", "values"):
                    np.testing.assert_array_equal(getattr(x, col), getattr(y, col), strict=True)


def test_cells_in_order_are_summed_as_the_sorting_path_sums_them():
    """The old sums put on the comparison's cells: cells already in (leaf, key) order
    (a run's, codes kept in order) are summed in one pass, the same bits as sorting them
    and summing by np.bincount; cells out of order take that path."""
    from daskpd._strat.apart import _reduce

    rng = np.random.default_rng(7)
    leaf = np.sort(rng.integers(0, 300, 5000))
    key = rng.integers(0, 9, 5000)
    order = np.lexsort((key, leaf))
    leaf, key = leaf[order], key[order]
    vals = np.column_stack([rng.integers(1, 5, 5000).astype(float), rng.normal(size=5000) * 1e3,
                            rng.normal(size=5000)])
    got = _reduce(leaf, key, vals, 9)
    comb = leaf * 9 + key
    u, inv = np.unique(comb, return_inverse=True)
    want = np.column_stack([np.bincount(inv, weights=vals[:, j], minlength=len(u)) for j in range(3)])
    assert len(u) < len(leaf)  # some cells repeat
    np.testing.assert_array_equal(got.values, want)
    np.testing.assert_array_equal(got.leaf, (u // 9).astype(np.int32))
    np.testing.assert_array_equal(got.key, u % 9)
    shuffled = rng.permutation(len(leaf))
    back = _reduce(leaf[shuffled], key[shuffled], vals[shuffled], 9)
    np.testing.assert_array_equal(back.leaf, got.leaf)
    np.testing.assert_array_equal(back.key, got.key)
    np.testing.assert_allclose(back.values, got.values, rtol=1e-12, atol=1e-9)
