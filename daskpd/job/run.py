"""Run a job spec: data -> cluster -> results -> ``OUTPUT/JOB_NAME/RUN_ID/``, atomically.

Layout of a run directory::

    RUN_ID/
        curves.parquet      tidy curves: method + the shared curve head (feature, kind, x,
                            category, pd, count, supported, n_rows) + method columns
        importances.parquet method + the shared table head (feature, kind, importance, rank) + measures
        ice.parquet         the sampled ICE lines (when ICE was asked for)
        manifest.json       spec, versions, row counts, timings, input fingerprint, files
        plots/*.png         importance chart and one plot per curve
        report.html         self-contained (PNG embedded), readable offline

The steps live in their own modules: :mod:`.inputs` (data, columns, fingerprint, model),
:mod:`.execute` (one ``run_strat`` for the model-free methods, one merged plan for the
model-based ones, the cluster), :mod:`.outputs` (tables, plots, summaries) and
:mod:`.store` (run directories, atomic commit, signals); :class:`~daskpd.job.jobrun.JobRun`
runs them step by step, with a typed :class:`~daskpd.job.manifest.Manifest`.
"""
from __future__ import annotations

import os
from pathlib import Path

from ..results.base import dump_json
from .execute import RunResult
from .inputs import fingerprint, load_model, open_job_request, prepare_model
from .jobrun import JobRun
from .outputs import CURVE_COLUMNS, IMPORTANCE_COLUMNS, curves_frame, importances_frame
from .store import DEFAULT_OUTPUT, JobTerminated, clean_stale, default_run_id, list_runs

__all__ = ["run_job", "JobTerminated", "RunResult", "list_runs", "CURVE_COLUMNS", "IMPORTANCE_COLUMNS",
           "DEFAULT_OUTPUT", "open_job_request", "prepare_model", "load_model", "fingerprint",
           "clean_stale", "default_run_id", "dump_json", "curves_frame", "importances_frame", "JobRun"]


def run_job(spec_path_or_spec, scheduler: str | None = None, output: str | os.PathLike | None = None,
            run_id: str | None = None, progress: bool = True, security=None, *, n_workers: int | None = None,
            threads_per_worker: int | None = None, out=None, log=None, incremental: bool | None = None,
            refit: str | None = None, first_pass_cache: bool | None = None) -> Path:
    """Run a job; return the path of the finished run directory.

    ``scheduler``: an address (``tcp://...``, ``tls://...``) or scheduler file; else
    the caller's active Client (used, never closed); else ``DASK_SCHEDULER_ADDRESS``,
    else the spec's ``cluster.scheduler``, else a LocalCluster sized to the machine
    (its workers in threads of this process when called from the top level of a script
    without an ``if __name__ == "__main__":`` guard).  ``output``: the output root (else the spec's
    ``output.dir``, else ./daskpd-runs).  ``run_id``: default a UTC timestamp;
    re-running an existing id replaces that run atomically.  ``security``: a
    :class:`distributed.Security` (else Dask's ``distributed.comm.tls.*`` config).
    ``out``/``log``: streams for the summary and progress messages (default
    stdout/stderr; pass ``False`` to silence).  ``incremental`` / ``refit`` /
    ``first_pass_cache``: override the spec's ``[run]`` keys (docs/jobs.md, "Nightly runs").

    Raises :class:`SpecError` / :class:`daskpd.io.DataError` for bad specs or inputs
    (before anything is written), :class:`JobTerminated` on SIGTERM/SIGINT, and
    :class:`~daskpd.results.base.OutputError` (an ``OSError``) when the output cannot be
    written (read-only, permission denied, disk full): then no run was written, and the
    earlier runs and ``latest`` are as they were.
    """
    return JobRun(spec_path_or_spec, scheduler, output, run_id, progress, security, n_workers=n_workers,
                  threads_per_worker=threads_per_worker, out=out, log=log, incremental=incremental, refit=refit,
                  first_pass_cache=first_pass_cache).run()
