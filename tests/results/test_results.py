"""daskpd.results: the shared frame heads, the one JSON conversion, the atomic writer."""
import datetime as dt
import json
import os

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

import daskpd
from daskpd._errors import DataError
from daskpd.results import (CURVE_HEAD, TABLE_HEAD, CurveResult, Result, ResultMixin, atomic_path, curve_frame,
                            dump_json, json_clean, json_default, table_frame, write_parquet)

NUMERIC_HEAD = [c for c in CURVE_HEAD if c != "category"]
CATEGORICAL_HEAD = [c for c in CURVE_HEAD if c != "x"]


# ------------------------------------------------------------------ frame heads
def test_curve_frame_numeric_and_categorical_heads():
    f = curve_frame("a", "numeric", np.array([1, 2, 3]), [0.0, np.nan, 2.0], count=np.array([5, 0, 7]), n_rows=12,
                    extra={"slope": np.array([1.0, 2.0, 3.0]), "skipped": None})
    assert list(f.columns) == NUMERIC_HEAD + ["slope"]
    assert f.x.dtype == np.float64 and f.pd.dtype == np.float64 and f.n_rows.dtype == np.int64
    assert f.supported.tolist() == [True, False, True]  # default: where pd is finite
    assert (f.feature == "a").all() and (f.kind == "numeric").all() and (f.n_rows == 12).all()
    g = curve_frame("c", "categorical", pd.Index(pd.array([3, 1], dtype="Int64")), [1.0, 0.0], supported=[True, False])
    assert list(g.columns) == CATEGORICAL_HEAD
    assert str(g.category.dtype) == "Int64"  # the labels keep their dtype
    assert g["count"].isna().all() and g.supported.tolist() == [True, False]
    h = curve_frame("c", "categorical", ["x", 2], [1.0, 0.0])
    assert h.category.tolist() == ["x", 2] and h.category.dtype == object


def test_table_frame_ranks_by_importance_ties_first_nan_last():
    t = table_frame(["a", "b", "c", "d"], ["numeric"] * 4, [0.2, np.nan, 0.5, 0.2])
    assert list(t.columns) == list(TABLE_HEAD)
    assert t["rank"].tolist() == [2, 4, 1, 3] and t.feature.tolist() == ["a", "b", "c", "d"]  # row order kept


# ------------------------------------------------------------------ JSON
def test_json_default_and_clean():
    assert json_default(np.int64(3)) == 3 and json_default(np.array([1.5])) == [1.5]
    assert json_default(dt.date(2026, 1, 2)) == "2026-01-02"
    assert json_default(os.path.join("a", "b")) == os.path.join("a", "b")
    clean = json_clean({1: (np.float32(0.5), float("nan")), "t": dt.time(3, 4), "a": np.array([np.inf, 2.0])})
    assert clean == {"1": [0.5, None], "t": "03:04:00", "a": [None, 2.0]}
    text = dump_json({"x": np.nan, "p": object.__new__(type("P", (), {"__str__": lambda s: "P!"}))})
    assert json.loads(text) == {"x": None, "p": "P!"} and text.endswith("\n")


# ------------------------------------------------------------------ atomic files
def test_atomic_path_replaces_or_leaves_the_old_file(tmp_path):
    p = tmp_path / "f.txt"
    p.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_path(p) as tmp:
            with open(tmp, "w") as fh:
                fh.write("half")
            raise RuntimeError("killed mid-write")
    assert p.read_text() == "old" and sorted(x.name for x in tmp_path.iterdir()) == ["f.txt"]
    with atomic_path(p) as tmp:
        with open(tmp, "w") as fh:
            fh.write("new")
        assert p.read_text() == "old"  # readers see the old file until the rename
    assert p.read_text() == "new" and sorted(x.name for x in tmp_path.iterdir()) == ["f.txt"]
    # a leftover temporary file of an earlier process with this pid is replaced, not an error
    leftover = tmp_path / f".g.txt.tmp-{os.getpid()}"
    leftover.mkdir()
    with atomic_path(tmp_path / "g.txt") as tmp:
        with open(tmp, "w") as fh:
            fh.write("g")
    assert (tmp_path / "g.txt").read_text() == "g" and not leftover.exists()


def test_write_parquet_puts_metadata_in_the_schema(tmp_path):
    df = pd.DataFrame({"a": [1, 2], "b": ["x", None]})
    out = write_parquet(df, tmp_path / "t.parquet", {"method": "m", "n": np.int64(2), "bad": np.nan})
    assert json.loads(pq.read_schema(out).metadata[b"daskpd"]) == {"method": "m", "n": 2, "bad": None}
    pd.testing.assert_frame_equal(pd.read_parquet(out), df)
    assert [p.name for p in tmp_path.iterdir()] == ["t.parquet"]


# ------------------------------------------------------------------ the classes
def test_result_base_and_the_old_name():
    assert ResultMixin is Result
    with pytest.raises(TypeError):
        CurveResult()  # abstract: curve() and to_frame() are needed


class _Labels(CurveResult):
    """A minimal curve: the base class supplies to_frame, summary and to_parquet."""

    feature, kind, n_rows = "c", "categorical", 4

    def __init__(self, labels):
        self.labels = labels

    def curve(self):
        return {"positions": self.labels, "pd": np.arange(len(self.labels), dtype=float)}


def test_the_base_writes_any_curve_and_names_mixed_labels(tmp_path):
    out = _Labels(["a", "b"]).to_parquet(tmp_path / "ok.parquet")
    assert pd.read_parquet(out).columns.tolist() == CATEGORICAL_HEAD
    assert _Labels(["a", "b"]).summary() == "c: 2 categories, range [0, 1], 4 rows"
    with pytest.raises(DataError, match="category labels of 'c'"):
        _Labels(["a", 1]).to_parquet(tmp_path / "c.parquet")
    assert [p.name for p in tmp_path.iterdir()] == ["ok.parquet"]  # nothing half-written


def test_every_curve_result_shares_the_head():
    rng = np.random.default_rng(0)
    n = 2_000
    df = pd.DataFrame({"a": rng.integers(0, 40, n) / 4, "g": rng.choice(["p", "q", "r"], n)})
    df["y"] = df.a * 2 + (df.g == "q")

    def f(X):
        return X["a"].to_numpy() * 2 + (X["g"] == "q").to_numpy()

    cols = ["a", "g"]
    curves = {
        "stratpd": daskpd.stratpd(df, target="y", feature="a", min_slopes_per_x=1),  # 3 leaves (g stratifies)
        "catstratpd": daskpd.catstratpd(df, target="y", feature="g"),
        "pd": daskpd.partial_dependence(f, df, "a", columns=cols, grid_resolution=5),
        "pd_cat": daskpd.partial_dependence(f, df, "g", columns=cols),
        "ice": daskpd.ice(f, df, "a", columns=cols, grid_resolution=5, n_lines=3),
        "ale": daskpd.ale(f, df, "a", columns=cols, bins=4),
        "ale_cat": daskpd.ale(f, df, "g", columns=cols),
        "marginal": daskpd.marginal(df, "a", target="y", bins=4),
    }
    for name, r in curves.items():
        assert isinstance(r, CurveResult), name
        fr = r.to_frame()
        head = NUMERIC_HEAD if r.kind == "numeric" else CATEGORICAL_HEAD
        assert list(fr.columns[:len(head)]) == head, name
        np.testing.assert_array_equal(fr.pd.to_numpy(), np.asarray(r.pd, dtype=float), err_msg=name)
        assert (fr.n_rows == r.n_rows).all() and r.n_rows == n, name
        assert r.summary().startswith(r.feature), name
