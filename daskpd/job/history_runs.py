"""A job's runs as :mod:`daskpd.job.history` reads them: :class:`Run` (a run's
manifest, curves and importances), :func:`load_runs` (every complete run of a job
directory, by run id) and :func:`unfinished_newest` (the newest run directory when it
has no readable manifest).
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from .history_newold import HistoryError
from .store import list_runs


@dataclass
class Run:
    run_id: str
    path: Path
    manifest: dict
    curves: pd.DataFrame
    importances: pd.DataFrame


def load_runs(job_dir: str | os.PathLike) -> list[Run]:
    job_dir = Path(job_dir)
    if not job_dir.is_dir():
        raise HistoryError(f"{str(job_dir)!r} is not a directory (expected OUTPUT/JOB_NAME of a daskpd job)")
    runs = []
    for rid in list_runs(job_dir):
        p = job_dir / rid
        try:
            manifest = json.loads((p / "manifest.json").read_text())
            curves = pd.read_parquet(p / "curves.parquet")
            imp = pd.read_parquet(p / "importances.parquet")
        except (OSError, ValueError) as exc:
            raise HistoryError(f"run {rid!r} in {str(job_dir)!r} is unreadable: {exc}") from exc
        if not isinstance(manifest, dict):
            raise HistoryError(f"run {rid!r} in {str(job_dir)!r} is unreadable: its manifest.json is not a JSON object")
        runs.append(Run(rid, p, manifest, curves, imp))
    if not runs:
        hint = ""
        if any(c.is_dir() and any(c.glob("*/manifest.json")) for c in job_dir.iterdir()):
            hint = " (this looks like an output root: pass OUTPUT/JOB_NAME)"
        raise HistoryError(f"no runs in {str(job_dir)!r}: expected run directories holding manifest.json{hint}")
    return runs


#: directories of a job directory that are not runs (the history's default output, the first-pass cache)
NOT_RUNS = ("history", "cache")
#: what a run directory holds besides its manifest
_RUN_FILES = ("curves.parquet", "importances.parquet", "ice.parquet", "report.html", "plots", "state")
_DEFAULT_ID = re.compile(r"^\d{8}T\d{6}Z(-\d+)?$")


def _manifest_problem(p: Path) -> str | None:
    """Why the run directory ``p`` has no readable manifest, or None."""
    try:
        got = json.loads((p / "manifest.json").read_text())
    except FileNotFoundError:
        return "has no manifest.json (the run did not complete, or its manifest was removed)"
    except (OSError, ValueError) as exc:
        return f"has a manifest.json that cannot be read ({type(exc).__name__})"
    if not isinstance(got, dict):
        return "has a manifest.json that is not a JSON object"
    return None


def unfinished_newest(job_dir: str | os.PathLike) -> str | None:
    """When the newest run directory of the job (by run id, as :func:`load_runs` orders
    them) has no readable manifest: a one-line sentence naming it and why; else None.
    A run directory is a visible directory (not ``history`` or ``cache``) holding a
    manifest or a run's files, or named like a default run id."""
    job_dir = Path(job_dir)
    try:
        entries = sorted(p for p in job_dir.iterdir() if not p.name.startswith(".") and not p.is_symlink()
                         and p.is_dir() and p.name not in NOT_RUNS)
    except OSError:
        return None
    runs = [p for p in entries if (p / "manifest.json").exists() or _DEFAULT_ID.match(p.name)
            or any((p / f).exists() for f in _RUN_FILES)]
    if not runs:
        return None
    newest = max(runs, key=lambda p: p.name)
    why = _manifest_problem(newest)
    return None if why is None else f"the newest run directory {newest.name!r} of {str(job_dir)!r} {why}"
