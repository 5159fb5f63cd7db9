"""Jobs: a TOML job spec -> a run on a Dask cluster -> a directory of results.

* :mod:`daskpd.job.spec`    -- parse and validate a job spec (:func:`load_spec`).
* :mod:`daskpd.job.run`     -- run it (:func:`run_job`), atomically, into
  ``OUTPUT/JOB_NAME/RUN_ID/``; :mod:`daskpd.job.jobrun` holds its steps
  (:class:`JobRun`) and :mod:`daskpd.job.manifest` its ``manifest.json``.
* :mod:`daskpd.job.incremental` -- incremental runs: the previous run's stratification
  and sums reused, only appended files scanned (``[run] incremental``).
* :mod:`daskpd.job.report`  -- the self-contained ``report.html``.
* :mod:`daskpd.job.history` -- drift between consecutive runs of a job.

The command line (:mod:`daskpd.cli`) is a thin layer over these.  See docs/jobs.md.
"""
from __future__ import annotations

from .run import run_job as _run_job
from .spec import JobSpec, SpecError
from .spec_parse import load_spec

__all__ = ["JobSpec", "SpecError", "load_spec", "run_job"]


def run_job(*args, **kwargs):
    """See :func:`daskpd.job.run.run_job` (imported lazily: it pulls in distributed)."""
    return _run_job(*args, **kwargs)
