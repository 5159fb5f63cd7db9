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
hash, the distinct values sorted).  The partials and their merge live in
:mod:`daskpd._strat.firstpass_partial`, the cache on disk in
:mod:`daskpd._strat.firstpass_cache`; this module runs the pass.
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field

import pandas as pd

from .. import __version__
from .._engine import scheduler
from .._engine.memory import partition_bytes
from .._engine.progress import stage
from .._engine.sample_pass import SAMPLE_MARGIN, Sample, SampleJob
from .firstpass_cache import CACHE_FORMAT, FirstPassCache, new_stats, norm_path
from .firstpass_partial import FilePartial, TargetRange, merged_sample, read_partials

__all__ = ["FirstPass", "cached_first_pass", "cache_files", "start_cache_files", "finish_cache_files",
           "PendingFiles", "DROPPED"]

#: an entry's distinct values of a feature, left out: the union of that feature's values
#: over the files of the cache's witness exceeds the cap, and so does the union over any
#: lake holding those files (the entry is read again when one of them is gone)
DROPPED = "dropped: the union of the files' values exceeds the cap"


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
        {norm_path(p): tuple(v) for p, v in request.dataset.file_stamps().items()}  # listed now, never reused
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


def cached_first_pass(request, ddf, cache: FirstPassCache, k: int, random_state: int, caps: dict, target: str,
                      margin: int = SAMPLE_MARGIN) -> FirstPass | None:
    """Pass 1 of ``request`` (its frame ``ddf``) from the files' cached partials and the
    partials of the files not in ``cache`` (read now, and kept); None when the input
    cannot be read file by file (``cache.stats["off"]`` says why: the caller runs the
    plain pass)."""
    cache.stats = new_stats()
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
    cache.stats = new_stats()
    lf = _lake_files(request, ddf, cache, k, random_state, caps, target, margin)
    if lf is None:
        return PendingFiles(cache, None)
    wanted = {norm_path(p) for p in paths}
    mine = [f for f in lf.files if norm_path(f.path) in wanted and lf.names[f.path] is not None]
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
