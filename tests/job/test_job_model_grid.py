"""An incremental night whose new rows hold values outside the model-based layout (the
grids and bins the base run built from its rows): never a silent comparison on the old
grid.  With ``refit = "auto"`` the night builds the grids and bins again from all the
rows (the partial dependence reaches the new values) and its log and manifest say so;
with ``refit = "never"`` it keeps them, and its log, manifest and drift rows name the
feature and the values beyond."""
from __future__ import annotations

import io
import json

import numpy as np
import pandas as pd
import pytest

from daskpd.job.run import run_job
from test_job_newold import chunk

SPEC = """
name = "g"
target = "y"
features = ["x1", "x2"]
methods = ["partial_dependence", "ale", "marginal"]
[source]
path = "{lake}"
[model]
path = "{model}"
trust_model = true
n_trials = 10
row_id = "id"
[partial_dependence]
grid_resolution = 20
[ale]
bins = 5
[marginal]
bins = 5
[output]
plots = false
report = false
[run]
incremental = true
refit = "{refit}"
"""


def beyond(seed: int, n: int) -> pd.DataFrame:
    """Rows of the same generator with x1 in 11..14 (the base run's x1: 0..10)."""
    d = chunk(seed, n)
    x1 = np.random.default_rng(seed + 1).integers(11, 15, n).astype(float)
    return d.assign(x1=x1, y=d["y"] + 0.5 * (x1 ** 2 - d["x1"] ** 2))


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    import joblib
    from sklearn.tree import DecisionTreeRegressor

    fit = pd.concat([chunk(99, 4000), beyond(98, 1000)])
    p = tmp_path_factory.mktemp("model") / "model.joblib"
    joblib.dump(DecisionTreeRegressor(max_depth=8, random_state=0).fit(fit[["x1", "x2"]], fit["y"]), p)
    return p


def night(dask_cluster, tmp_path, model_path, refit):
    """r1 on 12,000 rows (x1 in 0..10); r2 adds 1,000 rows with x1 in 11..14 (8% of the
    rows: under refit_share, so the row count alone keeps the layout)."""
    lake = tmp_path / "lake"
    lake.mkdir()
    for i in range(3):
        chunk(i, 4000).assign(id=np.arange(4000) + 4000 * i).to_parquet(lake / f"p{i:03d}.parquet", index=False)
    spec = tmp_path / "job.toml"
    spec.write_text(SPEC.format(lake=lake, model=model_path, refit=refit))
    out = tmp_path / "out"

    def run(rid):
        log = io.StringIO()
        d = run_job(spec, scheduler=dask_cluster, output=out, run_id=rid, progress=False, out=False, log=log)
        return d, json.loads((d / "manifest.json").read_text()), log.getvalue()

    r1 = run("r1")
    beyond(11, 1000).assign(id=np.arange(1000) + 20_000).to_parquet(lake / "p011.parquet", index=False)
    return lake, run, r1, run("r2")


def x_range(run_dir, method, feature="x1"):
    c = pd.read_parquet(run_dir / "curves.parquet")
    x = c[(c["method"] == method) & (c["feature"] == feature)]["x"]
    return float(x.min()), float(x.max())


def test_auto_builds_the_grids_again_on_values_beyond_them(dask_cluster, tmp_path, model_path):
    lake, run, (d1, m1, _), (d2, m2, log2) = night(dask_cluster, tmp_path, model_path, "auto")
    assert x_range(d1, "partial_dependence") == (0.0, 10.0)  # x1's 11 values are the grid
    assert m2["incremental"]["mode"] == "incremental"  # the file plan: one new file, 8% of the rows
    mm = m2["incremental"]["model"]
    assert mm["mode"] == "full" and mm["layout_rebuilt"] is True
    assert mm["outside_layout"] == [{"feature": "x1", "kind": "numeric", "layout_range": [0.0, 10.0],
                                     "new_range": [11.0, 14.0], "grid": [0.0, 10.0]}]
    assert "the new rows fall outside the grids and bins of run r1" in mm["reason"]
    assert ("daskpd: model-based methods: full after all: the curves are computed again on grids and bins extended "
            "to the new values (feature 'x1': new values up to 14, beyond the range [0, 10] the grids and bins "
            "were built from; the partial dependence grid spans [0, 10])") in log2
    # the curves reach the new values: partial dependence's grid (15 values < 20), ALE's and the marginal's bins
    assert x_range(d2, "partial_dependence") == (0.0, 14.0)
    assert x_range(d2, "ale")[1] == 14.0 and x_range(d2, "marginal")[1] > 10.0
    # the model-based curves were not compared on two layouts: the manifest says why
    (rec,) = m2["drift"]
    assert "built again" in rec["skipped"] and not (d2 / "drift").exists()
    # the next night, in the range: incremental again, under the extended layout
    chunk(12, 1000).assign(id=np.arange(1000) + 30_000).to_parquet(lake / "p012.parquet", index=False)
    d3, m3, log3 = run("r3")
    assert m3["incremental"]["model"]["mode"] == "incremental" and "outside_layout" not in m3["incremental"]["model"]
    assert "outside" not in log3 and x_range(d3, "partial_dependence") == (0.0, 14.0)
    t = pd.read_parquet(d3 / "drift" / "comparisons.parquet").set_index(["method", "feature"])
    assert len(t) == 6 and (t["rows_new"] == 1000).all() and (t["rows_old"] == 13000).all()
    # the model's curves did not move (the marginal plot's top bin, [10, 14], did: the old rows there reach 14, the
    # new ones stop at 10)
    assert t.drop(index=[("marginal", "x1")])["status"].eq("ok").all(), t[["status", "z", "z_crit"]]


def test_never_keeps_the_grids_and_says_so(dask_cluster, tmp_path, model_path):
    _, _, (d1, _, _), (d2, m2, log2) = night(dask_cluster, tmp_path, model_path, "never")
    mm = m2["incremental"]["model"]
    assert mm["mode"] == "incremental" and mm["layout_rebuilt"] is False
    assert [o["feature"] for o in mm["outside_layout"]] == ["x1"] and mm["outside_layout"][0]["new_range"] == [11, 14]
    line = next(ln for ln in log2.splitlines() if "are kept" in ln)
    assert line.startswith("daskpd: warning: the model-based grids and bins of run r1 are kept ([run] refit = "
                           "\"never\") although the new rows fall outside them: feature 'x1': new values up to 14, "
                           "beyond the range [0, 10]")
    assert 'refit = "auto" builds them again' in line
    assert x_range(d2, "partial_dependence") == (0.0, 10.0)  # kept, and said
    t = pd.read_parquet(d2 / "drift" / "comparisons.parquet").set_index(["method", "feature"])
    assert t.loc[("partial_dependence", "x1"), "why"].endswith(
        "the new rows hold values outside the kept grids and bins, which do not reach them (the run's log names them)")
    assert "outside the kept grids" not in t.loc[("partial_dependence", "x2"), "why"]
    # every new x1 lies beyond ALE's and the marginal plot's kept bins: those curves of the new rows do not exist
    for m in ("ale", "marginal"):
        assert t.loc[(m, "x1"), "status"] == "untested"
        assert t.loc[(m, "x1"), "why"].startswith("untested: no new row falls inside the kept bins; the new rows hold")


def test_outside_layout_names_new_categories_and_both_ends():
    """The check itself, on a pandas frame (one summary pass, dask's own)."""
    from types import SimpleNamespace

    from daskpd.job.model_state import describe_outside, outside_layout
    from daskpd.model._multi import Layout

    layout = Layout(["a", "c", "d"], {(20, (0.05, 0.95)): {"a": np.linspace(1.0, 9.0, 20)}},
                    ranges={"a": {"kind": "numeric", "vmin": 0.0, "vmax": 10.0},
                            "c": {"kind": "categorical", "levels": ["u", "v"]},
                            "d": {"kind": "numeric", "vmin": 0.0, "vmax": 1.0}})
    new = pd.DataFrame({"a": [-2.5, 3.0, 12.0], "c": ["u", "w", "z"], "d": [0.0, 0.5, 1.0]})
    got = outside_layout(layout, SimpleNamespace(frame=new))
    assert got == [{"feature": "a", "kind": "numeric", "layout_range": [0.0, 10.0], "new_range": [-2.5, 12.0],
                    "grid": [1.0, 9.0]},
                   {"feature": "c", "kind": "categorical", "new_levels": ["w", "z"]}]
    assert describe_outside(got) == ("feature 'a': new values down to -2.5 and up to 12, beyond the range [0, 10] "
                                     "the grids and bins were built from; the partial dependence grid spans [1, 9]; "
                                     "feature 'c': 2 new categories ('w', 'z')")
    assert outside_layout(layout, SimpleNamespace(frame=new.iloc[[1]].assign(c="v"))) == []
    assert outside_layout(Layout(["a"], {}), SimpleNamespace(frame=new)) == []  # an older layout: no ranges


def between(seed: int, n: int) -> pd.DataFrame:
    """Rows of the same generator with x2 = 0.6: inside x2's range [0, 1], not one of the
    five values (0, 0.25, .., 1) that are its partial dependence grid and its marginal bins."""
    d = chunk(seed, n)
    return d.assign(x2=0.6, y=d["y"] + 4 * (0.6 - d["x2"]))


def between_night(dask_cluster, tmp_path, model_path, refit):
    lake = tmp_path / "lake"
    lake.mkdir()
    for i in range(3):
        chunk(i, 4000).assign(id=np.arange(4000) + 4000 * i).to_parquet(lake / f"p{i:03d}.parquet", index=False)
    spec = tmp_path / "job.toml"
    spec.write_text(SPEC.format(lake=lake, model=model_path, refit=refit))
    out = tmp_path / "out"

    def run(rid):
        log = io.StringIO()
        d = run_job(spec, scheduler=dask_cluster, output=out, run_id=rid, progress=False, out=False, log=log)
        return d, json.loads((d / "manifest.json").read_text()), log.getvalue()

    d1 = run("r1")[0]
    between(11, 1000).assign(id=np.arange(1000) + 20_000).to_parquet(lake / "p011.parquet", index=False)
    return d1, run("r2")


HELD = ["the partial dependence grid", "the marginal plot's bins"]


@pytest.mark.parametrize("refit", ["auto", "never"])
def test_a_new_value_between_a_grid_of_distinct_values_is_found(dask_cluster, tmp_path, model_path, refit):
    d1, (d2, m2, log2) = between_night(dask_cluster, tmp_path, model_path, refit)
    pd1 = pd.read_parquet(d1 / "curves.parquet").query("method == 'partial_dependence' and feature == 'x2'")
    assert sorted(pd1["x"]) == [0.0, 0.25, 0.5, 0.75, 1.0]  # x2's distinct values are its grid
    mm = m2["incremental"]["model"]
    assert mm["outside_layout"] == [{"feature": "x2", "kind": "numeric", "layout_range": [0.0, 1.0],
                                     "new_range": [0.6, 0.6], "grid": [0.0, 1.0], "new_values": [0.6],
                                     "held_by": HELD}]
    what = ("feature 'x2': 1 new value inside the range (0.6), not among the distinct values the partial dependence "
            "grid and the marginal plot's bins hold")
    assert what in log2
    pd2 = pd.read_parquet(d2 / "curves.parquet").query("method == 'partial_dependence' and feature == 'x2'")
    if refit == "auto":  # built again: the grid holds the new value
        assert mm["mode"] == "full" and mm["layout_rebuilt"] is True
        assert sorted(pd2["x"]) == [0.0, 0.25, 0.5, 0.6, 0.75, 1.0]
        assert "model-based methods: full after all" in log2
    else:  # kept, and said: in the log and in the drift rows of x2
        assert mm["mode"] == "incremental" and mm["layout_rebuilt"] is False
        assert sorted(pd2["x"]) == [0.0, 0.25, 0.5, 0.75, 1.0]
        assert "daskpd: warning: the model-based grids and bins of run r1 are kept" in log2
        t = pd.read_parquet(d2 / "drift" / "comparisons.parquet").set_index(["method", "feature"])
        note = ("the new rows hold values that the partial dependence grid and the marginal plot's bins (the "
                "feature's distinct values, kept) do not hold (the run's log names them)")
        assert note in t.loc[("partial_dependence", "x2"), "why"]
        assert "distinct values" not in t.loc[("partial_dependence", "x1"), "why"]


def test_outside_layout_names_new_values_between_distinct_values():
    """A numeric feature whose grid (fewer points than grid_resolution) and marginal bins
    are its distinct values: a new value inside the range, not among them, is named; a
    percentile grid (grid_resolution points) and bins of edges take any value inside."""
    from types import SimpleNamespace

    from daskpd.job.model_state import describe_outside, outside_layout
    from daskpd.model._marginal import marginal_spec
    from daskpd.model._multi import Layout
    from daskpd._engine.stats import summarize_column

    d = np.array([0.0, 0.25, 0.5, 0.75, 1.0])
    layout = Layout(["a", "d"], {(20, (0.05, 0.95)): {"a": np.linspace(1.0, 9.0, 20), "d": d}},
                    marginal=[marginal_spec("d", "numeric", summarize_column(pd.Series(d, name="d"), "numeric"), 5,
                                            "quantile", {})],
                    ranges={"a": {"kind": "numeric", "vmin": 0.0, "vmax": 10.0},
                            "d": {"kind": "numeric", "vmin": 0.0, "vmax": 1.0}})
    new = pd.DataFrame({"a": [2.5, 3.0, 4.0, 5, 6, 7, 8], "d": [0.6, 0.5, 0.1, 0.2, 0.3, 0.4, 0.9]})
    (got,) = outside_layout(layout, SimpleNamespace(frame=new))
    assert got == {"feature": "d", "kind": "numeric", "layout_range": [0.0, 1.0], "new_range": [0.1, 0.9],
                   "grid": [0.0, 1.0], "new_values": [0.1, 0.2, 0.3, 0.4, 0.6, 0.9], "held_by": HELD}
    assert describe_outside([got]) == ("feature 'd': 6 new values inside the range (0.1, 0.2, 0.3, 0.4, 0.6 and 1 "
                                       "more), not among the distinct values the partial dependence grid and the "
                                       "marginal plot's bins hold")
    assert outside_layout(layout, SimpleNamespace(frame=new.assign(d=0.5))) == []
