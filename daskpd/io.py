"""Public input helpers, as ``data`` for any daskpd function: :func:`read_csv` (CSV
files with their reader's options), :func:`read_delta` (a Delta Lake table at a version)
and :func:`read_iceberg` (an Apache Iceberg table at a snapshot)."""
from __future__ import annotations

from ._data.read import read_csv
from ._data.tables import read_delta, read_iceberg

__all__ = ["read_csv", "read_delta", "read_iceberg"]
