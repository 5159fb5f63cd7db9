"""How often rows repeat in the columns the trial weights are drawn from.

A row's bootstrap weights are drawn from the content hash of its weight columns
(:mod:`daskpd._engine.hashing`), so rows identical in those columns draw the same weights
in every trial: the trials resample *distinct* rows, each with its multiplicity, and a
band's standard deviation is about ``sqrt(repeats)`` times a row bootstrap's, where

    repeats = sum_c m_c^2 / sum_c m_c

(``m_c`` the number of rows with content ``c``) is the mean, over the rows, of how many
rows share the row's values (itself included): 1 when no two rows are identical.

:class:`RepeatsJob` measures it in the pass that draws the trials, at no extra read.
Its partial is a *bottom-k sketch*: the ``k`` smallest distinct mixed content hashes with
the number of rows of each.  Any content among the ``k`` smallest of all the data is
among the ``k`` smallest of every partition that holds it, so merged sketches carry the
exact global count of each of their contents, whatever the partitioning.  Those
contents are a uniform sample of the distinct contents, and ``repeats`` is estimated on
them (exact when the data has at most ``k`` distinct contents).
"""
from __future__ import annotations

import warnings
from typing import Sequence

import numpy as np
from dask.sizeof import sizeof

from .._errors import RepeatedRowsWarning
from .hashing import content_hash, keyed_hash
from .plan import Job

__all__ = ["RepeatSketch", "RepeatsJob", "content_of", "SKETCH_CONTENTS", "NOTABLE_REPEATS", "merge_sketches",
           "stamp_repeats", "warn_repeats", "repeats_text"]

#: distinct contents a sketch keeps (64 KiB a partial)
SKETCH_CONTENTS = 4096

#: ``row_repeats`` from which results say how much wider than a row bootstrap's the
#: trials' spread is (sqrt(1.5) = 1.22x): a :class:`RepeatedRowsWarning` and a line of
#: ``summary()``
NOTABLE_REPEATS = 1.5

_SALT = 0xD0B1E  # the sketch's own key: its estimate does not depend on random_state


def content_of(ctx, columns: Sequence[str]) -> np.ndarray:
    """The partition's :func:`~daskpd._engine.hashing.content_hash` of ``columns``,
    computed once per partition for every job of the pass that asks for it."""
    columns = tuple(columns)
    return ctx.cached(("content-hash", columns), lambda: content_hash(ctx.df[list(columns)]))


class RepeatSketch:
    """The ``k`` smallest distinct mixed hashes (``keys``, ascending, uint64) of some rows'
    contents, with the number of rows of each (``counts``)."""

    def __init__(self, keys: np.ndarray, counts: np.ndarray, k: int = SKETCH_CONTENTS):
        self.keys = keys
        self.counts = counts
        self.k = int(k)

    @classmethod
    def of_content(cls, content: np.ndarray, k: int = SKETCH_CONTENTS) -> "RepeatSketch":
        """The sketch of rows with content hashes ``content``."""
        m = keyed_hash(np.asarray(content, dtype=np.uint64), 0, _SALT)
        n = len(m)
        take = min(n, k)
        while True:
            if take >= n:
                keys, counts = np.unique(m, return_counts=True)
                break
            # every row at or below the take-th smallest value: those values' full counts
            keys, counts = np.unique(m[m <= np.partition(m, take - 1)[take - 1]], return_counts=True)
            if len(keys) >= k:
                break
            take *= 4  # fewer than k distinct values among them: rows repeat, look further
        return cls(keys[:k], counts[:k].astype(np.int64), k)

    @classmethod
    def merge(cls, parts: list) -> "RepeatSketch":
        k = min(p.k for p in parts)
        keys = np.concatenate([p.keys for p in parts])
        counts = np.concatenate([p.counts for p in parts])
        u, inv = np.unique(keys, return_inverse=True)
        summed = np.bincount(inv, weights=counts, minlength=len(u))[:k]
        return cls(u[:k], np.rint(summed).astype(np.int64), k)

    combine = merge  # partials of the model family's passes combine by ``type(p).combine``

    def repeats(self) -> float | None:
        """The estimate of ``sum m^2 / sum m`` (exact when fewer than ``k`` contents);
        None without rows."""
        m = self.counts.astype("float64")
        total = m.sum()
        return float(np.dot(m, m) / total) if total > 0 else None


# dask's memory manager counts it by its arrays
sizeof.register(RepeatSketch)(lambda o: int(o.keys.nbytes + o.counts.nbytes))


class RepeatsJob(Job):
    """Rides a pass that draws trial weights from the content hash of ``columns``: its
    result is the :class:`RepeatSketch` of every row of the pass (small: ``k`` contents),
    which merges with the sketch of other rows."""

    def __init__(self, columns: Sequence[str], k: int = SKETCH_CONTENTS):
        self.columns = list(columns)
        self.k = int(k)

    def map(self, ctx):
        return RepeatSketch.of_content(content_of(ctx, self.columns), self.k)

    def combine(self, parts, bucket=0):
        return RepeatSketch.merge(list(parts))

    def finish(self, merged):
        return merged


def merge_sketches(a: "RepeatSketch | None", b: "RepeatSketch | None") -> "RepeatSketch | None":
    """The sketch of both sketches' rows; None when either is unknown (a state kept
    before sketches were kept)."""
    return None if a is None or b is None else RepeatSketch.merge([a, b])


def stamp_repeats(results: dict, n_trials: int, sketch: "RepeatSketch | None", columns=()) -> dict:
    """With trials, record ``row_repeats`` (the sketch's estimate, None when unknown) in
    every result's ``params`` (the band's summary reads it), and :func:`warn_repeats`."""
    if n_trials:
        value = sketch.repeats() if sketch is not None else None
        for res in results.values():
            res.params["row_repeats"] = value
        warn_repeats(value, columns)
    return results


def repeats_text(repeats: float | None, columns: Sequence[str] = ()) -> str:
    """What a warning and a summary say of ``repeats`` (``params["row_repeats"]``): empty
    below :data:`NOTABLE_REPEATS` or when unknown; ``columns``: the hashed columns."""
    if repeats is None or not repeats >= NOTABLE_REPEATS:
        return ""
    cols = f" ({', '.join(map(str, columns))})" if columns else ""
    return (f"rows repeat {repeats:.3g} times on average in the columns the trial weights are drawn from{cols}: "
            f"identical rows draw the same weights, so the trials' spread is about {np.sqrt(repeats):.2g}x a row "
            "bootstrap's (conservative; row_id= naming a column that tells the rows apart, an id or a timestamp, "
            "draws them their own weights)")


def warn_repeats(repeats: float | None, columns: Sequence[str] = ()) -> None:
    """A :class:`RepeatedRowsWarning` from :data:`NOTABLE_REPEATS` on (:func:`repeats_text`)."""
    text = repeats_text(repeats, columns)
    if text:
        warnings.warn(RepeatedRowsWarning(text), stacklevel=2)
