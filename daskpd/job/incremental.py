"""Incremental job runs: reuse the previous run's state, scan only the files appended
since (docs/jobs.md, "Nightly runs").

A run with ``[run] incremental = true`` keeps, inside its run directory, ``state/``:
the input files it covered (``files.json``: path, size, stamp) and, for the model-free
methods, the stratification (``stratification.pkl``) and the merged sums of its scan
(``sums/``, a :class:`daskpd.ScanState`); the model-based methods keep theirs in
``state/model/`` (:mod:`.model_state`).  The next incremental run (:func:`plan`)
compares the job spec, the schema of the columns read and the files with those of the
newest run holding a state: files appended and nothing else changed -> only those files
are scanned, under the same trees (or, in a job with only model-based methods, the same
grids and bins), and their sums are added; anything else -> a full run, with the reason
in one line.  The refit policy decides when appended rows are enough to fit the trees
(build the grids and bins) again (``always`` / ``never`` / ``auto``).

Every file of ``state/`` is sealed (:mod:`.seal`: ``state/seal.json``, each file's size
and checksum) once the run has written it, and the seal is verified before anything of
the state is read: a missing, truncated or altered file, or a state of another format,
is a full run whose reason names the file.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from .._data.lake_footers import read_footers
from .._data.tables import changes
from .._strat.state import ScanState
from .._strat.stratification import Stratification
from ..results.base import atomic_path, dump_json
from . import model_state
from .manifest import Manifest
from .newold import DRIFT_DIR
from .seal import StateDamaged, StateOfAnotherFormat, seal, verify
from .spec import MODEL_FREE_METHODS, MODEL_METHODS, JobSpec
from .store import list_runs

__all__ = ["Plan", "plan", "never_incremental", "save_state", "seal_state", "reuse_run", "STATE_DIR",
           "SPEC_KEYS_IGNORED", "schema_of", "state_bytes"]

#: the run directory's sub-directory holding the state
STATE_DIR = "state"
#: spec keys whose change does not change the sums (an incremental run may follow)
SPEC_KEYS_IGNORED = ("run", "spec_path", "output", "cluster", "description", "history")
#: top-level spec keys that only the model-free methods read (their sample, trees and
#: stratifying columns): a job without model-free methods ignores them
MODEL_FREE_KEYS = ("sample_size", "tree_method", "honest", "stratify_on", "keep_suspect")


@dataclass
class Plan:
    """What this run does: ``mode`` "full" | "incremental", ``reason`` (one line),
    ``new_files`` (full paths), ``base_run`` (the run whose state is reused), and the
    stratification / state reused."""

    mode: str
    reason: str
    new_files: list = field(default_factory=list)
    base_run: str | None = None
    stratification: Stratification | None = None
    state: ScanState | None = None  # the base run's sums, opened (memory-mapped) once verified
    stamps: list = field(default_factory=list)  # every input file now (inputs.file_stamps)
    new_rows: int = 0
    job_dir: Path | None = None  # where a full run's scan writes its sums (a scratch directory inside)
    #: the base state's files as verified (:func:`daskpd.job.seal.verify`): their digests, reused by the new seal
    verified: dict = field(default_factory=dict, repr=False)
    verify_s: float = 0.0  # the seconds the verification took
    #: a full run that refits the trees although the base run's files are unchanged: the files appended since
    #: (the new-against-old comparison scans them again under the new trees); None for any other full run
    appended: list | None = None

    def load_state(self) -> ScanState:
        return self.state

    def manifest(self) -> dict:
        return {"mode": self.mode, "reason": self.reason, "new_files": list(self.new_files),
                "base_run": self.base_run}


def _spec_key(d: dict) -> dict:
    """The part of a spec (``to_dict``) the model-free sums depend on: the model and the
    model-based methods' parameters are left out (their own state checks them); without
    a model-free method, so are the trees' settings (:data:`MODEL_FREE_KEYS`)."""
    out = {k: v for k, v in d.items() if k not in SPEC_KEYS_IGNORED and k != "model"}
    out["methods"] = [m for m in d.get("methods") or () if m in MODEL_FREE_METHODS]
    out["params"] = {m: p for m, p in (d.get("params") or {}).items() if m not in MODEL_METHODS}
    if not out["methods"]:
        for k in MODEL_FREE_KEYS:
            out.pop(k, None)
    return out


def schema_of(request, columns=()) -> dict:
    """``{column: dtype}`` of the columns a model-free run reads, and of ``columns``."""
    dtypes = request.dtypes
    return {c: str(dtypes[c]) for c in request.read_columns(*columns) if c in dtypes.index}


def _footer_rows(request, files: list[dict], storage_options) -> int:
    """Rows of the files (``file_stamps`` entries) from their footers: those the request
    read when it opened the lake, else read by the lake reader's
    :func:`~daskpd._data.lake_footers.read_footers` (cached, in parallel, a damaged file named);
    a table's files count the rows its log records."""
    import fsspec

    if all(f.get("rows") is not None for f in files):
        return sum(int(f["rows"]) for f in files)
    lake = getattr(request.dataset, "lake", None)
    opened = {f.path: f.num_rows for f in lake.files} if lake is not None else {}
    rows = sum(opened[f["path"]] for f in files if f["path"] in opened)
    rest = [f for f in files if f["path"] not in opened]
    if rest:
        fs, _ = fsspec.core.url_to_fs(rest[0]["path"], **(storage_options or {}))
        rows += sum(f.num_rows for f in read_footers(fs, [(f["path"], f["size"], str(f["stamp"])) for f in rest]))
    return rows


def _base_run(job_dir: Path) -> str | None:
    """The newest complete run that keeps a state (whole or damaged: :func:`plan`
    verifies it)."""
    for r in reversed(list_runs(job_dir)):
        if (job_dir / r / STATE_DIR).is_dir():
            return r
    return None


def _read_files(path: Path, base: str) -> dict:
    """``files.json`` of a state: ``{"mode": ..., "files": [{"rel", "size", "stamp", ...}]}``
    (a :class:`StateDamaged` naming it when it is not)."""
    where = f"{base}/{STATE_DIR}/files.json"
    try:
        got = json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise StateDamaged(where, f"cannot be read ({type(exc).__name__})") from None
    files = got.get("files") if isinstance(got, dict) else None
    if not isinstance(files, list) or not all(isinstance(f, dict) and {"rel", "size", "stamp"} <= set(f)
                                              for f in files):
        raise StateDamaged(where, "lacks its 'files' list (each file's rel, size and stamp)")
    return got


def plan(spec: JobSpec, job_dir: Path, request, stamps: list, columns=()) -> Plan:
    """The plan of this run (see the module docstring); ``columns``: more columns whose
    types count in the schema (a job with only model-based methods: the model's inputs)."""
    def full(reason, base=None):
        return Plan("full", reason, base_run=base, stamps=stamps, job_dir=Path(job_dir))

    if not spec.run.incremental:
        return full("incremental runs are off ([run] incremental = false)")
    never = never_incremental(spec)
    if never:
        return full(never)
    base = _base_run(job_dir)
    if base is None:
        return full("no earlier run of this job keeps a state")
    sdir = job_dir / base / STATE_DIR
    t0 = time.perf_counter()
    try:
        verified = verify(sdir, f"{base}/{STATE_DIR}")
        old_files = _read_files(sdir / "files.json", base)
    except StateDamaged as exc:
        how = "cannot be read by this daskpd" if isinstance(exc, StateOfAnotherFormat) else "is damaged"
        return full(f"the state of run {base} {how}: {exc}", base)
    verify_s = time.perf_counter() - t0
    try:
        manifest = json.loads((job_dir / base / "manifest.json").read_text())
    except (OSError, ValueError) as exc:
        return full(f"run {base}'s manifest.json cannot be read ({type(exc).__name__})", base)
    manifest = manifest if isinstance(manifest, dict) else {}
    old_spec, new_spec = _spec_key(manifest.get("spec") or {}), _spec_key(spec.to_dict())
    if old_spec != new_spec:
        keys = sorted(k for k in set(old_spec) | set(new_spec) if old_spec.get(k) != new_spec.get(k))
        return full(f"the job spec changed since run {base} (key(s) {', '.join(keys)})", base)
    old_schema = (manifest.get("incremental") or {}).get("schema") or {}
    schema = schema_of(request, columns)
    if old_schema != schema:
        diff = sorted(c for c in set(old_schema) | set(schema) if old_schema.get(c) != schema.get(c))
        c = diff[0]
        return full(f"the schema changed since run {base}: column {c!r} {old_schema.get(c, 'absent')} -> "
                    f"{schema.get(c, 'absent')}", base)
    table = request.dataset.table
    why = changes(old_files.get("table"), table) if old_files.get("table") or table is not None else None
    if why:
        return full(f"{why}, kept by run {base}", base)
    if old_files.get("mode") != spec.source.fingerprint and table is None:
        return full(f"the fingerprint mode changed since run {base} ({old_files.get('mode')} -> "
                    f"{spec.source.fingerprint})", base)
    now = {f["rel"]: f for f in stamps}
    for f in old_files["files"]:
        cur = now.get(f["rel"])
        if cur is None:
            return full(f"file {f['rel']!r} was removed since run {base}", base)
        if (cur["size"], cur["stamp"]) != (f["size"], f["stamp"]):
            return full(f"file {f['rel']!r} changed since run {base} (size or "
                        f"{'content' if spec.source.fingerprint == 'content' else 'modification time / etag / footer'})",
                        base)
    seen = {f["rel"] for f in old_files["files"]}
    new_stamps = [f for f in stamps if f["rel"] not in seen]
    new = [f["path"] for f in new_stamps]
    strat = state = None
    where = f"{base}/{STATE_DIR}/stratification.pkl"
    try:
        if spec.model_free:  # the trees and the kept sums' rows
            strat = Stratification.load(sdir / "stratification.pkl")
            where = f"{base}/{STATE_DIR}/sums"
            state = ScanState.load(sdir / "sums")  # opened now, memory-mapped (its files were verified)
            state_rows, fitted_rows = state.n_rows, strat.fitted_rows
        else:  # only model-based methods: the kept partials' rows, and those their grids and bins were built from
            where = f"{base}/{STATE_DIR}/{model_state.MODEL_DIR}/meta.json"
            state_rows, fitted_rows = model_state.kept_rows(sdir)
    except Exception as exc:  # noqa: BLE001 -- verified, yet unreadable here (another daskpd's classes, ...)
        return full(f"the state of run {base} cannot be used: {where}: {type(exc).__name__}: {exc}", base)
    new_rows = _footer_rows(request, new_stamps, spec.source.storage_options) if new else 0
    fitted, verb = ("the trees", "fitted") if spec.model_free else ("the grids and bins", "built")
    def refit(reason):
        p = full(reason, base)
        p.appended, p.new_rows = list(new), new_rows
        return p

    if spec.run.refit == "always":
        return refit(f'refit = "always": {fitted} are {verb} again on every run')
    if spec.run.refit == "auto":
        since = state_rows + new_rows - fitted_rows
        if since > spec.run.refit_share * fitted_rows:
            return refit(f'refit = "auto": {since:,} rows appended since {fitted} were {verb} exceed '
                         f"{spec.run.refit_share:.0%} of the {fitted_rows:,} rows they were {verb} "
                         f"{'on' if spec.model_free else 'from'}")
    reason = (f"{len(new)} new file(s) ({new_rows:,} rows) since run {base}" if new else
              f"no new files since run {base}")
    return Plan("incremental", reason, new, base, strat, state, stamps, new_rows, Path(job_dir), verified, verify_s)


def never_incremental(spec: JobSpec) -> str | None:
    """Why no night of this job can be incremental, in one line (the job spec says it
    all), or None."""
    if spec.source.is_csv:
        return "CSV sources are read in full (a CSV file has no footer that counts its rows)"
    if spec.source.synthetic:
        return None
    p_imp = spec.params.get("importances") or {}
    if "importances" in spec.methods and p_imp.get("pvalues"):
        return "importances.pvalues refits trees on the sample: recomputed in full"
    return None


def save_state(run_dir: Path, stratification: Stratification | None, state: ScanState | None, stamps: list,
               mode: str, table: dict | None = None) -> int:
    """Write ``state/`` into the (temporary) run directory: the files covered (and the
    version of a table source) and, for the model-free methods, the stratification and
    the sums; return its bytes.  The state is sealed by :func:`seal_state` once
    everything of it is written."""
    sdir = run_dir / STATE_DIR
    sdir.mkdir()
    if stratification is not None:
        stratification.save(sdir / "stratification.pkl")
    if state is not None:
        state.save(sdir / "sums")
        for st in state.features.values():  # the scan's scratch files, now linked into the state
            for r in st.runs:
                scratch = getattr(r, "keep_alive", None)
                if scratch is not None:
                    scratch.close()
    with atomic_path(sdir / "files.json") as tmp:
        Path(tmp).write_text(dump_json({"mode": mode, "files": stamps, **({"table": table} if table else {})}))
    return state_bytes(run_dir)


def seal_state(run_dir: Path, plan: Plan | None = None) -> int:
    """Seal the run's ``state/`` (:func:`daskpd.job.seal.seal`; the files hard-linked
    from the base run's verified state are not read again); return the state's bytes."""
    seal(Path(run_dir) / STATE_DIR, plan.verified if plan is not None else None)
    return state_bytes(run_dir)


def state_bytes(run_dir: Path) -> int:
    sdir = Path(run_dir) / STATE_DIR
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(sdir) for f in fs)


def _link_tree(src: Path, dst: Path, skip: tuple = ()) -> None:
    for d, dirs, files in os.walk(src):
        rel = Path(d).relative_to(src)
        if rel == Path("."):
            dirs[:] = [x for x in dirs if x not in skip]
        (dst / rel).mkdir(parents=True, exist_ok=True)
        for f in files:
            if rel == Path(".") and f == "manifest.json":
                continue
            try:
                os.link(Path(d) / f, dst / rel / f)
            except OSError:  # another filesystem, or no hard links here
                shutil.copy2(Path(d) / f, dst / rel / f)


def reuse_run(base_dir: Path, tmp: Path) -> Manifest:
    """A run whose input did not change since ``base_dir``: that run's files (tables,
    plots, report, state) as hard links in ``tmp``, and its manifest, typed, with
    ``reused_from`` and its stratification not refitted; the caller sets what is this
    run's (its id, times, spec, plan, comparisons).  The base run's new-against-old
    comparisons (``drift/``) are not this run's: it has no new rows (its manifest's
    ``drift`` says so), so they are left out."""
    manifest = Manifest.from_dict(json.loads((base_dir / "manifest.json").read_text()))
    _link_tree(base_dir, tmp, skip=(DRIFT_DIR,))
    if isinstance(manifest.files, dict):
        manifest.files = {f: v for f, v in manifest.files.items() if not f.startswith(DRIFT_DIR + "/")}
    manifest.stats["reused_from"] = base_dir.name
    manifest.stats["stratification"] = {**(manifest.stats.get("stratification") or {}), "refitted": False}
    return manifest
