"""Nightly runs over lakes as they live, on a real cluster: a date-partitioned hive lake,
a Delta Lake table and an Apache Iceberg table (a SQL catalog on SQLite), each grown by
nightly appends and then hit by a delete and an overwrite.  Every appended night is
incremental -- only the new files scanned -- and equals a full scan of the whole lake
under the same stratification; every delete or overwrite is a full run whose reason is
one line; the manifest records the table's version."""
from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import daskpd
from daskpd.job.run import run_job
from nightly_lakes import FEATURES, KINDS, Lake

SPEC = """
name = "nightly"
target = "SalePrice"
features = {features}
categorical = ["ModelID"]
sample_size = 3000
{source}
[output]
plots = false
report = false
[run]
incremental = true
refit_share = 0.9
"""


def write_spec(tmp_path: Path, lake: Lake) -> Path:
    p = tmp_path / "job.toml"
    p.write_text(SPEC.format(features=json.dumps(FEATURES), source=lake.source_toml()))
    return p


def manifest(run_dir: Path) -> dict:
    return json.loads((run_dir / "manifest.json").read_text())


def check_equals_full_scan(run_dir: Path, lake: Lake, base: Path, **kw) -> None:
    """The run's importances and curves equal a full scan of the lake now under the
    stratification of the run that fitted the trees (``base``)."""
    strat = daskpd.Stratification.load(base / "state" / "stratification.pkl")
    whole = daskpd.strat_curves_and_importances(lake.data(), target="SalePrice", features=FEATURES,
                                                categorical_features=["ModelID"], stratification=strat,
                                                progress=False, **kw)
    got = pd.read_parquet(run_dir / "importances.parquet").set_index("feature")["importance"].sort_index()
    want = whole.table["importance"].sort_index()
    np.testing.assert_allclose(got.to_numpy(), want.to_numpy(), rtol=1e-9)
    curves = pd.read_parquet(run_dir / "curves.parquet")
    for f, res in whole.curves.items():
        mine = curves[curves["feature"] == f]["pd"].to_numpy(dtype=float)
        np.testing.assert_allclose(mine, np.asarray(res.pd, dtype=float), rtol=1e-9, atol=1e-9, err_msg=f)


def nightly_cycle(tmp_path: Path, lake: Lake, scheduler: str, storage_options=None) -> None:
    """Three nights appended (each incremental, each equal to a full scan), then a
    delete and a rewrite (each a full run saying why)."""
    spec = write_spec(tmp_path, lake)
    out = tmp_path / "out"

    def run(run_id):
        log = io.StringIO()
        final = run_job(spec, scheduler=scheduler, output=out, run_id=run_id, progress=False, out=False, log=log)
        return final, manifest(final), log.getvalue()

    lake.append(2000, files=2)
    lake.append(2000)
    r1, m1, _ = run("r1")
    assert m1["incremental"]["mode"] == "full", m1["incremental"]
    if lake.kind != "hive":
        assert m1["input"]["format"] == lake.kind and m1["input"]["table"]["format"] == lake.kind
    prev = m1
    for night, files in ((2, 2), (3, 1)):
        lake.append(600, files=files)
        rn, mn, log = run(f"r{night}")
        inc = mn["incremental"]
        assert inc["mode"] == "incremental", inc
        assert len(inc["new_files"]) == files and f"({600:,} rows)" in inc["reason"], inc
        assert f"daskpd: incremental run: {inc['reason']}" in log
        assert mn["stratification"]["refitted"] is False
        assert mn["state"]["n_rows"] == 4000 + 600 * (night - 1)
        if lake.kind == "delta":  # one commit a file
            assert mn["input"]["table"]["version"] == prev["input"]["table"]["version"] + files
        elif lake.kind == "iceberg":
            assert mn["input"]["table"]["snapshot_id"] != prev["input"]["table"]["snapshot_id"]
        check_equals_full_scan(rn, lake, r1, storage_options=storage_options)
        prev = mn

    lake.delete(1)
    rd, md, log = run("r5")
    reason = md["incremental"]["reason"]
    assert md["incremental"]["mode"] == "full" and "\n" not in reason, reason
    assert f"daskpd: full run: {reason}" in log
    want = {"hive": "was removed since run r3", "delta": "(DELETE) removed", "iceberg": "since snapshot"}[lake.kind]
    assert want in reason, reason
    assert md["stratification"]["refitted"] is True

    lake.rewrite(0)
    rw, mw, _ = run("r6")
    reason = mw["incremental"]["reason"]
    assert mw["incremental"]["mode"] == "full" and "\n" not in reason, reason
    want = {"hive": "changed since run r5", "delta": "(an overwrite, update or merge)",
            "iceberg": "since snapshot"}[lake.kind]
    assert want in reason, reason


@pytest.mark.cluster
@pytest.mark.parametrize("kind", KINDS)
def test_nightly_appends_are_incremental_deletes_and_overwrites_full(dask_cluster, tmp_path, kind):
    lake = Lake(kind, str(tmp_path / "lake"), catalog_dir=str(tmp_path / "catalog"))
    nightly_cycle(tmp_path, lake, dask_cluster)


@pytest.mark.cluster
@pytest.mark.parametrize("kind", KINDS)
def test_nightly_on_s3(dask_cluster, tmp_path, s3_bucket, kind):
    """The same nights on a real S3 server (SeaweedFS on 127.0.0.1) through s3fs: the
    lake's files fingerprinted by their ETags, the tables read through their logs."""
    bucket, so = s3_bucket
    lake = Lake(kind, f"{bucket}/lake", storage_options=so, catalog_dir=str(tmp_path / "catalog"))
    nightly_cycle(tmp_path, lake, dask_cluster, storage_options=so)
    if kind == "hive":  # the stamps are the S3 server's ETags
        import s3fs

        out = tmp_path / "out" / "nightly"
        kept = json.loads((out / "r6" / "state" / "files.json").read_text())["files"]
        fs = s3fs.S3FileSystem(skip_instance_cache=True, **so)
        etags = {f"s3://{k}": v["ETag"] for k, v in fs.find(f"{bucket}/lake", detail=True).items()}
        assert kept and all(f["stamp"] == etags[f["path"]] for f in kept), (kept, etags)


@pytest.mark.cluster
def test_hive_keys_as_features_keep_their_types_on_incremental_nights(dask_cluster, tmp_path):
    """A hive key declared numeric (``day=3/``) and one declared categorical
    (``region=b/``) are features: a night that adds a new day and a new region is
    incremental, the keys read with the whole lake's types, and its result equals a
    full scan under the same stratification."""
    from nightly_lakes import GEN

    root = tmp_path / "lake"

    def night(day: int, region: str, rows: int, part: int = 0):
        d = root / f"region={region}" / f"day={day}"
        d.mkdir(parents=True, exist_ok=True)
        df = GEN.chunk(10 * day + part, rows)
        df["SalePrice"] += 500 * day + (2000 if region == "b" else 0)
        df.to_parquet(d / f"part-{part}.parquet", index=False)

    for day in range(4):
        night(day, "ab"[day % 2], 1500)
    feats = ["YearMade", "MachineHours", "ModelID", "day", "region"]
    spec = tmp_path / "job.toml"
    spec.write_text(SPEC.format(features=json.dumps(feats), source=f'[source]\npath = "{root}"')
                    .replace('categorical = ["ModelID"]', 'categorical = ["ModelID", "region"]\nnumeric = ["day"]'))
    kw = dict(scheduler=dask_cluster, output=tmp_path / "out", progress=False, out=False, log=False)
    r1 = run_job(spec, run_id="r1", **kw)
    night(4, "c", 800)  # a new day and a new region
    r2 = run_job(spec, run_id="r2", **kw)
    m2 = manifest(r2)
    assert m2["incremental"]["mode"] == "incremental", m2["incremental"]
    night(2, "a", 400, part=1)  # a late file in an old partition: appended too
    r2 = run_job(spec, run_id="r3", **kw)
    m2 = manifest(r2)
    assert m2["incremental"]["mode"] == "incremental", m2["incremental"]
    assert m2["incremental"]["new_files"] == [str(root / "region=a" / "day=2" / "part-1.parquet")]
    assert m2["incremental"]["schema"] == manifest(r1)["incremental"]["schema"]
    strat = daskpd.Stratification.load(r1 / "state" / "stratification.pkl")
    whole = daskpd.strat_curves_and_importances(str(root), target="SalePrice", features=feats,
                                                categorical_features=["ModelID", "region"], numeric_features=["day"],
                                                stratification=strat, progress=False)
    got = pd.read_parquet(r2 / "importances.parquet").set_index("feature")["importance"].sort_index()
    np.testing.assert_allclose(got.to_numpy(), whole.table["importance"].sort_index().to_numpy(), rtol=1e-9)
    curves = pd.read_parquet(r2 / "curves.parquet")
    for f, res in whole.curves.items():
        np.testing.assert_allclose(curves[curves["feature"] == f]["pd"].to_numpy(dtype=float),
                                   np.asarray(res.pd, dtype=float), rtol=1e-9, atol=1e-9, err_msg=f)
    assert curves.loc[curves["feature"] == "day", "x"].max() == 4  # the new day has a position


@pytest.mark.parametrize("kind", ["delta", "iceberg"])
def test_validate_check_data_reads_a_tables_files(tmp_path, kind, capsys):
    """``daskpd validate --check-data`` checks a table's snapshot: its data files with
    the partition values they do not store, under the spec's filters."""
    from daskpd import cli

    lake = Lake(kind, str(tmp_path / "lake"), catalog_dir=str(tmp_path / "catalog"))
    lake.append(500)
    lake.append(500)
    spec = write_spec(tmp_path, lake)
    spec.write_text(spec.read_text().replace("[output]", 'filters = [["date", "==", "2026-12-02"]]\n[output]'))
    assert cli.main(["validate", str(spec), "--check-data"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "ok: job 'nightly'" in out and "features: YearMade, MachineHours, ProductGroup, ModelID" in out
    spec.write_text(spec.read_text().replace("2026-12-02", "2027-01-01"))
    assert cli.main(["validate", str(spec), "--check-data"]) == 2
    assert "has no rows left after source.filters" in capsys.readouterr().err
