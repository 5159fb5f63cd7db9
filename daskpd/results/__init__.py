"""Result objects: arrays plus metadata, ``to_frame()``, ``to_parquet()``, ``plot()``.

They hold O(distinct x) numbers, never rows, so they are cheap to keep, pickle and
write.  One format (:mod:`daskpd.results.base`): every curve's frame starts with
``feature, kind, x | category, pd, count, supported, n_rows``; one JSON converter; one
atomic parquet writer.  Plotting is delegated to :mod:`daskpd.plotting` (matplotlib
imported lazily).
"""
from __future__ import annotations

from .base import (CURVE_HEAD, METADATA_KEY, TABLE_HEAD, CurveResult, Result, atomic_path, curve_frame,
                   dump_json, json_clean, json_default, table_frame, with_metadata, write_parquet,
                   write_table_atomic)
from .curves import StratPDResult

#: the former name of :class:`Result` (kept for existing imports)
ResultMixin = Result

__all__ = ["Result", "ResultMixin", "CurveResult", "StratPDResult", "CURVE_HEAD", "TABLE_HEAD", "METADATA_KEY",
           "curve_frame", "table_frame", "json_default", "json_clean", "dump_json", "atomic_path", "write_parquet",
           "write_table_atomic", "with_metadata"]
