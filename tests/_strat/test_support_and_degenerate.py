"""The importance table carries each feature's support (rows compared within a leaf, their
share of the rows with a value, and a flag): a feature estimated from a few rows never
ranks first unflagged; a feature with no support has no importance.  Degenerate requests
-- a constant target, nothing to stratify on, every row in single-x leaves -- are
DataErrors saying what would work; a boolean target is read as 0/1, and says so."""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

import daskpd
from daskpd import DataError
from daskpd.results.support import LOW_SUPPORT_ROWS, curve_support, support_flag


def quiet(func, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return func(*args, **kwargs)


def codependent(n=4000, seed=0) -> pd.DataFrame:
    """y = x1 + 3 [c] + noise, where c is x2's bin in all but ~1 % of the rows: the trees
    on x2 separate c's categories almost everywhere, so c's effect rests on a few rows --
    and its raw importance is the largest."""
    r = np.random.default_rng(seed)
    df = pd.DataFrame({"x1": r.uniform(0, 1, n), "x2": r.uniform(0, 1, n)})
    c = (df.x2 * 4).astype(int).clip(0, 3)
    flip = r.uniform(size=n) < 0.01
    c = np.where(flip, r.integers(0, 4, n), c)
    df["c"] = np.array(["a", "b", "c", "d"])[c]
    df["y"] = df.x1 + 3.0 * c + r.normal(0, 0.1, n)
    return df


def test_a_thinly_supported_feature_is_flagged_and_ranked_after_the_supported_ones():
    res = quiet(daskpd.strat_curves_and_importances, codependent(), target="y", progress=False)
    t = res.table
    assert {"support_rows", "support_share", "support"} <= set(t.columns)
    assert t.loc["c", "support"] == "low_support"
    assert t.loc["c", "importance_raw"] == t["importance_raw"].max()  # the largest effect on paper ...
    assert list(t.index)[-1] == "c" and t.index[0] != "c"  # ... ranked after every supported feature
    frame = res.to_frame().set_index("feature")
    assert frame.loc["c", "rank"] == len(t) and (frame.drop(index="c")["support"] == "ok").all()
    # the support columns are what the curves carry
    used, with_value = curve_support(res.curves["c"])
    assert t.loc["c", "support_rows"] == used == float(np.asarray(res.curves["c"].count_used).sum())
    assert t.loc["c", "support_share"] == pytest.approx(used / with_value)
    assert used < 0.5 * with_value
    # summary() shows the flag and what it means
    text = res.summary()
    assert "low_support" in text and "ranked after the supported features" in text
    assert all(len(line) <= 130 for line in text.splitlines())


def test_a_feature_with_no_support_has_no_importance():
    r = np.random.default_rng(2)
    n = 3000
    df = pd.DataFrame({"x1": r.uniform(0, 1, n), "k": r.integers(0, 6, n)})
    df["c"] = df.k.map(lambda v: f"c{v}")  # c is k: its categories never share a leaf
    df["y"] = df.x1 + df.k + r.normal(0, 0.1, n)
    res = quiet(daskpd.strat_curves_and_importances, df, target="y", features=["x1", "k", "c"],
                categorical_features=["k"], progress=False)
    t = res.table
    assert t.loc["c", "support"] == "no_support" and t.loc["c", "support_rows"] == 0
    assert np.isnan(t.loc["c", ["importance", "impact", "pd_variance", "importance_raw"]].astype(float)).all()
    assert list(t.index)[-1] == "c"
    assert t["importance"].sum() == pytest.approx(1.0)  # the others still share the whole
    # every feature without support: an error saying why
    with pytest.raises(DataError, match=r"no feature has support: 'c': no leaf of its tree holds two categories"):
        quiet(daskpd.strat_curves_and_importances, df, target="y", features=["c"], stratify_on=["k", "c"],
              progress=False)


def test_support_flag_thresholds():
    assert support_flag(0, 100) == "no_support"
    assert support_flag(LOW_SUPPORT_ROWS - 1, LOW_SUPPORT_ROWS) == "low_support"
    assert support_flag(400, 1000) == "low_support" and support_flag(600, 1000) == "ok"


def test_importance_plot_puts_flagged_features_last_and_marks_them():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    res = quiet(daskpd.strat_curves_and_importances, codependent(), target="y", progress=False)
    ax = res.plot()
    by_pos = dict(zip(ax.get_yticks(), (t.get_text() for t in ax.get_yticklabels())))
    assert by_pos[min(by_pos)] == "c"  # the bottom bar
    bars = ax.patches
    flagged = [b for b in bars if b.get_hatch()]
    assert len(flagged) == 1 and flagged[0].get_y() < min(b.get_y() for b in bars if not b.get_hatch())
    assert any("low support" in t.get_text() for t in ax.texts)
    # a row without a flag (a model-based measure next to these in a job's table) is drawn unflagged
    from daskpd.plotting.importance import plot_importances

    t = res.table.copy()
    t["support"] = t["support"].astype(object)
    t.loc[t["support"] == "ok", "support"] = np.nan
    ax = plot_importances(t)
    assert len([b for b in ax.patches if b.get_hatch()]) == 1
    plt.close("all")


# ---------------------------------------------------------------- degenerate requests
def test_every_row_in_single_x_leaves_is_an_error_saying_what_works():
    r = np.random.default_rng(0)
    x = r.integers(0, 8, 3000).astype(float)
    df = pd.DataFrame({"x": x, "x_copy": x, "y": x + r.normal(0, 0.1, 3000)})
    with pytest.raises(DataError, match=r"^StratPD for feature 'x': every row fell in a leaf holding a single x value"
                                        r".*raise min_samples_leaf .* or stratify on fewer columns"):
        daskpd.stratpd(df, target="y", feature="x", progress=False)
    df["c"] = df.x.map(lambda v: f"c{int(v)}")
    with pytest.raises(DataError, match=r"^CatStratPD for feature 'c': no leaf of its tree holds two categories"):
        daskpd.catstratpd(df, target="y", feature="c", stratify_on=["x_copy"], progress=False)


def test_nothing_to_stratify_on_is_an_error_naming_the_feature():
    r = np.random.default_rng(0)
    df = pd.DataFrame({"x": r.uniform(size=2000)})
    df["y"] = df.x + r.normal(0, 0.1, 2000)
    with pytest.raises(DataError, match=r"^feature 'x' has no other column to be stratified on \(the stratifying "
                                        r"columns: 'x'\).*daskpd\.marginal\(data, \['x'\], target='y'\)"):
        daskpd.stratpd(df, target="y", feature="x", progress=False)
    with pytest.raises(DataError, match="has no other column to be stratified on") as err:
        daskpd.importances(df, target="y", progress=False)
    assert "keep_suspect" not in str(err.value)  # nothing was left out: no advice to keep it
    # the only other column left out as a row number: the message names it and the option
    with pytest.raises(DataError, match=r"has no other column to be stratified on \(the stratifying columns: 'x'\)"
                                        r".*pass keep_suspect=True to keep the suspect columns left out "
                                        r"\('row' \(row number\)\)"):
        daskpd.stratpd(df.assign(row=np.arange(2000)), target="y", feature="x", progress=False)
    # a categorical feature's one leaf compares every category: its marginal effects
    c = daskpd.catstratpd(df.assign(c=(df.x * 3).astype(int).astype(str)), target="y", feature="c",
                          stratify_on=["c"], progress=False)
    assert c.n_leaves == 1 and c.n_used == 2000


def test_a_constant_target_is_an_error():
    r = np.random.default_rng(0)
    df = pd.DataFrame({"x1": r.uniform(size=3000), "x2": r.uniform(size=3000), "c": r.integers(0, 4, 3000)})
    df["y"] = 5.0
    for call in (lambda: daskpd.stratpd(df, target="y", feature="x1", progress=False),
                 lambda: daskpd.catstratpd(df, target="y", feature="c", progress=False),
                 lambda: daskpd.importances(df, target="y", progress=False)):
        with pytest.raises(DataError, match=r"^target 'y' is constant: every row with a value holds 5 \(of 3,000 rows "
                                            r"read\), so there is no partial dependence to estimate"):
            call()


def test_a_text_target_is_an_error_saying_how_to_convert_it():
    df = pd.DataFrame({"x1": np.arange(200.0), "x2": np.arange(200.0) % 7, "y": np.where(np.arange(200) % 3, "yes", "no")})
    with pytest.raises(DataError, match=r"^target 'y' must be numeric; it has dtype \w+: convert it to numbers, or a "
                                        r"label of two classes to a boolean \(e\.g\. data\['y'\] == 'yes'\), which is "
                                        r"read as 0/1"):
        daskpd.importances(df, target="y", progress=False)


def test_a_boolean_target_is_read_as_0_1_and_says_so():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    r = np.random.default_rng(0)
    df = pd.DataFrame({"x1": r.uniform(size=3000), "x2": r.uniform(size=3000)})
    df["y"] = (df.x1 + 0.3 * df.x2 + r.normal(0, 0.2, 3000)) > 0.6
    res = daskpd.stratpd(df, target="y", feature="x1", progress=False)
    ref = daskpd.stratpd(df.assign(y=df.y.astype(int)), target="y", feature="x1", progress=False)
    np.testing.assert_array_equal(res.pd, ref.pd)  # exactly the 0/1 target's curve
    assert res.params["target_boolean"] and "target_boolean" not in ref.params
    assert "True = 1" in res.plot().get_ylabel()
    assert "target 'y' is boolean, read as 0/1 (True = 1)" in res.summary()
    assert "boolean" not in ref.summary()
    cat = daskpd.catstratpd(df.assign(c=(df.x1 * 4).astype(int)), target="y", feature="c", stratify_on=["x2"],
                            progress=False)
    assert "target 'y' is boolean, read as 0/1 (True = 1)" in cat.summary()
    imp = quiet(daskpd.strat_curves_and_importances, df, target="y", progress=False)
    assert "for 'y' (boolean, read as 0/1)" in imp.summary()
    plt.close("all")
