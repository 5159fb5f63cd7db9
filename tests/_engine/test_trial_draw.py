"""The trials' weights: what the compiled draw gives equals its definition written with
numpy (splitmix64 of the row's content hash, its lowest bit cleared, plus the trial's
seed, the top 53 bits as a uniform u, the Poisson(1) count searchsorted(cdf, u,
side="right") or u < fraction); and the words that carry them packed give them back."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from daskpd._engine.hashing import bootstrap_counts, content_hash, trial_draw


def _reference(df, columns, n_trials, random_state, fraction):
    h = content_hash(df[columns]).astype(np.uint64) & ~np.uint64(1)  # the draw reads the top 63 bits
    seeds = trial_draw(n_trials, random_state, fraction).seeds
    cdf = np.minimum(np.cumsum([np.exp(-1.0) / math.factorial(k) for k in range(25)]), 1.0)
    out = np.empty((len(df), n_trials), np.uint8)
    with np.errstate(over="ignore"):
        for t in range(n_trials):
            z = h + seeds[t]
            z ^= z >> np.uint64(30)
            z *= np.uint64(0xBF58476D1CE4E5B9)
            z ^= z >> np.uint64(27)
            z *= np.uint64(0x94D049BB133111EB)
            z ^= z >> np.uint64(31)
            u = (z >> np.uint64(11)).astype(np.float64) / 2.0 ** 53
            out[:, t] = (u < fraction) if fraction is not None else np.searchsorted(cdf, u, side="right")
    return out


@pytest.mark.parametrize("fraction", [None, 0.5, 0.632])
def test_counts_equal_their_definition(fraction):
    rng = np.random.default_rng(5)
    df = pd.DataFrame({"a": rng.normal(size=50_000), "b": rng.integers(0, 50, 50_000)})
    got = bootstrap_counts(df, ["a", "b"], 7, 11, fraction)
    np.testing.assert_array_equal(got, _reference(df, ["a", "b"], 7, 11, fraction))
    if fraction is None:  # a Poisson(1) draw: mean and variance 1, a count of 6 or more now and then
        assert abs(got.mean() - 1.0) < 0.01 and abs(got.var() - 1.0) < 0.02 and (got >= 6).any()
    else:
        assert abs(got.mean() - fraction) < 0.01


@pytest.mark.parametrize("fraction", [None, 0.5])
@pytest.mark.parametrize("n_trials", [20, 9, 1])
def test_packed_words_give_the_draws_back(n_trials, fraction):
    """A row's word holds its weights 3 bits a trial, or (a weight of 8 or more) its hash:
    unpacked, every row's weights are the draw's, bit for bit, both kinds of word among
    them (Poisson draws), and a row's weights 0..7 sit in its word's fields."""
    rng = np.random.default_rng(8)
    h = rng.integers(0, 1 << 64, 400_000, dtype=np.uint64, endpoint=False)
    h[:4] = [0, 1, (1 << 64) - 1, (1 << 63)]
    draw = trial_draw(n_trials, 3, fraction)
    words = draw.pack(h)
    counts = draw.counts(h)
    np.testing.assert_array_equal(draw.unpack(words), counts)
    escaped = words >= np.uint64(1 << 63)
    np.testing.assert_array_equal(escaped, counts.max(axis=1) >= 8)
    if fraction is None and n_trials == 20:  # about one row in 5,000
        assert 20 <= escaped.sum() <= 200
    elif fraction is not None:  # 0/1 weights always fit
        assert not escaped.any()
    shifts = np.uint64(3) * np.arange(n_trials, dtype=np.uint64)
    fields = (words[~escaped, None] >> shifts) & np.uint64(7)
    np.testing.assert_array_equal(fields, counts[~escaped])
    # the escaped words hold the hash's top 63 bits: the draw of the hash with either lowest bit
    np.testing.assert_array_equal(draw.counts(h ^ np.uint64(1)), counts)


def test_more_trials_than_a_word_holds_are_refused():
    with pytest.raises(ValueError, match="at most 20 trials, not 21"):
        trial_draw(21, 0).pack(np.zeros(3, np.uint64))
