"""How often rows repeat in the trials' weight columns (daskpd._engine.repeats): the
bottom-k sketch against a plain count of every row's content, on any partitioning, and
what every banded result records and says of it."""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

import daskpd
from daskpd import ScanState
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


def test_stratpd_and_catstratpd_record_the_repeats_of_the_rows_they_draw_from(repeated):
    df = repeated
    want = _reference(df[["x1", "x2", "c", "y"]])
    assert want > 10
    import dask.dataframe as dd

    from daskpd._importance import strat_curves_and_importances

    for data in (df, dd.from_pandas(df, npartitions=5)):
        with pytest.warns(daskpd.RepeatedRowsWarning, match=r"rows repeat .* \(y, x1, x2, c\).* about \d"):
            num = daskpd.stratpd(data, target="y", feature="x1", features=["x1", "x2", "c"], n_trials=4,
                                 progress=False)
        with pytest.warns(daskpd.RepeatedRowsWarning):
            cat = daskpd.catstratpd(data, target="y", feature="c", features=["x1", "x2", "c"], n_trials=4,
                                    progress=False)
        for res in (num, cat):
            assert res.params["row_repeats"] == pytest.approx(want, rel=1e-12)
            assert f"rows repeat {want:.3g} times" in res.summary()
    with warnings.catch_warnings():
        warnings.simplefilter("error", daskpd.RepeatedRowsWarning)  # no trials: no band, no warning
        one = daskpd.stratpd(df, target="y", feature="x1", features=["x1", "x2", "c"], progress=False)
    assert "row_repeats" not in one.params and "rows repeat" not in one.summary()
    imp = strat_curves_and_importances(df, target="y", features=["x1", "x2", "c"], n_trials=3, progress=False)
    assert imp.params["row_repeats"] == pytest.approx(want, rel=1e-12)
    assert "rows repeat" in imp.summary()


def test_unique_rows_say_nothing(repeated):
    df = repeated.assign(u=np.random.default_rng(4).normal(size=len(repeated)))
    with warnings.catch_warnings():
        warnings.simplefilter("error", daskpd.RepeatedRowsWarning)
        res = daskpd.stratpd(df, target="y", feature="u", n_trials=3, progress=False)
    assert res.params["row_repeats"] == 1.0
    assert "rows repeat" not in res.summary()


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


def test_kept_states_merge_their_sketches(repeated, tmp_path):
    df = repeated
    feats = ["x1", "x2", "c"]
    strat = daskpd.fit_stratification(df, target="y", features=feats, progress=False)
    a, b = df.iloc[:4000], df.iloc[4000:]
    sa = daskpd.scan_state(a, strat, n_trials=3, progress=False)
    sa.save(tmp_path / "a")
    sa = ScanState.load(tmp_path / "a")
    sb = daskpd.scan_state(b, strat, n_trials=3, progress=False)
    want = _reference(df[["x1", "x2", "c", "y"]])
    for got in ((sa + sb).finish(strat), sa.delta_finish(sb, strat)[1], sa.merge_finish(sb, strat)[1]):
        assert {f: r.params["row_repeats"] for f, r in got.items()} == pytest.approx({f: want for f in feats})
    assert sa.finish(strat)["x1"].params["row_repeats"] == pytest.approx(_reference(a[["x1", "x2", "c", "y"]]))


@pytest.mark.cluster
def test_real_cluster_measures_the_same_repeats(repeated, client):
    """On real scheduler and worker processes the sketches are made on the workers and
    merged by the pass's tree: the same figure as the exact count."""
    import dask.dataframe as dd
    from sklearn.ensemble import HistGradientBoostingRegressor

    ddf = dd.from_pandas(repeated, npartitions=4)
    res = daskpd.stratpd(ddf, target="y", feature="x1", features=["x1", "x2", "c"], n_trials=3, progress=False)
    assert res.params["row_repeats"] == pytest.approx(_reference(repeated[["x1", "x2", "c", "y"]]), rel=1e-12)
    num = repeated.assign(c=repeated.c.map({"p": 0, "q": 1, "r": 2}))
    model = HistGradientBoostingRegressor(max_iter=10, random_state=0).fit(num[["x1", "x2", "c"]], num.y)
    pd_ = daskpd.partial_dependence(model, dd.from_pandas(num, npartitions=3), "x1", method="brute", n_trials=3,
                                    progress=False)
    assert pd_.params["row_repeats"] == pytest.approx(_reference(num[["x1", "x2", "c"]]), rel=1e-12)


def test_row_id_tells_repeated_rows_apart(repeated):
    """With row_id the trials draw every row its own weights: no repeats, narrower bands
    (the row bootstrap's), the same curve, the same trials on any partitioning; the id
    is read by the scan only and is never a default feature."""
    import dask.dataframe as dd

    df = repeated.assign(id=np.arange(len(repeated), dtype="int64"))
    kw = dict(target="y", feature="x1", n_trials=40, progress=False)
    with pytest.warns(daskpd.RepeatedRowsWarning, match="row_id="):
        shared = daskpd.stratpd(df, features=["x1", "x2", "c"], **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("error", daskpd.RepeatedRowsWarning)
        own = daskpd.stratpd(df, row_id="id", **kw)
        again = daskpd.stratpd(dd.from_pandas(df, npartitions=6), row_id=["id"], **kw)
    assert own.params["stratified_on"] == ["x2", "c"]  # the id is not a default stratifying column
    assert own.params["row_id"] == ["id"] and own.params["row_repeats"] == 1.0
    np.testing.assert_array_equal(own.pd, shared.pd)
    np.testing.assert_array_equal(own.trials_pd, again.trials_pd)
    assert np.nanmean(own.band()["std"]) < 0.5 * np.nanmean(shared.band()["std"])
    # the reference: a Poisson(1) row bootstrap's spread of the same curve, each row its own weight
    rng = np.random.default_rng(0)
    ref = []
    for _ in range(40):
        w = rng.poisson(1.0, len(df))
        ref.append(daskpd.stratpd(df.loc[np.repeat(np.arange(len(df)), w)], target="y", feature="x1",
                                  progress=False).pd)
    ref_sd = np.nanstd(np.vstack(ref) - np.vstack(ref)[:, [0]], axis=0, ddof=1)[1:]
    ours = own.band()["std"][1:]
    assert 0.6 < np.nanmean(ours) / np.nanmean(ref_sd) < 1.6
    imp = daskpd.importances(df, target="y", features=["x1", "x2", "c"], n_trials=3, row_id="id", progress=False)
    assert "importance_std" in imp


def test_row_id_errors_and_states(repeated, tmp_path):
    df = repeated.assign(id=np.arange(len(repeated), dtype="int64"))
    with pytest.raises(daskpd.DataError, match="row_id names column 'nope'"):
        daskpd.stratpd(df, target="y", feature="x1", n_trials=3, row_id="nope", progress=False)
    with pytest.raises(daskpd.DataError, match="row_id"):
        daskpd.partial_dependence(_model(df), df, "x1", method="brute", n_trials=3, row_id="nope", progress=False)
    feats = ["x1", "x2", "c"]
    strat = daskpd.fit_stratification(df, target="y", features=feats, progress=False)
    a = daskpd.scan_state(df.iloc[:3000], strat, n_trials=3, row_id="id", progress=False)
    b = daskpd.scan_state(df.iloc[3000:], strat, n_trials=3, row_id="id", progress=False)
    c = daskpd.scan_state(df.iloc[3000:], strat, n_trials=3, progress=False)
    a.save(tmp_path / "a")
    a = ScanState.load(tmp_path / "a")
    assert a.row_id == ["id"] and (a + b).finish(strat)["x1"].params["row_repeats"] == 1.0
    whole = daskpd.scan_state(df, strat, n_trials=3, row_id="id", progress=False).finish(strat)
    np.testing.assert_allclose((a + b).finish(strat)["x1"].trials_pd, whole["x1"].trials_pd, rtol=1e-12)
    with pytest.raises(daskpd.DataError, match="different row_id"):
        a + c


def _model(df):
    from sklearn.tree import DecisionTreeRegressor

    X = df[["x1", "x2"]]
    return DecisionTreeRegressor(max_depth=3, random_state=0).fit(X, df.y)
