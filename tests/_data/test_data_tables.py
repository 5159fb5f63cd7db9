"""Delta Lake and Apache Iceberg tables as inputs (``daskpd.read_delta``,
``daskpd.read_iceberg``, a directory holding ``_delta_log/``, an Iceberg metadata JSON):
the same rows as the table's data files read as plain parquet, a pinned version /
snapshot / timestamp, the columns projected, the filters pushed down (files pruned by
their partition values), a dask partition per data file, deletes applied (Delta deletion
vectors, Iceberg position delete files) or refused (Iceberg equality deletes), and the
one-line reasons an incremental night gives for commits that are not appends."""
from __future__ import annotations

import datetime as dt
import json
import os
import struct
import time
import zlib

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import daskpd
from daskpd._data.source import open_dataset
from daskpd._data.tables import changes, snapshot
from daskpd._errors import DataError
from nightly_lakes import FEATURES, GEN, Lake

deltalake = pytest.importorskip("deltalake")
pytest.importorskip("pyiceberg")


def frame_of(data, columns=None, **kw) -> pd.DataFrame:
    return open_dataset(data, **kw).project(columns).compute().reset_index(drop=True)


def sort(df: pd.DataFrame) -> pd.DataFrame:
    return df.sort_values(list(df.columns)).reset_index(drop=True)


def grown(kind: str, tmp_path, nights=3) -> Lake:
    lake = Lake(kind, str(tmp_path / kind), catalog_dir=str(tmp_path / "catalog"))
    for i in range(nights):
        lake.append(1500, files=1 + i % 2)
    return lake


# ---------------------------------------------------------------- the same rows as plain parquet
@pytest.mark.parametrize("kind", ["delta", "iceberg"])
def test_a_table_reads_as_its_data_files_read_as_plain_parquet(tmp_path, kind):
    lake = grown(kind, tmp_path)
    ds = open_dataset(lake.data())
    plain = lake.plain_parquet()
    assert ds.table.format == kind and len(ds.table.files) == len(plain) == 4
    assert ds.frame.npartitions == 4  # one dask partition per data file
    got = frame_of(lake.data())
    # the data files as plain parquet (a Delta table's partition column lives in its log, not in its files)
    want = pd.concat([pd.read_parquet(p) for p in sorted(plain)], ignore_index=True)
    if kind == "delta":
        want["date"] = [d for p in sorted(plain) for d in [p.split("date=")[1].split("/")[0]] * len(pd.read_parquet(p))]
    assert list(got.columns) == [*GEN.chunk(0, 1).columns, "date"]
    pd.testing.assert_frame_equal(sort(got), sort(want[list(got.columns)]), check_dtype=False)
    assert dict(got.dtypes.astype(str)) == dict(frame_of(plain).dtypes.astype(str)) | (
        {"date": str(got.dtypes["date"])} if kind == "delta" else {})
    # a computation over the table equals the same computation over its data files as a plain lake
    kw = dict(target="SalePrice", features=FEATURES, categorical_features=["ModelID"], random_state=0,
              progress=False, sample_size=3000)
    a = daskpd.strat_curves_and_importances(lake.data(), **kw)
    b = daskpd.strat_curves_and_importances(sorted(plain), **kw)
    pd.testing.assert_frame_equal(a.to_frame(), b.to_frame())


def test_a_directory_holding_delta_log_is_a_delta_table_wherever_a_path_is_taken(tmp_path):
    lake = grown("delta", tmp_path, nights=2)
    # the directory also holds a file no commit has (a failed write): read as a table, it is not read
    GEN.chunk(77, 500).to_parquet(tmp_path / "delta" / "stray.parquet", index=False)
    ds = open_dataset(str(tmp_path / "delta"))
    assert ds.table is not None and ds.label == f"Delta table {str(tmp_path / 'delta')!r} (version 2)"
    assert len(ds.project(None).compute()) == 3000
    r = daskpd.stratpd(str(tmp_path / "delta"), target="SalePrice", feature="YearMade", progress=False, sample_size=2000)
    assert r.n_rows == 3000


# ---------------------------------------------------------------- versions, projection, pushdown
def test_pinned_versions_snapshots_and_timestamps(tmp_path):
    lake = grown("delta", tmp_path)  # versions 0 (1 file), 1-2 (2 files), 3
    assert len(frame_of(daskpd.read_delta(lake.root, version=0))) == 1500
    assert len(frame_of(daskpd.read_delta(lake.root, version=2))) == 3000
    assert len(frame_of(daskpd.read_delta(lake.root))) == 4500
    commits = sorted(deltalake.DeltaTable(lake.root).history(), key=lambda h: h["version"])
    at = dt.datetime.fromtimestamp(commits[1]["timestamp"] / 1000, dt.timezone.utc)
    assert open_dataset(daskpd.read_delta(lake.root, timestamp=at.isoformat())).table.version == 1
    with pytest.raises(DataError, match="at version 9 cannot be read"):
        open_dataset(daskpd.read_delta(lake.root, version=9))

    ice = grown("iceberg", tmp_path)
    table = ice.catalog.load_table(ice.table_name)
    first = table.snapshots()[0]
    src = daskpd.read_iceberg(ice.table_name, catalog="nightly", snapshot_id=first.snapshot_id, **ice.properties)
    assert len(frame_of(src)) == 1500
    src = daskpd.read_iceberg(ice.table_name, catalog="nightly", timestamp=dt.datetime.fromtimestamp(
        first.timestamp_ms / 1000, dt.timezone.utc), **ice.properties)
    assert open_dataset(src).table.version == first.snapshot_id
    # the table given by its metadata JSON (a path ending in .metadata.json is one wherever a path is taken)
    assert len(frame_of(table.metadata_location.replace("file://", ""))) == 4500
    with pytest.raises(DataError, match="has no snapshot 12345"):
        open_dataset(daskpd.read_iceberg(ice.table_name, catalog="nightly", snapshot_id=12345, **ice.properties))
    with pytest.raises(DataError, match="cannot be loaded: NoSuchTableError"):
        open_dataset(daskpd.read_iceberg("lake.nope", catalog="nightly", **ice.properties))
    with pytest.raises(DataError, match="give snapshot_id or timestamp, not both"):
        daskpd.read_iceberg(ice.table_name, snapshot_id=1, timestamp="2026-01-01T00:00:00")


@pytest.mark.parametrize("kind", ["delta", "iceberg"])
def test_projection_and_filters_are_pushed_into_the_reader(tmp_path, kind):
    lake = grown(kind, tmp_path)
    ds = open_dataset(lake.data(), filters=[("date", "==", "2026-12-02"), ("YearMade", ">=", 1990)])
    got = ds.project(["SalePrice", "YearMade"]).compute()
    assert list(got.columns) == ["SalePrice", "YearMade"] and (got["YearMade"] >= 1990).all()
    want = frame_of(lake.data())
    want = want[(want["date"] == "2026-12-02") & (want["YearMade"] >= 1990)]
    assert len(got) == len(want) > 0
    if kind == "delta":  # the files of other nights pruned by their partition values, never opened
        _, _, keep = ds.file_reader()
        assert len(keep) == 2 and all("date=2026-12-02" in p for p in keep)
        assert ds.frame.npartitions == 2
    else:  # pyiceberg's planning prunes the files by their column statistics
        assert len(ds.table.files) == 2
    # the graph reads the projected columns only: a column not asked for is never read
    layer = ds.project(["YearMade"]).optimize()
    assert list(layer.columns) == ["YearMade"]


# ---------------------------------------------------------------- deletes
def _inline_free_dv(path: str, deleted: list[int]) -> dict:
    """A deletion vector file (the Delta protocol's format: a version byte, then the
    size, the 64-bit roaring bitmap of the deleted rows and its CRC-32) at ``path``."""
    bm32 = (struct.pack("<II", 12346, 1) + struct.pack("<HH", 0, len(deleted) - 1) + struct.pack("<I", 16)
            + b"".join(struct.pack("<H", d) for d in deleted))
    data = struct.pack("<i", 1681511377) + struct.pack("<q", 1) + struct.pack("<i", 0) + bm32
    with open(path, "wb") as fh:
        fh.write(bytes([1]) + struct.pack(">i", len(data)) + data + struct.pack(">I", zlib.crc32(data)))
    return {"storageType": "p", "pathOrInlineDv": f"file://{path}", "offset": 1, "sizeInBytes": len(data),
            "cardinality": len(deleted)}


def test_delta_deletion_vectors_are_applied(tmp_path):
    root = tmp_path / "dv"
    df = GEN.chunk(0, 40)
    deltalake.write_deltalake(str(root), df)
    log = root / "_delta_log"
    add = next(json.loads(x)["add"] for x in (log / f"{0:020d}.json").read_text().splitlines() if '"add"' in x)
    dv = _inline_free_dv(str(root / "dv.bin"), [2, 5, 7, 31])
    actions = [{"commitInfo": {"timestamp": int(time.time() * 1000), "operation": "DELETE"}},
               {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["deletionVectors"],
                             "writerFeatures": ["deletionVectors"]}},
               {"remove": {"path": add["path"], "deletionTimestamp": 1, "dataChange": True}},
               {"add": {**add, "deletionVector": dv}}]
    (log / f"{1:020d}.json").write_text("\n".join(map(json.dumps, actions)) + "\n")
    keep = np.ones(40, bool)
    keep[[2, 5, 7, 31]] = False
    pd.testing.assert_frame_equal(frame_of(str(root)), df[keep].reset_index(drop=True), check_dtype=False)
    got = frame_of(str(root), filters=[("YearMade", ">=", 1980)])
    want = df[keep & (df["YearMade"] >= 1980).to_numpy()].reset_index(drop=True)
    pd.testing.assert_frame_equal(got, want, check_dtype=False)
    ds = open_dataset(str(root))
    assert [f["rows"] for f in ds.table.stamps()] == [36]
    # a night after the version kept before the delete: not an append
    kept = snapshot(daskpd.read_delta(str(root), version=0)).record
    assert changes(kept, ds.table) == "Delta commit 1 (DELETE) deleted rows with deletion vectors since version 0"


def _position_deletes(table, file_path: str, positions: list[int], where: str):
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.typedef import Record

    pq.write_table(pa.table({"file_path": [file_path] * len(positions), "pos": pa.array(positions, pa.int64())}),
                   where)
    dfile = DataFile.from_args(content=DataFileContent.POSITION_DELETES, file_path=f"file://{where}",
                               file_format=FileFormat.PARQUET, partition=Record(), record_count=len(positions),
                               file_size_in_bytes=os.path.getsize(where))
    with table.transaction() as tx:
        with tx.update_snapshot().fast_append() as app:
            app.append_data_file(dfile)


def test_iceberg_position_deletes_are_applied_and_equality_deletes_refused(tmp_path):
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.typedef import Record

    ice = grown("iceberg", tmp_path, nights=1)
    table = ice.catalog.load_table(ice.table_name)
    task = next(iter(table.scan().plan_files()))
    _position_deletes(table, task.file.file_path, [0, 10, 1499], str(tmp_path / "pos.parquet"))
    got = frame_of(ice.data())
    want = table.scan().to_arrow().to_pandas()  # pyiceberg's own read applies them too
    assert len(got) == len(want) == 1497
    pd.testing.assert_frame_equal(sort(got), sort(want), check_dtype=False)

    where = tmp_path / "eq.parquet"
    pq.write_table(pa.table({"ModelID": pa.array([3], pa.int64())}), where)
    eq = DataFile.from_args(content=DataFileContent.EQUALITY_DELETES, file_path=f"file://{where}",
                            file_format=FileFormat.PARQUET, partition=Record(), record_count=1,
                            file_size_in_bytes=os.path.getsize(where), equality_ids=[5])
    table = ice.catalog.load_table(ice.table_name)
    with table.transaction() as tx:
        with tx.update_snapshot().fast_append() as app:
            app.append_data_file(eq)
    with pytest.raises(DataError, match=r"Iceberg table 'lake.events' \(snapshot \d+\) has equality deletes .*daskpd "
                                        r"applies position delete files only"):
        open_dataset(ice.data())


# ---------------------------------------------------------------- what an incremental night is told
def test_delta_commits_that_are_not_appends_are_named(tmp_path):
    lake = grown("delta", tmp_path)
    kept = open_dataset(lake.data()).table.record
    lake.append(300)
    assert changes(kept, open_dataset(lake.data()).table) is None  # an append
    dtab = deltalake.DeltaTable(lake.root)
    dtab.optimize.compact()
    assert changes(kept, snapshot(daskpd.read_delta(lake.root))).startswith(
        "Delta commit 5 (OPTIMIZE) compacted ")
    kept = snapshot(daskpd.read_delta(lake.root)).record
    deltalake.DeltaTable(lake.root).alter.add_columns(deltalake.Field("note", "string"))
    assert changes(kept, snapshot(daskpd.read_delta(lake.root))) == \
        "Delta commit 6 (ADD COLUMN) changed the table's schema since version 5"
    # pinned before the kept version: time travel
    assert changes(kept, snapshot(daskpd.read_delta(lake.root, version=2))).startswith(
        "the Delta table is at version 2, before the version 5 kept")
    # commits the log no longer holds (a checkpoint, then the log cleaned up)
    deltalake.write_deltalake(lake.root, GEN.chunk(8, 100).assign(date="2026-12-09", note="x"), mode="append",
                              partition_by=["date"])
    deltalake.DeltaTable(lake.root).create_checkpoint()  # at version 7; the commits before it may go
    os.remove(os.path.join(lake.root, "_delta_log", f"{6:020d}.json"))
    assert changes(kept, snapshot(daskpd.read_delta(lake.root))).startswith(
        "the Delta table's log no longer holds commit 6")
    # another table at the same place
    other = grown("delta", tmp_path / "other", nights=1)
    assert "is not the table of the kept state" in changes(kept, snapshot(daskpd.read_delta(other.root)))


def test_iceberg_snapshots_that_are_not_appends_are_named(tmp_path):
    from pyiceberg.types import StringType

    ice = grown("iceberg", tmp_path)
    kept = open_dataset(ice.data()).table.record
    ice.append(300)
    assert changes(kept, open_dataset(ice.data()).table) is None
    table = ice.catalog.load_table(ice.table_name)
    with table.update_schema() as up:
        up.add_column("note", StringType())
    ice.append(300)
    now = open_dataset(ice.data()).table
    assert "changed the table's schema (schema id 0 -> 1)" in changes(kept, now)
    kept = now.record
    ice.delete(0)
    assert f"(delete) since snapshot {now.version}" in changes(kept, open_dataset(ice.data()).table)
    # a snapshot that is not a descendant of the kept one (the table rolled back past it)
    later = open_dataset(ice.data()).table.record
    table = ice.catalog.load_table(ice.table_name)
    table.manage_snapshots().rollback_to_snapshot(table.snapshots()[0].snapshot_id).commit()
    assert "is not an ancestor of the snapshot" in changes(later, open_dataset(ice.data()).table)


def test_delta_column_mapping_is_refused_naming_the_table(tmp_path):
    root = str(tmp_path / "mapped")
    deltalake.write_deltalake(root, GEN.chunk(0, 20), configuration={"delta.columnMapping.mode": "name"})
    with pytest.raises(DataError, match=rf"Delta table '{root}' \(version 0\) maps its columns to other physical "
                                        r"names \(delta.columnMapping.mode = 'name'\); daskpd reads the data files' "
                                        "columns by name and does not support column mapping"):
        open_dataset(root)


def test_iceberg_renamed_column_is_refused_naming_file_and_names(tmp_path):
    ice = grown("iceberg", tmp_path, nights=1)
    table = ice.catalog.load_table(ice.table_name)
    with table.update_schema() as up:
        up.rename_column("MachineHours", "Hours")
    with pytest.raises(DataError, match=r"Iceberg table 'lake.events' \(snapshot \d+\): data file .* holds column "
                                        r"'MachineHours' \(field id \d+\), which the table now calls 'Hours'"):
        open_dataset(ice.data())
