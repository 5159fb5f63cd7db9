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


def test_leaf_weights_are_a_function_of_the_leaf_the_seed_and_the_feature():
    """The leaf bootstrap's weights: Poisson(1) counts drawn from (leaf, seed, feature),
    whatever else is drawn with them; another seed or feature, other weights."""
    from daskpd._engine.hashing import name_salt
    from daskpd._strat.leafboot import weights_of_leaves

    leaves = np.arange(200_000)
    w = weights_of_leaves("x1", leaves, 20, 3)
    assert w.shape == (200_000, 20) and w.dtype == np.uint8
    assert abs(w.mean() - 1.0) < 0.01 and abs(w.var() - 1.0) < 0.02
    np.testing.assert_array_equal(weights_of_leaves("x1", leaves[::-7], 20, 3), w[::-7])  # any subset, any order
    np.testing.assert_array_equal(weights_of_leaves("x1", leaves[:50], 5, 3), w[:50, :5])  # fewer trials: a prefix
    assert not np.array_equal(weights_of_leaves("x1", leaves[:50], 5, 4), w[:50, :5])
    assert not np.array_equal(weights_of_leaves("x2", leaves[:50], 5, 3), w[:50, :5])
    assert name_salt("x1") == name_salt("x1") != name_salt("x2")
