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
:mod:`.store` (run directories, atomic commit, signals).  This module orchestrates them.
"""
from __future__ import annotations

import contextlib
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from .._errors import DataError
from .._data.request import left_out_note
from .outputs import KEEP_KEY
from ..results.base import dump_json
from . import execute, inputs, outputs, store
from . import incremental as nightly
from . import model_state, newold
from .execute import RunResult
from .inputs import fingerprint, load_model, log_line, open_job_request, prepare_model
from .outputs import CURVE_COLUMNS, IMPORTANCE_COLUMNS, curves_frame, importances_frame
from .spec import JobSpec, check_name
from .spec_parse import load_spec
from .store import JobTerminated, clean_stale, default_run_id, list_runs

__all__ = ["run_job", "JobTerminated", "RunResult", "list_runs", "CURVE_COLUMNS", "IMPORTANCE_COLUMNS",
           "DEFAULT_OUTPUT", "open_job_request", "prepare_model", "load_model", "fingerprint",
           "clean_stale", "default_run_id", "dump_json", "curves_frame", "importances_frame"]

#: default output root when neither --output nor output.dir is given (relative to the cwd)
DEFAULT_OUTPUT = "daskpd-runs"


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
    t_start = time.perf_counter()
    started = store.now()
    out = sys.stdout if out is None else (None if out is False else out)
    log = sys.stderr if log is None else (None if log is False else log)
    timings: dict[str, float] = {}

    spec = spec_path_or_spec if isinstance(spec_path_or_spec, JobSpec) else load_spec(spec_path_or_spec)
    if incremental is not None or refit is not None or first_pass_cache is not None:
        import dataclasses

        from .spec import REFIT_POLICIES

        if refit is not None and refit not in REFIT_POLICIES:
            raise DataError(f"refit must be one of {', '.join(map(repr, REFIT_POLICIES))}, got {refit!r}")
        spec = dataclasses.replace(spec, run=dataclasses.replace(
            spec.run, **({} if incremental is None else {"incremental": bool(incremental)}),
            **({} if refit is None else {"refit": refit}),
            **({} if first_pass_cache is None else {"first_pass_cache": bool(first_pass_cache)})))
    explicit_id = run_id is not None
    if explicit_id:
        try:
            check_name(run_id, "run id")
        except ValueError as exc:
            raise DataError(str(exc)) from None
    else:
        run_id = store.default_run_id(started)
    out_root = Path(output if output is not None else (spec.output.dir or DEFAULT_OUTPUT)).expanduser().resolve()
    job_dir = out_root / spec.name
    if out_root.exists() and not out_root.is_dir():
        raise DataError(f"output {str(out_root)!r} exists and is not a directory")

    created: list[Path] = []  # directories this run created, removed again on failure if empty
    tmp: Path | None = None
    # while writing outputs: (the directory an output fault names, the run's temporary
    # directory, what the message adds); None while reading and computing
    writing: tuple | None = None
    step: str | None = None  # the file being written, for the OS errors that name none
    client = cluster = where = None
    res = RunResult()
    stats: dict[str, Any] = {}
    lock = contextlib.ExitStack()  # the job's lock: from before the plan until the run is committed
    with store.signals_raise():
        try:
            # ---- the input, checked before anything is written
            t0 = time.perf_counter()
            if spec.source.synthetic:
                gen = inputs.make_generator(spec)
                inputs.open_job_request(spec, gen.frame(16))  # names and kinds, before writing the dataset
                for p in (out_root, out_root / ".cache"):
                    if not p.exists():
                        created.append(p)
                writing = (out_root, None, "(nothing was computed or written)")
                data_path = str(inputs.ensure_synthetic(spec, out_root, log))
                spec = inputs.ensure_model(spec, out_root, log)  # [model] fit: the run's own model file
                writing = None
            else:
                data_path = spec.source.path
            request = inputs.open_job_request(spec, inputs.job_data(spec, data_path))
            stats["input_schema"] = inputs.schema_stats(request)
            feats, cats = list(request.features), inputs.categorical_features(request)
            kinds = {spec.target: "numeric", **request.kinds}
            if request.left_out:
                stats["skipped_features"] = dict(request.left_out)
            needed = list(dict.fromkeys([spec.target, *feats, *inputs.job_row_id(spec, read=True)]))
            if spec.model_based:
                model, model_inputs, model_feats = inputs.prepare_model(spec, request, stats)
            timings["open"] = time.perf_counter() - t0

            # ---- the run's temporary directory: from here on a kill leaves only this,
            # and the handlers below remove it
            for p in (out_root, job_dir):
                if not p.exists():
                    created.append(p)
            store.check_free_space(job_dir, outputs.output_bytes(spec, len(feats)), "the run's outputs")
            writing = (job_dir, None, "(nothing was computed or written)")
            waited = lock.enter_context(store.job_lock(job_dir, lambda line: log_line(log, line)))
            if waited and not explicit_id:  # its id: when it really starts, after the run it waited for
                run_id = store.default_run_id()
            if not explicit_id:  # a run of that id exists (two runs in one second)
                run_id = store.free_run_id(job_dir, run_id)
            if waited:
                log_line(log, f"daskpd: the other run ended after {waited:.1f} s of waiting; this one goes on as "
                              f"run {run_id}")
            store.clean_stale(job_dir)
            tmp = job_dir / f".{run_id}.tmp-{os.getpid()}"
            store.rmtree(tmp)
            tmp.mkdir()
            writing = None

            t0 = time.perf_counter()
            fp_mode = "content" if spec.source.synthetic else spec.source.fingerprint
            stamps = inputs.input_stamps(spec, request, data_path, fp_mode)
            fp = inputs.fingerprint(data_path, spec.source.storage_options, fp_mode, stamps=stamps)
            timings["fingerprint"] = time.perf_counter() - t0
            plan = None
            # a job with only model-based methods: its schema is that of the model's inputs too (with model-free
            # methods, the model-free part's columns: a new model alone leaves that part incremental)
            read_extra = model_inputs if spec.model_based and not spec.model_free else ()
            if spec.model_free or spec.run.incremental:  # the model-free part's plan, or the files' alone
                t0 = time.perf_counter()
                plan = nightly.plan(spec, job_dir, request, stamps, read_extra)
                timings["plan"] = time.perf_counter() - t0
                if plan.verify_s:
                    timings["verify_state"] = plan.verify_s
                if spec.run.incremental:
                    log_line(log, f"daskpd: {plan.mode} run: {plan.reason}")

            mplan = None
            if spec.model_based and spec.run.incremental:  # the model-based part's own plan (model_state)
                t0 = time.perf_counter()
                mplan = model_state.plan(spec, job_dir, plan, model_state.model_sha256(spec.model.path),
                                         model_state.layout_key(spec, model_inputs, model_feats, cats))
                timings["plan"] = timings.get("plan", 0.0) + time.perf_counter() - t0
                log_line(log, f"daskpd: model-based methods: {mplan.mode} ({mplan.reason})")
            reuse = (plan is not None and plan.mode == "incremental" and not plan.new_files
                     and (mplan is None or mplan.mode == "incremental"))
            h = spec.history
            res.comparisons = [newold.Comparison(ref, alpha=h.alpha, threshold=h.threshold, n_trials=h.n_trials)
                               for ref in newold.references(spec, job_dir, plan)]
            if reuse:  # nothing changed since the base run: its results are the results (hard links)
                for cmp_ in res.comparisons:
                    cmp_.reference.skip = (cmp_.reference.skip
                                           or f"no new input since run {plan.base_run}: its results are reused")
                writing = (job_dir, tmp, "(no run was written)")
                t0 = time.perf_counter()
                manifest = nightly.reuse_run(job_dir / plan.base_run, tmp, {
                    "run_id": run_id, "started_at": started.isoformat(timespec="seconds"),
                    "spec": spec.to_dict(), "spec_toml": spec.spec_text,
                    "incremental": {**plan.manifest(), "schema": nightly.schema_of(request, read_extra),
                                    **({"model": mplan.manifest()} if mplan is not None else {})},
                    "drift": newold.manifest_record(res.comparisons)})
                timings["write"] = time.perf_counter() - t0
                timings["total"] = time.perf_counter() - t_start
                manifest["finished_at"] = store.now().isoformat(timespec="seconds")
                manifest["timings_s"] = {k: round(v, 3) for k, v in timings.items()}
                manifest["input"].update(fingerprint=fp, **inputs.table_record(request))
                if (tmp / "report.html").exists() or spec.output.report:  # the linked report is the base run's
                    step = "report.html"
                    with contextlib.suppress(FileNotFoundError):
                        (tmp / "report.html").unlink()  # the link only: the base run's file stays
                    files = manifest.setdefault("files", {})
                    files.pop("report.html", None)
                    if spec.output.report:
                        from .report import rewrite_report

                        rewrite_report(tmp, manifest)
                        files["report.html"] = {"bytes": (tmp / "report.html").stat().st_size,
                                                "sha256": store.sha256_file(tmp / "report.html")}
                        manifest["files"] = dict(sorted(files.items()))
                    step = None
            else:
                # ---- the cluster
                t0 = time.perf_counter()
                client, cluster, where = execute.connect(spec, scheduler, security, n_workers, threads_per_worker, log)
                borrowed = where == execute.CURRENT_CLIENT  # the caller's Client: used, never closed
                info = client.scheduler_info() if hasattr(client, "scheduler_info") else {}
                workers = info.get("workers", {}) if isinstance(info, dict) else {}
                stats["cluster"] = {"scheduler": client.scheduler.address if client.scheduler else where,
                                    "kind": ("LocalCluster" if cluster is not None else
                                             "current Client" if borrowed else "existing"),
                                    "n_workers": len(workers),
                                    "threads": int(sum(w.get("nthreads", 0) for w in workers.values())),
                                    "dashboard": execute.dashboard(client)}
                log_line(log, f"daskpd: job {spec.name!r}, run {run_id}: {len(feats)} feature(s), methods "
                          f"{', '.join(spec.methods)}")
                log_line(log, f"daskpd: cluster {stats['cluster']['scheduler']} ({stats['cluster']['kind']}, "
                          f"{stats['cluster']['n_workers']} workers, {stats['cluster']['threads']} threads)")
                if stats["cluster"]["dashboard"]:
                    log_line(log, f"daskpd: dashboard {stats['cluster']['dashboard']}"
                                  f"{execute.dashboard_hint(client, cluster)}")
                timings["connect"] = time.perf_counter() - t0

                # ---- compute (distributed's text progress bar writes to stdout: keep stdout for the summary)
                with contextlib.redirect_stdout(sys.stderr) if progress else contextlib.nullcontext(), \
                        inputs.damaged_pages_named(spec, data_path if request.dataset.table is None else None,
                                                   needed):
                    if spec.model_free:
                        t0 = time.perf_counter()
                        # a full run reads pass 1 from the cache; an incremental one keeps its new files' pass 1 in it
                        fresh = plan is None or plan.mode == "full"
                        fp_cache = (store.first_pass_cache(job_dir, stamps)
                                    if spec.run.first_pass_cache and (fresh or plan.new_files) else None)
                        execute.model_free(spec, request.dataset, feats, cats, progress, res, stats, plan,
                                           first_pass_cache=fp_cache)
                        timings["model_free"] = time.perf_counter() - t0
                        if fp_cache is not None:
                            stats["first_pass_cache"] = execute.first_pass_stats(fp_cache, log, not fresh)
                    if stats.get("skipped_features"):
                        skipped = stats["skipped_features"]
                        log_line(log, "daskpd: note: " + left_out_note(f"job {spec.name!r}", skipped,
                                                                       len(feats) - len(set(skipped) & set(feats)),
                                                                       "list them in 'features' to use them",
                                                                       keep=KEEP_KEY))
                    if stats.get("skipped_stratify_on"):
                        left = stats["skipped_stratify_on"]
                        log_line(log, "daskpd: note: " + left_out_note(
                            f"job {spec.name!r}", left, len(feats) - len(set(left) & set(feats)),
                            "list them in 'stratify_on' to use them", keep=KEEP_KEY, what="stratifying columns"))
                    if spec.model_based:
                        t0 = time.perf_counter()
                        execute.model_based(spec, request.dataset, model, model_inputs, model_feats, cats, progress,
                                            res, mplan)
                        for note in res.notes:
                            log_line(log, f"daskpd: {note}")
                        stats["model_phases"] = res.phases
                        timings["model_based"] = time.perf_counter() - t0

                # ---- write into the temporary directory
                writing = (job_dir, tmp, "(no run was written)")
                t0 = time.perf_counter()
                curves, imp = outputs.write_tables(tmp, res, {"job": spec.name, "run_id": run_id})
                for cmp_ in res.comparisons:  # each comparison's curves tested together
                    newold.finish(cmp_)
                if res.comparisons:  # RUN/drift/ (when a curve was compared), the manifest and the log
                    newold.write(tmp, res.comparisons, run_id)
                    stats["drift"] = newold.manifest_record(res.comparisons)
                    outputs.log_comparisons(log, res.comparisons)
                if plan is not None:
                    stats["incremental"] = {**plan.manifest(), "schema": nightly.schema_of(request, read_extra),
                                            **({"model": mplan.manifest()} if mplan is not None else {})}
                    if res.stratification is not None:
                        strat = res.stratification
                        stats["stratification"] = {"id": strat.id, "refitted": plan.mode == "full",
                                                   "fitted_rows": int(strat.fitted_rows)}
                    # the state: the files covered, the model-free sums (a job without model-free methods:
                    # only the files), and next to them the model-based sums
                    if res.state is not None or (not spec.model_free and res.model_state is not None):
                        step = "the scan state"
                        t1 = time.perf_counter()
                        n_bytes = nightly.save_state(tmp, res.stratification, res.state, stamps, fp_mode,
                                                     inputs.table_record(request).get("table"))
                        timings["save_state"] = time.perf_counter() - t1
                        stats["state"] = {"path": nightly.STATE_DIR, "bytes": n_bytes,
                                          "sums_bytes": 0 if res.state is None else res.state.nbytes,
                                          "n_rows": int(res.state.n_rows if res.state is not None
                                                        else model_state.partial_rows(res.model_state[1]))}
                        if res.model_state is not None and mplan is not None:  # next to it: the model-based sums
                            step = "the model-based state"
                            m_bytes = model_state.save(tmp, *res.model_state, mplan.sha256, mplan.key,
                                                       mplan.fitted_rows)
                            stats["state"].update(model_bytes=m_bytes)
                        step = "the state's seal"
                        stats["state"]["bytes"] = nightly.seal_state(tmp, plan)
                        timings["save_state"] = time.perf_counter() - t1
                        step = None
                step = "the plots"
                plots = outputs.write_plots(res, imp, tmp / "plots", spec) if spec.output.plots else []
                timings["write"] = time.perf_counter() - t0
                finished = store.now()
                timings["total"] = time.perf_counter() - t_start
                manifest = {
                    "daskpd_manifest": 1,
                    "job": spec.name,
                    "run_id": run_id,
                    "description": spec.description,
                    "status": "complete",
                    "started_at": started.isoformat(timespec="seconds"),
                    "finished_at": finished.isoformat(timespec="seconds"),
                    "spec": spec.to_dict(),
                    "spec_toml": spec.spec_text,
                    "input": {"path": data_path or spec.source.label,
                              "format": "csv" if spec.source.is_csv else "parquet",
                              "filters": spec.source.filters, "fingerprint": fp,
                              "columns_read": needed, **inputs.table_record(request)},
                    "target": spec.target,
                    "features": feats,
                    "categorical": cats,
                    "kinds": kinds,
                    "rows": outputs.row_stats(res),
                    "timings_s": {k: round(v, 3) for k, v in timings.items()},
                    "versions": outputs.versions(("skops", "joblib") if spec.model is not None else ()),
                    "host": platform.node(),
                    **stats,
                    "plots": plots,
                    "summaries": [*({"method": m, "feature": f, "summary": r.summary()}
                                    for (m, f), r in res.curves.items()),
                                  *({"method": m, "feature": None, "summary": r.summary()}
                                    for m, r in res.interactions.items())],
                }
                if spec.output.report:
                    from .report import write_report

                    step = "report.html"
                    write_report(tmp, manifest, curves, imp)
                files = sorted(p.relative_to(tmp).as_posix() for p in tmp.rglob("*") if p.is_file()
                               and not p.relative_to(tmp).as_posix().startswith(nightly.STATE_DIR + "/"))
                manifest["files"] = {f: {"bytes": (tmp / f).stat().st_size, "sha256": store.sha256_file(tmp / f)}
                                     for f in files}
            step = "manifest.json"
            (tmp / "manifest.json").write_text(dump_json(manifest))
            step = None
            # ---- commit
            final = job_dir / run_id
            with store.signals_blocked():
                replaced = store.commit(tmp, final)
                committed, tmp = tmp, None
                try:
                    store.update_latest(job_dir)
                except OSError as exc:
                    if store.output_fault(exc, job_dir) is not None:
                        writing = (job_dir, None, f"(run {run_id} was written but 'latest' was not updated)")
                        if not replaced:  # take the new run out again: the runs and 'latest' stay as they were
                            with contextlib.suppress(OSError):
                                os.rename(final, committed)
                                tmp = committed  # removed below
                                writing = (job_dir, None, "(no run was written)")
                    raise
                writing = None
                created.clear()
                try:
                    pruned = store.prune(job_dir, spec.output.keep)
                except OSError as exc:  # the run is complete and 'latest' points at it: say so, go on
                    fault = store.output_fault(exc, job_dir, suffix="")
                    if fault is None:
                        raise
                    pruned = []
                    log_line(log, f"daskpd: note: old runs not removed (output.keep = {spec.output.keep}): {fault}")
            # ---- tell the user
            if out is not None and reuse:
                print(f"job {spec.name}  run {run_id}: no new input since run {plan.base_run}; its results are "
                      f"reused\nwrote {final}", file=out)
            elif out is not None:
                outputs.print_summary(out, spec, res, imp, manifest, final, pruned)
            return final
        except OSError as exc:
            fault = None if writing is None else store.output_fault(exc, *writing, what=step)
            if fault is None:
                raise
            raise fault from exc
        finally:
            with store.signals_blocked():  # a second signal must not interrupt the clean-up
                if tmp is not None:
                    store.rmtree(tmp)
                for p in reversed(created):
                    if p.name != ".cache":
                        with contextlib.suppress(OSError):
                            p.rmdir()  # only if empty: never remove anything but what this run made
                lock.close()
            execute.close(None if client is not None and where == execute.CURRENT_CLIENT else client, cluster,
                          quiet=isinstance(sys.exc_info()[1], JobTerminated))


