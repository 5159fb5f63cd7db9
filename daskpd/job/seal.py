"""The seal of a kept state: every file's size and checksum, recorded with it and verified
before the state is used (docs/jobs.md, "The kept state cannot lie").

A run's ``state/`` (the files covered, the stratification, the sums, the model-based
partials) is written, then sealed: ``state/seal.json`` lists every file under ``state/``
with its size and the XXH3-128 checksum of its bytes (:data:`DIGEST`, by the xxhash
library), and the state's format (:data:`VERSION`, the scan state's
:data:`daskpd._strat.stratification.FORMAT_VERSION`, daskpd's minor version).  The
next incremental run verifies the seal before it reads anything of the state
(:func:`verify`): a file missing, shorter or longer than recorded, or whose bytes hash
to another checksum, or a seal missing, unreadable or of another format, is a
:class:`StateDamaged` naming the file and what is wrong -- the run is then a full run
that says so in one line, and a damaged state is never read.

Checking reads every byte once, several files at a time (xxhash releases the GIL).  XXH3
hashes memory several times faster than sha256, so a gigabyte of state takes a fraction
of a second; it detects accidental damage (a cut, a flipped bit, a foreign write), not a
forger who rewrites the seal too.  A new state hard-links most of its files from the
state it extends (:meth:`daskpd.ScanState.save`), and their checksums, verified moments
before, are reused by inode (:func:`seal`'s ``known``) instead of being read again.
"""
from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import xxhash

from .. import __version__
from .._errors import DataError
from .._strat.stratification import FORMAT_VERSION
from ..results.base import atomic_path, dump_json

__all__ = ["SEAL_NAME", "VERSION", "DIGEST", "StateDamaged", "StateOfAnotherFormat", "seal", "verify", "file_digest", "identity"]

#: the seal's file, inside ``state/``
SEAL_NAME = "seal.json"
_MAGIC = "daskpd-state-seal"
#: the layout of a job's kept state (raised on any incompatible change of its files)
VERSION = 1
#: the checksum of every file
DIGEST = "xxh3_128"
#: files hashed at once
THREADS = 4
_BLOCK = 4 << 20


class StateDamaged(DataError):
    """A kept state that must not be used: ``path`` (the file, relative to the job
    directory) and ``what`` is wrong with it (one line)."""

    def __init__(self, path: str, what: str):
        self.path, self.what = path, what
        super().__init__(f"{path} {what}")


class StateOfAnotherFormat(StateDamaged):
    """A kept state written by a daskpd whose state format differs from this one's:
    sound, but not readable here."""


def file_digest(path) -> str:
    """The :data:`DIGEST` of a file's bytes (hex)."""
    h = xxhash.xxh3_128()
    buf = bytearray(_BLOCK)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as fh:
        while True:
            n = fh.readinto(buf)
            if not n:
                return h.hexdigest()
            h.update(view[:n])


def identity(st: os.stat_result) -> tuple:
    """What tells a file's bytes apart without reading them, while nobody writes it:
    device, inode, size and modification time (a hard link shares all four)."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _format() -> dict:
    return {"format": _MAGIC, "version": VERSION, "scan_state_format": FORMAT_VERSION,
            "daskpd": ".".join(__version__.split(".")[:2]), "digest": DIGEST}


def _files(sdir: Path) -> list[str]:
    out = []
    for d, _, fs in os.walk(sdir):
        for f in fs:
            rel = (Path(d) / f).relative_to(sdir).as_posix()
            if rel != SEAL_NAME:
                out.append(rel)
    return sorted(out)


def _hash_all(paths: list[Path]) -> list[str]:
    if len(paths) <= 1:
        return [file_digest(p) for p in paths]
    # the largest first: the threads end together
    order = sorted(range(len(paths)), key=lambda i: -os.path.getsize(paths[i]))
    with ThreadPoolExecutor(min(THREADS, len(paths)), thread_name_prefix="daskpd-seal") as pool:
        got = dict(zip(order, pool.map(lambda i: file_digest(paths[i]), order)))
    return [got[i] for i in range(len(paths))]


def seal(sdir, known: dict | None = None) -> dict:
    """Write ``sdir/seal.json`` (atomically) over every file under ``sdir``; return it.
    ``known``: ``{identity: digest}`` of files verified just before (:func:`verify`'s
    result): a file of the same identity (a hard link of it) is not read again."""
    sdir = Path(sdir)
    known = known or {}
    rels = _files(sdir)
    stats = [os.stat(sdir / r) for r in rels]
    todo = [i for i, st in enumerate(stats) if identity(st) not in known]
    hashed = dict(zip(todo, _hash_all([sdir / rels[i] for i in todo])))
    files = {r: {"bytes": st.st_size, DIGEST: hashed[i] if i in hashed else known[identity(st)]}
             for i, (r, st) in enumerate(zip(rels, stats))}
    record = {**_format(), "files": files}
    with atomic_path(sdir / SEAL_NAME) as tmp:
        Path(tmp).write_text(dump_json(record))
    return record


def verify(sdir, name: str) -> dict:
    """Check every file of the state ``sdir`` against its seal; return ``{identity:
    digest}`` of its files (for :func:`seal`), or raise :class:`StateDamaged` naming the
    first file that is wrong (as ``name/<file>``: ``name`` says where ``sdir`` is)."""
    sdir = Path(sdir)

    def damaged(rel: str, what: str):
        return StateDamaged(f"{name}/{rel}", what)

    try:
        record = json.loads((sdir / SEAL_NAME).read_bytes())
    except FileNotFoundError:
        raise damaged(SEAL_NAME, "is missing (a state written without a seal: by an earlier daskpd, or cut short)"
                      ) from None
    except (OSError, ValueError) as exc:
        raise damaged(SEAL_NAME, f"cannot be read ({type(exc).__name__}: not the JSON a seal is)") from None
    want = _format()
    got = {k: record.get(k) for k in want} if isinstance(record, dict) else {}
    if got != want:
        if got.get("format") != _MAGIC:
            raise damaged(SEAL_NAME, "is not a daskpd state seal")
        raise StateOfAnotherFormat(f"{name}/{SEAL_NAME}", f"records a state of another format (state format {got.get('version')}, scan "
                                 f"state format {got.get('scan_state_format')}, daskpd {got.get('daskpd')}, checksum "
                                 f"{got.get('digest')}; this daskpd reads state format {VERSION}, scan state format "
                                 f"{want['scan_state_format']}, daskpd {want['daskpd']}, checksum {DIGEST})")
    files = record.get("files")
    if not isinstance(files, dict) or not all(isinstance(v, dict) and isinstance(v.get("bytes"), int)
                                              and isinstance(v.get(DIGEST), str) for v in files.values()):
        raise damaged(SEAL_NAME, "lists no files (its 'files' table is missing or malformed)")
    stats = {}
    for rel in sorted(files):
        try:
            st = os.stat(sdir / rel)
        except FileNotFoundError:
            raise damaged(rel, "is missing") from None
        except OSError as exc:
            raise damaged(rel, f"cannot be read ({exc.strerror or type(exc).__name__})") from None
        size = files[rel]["bytes"]
        if st.st_size != size:
            raise damaged(rel, f"is {'truncated' if st.st_size < size else 'longer than recorded'} "
                               f"({st.st_size:,} bytes; {size:,} recorded)")
        stats[rel] = st
    extra = sorted(set(_files(sdir)) - set(files))
    if extra:
        raise damaged(extra[0], "is not in the seal (added after the state was written)")
    rels = sorted(files)
    try:
        digests = _hash_all([sdir / r for r in rels])
    except OSError as exc:
        raise damaged(Path(exc.filename or "").name or "?", f"cannot be read ({exc.strerror})") from None
    for rel, d in zip(rels, digests):
        if d != files[rel][DIGEST]:
            raise damaged(rel, f"was altered (its {DIGEST} checksum differs from the one recorded)")
    return {identity(stats[r]): d for r, d in zip(rels, digests)}
