"""Lakes as they grow night after night, for the tests: a date-partitioned hive lake, a
Delta Lake table (written by deltalake) and an Apache Iceberg table (pyiceberg, a SQL
catalog on SQLite), on local disk or on an S3 server (``storage_options`` of s3fs).

Each night appends rows of :class:`daskpd.datasets.Bulldozer` with a ``date`` column
(the hive lake's partition key, the Delta table's partition column); :meth:`Lake.delete`
deletes one night's rows and :meth:`Lake.overwrite` replaces the whole table, as the
table's own writer does it (the hive lake: the partition's directory removed or its file
rewritten).  :meth:`Lake.data` is what the library takes, :meth:`Lake.source_toml` what
a job spec's ``[source]`` says.
"""
from __future__ import annotations

import json
import os

import pandas as pd

from daskpd.datasets import Bulldozer

GEN = Bulldozer(random_state=0, n_models=40)
FEATURES = ["YearMade", "MachineHours", "ProductGroup", "ModelID"]
KINDS = ("hive", "delta", "iceberg")


def night(i: int) -> str:
    return f"2026-12-{i + 1:02d}"


def rows_of(chunk: int, rows: int, date: str) -> pd.DataFrame:
    return GEN.chunk(chunk, rows).assign(date=date)


def _s3_keys(storage_options: dict) -> dict:
    """deltalake's options from s3fs's (as daskpd translates them)."""
    from daskpd._data.delta import delta_options

    return {**delta_options(storage_options), "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}


class Lake:
    """One nightly lake of ``kind`` at ``root`` (a local directory or an ``s3://`` URL)."""

    def __init__(self, kind: str, root: str, storage_options: dict | None = None, catalog_dir: str | None = None):
        self.kind, self.root, self.so = kind, str(root).rstrip("/"), dict(storage_options or {})
        self.nights = 0
        if kind == "iceberg":
            from pyiceberg.catalog import load_catalog

            self.catalog_dir = catalog_dir or self.root
            os.makedirs(self.catalog_dir, exist_ok=True)
            self.properties = {"type": "sql", "uri": f"sqlite:///{self.catalog_dir}/catalog.db",
                               "warehouse": self.root if "://" in self.root else f"file://{self.root}"}
            if self.so:
                from daskpd._data.iceberg import iceberg_properties

                self.properties.update(iceberg_properties(self.so))
            self.catalog = load_catalog("nightly", **self.properties)
            self.catalog.create_namespace_if_not_exists("lake")
            self.table_name = "lake.events"

    # ---------------------------------------------------------------- writing
    def fs(self):
        import fsspec

        return fsspec.core.url_to_fs(self.root, **self.so)[0]

    def append(self, rows: int, files: int = 1) -> None:
        """One more night: ``rows`` rows in ``files`` files."""
        i = self.nights
        self.nights += 1
        parts = [rows_of(100 * i + j, rows // files, night(i)) for j in range(files)]
        if self.kind == "hive":
            fs = self.fs()
            fs.makedirs(f"{self.root}/date={night(i)}", exist_ok=True)
            for j, df in enumerate(parts):
                path = f"{self.root}/date={night(i)}/part-{j}.parquet"
                with fs.open(path, "wb") as fh:
                    df.drop(columns="date").to_parquet(fh, index=False)
        elif self.kind == "delta":
            from deltalake import write_deltalake

            for df in parts:
                write_deltalake(self.root, df, mode="append", partition_by=["date"],
                                storage_options=_s3_keys(self.so) if self.so else None)
        else:
            import pyarrow as pa

            for df in parts:
                t = pa.Table.from_pandas(df, preserve_index=False)
                if not self.catalog.table_exists(self.table_name):
                    self.catalog.create_table(self.table_name, schema=t.schema)
                self.catalog.load_table(self.table_name).append(t)

    def delete(self, i: int) -> None:
        """Night ``i``'s rows deleted."""
        if self.kind == "hive":
            self.fs().rm(f"{self.root}/date={night(i)}", recursive=True)
        elif self.kind == "delta":
            from deltalake import DeltaTable

            DeltaTable(self.root, storage_options=_s3_keys(self.so) if self.so else None).delete(
                f"date = '{night(i)}'")
        else:
            from pyiceberg.expressions import EqualTo

            self.catalog.load_table(self.table_name).delete(EqualTo("date", night(i)))

    def rewrite(self, i: int) -> None:
        """Night ``i``'s rows replaced by other rows (the hive lake: its file rewritten in
        place; a table: an overwrite of the whole table)."""
        df = rows_of(1000 + i, 500, night(i))
        if self.kind == "hive":
            with self.fs().open(f"{self.root}/date={night(i)}/part-0.parquet", "wb") as fh:
                df.drop(columns="date").to_parquet(fh, index=False)
        elif self.kind == "delta":
            from deltalake import write_deltalake

            write_deltalake(self.root, df, mode="overwrite", partition_by=["date"],
                            storage_options=_s3_keys(self.so) if self.so else None)
        else:
            import pyarrow as pa

            self.catalog.load_table(self.table_name).overwrite(pa.Table.from_pandas(df, preserve_index=False))

    # ---------------------------------------------------------------- reading
    def data(self):
        """``data`` for the library."""
        import daskpd

        if self.kind == "hive":
            return self.root
        if self.kind == "delta":
            return daskpd.read_delta(self.root)
        return daskpd.read_iceberg(self.table_name, catalog="nightly", **self.properties)

    def source_toml(self) -> str:
        """A job spec's ``[source]`` table."""
        lines = ["[source]"]
        if self.kind == "iceberg":
            props = ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in self.properties.items())
            lines += [f'iceberg = "{self.table_name}"', 'catalog = "nightly"', f"catalog_properties = {{ {props} }}"]
        else:
            lines.append(f"path = {json.dumps(self.root)}")
        if self.so:
            so = ", ".join(f"{k} = {json.dumps(v)}" for k, v in self.so.items())
            lines.append(f"storage_options = {{ {so} }}")
        return "\n".join(lines) + "\n"

    def plain_parquet(self) -> list[str]:
        """The data files of the table's current version (as URLs): the same rows read as
        plain parquet (a Delta table's files lack its partition column)."""
        if self.kind == "hive":
            return [self.root]
        if self.kind == "delta":
            from deltalake import DeltaTable

            return DeltaTable(self.root, storage_options=_s3_keys(self.so) if self.so else None).file_uris()
        return [t.file.file_path for t in self.catalog.load_table(self.table_name).scan().plan_files()]
