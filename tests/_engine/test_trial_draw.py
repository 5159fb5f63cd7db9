"""The trials' weights: what the compiled draw gives equals its definition written with
numpy (splitmix64 of the row's content hash plus the trial's seed, the top 53 bits as a
uniform u, the Poisson(1) count searchsorted(cdf, u, side="right") or u < fraction)."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from daskpd._engine.hashing import bootstrap_counts, content_hash, trial_draw


def _reference(df, columns, n_trials, random_state, fraction):
    h = content_hash(df[columns]).astype(np.uint64)
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
