#!/usr/bin/env python3
"""Run a daskpd job on SLURM: dask-jobqueue submits the workers, this process
hosts the scheduler and drives the job.

Usage (on a login node, inside the environment that has daskpd and
dask-jobqueue installed; the workers' batch jobs activate the same one, see
``job-script-prologue`` in jobqueue.yaml)::

    python cluster/slurm/run_slurm.py jobs/nightly.toml --jobs 4 --output /data/daskpd-runs
    python cluster/slurm/run_slurm.py --print-job-script      # show the sbatch script only

Steps: load the jobqueue config (``--config``, default: jobqueue.yaml next to
this file) into the Dask config, create ``dask_jobqueue.SLURMCluster()``
(which reads ``jobqueue.slurm.*``), ``scale(jobs=N)``, wait until
``--min-workers`` workers have joined, run
``daskpd.job.run.run_job(spec, scheduler=cluster.scheduler_address, output=...)``,
and always close the cluster (cancelling the batch jobs) at the end.

The process must stay alive for the whole run (the scheduler lives in it), so
start it under nohup/tmux/screen or cron on a login node.  For a run that
lives entirely inside one allocation, use daskpd.sbatch instead.

SIGTERM and SIGINT (Ctrl-C) close the cluster too, so the queued or running
worker jobs are cancelled instead of waiting out their walltime.

Exit status: 0 on success, 1 if the job raised (traceback on stderr), 2 on
usage/config errors, 3 if the workers did not arrive in time, 130/143 after
SIGINT/SIGTERM (the SLURM jobs cancelled).
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_CONFIG = HERE / "jobqueue.yaml"


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="run_slurm.py",
        description="Run `daskpd run SPEC` on workers submitted through SLURM by dask-jobqueue.",
    )
    p.add_argument("spec", nargs="?", help="job TOML, as for `daskpd run`")
    p.add_argument("--config", default=os.environ.get("DASKPD_JOBQUEUE_CONFIG", str(DEFAULT_CONFIG)),
                   help="dask-jobqueue YAML (default: %(default)s)")
    p.add_argument("--jobs", type=int, default=2, help="SLURM jobs to submit (default: %(default)s)")
    p.add_argument("--min-workers", type=int, default=None,
                   help="workers to wait for before starting (default: one job's worth, "
                        "jobqueue.slurm.processes)")
    p.add_argument("--wait-timeout", type=float, default=1800.0,
                   help="seconds to wait for --min-workers, queueing included (default: %(default)s)")
    p.add_argument("--output", default=None, help="output directory, passed to run_job")
    p.add_argument("--print-job-script", action="store_true",
                   help="print the batch script SLURMCluster would submit, then exit")
    args = p.parse_args(argv)
    if args.spec is None and not args.print_job_script:
        p.error("SPEC is required (unless --print-job-script)")
    if args.jobs < 1:
        p.error("--jobs must be >= 1")
    return args


def load_jobqueue_config(path) -> dict:
    """The YAML as a flat {"jobqueue.slurm.cores": 16, ...} mapping for dask.config.set.

    Flattening keeps the defaults dask-jobqueue registered for every key this
    file does not mention (``dask.config.set({"jobqueue": {...}})`` would
    replace the whole subtree).
    """
    import yaml

    with open(path) as f:
        data = yaml.safe_load(f) or {}
    if not isinstance(data, dict) or "jobqueue" not in data:
        raise ValueError(f"{path}: expected a top-level 'jobqueue:' mapping")

    flat: dict = {}

    def walk(prefix, node):
        for key, value in node.items():
            name = f"{prefix}.{key}" if prefix else str(key)
            if isinstance(value, dict) and value and name.count(".") < 2:
                walk(name, value)          # jobqueue -> slurm -> leaf keys
            else:
                flat[name] = value         # leaves, incl. dict-valued ones such as scheduler-options

    walk("", data)
    return flat


class Terminated(BaseException):
    """SIGTERM arrived (a BaseException, like KeyboardInterrupt, so nothing swallows it)."""

    def __init__(self, signum: int):
        super().__init__(f"signal {signum}")
        self.signum = signum


def _raise_terminated(signum, frame):
    raise Terminated(signum)


def main(argv=None) -> int:
    args = parse_args(argv)
    import dask

    try:
        config = load_jobqueue_config(args.config)
    except (OSError, ValueError) as exc:
        print(f"run_slurm.py: cannot load {args.config}: {exc}", file=sys.stderr)
        return 2

    try:
        # imported before dask.config.set so that the defaults it registers
        # are in place underneath our values (and survive leaving the block)
        from dask_jobqueue import SLURMCluster
    except ImportError:
        print("run_slurm.py: dask-jobqueue is not installed (pip install dask-jobqueue)",
              file=sys.stderr)
        return 2

    # Without this, SIGTERM (kill, timeout, a cron wrapper) would end the process
    # without running the `finally` below: the worker jobs would stay queued, or
    # run until their death-timeout.  run_job installs its own handler while it
    # runs (raising daskpd's JobTerminated) and restores this one afterwards.
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _raise_terminated) if in_main_thread else None
    with dask.config.set(config):
        cluster = SLURMCluster()
        try:
            if args.print_job_script:
                print(cluster.job_script())
                return 0

            processes = dask.config.get("jobqueue.slurm.processes", None) or 1
            min_workers = args.min_workers if args.min_workers is not None else int(processes)
            print(f"run_slurm.py: scheduler {cluster.scheduler_address}; submitting {args.jobs} "
                  f"job(s), waiting for {min_workers} worker(s)", file=sys.stderr)
            cluster.scale(jobs=args.jobs)

            from distributed import Client

            with Client(cluster, set_as_default=False) as client:
                try:
                    client.wait_for_workers(min_workers, timeout=args.wait_timeout)
                except TimeoutError:
                    print(f"run_slurm.py: fewer than {min_workers} workers after "
                          f"{args.wait_timeout:.0f}s (check squeue and the job logs)", file=sys.stderr)
                    return 3

            # the library is imported only here, so --help / --print-job-script
            # work without it
            from daskpd.job.run import run_job

            run_dir = run_job(args.spec, scheduler=cluster.scheduler_address, output=args.output)
            print(f"run_slurm.py: finished: {run_dir}", file=sys.stderr)
            return 0
        except KeyboardInterrupt:
            print("run_slurm.py: interrupted; cancelling the SLURM jobs", file=sys.stderr)
            return 130
        except BaseException as exc:
            # SIGTERM: ours outside run_job, daskpd's JobTerminated inside it
            if isinstance(exc, Terminated) or type(exc).__name__ == "JobTerminated":
                print(f"run_slurm.py: terminated ({exc}); cancelling the SLURM jobs", file=sys.stderr)
                return 128 + exc.signum
            raise
        finally:
            if in_main_thread:   # a second SIGTERM must not interrupt the cancelling
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
            try:
                cluster.close()
            finally:
                if in_main_thread:
                    signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
