"""The ``daskpd`` command line.

    daskpd run JOB.toml [--scheduler ADDRESS] [--scheduler-timeout S] [--output DIR] [--run-id ID]
                        [--incremental] [--refit {always,never,auto}] [--first-pass-cache] [--fail-on-drift]
                        [TLS options]
    daskpd validate JOB.toml [--check-data]
    daskpd history OUTPUT/JOB_NAME|JOB.toml [--last N] [--threshold X] [--alpha A] [--against RUN_ID | --window N]
                                   [--fail-on-drift] [--json [PATH]]

Exit status: 0 success; 2 a bad job spec, bad input data, bad arguments or an output
that cannot be written -- read-only, permission denied, disk full (one line
``daskpd: error: ...`` on stderr, no traceback, nothing written); 1 an unexpected
failure (traceback, nothing written); 3 ``run --fail-on-drift``: the run's new rows
drifted from the old ones, ``history --fail-on-drift``: a curve drifted (status
``drifted``: beyond its noise and the threshold) -- and 2 when the newest run directory
has no readable manifest (its drift cannot be checked);
128+N killed by signal N (SIGTERM: 143, SIGINT: 130) -- the run leaves nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
import warnings

from . import __version__
from ._data.lake_checks import check_content
from ._data.suspects import SUSPECT_WHYS
from ._errors import DataError
from ._warmup import compile_kernels
from .job.history import HistoryError, history, summary, unfinished_newest, write_summary
from .job.incremental import never_incremental
from .job.run import JobTerminated, run_job
from .job.spec import SpecError
from .job.spec_parse import load_spec
from .results.base import OutputError

__all__ = ["main", "build_parser"]

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_DRIFT = 0, 1, 2, 3


class UsageError(ValueError):
    """A bad command-line argument (exit status 2)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own usage errors: exit 2, one line
        self.print_usage(sys.stderr)
        print(f"daskpd: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="daskpd", description="Partial dependence (StratPD, CatStratPD, importances, model-based PD) "
                                           "as a job on a Dask cluster.  See docs/jobs.md.")
    p.add_argument("--version", action="version", version=f"daskpd {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    r = sub.add_parser("run", help="run a job spec", description="Run a TOML job spec and write its results "
                       "under OUTPUT/JOB_NAME/RUN_ID/ (atomically).")
    r.add_argument("spec", metavar="JOB.toml", help="the job spec")
    r.add_argument("--scheduler", metavar="ADDRESS",
                   help="Dask scheduler address (tcp://host:8786, tls://host:8786) or scheduler file; "
                        "default: $DASK_SCHEDULER_ADDRESS, else the spec's cluster.scheduler, else a LocalCluster "
                        "sized to this machine ('local' forces one)")
    r.add_argument("--output", metavar="DIR", help="output root (default: the spec's output.dir, else ./daskpd-runs)")
    r.add_argument("--run-id", metavar="ID", help="run id (default: UTC timestamp YYYYMMDDTHHMMSSZ); an existing "
                                                  "run with this id is replaced atomically")
    r.add_argument("--scheduler-timeout", type=float, metavar="SECONDS",
                   help="give up on a scheduler that does not connect or answer within this many seconds (default: "
                        "the daskpd.scheduler-timeout Dask config, else distributed.comm.timeouts.connect, 30 s)")
    r.add_argument("--n-workers", type=int, metavar="N", help="LocalCluster workers (default: sized to the machine)")
    r.add_argument("--threads-per-worker", type=int, metavar="N", help="LocalCluster threads per worker")
    r.add_argument("--tls-ca-file", metavar="PEM", help="CA certificate for a tls:// scheduler")
    r.add_argument("--tls-cert", metavar="PEM", help="client certificate (may also hold the key)")
    r.add_argument("--tls-key", metavar="PEM", help="client private key")
    r.add_argument("--incremental", action="store_true",
                   help="reuse the previous run's stratification (or grids and bins) and sums and scan only the "
                        "files appended since "
                        "(the spec's [run] incremental = true); anything else changed: a full run, the reason logged")
    r.add_argument("--refit", choices=("always", "never", "auto"),
                   help="when an incremental run fits the trees (with only model-based methods: builds the grids "
                        "and bins) again (the spec's [run] refit; default always)")
    r.add_argument("--first-pass-cache", action="store_true",
                   help="keep pass 1 per input file in the job directory; the next run reads only the files it has "
                        "not seen in pass 1 (the spec's [run] first_pass_cache = true)")
    r.add_argument("--fail-on-drift", action="store_true",
                   help="exit with status 3 when the run's new rows drifted from the old ones (its new-against-old "
                        "comparisons, written to RUN/drift/ and the manifest; docs/drift.md)")
    r.add_argument("--no-progress", action="store_true", help="no progress (default: a bar on a terminal, one line per stage in a log)")
    r.add_argument("-q", "--quiet", action="store_true", help="print only the run directory")

    v = sub.add_parser("validate", help="check a job spec without running it")
    v.add_argument("spec", metavar="JOB.toml")
    v.add_argument("--check-data", action="store_true",
                   help="also check the data as the run would: every parquet file's footer (damaged files), "
                        "the schema across the files (type drift, missing columns), the columns, no rows after the "
                        "filters, constant features (from the row-group statistics, else a scan that stops "
                        "early); and load and check the model")

    c = sub.add_parser("compile", help="compile daskpd's numba kernels into numba's cache",
                       description="Run every method once on a small synthetic table in this process, so "
                                   "numba compiles daskpd's kernels and keeps them in its on-disk cache "
                                   "(NUMBA_CACHE_DIR, else next to the modules): the first job on this machine or "
                                   "image then does not pay for the compile.  See docs/pipeline.md.")
    c.add_argument("--rows", type=int, default=20_000, metavar="N", help="rows of the synthetic table (default 20000)")
    c.add_argument("-q", "--quiet", action="store_true", help="print only the total")

    h = sub.add_parser("history", help="compare the runs of a job (drift per feature)",
                       description="Compare consecutive runs of a job: importance change, curve distance and a "
                                   "drift score per feature; writes OUTPUT/JOB_NAME/history/ (drift.parquet, "
                                   "history.html, plots).  See docs/jobs.md for the definitions.")
    h.add_argument("job_dir", metavar="OUTPUT/JOB_NAME",
                   help="the job's directory of runs, or its job spec (its runs under output.dir, else "
                        "./daskpd-runs)")
    h.add_argument("--last", type=int, default=10, metavar="N", help="runs shown in the plots (default 10)")
    h.add_argument("--feature", action="append", metavar="NAME", help="only these features (repeatable)")
    h.add_argument("--threshold", type=float, default=None, metavar="X",
                   help="a curve has drifted when its change beyond the noise exceeds X of the curve's size "
                        "(default: the job spec's [history] threshold, else 0.1)")
    h.add_argument("--alpha", type=float, default=None, metavar="A",
                   help="family-wise false-alarm level of each curve's test against its noise (default: the job "
                        "spec's [history] alpha, else 0.01)")
    h.add_argument("--against", metavar="RUN_ID",
                   help="also compare the newest run's curves with this run's (a pinned baseline; default: "
                        "the job spec's [history] baseline)")
    h.add_argument("--window", type=int, metavar="N",
                   help="also compare the newest run's curves with those of the run N runs before it (default: "
                        "the job spec's [history] window)")
    h.add_argument("--fail-on-drift", action="store_true",
                   help="exit with status 3 if a curve drifted (status 'drifted'): in the newest run's new rows "
                        "against the old ones, between the last two runs, or against --against / --window; and 2 "
                        "if the newest run directory has no readable manifest")
    h.add_argument("--json", nargs="?", const="-", metavar="PATH",
                   help="write the JSON summary of the last two runs (what drift.json holds) to PATH, atomically; "
                        "without PATH (or with -) print it")
    h.add_argument("--output", metavar="DIR", help="where to write (default: OUTPUT/JOB_NAME/history)")
    h.add_argument("--no-write", action="store_true", help="print only; write nothing")
    return p


def _die(msg, code: int = EXIT_USAGE) -> int:
    """``daskpd: error: ...`` on stderr: one line, or for a job spec with several
    problems, one line per problem (each naming its key)."""
    problems = getattr(msg, "errors", None)
    if problems is not None and len(problems) > 1:  # a SpecError
        print(f"daskpd: error: {msg.source}: {len(problems)} problems:", file=sys.stderr)
        for p in problems:
            print("  - " + " ".join(str(p).split()), file=sys.stderr)
        return code
    msg = " ".join(str(msg).split())  # one line
    print(f"daskpd: error: {msg}", file=sys.stderr)
    return code


def _security(args):
    tls = [args.tls_ca_file, args.tls_cert, args.tls_key]
    if not any(tls):
        return None  # Client() uses Dask's config (distributed.comm.tls.*), e.g. via DASK_CONFIG
    if not args.tls_ca_file or not args.tls_cert:
        raise UsageError("--tls-ca-file and --tls-cert go together (plus --tls-key unless the certificate file "
                         "holds the key)")
    for flag, path in (("--tls-ca-file", args.tls_ca_file), ("--tls-cert", args.tls_cert),
                       ("--tls-key", args.tls_key)):
        if path and not os.path.isfile(path):
            raise UsageError(f"{flag}: {path!r} does not exist")
    if args.scheduler and not args.scheduler.startswith("tls://") and not os.path.isfile(args.scheduler):
        raise UsageError(f"TLS options given but --scheduler {args.scheduler!r} is not a tls:// address")
    from distributed.security import Security

    return Security(tls_ca_file=args.tls_ca_file, tls_client_cert=args.tls_cert, tls_client_key=args.tls_key,
                    require_encryption=True)


def _cmd_run(args) -> int:
    try:
        security = _security(args)
        for flag in ("n_workers", "threads_per_worker"):
            v = getattr(args, flag)
            if v is not None and v < 1:
                raise UsageError(f"--{flag.replace('_', '-')} must be >= 1")
        if args.run_id is not None:
            from .job.spec import check_name

            try:
                check_name(args.run_id, "--run-id")
            except ValueError as exc:
                raise UsageError(str(exc)) from None
        if args.scheduler_timeout is not None and not args.scheduler_timeout > 0:
            raise UsageError("--scheduler-timeout must be > 0")
        import dask

        limit = {} if args.scheduler_timeout is None else {"daskpd.scheduler-timeout": args.scheduler_timeout}
        with dask.config.set(limit):
            final = run_job(args.spec, scheduler=args.scheduler, output=args.output, run_id=args.run_id,
                            progress=not args.no_progress and not args.quiet, security=security,
                            n_workers=args.n_workers, threads_per_worker=args.threads_per_worker,
                            out=False if args.quiet else None, log=False if args.quiet else None,
                            incremental=True if args.incremental else None, refit=args.refit,
                            first_pass_cache=True if args.first_pass_cache else None)
    except JobTerminated as exc:
        print(f"daskpd: {exc}; no run was written", file=sys.stderr)
        return 128 + exc.signum
    except (SpecError, DataError, UsageError, ConnectionError, OutputError) as exc:
        return _die(exc)
    if args.quiet:
        print(final)
    if args.fail_on_drift and _run_drifted(final):
        return EXIT_DRIFT
    return EXIT_OK


def _run_drifted(run_dir) -> bool:
    """Whether the run's manifest says a new-against-old comparison found drift."""
    with open(os.path.join(run_dir, "manifest.json"), encoding="utf-8") as fh:
        tests = json.load(fh).get("drift") or []
    return any(t.get("status") == "drift" for t in tests)


def _cmd_validate(args) -> int:
    try:
        spec = load_spec(args.spec)
        if args.check_data:
            from .job.inputs import categorical_features, job_data, make_generator, open_job_request

            data = make_generator(spec).frame(16) if spec.source.synthetic else job_data(spec, spec.source.path)
            request = open_job_request(spec, data)
            feats, cats = request.features, categorical_features(request)
            left_out = dict(request.left_out)
            if not spec.source.synthetic and not spec.source.is_csv and spec.model_free:
                left_out.update(_check_content(spec, request, cats))
            if spec.model_based and spec.model.fit is None:
                from .job.inputs import prepare_model

                prepare_model(spec, request, {})  # loads it (trust rules apply) and checks its columns
        else:
            feats, cats, left_out = spec.features, None, {}
    except (SpecError, DataError) as exc:
        return _die(exc)
    if left_out:
        feats = [f for f in feats if f not in left_out]
    print(f"{args.spec}: ok: job {spec.name!r}, target {spec.target!r}, methods {', '.join(spec.methods)}")
    if feats is not None:
        print(f"  features: {', '.join(feats)}" + (f" (categorical: {', '.join(cats) or 'none'})" if cats is not None
                                                   else ""))
    never = _never_incremental(spec)
    if never:
        print(f"  note: [run] incremental = true, but every night is a full run: {never}")
    if left_out:
        print("  note: the run leaves out of the default features: "
              + ", ".join(f"{f!r} ({why})" for f, why in left_out.items())
              + "; " + _left_out_hint(left_out))
    if args.check_data and spec.features is None and spec.model_free:
        print("  note: the run also leaves out of the default features the columns its tree sample shows to be "
              "identifiers, row numbers, leaks or dates stored as strings (keep_suspect = true keeps them)")
    return EXIT_OK


def _never_incremental(spec) -> str | None:
    """Why no night of an incremental job can be incremental (one line), or None."""
    if not spec.run.incremental:
        return None

    why = never_incremental(spec)
    if why is None and spec.run.refit == "always":
        fitted = "the trees are fitted" if spec.model_free else "the grids and bins are built"
        why = f'refit = "always": {fitted} again on every run (the state is kept for a later refit policy)'
    return why


def _left_out_hint(left_out: dict) -> str:
    """What to do about the columns the run leaves out, by why: a datetime or a constant
    column cannot be scored as it is; a hive key can (declared in 'numeric' or
    'categorical')."""
    why = set(left_out.values())
    hints = []
    if "datetime" in why:
        hints.append("convert a datetime to a number (days since an epoch, the year) in the data to score it")
    if "hive partition key" in why:
        hints.append("list a hive key in 'numeric' or 'categorical' to score it")
    if why & set(SUSPECT_WHYS):
        hints.append("list a likely identifier in 'features' (or set keep_suspect = true) to use it")
    if why - {"datetime", "hive partition key", *SUSPECT_WHYS}:
        hints.append("the other columns cannot be scored as they are")
    return "; ".join(hints)


def _check_content(spec, request, cats) -> dict:
    """What the run's sample pass would refuse (no rows after the filters, a feature with
    no value or a single one), from the parquet statistics or a scan that stops early."""
    feats = request.features
    want = spec.model_free
    if "importances" in want:
        curve = list(feats)
    else:
        curve = [f for f in feats if (f in cats and "catstratpd" in want) or (f not in cats and "stratpd" in want)]
    so = spec.source.storage_options or None
    table = request.dataset.table
    try:
        if table is not None:  # the snapshot's data files, with the partition values they do not store
            from ._data.tables import files_dataset

            reader, files, _ = request.dataset.file_reader()
            return check_content(None, request.read_schema(), curve, spec.source.filters, label=table.name,
                                 skip_unusable=spec.features is None, dataset=files_dataset(reader, files))
        return check_content(spec.source.path, request.read_schema(), curve, spec.source.filters, so,
                             label=spec.source.path, skip_unusable=spec.features is None)
    except DataError as exc:
        if spec.features is None or "'exclude'" not in str(exc):
            raise
        # a spec with 'features' cannot have 'exclude': the fix is to list the column no more
        raise DataError(str(exc).replace("list it in 'exclude'", "remove it from 'features'")) from None


def _cmd_history(args) -> int:
    if args.last < 2:
        return _die("--last must be >= 2")
    if args.threshold is not None and not args.threshold >= 0:
        return _die("--threshold must be >= 0")
    if args.alpha is not None and not 0 < args.alpha < 1:
        return _die(f"--alpha must be between 0 and 1 (exclusive); got {args.alpha:g}")
    if args.against is not None and args.window is not None:
        return _die("--against and --window: give one or the other")
    if args.window is not None and args.window < 1:
        return _die(f"--window must be >= 1; got {args.window}")
    if args.json not in (None, "-"):
        parent = os.path.dirname(os.path.abspath(args.json))
        if os.path.isdir(args.json) or not os.path.isdir(parent):
            return _die(f"--json {args.json!r}: expected a file path in an existing directory")
    target = None
    spec = None
    job_dir = args.job_dir
    if os.path.isfile(job_dir):  # a job spec: its runs, and its [history] baseline / window
        from .job.history import job_of_spec

        try:
            job_dir, spec = job_of_spec(job_dir)
        except SpecError as exc:
            return _die(exc)
    unfinished = unfinished_newest(job_dir) if os.path.isdir(job_dir) else None
    if unfinished is not None:
        if args.fail_on_drift:  # the newest run cannot be checked: the scheduler must not take that for "no drift"
            return _die(f"{unfinished}; --fail-on-drift cannot tell whether its curves drifted")
        print(f"daskpd: warning: {unfinished}; comparing the complete runs before it", file=sys.stderr)
    try:
        h = history(job_dir, features=args.feature, last=args.last, threshold=args.threshold, alpha=args.alpha,
                    output=None if args.no_write else (args.output or True), against=args.against,
                    window=args.window, spec=spec)
        if args.json not in (None, "-"):
            target = args.json
            write_summary(h, args.json)
    except (HistoryError, DataError) as exc:
        return _die(exc)
    except OSError as exc:  # its outputs cannot be written (read-only, permission denied, disk full)
        from .results.base import output_error

        where = target or args.output or os.path.join(job_dir, "history")
        fault = output_error(exc, exc.filename or where, instead="--output (or --no-write)" if target is None
                             else "--json PATH", suffix="(nothing was written)" if target is None else
                             "(the history directory was written; the JSON summary was not)")
        if fault is None:
            raise
        return _die(fault)
    if args.json == "-":
        from .results.base import dump_json

        sys.stdout.write(dump_json(summary(h)))
    else:
        print(h.format_latest())
        if h.written:
            print(f"\nwrote {h.written}")
        if args.json:
            print(f"wrote {args.json}")
    if args.fail_on_drift and h.drifted():
        return EXIT_DRIFT
    return EXIT_OK


def _cmd_compile(args) -> int:
    if args.rows < 1000:
        return _die(f"--rows must be at least 1000 (got {args.rows})")
    total = compile_kernels(args.rows, log=None if args.quiet else print)
    print(f"compiled daskpd's kernels in {total:.1f} s")
    return EXIT_OK


def _show_warning(message, category, filename, lineno, file=None, line=None):
    print(f"daskpd: warning: {message}", file=sys.stderr)


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    cmd = {"run": _cmd_run, "validate": _cmd_validate, "history": _cmd_history, "compile": _cmd_compile}[args.command]
    try:
        with warnings.catch_warnings():  # a warning is one "daskpd: warning: ..." line, as errors are
            warnings.showwarning = _show_warning
            return cmd(args)
    except KeyboardInterrupt:
        print("daskpd: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `daskpd history ... | head`
        return EXIT_OK
    except Exception:  # unexpected: a bug or an environment failure; show everything
        traceback.print_exc()
        print("daskpd: error: unexpected failure (traceback above); nothing was written", file=sys.stderr)
        return EXIT_FAILURE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
