"""A worker killed with SIGKILL mid-request: dask recomputes its part from lineage.

Real ``dask scheduler`` / ``dask worker`` processes on 127.0.0.1 (with nannies, which
restart a killed worker).  Nothing a result depends on is scattered data, so the
request completes and equals an undisturbed run to the bit.
"""
from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest

import daskpd
from conftest import start_cluster, stop_cluster
from daskpd.datasets import Lake, write_parquet

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    d = tmp_path_factory.mktemp("lake")
    return write_parquet(Lake(random_state=3), 480_000, d / "lake", rows_per_file=20_000)


@pytest.fixture
def fresh_cluster(tmp_path):
    addr, procs = start_cluster(2, 1, str(tmp_path))
    try:
        yield addr, tmp_path
    finally:
        stop_cluster(procs)


def _kill_when(client, prefix: str, min_done: int, log: list):
    """SIGKILL a worker once ``min_done`` tasks of the task prefix ``prefix`` have run and
    more are still to run (the worker holding the most results)."""

    def states(dask_scheduler, prefix=prefix):
        tp = dask_scheduler.task_prefixes.get(prefix)
        if tp is None:
            return {"done": 0, "todo": 0, "holders": {}}
        st = tp.states
        holders = {}
        for ws in dask_scheduler.workers.values():
            holders[ws.address] = len(ws.has_what)
        return {"done": st.get("memory", 0) + st.get("released", 0) + st.get("forgotten", 0),
                "todo": st.get("waiting", 0) + st.get("processing", 0) + st.get("queued", 0)
                + st.get("no-worker", 0), "holders": holders}

    pids = client.run(os.getpid)
    deadline = time.time() + 120
    while time.time() < deadline:
        st = client.run_on_scheduler(states)
        if st["done"] >= min_done and st["todo"] > 0 and st["holders"]:
            victim = max(st["holders"], key=st["holders"].get)
            os.kill(pids[victim], signal.SIGKILL)
            log.append((victim, st["done"], st["todo"]))
            return
        time.sleep(0.01)


def _run_with_kill(addr, lake, prefix, min_done, **kw):
    from distributed import Client

    log, out = [], {}
    with Client(addr, timeout=30) as client:
        t = threading.Thread(target=_kill_when, args=(client, prefix, min_done, log), daemon=True)
        t.start()
        out["res"] = daskpd.strat_curves_and_importances(lake, target="y", categorical_features=["k5000"], **kw)
        t.join(timeout=5)
        alive = len(client.scheduler_info()["workers"])
    return out["res"], log, alive


def _assert_same(a, b):
    assert list(a.table.index) == list(b.table.index)
    np.testing.assert_array_equal(a.table["importance"].to_numpy(), b.table["importance"].to_numpy())
    for f in a.curves:
        np.testing.assert_array_equal(a.curves[f].pd, b.curves[f].pd)


def test_sigkill_mid_scan_gives_the_undisturbed_result(lake, fresh_cluster):
    from distributed import Client

    addr, logdir = fresh_cluster
    kw = dict(n_trials=2, sample_size=50_000, features=["x1", "x2", "s50", "k5000"])
    with Client(addr, timeout=30):
        calm = daskpd.strat_curves_and_importances(lake, target="y", categorical_features=["k5000"], **kw)
    got, log, alive = _run_with_kill(addr, lake, "daskpd-strat-map", 6, **kw)
    assert log, "no worker was killed during the scan (the scan finished too fast to interrupt)"
    _assert_same(got, calm)
    sched_log = (logdir / "scheduler.log").read_text()
    assert "can't be recovered" not in sched_log and "scattered" not in sched_log
    assert alive >= 1


def test_sigkill_during_the_tree_fits_gives_the_undisturbed_result(lake, fresh_cluster):
    from distributed import Client

    addr, logdir = fresh_cluster
    # slow fits (exact trees), four of them: time to kill a worker between two
    kw = dict(sample_size=120_000, tree_method="exact", features=["x1", "x2", "x3", "k5000"])
    with Client(addr, timeout=30):
        calm = daskpd.strat_curves_and_importances(lake, target="y", categorical_features=["k5000"], **kw)
    got, log, _ = _run_with_kill(addr, lake, "daskpd-fit", 1, **kw)
    assert log, "no worker was killed during the tree fits"
    _assert_same(got, calm)
    assert "can't be recovered" not in (logdir / "scheduler.log").read_text()
