"""A complete run's ``manifest.json``, typed: :class:`Manifest` (with its :class:`InputRecord`),
built by the steps of :class:`daskpd.job.jobrun.JobRun` and written with :meth:`Manifest.to_dict`.

The keys and their order are the file's format (``daskpd_manifest = 1``): readers (``daskpd
history``, the report, the incremental plan of the next run) read them by name, and the
order is kept so that two runs' manifests diff line by line.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

__all__ = ["Manifest", "InputRecord"]


@dataclass
class InputRecord:
    """The manifest's ``input``: where the rows came from and which columns were read."""

    path: str | None  # the data path, else the source's label (a table, a synthetic data set)
    format: str  # "csv" or "parquet"; a table source's own format replaces it (``table``)
    filters: Any  # the spec's row filters, as given
    fingerprint: dict  # :func:`daskpd.job.inputs.fingerprint`
    columns_read: list[str]
    table: dict = field(default_factory=dict)  # :func:`daskpd.job.inputs.table_record` ({} for files)

    def to_dict(self) -> dict:
        return {"path": self.path, "format": self.format, "filters": self.filters, "fingerprint": self.fingerprint,
                "columns_read": self.columns_read, **self.table}

    @classmethod
    def from_dict(cls, d: dict) -> "InputRecord":
        """The record of a written manifest's ``input`` (a table source's keys back in ``table``)."""
        fixed = ("path", "format", "filters", "fingerprint", "columns_read")
        return cls(**{k: d.get(k) for k in fixed}, table={k: v for k, v in d.items() if k not in fixed})


@dataclass
class Manifest:
    """A run's ``manifest.json``: the spec, the input, what was computed, how long it took.

    ``stats`` holds the facts the steps found, in the order they found them (the input's
    schema, the columns left out, the model's type and inputs, the cluster, the model-free
    and model-based phases, the first-pass cache, the drift comparisons, the incremental
    plan, the stratification, the state): which of them a run has depends on its methods
    and its plan, and the file lists them between ``host`` and ``plots`` in that order.
    ``files`` (each file's size and SHA-256) is set last, once every other file is written.
    """

    FORMAT: ClassVar[int] = 1

    job: str
    run_id: str
    description: str | None
    started_at: str
    finished_at: str
    spec: dict
    spec_toml: str | None
    input: InputRecord
    target: str
    features: list[str]
    categorical: list[str]
    kinds: dict[str, str]
    rows: dict
    timings_s: dict[str, float]
    versions: dict[str, str]
    host: str
    stats: dict[str, Any]
    plots: list[dict]
    summaries: list[dict]
    files: dict[str, dict] | None = None
    status: str = "complete"

    #: the keys of :meth:`to_dict` that are fields (every other key of a written manifest is in ``stats``)
    FIELDS: ClassVar[tuple] = ("job", "run_id", "description", "status", "started_at", "finished_at", "spec",
                               "spec_toml", "input", "target", "features", "categorical", "kinds", "rows",
                               "timings_s", "versions", "host", "plots", "summaries", "files")

    @classmethod
    def from_dict(cls, d: dict) -> "Manifest":
        """The manifest a run wrote (``json.loads`` of its ``manifest.json``), typed again:
        the keys that are not fields go to ``stats`` in their order.  A key missing from an
        older manifest is None (a list or dict field: empty)."""
        empty = {"features": [], "categorical": [], "kinds": {}, "rows": {}, "timings_s": {}, "versions": {},
                 "plots": [], "summaries": [], "spec": {}}
        kw = {k: d.get(k, empty.get(k)) for k in cls.FIELDS if k not in ("input", "status")}
        return cls(**kw, input=InputRecord.from_dict(d.get("input") or {}), status=d.get("status", "complete"),
                   stats={k: v for k, v in d.items() if k not in cls.FIELDS and k != "daskpd_manifest"})

    def to_dict(self) -> dict:
        """The JSON object of ``manifest.json`` (without ``files`` until they are set)."""
        d = {"daskpd_manifest": self.FORMAT, "job": self.job, "run_id": self.run_id,
             "description": self.description, "status": self.status, "started_at": self.started_at,
             "finished_at": self.finished_at, "spec": self.spec, "spec_toml": self.spec_toml,
             "input": self.input.to_dict(), "target": self.target, "features": self.features,
             "categorical": self.categorical, "kinds": self.kinds, "rows": self.rows, "timings_s": self.timings_s,
             "versions": self.versions, "host": self.host, **self.stats, "plots": self.plots,
             "summaries": self.summaries}
        if self.files is not None:
            d["files"] = self.files
        return d
