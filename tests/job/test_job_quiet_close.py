"""After a successful run, stderr holds the run's own lines only: the shutdown of
daskpd's own LocalCluster is silent, whatever the load.

A loaded machine delays a worker until after the scheduler has stopped listening; its
next heartbeat then fails and distributed logs "Failed to communicate with scheduler
during heartbeat" with a CommClosedError traceback.  The test makes that happen every
time: the job runs in a subprocess whose workers heartbeat every 5 ms while the cluster
closes (a worker of a real LocalCluster, started for real; only its heartbeat period is
changed), which without the quiet close printed the traceback in each of 3 of 3 runs."""
from __future__ import annotations

import logging
import subprocess
import sys
import textwrap

import pytest

HARNESS = textwrap.dedent('''
    import sys
    from daskpd.job import connection

    original = connection.close

    def _fast_heartbeat(dask_worker=None):
        from tornado.ioloop import PeriodicCallback
        pc = PeriodicCallback(dask_worker.heartbeat, 5)
        dask_worker.periodic_callbacks["test-fast-heartbeat"] = pc
        pc.start()

    def close(client, cluster, quiet=False):
        if cluster is not None and client is not None:
            client.run(_fast_heartbeat)
        return original(client, cluster, quiet)

    connection.close = close
    if __name__ == "__main__":
        from daskpd import cli
        sys.exit(cli.main(sys.argv[1:]))
''')

SPEC = '''
name = "quiet"
target = "SalePrice"
methods = ["stratpd"]
features = ["YearMade", "MachineHours"]
[source]
synthetic = "bulldozer"
rows = 5000
[cluster]
n_workers = 2
threads_per_worker = 1
'''


@pytest.mark.cluster
def test_no_shutdown_traceback_when_workers_heartbeat_while_the_cluster_closes(tmp_path):
    (tmp_path / "harness.py").write_text(HARNESS)
    (tmp_path / "job.toml").write_text(SPEC)
    p = subprocess.run([sys.executable, str(tmp_path / "harness.py"), "run", str(tmp_path / "job.toml"),
                        "--output", str(tmp_path / "out"), "--no-progress"],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    lines = p.stderr.strip().splitlines()
    assert "Traceback" not in p.stderr and "distributed." not in p.stderr, p.stderr[-3000:]
    assert all(line.startswith("daskpd: ") for line in lines), lines


def test_a_python_caller_keeps_its_logging(tmp_path):
    """run_job in a Python session: distributed's loggers are quiet only while our own
    LocalCluster closes, and as they were afterwards."""
    from daskpd.job.run import run_job

    (tmp_path / "job.toml").write_text(SPEC.replace("[cluster]\nn_workers = 2\nthreads_per_worker = 1\n", ""))
    levels = {n: logging.getLogger(n).level for n in ("distributed", "tornado", "asyncio")}
    logging.getLogger("distributed").setLevel(logging.INFO)
    try:
        run_job(str(tmp_path / "job.toml"), output=str(tmp_path / "out"), progress=False, n_workers=1,
                threads_per_worker=1, log=False, out=False)
        assert logging.getLogger("distributed").level == logging.INFO
    finally:
        for n, lv in levels.items():
            logging.getLogger(n).setLevel(lv)
