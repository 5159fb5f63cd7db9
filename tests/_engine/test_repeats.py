"""How often rows repeat in the model-based trials' weight columns
(daskpd._engine.repeats): the bottom-k sketch against a plain count of every row's
content, on any partitioning, and what every banded result records and says of it."""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

import daskpd
from daskpd._engine.hashing import content_hash
from daskpd._engine.repeats import RepeatSketch


def _reference(frame: pd.DataFrame) -> float:
    """sum m^2 / sum m over the distinct rows of ``frame`` (m: how many rows are alike)."""
    m = frame.value_counts(dropna=False).to_numpy().astype(float)
    return float((m * m).sum() / m.sum())


def _cuts(n: int, parts: int, seed: int) -> list[tuple[int, int]]:
    edges = np.sort(np.random.default_rng(seed).choice(np.arange(1, n), parts - 1, replace=False))
    bounds = [0, *edges.tolist(), n]
    return list(zip(bounds[:-1], bounds[1:]))


@pytest.mark.parametrize("parts", [1, 2, 7])
def test_sketch_of_few_distinct_rows_is_the_exact_count_on_any_partitioning(parts):
    rng = np.random.default_rng(0)
    n = 50_000
    # skewed multiplicities: level 0 of "a" is 20x as common as each other level
    df = pd.DataFrame({"a": np.where(rng.random(n) < 0.5, 0, rng.integers(1, 40, n)), "b": rng.integers(0, 3, n)})
    h = content_hash(df)
    got = RepeatSketch.merge([RepeatSketch.of_content(h[a:b]) for a, b in _cuts(n, parts, parts)])
    assert len(got.keys) == len(df.drop_duplicates())  # fewer than k contents: all of them, fully counted
    assert got.repeats() == pytest.approx(_reference(df), rel=1e-12)


def test_sketch_keeps_the_same_contents_with_their_full_counts_however_the_rows_are_cut():
    rng = np.random.default_rng(1)
    n = 120_000
    # 30,000 distinct rows, each 1 to 7 times: more contents than the sketch keeps, and a
    # partition's smallest k rows hold fewer than k distinct ones (the sketch looks further)
    base = pd.DataFrame({"x": rng.normal(size=30_000)})
    df = base.loc[np.repeat(np.arange(30_000), rng.integers(1, 8, 30_000))].reset_index(drop=True)
    df = df.iloc[rng.permutation(len(df))[:n]].reset_index(drop=True)
    h = content_hash(df)
    whole = RepeatSketch.of_content(h, k=1024)
    for parts in (3, 11):
        got = RepeatSketch.merge([RepeatSketch.of_content(h[a:b], k=1024) for a, b in _cuts(len(h), parts, parts)])
        np.testing.assert_array_equal(got.keys, whole.keys)
        np.testing.assert_array_equal(got.counts, whole.counts)
    # the sketch's contents are the 1024 of smallest mixed hash, each with every row it has
    u, c = np.unique(h, return_counts=True)
    kept = np.isin(u, content_of_keys(whole.keys, h))
    assert kept.sum() == 1024
    np.testing.assert_array_equal(np.sort(c[kept]), np.sort(whole.counts))
    assert whole.repeats() == pytest.approx(_reference(df), rel=0.1)  # an estimate from 1024 of 30,000 contents


def content_of_keys(keys, h):
    """The content hashes (of ``h``) whose sketch keys are ``keys``."""
    from daskpd._engine.hashing import keyed_hash
    from daskpd._engine.repeats import _SALT

    mixed = keyed_hash(h, 0, _SALT)
    return np.unique(h[np.isin(mixed, keys)])


def test_no_rows_and_no_repeats():
    empty = RepeatSketch.of_content(np.zeros(0, np.uint64))
    assert empty.repeats() is None
    assert RepeatSketch.merge([empty, RepeatSketch.of_content(np.arange(10, dtype=np.uint64))]).repeats() == 1.0


@pytest.fixture(scope="module")
def repeated():
    """Rows of three small integer features and an integer target: many rows alike."""
    rng = np.random.default_rng(3)
    n = 6_000
    df = pd.DataFrame({"x1": rng.integers(0, 6, n), "x2": rng.integers(0, 4, n), "c": rng.choice(list("pqr"), n)})
    df["y"] = (df.x1 + 2 * df.x2 + (df.c == "q") + rng.integers(0, 2, n)).astype("int64")
    return df


def test_model_free_trials_resample_leaves_and_say_nothing_of_repeats(repeated):
    """StratPD's and CatStratPD's trials draw leaves, not rows (daskpd._strat.leafboot):
    rows alike in every column need nothing to tell them apart, and nothing is said."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", daskpd.RepeatedRowsWarning)
        num = daskpd.stratpd(repeated, target="y", feature="x1", features=["x1", "x2", "c"], n_trials=4,
                             progress=False)
    assert "row_repeats" not in num.params and "rows repeat" not in num.summary()
    with pytest.raises(TypeError, match="row_id"):
        daskpd.stratpd(repeated, target="y", feature="x1", n_trials=3, row_id="x2", progress=False)


def test_model_family_records_the_repeats_of_the_models_inputs(repeated):
    import dask.dataframe as dd
    from sklearn.ensemble import HistGradientBoostingRegressor

    df = repeated.assign(c=repeated.c.map({"p": 0, "q": 1, "r": 2}))
    X = df[["x1", "x2", "c"]]
    model = HistGradientBoostingRegressor(max_iter=10, random_state=0).fit(X, df.y)
    want = _reference(X)  # the PD's weights are drawn from the model's inputs
    for data in (df, dd.from_pandas(df, npartitions=4)):
        with pytest.warns(daskpd.RepeatedRowsWarning, match=r"\(x1, x2, c\)"):
            pd_ = daskpd.partial_dependence(model, data, "x1", method="brute", n_trials=3, progress=False)
        ale = daskpd.ale(model, data, "x1", n_trials=3, progress=False)
        for res in (pd_, ale):
            assert res.params["row_repeats"] == pytest.approx(want, rel=1e-12)
            assert "rows repeat" in res.summary()
    assert "row_repeats" not in daskpd.partial_dependence(model, df, "x1", method="brute", progress=False).params
