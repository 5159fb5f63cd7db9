"""The first-pass cache on disk: the home of :class:`FirstPassCache` (one checksummed
pickle of a :class:`~daskpd._strat.firstpass_partial.FilePartial` per file, named by the
pass's token and the file's fingerprint, written atomically; the witness of the
features whose values overflow the cap; the prune) and of its entries' format
(:data:`CACHE_FORMAT`).  :mod:`daskpd._strat.firstpass` reads and writes it.
"""
from __future__ import annotations

import hashlib
import json
import os
import pickle
from pathlib import Path

import xxhash

from .firstpass_partial import FilePartial

__all__ = ["FirstPassCache", "CACHE_FORMAT", "norm_path", "new_stats"]


#: the layout of a cache entry; another format is a miss
CACHE_FORMAT = 3  # 3: rows hashed by their values (hashing.sample_hash), entries checksummed


#: an entry's first line: ``daskpd-first-pass <format> xxh3_128=<hex>``, then the pickle
_HEADER = b"daskpd-first-pass"


def norm_path(path: str) -> str:
    return str(path).split("://", 1)[-1]


class FirstPassCache:
    """Per-file pass-1 partials kept under ``directory`` (see :mod:`daskpd._strat.firstpass`).

    ``stamps``: every input file's fingerprint, ``{path: (size, stamp)}`` (a job's
    ``file_stamps``: modification time / ETag, or the bytes' hash); a file without one is
    read and not kept.  None (the default): each file's size and modification time /
    ETag, listed when the pass runs.  After a run, :attr:`stats` holds ``hits``, ``misses``,
    ``read_again`` (files read again: their kept rows stop above the sample's cutoff),
    ``bytes`` (the cache on disk) and ``off`` (why the cache was not used, or None)."""

    def __init__(self, directory, stamps: dict | None = None):
        self.directory = Path(directory)
        self.stamps = None if stamps is None else {norm_path(p): tuple(v) for p, v in stamps.items()}
        self.stats: dict = new_stats()

    def name(self, token: str, path: str, stamps: dict | None = None) -> str | None:
        """The entry of file ``path`` (``stamps``: the files' fingerprints, default the
        cache's own), or None for a file without a fingerprint."""
        stamp = (self.stamps if stamps is None else stamps).get(norm_path(path))
        if stamp is None:
            return None
        key = json.dumps([token, norm_path(path), *map(str, stamp)])
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
        entries exceed the cap (see :data:`daskpd._strat.firstpass.DROPPED`); ``{}`` when there is none, or when
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


def new_stats() -> dict:
    return {"hits": 0, "misses": 0, "read_again": [], "bytes": 0, "off": None, "unusable": []}


def _canonical(features: dict) -> bytes:
    return json.dumps(features, sort_keys=True, separators=(",", ":")).encode()
