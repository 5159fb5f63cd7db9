"""run_job from Python: it uses the caller's active Client (and leaves it open), and a
script without an ``if __name__ == "__main__":`` guard runs the job once (threads), not
once per re-spawned worker process."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from daskpd.datasets import Quadratic
from daskpd.job.run import run_job

REPO = Path(__file__).resolve().parents[2]


def small_job(d: Path) -> Path:
    Quadratic(random_state=5).frame(3000).to_parquet(d / "data.parquet")
    (d / "job.toml").write_text('name = "py"\ntarget = "y"\nmethods = ["stratpd"]\n[source]\npath = "data.parquet"\n')
    return d / "job.toml"


@pytest.mark.cluster
def test_run_job_uses_the_active_client_and_leaves_it_open(tmp_path, dask_cluster):
    from distributed import Client

    spec = small_job(tmp_path)
    with Client(dask_cluster) as client:
        run = run_job(spec, output=tmp_path / "out", run_id="r1", progress=False, out=False, log=False)
        m = json.loads((run / "manifest.json").read_text())
        assert m["cluster"]["kind"] == "current Client" and m["cluster"]["scheduler"] == dask_cluster
        assert client.status == "running" and client.submit(sum, [1, 2]).result() == 3  # still ours, still open


def run_script(tmp_path: Path, body: str) -> subprocess.CompletedProcess:
    small_job(tmp_path)
    script = tmp_path / "myscript.py"
    script.write_text(textwrap.dedent(body))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    env.pop("DASK_SCHEDULER_ADDRESS", None)
    return subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env=env)


def test_a_script_without_a_main_guard_runs_the_job_once(tmp_path):
    p = run_script(tmp_path, """
        from daskpd.job.run import run_job
        print("START", flush=True)
        run = run_job("job.toml", output="out", run_id="r1", progress=False, n_workers=2)
        print("DONE", run.name, flush=True)
    """)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.count("START") == 1 and p.stdout.count("DONE r1") == 1, p.stdout  # not re-run by workers
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    assert "no `if __name__ == \"__main__\":` guard" in p.stderr and "threads of this process" in p.stderr
    m = json.loads((tmp_path / "out" / "py" / "r1" / "manifest.json").read_text())
    assert m["cluster"]["kind"] == "LocalCluster" and m["cluster"]["n_workers"] == 1  # in-process threads


def test_a_guarded_script_gets_worker_processes(tmp_path):
    p = run_script(tmp_path, """
        from daskpd.job.run import run_job

        def main():
            print("START", flush=True)
            run = run_job("job.toml", output="out", run_id="r1", progress=False, n_workers=1,
                          threads_per_worker=1)
            print("DONE", run.name, flush=True)

        if __name__ == "__main__":
            main()
    """)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.count("START") == 1 and p.stdout.count("DONE r1") == 1, p.stdout
    assert "guard" not in p.stderr
    m = json.loads((tmp_path / "out" / "py" / "r1" / "manifest.json").read_text())
    assert m["cluster"]["kind"] == "LocalCluster" and m["cluster"]["n_workers"] == 1
    from daskpd.job import connection

    assert connection.unguarded_script() is None  # pytest's own __main__ runs under its guard
