"""Small result objects: arrays plus metadata, ``to_frame()``, ``to_parquet()``, ``plot()``.

They hold O(distinct x) numbers, never rows, so they are cheap to keep, pickle and
write.  Plotting is delegated to :mod:`daskpd.plotting` (matplotlib imported lazily).
"""
from __future__ import annotations

import abc
import contextlib
import datetime as _dt
import json
import os
import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

__all__ = ["ResultMixin", "StratPDResult"]


class ResultMixin(abc.ABC):
    """``to_parquet`` on top of ``to_frame``; written atomically (temp file, rename)."""

    @abc.abstractmethod
    def to_frame(self) -> pd.DataFrame:
        """A tidy pandas DataFrame of the result."""

    def metadata(self) -> dict:
        return {}

    def to_parquet(self, path, storage_options: dict | None = None, **kwargs) -> str:
        """Write :meth:`to_frame` (with :meth:`metadata` in the schema) to ``path``: a
        local path or an fsspec URL (``file://``, ``memory://``, ``s3://`` ...).  Written
        to a temporary name next to it, then moved into place; nothing is left behind
        on failure.  Returns ``path``."""
        import pyarrow as pa

        path = os.fspath(path)
        table = pa.Table.from_pandas(self.to_frame(), preserve_index=False)
        meta = dict(table.schema.metadata or {})
        meta[b"daskpd"] = json.dumps(self.metadata(), default=json_default).encode()
        table = table.replace_schema_metadata(meta)
        return write_table_atomic(table, path, storage_options=storage_options, **kwargs)


def write_table_atomic(table, path: str, storage_options: dict | None = None, **kwargs) -> str:
    """``pyarrow.parquet.write_table`` to a temporary name beside ``path``, then a move
    (``os.replace`` locally; the filesystem's ``mv`` for an fsspec URL).  The temporary
    file is removed if anything fails."""
    import pyarrow.parquet as pq

    if "://" not in path:
        tmp = f"{path}.tmp-{os.getpid()}"
        try:
            pq.write_table(table, tmp, **kwargs)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.remove(tmp)
            raise
        return path
    import fsspec

    fs, root = fsspec.core.url_to_fs(path, **(storage_options or {}))
    if isinstance(fs, fsspec.implementations.local.LocalFileSystem):  # file://: a local, atomic rename
        write_table_atomic(table, root, **kwargs)
        return path
    tmp = f"{root}.tmp-{os.getpid()}"
    try:
        with fs.open(tmp, "wb") as fh:
            pq.write_table(table, fh, **kwargs)
        if fs.exists(root):
            fs.rm(root)
        fs.mv(tmp, root)
    except BaseException:
        with contextlib.suppress(Exception):
            if fs.exists(tmp):
                fs.rm(tmp)
        raise
    return path


def json_default(o):
    """``json.dumps(default=...)`` for result metadata and manifests."""
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (_dt.date, _dt.datetime, _dt.time)):
        return o.isoformat()
    return str(o)  # paths and anything else: their text


@dataclass(repr=False)
class StratPDResult(ResultMixin):
    """StratPD partial dependence of ``target`` on numeric ``feature``.

    Arrays are indexed by the distinct x positions (distinct values, or bins placed at
    their mean x when the feature was binned):

    ``x``            position
    ``pd``           partial dependence, 0 at the leftmost supported x; NaN outside support
    ``slope``        average slope over [x_i, x_{i+1}) (NaN when fewer than min_slopes_per_x)
    ``slope_count``  number of leaf slopes averaged over [x_i, x_{i+1})
    ``count``        rows at this x (all leaves)
    ``supported``    pd is estimated here (the interval starting or ending at x has a slope)

    ``params["support"]`` counts, inside the curve, the intervals no leaf slope covers
    (flat steps), those with fewer than min_slopes_per_x slopes (and how many of them were
    interpolated) and the positions left unsupported.
    """

    feature: str
    target: str
    x: np.ndarray
    pd: np.ndarray
    slope: np.ndarray
    slope_count: np.ndarray
    count: np.ndarray
    supported: np.ndarray
    n_rows: int  # rows read
    n_used: int  # rows in leaves with >= 2 distinct x
    n_ignored: int  # rows in leaves with a single x (they carry no slope)
    n_missing_x: int
    n_bad_y: int
    n_leaves: int
    binned: bool
    params: dict = field(default_factory=dict)
    segments: dict = field(default_factory=dict)  # a sample of per-leaf slope segments
    trials_pd: np.ndarray | None = None  # (n_trials, len(x)) when bootstrap trials were run
    set_counts: np.ndarray | None = None  # (1 + n_trials, len(x)): rows (trial weight) per position

    kind = "numeric"

    def __repr__(self) -> str:
        sup = int(self.supported.sum())
        return (f"StratPDResult(feature={self.feature!r}, target={self.target!r}, positions={len(self.x)}, "
                f"supported={sup}, leaves={self.n_leaves}, rows={self.n_rows}, ignored={self.n_ignored}, "
                f"binned={self.binned})")

    def to_frame(self) -> pd.DataFrame:
        df = pd.DataFrame({
            "feature": self.feature,
            "x": self.x,
            "pd": self.pd,
            "slope": self.slope,
            "slope_count": self.slope_count.astype("int64"),
            "count": self.count,
            "supported": self.supported,
        })
        if self.trials_pd is not None and len(self.trials_pd) > 1:
            with warnings.catch_warnings():  # positions supported in < 2 trials: NaN, quietly
                warnings.simplefilter("ignore", RuntimeWarning)
                df["pd_std"] = np.nanstd(self.trials_pd, axis=0, ddof=1)
        return df

    def metadata(self) -> dict:
        return {
            "method": "stratpd", "feature": self.feature, "target": self.target, "n_rows": self.n_rows,
            "n_used": self.n_used, "n_ignored": self.n_ignored, "n_missing_x": self.n_missing_x,
            "n_bad_y": self.n_bad_y, "n_leaves": self.n_leaves, "binned": self.binned, "params": self.params,
        }

    def summary(self) -> str:
        sup = self.supported
        lo, hi = (np.nanmin(self.pd[sup]), np.nanmax(self.pd[sup])) if sup.any() else (np.nan, np.nan)
        sc = self.params.get("support") or {}
        inside = ""
        if sc.get("empty_intervals") or sc.get("few_slope_intervals"):
            inside = (f" ({sc.get('unsupported_inside', 0)} unsupported inside the curve; flat over "
                      f"{sc.get('empty_intervals', 0)} intervals no leaf slope covers, "
                      f"{sc.get('few_slope_intervals', 0)} with fewer than "
                      f"{self.params.get('min_slopes_per_x')} slopes: "
                      f"{sc.get('few_slopes_interpolated', 0)} interpolated)")
        return (f"{self.feature}: {int(sup.sum())}/{len(self.x)} x positions supported{inside}, pd range "
                f"[{lo:.4g}, {hi:.4g}], {self.n_leaves} leaves, rows used {self.n_used:,} of {self.n_rows:,} "
                f"(ignored {self.n_ignored:,} in single-x leaves, dropped {self.n_missing_x:,} missing x, "
                f"{self.n_bad_y:,} missing/inf y){' [binned]' if self.binned else ''}")

    def plot(self, ax=None, **kwargs):
        from .plotting.strat import plot_stratpd

        return plot_stratpd(self, ax=ax, **kwargs)
