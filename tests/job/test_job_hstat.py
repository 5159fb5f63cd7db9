"""The H-statistic as a job method, on a real `dask scheduler` / `dask worker` cluster:
``interactions.parquet`` (the library's frame, ``method`` first), its heat map in
``plots/`` and ``report.html``, its summary in the manifest and on stdout, the spec's
checks of its parameters, and the same numbers as :func:`daskpd.h_statistic`."""
from __future__ import annotations

import io
import json
import tomllib

import numpy as np
import pandas as pd
import pytest

import daskpd
from daskpd.job.run import run_job
from daskpd.job.spec import SpecError
from daskpd.job.spec_parse import parse_spec

SPEC = """
name = "hjob"
target = "y"
methods = ["pd_variance", "h_statistic"]
[source]
path = "data.parquet"
[model]
path = "model.joblib"
trust_model = true
n_trials = 3
[h_statistic]
n_points = 150
"""


@pytest.fixture(scope="module")
def job_dir(tmp_path_factory):
    import joblib
    from sklearn.ensemble import HistGradientBoostingRegressor

    d = tmp_path_factory.mktemp("hjob")
    rng = np.random.default_rng(0)
    n = 2_000
    df = pd.DataFrame({"a": rng.uniform(-1, 1, n), "b": rng.normal(size=n), "c": rng.uniform(0, 4, n)})
    df["y"] = df.a ** 2 + df.b * df.c + rng.normal(scale=0.1, size=n)
    df.to_parquet(d / "data.parquet", index=False)
    model = HistGradientBoostingRegressor(max_iter=20, random_state=0).fit(df[["a", "b", "c"]], df.y)
    joblib.dump(model, d / "model.joblib")
    (d / "job.toml").write_text(SPEC)
    return d, df, model


@pytest.mark.cluster
def test_h_statistic_job_writes_table_plot_report(dask_cluster, job_dir):
    d, df, model = job_dir
    out = io.StringIO()
    final = run_job(d / "job.toml", scheduler=dask_cluster, output=d / "out", run_id="h1", progress=False, out=out,
                    log=False)
    table = pd.read_parquet(final / "interactions.parquet")
    assert list(table.columns[:4]) == ["method", "feature_1", "feature_2", "h2"]
    assert set(table.method) == {"h_statistic"} and {"h2_std", "h2_lo", "h2_hi"} <= set(table.columns)
    pairs = table[table.statistic == "pair"]
    assert (pairs.feature_1.iloc[0], pairs.feature_2.iloc[0]) == ("b", "c")  # y = a^2 + b c: b x c strongest
    assert pairs.h2.iloc[0] > 0.1 > pairs.h2.iloc[1:].max()
    totals = table[table.statistic == "total"]
    assert set(totals.feature_1) == {"a", "b", "c"} and totals.feature_2.isna().all()
    # the library's numbers (the same points: the job's random_state is the default 0)
    lib = daskpd.h_statistic(model, df[["a", "b", "c"]], n_points=150, n_trials=3, progress=False)
    np.testing.assert_allclose(pairs.sort_values(["feature_1", "feature_2"]).h2.to_numpy(),
                               pd.Series(lib.h2, index=pd.MultiIndex.from_tuples(lib.pairs)).sort_index().to_numpy(),
                               atol=1e-10)
    m = json.loads((final / "manifest.json").read_text())
    assert m["model_phases"] == ["summary", "order statistics", "h points", "model"]
    assert "interactions.parquet" in m["files"]
    entry = [p for p in m["plots"] if p["kind"] == "interaction"]
    assert len(entry) == 1 and (final / entry[0]["file"]).stat().st_size > 1000
    summ = [s for s in m["summaries"] if s["method"] == "h_statistic"]
    assert len(summ) == 1 and summ[0]["feature"] is None and "pairs H²: b x c" in summ[0]["summary"]
    report = (final / "report.html").read_text()
    assert 'id="interactions"' in report and "Friedman&#x27;s H-statistic" in report and "h2_<wbr>std" in report
    text = out.getvalue()
    assert "Friedman's H-statistic (model):" in text and "90% band over 3 trials" in text


def test_spec_checks_h_statistic_parameters(tmp_path):
    bad = SPEC.replace("n_points = 150", "n_points = 1\ntotal = \"yes\"\nn_pints = 3")
    with pytest.raises(SpecError) as ei:
        parse_spec(tomllib.loads(bad), source="job.toml", base_dir=tmp_path, check_files=False)
    text = " ".join(ei.value.errors)
    assert "h_statistic.n_points" in text and "h_statistic.total" in text and "n_pints" in text
    spec = parse_spec(tomllib.loads(SPEC), source="job.toml", base_dir=tmp_path, check_files=False)
    assert spec.params["h_statistic"]["n_points"] == 150 and spec.params["h_statistic"]["total"] is True
