"""A categorical feature's new-against-old change from the old rows' cell means
(daskpd._strat.apart.cell_change): checked against a reference computed with pandas
from the raw rows (every row's leaf under the stratification, the (leaf, category)
cells both the new and the old rows hold, ``r = mean_new - mean_old`` per cell, the
new-row-weighted mean of ``r`` per category, each trial weighting the leaves by their
Poisson weights); the record of the comparison is that change, centred by its median,
and a category's step in the new rows is flagged on that category."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import daskpd
from daskpd._engine.hashing import fold_hash, hash_order
from daskpd._strat.apart import cell_change, comparison_states, new_curve
from daskpd._strat.leafboot import weights_of_leaves
from daskpd.job.drift import decide
from daskpd.job.newold import compare_states, points_frame

EFFECTS = np.array([0.0, 1.0, 3.0, 2.5])
METHODS = {"x1": "stratpd", "x2": "stratpd", "c": "catstratpd"}
KW = dict(target="y", categorical_features=["c"], n_trials=1, progress=False, random_state=3)
T = 30


def frame(seed: int, n: int, step: float = 0.0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x1 = rng.integers(0, 11, n).astype(float)
    x2 = rng.uniform(0, 1, n)
    c = rng.integers(0, 4, n)
    y = 0.5 * x1 ** 2 + 4 * x2 + EFFECTS[c] + step * (c == 3) + rng.normal(0, 1, n)
    return pd.DataFrame({"x1": x1, "x2": x2, "c": c.astype(str), "y": y})


def row_leaves(strat, df: pd.DataFrame, feature: str) -> np.ndarray:
    """Every row's leaf of ``feature``'s tree (the scan's own assignment)."""
    fs = strat.scan_of(feature)
    X = strat.encoder.transform(df)
    col = {c: j for j, c in enumerate(strat.encoder.columns)}
    cols = list(strat.hash_columns) if strat.hash_columns is not None else hash_order(df.columns)
    h = fold_hash(df[cols], strat.random_state) if fs.needs_hash else None
    return np.asarray(fs.leaves(X, [col[c] for c in fs.other], h), np.int64)


def reference(strat, old: pd.DataFrame, new: pd.DataFrame, n_trials: int):
    """(change, trials (T x categories), leaves, rows) per category label, from the raw rows."""
    cells = []
    for df in (new, old):
        g = df.assign(leaf=row_leaves(strat, df, "c")).groupby(["leaf", "c"])["y"].agg(["size", "mean"])
        cells.append(g)
    both = pd.merge(cells[0], cells[1], left_index=True, right_index=True, suffixes=("_new", "_old")).reset_index()
    both["r"] = both["mean_new"] - both["mean_old"]
    w = weights_of_leaves("c", both["leaf"].to_numpy(), n_trials, strat.random_state).astype(float)

    def weighted(weight):
        d = both.assign(w=both["size_new"] * weight, wr=both["size_new"] * weight * both["r"])
        s = d.groupby("c")[["w", "wr"]].sum()
        return (s["wr"] / s["w"]).where(s["w"] > 0)

    change = weighted(np.ones(len(both)))
    trials = pd.DataFrame({t: weighted(w[:, t]) for t in range(n_trials)}).T
    return change, trials, both.groupby("c")["leaf"].nunique(), both.groupby("c")["size_new"].sum()


@pytest.fixture(scope="module")
def night():
    old, new = frame(0, 8000), frame(1, 800, step=0.75)
    base = daskpd.strat_curves_and_importances(old, keep_state=True, **KW)
    got = daskpd.strat_curves_and_importances(new, stratification=base.stratification, base_state=base.state,
                                              keep_state=True, **KW)
    return base.stratification, old, new, base.state, got.new_state


def test_the_change_is_the_new_rows_mean_departure_from_the_old_cell_means(night):
    strat, old, new, old_state, new_state = night
    cmp_ = comparison_states(new_state.subset(["c"]), strat, T, old=old_state.subset(["c"]))
    got = cell_change(cmp_.new.features["c"], cmp_.old.features["c"], "c", T, strat.random_state)
    labels = pd.Index(got.coder.labels(), dtype=object).astype(str)
    change, trials, leaves, rows = reference(strat, old, new, T)
    at = labels.get_indexer(change.index)
    assert (at >= 0).all() and len(at) == 4
    np.testing.assert_allclose(got.change[at], change.to_numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got.trials[:, at], trials[change.index].to_numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(got.leaves[at], leaves[change.index].to_numpy())
    np.testing.assert_array_equal(got.rows[0, at], rows[change.index].to_numpy())
    # most new rows count: a new row falls in a cell the old rows hold unless that cell is empty of them
    assert rows.sum() > 0.5 * len(new)
    # the planted step of category 3 (0.75) against the others'
    assert change["3"] - change.drop("3").median() == pytest.approx(0.75, abs=0.3)

    # the new curve is the old one plus the change, trial by trial
    old_c = cmp_.old.finish(strat)["c"]
    cur = new_curve(old_c, got)
    k = labels.get_indexer(pd.Index(old_c.categories, dtype=object).astype(str))
    np.testing.assert_array_equal(cur.pd, old_c.pd + got.change[k])
    np.testing.assert_array_equal(cur.trials_pd, old_c.trials_pd + got.trials[:, k])


def test_the_record_is_the_centred_change_and_flags_the_category(night):
    strat, old, new, old_state, new_state = night
    recs = decide(compare_states(new_state, strat, METHODS, T, old_state=old_state))
    pts = points_frame(recs)
    c = pts[pts["feature"] == "c"].set_index("category")
    change, trials, leaves, _ = reference(strat, old, new, T)
    want = change - change.median()
    np.testing.assert_allclose(c.loc[want.index, "change"].to_numpy(float), want.to_numpy(), atol=1e-9)
    np.testing.assert_allclose((c["new"] - c["old"]).to_numpy(float), c["change"].to_numpy(float), atol=1e-9)
    # the spread: the trials' centred change, with the few-cluster correction
    cmp_ = comparison_states(new_state.subset(["c"]), strat, T, old=old_state.subset(["c"]))
    old_c = cmp_.old.finish(strat)["c"]
    n_old = pd.Series(old_c.n_leaves_cat, index=pd.Index(old_c.categories, dtype=object).astype(str))
    m = np.minimum(leaves[want.index].to_numpy(float), n_old[want.index].to_numpy(float))
    centred = trials[want.index].sub(trials[want.index].median(axis=1), axis=0)
    se = centred.std(ddof=1).to_numpy() * np.sqrt(m / (m - 1))
    np.testing.assert_allclose(c.loc[want.index, "se"].to_numpy(float), se, rtol=1e-9)
    rec = {r.feature: r for r in recs}
    assert rec["c"].status == "drifted" and rec["c"].where.startswith("3: +")
    assert rec["x1"].status == "ok" and rec["x2"].status == "ok"


def test_an_unchanged_generator_gives_no_flag_and_the_same_rows_no_change(night):
    strat, _, _, old_state, _ = night
    same = frame(5, 800)
    got = daskpd.strat_curves_and_importances(same, stratification=strat, base_state=old_state, keep_state=True,
                                              **KW)
    recs = decide(compare_states(got.new_state, strat, METHODS, T, old_state=old_state))
    assert [r.status for r in recs] == ["ok", "ok", "ok"]
    recs = decide(compare_states(old_state, strat, METHODS, T, old_state=old_state))
    c = next(r for r in recs if r.feature == "c")
    assert np.abs(c.points["change"].to_numpy(float)).max() == 0.0 and c.status == "ok"


def test_sides_with_other_cells_are_refused(night):
    strat, _, _, old_state, new_state = night
    cmp_ = comparison_states(new_state.subset(["c"]), strat, T, old=old_state.subset(["c"]))
    with pytest.raises(ValueError, match="feature 'c': the new and the old side of a comparison must hold the same "
                                         "cells"):
        cell_change(cmp_.new.features["c"], old_state.features["c"], "c", T, strat.random_state)
