"""A job's run, step by step: :class:`JobRun` (open, plan, compute, write, commit), called by
:func:`daskpd.job.run.run_job`.  The steps' work lives in :mod:`.connection`, :mod:`.inputs`,
:mod:`.execute`, :mod:`.outputs`, :mod:`.store`, :mod:`.incremental` and :mod:`.newold`; the manifest is a
:class:`~daskpd.job.manifest.Manifest`.  The write step's methods live in :mod:`.jobrun_write`
(:class:`~daskpd.job.jobrun_write.WriteStep`, a base class of :class:`JobRun`).
"""
from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path
from typing import Any

from .._engine.progress import reporting
from .._errors import DataError
from ..results.base import dump_json
from . import connection, execute, inputs, model_state, newold, outputs, store
from . import incremental as nightly
from .execute import RunResult
from .inputs import log_line
from .jobrun_write import WriteStep
from .spec import JobSpec, check_name, with_run_keys
from .spec_parse import load_spec
from .store import DEFAULT_OUTPUT, JobTerminated

__all__ = ["JobRun"]


class JobRun(WriteStep):
    """One run of a job, step by step; :meth:`run` runs the steps and returns the run directory.

    The steps, and the state each passes on (attributes of the run):

    1. **open** -- :meth:`open_input`: the input, checked before anything is written (a
       synthetic source's data set and ``[model] fit`` model are made first): ``data_path``,
       ``request``, ``feats``, ``cats``, ``kinds``, ``needed`` (the columns read) and, with
       model-based methods, ``model``, ``model_inputs``, ``model_feats``.
       :meth:`open_run_dir`: the job's lock (held until the run is committed), the run id,
       the run's temporary directory ``tmp`` (from here on a kill leaves only it, and
       :meth:`clean_up` removes it).
    2. **plan** -- :meth:`fingerprint`: the input files' ``stamps`` and fingerprint ``fp``.
       :meth:`plan_run`: the model-free part's incremental ``plan`` and the model-based
       part's ``mplan`` (None when not asked for), ``reuse`` (nothing changed since the base
       run) and the new-against-old comparisons (``res.comparisons``).
    3. **compute** -- :meth:`connect`: the cluster (``client``, ``cluster``, ``where``).
       :meth:`compute`: :meth:`compute_model_free`, the notes on the columns left out,
       :meth:`compute_model_based`; the results in ``res`` (a :class:`RunResult`).
    4. **write** -- into ``tmp``: :meth:`write_tables` (tables, drift), :meth:`save_state`
       (the incremental state), the plots, then :meth:`build_manifest` (a typed
       :class:`~daskpd.job.manifest.Manifest`), :meth:`write_report` and :meth:`list_files`.
       A run that reuses its base run's results writes with :meth:`write_reused` instead
       (its manifest is the base run's, updated: a dict).
    5. **commit** -- :meth:`write_manifest`, :meth:`commit` (the atomic swap of ``tmp``
       into ``final``, ``latest``), :meth:`prune` (old runs past ``output.keep``), then
       :meth:`tell` (the summary) and, whatever happened, :meth:`clean_up`.

    ``stats`` gathers the manifest's facts as the steps find them (their order is the
    manifest's), ``timings`` each step's seconds.  While outputs are written, ``writing``
    holds (the directory an output fault names, the run's temporary directory, what the
    message adds) and ``step`` the file being written (for the OS errors that name none);
    :meth:`run` turns such an ``OSError`` into an :class:`~daskpd.results.base.OutputError`.
    """

    def __init__(self, spec_path_or_spec, scheduler: str | None = None, output: str | os.PathLike | None = None,
                 run_id: str | None = None, progress: bool = True, security=None, *, n_workers: int | None = None,
                 threads_per_worker: int | None = None, out=None, log=None, incremental: bool | None = None,
                 refit: str | None = None, first_pass_cache: bool | None = None):
        self.t_start = time.perf_counter()
        self.started = store.now()
        self.out = sys.stdout if out is None else (None if out is False else out)
        self.log = sys.stderr if log is None else (None if log is False else log)
        self.timings: dict[str, float] = {}
        spec = spec_path_or_spec if isinstance(spec_path_or_spec, JobSpec) else load_spec(spec_path_or_spec)
        self.spec = spec = with_run_keys(spec, incremental, refit, first_pass_cache)
        self.explicit_id = run_id is not None
        if self.explicit_id:
            try:
                check_name(run_id, "run id")
            except ValueError as exc:
                raise DataError(str(exc)) from None
        self.run_id = run_id if self.explicit_id else store.default_run_id(self.started)
        root = output if output is not None else (spec.output.dir or DEFAULT_OUTPUT)
        self.out_root = Path(root).expanduser().resolve()
        self.job_dir = self.out_root / spec.name
        if self.out_root.exists() and not self.out_root.is_dir():
            raise DataError(f"output {str(self.out_root)!r} exists and is not a directory")
        self.scheduler, self.security, self.progress = scheduler, security, progress
        self.n_workers, self.threads_per_worker = n_workers, threads_per_worker
        self.created: list[Path] = []  # directories this run created, removed again on failure if empty
        self.tmp: Path | None = None
        self.writing: tuple | None = None  # see the class docstring; None while reading and computing
        self.step: str | None = None
        self.client = self.cluster = self.where = None
        self.res = RunResult()
        self.stats: dict[str, Any] = {}
        self.lock = contextlib.ExitStack()  # the job's lock: from before the plan until the run is committed
        self.plan = self.mplan = None
        self.reuse = False
        self.model = self.model_inputs = self.model_feats = None

    def run(self) -> Path:
        with store.signals_raise():
            try:
                self.open_input()
                self.open_run_dir()
                self.fingerprint()
                self.plan_run()
                if self.reuse:  # nothing changed since the base run: its results are the results (hard links)
                    manifest = self.write_reused()
                else:
                    self.connect()
                    self.compute()
                    manifest = self.write()
                self.write_manifest(manifest)
                self.commit()
                self.tell(manifest)
                return self.final
            except OSError as exc:
                fault = None if self.writing is None else store.output_fault(exc, *self.writing, what=self.step)
                if fault is None:
                    raise
                raise fault from exc
            finally:
                self.clean_up()

    # ---- open
    def open_input(self) -> None:
        """The input, checked before anything is written."""
        spec, t0 = self.spec, time.perf_counter()
        if spec.source.synthetic:
            gen = inputs.make_generator(spec)
            inputs.open_job_request(spec, gen.frame(16))  # names and kinds, before writing the dataset
            self.created += [p for p in (self.out_root, self.out_root / ".cache") if not p.exists()]
            self.writing = (self.out_root, None, "(nothing was computed or written)")
            self.data_path = str(inputs.ensure_synthetic(spec, self.out_root, self.log))
            self.spec = spec = inputs.ensure_model(spec, self.out_root, self.log)  # [model] fit: the run's model file
            self.writing = None
        else:
            self.data_path = spec.source.path
        self.request = request = inputs.open_job_request(spec, inputs.job_data(spec, self.data_path))
        self.stats["input_schema"] = inputs.schema_stats(request)
        self.feats, self.cats = list(request.features), inputs.categorical_features(request)
        self.kinds = {spec.target: "numeric", **request.kinds}
        if request.left_out:
            self.stats["skipped_features"] = dict(request.left_out)
        self.needed = list(dict.fromkeys([spec.target, *self.feats, *inputs.job_row_id(spec, read=True)]))
        if spec.model_based:
            self.model, self.model_inputs, self.model_feats = inputs.prepare_model(spec, request, self.stats)
        self.timings["open"] = time.perf_counter() - t0

    def open_run_dir(self) -> None:
        """The job's lock, the run id and the run's temporary directory."""
        job_dir, log = self.job_dir, self.log
        self.created += [p for p in (self.out_root, job_dir) if not p.exists()]
        store.check_free_space(job_dir, outputs.output_bytes(self.spec, len(self.feats)), "the run's outputs")
        self.writing = (job_dir, None, "(nothing was computed or written)")
        waited = self.lock.enter_context(store.job_lock(job_dir, lambda line: log_line(log, line)))
        if waited and not self.explicit_id:  # its id: when it really starts, after the run it waited for
            self.run_id = store.default_run_id()
        if not self.explicit_id:  # a run of that id exists (two runs in one second)
            self.run_id = store.free_run_id(job_dir, self.run_id)
        if waited:
            log_line(log, f"daskpd: the other run ended after {waited:.1f} s of waiting; this one goes on as "
                          f"run {self.run_id}")
        store.clean_stale(job_dir)
        self.tmp = job_dir / f".{self.run_id}.tmp-{os.getpid()}"
        store.rmtree(self.tmp)
        self.tmp.mkdir()
        self.writing = None

    # ---- plan
    def fingerprint(self) -> None:
        t0 = time.perf_counter()
        spec = self.spec
        self.fp_mode = "content" if spec.source.synthetic else spec.source.fingerprint
        self.stamps = inputs.input_stamps(spec, self.request, self.data_path, self.fp_mode)
        self.fp = inputs.fingerprint(self.data_path, spec.source.storage_options, self.fp_mode, stamps=self.stamps)
        self.timings["fingerprint"] = time.perf_counter() - t0

    def plan_run(self) -> None:
        """Incremental or full, for each part; the runs the new results are compared with."""
        spec, log, timings = self.spec, self.log, self.timings
        # a job with only model-based methods: its schema is that of the model's inputs too (with model-free
        # methods, the model-free part's columns: a new model alone leaves that part incremental)
        self.read_extra = self.model_inputs if spec.model_based and not spec.model_free else ()
        if spec.model_free or spec.run.incremental:  # the model-free part's plan, or the files' alone
            t0 = time.perf_counter()
            self.plan = nightly.plan(spec, self.job_dir, self.request, self.stamps, self.read_extra)
            timings["plan"] = time.perf_counter() - t0
            if self.plan.verify_s:
                timings["verify_state"] = self.plan.verify_s
            if spec.run.incremental:
                log_line(log, f"daskpd: {self.plan.mode} run: {self.plan.reason}")
        if spec.model_based and spec.run.incremental:  # the model-based part's own plan (model_state)
            t0 = time.perf_counter()
            self.mplan = model_state.plan(spec, self.job_dir, self.plan, model_state.model_sha256(spec.model.path),
                                          model_state.layout_key(spec, self.model_inputs, self.model_feats, self.cats))
            timings["plan"] = timings.get("plan", 0.0) + time.perf_counter() - t0
            log_line(log, f"daskpd: model-based methods: {self.mplan.mode} ({self.mplan.reason})")
        plan, mplan = self.plan, self.mplan
        self.reuse = (plan is not None and plan.mode == "incremental" and not plan.new_files
                      and (mplan is None or mplan.mode == "incremental"))
        h = spec.history
        self.res.comparisons = [newold.Comparison(ref, alpha=h.alpha, threshold=h.threshold, n_trials=h.n_trials)
                                for ref in newold.references(spec, self.job_dir, plan)]

    def incremental_record(self) -> dict:
        """The manifest's ``incremental``: the plans and the schema they hold the next run to."""
        return {**self.plan.manifest(), "schema": nightly.schema_of(self.request, self.read_extra),
                **({"model": self.mplan.manifest()} if self.mplan is not None else {})}

    # ---- compute
    def connect(self) -> None:
        """The cluster, described in the manifest and the log."""
        t0, spec, log = time.perf_counter(), self.spec, self.log
        self.client, self.cluster, self.where = client, cluster, where = connection.connect(
            spec, self.scheduler, self.security, self.n_workers, self.threads_per_worker, log)
        borrowed = where == connection.CURRENT_CLIENT  # the caller's Client: used, never closed
        info = client.scheduler_info() if hasattr(client, "scheduler_info") else {}
        workers = info.get("workers", {}) if isinstance(info, dict) else {}
        self.stats["cluster"] = c = {"scheduler": client.scheduler.address if client.scheduler else where,
                                     "kind": ("LocalCluster" if cluster is not None else
                                              "current Client" if borrowed else "existing"),
                                     "n_workers": len(workers),
                                     "threads": int(sum(w.get("nthreads", 0) for w in workers.values())),
                                     "dashboard": connection.dashboard(client)}
        log_line(log, f"daskpd: job {spec.name!r}, run {self.run_id}: {len(self.feats)} feature(s), methods "
                      f"{', '.join(spec.methods)}")
        log_line(log, f"daskpd: cluster {c['scheduler']} ({c['kind']}, {c['n_workers']} workers, "
                      f"{c['threads']} threads)")
        if c["dashboard"]:
            log_line(log, f"daskpd: dashboard {c['dashboard']}{connection.dashboard_hint(client, cluster)}")
        self.timings["connect"] = time.perf_counter() - t0

    def compute(self) -> None:
        """Both parts, their progress shown as the run's ``progress`` says (distributed's text
        progress bar writes to stdout: stdout is kept for the summary)."""
        spec = self.spec
        with reporting(self.progress), \
                contextlib.redirect_stdout(sys.stderr) if self.progress else contextlib.nullcontext(), \
                inputs.damaged_pages_named(spec, self.data_path if self.request.dataset.table is None else None,
                                           self.needed):
            if spec.model_free:
                self.compute_model_free()
            outputs.log_left_out(self.log, self.spec.name, self.feats, self.stats)
            if spec.model_based:
                self.compute_model_based()

    def compute_model_free(self) -> None:
        t0, plan, spec = time.perf_counter(), self.plan, self.spec
        # a full run reads pass 1 from the cache; an incremental one keeps its new files' pass 1 in it
        fresh = plan is None or plan.mode == "full"
        fp_cache = (store.first_pass_cache(self.job_dir, self.stamps)
                    if spec.run.first_pass_cache and (fresh or plan.new_files) else None)
        execute.model_free(spec, self.request.dataset, self.feats, self.cats, self.res, self.stats, plan,
                           first_pass_cache=fp_cache)
        self.timings["model_free"] = time.perf_counter() - t0
        if fp_cache is not None:
            self.stats["first_pass_cache"] = execute.first_pass_stats(fp_cache, self.log, not fresh)

    def compute_model_based(self) -> None:
        t0, res = time.perf_counter(), self.res
        execute.model_based(self.spec, self.request.dataset, self.model, self.model_inputs, self.model_feats, self.cats,
                            res, self.mplan)
        for note in res.notes:
            log_line(self.log, f"daskpd: {note}")
        self.stats["model_phases"] = res.phases
        self.timings["model_based"] = time.perf_counter() - t0

    # ---- commit
    def write_manifest(self, manifest: dict) -> None:
        self.step = "manifest.json"
        (self.tmp / "manifest.json").write_text(dump_json(manifest))
        self.step = None

    def commit(self) -> None:
        """The run committed and the old runs pruned, with the signals held off."""
        with store.signals_blocked():
            self.swap_in()
            self.prune()

    def swap_in(self) -> None:
        """The temporary directory swapped in as the run, atomically; ``latest`` updated."""
        job_dir = self.job_dir
        self.final = final = job_dir / self.run_id
        replaced = store.commit(self.tmp, final)
        committed, self.tmp = self.tmp, None
        try:
            store.update_latest(job_dir)
        except OSError as exc:
            if store.output_fault(exc, job_dir) is not None:
                self.writing = (job_dir, None, f"(run {self.run_id} was written but 'latest' was not updated)")
                if not replaced:  # take the new run out again: the runs and 'latest' stay as they were
                    with contextlib.suppress(OSError):
                        os.rename(final, committed)
                        self.tmp = committed  # removed by clean_up
                        self.writing = (job_dir, None, "(no run was written)")
            raise
        self.writing = None
        self.created.clear()

    def prune(self) -> None:
        """The runs past ``output.keep`` removed (a failure is noted: the run is complete)."""
        keep = self.spec.output.keep
        try:
            self.pruned = store.prune(self.job_dir, keep)
        except OSError as exc:  # the run is complete and 'latest' points at it: say so, go on
            fault = store.output_fault(exc, self.job_dir, suffix="")
            if fault is None:
                raise
            self.pruned = []
            log_line(self.log, f"daskpd: note: old runs not removed (output.keep = {keep}): {fault}")

    def tell(self, manifest: dict) -> None:
        """The summary, on ``out``."""
        if self.out is not None and self.reuse:
            print(f"job {self.spec.name}  run {self.run_id}: no new input since run {self.plan.base_run}; its results "
                  f"are reused\nwrote {self.final}", file=self.out)
        elif self.out is not None:
            outputs.print_summary(self.out, self.spec, self.res, self.imp, manifest, self.final, self.pruned)

    def clean_up(self) -> None:
        """The temporary directory and the empty directories this run made removed, the lock
        released, the cluster closed (the caller's Client is left open)."""
        with store.signals_blocked():  # a second signal must not interrupt the clean-up
            if self.tmp is not None:
                store.rmtree(self.tmp)
            for p in reversed(self.created):
                if p.name != ".cache":
                    with contextlib.suppress(OSError):
                        p.rmdir()  # only if empty: never remove anything but what this run made
            self.lock.close()
        client = self.client
        connection.close(None if client is not None and self.where == connection.CURRENT_CLIENT else client,
                         self.cluster, quiet=isinstance(sys.exc_info()[1], JobTerminated))
