"""What a new user can trust: one meaning of ``features`` (the analysis columns, each
stratified on the others; ``stratify_on`` overrides) in every model-free function;
``target``/``feature`` by name only (positional: a TypeError naming them);
warnings for likely identifiers, leaks, dates stored as strings and thin curves; one-line
errors for filters; hive keys declared numeric; summaries in short lines."""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

import daskpd
from daskpd import DataError, InvalidParameterError
from daskpd._data.suspects import sample_warnings


@pytest.fixture(scope="module")
def leaky():
    """y = x1 + x2 + noise, and a column that leaks y."""
    rng = np.random.default_rng(3)
    n = 2000
    df = pd.DataFrame({"x1": rng.uniform(0, 1, n).round(2), "x2": rng.uniform(0, 1, n).round(2)})
    df["y"] = df.x1 + df.x2 + rng.normal(0, 0.05, n)
    df["leak"] = df.y + rng.normal(0, 1e-3, n)
    return df


def quiet(func, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return func(*args, **kwargs)


# ---------------------------------------------------------------- features / stratify_on
def test_features_are_the_analysis_columns_in_every_function(leaky):
    feats = ["x1", "x2"]
    res = quiet(daskpd.strat_curves_and_importances, leaky, target="y", features=feats, progress=False)
    # each feature stratified on the others in features: the leak is not used
    assert res.curves["x1"].params["stratified_on"] == ["x2"]
    assert res.params["stratify_on"] == feats
    same = quiet(daskpd.strat_curves_and_importances, leaky, target="y", features=feats, stratify_on=feats,
                 progress=False)
    pd.testing.assert_frame_equal(res.table, same.table)
    # stratpd and catstratpd read features the same way: the same curve
    sp = quiet(daskpd.stratpd, leaky, target="y", feature="x1", features=feats, progress=False)
    np.testing.assert_array_equal(sp.pd, res.curves["x1"].pd)
    # the previous meaning (every column stratifies) is asked for by name, and the leak
    # then flattens x1's curve: the importances differ
    old = quiet(daskpd.strat_curves_and_importances, leaky, target="y", features=feats,
                stratify_on=["x1", "x2", "leak"], progress=False)
    assert old.curves["x1"].params["stratified_on"] == ["x2", "leak"]
    assert res.table.loc["x1", "importance_raw"] > 3 * old.table.loc["x1", "importance_raw"]
    # stratify_on overrides features in stratpd too
    sp2 = quiet(daskpd.stratpd, leaky, target="y", feature="x1", features=feats, stratify_on=["x2", "leak"],
                progress=False)
    np.testing.assert_array_equal(sp2.pd, old.curves["x1"].pd)


# ---------------------------------------------------------------- keyword safety
def test_positional_target_and_feature_are_a_type_error_naming_them(leaky):
    df = leaky[["x1", "x2", "y"]]
    with pytest.raises(TypeError, match=r"^stratpd\(\) takes 1 positional argument \(data; then target, feature by "
                                        r"name\); got 3$"):
        daskpd.stratpd(df, "y", "x1", progress=False)
    with pytest.raises(TypeError, match=r"^importances\(\) takes 1 positional argument \(data; then target by "
                                        r"name\); got 2$"):
        daskpd.importances(df, "y", progress=False)
    with pytest.raises(TypeError, match=r"^fit_stratification\(\) takes 1 positional argument \(data; then target"):
        daskpd.fit_stratification(df, "y")
    with pytest.raises(TypeError, match=r"^catstratpd\(\) takes 1 positional argument \(data; then target, feature "
                                        r"by name\); got 4$"):
        daskpd.catstratpd(df, "y", "x1", "x2")
    with pytest.raises(TypeError, match="missing a required argument: 'target'"):
        daskpd.stratpd(df, feature="x1")
    import inspect

    params = inspect.signature(daskpd.stratpd).parameters
    assert params["target"].kind is inspect.Parameter.KEYWORD_ONLY
    assert inspect.signature(daskpd.importances).return_annotation == "pd.DataFrame"


# ---------------------------------------------------------------- warnings on the sample
def test_sample_warnings_name_identifiers_leaks_and_dates():
    rng = np.random.default_rng(0)
    n = 1500
    df = pd.DataFrame({
        "x1": rng.uniform(size=n), "x2": rng.uniform(size=n),
        "row_id": np.arange(n) * 7 + 3,                                   # integer, unique per row
        "sku": [f"SKU-{i:06d}" for i in rng.permutation(n)],             # string, unique per row
        "saledate": pd.Series(pd.date_range("2010-01-01", periods=40, freq="W")
                              .strftime("%m/%d/%Y")).sample(n, replace=True, random_state=0).to_numpy(),
        "group": rng.choice(list("abc"), n),
    })
    df["y"] = df.x1 + df.x2 + rng.normal(0, 0.1, n)
    df["leaked"] = df.y * 2 + 1
    df["cat_leak"] = pd.cut(df.y, 400).astype(str)  # categories that pin y down
    cols = [c for c in df.columns if c != "y"]
    lines = sample_warnings(df, "y", cols, cols, {})
    by = {line.split("'")[1]: line for line in lines}
    assert set(by) == {"row_id", "sku", "saledate", "leaked"}, lines  # cat_leak: too many levels to judge
    assert "looks like an identifier (1,500 distinct values in 1,500 sampled rows)" in by["row_id"]
    assert "identifier" in by["sku"]
    assert "holds dates as strings (e.g. '" in by["saledate"] and "the year" in by["saledate"]
    assert "predicts 'y' almost perfectly (|Spearman| 1.000" in by["leaked"]
    assert all("\n" not in line and len(line) < 170 for line in lines)
    few = df.assign(cat_leak=pd.cut(df.y, 100).astype(str))
    assert any("'cat_leak' predicts 'y' almost perfectly (R^2" in line
               for line in sample_warnings(few, "y", ["x1", "cat_leak"], ["x1", "cat_leak"], {}))
    # clean data, or a single column (it explains the target by construction): nothing
    assert sample_warnings(df, "y", ["x1", "x2", "group"], ["x1", "x2", "group"], {}) == []
    assert sample_warnings(df[["leaked", "y"]], "y", ["leaked"], ["leaked"], {}) == []
    # through a public function, on the user's line
    with pytest.warns(UserWarning, match="'row_id' looks like an identifier") as rec:
        daskpd.stratpd(df, target="y", feature="x1", features=["x1", "x2", "row_id"], progress=False)
    assert [w.filename for w in rec if "identifier" in str(w.message)] == [__file__]


def test_thin_curves_warn_with_what_to_do():
    rng = np.random.default_rng(1)
    n = 3000
    x = rng.uniform(size=n)
    c = np.where(rng.uniform(size=n) < 0.8, (x * 40).astype(int), rng.integers(0, 40, n)).astype(str)
    df = pd.DataFrame({"x": x, "c": c, "y": x + rng.normal(0, 0.1, n)})
    with pytest.warns(UserWarning, match=r"^CatStratPD for feature 'c': \d+% of the rows \([\d,]+ of 3,000\) fell in "
                                         r"leaves holding a single category and could not contribute; raise "
                                         r"min_samples_leaf") as rec:
        res = daskpd.catstratpd(df, target="y", feature="c", min_samples_leaf=2, honest=False, progress=False)
    assert res.n_ignored > 0.5 * (res.n_used + res.n_ignored)
    assert sum("could not contribute" in str(w.message) for w in rec) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        daskpd.catstratpd(df, target="y", feature="c", min_samples_leaf=200, progress=False)


# ---------------------------------------------------------------- filters, hive keys
@pytest.fixture(scope="module")
def month_lake(tmp_path_factory):
    root = tmp_path_factory.mktemp("months")
    rng = np.random.default_rng(2)
    for m in (1, 2, 3, 10):
        (root / f"Month={m}").mkdir()
        x = rng.uniform(size=300)
        pd.DataFrame({"x": x, "z": rng.uniform(size=300), "y": x + 0.5 * m}).to_parquet(
            root / f"Month={m}" / "part.parquet")
    return str(root)


def test_filters_name_the_missing_column_and_the_emptying_filter(month_lake):
    with pytest.raises(DataError) as e:
        daskpd.stratpd(month_lake, target="y", feature="x", filters=[("nope", "==", 1)], progress=False)
    msg = str(e.value)
    assert msg.startswith("filters name column 'nope', which ") and "available columns: x, z, y, Month" in msg
    assert "\n" not in msg and "ArrowInvalid" not in msg
    with pytest.raises(DataError, match=r"^the filters removed every row: no row satisfies "
                                        r"filters=\[\('x', '>', 5\)\]$"):
        daskpd.importances(month_lake, target="y", filters=[("x", ">", 5)], progress=False)


def test_a_hive_key_declared_numeric(month_lake):
    with pytest.warns(UserWarning, match="hive partition key"):
        t = daskpd.importances(month_lake, target="y", progress=False)
    assert "Month" not in t.index  # by default: where a file lies, left out with a note
    t = quiet(daskpd.importances, month_lake, target="y", numeric_features=["Month"], progress=False)
    assert t.loc["Month", "kind"] == "numeric" and t.index[0] == "Month"
    r = quiet(daskpd.stratpd, month_lake, target="y", feature="Month", progress=False)  # asked for by name
    np.testing.assert_array_equal(r.x, [1.0, 2.0, 3.0, 10.0])
    np.testing.assert_allclose(r.pd, 0.5 * (r.x - 1), atol=0.05)  # y = x + 0.5 Month
    with pytest.raises(InvalidParameterError, match="parameter numeric_features and parameter categorical_features "
                                                    "both name 'Month'"):
        daskpd.importances(month_lake, target="y", numeric_features=["Month"], categorical_features=["Month"],
                           progress=False)


def test_a_job_declares_numeric_and_stratify_on(tmp_path):
    from daskpd.job.spec import SpecError
    from daskpd.job.spec_parse import parse_spec

    base = {"name": "j", "target": "y", "source": {"path": str(tmp_path)}}
    spec = parse_spec({**base, "numeric": ["Month"], "stratify_on": ["x", "Month"]}, base_dir=tmp_path,
                      check_files=False)
    assert spec.numeric == ("Month",) and spec.stratify_on == ("x", "Month")
    with pytest.raises(SpecError, match="keys 'numeric' and 'categorical': both list 'Month'"):
        parse_spec({**base, "numeric": ["Month"], "categorical": ["Month"]}, base_dir=tmp_path, check_files=False)
    with pytest.raises(SpecError, match="key 'stratify_on': lists the target 'y'"):
        parse_spec({**base, "stratify_on": ["y"]}, base_dir=tmp_path, check_files=False)


def test_summaries_are_short_lines(leaky):
    df = leaky[["x1", "x2", "y"]].assign(c=np.where(leaky.x2 > 0.5, "hi", "lo"))
    sp = quiet(daskpd.stratpd, df, target="y", feature="x1", progress=False)
    cs = quiet(daskpd.catstratpd, df, target="y", feature="c", progress=False)
    for text in (sp.summary(), cs.summary()):
        lines = text.splitlines()
        assert len(lines) >= 3 and max(map(len, lines)) <= 100, text
    assert sp.summary().startswith("x1: ") and "rows used 2,000 of 2,000" in sp.summary()
    assert "ignored" in cs.summary() and cs.summary().startswith("c: 2 categories")


def test_cli_hints_fit_the_spec():
    from daskpd.cli import _left_out_hint

    assert "convert a datetime to a number" in _left_out_hint({"when": "datetime"})
    assert "list a hive key in 'numeric' or 'categorical'" in _left_out_hint({"Month": "hive partition key"})
    assert "exclude" not in _left_out_hint({"when": "datetime", "c": "constant", "Month": "hive partition key"})
