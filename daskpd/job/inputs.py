"""A job's inputs, checked before anything is written: the data (a path, CSV, or a
synthetic dataset cached under the output root), its columns and kinds, the input
fingerprint, and the model file.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
from pathlib import Path

from .._data.lake_footers import footer_digest, footer_stamp
from .._data.options import AUTO, ReadOptions
from .._data.read import read_csv
from .._data.request import Request, column_list, open_request
from .._data.tables import read_delta, read_iceberg
from .._errors import DataError
from ..datasets import GENERATORS, fit_model, write_parquet
from ..results.base import atomic_path
from .spec import JobSpec, SpecError
from .store import check_free_space, clean_stale, rmtree

__all__ = ["synthetic_path", "make_generator", "ensure_synthetic", "ensure_model", "job_data", "open_job_request",
           "categorical_features", "schema_stats", "damaged_pages_named", "fingerprint", "file_stamps", "input_stamps",
           "table_record", "load_model", "model_inputs",
           "prepare_model", "log_line", "job_row_id"]


def log_line(stream, msg: str) -> None:
    """One progress line on ``stream`` (None: silent)."""
    if stream is not None:
        print(msg, file=stream, flush=True)


def synthetic_path(spec: JobSpec, out_root: Path) -> Path:
    src = spec.source
    key = json.dumps([src.synthetic, src.rows, src.random_state, src.rows_per_file, sorted(src.params.items())],
                     default=str)
    h = hashlib.sha256(key.encode()).hexdigest()[:12]
    return out_root / ".cache" / "synthetic" / f"{src.synthetic}-{src.rows}-{h}"


def make_generator(spec: JobSpec):
    src = spec.source
    params = {k: (tuple(v) if isinstance(v, list) else v) for k, v in src.params.items()}
    try:
        return GENERATORS[src.synthetic](random_state=src.random_state, **params)
    except (TypeError, ValueError) as exc:
        raise SpecError(spec.spec_path or "job spec", [f"key 'source.params': {exc}"]) from None


#: rows a job's own model (``[model] fit``) is fitted on, at most
FIT_ROWS = 50_000


def ensure_model(spec: JobSpec, out_root: Path, log) -> JobSpec:
    """``spec`` with ``[model] fit`` made a model file: fitted on the synthetic source's
    first rows (at most :data:`FIT_ROWS`; :func:`daskpd.datasets.fit_model`) and saved
    with joblib under ``OUTPUT/.cache/models/`` once; the run then loads it like any model
    file (a file daskpd wrote itself, so trusted).  Other specs are returned as they are."""
    if spec.model is None or spec.model.fit is None:
        return spec
    import joblib
    import sklearn


    src = spec.source
    key = json.dumps([src.synthetic, src.random_state, sorted(src.params.items()), min(src.rows, FIT_ROWS),
                      spec.model.fit, spec.random_state, sklearn.__version__], default=str)
    path = out_root / ".cache" / "models" / f"{src.synthetic}-{spec.model.fit}-{hashlib.sha256(key.encode()).hexdigest()[:12]}.joblib"
    if not path.is_file():
        n = min(src.rows, FIT_ROWS)
        log_line(log, f"daskpd: fitting the job's model ({spec.model.fit}) on {n:,} rows of the synthetic "
                      f"{src.synthetic} dataset, saved to {path}")
        model = fit_model(make_generator(spec), n, spec.model.fit, random_state=spec.random_state)
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp:
            joblib.dump(model, tmp)
    return dataclasses.replace(spec, model=dataclasses.replace(spec.model, path=str(path), format="joblib",
                                                               trust_model=True))


def ensure_synthetic(spec: JobSpec, out_root: Path, log) -> Path:
    path = synthetic_path(spec, out_root)
    if path.parent.is_dir():
        clean_stale(path.parent)  # copies left by a generation killed with -9 (their PID is gone)
    if (path / "_SUCCESS").is_file():
        return path
    # rows x (columns as 8-byte values), uncompressed: an upper bound of what is written
    n_cols = len(make_generator(spec).frame(2).columns)
    check_free_space(path.parent, spec.source.rows * n_cols * 8, "the synthetic dataset")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}"
    log_line(log, f"daskpd: writing the synthetic {spec.source.synthetic} dataset ({spec.source.rows:,} rows) to {path}")
    try:
        write_parquet(make_generator(spec), spec.source.rows, tmp / "data", rows_per_file=spec.source.rows_per_file)
        for f in (tmp / "data").iterdir():
            os.rename(f, tmp / f.name)
        os.rmdir(tmp / "data")
        (tmp / "_SUCCESS").write_text("")
        try:
            os.rename(tmp, path)
        except OSError:  # another process made it first (or a broken leftover is in the way)
            if (path / "_SUCCESS").is_file():
                rmtree(tmp)
            else:
                rmtree(path)
                os.rename(tmp, path)
    finally:
        rmtree(tmp)
    return path


def job_data(spec: JobSpec, data_path: str | None):
    """The job's ``data`` as the library takes it: CSV with its reader options, a Delta or
    Iceberg table at its pinned version (a directory holding ``_delta_log/`` is found a
    Delta table when opened), or the path."""
    src = spec.source
    if src.is_csv:
        return read_csv(data_path, **(src.read_options or {}))
    if src.is_iceberg:
        return read_iceberg(src.iceberg, metadata=None if src.iceberg else data_path, catalog=src.catalog,
                            snapshot_id=src.snapshot_id, timestamp=src.timestamp, **src.catalog_properties)
    if src.format == "delta" or src.version is not None or src.timestamp is not None:
        return read_delta(data_path, version=src.version, timestamp=src.timestamp)
    return data_path


def input_stamps(spec: JobSpec, request: Request, data_path: str | None, mode: str) -> list[dict]:
    """Every input file (:func:`file_stamps`, with the footers' checksums the request
    read); a table's data files of the snapshot read
    (their path, size, the stamp its log records, and their rows)."""
    table = request.dataset.table
    if table is not None:
        return table.stamps()
    lake = request.dataset.lake  # its footers' checksums, in the files' fingerprints
    return file_stamps(data_path, spec.source.storage_options, mode,
                       {f.path: f.digest for f in lake.files} if lake is not None else None)


def table_record(request: Request) -> dict:
    """The manifest's record of a table source (format, location, id, version or
    snapshot), or {}."""
    table = request.dataset.table
    return {} if table is None else {"format": table.format, "table": dict(table.record)}


def open_job_request(spec: JobSpec, data) -> Request:
    """The job's request, resolved once (:func:`daskpd._data.request.open_request`): the
    input opened (every parquet footer read; damaged files, and type drift in the columns
    read, named before anything is computed or written), the features (``features``, or
    every column but the target, ``exclude`` and those left out with a reason), their
    kinds (``categorical`` declared); the trials' ``row_id`` columns are never default
    features.  ``data``: the source path, or a frame (a synthetic source's first rows)."""
    read = ReadOptions(storage_options=spec.source.storage_options or None, filters=spec.source.filters or None,
                       partition_bytes=AUTO,
                       columns=None if spec.source.columns is None else list(spec.source.columns),
                       exclude=spec.exclude, categorical=list(spec.categorical) or None,
                       numeric=list(spec.numeric) or None, row_id=job_row_id(spec), keep_suspect=spec.keep_suspect,
                       names={k: f"key {k!r}" for k in ("categorical", "numeric", "exclude", "target", "features")}
                       | {"columns": "key 'source.columns'", "row_id": "key 'model.row_id'",
                          "leave_out": "add it to the job's key 'exclude' (exclude = [{c!r}])"})
    request = open_request(data, spec.target, None if spec.features is None else list(spec.features), read=read,
                           model_free=False)
    if not request.features:
        raise DataError(f"no features: the data has only the target column {spec.target!r}"
                        + (f" and columns left out of the default features ({', '.join(request.left_out)})"
                           if request.left_out else ""))
    undeclared = [c for c in spec.categorical if c not in request.features]
    if undeclared:
        raise DataError(f"key 'categorical': {', '.join(map(repr, undeclared))} "
                        f"{'is' if len(undeclared) == 1 else 'are'} not among the features "
                        f"({', '.join(request.features)})")
    return request


def categorical_features(request: Request) -> list[str]:
    return [f for f in request.features if request.kinds[f] == "categorical"]


def schema_stats(request: Request) -> dict:
    """For the manifest: the number of parquet files and the columns read that were
    widened to one type across them (footers are cached: no second read)."""
    read = request.read_schema()
    if read is None:
        return {}
    return {"parquet_files": len(read.files), "rows_in_files": read.num_rows, "widened": read.widened}


@contextlib.contextmanager
def damaged_pages_named(spec: JobSpec, data_path: str, columns):
    """A read that fails mid-computation (a damaged data page behind an intact footer)
    becomes a DataError naming the file (found by reading the files one by one, only on
    this failure path)."""
    try:
        yield
    except OSError as exc:
        if spec.source.is_csv or type(exc).__module__.startswith("distributed") or not isinstance(data_path, str) \
                or spec.source.is_iceberg or spec.source.format == "delta":
            raise
        from .._data.lake import inspect_lake
        from .._data.lake_checks import unreadable_file

        so = spec.source.storage_options or None
        err = unreadable_file(data_path, inspect_lake(data_path, [], so), None if spec.model_based else columns, so)
        if err is None:
            raise
        raise err from None


# ------------------------------------------------------------------ fingerprint
def file_stamps(path: str, storage_options: dict | None = None, mode: str = "metadata",
                footers: dict | None = None) -> list[dict]:
    """Every input file as ``{"path": full path, "rel": path relative to the source,
    "size": bytes, "stamp": ...}``, sorted by path: the stamp is the ETag / checksum the
    filesystem reports, else the modification time and, for a parquet file, the checksum
    of its footer's bytes (``metadata``; ``footers`` maps the files' paths, as the lake
    reader lists them, to their :attr:`daskpd._data.lake_footers.FileFooter.digest` when the
    footers were read already: the others' are read now), or sha256 of the bytes
    (``content``).  Hidden files (``.name``) and ``_SUCCESS``-style markers are skipped;
    ``_metadata`` is kept."""
    import fsspec

    fs, root = fsspec.core.url_to_fs(path, **(storage_options or {}))
    if "://" in path:
        fs.invalidate_cache()  # an object store's listings cached earlier in this process may be stale
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

    out = []
    for f in (f for f in files if keep(f)):
        info = fs.info(f)
        size = int(info.get("size") or 0)
        rel = f[len(base):].lstrip("/") if f.startswith(base) else f
        if mode == "content":
            fh = hashlib.sha256()
            with fs.open(f, "rb") as fp:
                for block in iter(lambda: fp.read(1 << 20), b""):
                    fh.update(block)
            stamp = fh.hexdigest()
        else:
            tag = info.get("ETag") or info.get("etag") or info.get("checksum") or info.get("md5Hash")
            stamp = str(tag or info.get("mtime") or info.get("LastModified") or info.get("last_modified")
                        or info.get("updated") or "")
            if not tag:  # a modification time, which a rewrite may restore: the footer's bytes too
                digest = (footers or {}).get(f)
                stamp = footer_stamp(stamp, footer_digest(fs, f, size) if digest is None else digest)
        full = f if "://" not in path else fs.unstrip_protocol(f)
        out.append({"path": full, "rel": rel, "size": size, "stamp": stamp})
    return out


def fingerprint(path: str, storage_options: dict | None = None, mode: str = "metadata",
                stamps: list[dict] | None = None) -> dict:
    """Fingerprint of the input files.

    ``metadata`` (default, cheap on a lake): sha256 over each file's path (relative to
    the source), size and modification time (or ETag/checksum when the filesystem
    reports one) and, for a parquet file, the checksum of its footer's bytes (read
    anyway when the lake is opened).  ``content``: sha256 over each file's bytes instead of its
    modification time (reads every byte once; for small inputs).  Hidden files
    (``.name``) and ``_SUCCESS``-style markers are skipped; ``_metadata`` is kept.
    ``stamps``: :func:`file_stamps` already listed.
    """
    stamps = file_stamps(path, storage_options, mode) if stamps is None else stamps
    h = hashlib.sha256()
    for f in stamps:
        h.update(f"{f['rel']}\t{f['size']}\t{f['stamp']}\n".encode())
    return {"mode": mode, "sha256": h.hexdigest(), "n_files": len(stamps), "bytes": sum(f["size"] for f in stamps)}


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


def model_inputs(spec: JobSpec, model, request: Request, feats) -> tuple[list[str], list[str]]:
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
    request.dataset.check(inputs, "the model's input columns")
    mfeats = list(spec.model.features) if spec.model.features is not None else [f for f in feats if f in inputs]
    not_inputs = [f for f in mfeats if f not in inputs]
    if not_inputs:
        raise DataError(f"key 'model.features': {', '.join(map(repr, not_inputs))} "
                        f"{'is' if len(not_inputs) == 1 else 'are'} not inputs of the model ({', '.join(inputs)})")
    if not mfeats:
        raise DataError(f"no feature to explain with the model: none of the job's features ({', '.join(feats)}) "
                        f"is a model input ({', '.join(inputs)}); set model.features")
    return inputs, mfeats


def prepare_model(spec: JobSpec, request: Request, stats: dict):
    """Load and check the model before any computing: (model, inputs, features to explain)."""
    model = load_model(spec)
    stats["model_type"] = f"{type(model).__module__}.{type(model).__qualname__}"
    if not any(hasattr(model, m) for m in ("predict", "predict_proba", "decision_function")):
        raise DataError(f"model file {spec.model.path!r} holds a {type(model).__name__}, which has no predict method")
    classes = getattr(model, "classes_", None) if hasattr(model, "predict_proba") else None
    if (classes is not None and spec.model.target_class is None and spec.model.response != "predict"
            and getattr(classes, "ndim", 1) == 1 and len(classes) > 2):
        from ..model._common import show_class

        raise DataError(f"key 'model.target_class' is required: the model is a classifier of {len(classes)} classes "
                        f"([{', '.join(map(show_class, classes))}]); the job's methods explain one class's "
                        "probability")
    inputs, mfeats = model_inputs(spec, model, request, request.features)
    stats["model_inputs"] = inputs
    stats["model_features"] = mfeats
    return model, inputs, mfeats


def job_row_id(spec: JobSpec, read: bool = False) -> list[str]:
    """The columns the model-based methods' trials tell rows apart by: ``[model] row_id``
    (never default features); with ``read``, only with trials (``n_trials`` > 1: the
    columns the run reads for them).  (The model-free curves' trials resample leaves,
    not rows.)"""
    m = spec.model
    model = m.row_id if m is not None and (not read or (spec.model_based and m.n_trials > 1)) else None
    return list(dict.fromkeys(column_list(model)))
