"""Run a job spec: data -> cluster -> results -> ``OUTPUT/JOB_NAME/RUN_ID/``, atomically.

Layout of a job directory::

    OUTPUT/JOB_NAME/
        RUN_ID/                 one complete run (never a partial one)
            curves.parquet      tidy curves: method, feature, x | category, pd, count, supported, ...
            importances.parquet method, feature, importance, rank, ...
            manifest.json       spec, versions, row counts, timings, input fingerprint, files
            plots/*.png         importance chart and one plot per curve
            report.html         self-contained (PNG embedded), readable offline
        latest -> RUN_ID        symlink (a LATEST text file where symlinks are unavailable)
        .RUN_ID.tmp-PID/        only while a run is in progress

Atomicity: everything is written into ``.RUN_ID.tmp-PID`` and renamed to ``RUN_ID`` at the
end (one ``rename``; on Linux an existing run of the same id is swapped out with
``renameat2(RENAME_EXCHANGE)``, so readers see either the old or the new run, never
neither).  SIGTERM/SIGINT during a run remove the temporary directory and exit
non-zero; a ``kill -9`` leaves only a hidden ``.tmp-PID`` directory, which the next run
of the job removes once that PID is gone.
"""
from __future__ import annotations

import contextlib
import ctypes
import datetime as _dt
import hashlib
import json
import os
import platform
import re
import shutil
import signal
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..io import DataError, kind_of, load
from ..results import json_default
from .spec import JobSpec, SpecError, check_name, load_spec

__all__ = ["run_job", "JobTerminated", "RunResult", "list_runs", "CURVE_COLUMNS", "IMPORTANCE_COLUMNS",
           "DEFAULT_OUTPUT"]

#: default output root when neither --output nor output.dir is given (relative to the cwd)
DEFAULT_OUTPUT = "daskpd-runs"
#: the leading columns of curves.parquet (more, method-specific, may follow)
CURVE_COLUMNS = ["method", "feature", "x", "category", "pd", "count", "supported"]
#: the leading columns of importances.parquet
IMPORTANCE_COLUMNS = ["method", "feature", "importance", "rank"]

_TMP_RE = re.compile(r"^\.(?P<run>.+)\.(?:tmp|old)-(?P<pid>\d+)$")


class JobTerminated(BaseException):
    """SIGTERM/SIGINT arrived during a run (a BaseException, so library code cannot swallow it)."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"terminated by signal {signal.Signals(signum).name}")


class RunResult:
    """What :func:`run_job` computed, before it is written."""

    def __init__(self):
        self.curves: dict[tuple[str, str], Any] = {}  # (method, feature) -> result object
        self.importances: list[tuple[str, pd.DataFrame]] = []  # (method, table indexed by feature)
        self.extra_frames: dict[str, pd.DataFrame] = {}  # file stem -> frame (e.g. ice)
        self.figures: dict[str, Any] = {}


# ------------------------------------------------------------------ small helpers
def _now() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)


def default_run_id(now: _dt.datetime | None = None) -> str:
    """UTC timestamp ``YYYYMMDDTHHMMSSZ`` (sorts in time order, like ISO dates)."""
    return (now or _now()).strftime("%Y%m%dT%H%M%SZ")


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _rmtree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def clean_stale(job_dir: Path) -> list[str]:
    """Remove ``.RUN.tmp-PID`` / ``.RUN.old-PID`` directories left by dead processes."""
    removed = []
    if not job_dir.is_dir():
        return removed
    for p in job_dir.iterdir():
        m = _TMP_RE.match(p.name)
        if m and not _pid_alive(int(m["pid"])):
            _rmtree(p)
            removed.append(p.name)
    return removed


def list_runs(job_dir: str | os.PathLike) -> list[str]:
    """Complete runs of a job (directories holding manifest.json), oldest first by run id."""
    job_dir = Path(job_dir)
    if not job_dir.is_dir():
        return []
    runs = [p.name for p in job_dir.iterdir()
            if not p.name.startswith(".") and not p.is_symlink() and p.is_dir() and (p / "manifest.json").is_file()]
    return sorted(runs)


_RENAME_EXCHANGE = 2


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths (Linux renameat2); False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd = -100
    rc = fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), _RENAME_EXCHANGE)
    return rc == 0


def _commit(tmp: Path, final: Path) -> None:
    """Move the finished ``tmp`` run to ``final``, replacing an existing run atomically."""
    try:
        os.rename(tmp, final)
        return
    except OSError:
        if not final.exists():
            raise
    # a run with this id exists: swap it out
    if _exchange(tmp, final):
        _rmtree(tmp)  # now holds the old run
        return
    old = final.parent / f".{final.name}.old-{os.getpid()}"
    os.rename(final, old)
    os.rename(tmp, final)
    _rmtree(old)


def _update_latest(job_dir: Path) -> str | None:
    """Point ``latest`` at the newest run (by run id), atomically.  Returns the run id."""
    runs = list_runs(job_dir)
    if not runs:
        return None
    newest = runs[-1]
    link = job_dir / "latest"
    tmp = job_dir / f".latest.tmp-{os.getpid()}"
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        os.symlink(newest, tmp)
        os.replace(tmp, link)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(job_dir / "LATEST")
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        tmpf = job_dir / f".LATEST.tmp-{os.getpid()}"
        tmpf.write_text(newest + "\n")
        os.replace(tmpf, job_dir / "LATEST")
    return newest


def _prune(job_dir: Path, keep: int) -> list[str]:
    if keep <= 0:
        return []
    runs = list_runs(job_dir)
    gone = runs[:-keep] if len(runs) > keep else []
    for r in gone:
        trash = job_dir / f".{r}.old-{os.getpid()}"
        os.rename(job_dir / r, trash)
        _rmtree(trash)
    return gone


@contextlib.contextmanager
def _signals_raise():
    """While running: SIGTERM/SIGINT raise :class:`JobTerminated` in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise JobTerminated(signum)

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextlib.contextmanager
def _signals_blocked():
    """Defer SIGTERM/SIGINT while committing (delivered when the block ends)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    sigs = {signal.SIGTERM, signal.SIGINT}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _versions(extra: tuple[str, ...] = ()) -> dict[str, str]:
    from importlib import metadata

    out = {"python": platform.python_version()}
    for name in ("daskpd", "dask", "distributed", "pandas", "numpy", "scikit-learn", "pyarrow", "fsspec",
                 "matplotlib", *extra):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def _safe(name: str) -> str:
    s = re.sub(r"[^A-Za-z0-9_.-]+", "_", str(name)).strip("._") or "feature"
    return s[:80]


def _log(stream, msg: str) -> None:
    if stream is not None:
        print(msg, file=stream, flush=True)


# ------------------------------------------------------------------ the input data
def _synthetic_path(spec: JobSpec, out_root: Path) -> Path:
    src = spec.source
    key = json.dumps([src.synthetic, src.rows, src.random_state, src.rows_per_file, sorted(src.params.items())],
                     default=str)
    h = hashlib.sha256(key.encode()).hexdigest()[:12]
    return out_root / ".cache" / "synthetic" / f"{src.synthetic}-{src.rows}-{h}"


def _make_generator(spec: JobSpec):
    from ..datasets import GENERATORS

    src = spec.source
    params = {k: (tuple(v) if isinstance(v, list) else v) for k, v in src.params.items()}
    try:
        return GENERATORS[src.synthetic](random_state=src.random_state, **params)
    except (TypeError, ValueError) as exc:
        raise SpecError(spec.spec_path or "job spec", [f"key 'source.params': {exc}"]) from None


def _ensure_synthetic(spec: JobSpec, out_root: Path, log) -> Path:
    from ..datasets import write_parquet

    path = _synthetic_path(spec, out_root)
    if path.parent.is_dir():
        clean_stale(path.parent)  # copies left by a generation killed with -9 (their PID is gone)
    if (path / "_SUCCESS").is_file():
        return path
    # rows x (columns as 8-byte values), uncompressed: an upper bound of what is written
    n_cols = len(_make_generator(spec).frame(2).columns)
    check_free_space(path.parent, spec.source.rows * n_cols * 8, "the synthetic dataset")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}"
    _log(log, f"daskpd: writing the synthetic {spec.source.synthetic} dataset ({spec.source.rows:,} rows) to {path}")
    try:
        write_parquet(_make_generator(spec), spec.source.rows, tmp / "data", rows_per_file=spec.source.rows_per_file)
        for f in (tmp / "data").iterdir():
            os.rename(f, tmp / f.name)
        os.rmdir(tmp / "data")
        (tmp / "_SUCCESS").write_text("")
        try:
            os.rename(tmp, path)
        except OSError:  # another process made it first (or a broken leftover is in the way)
            if (path / "_SUCCESS").is_file():
                _rmtree(tmp)
            else:
                _rmtree(path)
                os.rename(tmp, path)
    finally:
        _rmtree(tmp)
    return path


#: bytes a run's outputs take at most, per plotted curve (PNG in plots/ and again in report.html) and in all
_BYTES_PER_PLOT = 2 * 256 * 1024
_BYTES_BASE = 4 * 1024 * 1024


def check_free_space(where: Path, need: int, what: str) -> None:
    """Refuse up front (``DataError``, nothing written) when the file system of ``where``
    has less than ``need`` bytes free plus the ``daskpd.output-reserve`` config (default
    64 MiB, left for everything else on that disk)."""
    import dask
    from dask.utils import format_bytes, parse_bytes

    probe = where
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        free = shutil.disk_usage(probe).free
    except OSError:
        return
    reserve = dask.config.get("daskpd.output-reserve", "64MiB")
    reserve = int(parse_bytes(reserve) if isinstance(reserve, str) else reserve)
    if free < need + reserve:
        raise DataError(f"not enough free space for {what} in {str(probe)!r}: {format_bytes(free)} free, it needs "
                        f"about {format_bytes(need)} plus the {format_bytes(reserve)} daskpd.output-reserve; free "
                        "some space or choose another --output (nothing was computed or written)")


def _output_bytes(spec: JobSpec, n_features: int) -> int:
    """An upper bound of a run's outputs: plots (and their copies in report.html) per curve."""
    n_curves = n_features * max(1, len(spec.methods))
    per_plot = _BYTES_PER_PLOT if (spec.output.plots or spec.output.report) else 0
    return _BYTES_BASE + n_curves * (per_plot + 64 * 1024)


def _apply_filters(ddf, filters):
    """Row-wise DNF filters on a dask DataFrame (CSV sources; parquet pushes them down)."""
    import operator

    ops = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
           ">=": operator.ge}
    any_mask = None
    for group in filters:
        all_mask = None
        for col, op, val in group:
            s = ddf[col]
            if op == "in":
                m = s.isin(list(val))
            elif op == "not in":
                m = ~s.isin(list(val))
            else:
                m = ops[op](s, val)
            all_mask = m if all_mask is None else (all_mask & m)
        any_mask = all_mask if any_mask is None else (any_mask | all_mask)
    return ddf[any_mask]


def open_source(spec: JobSpec, data_path: str):
    """A lazy dask DataFrame of the source (all columns, filters applied)."""
    src = spec.source
    filters = src.filters
    if src.is_csv:
        import dask.dataframe as dd

        if "://" not in data_path and not any(c in data_path for c in "*?[") and not os.path.exists(data_path):
            raise DataError(f"data path {data_path!r} does not exist")
        try:
            ddf = dd.read_csv(data_path, storage_options=src.storage_options or None, blocksize="64MB")
        except (OSError, ValueError, TypeError) as exc:
            raise DataError(f"could not read CSV data from {data_path!r}: {type(exc).__name__}: {exc}") from exc
        if filters:
            fcols = sorted({c for g in filters for c, _, _ in g})
            load(ddf, fcols)  # names missing filter columns
            ddf = _apply_filters(ddf, filters)
        return ddf
    # the footers of every file are read and the schema of the columns the run reads is
    # reconciled across the files (daskpd._data.lake): damaged files, type drift and
    # missing columns are named here, before anything is computed or written
    lake, read = _lake_columns(spec, data_path)
    if filters:
        fcols = sorted({c for g in filters for c, _, _ in g})
        hive = _hive_columns(data_path)
        missing = [c for c in fcols if c not in set(lake.types) | hive]
        if missing:
            raise DataError(f"key 'source.filters': column{'s' if len(missing) > 1 else ''} "
                            f"{', '.join(map(repr, missing))} not found in {data_path}; available columns: "
                            f"{', '.join(map(str, lake.types))}")
    # every column stays in the frame (dask reads only those used); the ones read must agree
    return load(data_path, None, storage_options=src.storage_options or None, filters=filters, agree=read)


def _lake_columns(spec: JobSpec, data_path: str):
    """(the lake's footers, the columns the run reads or None for all).  Columns the run
    does not read (``exclude``, or outside ``source.columns`` / ``features``) need not
    agree across the files; a model-based run reads every column."""
    from .._data.lake import inspect_lake

    so = spec.source.storage_options or None
    lake = inspect_lake(data_path, [], so)  # footers (damage) and the columns of the files
    if spec.model_based:
        return lake, None
    if spec.source.columns is not None:
        base = list(spec.source.columns)
    elif spec.features is not None:
        base = list(spec.features)
    else:
        base = [c for c in lake.types if c not in set(spec.exclude)]
    fcols = [c for g in (spec.source.filters or []) for c, _, _ in g]
    read = list(dict.fromkeys([spec.target, *base, *fcols]))
    return lake, read


def schema_stats(spec: JobSpec, data_path: str) -> dict:
    """For the manifest: the number of parquet files and the columns widened to one type
    across them (footers are cached: no second read)."""
    if spec.source.is_csv:
        return {}
    from .._data.lake import inspect_lake

    _, read = _lake_columns(spec, data_path)
    lake = inspect_lake(data_path, read, spec.source.storage_options or None)
    return {"parquet_files": len(lake.files), "rows_in_files": lake.num_rows, "widened": lake.widened}


def _hive_columns(path: str) -> set[str]:
    if "://" in path or not os.path.isdir(path):
        return set()
    cols = set()
    for _, dirs, _ in os.walk(path):
        for d in dirs:
            if "=" in d:
                cols.add(d.split("=", 1)[0])
    return cols


def plan_columns(spec: JobSpec, ddf) -> tuple[list[str], list[str], dict[str, str]]:
    """(features, categorical features, kinds) after defaults, declarations and checks."""
    cols = [str(c) for c in ddf.columns]
    if spec.source.columns is not None:
        load(ddf, list(spec.source.columns))  # names the missing ones
        cols = list(spec.source.columns)
    if spec.target not in cols:
        load(ddf, [spec.target])
    if spec.features is not None:
        feats = list(spec.features)
        load(ddf, feats)
    else:
        missing_excl = [c for c in spec.exclude if c not in cols]
        if missing_excl:
            raise DataError(f"key 'exclude': column{'s' if len(missing_excl) > 1 else ''} "
                            f"{', '.join(map(repr, missing_excl))} not found in the data; available columns: "
                            f"{', '.join(cols)}")
        feats = [c for c in cols if c != spec.target and c not in spec.exclude]
        if not spec.source.synthetic and spec.source.path:
            # hive partition keys (sale_year=2011/ directories) are where a file lies, not features
            from .._data.hive import partition_keys

            keys = [k for k in partition_keys(spec.source.path, spec.source.storage_options)
                    if k in feats and k not in spec.categorical]
            if keys:
                warnings.warn(f"job {spec.name!r}: {len(keys)} hive partition key{'s' if len(keys) > 1 else ''} "
                              f"({', '.join(map(repr, keys))}) left out of the default features; list "
                              f"{'them' if len(keys) > 1 else 'it'} in 'features' to use "
                              f"{'them' if len(keys) > 1 else 'it'}", UserWarning, stacklevel=2)
                feats = [c for c in feats if c not in keys]
    if not feats:
        raise DataError(f"no features: the data has only the target column {spec.target!r}")
    undeclared = [c for c in spec.categorical if c not in feats]
    if undeclared:
        raise DataError(f"key 'categorical': {', '.join(map(repr, undeclared))} "
                        f"{'is' if len(undeclared) == 1 else 'are'} not among the features ({', '.join(feats)})")
    dtypes = ddf.dtypes
    kinds = {c: kind_of(dtypes[c]) for c in [spec.target, *feats]}
    if kinds[spec.target] != "numeric":
        raise DataError(f"target {spec.target!r} must be numeric; it has dtype {dtypes[spec.target]}")
    for c in feats:
        # declared ones, and booleans (two levels: a category effect, not a slope)
        if c in spec.categorical or pd.api.types.is_bool_dtype(dtypes[c]):
            kinds[c] = "categorical"
    dt = [c for c in feats if kinds[c] == "datetime"]
    if dt:
        raise DataError(f"feature{'s' if len(dt) > 1 else ''} {', '.join(map(repr, dt))} "
                        f"{'is a' if len(dt) == 1 else 'are'} datetime column{'s' if len(dt) > 1 else ''}; convert "
                        "to a number first (e.g. the year) or list it in 'exclude'")
    cats = [c for c in feats if kinds[c] == "categorical"]
    return feats, cats, kinds


# ------------------------------------------------------------------ fingerprint
def fingerprint(path: str, storage_options: dict | None = None, mode: str = "metadata") -> dict:
    """Fingerprint of the input files.

    ``metadata`` (default, cheap on a lake): sha256 over each file's path (relative to
    the source), size and modification time (or ETag/checksum when the filesystem
    reports one).  ``content``: sha256 over each file's bytes instead of its
    modification time (reads every byte once; for small inputs).  Hidden files
    (``.name``) and ``_SUCCESS``-style markers are skipped; ``_metadata`` is kept.
    """
    import fsspec

    fs, root = fsspec.core.url_to_fs(path, **(storage_options or {}))
    if any(c in root for c in "*?["):
        files = sorted(fs.glob(root))
        base = root.split("*", 1)[0].rsplit("/", 1)[0]
    elif fs.isdir(root):
        files = sorted(fs.find(root))
        base = root
    else:
        files, base = [root], root.rsplit("/", 1)[0]

    def keep(f):
        name = f.rstrip("/").rsplit("/", 1)[-1]
        return not name.startswith(".") and (not name.startswith("_") or name in ("_metadata", "_common_metadata"))

    files = [f for f in files if keep(f)]
    h = hashlib.sha256()
    total = 0
    for f in files:
        info = fs.info(f)
        size = int(info.get("size") or 0)
        total += size
        rel = f[len(base):].lstrip("/") if f.startswith(base) else f
        if mode == "content":
            fh = hashlib.sha256()
            with fs.open(f, "rb") as fp:
                for block in iter(lambda: fp.read(1 << 20), b""):
                    fh.update(block)
            stamp = fh.hexdigest()
        else:
            stamp = str(info.get("ETag") or info.get("etag") or info.get("checksum") or info.get("md5Hash")
                        or info.get("mtime") or info.get("LastModified") or info.get("last_modified")
                        or info.get("updated") or "")
        h.update(f"{rel}\t{size}\t{stamp}\n".encode())
    return {"mode": mode, "sha256": h.hexdigest(), "n_files": len(files), "bytes": total}


# ------------------------------------------------------------------ computing
def _model_free(spec: JobSpec, data, feats, cats, progress, res: RunResult, stats: dict) -> None:
    from ..importance import strat_curves_and_importances

    want = spec.model_free
    numeric = [f for f in feats if f not in cats]
    p_num = spec.params.get("stratpd") or _defaults("stratpd")
    p_cat = spec.params.get("catstratpd") or _defaults("catstratpd")
    p_imp = spec.params.get("importances") or _defaults("importances")
    # the features whose curves are wanted (importances need them all)
    if "importances" in want:
        curve_feats = list(feats)
    else:
        curve_feats = ([f for f in numeric] if "stratpd" in want else []) + \
                      ([f for f in cats] if "catstratpd" in want else [])
        curve_feats = [f for f in feats if f in curve_feats]
    if not curve_feats:
        kinds = "numeric" if "stratpd" in want else "categorical"
        raise DataError(f"methods {', '.join(want)}: none of the features is {kinds} "
                        f"(features: {', '.join(feats)}; categorical: {', '.join(cats) or 'none'})")
    subsample = p_imp["subsample_size"] if 0 < p_imp["subsample_size"] < 1 else 0.75  # unused when bootstrapping
    with warnings.catch_warnings():  # the job logs the note itself (run_job's log stream), once
        warnings.filterwarnings("ignore", message="importances: .* left out of the default features")
        out = strat_curves_and_importances(
            data, spec.target, features=curve_feats, stratify_on=list(feats), categorical=list(cats),
            n_trials=p_imp["n_trials"], bootstrap=p_imp["bootstrap"], subsample_size=subsample,
            pvalues=p_imp["pvalues"], pvalues_n_trials=p_imp["pvalues_n_trials"],
            pvalues_sample_size=p_imp["pvalues_sample_size"], min_samples_leaf=p_num["min_samples_leaf"],
            cat_min_samples_leaf=p_cat["min_samples_leaf"], min_slopes_per_x=p_num["min_slopes_per_x"],
            max_bins=p_num["max_bins"], nan_as_level=p_cat["nan_as_level"], sample_size=spec.sample_size,
            tree_method=spec.tree_method, random_state=spec.random_state, progress=progress,
            skip_unusable=spec.features is None)  # the default feature set: constant columns are left out, counted
    stats["kinds_used"] = dict(out.kinds)
    skipped = {**stats.get("skipped_features", {}), **out.params.get("skipped_features", {})}
    if skipped:
        stats["skipped_features"] = skipped
    for f in curve_feats:
        if f not in out.curves:
            continue
        r = out.curves[f]
        method = "catstratpd" if out.kinds.get(f) == "categorical" else "stratpd"
        if method in want:
            res.curves[(method, f)] = r
    if "importances" in want:
        res.importances.append(("importances", out.table))


def _defaults(method: str) -> dict:
    from .spec import METHOD_PARAMS

    return {k: v.default for k, v in METHOD_PARAMS[method].items()}


def load_model(spec: JobSpec):
    """Load the model file: skops with a trust check; joblib/pickle only when trusted."""
    ms = spec.model
    label = f"model file {ms.path!r}"
    if ms.format == "skops":
        try:
            import skops.io as sio
        except ImportError:
            raise DataError(f"{label}: loading a .skops model needs skops (pip install 'daskpd[models]')") from None
        try:
            untrusted = sio.get_untrusted_types(file=ms.path)
        except Exception as exc:
            raise DataError(f"{label} is not a readable skops file: {type(exc).__name__}: {exc}") from None
        if not ms.trust_model:
            bad = [t for t in untrusted if t not in ms.trusted_types]
            if bad:
                raise DataError(f"{label} holds types that skops does not trust by default: {', '.join(bad)}; "
                                "review them and list them in model.trusted_types (or set model.trust_model = true)")
        try:
            return sio.load(ms.path, trusted=list(untrusted))
        except Exception as exc:
            raise DataError(f"{label} could not be loaded: {type(exc).__name__}: {exc}") from None
    if not ms.trust_model:  # the spec validator already refuses this; never rely on one check
        raise DataError(f"{label}: {ms.format} files run code when loaded; set model.trust_model = true")
    try:
        if ms.format == "joblib":
            import joblib

            return joblib.load(ms.path)
        import pickle

        with open(ms.path, "rb") as fh:
            return pickle.load(fh)
    except Exception as exc:
        raise DataError(f"{label} could not be loaded: {type(exc).__name__}: {exc}") from None


def _model_inputs(spec: JobSpec, model, ddf, feats) -> tuple[list[str], list[str]]:
    """(the model's input columns, the features to explain)."""
    names = getattr(model, "feature_names_in_", None)
    if names is not None:
        inputs = [str(c) for c in names]
        if spec.model.columns is not None and list(spec.model.columns) != inputs:
            raise DataError(f"key 'model.columns': {list(spec.model.columns)} differs from the columns the model "
                            f"was fitted on ({', '.join(inputs)}); remove the key")
    elif spec.model.columns is not None:
        inputs = list(spec.model.columns)
    else:
        raise DataError(f"model file {spec.model.path!r}: the model does not record its input columns "
                        "(no feature_names_in_: fitted on an array?); list them, in order, in model.columns")
    load(ddf, inputs)  # names any the data lacks
    mfeats = list(spec.model.features) if spec.model.features is not None else [f for f in feats if f in inputs]
    not_inputs = [f for f in mfeats if f not in inputs]
    if not_inputs:
        raise DataError(f"key 'model.features': {', '.join(map(repr, not_inputs))} "
                        f"{'is' if len(not_inputs) == 1 else 'are'} not inputs of the model ({', '.join(inputs)})")
    if not mfeats:
        raise DataError(f"no feature to explain with the model: none of the job's features ({', '.join(feats)}) "
                        f"is a model input ({', '.join(inputs)}); set model.features")
    return inputs, mfeats


def prepare_model(spec: JobSpec, ddf, feats, stats: dict):
    """Load and check the model before any computing: (model, inputs, features to explain)."""
    model = load_model(spec)
    stats["model_type"] = f"{type(model).__module__}.{type(model).__qualname__}"
    if not any(hasattr(model, m) for m in ("predict", "predict_proba", "decision_function")):
        raise DataError(f"model file {spec.model.path!r} holds a {type(model).__name__}, which has no predict method")
    inputs, mfeats = _model_inputs(spec, model, ddf, feats)
    stats["model_inputs"] = inputs
    stats["model_features"] = mfeats
    return model, inputs, mfeats


def _model_based(spec: JobSpec, ddf, model, inputs, mfeats, cats, progress, res: RunResult) -> None:
    """Model-based curves on the model's input columns (the library reads only those)."""
    import daskpd
    common = {"response": spec.model.response, "target_class": spec.model.target_class,
              "columns": list(inputs), "categorical_features": [c for c in cats if c in inputs] or None,
              "progress": progress}
    data = ddf
    for method in spec.model_based:
        p = dict(spec.params.get(method) or _defaults(method))
        if method == "partial_dependence":
            out = daskpd.partial_dependence(model, data, list(mfeats), grid_resolution=p["grid_resolution"],
                                            percentiles=p["percentiles"], method=p["method"], **common)
            for f in mfeats:
                res.curves[(method, f)] = out[f]
        elif method == "ale":
            out = daskpd.ale(model, data, list(mfeats), bins=p["bins"], **common)
            for f in mfeats:
                res.curves[(method, f)] = out[f]
        elif method == "marginal":
            kw = {k: v for k, v in common.items() if k != "target_class"}
            out = daskpd.marginal(data, list(mfeats), target=spec.target, model=model, bins=p["bins"],
                                  binning=p["binning"], **kw)
            for f in mfeats:
                res.curves[(method, f)] = out[f]
        elif method == "ice":
            lines = []
            for f in mfeats:
                r = daskpd.ice(model, data, f, grid_resolution=p["grid_resolution"], percentiles=p["percentiles"],
                               n_lines=p["n_lines"], centered=p["centered"], random_state=spec.random_state,
                               **common)
                res.curves[(method, f)] = r
                lines.append(_ice_lines(r))
            res.extra_frames["ice"] = pd.concat(lines, ignore_index=True)
        elif method == "pd_variance":
            out = daskpd.pd_variance(model, data, list(mfeats), method="importance",
                                     grid_resolution=p["grid_resolution"], percentiles=p["percentiles"], **common)
            res.importances.append(("pd_variance", out.to_frame().set_index("feature")))
        else:  # pragma: no cover - the spec validator lists the methods
            raise AssertionError(method)


def _ice_lines(r) -> pd.DataFrame:
    """ICE lines, long: feature, line, x | category, ice."""
    k, g = r.lines.shape
    grid = np.asarray(r.grid)
    numeric = getattr(r, "kind", "numeric") == "numeric"
    return pd.DataFrame({
        "feature": r.feature,
        "line": np.repeat(np.arange(k), g),
        "x": np.tile(grid.astype("float64"), k) if numeric else np.nan,
        "category": pd.array([None] * (k * g), dtype="string") if numeric
        else pd.array(np.tile(grid.astype(str), k), dtype="string"),
        "ice": r.lines.reshape(-1).astype("float64"),
    })


def _tidy(method: str, r) -> pd.DataFrame:
    """One curve as rows of (x | category, pd, count, supported, extras)."""
    if method in ("stratpd", "catstratpd"):
        f = r.to_frame().drop(columns=["feature"])
        return f
    if method == "partial_dependence":
        xs, y, count, kind, extra = r.grid_values[0], r.average, None, r.kinds[0], {}
    elif method == "ice":
        xs, y, count, kind, extra = r.grid, r.pd, None, r.kind, {}
    elif method == "ale":
        xs, y, count, kind = r.x, r.ale, r.count, r.kind
        extra = {"delta": r.delta, "delta_std": r.delta_std}
    elif method == "marginal":
        xs, y, count, kind = r.x, r.pd, r.count, r.kind
        extra = {k: getattr(r, k) for k in ("y_std", "pred_mean", "pred_std") if getattr(r, k) is not None}
    else:  # pragma: no cover
        raise AssertionError(method)
    n = len(y)
    numeric = kind == "numeric"
    y = np.asarray(y, dtype="float64")
    out = pd.DataFrame({
        "x": np.asarray(xs, dtype="float64") if numeric else np.full(n, np.nan),
        "category": pd.array([None] * n, dtype="string") if numeric
        else pd.array(np.asarray(xs, dtype=object).astype(str), dtype="string"),
        "pd": y,
        "count": np.full(n, np.nan) if count is None else np.asarray(count, dtype="float64"),
        "supported": np.isfinite(y),
    })
    for k, v in extra.items():
        out[k] = np.asarray(v, dtype="float64")
    return out


# ------------------------------------------------------------------ writing
def curves_frame(curves: dict) -> pd.DataFrame:
    """The tidy curves table: one row per (method, feature, x or category)."""
    frames = []
    for (method, feature), r in curves.items():
        f = _tidy(method, r).copy()
        f.insert(0, "feature", feature)
        f.insert(0, "method", method)
        if "category" not in f.columns:
            f["category"] = pd.Series([None] * len(f), dtype="string", index=f.index)
        else:
            f["category"] = f["category"].astype("string")
        if "x" not in f.columns:
            f["x"] = np.nan
        f["x"] = pd.to_numeric(f["x"], errors="coerce").astype("float64")
        f["count"] = pd.to_numeric(f["count"], errors="coerce").astype("float64")
        f["pd"] = pd.to_numeric(f["pd"], errors="coerce").astype("float64")
        if "supported" not in f.columns:
            f["supported"] = np.isfinite(f["pd"].to_numpy())
        f["supported"] = f["supported"].astype(bool)
        frames.append(f)
    if not frames:
        return pd.DataFrame({"method": pd.Series(dtype="string"), "feature": pd.Series(dtype="string"),
                             "x": pd.Series(dtype="float64"), "category": pd.Series(dtype="string"),
                             "pd": pd.Series(dtype="float64"), "count": pd.Series(dtype="float64"),
                             "supported": pd.Series(dtype="bool")})
    return _tidy_concat(frames, CURVE_COLUMNS)


def importances_frame(tables: list[tuple[str, pd.DataFrame]]) -> pd.DataFrame:
    frames = []
    for method, t in tables:
        t = t.copy()
        if "feature" not in t.columns:
            t = t.rename_axis("feature").reset_index()
        t["feature"] = t["feature"].astype(str)
        if "importance" not in t.columns:
            raise RuntimeError(f"{method}: the importance table has no 'importance' column ({list(t.columns)})")
        t["importance"] = pd.to_numeric(t["importance"], errors="coerce").astype("float64")
        t = t.sort_values("importance", ascending=False, kind="stable", na_position="last")
        t["rank"] = np.arange(1, len(t) + 1, dtype="int64")
        t["method"] = method
        frames.append(t)
    if not frames:
        return pd.DataFrame({"method": pd.Series(dtype="string"), "feature": pd.Series(dtype="string"),
                             "importance": pd.Series(dtype="float64"), "rank": pd.Series(dtype="int64")})
    return _tidy_concat(frames, IMPORTANCE_COLUMNS)


def _tidy_concat(frames: list[pd.DataFrame], columns: list[str]) -> pd.DataFrame:
    """Concatenate, put ``columns`` first, and give text columns the string dtype."""
    df = pd.concat(frames, ignore_index=True, sort=False)
    extra = [c for c in df.columns if c not in columns]
    df = df[columns + extra]
    df["method"] = df["method"].astype("string")
    df["feature"] = df["feature"].astype("string")
    for c in extra:
        if df[c].dtype == object:
            df[c] = df[c].astype("string")
    return df


def _write_parquet(df: pd.DataFrame, path: Path, meta: dict | None = None) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(df, preserve_index=False)
    if meta:
        m = dict(table.schema.metadata or {})
        m[b"daskpd"] = json.dumps(meta, default=json_default).encode()
        table = table.replace_schema_metadata(m)
    pq.write_table(table, path)


def _clean(o):
    """JSON-safe: NaN/inf -> null, numpy scalars/arrays -> Python."""
    if isinstance(o, dict):
        return {str(k): _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    if isinstance(o, np.ndarray):
        return [_clean(v) for v in o.tolist()]
    if isinstance(o, np.generic):
        o = o.item()
    if isinstance(o, float) and not np.isfinite(o):
        return None
    return o


def dump_json(obj) -> str:
    return json.dumps(_clean(obj), indent=2, default=json_default, allow_nan=False) + "\n"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _plots(res: RunResult, imp: pd.DataFrame, plot_dir: Path, spec: JobSpec) -> list[dict]:
    """Write PNGs; return [{file, kind, method, feature, title}] in report order."""
    from ..plotting import _plt
    from .report import importance_figure

    plt = _plt()
    plot_dir.mkdir()
    entries = []
    used = set()

    def name_for(stem):
        n, i = stem, 2
        while n in used:
            n, i = f"{stem}-{i}", i + 1
        used.add(n)
        return n + ".png"

    for method in imp["method"].unique() if len(imp) else []:
        t = imp[imp["method"] == method]
        fig = importance_figure(t, title=f"{_method_title(method)} ({spec.target})")
        fn = name_for(f"importance-{_safe(method)}")
        fig.savefig(plot_dir / fn, dpi=100, bbox_inches="tight")
        plt.close(fig)
        entries.append({"file": f"plots/{fn}", "kind": "importance", "method": str(method), "feature": None,
                        "title": f"{_method_title(method)}"})
    for (method, feature), r in res.curves.items():
        n_cat = len(r.categories) if getattr(r, "categories", None) is not None else 0
        width = 7 if n_cat <= 30 else 9
        fig, ax = plt.subplots(figsize=(width, 4.2))
        try:
            # model-based curves: the value axis names the job's target ("predicted price")
            r.plot(ax=ax, **({} if method in ("stratpd", "catstratpd") else {"target": spec.target}))
        except Exception as exc:  # a plotting bug must not lose the computed results
            ax.clear()
            ax.text(0.5, 0.5, f"plot failed: {type(exc).__name__}: {exc}", ha="center", va="center",
                    transform=ax.transAxes, wrap=True)
            warnings.warn(f"plot of {method} {feature!r} failed: {exc}", RuntimeWarning, stacklevel=2)
        fn = name_for(f"{_safe(method)}-{_safe(feature)}")
        fig.savefig(plot_dir / fn, dpi=100, bbox_inches="tight")
        plt.close(fig)
        entries.append({"file": f"plots/{fn}", "kind": "curve", "method": method, "feature": feature,
                        "title": f"{_method_title(method)}: {feature}"})
    return entries


def _method_title(method: str) -> str:
    return {"stratpd": "StratPD", "catstratpd": "CatStratPD", "importances": "StratImpact importance",
            "partial_dependence": "Partial dependence (model)", "ice": "ICE (model)", "ale": "ALE (model)",
            "marginal": "Marginal plot", "pd_variance": "PD-variance importance (model)"}.get(method, method)


def _summary(r, method: str | None = None) -> str:
    if hasattr(r, "summary"):
        try:
            return str(r.summary())
        except Exception:  # pragma: no cover - a summary must never fail a run
            pass
    feature = getattr(r, "feature", "?")
    if method is None:
        return str(feature)
    t = _tidy(method, r)
    y = t["pd"].to_numpy()
    ok = np.isfinite(y)
    what = "categories" if t["category"].notna().any() else "positions"
    rng = f"[{np.min(y[ok]):.4g}, {np.max(y[ok]):.4g}]" if ok.any() else "[nan, nan]"
    rows = getattr(r, "n_rows", None)
    lines = getattr(r, "lines", None)
    return (f"{feature}: {len(t)} {what}, range {rng}" + (f", {rows:,} rows" if rows else "")
            + (f", {len(lines)} ICE lines" if lines is not None else ""))


def _row_stats(res: RunResult) -> dict:
    per = {}
    n_rows = None
    for (method, feature), r in res.curves.items():
        d = {}
        for k in ("n_rows", "n_used", "n_ignored", "n_missing_x", "n_bad_y", "n_leaves"):
            v = getattr(r, k, None)
            if v is not None:
                d[k] = int(v)
        if d:
            per[f"{method}:{feature}"] = d
        if method in ("stratpd", "catstratpd") and getattr(r, "n_rows", None) is not None:
            n_rows = int(r.n_rows)
    return {"rows_read": n_rows, "per_curve": per,
            "rows_ignored": {k: v.get("n_ignored", 0) + v.get("n_missing_x", 0) + v.get("n_bad_y", 0)
                             for k, v in per.items()}}


# ------------------------------------------------------------------ the entry point
def run_job(spec_path_or_spec, scheduler: str | None = None, output: str | os.PathLike | None = None,
            run_id: str | None = None, progress: bool = True, security=None, *, n_workers: int | None = None,
            threads_per_worker: int | None = None, out=None, log=None) -> Path:
    """Run a job; return the path of the finished run directory.

    ``scheduler``: an address (``tcp://...``, ``tls://...``) or scheduler file; else
    ``DASK_SCHEDULER_ADDRESS``, else the spec's ``cluster.scheduler``, else a
    LocalCluster sized to the machine.  ``output``: the output root (else the spec's
    ``output.dir``, else ./daskpd-runs).  ``run_id``: default a UTC timestamp;
    re-running an existing id replaces that run atomically.  ``security``: a
    :class:`distributed.Security` (else Dask's ``distributed.comm.tls.*`` config).
    ``out``/``log``: streams for the summary and progress messages (default
    stdout/stderr; pass ``False`` to silence).

    Raises :class:`SpecError` / :class:`daskpd.io.DataError` for bad specs or inputs
    (before anything is written), :class:`JobTerminated` on SIGTERM/SIGINT.
    """
    t_start = time.perf_counter()
    started = _now()
    out = sys.stdout if out is None else (None if out is False else out)
    log = sys.stderr if log is None else (None if log is False else log)
    timings: dict[str, float] = {}

    spec = spec_path_or_spec if isinstance(spec_path_or_spec, JobSpec) else load_spec(spec_path_or_spec)
    explicit_id = run_id is not None
    if explicit_id:
        try:
            check_name(run_id, "run id")
        except ValueError as exc:
            raise DataError(str(exc)) from None
    else:
        run_id = default_run_id(started)
    out_root = Path(output if output is not None else (spec.output.dir or DEFAULT_OUTPUT)).expanduser().resolve()
    job_dir = out_root / spec.name
    if out_root.exists() and not out_root.is_dir():
        raise DataError(f"output {str(out_root)!r} exists and is not a directory")
    if not explicit_id and (job_dir / run_id).exists():  # two runs in one second
        i = 2
        while (job_dir / f"{run_id}-{i}").exists():
            i += 1
        run_id = f"{run_id}-{i}"

    created: list[Path] = []  # directories this run created, removed again on failure if empty
    tmp: Path | None = None
    client = cluster = None
    res = RunResult()
    stats: dict[str, Any] = {}
    with _signals_raise():
        try:
            # ---- the input, checked before anything is written
            t0 = time.perf_counter()
            if spec.source.synthetic:
                gen = _make_generator(spec)
                plan_columns(spec, load(gen.frame(16)))  # names and kinds, before writing the dataset
                for p in (out_root, out_root / ".cache"):
                    if not p.exists():
                        created.append(p)
                data_path = str(_ensure_synthetic(spec, out_root, log))
            else:
                data_path = spec.source.path
            ddf_all = open_source(spec, data_path)
            stats["input_schema"] = schema_stats(spec, data_path)
            feats, cats, kinds = plan_columns(spec, ddf_all)
            needed = list(dict.fromkeys([spec.target, *feats]))
            ddf = ddf_all[needed]
            if spec.model_based:
                model, model_inputs, model_feats = prepare_model(spec, ddf_all, feats, stats)
            timings["open"] = time.perf_counter() - t0

            # ---- the run's temporary directory: from here on a kill leaves only this,
            # and the handlers below remove it
            for p in (out_root, job_dir):
                if not p.exists():
                    created.append(p)
            check_free_space(job_dir, _output_bytes(spec, len(feats)), "the run's outputs")
            job_dir.mkdir(parents=True, exist_ok=True)
            clean_stale(job_dir)
            tmp = job_dir / f".{run_id}.tmp-{os.getpid()}"
            _rmtree(tmp)
            tmp.mkdir()

            t0 = time.perf_counter()
            fp = fingerprint(data_path, spec.source.storage_options,
                             "content" if spec.source.synthetic else spec.source.fingerprint)
            timings["fingerprint"] = time.perf_counter() - t0

            # ---- the cluster
            t0 = time.perf_counter()
            client, cluster, where = _connect(spec, scheduler, security, n_workers, threads_per_worker, log)
            borrowed = where == CURRENT_CLIENT  # the caller's Client: used, never closed
            info = client.scheduler_info() if hasattr(client, "scheduler_info") else {}
            workers = info.get("workers", {}) if isinstance(info, dict) else {}
            stats["cluster"] = {"scheduler": client.scheduler.address if client.scheduler else where,
                                "kind": ("LocalCluster" if cluster is not None else
                                         "current Client" if borrowed else "existing"),
                                "n_workers": len(workers),
                                "threads": int(sum(w.get("nthreads", 0) for w in workers.values())),
                                "dashboard": _dashboard(client)}
            _log(log, f"daskpd: job {spec.name!r}, run {run_id}: {len(feats)} feature(s), methods "
                      f"{', '.join(spec.methods)}")
            _log(log, f"daskpd: cluster {stats['cluster']['scheduler']} ({stats['cluster']['kind']}, "
                      f"{stats['cluster']['n_workers']} workers, {stats['cluster']['threads']} threads)")
            if stats["cluster"]["dashboard"]:
                _log(log, f"daskpd: dashboard {stats['cluster']['dashboard']}{_dashboard_hint(client, cluster)}")
            timings["connect"] = time.perf_counter() - t0

            # ---- compute (distributed's text progress bar writes to stdout: keep stdout for the summary)
            with contextlib.redirect_stdout(sys.stderr) if progress else contextlib.nullcontext(), \
                    _damaged_pages_named(spec, data_path, needed):
                if spec.model_free:
                    t0 = time.perf_counter()
                    _model_free(spec, ddf, feats, cats, progress, res, stats)
                    if stats.get("skipped_features"):
                        from ..importance import skipped_note

                        n = len(feats) - len(stats["skipped_features"])
                        _log(log, "daskpd: note: " + skipped_note(stats["skipped_features"], n).replace(
                            "features=", "the spec's 'features'"))
                    timings["model_free"] = time.perf_counter() - t0
                if spec.model_based:
                    t0 = time.perf_counter()
                    _model_based(spec, ddf_all, model, model_inputs, model_feats, cats, progress, res)
                    timings["model_based"] = time.perf_counter() - t0

            # ---- write into the temporary directory
            t0 = time.perf_counter()
            curves = curves_frame(res.curves)
            imp = importances_frame(res.importances)
            _write_parquet(curves, tmp / "curves.parquet", {"job": spec.name, "run_id": run_id})
            _write_parquet(imp, tmp / "importances.parquet", {"job": spec.name, "run_id": run_id})
            for stem, frame in res.extra_frames.items():
                _write_parquet(frame, tmp / f"{stem}.parquet")
            plots = _plots(res, imp, tmp / "plots", spec) if spec.output.plots else []
            timings["write"] = time.perf_counter() - t0
            finished = _now()
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
                "input": {"path": data_path, "format": "csv" if spec.source.is_csv else "parquet",
                          "filters": spec.source.filters, "fingerprint": fp,
                          "columns_read": needed},
                "target": spec.target,
                "features": feats,
                "categorical": cats,
                "kinds": kinds,
                "rows": _row_stats(res),
                "timings_s": {k: round(v, 3) for k, v in timings.items()},
                "versions": _versions(("skops", "joblib") if spec.model is not None else ()),
                "host": platform.node(),
                **stats,
                "plots": plots,
                "summaries": [{"method": m, "feature": f, "summary": _summary(r, m)} for (m, f), r in res.curves.items()],
            }
            if spec.output.report:
                from .report import write_report

                write_report(tmp, manifest, curves, imp)
            files = sorted(p.relative_to(tmp).as_posix() for p in tmp.rglob("*") if p.is_file())
            manifest["files"] = {f: {"bytes": (tmp / f).stat().st_size, "sha256": _sha256(tmp / f)} for f in files}
            (tmp / "manifest.json").write_text(dump_json(manifest))
            # ---- commit
            final = job_dir / run_id
            with _signals_blocked():
                _commit(tmp, final)
                tmp = None
                created.clear()
                pruned = _prune(job_dir, spec.output.keep)
                _update_latest(job_dir)
            # ---- tell the user
            if out is not None:
                _print_summary(out, spec, res, imp, manifest, final, pruned)
            return final
        finally:
            with _signals_blocked():  # a second signal must not interrupt the clean-up
                if tmp is not None:
                    _rmtree(tmp)
                for p in reversed(created):
                    if p.name != ".cache":
                        with contextlib.suppress(OSError):
                            p.rmdir()  # only if empty: never remove anything but what this run made
            _close(None if client is not None and where == CURRENT_CLIENT else client, cluster,
                   quiet=isinstance(sys.exc_info()[1], JobTerminated))


def _dashboard_hint(client, cluster) -> str:
    """Empty when the dashboard page can be drawn; else what to install, and where.

    The page is drawn by the scheduler's process with bokeh (a dependency of daskpd,
    so a LocalCluster has it); a scheduler started elsewhere needs it in its own
    environment."""
    import importlib.util

    need = "bokeh>=3.1"
    if cluster is not None:
        ok = importlib.util.find_spec("bokeh") is not None
        where = "this Python environment"
    else:
        try:
            ok = bool(client.run_on_scheduler(lambda: __import__("importlib.util").util.find_spec("bokeh") is not None))
        except Exception:
            return ""  # cannot tell: say nothing rather than guess
        where = "the scheduler's Python environment"
    if ok:
        return ""
    return (f" (the page needs {need} in {where}: pip install '{need}' there"
            + (", then restart the scheduler)" if cluster is None else ", then rerun)"))




@contextlib.contextmanager
def _damaged_pages_named(spec: JobSpec, data_path: str, columns):
    """A read that fails mid-computation (a damaged data page behind an intact footer)
    becomes a DataError naming the file (found by reading the files one by one, only on
    this failure path)."""
    try:
        yield
    except OSError as exc:
        if spec.source.is_csv or type(exc).__module__.startswith("distributed"):
            raise
        from .._data.lake import inspect_lake, unreadable_file

        so = spec.source.storage_options or None
        err = unreadable_file(data_path, inspect_lake(data_path, [], so), None if spec.model_based else columns, so)
        if err is None:
            raise
        raise err from None


def _dashboard(client) -> str | None:
    try:
        link = client.dashboard_link
    except Exception:
        return None
    return link or None


#: ``where`` of a run on the caller's active Client
CURRENT_CLIENT = "current Client"


def _unguarded_script() -> str | None:
    """The path of the script whose top-level code (no ``if __name__ == "__main__":``
    guard) is running this call, else None.

    Worker processes are started by *spawning* Python, which re-runs such a script in
    every worker: each one would run the job again.  Found from the ``<module>`` frame
    of ``__main__`` on the stack and the guards of its source (parsed with ``ast``)."""
    import ast
    import inspect

    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or not path or not os.path.isfile(path):
        return None  # interactive, python -c, a notebook: spawn does not re-run anything
    frame = inspect.currentframe()
    line = None
    while frame is not None:
        if frame.f_globals is vars(main) and frame.f_code.co_name == "<module>":
            line = frame.f_lineno
            break
        frame = frame.f_back
    del frame
    if line is None:
        return None
    try:
        tree = ast.parse(open(path, encoding="utf-8").read(), path)
    except (OSError, SyntaxError, ValueError):
        return None

    def is_guard(test) -> bool:
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
            sides = [test.left, *test.comparators]
            return (any(isinstance(x, ast.Name) and x.id == "__name__" for x in sides)
                    and any(isinstance(x, ast.Constant) and x.value == "__main__" for x in sides))
        return False

    for node in ast.walk(tree):
        if isinstance(node, ast.If) and is_guard(node.test):
            if node.body[0].lineno <= line <= (node.body[-1].end_lineno or node.body[-1].lineno):
                return None
    return path


def _connect(spec: JobSpec, scheduler, security, n_workers, threads_per_worker, log=None):
    """(client, LocalCluster we started or None, where).  The order: ``scheduler`` given
    to run_job; the caller's active Client; ``DASK_SCHEDULER_ADDRESS``; the spec's
    ``cluster.scheduler``; a LocalCluster (worker processes; threads in this process
    when run_job is called from the top level of a script without a ``__main__``
    guard, which worker processes would re-run)."""
    import multiprocessing

    from .._engine import scheduler as _cluster

    if multiprocessing.parent_process() is not None and getattr(sys.modules.get("__main__"), "__name__",
                                                                    "") == "__mp_main__":
        raise RuntimeError("run_job was called while a worker process was starting: it re-ran the script that "
                           "started the cluster. Put the run_job call under `if __name__ == \"__main__\":`")
    if not scheduler:
        current = _cluster.current_client()
        if current is not None:
            return current, None, CURRENT_CLIENT
    where = scheduler or os.environ.get("DASK_SCHEDULER_ADDRESS") or spec.cluster.scheduler or None
    if where and where != "local":
        if where.startswith("tls://"):
            from distributed.security import Security

            sec = security if security is not None else Security()
            if sec.get_connection_args("client").get("ssl_context") is None:
                raise ConnectionError(
                    f"the scheduler {where} speaks TLS but no client certificate is configured: pass "
                    "--tls-ca-file, --tls-cert and --tls-key, or set Dask's distributed.comm.tls.* config "
                    "(e.g. DASK_CONFIG=certs/dask-tls.yaml from cluster/tls/make-certs.sh)")
        try:
            client, cl = _cluster.connect(where, security=security)
        except _cluster.SchedulerTimeout:
            raise  # its message says it all
        except (OSError, TimeoutError) as exc:
            raise ConnectionError(f"cannot connect to the Dask scheduler at {where}: {exc} (is it running, and "
                                  "does it speak this protocol? a TLS-only scheduler needs tls:// and "
                                  "certificates)") from exc
        return client, cl, where
    script = _unguarded_script()
    if script is not None:
        _log(log, f"daskpd: run_job runs at the top level of {os.path.basename(script)} (no "
                  "`if __name__ == \"__main__\":` guard), where worker processes would re-run the script: the "
                  "LocalCluster runs in threads of this process (put the call under the guard for worker processes)")
    client, cl = _cluster.connect(
        "local", n_workers=n_workers or spec.cluster.n_workers,
        threads_per_worker=threads_per_worker or spec.cluster.threads_per_worker,
        memory_limit=spec.cluster.memory_limit, security=security, processes=script is None)
    return client, cl, "local"


def _quiet_logs() -> None:
    """Silence distributed's shutdown chatter in this process (run on our own
    LocalCluster's workers too when a signal ends the run)."""
    import logging

    for name in ("distributed", "tornado", "asyncio"):
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)


def _close(client, cluster, quiet: bool = False) -> None:
    """Close the client, then the LocalCluster we started (never an existing cluster).

    ``quiet`` (a signal ended the run): the workers of our own LocalCluster, still busy
    with tasks, would log heartbeat failures (CommClosedError tracebacks) and the nannies
    kill warnings while everything is torn down; the one line the user should see is
    "terminated by signal ...", so their logs are silenced first.  The logging of an
    existing cluster is never touched.
    """
    if quiet:
        _quiet_logs()  # this process: the client, and our LocalCluster's scheduler and nannies
        if cluster is not None and client is not None:
            th = threading.Thread(target=lambda: client.run(_quiet_logs), daemon=True)
            th.start()
            th.join(5)  # a worker that cannot answer is not waited for
    for obj in (client, cluster):
        if obj is not None:
            with contextlib.suppress(Exception):
                obj.close(timeout=10)


def _print_summary(out, spec: JobSpec, res: RunResult, imp: pd.DataFrame, manifest: dict, final: Path,
                   pruned: list[str]) -> None:
    p = lambda s="": print(s, file=out)  # noqa: E731
    p(f"job {spec.name}  run {manifest['run_id']}  ({manifest['timings_s']['total']:.1f} s)")
    rows = manifest["rows"].get("rows_read")
    if rows is not None:
        p(f"rows read: {rows:,}   input: {manifest['input']['fingerprint']['n_files']} file(s), "
          f"fingerprint {manifest['input']['fingerprint']['sha256'][:12]}")
    p()
    for (method, feature), r in res.curves.items():
        p(f"{method:<11} {_summary(r, method)}")
    for method in imp["method"].unique() if len(imp) else []:
        t = imp[imp["method"] == method]
        p()
        p(f"{_method_title(method)}:")
        width = max(len(str(f)) for f in t["feature"])
        for _, row in t.iterrows():
            p(f"  {int(row['rank']):>3}. {str(row['feature']):<{width}}  {row['importance']:.4f}")
    p()
    p(f"wrote {final}")
    if spec.output.report:
        p(f"report: {final / 'report.html'}")
    if pruned:
        p(f"removed {len(pruned)} old run(s) (output.keep = {spec.output.keep}): {', '.join(pruned)}")
