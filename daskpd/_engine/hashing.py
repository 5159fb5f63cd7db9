"""Seeded row hashes: partition-invariant samples, folds and bootstrap weights.

Every row gets a pseudo-random 64-bit number that depends only on its content and the
seed (:func:`row_hash`).  The tree sample is the ``k`` rows with the smallest numbers (a
*bottom-k* sample: uniform, without replacement, the same however the data is
partitioned; the pass that draws it is :mod:`daskpd._engine.sample_pass`), and bootstrap
weights are drawn from the same hash keyed per trial, so they too depend on the row, not
on where it sits.
"""
from __future__ import annotations

import math
import zlib
from typing import Sequence

import numba
import numpy as np
import pandas as pd


__all__ = ["row_hash", "content_hash", "keyed_hash", "bootstrap_weights", "bootstrap_counts", "TrialDraw",
           "trial_draw", "leaf_weights", "name_salt", "fold_of", "unit_of", "fold_hash", "sample_hash", "value_hash",
           "hash_order"]


#: P(K <= k) for K ~ Poisson(1), k = 0..24 (scipy.stats is not imported for this: ~0.5 s)
_POISSON1_CDF = np.minimum(np.cumsum([np.exp(-1.0) / math.factorial(k) for k in range(25)]), 1.0)


def _mix64(z: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a bijective scramble of uint64 values."""
    z = z.astype("uint64", copy=True)
    with np.errstate(over="ignore"):
        z ^= z >> np.uint64(30)
        z *= np.uint64(0xBF58476D1CE4E5B9)
        z ^= z >> np.uint64(27)
        z *= np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    return z


def keyed_hash(h: np.ndarray, random_state: int, salt: int) -> np.ndarray:
    """``mix64(h + mix64(seed, salt))`` for content hashes ``h`` (uint64)."""
    seed = _mix64(np.array([(int(random_state) & 0xFFFFFFFF) << 20 | (int(salt) & 0xFFFFF)], dtype="uint64"))[0]
    with np.errstate(over="ignore"):
        return _mix64(h + seed)


def hash_order(columns) -> list:
    """The columns of the sample's hash, in a fixed order (by name; the hash itself does
    not depend on the order: :func:`sample_hash`)."""
    return sorted(columns, key=str)


_U64 = np.uint64
_EXP64, _MAN64, _NAN64, _NEG64 = _U64(0x7FF0000000000000), _U64(0x000FFFFFFFFFFFFF), _U64(0x7FF8000000000000), \
    _U64(0x8000000000000000)
_EXP32, _MAN32, _NAN32, _NEG32 = _U64(0x7F800000), _U64(0x007FFFFF), _U64(0x7FC00000), _U64(0x80000000)


@numba.njit(cache=True, nogil=True, inline="always")
def _mixed(v, float_width):
    """splitmix64's finaliser of one 64-bit pattern ``v`` (``float_width`` 64 or 32: a
    float's bits, whose NaNs and -0.0 are made one first, as pandas does; 0: as is)."""
    if float_width == 64:
        if (v & _EXP64) == _EXP64 and (v & _MAN64) != _U64(0):
            v = _NAN64
        elif v == _NEG64:
            v = _U64(0)
    elif float_width == 32:
        if (v & _EXP32) == _EXP32 and (v & _MAN32) != _U64(0):
            v = _NAN32
        elif v == _NEG32:
            v = _U64(0)
    v ^= v >> _U64(30)
    v *= _U64(0xBF58476D1CE4E5B9)
    v ^= v >> _U64(27)
    v *= _U64(0x94D049BB133111EB)
    v ^= v >> _U64(31)
    return v


@numba.njit(cache=True, nogil=True)
def _add_mixed(out, bits, float_width):
    """``out += mix64(v)`` for every row's 64-bit pattern ``v`` (:func:`_mixed`)."""
    for i in range(bits.shape[0]):
        out[i] += _mixed(_U64(bits[i]), float_width)


def value_hash(df: pd.DataFrame) -> np.ndarray:
    """A uint64 per row of its *values*, whatever their storage and the columns' order:
    every number (integer of any width, float, boolean, nullable or not) hashed as the
    float64 of its value, dates as their int64 nanoseconds, anything else by pandas'
    hash of its values (strings alike whether object, arrow or categorical), and the
    columns' hashes added up.  A lake written by another engine (other integer widths,
    dictionary-encoded strings), or read with its columns in another order, gives its
    rows the same hashes."""
    out = np.zeros(len(df), dtype=np.uint64)
    for i in range(df.shape[1]):
        col = df.iloc[:, i]
        dt = col.dtype
        if pd.api.types.is_bool_dtype(dt) or (pd.api.types.is_numeric_dtype(dt)
                                               and not isinstance(dt, pd.CategoricalDtype)):
            bits = np.ascontiguousarray(col.to_numpy(dtype="float64", na_value=np.nan)).view(np.uint64)
            _add_mixed(out, bits, 64)
        elif getattr(col.array, "asi8", None) is not None:  # dates and durations: their nanoseconds
            _add_mixed(out, np.ascontiguousarray(col.array.asi8).view(np.uint64), 0)
        else:
            vals = col.to_numpy() if isinstance(dt, np.dtype) else col.array
            _add_mixed(out, np.ascontiguousarray(pd.util.hash_array(vals), dtype=np.uint64), 0)
    return out


#: the salt of the honest folds' hash (:func:`fold_hash`)
FOLD_SALT = 0x3F01D


def fold_hash(df: pd.DataFrame, random_state: int) -> np.ndarray:
    """The hash a row's cross-fitting fold and part of a leaf are cut by (:func:`fold_of`,
    :func:`unit_of`): the seeded :func:`value_hash` of the row, and for rows alike in
    every column, their occurrence in the frame (0, 1, 2, ...) mixed in -- copies of a
    record are separate draws, and fall in folds and parts as separate rows do (grouped
    by their content, a cell of a leaf would hold the copies of one target value and not
    the other's).  The same whatever the partitioning for data without copies of a
    record; with copies, the same for the same partitioning."""
    h = value_hash(df)
    if len(h) > 1:
        rank = pd.Series(h).groupby(h, sort=False).cumcount().to_numpy(dtype=np.uint64)
        if rank.any():
            h = h + _mix64(rank * np.uint64(0x9E3779B97F4A7C15))
    return keyed_hash(h, random_state, FOLD_SALT)


def sample_hash(df: pd.DataFrame, random_state: int) -> np.ndarray:
    """The row hash the tree sample is drawn by (bottom-k): the seeded
    :func:`value_hash` of the rows (the same for the same values, however they are
    stored or their columns ordered).  The honest folds use :func:`fold_hash`."""
    return keyed_hash(value_hash(df), random_state, 0)


def row_hash(df: pd.DataFrame, random_state: int, salt: int = 0) -> np.ndarray:
    """A pseudo-random uint64 per row that depends only on the row's content and the seed.

    pandas' row hash ignores its ``hash_key`` for numeric columns, so the seed is mixed
    in here: ``mix64(content_hash(row) + mix64(seed, salt))``.
    """
    return keyed_hash(content_hash(df), random_state, salt)




@numba.njit(cache=True, nogil=True)
def _combine_bits(out, bits, mult, float_width):
    """``out = (out ^ h) * mult`` with ``h`` pandas' hash of a numeric column given as its
    unsigned bit patterns (``float_width`` 64 or 32: a float column; 0: integers and
    booleans; :func:`_mixed`)."""
    for i in range(bits.shape[0]):
        out[i] = (out[i] ^ _mixed(_U64(bits[i]), float_width)) * mult


@numba.njit(cache=True, nogil=True)
def _combine_hashed(out, h, mult):
    for i in range(h.shape[0]):
        out[i] = (out[i] ^ h[i]) * mult


def content_hash(df: pd.DataFrame) -> np.ndarray:
    """``pd.util.hash_pandas_object(df, index=False)`` as a uint64 array, the same values,
    with numeric numpy columns hashed and combined in one compiled pass each (pandas makes
    a handful of array passes and temporaries per column: the row hash was ~9 % of the
    workers' CPU in a lake run).  Other columns (text, categories, extension and datetime
    arrays) are hashed by pandas' own ``hash_array``; the columns are combined as pandas
    combines them (CPython's tuple hash)."""
    n, k = len(df), df.shape[1]
    if k == 0:
        return np.full(n, 0x345678 + 97531, dtype=np.uint64)
    out = np.full(n, 0x345678, dtype=np.uint64)
    mult = 1000003
    for i in range(k):
        col = df.iloc[:, i]
        dt = col.dtype
        if isinstance(dt, np.dtype) and dt.kind in ("b", "i", "u", "f") and dt.itemsize <= 8 and \
                not (dt.kind == "f" and dt.itemsize < 4):
            bits = np.ascontiguousarray(col.to_numpy()).view(f"u{dt.itemsize}")
            _combine_bits(out, bits, _U64(mult), 8 * dt.itemsize if dt.kind == "f" else 0)
        else:
            vals = col.to_numpy() if isinstance(dt, np.dtype) else col.array  # what pandas' row hash hashes
            _combine_hashed(out, np.ascontiguousarray(pd.util.hash_array(vals), dtype=np.uint64), _U64(mult))
        mult = (mult + 82520 + 2 * (k - i)) & 0xFFFFFFFFFFFFFFFF
    out += _U64(97531)
    return out


def bootstrap_weights(df: pd.DataFrame, columns: Sequence[str], n_trials: int, random_state: int,
                      fraction: float | None = None) -> np.ndarray:
    """Poisson(1) bootstrap weights, shape (len(df), n_trials).

    With ``fraction``, 0/1 subsampling weights instead: a row is in trial t's subsample
    with probability ``fraction`` (same keyed hash, so also partition-invariant).
    """
    return bootstrap_counts(df, columns, n_trials, random_state, fraction).astype("float64")


def bootstrap_counts(df: pd.DataFrame, columns: Sequence[str], n_trials: int, random_state: int,
                     fraction: float | None = None) -> np.ndarray:
    """:func:`bootstrap_weights` as uint8 counts (every draw is a whole number below 25),
    drawn for all trials in one compiled pass over the rows' content hashes."""
    return trial_draw(n_trials, random_state, fraction).counts(content_hash(df[list(columns)]))


class TrialDraw:
    """The trial weights as a function of hashes (a row's :func:`content_hash` of the
    weight columns, or a leaf's :func:`keyed_hash`): ``counts(h)`` gives what
    :func:`bootstrap_counts` gives for the rows of those hashes.  The draw reads the
    hash's top 63 bits (its lowest bit is cleared first)."""

    def __init__(self, seeds: np.ndarray, fraction: float):
        self.seeds = np.ascontiguousarray(seeds, dtype=np.uint64)
        self.fraction = float(fraction)

    @property
    def n_trials(self) -> int:
        return int(self.seeds.shape[0])

    def counts(self, content: np.ndarray) -> np.ndarray:
        """uint8 weights, shape (len(content), n_trials)."""
        return _draw_counts(np.ascontiguousarray(content, dtype=np.uint64), self.seeds, _POISSON1_CDF, self.fraction)

    def __eq__(self, other) -> bool:
        return (isinstance(other, TrialDraw) and self.fraction == other.fraction
                and np.array_equal(self.seeds, other.seeds))

    def __hash__(self) -> int:
        return hash((self.fraction, self.seeds.tobytes()))


def trial_draw(n_trials: int, random_state: int, fraction: float | None = None) -> TrialDraw:
    """The :class:`TrialDraw` of ``n_trials`` trials seeded by ``random_state`` (Poisson(1)
    counts, or with ``fraction`` 0/1 subsample weights)."""
    seeds = np.array([_mix64(np.array([(int(random_state) & 0xFFFFFFFF) << 20 | ((t + 1) & 0xFFFFF)],
                                      dtype="uint64"))[0] for t in range(n_trials)], dtype=np.uint64)
    return TrialDraw(seeds, -1.0 if fraction is None else float(fraction))


def fold_of(h: np.ndarray) -> np.ndarray:
    """The cross-fitting fold (0 or 1) of rows with hashes ``h`` (:func:`fold_hash`): its
    lowest bit."""
    return (np.asarray(h, dtype=np.uint64) & np.uint64(1)).astype(np.uint8)


def unit_of(h: np.ndarray, split: int) -> np.ndarray:
    """Which of ``split`` parts of its leaf a row falls in (the hash's next bits)."""
    return ((np.asarray(h, dtype=np.uint64) >> np.uint64(1)) % np.uint64(split)).astype(np.int64)


def name_salt(name: str) -> int:
    """A 20-bit salt from a name (stable across processes and runs: not Python's hash)."""
    return zlib.crc32(str(name).encode("utf-8")) & 0xFFFFF


def leaf_weights(leaves: np.ndarray, n_trials: int, random_state: int, salt: int) -> np.ndarray:
    """The leaf bootstrap of the model-free curves: Poisson(1) counts, shape
    ``(len(leaves), n_trials)`` uint8, for leaf numbers ``leaves`` -- a pure function of
    the leaf, the seed and ``salt`` (the feature's :func:`name_salt`), so every bucket,
    scheduler and incremental night draws the same weight for the same leaf."""
    content = keyed_hash(np.asarray(leaves, dtype=np.uint64), random_state, salt)
    return trial_draw(n_trials, random_state).counts(content)


@numba.njit(cache=True, nogil=True, inline="always")
def _top53(z):
    """The top 53 bits of splitmix64's finaliser of ``z`` (:func:`_mix64`)."""
    z ^= z >> np.uint64(30)
    z *= np.uint64(0xBF58476D1CE4E5B9)
    z ^= z >> np.uint64(27)
    z *= np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    return z >> np.uint64(11)


@numba.njit(cache=True, nogil=True)
def _draw_counts(content, seeds, cdf, fraction):
    """Per row and trial t: ``u`` from ``mix64(c + seeds[t])`` (the keyed hash of salt
    t + 1; ``c`` the row's content hash with its lowest bit cleared), then the Poisson(1)
    count ``#{k: cdf[k] <= u}`` (numpy's searchsorted, side right), or ``u < fraction``
    when ``fraction`` >= 0.  ``u`` is ``m / 2^53``
    (``m`` the hash's top 53 bits), so the comparisons are made on ``m`` against the
    thresholds scaled to integers (``q <= u`` iff ``ceil(q 2^53) <= m``): the same
    counts, without a float conversion per draw."""
    n, T = content.shape[0], seeds.shape[0]
    out = np.empty((n, T), np.uint8)
    low = ~np.uint64(1)  # the hash's lowest bit is not read (see TrialDraw)
    if fraction >= 0.0:
        F = np.uint64(math.ceil(fraction * 9007199254740992.0))
        for i in range(n):
            c = content[i] & low
            for t in range(T):
                out[i, t] = np.uint8(_top53(c + seeds[t]) < F)
        return out
    K = cdf.shape[0]
    Q = np.empty(K, np.uint64)
    for k in range(K):
        Q[k] = np.uint64(math.ceil(cdf[k] * 9007199254740992.0))
    q0, q1, q2, q3, q4, q5 = Q[0], Q[1], Q[2], Q[3], Q[4], Q[5]
    for i in range(n):
        c = content[i] & low
        top = np.uint8(0)
        for t in range(T):  # the first six steps counted without branches (cdf rises: the same count)
            m = _top53(c + seeds[t])
            k = np.uint8(((q0 <= m) + (q1 <= m) + (q2 <= m)) + ((q3 <= m) + (q4 <= m) + (q5 <= m)))
            out[i, t] = k
            top = max(top, k)
        if top == 6:  # P(K >= 6) = 0.0006 a draw: the row's sixes counted on
            for t in range(T):
                if out[i, t] == 6:
                    m = _top53(c + seeds[t])
                    k = 6
                    while k < K and Q[k] <= m:
                        k += 1
                    out[i, t] = k
    return out
