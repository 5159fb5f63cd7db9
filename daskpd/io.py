"""Public input helpers: :func:`read_csv` (CSV files with their reader's options, as
``data`` for any daskpd function)."""
from __future__ import annotations

from ._data.read import read_csv

__all__ = ["read_csv"]
