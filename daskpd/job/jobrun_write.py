"""Step 4 of a job's run (:class:`daskpd.job.jobrun.JobRun`), the home of writing it:
the tables and the comparisons, the incremental state, the plots, the typed manifest,
the report and the files' list into the run's temporary directory, or, for a run that
reuses its base run's results, their hard links (:meth:`WriteStep.write_reused`).
"""
from __future__ import annotations

import contextlib
import platform
import time

from . import incremental as nightly
from . import inputs, model_state, newold, outputs, store
from .manifest import InputRecord, Manifest
from .report import write_report

__all__ = ["WriteStep"]


class WriteStep:
    """The write step's methods of :class:`~daskpd.job.jobrun.JobRun` (a base class of it:
    they read and set the run's attributes, see its docstring)."""

    def write(self) -> dict:
        """Everything but the manifest into the temporary directory; returns the manifest."""
        self.writing = (self.job_dir, self.tmp, "(no run was written)")
        t0 = time.perf_counter()
        curves, imp = self.write_tables()
        if self.plan is not None:
            self.stats["incremental"] = self.incremental_record()
            if self.res.stratification is not None:
                strat = self.res.stratification
                self.stats["stratification"] = {"id": strat.id, "refitted": self.plan.mode == "full",
                                                "fitted_rows": int(strat.fitted_rows)}
            # the state: the files covered, the model-free sums (a job without model-free methods:
            # only the files), and next to them the model-based sums
            if self.res.state is not None or (not self.spec.model_free and self.res.model_state is not None):
                self.save_state()
        self.step = "the plots"
        plots = outputs.write_plots(self.res, imp, self.tmp / "plots", self.spec) if self.spec.output.plots else []
        self.timings["write"] = time.perf_counter() - t0
        self.imp, manifest = imp, self.build_manifest(plots)
        if self.spec.output.report:
            self.write_report(manifest, curves, imp)
        manifest.files = self.list_files()
        return manifest.to_dict()
    def write_tables(self):
        """The curves and importances tables; the comparisons (drift/), logged."""
        res, log = self.res, self.log
        curves, imp = outputs.write_tables(self.tmp, res, {"job": self.spec.name, "run_id": self.run_id})
        for cmp_ in res.comparisons:  # each comparison's curves tested together
            newold.finish(cmp_)
        if res.comparisons:  # RUN/drift/ (when a curve was compared), the manifest and the log
            newold.write(self.tmp, res.comparisons, self.run_id)
            self.stats["drift"] = newold.manifest_record(res.comparisons)
            outputs.log_comparisons(log, res.comparisons)
        return curves, imp
    def save_state(self) -> None:
        """The incremental state (the scan's sums, the model-based sums), sealed."""
        res, tmp, mplan = self.res, self.tmp, self.mplan
        self.step = "the scan state"
        t1 = time.perf_counter()
        n_bytes = nightly.save_state(tmp, res.stratification, res.state, self.stamps, self.fp_mode,
                                     inputs.table_record(self.request).get("table"))
        self.timings["save_state"] = time.perf_counter() - t1
        self.stats["state"] = state = {
            "path": nightly.STATE_DIR, "bytes": n_bytes, "sums_bytes": 0 if res.state is None else res.state.nbytes,
            "n_rows": int(res.state.n_rows if res.state is not None
                          else model_state.partial_rows(res.model_state[1]))}
        if res.model_state is not None and mplan is not None:  # next to it: the model-based sums
            self.step = "the model-based state"
            state.update(model_bytes=model_state.save(tmp, *res.model_state, mplan.sha256, mplan.key,
                                                      mplan.fitted_rows))
        self.step = "the state's seal"
        state["bytes"] = nightly.seal_state(tmp, self.plan)
        self.timings["save_state"] = time.perf_counter() - t1
        self.step = None
    def build_manifest(self, plots: list[dict]) -> Manifest:
        spec, res = self.spec, self.res
        finished = store.now()
        self.timings["total"] = time.perf_counter() - self.t_start
        return Manifest(
            job=spec.name, run_id=self.run_id, description=spec.description,
            started_at=self.started.isoformat(timespec="seconds"), finished_at=finished.isoformat(timespec="seconds"),
            spec=spec.to_dict(), spec_toml=spec.spec_text,
            input=InputRecord(path=self.data_path or spec.source.label,
                              format="csv" if spec.source.is_csv else "parquet", filters=spec.source.filters,
                              fingerprint=self.fp, columns_read=self.needed, table=inputs.table_record(self.request)),
            target=spec.target, features=self.feats, categorical=self.cats, kinds=self.kinds,
            rows=outputs.row_stats(res), timings_s={k: round(v, 3) for k, v in self.timings.items()},
            versions=outputs.versions(("skops", "joblib") if spec.model is not None else ()), host=platform.node(),
            stats=self.stats, plots=plots,
            summaries=[*({"method": m, "feature": f, "summary": r.summary()} for (m, f), r in res.curves.items()),
                       *({"method": m, "feature": None, "summary": r.summary()}
                         for m, r in res.interactions.items())])
    def write_report(self, manifest: Manifest, curves, imp) -> None:
        self.step = "report.html"
        write_report(self.tmp, manifest.to_dict(), curves, imp)
    def list_files(self) -> dict[str, dict]:
        """Each file of the run (the state aside): its size and SHA-256."""
        tmp = self.tmp
        files = sorted(p.relative_to(tmp).as_posix() for p in tmp.rglob("*") if p.is_file()
                       and not p.relative_to(tmp).as_posix().startswith(nightly.STATE_DIR + "/"))
        return {f: {"bytes": (tmp / f).stat().st_size, "sha256": store.sha256_file(tmp / f)} for f in files}
    def write_reused(self) -> dict:
        """The base run's files as hard links, its manifest (typed) made this run's, its
        report rewritten as this run's."""
        spec, plan, tmp = self.spec, self.plan, self.tmp
        for cmp_ in self.res.comparisons:
            cmp_.reference.skip = (cmp_.reference.skip
                                   or f"no new input since run {plan.base_run}: its results are reused")
        self.writing = (self.job_dir, tmp, "(no run was written)")
        t0 = time.perf_counter()
        manifest = nightly.reuse_run(self.job_dir / plan.base_run, tmp)
        manifest.run_id, manifest.started_at = self.run_id, self.started.isoformat(timespec="seconds")
        manifest.spec, manifest.spec_toml = spec.to_dict(), spec.spec_text
        manifest.stats.update(incremental=self.incremental_record(), drift=newold.manifest_record(self.res.comparisons))
        self.timings["write"] = time.perf_counter() - t0
        self.timings["total"] = time.perf_counter() - self.t_start
        manifest.finished_at = store.now().isoformat(timespec="seconds")
        manifest.timings_s = {k: round(v, 3) for k, v in self.timings.items()}
        manifest.input.fingerprint = self.fp
        manifest.input.table.update(inputs.table_record(self.request))
        if (tmp / "report.html").exists() or spec.output.report:  # the linked report is the base run's
            self.step = "report.html"
            with contextlib.suppress(FileNotFoundError):
                (tmp / "report.html").unlink()  # the link only: the base run's file stays
            files = dict(manifest.files or {})
            files.pop("report.html", None)
            if spec.output.report:
                from .report import rewrite_report

                rewrite_report(tmp, manifest.to_dict())
                files["report.html"] = {"bytes": (tmp / "report.html").stat().st_size,
                                        "sha256": store.sha256_file(tmp / "report.html")}
            manifest.files = dict(sorted(files.items()))
            self.step = None
        return manifest.to_dict()
