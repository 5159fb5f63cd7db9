"""``[run] first_pass_cache`` / ``--first-pass-cache`` on a real cluster: a rerun that
refits reads only the appended files in pass 1 (the manifest counts the cache's hits and
misses and its bytes; the log says so), an incremental night under kept trees keeps its
new files' pass 1 in the cache so that the next refit finds them, and the refit's tables
equal a run without the cache bit for bit."""
from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd

from daskpd import cli
from daskpd.datasets import Bulldozer
from daskpd.job.run import run_job
from daskpd.job.spec import SpecError
from daskpd.job.spec_parse import load_spec

GEN = Bulldozer(random_state=0, n_models=40)

SPEC = """
name = "fp"
target = "SalePrice"
features = ["YearMade", "MachineHours", "ProductGroup", "ModelID"]
categorical = ["ModelID"]
sample_size = 3000
[source]
path = "{lake}"
[output]
plots = false
report = false
[run]
incremental = true
"""


def manifest(run_dir: Path) -> dict:
    return json.loads((run_dir / "manifest.json").read_text())


def test_refit_nightly_reads_only_the_new_files_in_pass_one(dask_cluster, tmp_path):
    lake, out = tmp_path / "lake", tmp_path / "out"
    lake.mkdir()
    for i in range(3):
        GEN.chunk(i, 2000).to_parquet(lake / f"part-{i:03d}.parquet", index=False)
    spec = tmp_path / "job.toml"
    spec.write_text(SPEC.format(lake=lake))
    kw = dict(scheduler=dask_cluster, output=out, progress=False, out=False)

    rc = cli.main(["run", str(spec), "--output", str(out), "--run-id", "r1", "--scheduler", dask_cluster, "-q",
                   "--first-pass-cache"])
    assert rc == 0
    m1 = manifest(out / "fp" / "r1")
    assert m1["first_pass_cache"] == {"used": True, "hits": 0, "misses": 3, "read_again": [],
                                      "bytes": m1["first_pass_cache"]["bytes"], "path": "cache/firstpass"}
    assert m1["first_pass_cache"]["bytes"] == sum(p.stat().st_size for p in (out / "fp" / "cache" / "firstpass")
                                                  .iterdir())

    # an incremental night (the trees kept: no pass 1) keeps the new file's pass 1 in the cache
    GEN.chunk(10, 1500).to_parquet(lake / "part-010.parquet", index=False)
    log = io.StringIO()
    r2 = run_job(spec, run_id="r2", first_pass_cache=True, refit="never", log=log, **kw)
    m2 = manifest(r2)
    assert m2["incremental"]["mode"] == "incremental" and m2["stratification"]["refitted"] is False
    assert m2["first_pass_cache"] == {"used": True, "hits": 0, "misses": 1, "read_again": [],
                                      "bytes": m2["first_pass_cache"]["bytes"], "path": "cache/firstpass",
                                      "new_files_only": True}
    assert "daskpd: first pass: the trees are kept, no pass over the lake; 1 new file(s) read into the cache" \
        in log.getvalue()
    assert len(list((out / "fp" / "cache" / "firstpass").iterdir())) == 4

    GEN.chunk(11, 700).to_parquet(lake / "part-011.parquet", index=False)
    log = io.StringIO()
    r2 = run_job(spec, run_id="r3", first_pass_cache=True, refit="always", log=log, **kw)  # a full run
    m2 = manifest(r2)
    assert m2["incremental"]["mode"] == "full" and m2["stratification"]["refitted"] is True
    assert (m2["first_pass_cache"]["hits"], m2["first_pass_cache"]["misses"]) == (4, 1)
    assert "daskpd: first pass: 4 file(s) from the cache, 1 read" in log.getvalue()
    assert len(list((out / "fp" / "cache" / "firstpass").iterdir())) == 5

    r3 = run_job(spec, run_id="r4", refit="always", log=False, **kw)  # the same run without the cache
    m3 = manifest(r3)
    assert "first_pass_cache" not in m3
    assert m3["stratification"]["id"] == m2["stratification"]["id"]  # the same sample and trees
    for name in ("curves.parquet", "importances.parquet"):
        pd.testing.assert_frame_equal(pd.read_parquet(r2 / name), pd.read_parquet(r3 / name), check_exact=True)


def test_first_pass_cache_key_is_checked(tmp_path):
    spec = tmp_path / "job.toml"
    spec.write_text(SPEC.format(lake=tmp_path) + 'first_pass_cache = "yes"\n')
    try:
        load_spec(spec)
    except SpecError as exc:
        assert "key 'run.first_pass_cache': expected" in str(exc)
    else:
        raise AssertionError("a string for run.first_pass_cache was accepted")
    spec.write_text(SPEC.format(lake=tmp_path))
    assert load_spec(spec).run.first_pass_cache is False
