"""The typed manifest (:class:`daskpd.job.manifest.Manifest`) writes the keys of
``manifest.json`` in the file's order: the fixed head, the run's facts in the order the
steps found them, then ``plots``, ``summaries`` and, once set, ``files``."""
from __future__ import annotations

from daskpd.job.manifest import InputRecord, Manifest

HEAD = ["daskpd_manifest", "job", "run_id", "description", "status", "started_at", "finished_at", "spec",
        "spec_toml", "input", "target", "features", "categorical", "kinds", "rows", "timings_s", "versions", "host"]


def manifest(table: dict, stats: dict) -> Manifest:
    return Manifest(job="j", run_id="r1", description="", started_at="t0", finished_at="t1", spec={"name": "j"},
                    spec_toml="name = 'j'",
                    input=InputRecord(path="lake", format="parquet", filters=None, fingerprint={"n_files": 2},
                                      columns_read=["y", "x"], table=table),
                    target="y", features=["x"], categorical=[], kinds={"y": "numeric", "x": "numeric"},
                    rows={"rows_read": 10}, timings_s={"open": 0.1, "total": 1.0}, versions={"daskpd": "0"},
                    host="h", stats=stats, plots=[], summaries=[{"method": "stratpd", "feature": "x", "summary": "s"}])


def test_the_keys_in_the_files_order_with_the_facts_as_found():
    m = manifest({}, {"input_schema": {}, "cluster": {"n_workers": 1}, "skipped_features": {"z": "constant"}})
    d = m.to_dict()
    assert list(d) == [*HEAD, "input_schema", "cluster", "skipped_features", "plots", "summaries"]
    assert d["daskpd_manifest"] == 1 and d["status"] == "complete"
    assert list(d["input"]) == ["path", "format", "filters", "fingerprint", "columns_read"]
    m.files = {"curves.parquet": {"bytes": 1, "sha256": "0" * 64}}
    assert list(m.to_dict())[-1] == "files"


def test_a_table_sources_format_replaces_the_files_format_in_place():
    d = manifest({"format": "delta", "table": {"version": 3}}, {}).to_dict()["input"]
    assert list(d) == ["path", "format", "filters", "fingerprint", "columns_read", "table"]
    assert d["format"] == "delta" and d["table"] == {"version": 3}
