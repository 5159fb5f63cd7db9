"""Default features hold only what could be a feature: the columns the tree sample (and a
lake's footers) show to be identifiers, row numbers, UUID / fixed-size binary keys,
near-unique text, leaks or dates stored as strings are left out of the default features
and stratifying columns with the counted note, and come back when named (with their
warning) or with ``keep_suspect=True``.

Each table below reproduces a case that ranked #1 before: a row number over several
parquet files (the data sorted within each file, so the row number tracks the target),
a near-unique title, UUIDs written by pyarrow and by DuckDB."""
from __future__ import annotations

import uuid
import warnings

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import daskpd
from daskpd import DataError
from daskpd._data.suspects import footer_row_number, suspect_columns

N = 2500


def base(n=N, seed=0) -> pd.DataFrame:
    r = np.random.default_rng(seed)
    df = pd.DataFrame({"x1": r.uniform(0, 1, n), "x2": r.uniform(0, 1, n), "c": r.choice(list("abcde"), n)})
    df["y"] = 3 * df.x1 + df.x2 + df.c.map(dict(a=0, b=.5, c=1, d=1.5, e=2)).to_numpy() + r.normal(0, .3, n)
    return df


def importances(data, **kw):
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        res = daskpd.strat_curves_and_importances(data, target="y", progress=False, **kw)
    return res, [str(w.message) for w in rec]


def notes(messages, what="default features"):
    return [m for m in messages if f"left out of the {what}" in m]


@pytest.fixture(scope="module")
def rownum_lake(tmp_path_factory):
    """4 parquet files, each numbering its rows 0..N-1 (as pandas' reset_index writes
    them), sorted by y within the file: the row number predicts y."""
    root = tmp_path_factory.mktemp("rownum")
    for i in range(4):
        df = base(seed=i).sort_values("y").reset_index(drop=True)
        df.insert(0, "row", np.arange(N))
        df.to_parquet(root / f"part-{i}.parquet", index=False, row_group_size=1000)
    return root


def test_row_numbers_over_several_files_are_left_out_and_come_back_when_named(rownum_lake):
    for sample_size in (200_000, 2_000):  # the sample is every row / a fifth of them (the footers tell)
        res, msgs = importances(str(rownum_lake), sample_size=sample_size)
        assert sorted(res.table.index) == ["c", "x1", "x2"]
        assert notes(msgs) == ["importances: 1 of 4 columns left out of the default features: 1 row number ('row'); "
                               "name them in features= to score them; keep_suspect=True keeps the suspect column"]
        assert res.params["skipped_features"] == {"row": "row number"}
        assert res.curves["x1"].params["stratified_on"] == ["x2", "c"]  # nor a stratifying column
    named, msgs = importances(str(rownum_lake), features=["x1", "x2", "c", "row"])
    assert "row" in named.table.index and not notes(msgs)
    assert any("column 'row' looks like a row number (numbers the rows of each of its 4 files from 0)" in m
               for m in msgs), msgs
    kept, msgs = importances(str(rownum_lake), keep_suspect=True)
    assert "row" in kept.table.index and not notes(msgs)
    # before: the row number ranked first; left out, the true #1 is first
    assert kept.table.index[0] == "row" and res.table.index[0] == "x1"


def test_row_number_rules():
    # every row in the sample: 0..n-1 starting again in each part, each count at most the one before
    parts = pd.Series(np.concatenate([np.arange(1200), np.arange(1000), np.arange(700)]))
    df = pd.DataFrame({"row": parts, "y": np.random.default_rng(0).normal(size=len(parts))})
    assert suspect_columns(df, "y", ["row"], n_rows=len(df))["row"].why == "row number"
    assert "row" not in suspect_columns(df, "y", ["row"], n_rows=10 * len(df))  # a sample: not from the sample
    # integer features that are not row numbers: uniform codes, a count, a day of the year
    r = np.random.default_rng(1)
    other = pd.DataFrame({"codes": r.integers(0, 1000, 5000), "count": r.poisson(3, 5000),
                          "doy": np.tile(np.arange(1, 366), 14)[:5000], "y": r.normal(size=5000)})
    assert suspect_columns(other, "y", ["codes", "count", "doy"], n_rows=5000) == {}


def test_footer_row_numbers(tmp_path, rownum_lake):
    from daskpd._data.lake import inspect_lake

    lake = inspect_lake(str(rownum_lake))
    assert footer_row_number(lake, "row") == "numbers the rows of each of its 4 files from 0"
    assert footer_row_number(lake, "x1") is None
    # one numbering across the files
    for i in range(3):
        pd.DataFrame({"id": np.arange(i * 500, (i + 1) * 500) + 1, "v": np.arange(500) % 7}).to_parquet(
            tmp_path / f"p{i}.parquet", index=False)
    lake = inspect_lake(str(tmp_path))
    assert footer_row_number(lake, "id") == "numbers the rows 1..1,500 across its 3 files"
    assert footer_row_number(lake, "v") is None
    # a value repeating more often than there are files is not a row number
    assert footer_row_number(lake, "id", np.array([5, 5, 5, 5])) is None


def titles(n=N, seed=3) -> pd.DataFrame:
    """Titles: most unique, some repeated (remakes), none 99 % distinct."""
    r = np.random.default_rng(seed)
    df = base(n, seed)
    words = np.array(["The", "Great", "Small", "Night", "River", "Return", "Last", "City", "Blue", "Song"])
    t = [" ".join(r.choice(words, 3)) + f" {i}" for i in range(n)]
    dup = r.uniform(size=n) < 0.25
    t = np.where(dup, np.array(t, dtype=object)[r.integers(0, 40, n)], t)  # a quarter share 40 titles
    df["title"] = t
    return df


def test_near_unique_titles_are_left_out():
    df = titles()
    share = df.title.nunique() / len(df)
    assert share < 0.99  # the share rule alone would keep it
    res, msgs = importances(df)
    assert "title" not in res.table.index
    assert notes(msgs)[0].startswith("importances: 1 of 4 columns left out of the default features: 1 likely "
                                     "identifier ('title')")
    named, msgs = importances(df, features=["x1", "x2", "c", "title"])
    assert "title" in named.table.index
    assert any("'title' looks like an identifier" in m and "titles or free text" in m for m in msgs), msgs
    # a categorical feature with many levels but rows behind each is not near-unique
    r = np.random.default_rng(0)
    many = pd.DataFrame({"k": [f"k{i}" for i in r.integers(0, 300, 6000)], "y": r.normal(size=6000)})
    assert suspect_columns(many, "y", ["k"], n_rows=6000) == {}


@pytest.fixture(scope="module")
def uuid_files(tmp_path_factory):
    """The same table with a random UUID per row, stored as a string and as
    fixed_size_binary(16) by pyarrow, and as UUID and VARCHAR by DuckDB; sorted by y."""
    duckdb = pytest.importorskip("duckdb")
    root = tmp_path_factory.mktemp("uuids")
    df = base(seed=11).sort_values("y").reset_index(drop=True)
    ids = sorted(uuid.UUID(int=int(v)) for v in np.random.default_rng(5).integers(0, 2 ** 62, len(df)))
    df.assign(uid=[str(u) for u in ids]).to_parquet(root / "pa_str.parquet", index=False)
    t = pa.Table.from_pandas(df, preserve_index=False).append_column("uid", pa.array([u.bytes for u in ids],
                                                                                     pa.binary(16)))
    pq.write_table(t, root / "pa_fsb.parquet")
    con = duckdb.connect()
    con.register("t", df)
    con.execute(f"COPY (SELECT *, uuid() AS uid FROM t ORDER BY y) TO '{root / 'duck_uuid.parquet'}' (FORMAT parquet)")
    con.execute(f"COPY (SELECT *, uuid()::VARCHAR AS uid FROM t ORDER BY y) TO '{root / 'duck_str.parquet'}' "
                "(FORMAT parquet)")
    return root


@pytest.mark.parametrize("name", ["pa_str", "pa_fsb", "duck_uuid", "duck_str"])
def test_uuids_are_left_out_and_come_back_when_named(uuid_files, name):
    path = str(uuid_files / f"{name}.parquet")
    res, msgs = importances(path)
    assert sorted(res.table.index) == ["c", "x1", "x2"]
    assert notes(msgs) and "1 likely identifier ('uid')" in notes(msgs)[0], msgs
    assert res.curves["x1"].params["stratified_on"] == ["x2", "c"]
    named, msgs = importances(path, features=["x1", "x2", "c", "uid"])
    assert named.kinds["uid"] == "categorical" and not notes(msgs)
    assert any("'uid'" in m and ("identifier" in m) for m in msgs), msgs


def test_leaks_and_dates_as_strings_are_left_out_and_come_back_when_named():
    df = base(3000, seed=7)
    df["leak"] = df.y + np.random.default_rng(1).normal(0, 1e-4, len(df))
    days = pd.date_range("2020-01-01", periods=60, freq="D").strftime("%Y-%m-%d").to_numpy()
    df["day"] = days[np.random.default_rng(2).integers(0, 60, len(df))]
    res, msgs = importances(df)
    assert sorted(res.table.index) == ["c", "x1", "x2"]
    assert notes(msgs) == ["importances: 2 of 5 columns left out of the default features: 1 likely leak ('leak'); "
                           "1 dates as strings ('day'); name them in features= to score them; keep_suspect=True "
                           "keeps the 2 suspect columns"]
    named, msgs = importances(df, features=["x1", "x2", "c", "leak", "day"])
    assert {"leak", "day"} <= set(named.table.index)
    assert any("'leak' predicts 'y' almost perfectly" in m for m in msgs)
    assert any("'day' holds dates as strings" in m for m in msgs)


def test_stratpd_leaves_suspects_out_of_its_default_stratifying_columns(rownum_lake):
    with pytest.warns(UserWarning, match=r"^daskpd: 1 of 4 columns left out of the stratifying columns: 1 row "
                                         r"number \('row'\); name them in stratify_on= to use them; keep_suspect=True "
                                         r"keeps the suspect column$"):
        res = daskpd.stratpd(str(rownum_lake), target="y", feature="x1", progress=False)
    assert res.params["stratified_on"] == ["x2", "c"]
    with pytest.warns(UserWarning, match="looks like a row number"):
        named = daskpd.stratpd(str(rownum_lake), target="y", feature="x1", stratify_on=["x2", "c", "row"],
                               progress=False)
    assert named.params["stratified_on"] == ["x2", "c", "row"]
    with pytest.warns(UserWarning, match="looks like a row number"):
        kept = daskpd.catstratpd(str(rownum_lake), target="y", feature="c", keep_suspect=True, progress=False)
    assert "row" in kept.params["stratified_on"]


def test_a_stratification_fitted_on_default_sets_is_reused(rownum_lake):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        strat = daskpd.fit_stratification(str(rownum_lake), target="y", progress=False)
        assert strat.features == ["x1", "x2", "c"] and strat.stratify_on == ["x1", "x2", "c"]
        assert strat.params["left_out"] == {"row": "row number"}
        again, msgs = importances(str(rownum_lake), stratification=strat)
        direct = daskpd.stratpd(str(rownum_lake), target="y", feature="x2", stratification=strat, progress=False)
    assert sorted(again.table.index) == ["c", "x1", "x2"] and again.params["skipped_features"] == {"row": "row number"}
    np.testing.assert_array_equal(direct.pd, again.curves["x2"].pd)


def test_every_default_feature_suspect_is_an_error_that_says_what_works():
    df = pd.DataFrame({"id": np.arange(3000), "y": np.random.default_rng(0).normal(size=3000)})
    df["id2"] = df.id * 3 + 7
    with pytest.raises(DataError, match=r"every default feature was left out .*'id' \(row number\); 'id2' \(likely "
                                        r"identifier\); name the features to use, or pass keep_suspect=True"):
        daskpd.importances(df, target="y", progress=False)


def thresholded(n=20_000, seed=0, noise=1.0):
    """y = 2 x1 + x2 + noise and t = (y > median(y)): a thresholded copy of the target."""
    r = np.random.default_rng(seed)
    df = pd.DataFrame({"x1": r.uniform(0, 1, n), "x2": r.uniform(0, 1, n)})
    df["y"] = 2 * df.x1 + df.x2 + r.normal(0, noise, n)
    df["t"] = (df.y > df.y.median()).astype(int)
    return df


def slope(res) -> float:
    ok = np.isfinite(np.asarray(res.pd))
    return float(np.polyfit(np.asarray(res.x)[ok], np.asarray(res.pd)[ok], 1)[0])


def test_a_thresholded_copy_of_the_target_is_a_leak_left_out_of_the_stratifying_columns():
    df = thresholded()
    # stratified on t, x1's curve is absorbed: slope 0.84 of the true 2, and nothing said
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        kept = daskpd.stratpd(df, target="y", feature="x1", keep_suspect=True, progress=False)
    assert kept.params["stratified_on"] == ["x2", "t"] and slope(kept) < 1.2
    assert any("'t' looks like a thresholded or binned copy of 'y'" in str(w.message) for w in rec)
    with pytest.warns(UserWarning, match=r"^daskpd: 1 of 3 columns left out of the stratifying columns: 1 likely leak "
                                         r"\('t'\); name them in stratify_on= to use them; keep_suspect=True"):
        res = daskpd.stratpd(df, target="y", feature="x1", progress=False)
    assert res.params["stratified_on"] == ["x2"] and 1.9 < slope(res) < 2.1
    # named: used, with the warning that says what it is and what it does
    with pytest.warns(UserWarning, match=r"column 't' looks like a thresholded or binned copy of 'y' \(its 2 levels "
                                         r"hold 100\.0% of the sampled rows in consecutive intervals of 'y' and "
                                         r"explain R\^2 0\.75 of the variance of its ranks\): stratifying on it absorbs"):
        named = daskpd.stratpd(df, target="y", feature="x1", stratify_on=["x2", "t"], progress=False)
    assert named.params["stratified_on"] == ["x2", "t"]
    imp, msgs = importances(df)
    assert sorted(imp.table.index) == ["x1", "x2"]
    assert notes(msgs) == ["importances: 1 of 3 columns left out of the default features: 1 likely leak ('t'); "
                           "name them in features= to score them; keep_suspect=True keeps the suspect column"]


@pytest.mark.parametrize("make, verdict", [
    (lambda y, r: pd.qcut(y, 10, labels=False), "leak"),  # deciles
    (lambda y, r: pd.qcut(y, 3, labels=["lo", "mid", "hi"]).astype(str), "leak"),  # terciles, as text
    (lambda y, r: np.round(y), "leak"),
    (lambda y, r: y > np.quantile(y, 0.9), "warn"),  # R^2 0.27 (ranks): a warning only
    (lambda y, r: (y + r.normal(0, 0.2 * y.std(), len(y)) > np.median(y)).astype(int), "warn"),  # blurred
    (lambda y, r: y > np.quantile(y, 0.99), None),  # R^2 0.03
])
def test_binned_copies_of_the_target(make, verdict):
    r = np.random.default_rng(3)
    df = thresholded(10_000, seed=3)
    df["t"] = make(df.y.to_numpy(), r)
    got = suspect_columns(df, "y", ["x1", "x2", "t"])
    if verdict is None:
        assert got == {}
    else:
        assert list(got) == ["t"] and got["t"].why == "likely leak" and got["t"].leave == (verdict == "leak")
        assert ("may be" in got["t"].message) == (verdict == "warn")


def test_strong_causes_are_not_binned_copies():
    """A dominant continuous cause (x1 explains 99 % of y), a discrete cause whose levels
    separate the target's modes, and one whose levels overlap: none is flagged."""
    r = np.random.default_rng(4)
    n = 10_000
    x1, x2, e = r.uniform(0, 1, n), r.uniform(0, 1, n), r.normal(0, 1, n)
    g, g5 = r.integers(0, 2, n), r.integers(0, 5, n)
    for cols, y in [({"x1": x1, "x2": x2}, 10 * x1 + x2 + r.normal(0, 0.1, n)),
                    ({"x1": x1, "x2": x2, "g": g}, 2 * x1 + x2 + 10 * g + e),
                    ({"x1": x1, "x2": x2, "g": g}, 2 * x1 + x2 + 10 * g),
                    ({"x1": x1, "x2": x2, "g": g}, 2 * x1 + x2 + 3 * g + e),
                    ({"x1": x1, "x2": x2, "g": g5}, 2 * x1 + x2 + 10 * g5 + e),
                    ({"x1": x1, "x2": x2, "g": g5}, 2 * x1 + x2 + 3 * g5 + e),
                    ({"x1": x1, "x2": x2, "g": g}, np.round(5 * x1) + 20 * g)]:  # a target on a lattice
        df = pd.DataFrame({**cols, "y": y})
        assert suspect_columns(df, "y", list(cols)) == {}, df.columns
    # a thresholded copy of a count target: its cut falls between two neighbouring counts
    cnt = r.poisson(np.exp(1 + 2 * x1 + x2))
    df = pd.DataFrame({"x1": x1, "x2": x2, "busy": (cnt >= np.median(cnt)).astype(int), "y": cnt})
    assert list(suspect_columns(df, "y", ["x1", "x2", "busy"])) == ["busy"]


def test_binned_copies_on_real_tables(shared_data):
    """The public tables' own columns are not flagged; a thresholded copy added is."""
    data = shared_data
    for name, target in [("bike_hour.csv", "cnt"), ("bike_day.csv", "cnt"), ("boston.csv", "medv"),
                         ("california_housing.csv", "median_house_value"), ("rent.csv", "price"),
                         ("bulldozer_valid.csv", "SalePrice")]:
        df = pd.read_csv(data / name, low_memory=False).sample(frac=1.0, random_state=0).iloc[:10_000]
        got = suspect_columns(df, target, [c for c in df.columns if c != target], n_rows=None)
        assert {c for c, s in got.items() if "thresholded" in s.message} == set(), name
        y = pd.to_numeric(df[target], errors="coerce")
        df["busy"] = (y > y.median()).astype(int)
        got = suspect_columns(df, target, [c for c in df.columns if c != target])
        assert got["busy"].leave and "thresholded" in got["busy"].message, name


def binned_designs(seed, n=10_000):
    """``{name: (column, target, x1 or None, x2)}``: binned copies of the target and
    discrete causes (docs/importances.md, "Thresholded and binned copies of the target")."""
    r = np.random.default_rng(seed)
    x1, x2, e = r.uniform(0, 1, n), r.uniform(0, 1, n), r.normal(0, 1, n)
    y = 2 * x1 + x2 + e
    sd = y.std()
    g, g5, g10 = r.integers(0, 2, n), r.integers(0, 5, n), (r.uniform(0, 1, n) < 0.1).astype(int)
    cnt = r.poisson(np.exp(1 + 2 * x1 + x2))
    d = {"y > median(y)": ((y > np.median(y)).astype(int), y),
         "y > 1 (bool)": (y > 1, y),
         "terciles of y (text)": (pd.qcut(y, 3, labels=["lo", "mid", "hi"]).astype(str), y),
         "deciles of y": (pd.qcut(y, 10, labels=False), y),
         "round(y)": (np.round(y), y),
         "exp(y) > median (target exp(y))": ((np.exp(y) > np.median(np.exp(y))).astype(int), np.exp(y))}
    for s in (0.05, 0.1, 0.2):
        d[f"y + N(0, {s} sd) > median"] = ((y + r.normal(0, s * sd, n) > np.median(y)).astype(int), y)
    d["y > q90"] = (y > np.quantile(y, 0.9), y)
    d["y > q99"] = (y > np.quantile(y, 0.99), y)
    d["deciles of y + N(0, 0.05 sd)"] = (pd.qcut(y + r.normal(0, 0.05 * sd, n), 10, labels=False), y)
    for b in (3, 4, 5, 6, 10):
        d[f"g in y = 2 x1 + x2 + {b} g + e"] = (g, y + b * g)
    d["g in y = 2 x1 + x2 + 10 g"] = (g, 2 * x1 + x2 + 10 * g)
    for b in (2, 3, 4, 6, 10):
        d[f"g5 in y = 2 x1 + x2 + {b} g5 + e"] = (g5, y + b * g5)
    d["g (10%) in y = 2 x1 + x2 + 6 g + e"] = (g10, y + 6 * g10)
    d["round(x1, 1) in y = 10 round(x1, 1) + x2 + N(0, 0.1)"] = (np.round(x1, 1), 10 * np.round(x1, 1) + x2
                                                                 + r.normal(0, 0.1, n))
    d["g in y = g + x2"] = (g, g + x2)
    d["y >= median, y Poisson"] = ((cnt >= np.median(cnt)).astype(int), cnt)
    d["g in y = 30 g + Poisson"] = (g, 30 * g + r.poisson(np.exp(1 + x1)))
    return {k: (c, t, x1, x2) for k, (c, t) in d.items()}


#: the verdict of each design on every seed ("leak", "warning", "-"), when the same
BINNED_VERDICTS = {"y > median(y)": "leak", "y > 1 (bool)": "leak", "terciles of y (text)": "leak",
                   "deciles of y": "leak", "round(y)": "leak", "exp(y) > median (target exp(y))": "leak",
                   "y + N(0, 0.05 sd) > median": "leak", "y + N(0, 0.2 sd) > median": "warning", "y > q90": "warning",
                   "y > q99": "-", "deciles of y + N(0, 0.05 sd)": "-", "g in y = g + x2": "leak",
                   "y >= median, y Poisson": "leak", "g in y = 30 g + Poisson": "-"}


def test_binned_copy_designs_table():
    """The table of docs/importances.md: ``pytest -s -k designs_table`` prints it."""
    from daskpd._data.suspect_steps import step_copy

    rows = {}
    for seed in range(3):
        for name, (c, y, x1, x2) in binned_designs(seed).items():
            st = step_copy(c, y)
            rows.setdefault(name, []).append((st, "leak" if st.is_leak else "warning" if st.is_warning else "-"))
    print("\n| column | purity | dense cuts | R² (ranks) | verdict (3 seeds) | StratPD slope of x1 on it (truth 2) |")
    for name, got in rows.items():
        st, verdict = got[0]
        verdicts = sorted({v for _, v in got})
        if name in BINNED_VERDICTS:
            assert verdicts == [BINNED_VERDICTS[name]], (name, got)
        if name.startswith(("g in y = 2", "g5 in", "g (10%)")):
            assert verdicts == ["-"], (name, got)  # a discrete cause
        c, y, x1, x2 = binned_designs(0)[name]
        slope_text = ""
        if "Poisson" not in name and "exp" not in name and "round(x1" not in name and name != "g in y = g + x2":
            df = pd.DataFrame({"x1": x1, "x2": x2, "t": c, "y": y})
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res = daskpd.stratpd(df, target="y", feature="x1", stratify_on=["x2", "t"], progress=False)
            slope_text = f"{slope(res):.2f}"
        print(f"| {name} | {st.purity:.3f} | {st.dense:.2f} | {st.r2:.2f} | {'/'.join(v for _, v in got)} | "
              f"{slope_text} |")
