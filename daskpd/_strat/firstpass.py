"""Pass 1 of the model-free pipeline cached per file: a rerun reads only the files it has
not seen.

Everything pass 1 computes is an exact, mergeable summary (:class:`SampleJob`: the
bottom-k rows by keyed row hash, the row count, every feature's distinct values up to a
cap; :class:`TargetRange`), so it can be computed file by file, each file's partial kept
and merged with the partials of later files:

* **a file's partial** (:func:`file_partial`): its rows whose hash is below a cutoff --
  every row below the cutoff is kept -- with that cutoff (None: every row kept), its row
  count, its distinct values per feature (None past the cap) and its target range.  The
  cutoff is ``SampleJob.bound`` with the lake's file count (about ``margin * k / F``
  rows a file), or the hash of the file's (k+1)-th row when more than k rows fall below
  it;
* **the merge** (:func:`merged_sample`): the bottom k of all the partials.  It is the
  bottom k of all rows when its k-th hash is below every partial's cutoff; a file
  whose cutoff is not is read again without a bound (:data:`FirstPass.read_again`).
  The k-th hash of a union only falls as rows are added, so a cached partial stays
  sufficient while the lake grows, however many files are appended;
* **the cache** (:class:`FirstPassCache`): one pickle per file under a directory,
  named by a hash of the pass's parameters (the columns read and their dtypes, the
  filters, the random state, the caps) and the file's fingerprint (path, size,
  modification time / ETag and footer, or its bytes' hash), written atomically behind a
  header line holding its format and the XXH3-128 checksum of the pickle, which is
  verified before the pickle is read: a damaged entry (cut, altered, of another format)
  is a miss -- its file is read again -- and is named in :attr:`FirstPassCache.stats`
  (``unusable``); entries of files no longer in the lake (or of other parameters) are
  removed after each run.  A run
  that reads only some files (an incremental job run under kept trees) keeps their
  entries alone (:func:`cache_files`), as this pass over the lake would write them.

The sample, the row count, the distinct values and the target range are those of a
pass over every file, bit for bit (the merge is order-free: the sample is ordered by
hash, the distinct values sorted).
"""
from __future__ import annotations

import hashlib
import json
import os
import pickle
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import xxhash

from .. import __version__
from .._data.encode import as_float
from .._data.gather import Group
from .._data.request import as_numbers
from .._engine import scheduler
from .._engine.distinct import distinct_capped
from .._engine.hashing import sample_hash
from .._engine.sample_pass import HASH_COLUMN, SAMPLE_MARGIN, Sample, SampleJob
from .._engine.memory import partition_bytes
from .._engine.plan import Job
from .._engine.progress import stage

__all__ = ["TargetRange", "FilePartial", "file_partial", "merged_sample", "FirstPassCache", "FirstPass",
           "cached_first_pass", "cache_files", "start_cache_files", "finish_cache_files", "PendingFiles",
           "CACHE_FORMAT", "DROPPED"]

#: the layout of a cache entry; another format is a miss
CACHE_FORMAT = 3  # 3: rows hashed by their values (hashing.sample_hash), entries checksummed
#: an entry's first line: ``daskpd-first-pass <format> xxh3_128=<hex>``, then the pickle
_HEADER = b"daskpd-first-pass"
#: an entry's distinct values of a feature, left out: the union of that feature's values
#: over the files of the cache's witness exceeds the cap, and so does the union over any
#: lake holding those files (the entry is read again when one of them is gone)
DROPPED = "dropped: the union of the files' values exceeds the cap"


class TargetRange(Job):
    """Rides the sample pass: the smallest and largest finite target value of all rows
    (None when there is none), so a constant target is known exactly, not from a sample."""

    def __init__(self, target: str):
        self.target = target

    def map(self, ctx):
        y = as_float(ctx.df[self.target])
        y = y[np.isfinite(y)]
        return (float(y.min()), float(y.max())) if len(y) else None

    def combine(self, parts, bucket=0):
        parts = [p for p in parts if p is not None]
        return (min(p[0] for p in parts), max(p[1] for p in parts)) if parts else None


@dataclass
class FilePartial:
    """Pass 1 of one file: ``sample`` (a :class:`Sample` partial: the rows below
    ``sample.limit`` with their hashes, the row count, the distinct values; ``limit``
    None when every row is kept) and ``y_range`` (:class:`TargetRange`)."""

    sample: Sample
    y_range: tuple | None


class _Ctx:
    def __init__(self, df):
        self.df = df


def file_partial(df: pd.DataFrame, job: SampleJob, target: str) -> FilePartial:
    """The partial of one file's rows ``df`` (see the module docstring); ``job`` gives k,
    the random state, the caps and the bound (its ``n_partitions``: the lake's files)."""
    n, k = len(df), job.k
    h = sample_hash(df, job.random_state)
    bound = job.bound(n)
    idx = np.flatnonzero(h < bound) if bound is not None else np.arange(n)
    cutoff = bound if bound is not None and len(idx) < n else None
    if len(idx) > k:
        part = np.argpartition(h[idx], k)
        cutoff = h[idx[part[k]]]  # every row below the (k+1)-th hash is among the k kept
        idx = np.sort(idx[part[:k]])
    rows = df.iloc[idx].reset_index(drop=True) if len(idx) < n else df.reset_index(drop=True)
    rows[HASH_COLUMN] = h[idx]
    distinct = {c: distinct_capped(df[c], cap) for c, cap in job.distinct.items()}
    return FilePartial(Sample(rows, n, distinct, cutoff), TargetRange(target).map(_Ctx(df)))


def read_partials(reader, pieces, columns, numeric, job: SampleJob, target: str) -> dict:
    """A task: ``{path: FilePartial}`` of the files ``pieces`` (``(path, row groups, size)``),
    each read alone by ``reader`` (:func:`daskpd._data.gather.file_reader`), the columns
    declared numeric read as numbers, as the request's frame reads them."""
    out = {}
    for piece in pieces:
        df = reader(Group((piece,)), columns)
        if numeric:
            df = as_numbers(df, numeric)
        out[piece[0]] = file_partial(df, job, target)
    return out


def merged_sample(job: SampleJob, partials: dict) -> tuple[Sample, list]:
    """``(merged, short)``: the merged partial of ``partials`` ({path: Sample partial})
    and the files whose cutoff is not above its k-th hash (their rows below it may be
    missing: read them again without a bound).  ``short`` is empty when the merged
    bottom k is the bottom k of every row."""
    merged = job.combine(list(partials.values()))
    limited = {p: s.limit for p, s in partials.items() if s.limit is not None}
    if not limited:
        return merged, []
    h = merged.frame[HASH_COLUMN].to_numpy()
    if len(h) < job.k:
        return merged, sorted(limited)
    kth = np.partition(h, job.k - 1)[job.k - 1]
    return merged, sorted(p for p, lim in limited.items() if lim <= kth)


def _hive_keys(request, ddf) -> dict:
    """``{column: dtype}`` of the hive keys read, as categoricals of known categories."""
    out = {}
    for c in request.dataset.hive_keys:
        t = ddf.dtypes.get(c)
        if isinstance(t, pd.CategoricalDtype) and t.categories is not None and \
                "__UNKNOWN_CATEGORIES__" not in set(map(str, t.categories)):
            out[str(c)] = t
    return out


def _recast(s: Sample, dtypes: dict) -> Sample:
    """``s`` with its rows' hive keys cast to the lake's categoricals of today (an entry
    kept before a new key value appeared holds the categories of then)."""
    cast = {c: t for c, t in dtypes.items() if s.frame[c].dtype != t}
    if not cast:
        return s
    return Sample(s.frame.astype(cast), s.n_rows, s.distinct, s.limit)


def _overflowing(s: Sample, over: set) -> Sample:
    """``s`` with the distinct values of the features in ``over`` as past the cap."""
    if not over:
        return s
    return Sample(s.frame, s.n_rows, {c: None if c in over else v for c, v in s.distinct.items()}, s.limit)


def _dropped(part: FilePartial, features: set) -> FilePartial:
    """``part`` with the distinct values of ``features`` left out (:data:`DROPPED`)."""
    if not features:
        return part
    s = part.sample
    return FilePartial(Sample(s.frame, s.n_rows, {c: DROPPED if c in features else v for c, v in s.distinct.items()},
                              s.limit), part.y_range)


def _norm(path: str) -> str:
    return str(path).split("://", 1)[-1]


class FirstPassCache:
    """Per-file pass-1 partials kept under ``directory`` (see the module docstring).

    ``stamps``: every input file's fingerprint, ``{path: (size, stamp)}`` (a job's
    ``file_stamps``: modification time / ETag, or the bytes' hash); a file without one is
    read and not kept.  None (the default): each file's size and modification time /
    ETag, listed when the pass runs.  After a run, :attr:`stats` holds ``hits``, ``misses``,
    ``read_again`` (files read again: their kept rows stop above the sample's cutoff),
    ``bytes`` (the cache on disk) and ``off`` (why the cache was not used, or None)."""

    def __init__(self, directory, stamps: dict | None = None):
        self.directory = Path(directory)
        self.stamps = None if stamps is None else {_norm(p): tuple(v) for p, v in stamps.items()}
        self.stats: dict = _new_stats()

    def name(self, token: str, path: str, stamps: dict | None = None) -> str | None:
        """The entry of file ``path`` (``stamps``: the files' fingerprints, default the
        cache's own), or None for a file without a fingerprint."""
        stamp = (self.stamps if stamps is None else stamps).get(_norm(path))
        if stamp is None:
            return None
        key = json.dumps([token, _norm(path), *map(str, stamp)])
        return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:40] + ".pkl"

    def load(self, name: str) -> FilePartial | None:
        """The entry ``name``, or None: absent, or unusable -- its checksum or format
        wrong (recorded in ``stats["unusable"]`` as ``(entry, what)``)."""
        try:
            data = (self.directory / name).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            return self._unusable(name, f"cannot be read ({exc.strerror or type(exc).__name__})")
        head, _, payload = data.partition(b"\n")
        parts = head.split(b" ")
        if len(parts) != 3 or parts[0] != _HEADER or not parts[2].startswith(b"xxh3_128="):
            return self._unusable(name, "is not a first-pass cache entry of this daskpd (no checksum header)")
        if parts[1] != str(CACHE_FORMAT).encode():
            return self._unusable(name, f"is of another format ({parts[1].decode(errors='replace')}; this daskpd "
                                        f"writes {CACHE_FORMAT})")
        if xxhash.xxh3_128_hexdigest(payload).encode() != parts[2][len(b"xxh3_128="):]:
            return self._unusable(name, "was cut or altered (its checksum differs from the one recorded)")
        try:
            got = pickle.loads(payload)
        except Exception as exc:  # noqa: BLE001 -- a whole entry of classes this daskpd no longer has
            return self._unusable(name, f"cannot be unpickled ({type(exc).__name__})")
        if not isinstance(got, dict) or not isinstance(got.get("partial"), FilePartial):
            return self._unusable(name, "does not hold a file's first pass")
        return got["partial"]

    def _unusable(self, name: str, what: str) -> None:
        self.stats.setdefault("unusable", []).append((name, what))
        return None

    def store(self, name: str, partial: FilePartial, path: str) -> None:
        """Write one entry atomically (a temporary file renamed over it), behind its
        checksum header."""
        payload = pickle.dumps({"format": CACHE_FORMAT, "path": path, "partial": partial},
                               protocol=pickle.HIGHEST_PROTOCOL)
        head = b"%s %d xxh3_128=%s\n" % (_HEADER, CACHE_FORMAT, xxhash.xxh3_128_hexdigest(payload).encode())
        self._write(name, head + payload)

    def _write(self, name: str, data: bytes) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.directory / f".{name}.tmp-{os.getpid()}"
        try:
            with open(tmp, "wb") as fh:
                fh.write(data)
            os.replace(tmp, self.directory / name)
        finally:
            if tmp.exists():
                tmp.unlink()

    @staticmethod
    def witness_name(token: str) -> str:
        return f"witness-{token[:40]}.json"

    def witness(self, token: str) -> dict:
        """``{feature: entry names}``: features whose distinct values over those files'
        entries exceed the cap (see :data:`DROPPED`); ``{}`` when there is none, or when
        the witness is unusable (its checksum or format wrong: the entries that left
        values out are then read again)."""
        name = self.witness_name(token)
        try:
            got = json.loads((self.directory / name).read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            self._unusable(name, f"cannot be read ({type(exc).__name__})")
            return {}
        features = got.get("features") if isinstance(got, dict) else None
        if not isinstance(features, dict) or got.get("format") != CACHE_FORMAT or \
                got.get("xxh3_128") != xxhash.xxh3_128_hexdigest(_canonical(features)):
            self._unusable(name, "was cut or altered, or is of another format (its checksum differs)")
            return {}
        return {str(c): set(v) for c, v in features.items()}

    def store_witness(self, token: str, features: dict) -> None:
        features = {c: sorted(v) for c, v in features.items()}
        self._write(self.witness_name(token), json.dumps(
            {"format": CACHE_FORMAT, "features": features,
             "xxh3_128": xxhash.xxh3_128_hexdigest(_canonical(features))}).encode())

    def size(self) -> int:
        """The bytes of the entries kept."""
        if not self.directory.is_dir():
            return 0
        return sum(e.stat().st_size for e in os.scandir(self.directory) if e.is_file())

    def prune(self, keep: set) -> int:
        """Remove every entry not in ``keep`` (files that left the lake or changed, other
        parameters, leftovers of killed runs); return the bytes of what stays."""
        total = 0
        if not self.directory.is_dir():
            return 0
        for entry in os.scandir(self.directory):
            if entry.is_file() and entry.name not in keep:
                try:
                    os.unlink(entry.path)
                except OSError:
                    pass
            elif entry.is_file():
                total += entry.stat().st_size
        return total


@dataclass
class FirstPass:
    """What :func:`cached_first_pass` returns: the finished sample and the target range."""

    sample: Sample
    y_range: tuple | None
    timings: dict = field(default_factory=dict)


def _token(request, ddf, job: SampleJob, target: str) -> str:
    # a categorical's categories too, but a hive key's (every value of the key in the
    # lake: a new directory changes them) are set on the kept rows (_recast)
    keys = _hive_keys(request, ddf)
    dtypes = {str(c): [str(t), list(map(str, t.categories)) if isinstance(t, pd.CategoricalDtype)
                       and t.categories is not None and str(c) not in keys else None]
              for c, t in ddf.dtypes.items()}
    key = json.dumps([CACHE_FORMAT, __version__, list(map(str, ddf.columns)), dtypes, list(request.numeric),
                      repr(request.filters), job.random_state, sorted(job.distinct.items()), target],
                     default=str)
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def _tasks(reader, todo, columns, numeric, job, target, blocksize):
    """Delayed :func:`read_partials` tasks over the files ``todo`` (footers), a few small
    files a task (up to ``blocksize`` uncompressed bytes)."""
    from dask import delayed

    groups, current, size = [], [], 0
    for f in todo:
        piece = (f.path, tuple(range(f.metadata.num_row_groups)), f.size)
        if current and size + f.data_bytes > blocksize:
            groups.append(current)
            current, size = [], 0
        current.append(piece)
        size += f.data_bytes
    if current:
        groups.append(current)
    return [delayed(read_partials, pure=True)(reader, tuple(g), columns, numeric, job, target) for g in groups]


@dataclass
class _Files:
    """What a cached pass 1 over ``request``'s lake works from: the reader, the files
    with rows, the pass's job and token, every file's entry name, and the features whose
    union of values overflows over files all still in the lake (``over``)."""

    reader: object
    files: list
    columns: list
    numeric: list
    job: SampleJob
    token: str
    names: dict
    current: set
    over: set


def _lake_files(request, ddf, cache: FirstPassCache, k: int, random_state: int, caps: dict, target: str,
                margin) -> _Files | None:
    got = request.dataset.file_reader()
    if isinstance(got, str):
        cache.stats["off"] = got
        return None
    stamps = cache.stamps if cache.stamps is not None else \
        {_norm(p): tuple(v) for p, v in request.dataset.file_stamps().items()}  # listed now, never reused
    reader, files, keep = got
    if keep is not None:
        files = [f for f in files if f.path in keep]
    files = [f for f in files if f.num_rows > 0]  # nothing to read (empty part files)
    columns = list(map(str, ddf.columns))
    numeric = [c for c in request.numeric if c in set(columns)]
    job = SampleJob(k, random_state, caps, n_partitions=max(1, len(files)), margin=margin)
    token = _token(request, ddf, job, target)
    names = {f.path: cache.name(token, f.path, stamps) for f in files}
    current = {n for n in names.values() if n is not None}
    over = {c for c, held in cache.witness(token).items() if held <= current}  # the union still overflows
    return _Files(reader, files, columns, numeric, job, token, names, current, over)


def _new_stats() -> dict:
    return {"hits": 0, "misses": 0, "read_again": [], "bytes": 0, "off": None, "unusable": []}


def _canonical(features: dict) -> bytes:
    return json.dumps(features, sort_keys=True, separators=(",", ":")).encode()


def cached_first_pass(request, ddf, cache: FirstPassCache, k: int, random_state: int, caps: dict, target: str,
                      margin: int = SAMPLE_MARGIN) -> FirstPass | None:
    """Pass 1 of ``request`` (its frame ``ddf``) from the files' cached partials and the
    partials of the files not in ``cache`` (read now, and kept); None when the input
    cannot be read file by file (``cache.stats["off"]`` says why: the caller runs the
    plain pass)."""
    cache.stats = _new_stats()
    t0 = time.perf_counter()
    lf = _lake_files(request, ddf, cache, k, random_state, caps, target, margin)
    if lf is None:
        return None
    reader, files, columns, numeric, job, names, current, over = (lf.reader, lf.files, lf.columns, lf.numeric,
                                                                  lf.job, lf.names, lf.current, lf.over)
    token = lf.token
    partials: dict = {}
    todo = []
    for f in files:
        hit = cache.load(names[f.path]) if names[f.path] is not None else None
        if hit is not None and any(isinstance(v, str) and c not in over for c, v in hit.sample.distinct.items()):
            hit = None  # values it left out are needed again (a file of the witness left or changed)
        if hit is None:
            todo.append(f)
        else:
            partials[f.path] = hit
    cache.stats["hits"], cache.stats["misses"] = len(partials), len(todo)
    fresh: dict = {}
    blocksize = partition_bytes()
    if todo:
        for part in scheduler.compute(*_tasks(reader, todo, columns, numeric, job, target, blocksize)):
            fresh.update(part)
    partials.update(fresh)
    t1 = time.perf_counter()
    keys = _hive_keys(request, ddf)
    partials = {p: FilePartial(_recast(v.sample, keys), v.y_range) for p, v in partials.items()}
    merged, short = merged_sample(job, {p: _overflowing(partials[p].sample, over) for p in partials})
    if short:  # their rows below the sample's cutoff may be missing: read them again, unbounded
        by_path = {f.path: f for f in files}
        unbounded = SampleJob(k, random_state, caps, margin=None)
        again: dict = {}
        with stage("sample again"):
            parts_again = scheduler.compute(*_tasks(reader, [by_path[p] for p in short], columns, numeric,
                                                    unbounded, target, blocksize))
        for part in parts_again:
            again.update(part)
        partials.update(again)
        fresh.update(again)
        cache.stats["read_again"] = [request.dataset.lake.display.get(p, p) for p in short]
        merged, short = merged_sample(job, {p: _overflowing(partials[p].sample, over) for p in partials})
        assert not short, short  # every cutoff left is above the k-th hash, which only fell
    sample = job.finish(merged)
    y_range = TargetRange(target).combine([p.y_range for p in partials.values()])
    t2 = time.perf_counter()
    # a feature whose values over every file exceed the cap: the entries leave its values
    # out (DROPPED), the witness names the files (only when every file has an entry)
    dropped = {c for c, v in sample.distinct.items() if v is None} if None not in names.values() else set()
    for path, part in partials.items():
        strip = {c for c, v in part.sample.distinct.items() if c in dropped and not isinstance(v, str)}
        if names.get(path) is not None and (path in fresh or strip):
            cache.store(names[path], _dropped(part, strip), path)
    keep = set(current)
    if dropped:
        cache.store_witness(token, {c: current for c in dropped})
        keep.add(cache.witness_name(token))
    cache.stats["bytes"] = cache.prune(keep)
    t3 = time.perf_counter()
    return FirstPass(Sample(sample.frame, sample.n_rows, sample.distinct), y_range,
                     {"read_s": t1 - t0, "merge_s": t2 - t1, "store_s": t3 - t2})


@dataclass
class PendingFiles:
    """Pass 1 of some files under way (:func:`start_cache_files`); :func:`finish_cache_files`
    keeps it."""

    cache: FirstPassCache
    lake: _Files | None
    tasks: list = field(default_factory=list)
    futures: list | None = None


def start_cache_files(request, ddf, cache: FirstPassCache, paths, k: int, random_state: int, caps: dict,
                      target: str, margin: int = SAMPLE_MARGIN) -> PendingFiles:
    """Start pass 1 of the lake's files ``paths`` alone, for :func:`finish_cache_files`
    to keep in ``cache`` (see :func:`cache_files`).  On a cluster the tasks are submitted
    now at a priority below the default, so they run beside later work (an incremental
    scan of the same files) on the threads it leaves free -- while the driver finishes
    the curves, say -- rather than ahead of it; on dask's threads they run in
    :func:`finish_cache_files`."""
    cache.stats = _new_stats()
    lf = _lake_files(request, ddf, cache, k, random_state, caps, target, margin)
    if lf is None:
        return PendingFiles(cache, None)
    wanted = {_norm(p) for p in paths}
    mine = [f for f in lf.files if _norm(f.path) in wanted and lf.names[f.path] is not None]
    todo = [f for f in mine if not (cache.directory / lf.names[f.path]).is_file()]
    cache.stats["hits"], cache.stats["misses"] = len(mine) - len(todo), len(todo)
    pending = PendingFiles(cache, lf, _tasks(lf.reader, todo, lf.columns, lf.numeric, lf.job, target,
                                             partition_bytes()) if todo else [])
    if pending.tasks:
        pending.futures = scheduler.submit(*pending.tasks, priority=-1)
    return pending


def finish_cache_files(pending: PendingFiles) -> bool:
    """Wait for :func:`start_cache_files`' pass 1 and keep its entries; False when the
    input cannot be read file by file (``cache.stats["off"]`` says why)."""
    cache, lf = pending.cache, pending.lake
    if lf is None:
        return False
    fresh: dict = {}
    if pending.futures is not None:
        parts = scheduler.current_client().gather(pending.futures)
        pending.futures = None
    else:
        parts = scheduler.compute(*pending.tasks) if pending.tasks else ()
    for part in parts:
        fresh.update(part)
    for path, part in fresh.items():
        strip = {c for c, v in part.sample.distinct.items() if c in lf.over and not isinstance(v, str)}
        cache.store(lf.names[path], _dropped(part, strip), path)
    cache.stats["bytes"] = cache.size()
    return True


def cache_files(request, ddf, cache: FirstPassCache, paths, k: int, random_state: int, caps: dict, target: str,
                margin: int = SAMPLE_MARGIN) -> bool:
    """Pass 1 of the lake's files ``paths`` alone, kept in ``cache``: what a run that
    reads only those files (an incremental run under kept trees) adds, so that a later
    :func:`cached_first_pass` over the lake finds them.  Nothing is merged, no other
    entry is read or removed; the entries are those :func:`cached_first_pass` would
    write for these files (same parameters and token, the features its witness shows
    past the cap left out).  False when the input cannot be read file by file
    (``cache.stats["off"]`` says why).  ``cache.stats``: ``hits`` (files of ``paths``
    with an entry already), ``misses`` (read and kept), ``bytes``.  The same as
    :func:`start_cache_files` then :func:`finish_cache_files`."""
    return finish_cache_files(start_cache_files(request, ddf, cache, paths, k, random_state, caps, target, margin))
