"""A run with no new input reuses its base run's results (hard links), on a real
cluster: its ``report.html`` is its own -- its run id, and a drift section that says no
new rows were compared -- while the base run's report is left as it was."""
from __future__ import annotations

import json
import os

from daskpd.job.run import run_job
from test_job_newold import chunk, setup


def test_a_reused_run_writes_its_own_report(dask_cluster, tmp_path):
    lake, spec = setup(tmp_path, "never")
    spec.write_text(spec.read_text().replace("plots = false\nreport = false", "plots = true\nreport = true")
                    .replace('features = ["x1", "x2", "c"]', 'features = ["x2", "c"]'))  # few plots
    out = tmp_path / "out"

    def run(rid):
        return run_job(spec, scheduler=dask_cluster, output=out, run_id=rid, progress=False, out=False, log=False)

    run("r1")
    chunk(10, 2000).to_parquet(lake / "p010.parquet", index=False)
    r2 = run("r2")
    page2 = (r2 / "report.html").read_text()
    assert "run <b>r2</b>" in page2 and "2,000 rows against the 20,000 rows of run r1" in page2
    r3 = run("r3")  # no new file: r2's results are reused
    m3 = json.loads((r3 / "manifest.json").read_text())
    assert m3["reused_from"] == "r2"
    page3 = (r3 / "report.html").read_text()
    assert "run <b>r3</b>" in page3 and "run <b>r2</b>" not in page3
    assert "new-vs-old: not made (no file appended since run r2)" in page3
    assert "rows against the" not in page3 and "comparisons.parquet" not in page3
    # its own file, listed with its own digest; r2's report is untouched
    assert not os.path.samefile(r2 / "report.html", r3 / "report.html")
    assert (r2 / "report.html").read_text() == page2
    from daskpd.job.store import sha256_file

    assert m3["files"]["report.html"]["sha256"] == sha256_file(r3 / "report.html")
    # the tables are still r2's (hard links where the file system has them)
    assert (r3 / "curves.parquet").read_bytes() == (r2 / "curves.parquet").read_bytes()


def test_a_written_manifest_reads_back_as_the_same_manifest(tmp_path):
    """``Manifest.from_dict`` types a written manifest again (what a reused run starts
    from): its ``to_dict`` is the same object, key order included, and a key it does not
    know stays in ``stats``."""
    import json

    from daskpd.job.manifest import Manifest

    d = {"daskpd_manifest": 1, "job": "j", "run_id": "r1", "description": None, "status": "complete",
         "started_at": "2026-12-07T00:00:00+00:00", "finished_at": "2026-12-07T00:00:01+00:00",
         "spec": {"name": "j"}, "spec_toml": "name = 'j'",
         "input": {"path": "lake/", "format": "parquet", "filters": None, "fingerprint": {"sha256": "ab"},
                   "columns_read": ["x", "y"], "table": "delta", "version": 3},
         "target": "y", "features": ["x"], "categorical": [], "kinds": {"x": "numeric"}, "rows": {"read": 10},
         "timings_s": {"total": 1.0}, "versions": {"daskpd": "0.1"}, "host": "h",
         "schema": {"x": "float64"}, "stratification": {"id": "s", "refitted": True}, "a_later_key": [1],
         "plots": [], "summaries": [], "files": {"curves.parquet": {"bytes": 1, "sha256": "cd"}}}
    m = Manifest.from_dict(json.loads(json.dumps(d)))
    assert json.dumps(m.to_dict()) == json.dumps(d)
    assert m.input.table == {"table": "delta", "version": 3} and m.stats["a_later_key"] == [1]
    m.stats["stratification"]["refitted"] = False
    assert m.to_dict()["stratification"] == {"id": "s", "refitted": False}
