"""ICE's result and its table: the home of :class:`ICEResult` (the PD over every row,
the sampled lines, their ids, the trials' band) and of the one long layout of every ICE
table (:data:`ICE_COLUMNS`, :func:`ice_columns`, :func:`ice_frame`; see
:mod:`daskpd.model._ice`, which computes them).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..plotting.model import plot_ice
from ..results import CurveResult
from ..results.curves import DEFAULT_BAND, band_columns, band_is_flat, band_note, trial_band
from ._common import class_columns, response_note

__all__ = ["ICEResult", "ICE_COLUMNS", "ice_columns", "ice_frame"]


#: the columns of every ICE table, in order (``x`` for a numeric feature, ``category`` for a
#: categorical one; the ``id_columns`` of :func:`ice` go between ``row`` and them)
ICE_COLUMNS = ("feature", "partition", "row", "x", "category", "ice")


def ice_columns(kind: str, id_columns=()) -> list:
    """The columns of an ICE table of a feature of ``kind``, in order."""
    return ["feature", "partition", "row", *id_columns, "x" if kind == "numeric" else "category", "ice"]


def ice_frame(feature: str, kind: str, grid, partition, row, values, ids: dict | None = None) -> pd.DataFrame:
    """The long ICE table of some rows: ``values`` is ``(rows, len(grid))``; ``partition``
    and ``row`` (one per row, or a partition number for all) are the rows' ids; ``ids``
    are more columns of one value per row (the ``id_columns``)."""
    values = np.asarray(values, dtype="float64")
    k, g = values.shape
    cols = {"feature": np.full(k * g, feature, dtype=object),
            "partition": np.repeat(np.broadcast_to(np.asarray(partition, dtype="int32"), (k,)), g),
            "row": np.repeat(np.asarray(row, dtype="int64"), g)}
    for c, v in (ids or {}).items():
        cols[c] = np.repeat(np.asarray(v), g)
    if kind == "numeric":
        cols["x"] = np.tile(np.asarray(grid, dtype="float64"), k)
    else:
        cols["category"] = np.tile(np.asarray([str(v) for v in grid], dtype=object), k)
    cols["ice"] = values.reshape(-1)
    return pd.DataFrame(cols)


@dataclass(repr=False)
class ICEResult(CurveResult):
    """ICE curves of ``feature``.

    ``grid``         grid values (x axis)
    ``pd``           partial dependence over ALL rows (weighted), centred when ``centered``
    ``lines``        sampled curves, shape ``(n_lines, len(grid))`` (centred when ``centered``)
    ``line_x``       each sampled row's own value of ``feature``
    ``line_index``   each sampled row's index label in its partition
    ``line_partition``, ``line_row``  each sampled row's id: its partition, its position in it
    ``path``         where the full table was written (or None)
    ``quantiles``    ``{feature: values}``: with ``quantiles=``, a numeric feature's exact quantiles
    """

    feature: str
    kind: str
    grid: np.ndarray
    pd: np.ndarray
    lines: np.ndarray
    line_x: np.ndarray
    line_index: np.ndarray
    centered: bool
    engine: str
    response: str
    target_class: object = None
    n_rows: int = 0
    weight_sum: float = 0.0
    path: str | None = None
    params: dict = field(default_factory=dict)
    trials_pd: np.ndarray | None = None  # (n_trials, grid): the PD (centred when ``centered``) per trial
    line_partition: np.ndarray | None = None
    line_row: np.ndarray | None = None
    quantiles: dict | None = None

    @property
    def x(self) -> np.ndarray:
        return self.grid

    @property
    def n_trials(self) -> int:
        return 1 if self.trials_pd is None else len(self.trials_pd)

    def band(self) -> dict | None:
        """``{"std", "lo", "hi", "n"}`` of the PD over the trials (centred like ``pd``),
        None without trials (see :func:`daskpd.results.curves.trial_band`)."""
        if self.trials_pd is None:
            return None
        return trial_band(self.trials_pd, tuple(self.params.get("band", DEFAULT_BAND)), center=self.pd)

    def __repr__(self) -> str:
        return (f"ICEResult(feature={self.feature!r}, grid={len(self.grid)}, lines={len(self.lines)}, "
                f"centered={self.centered}, rows={self.n_rows}, path={self.path!r})")

    def curve(self) -> dict:
        """The PD over all rows (centred when ``centered``); the lines: :meth:`lines_frame`."""
        return {"positions": self.grid, "pd": self.pd,
                "extra": {**band_columns(self.band()), **class_columns(self, len(self.grid))}}

    def lines_frame(self) -> pd.DataFrame:
        """The sampled curves as the long ICE table (the module docstring): ``feature``,
        ``partition``, ``row``, ``x`` | ``category``, ``ice`` -- the layout of the table
        ``path=`` writes, where each line's ``(partition, row)`` finds its row."""
        k = len(self.lines)
        part = np.full(k, -1) if self.line_partition is None else self.line_partition
        row = np.arange(k) if self.line_row is None else self.line_row
        return ice_frame(self.feature, self.kind, self.grid, part, row, self.lines)

    def is_flat(self) -> bool:
        """Whether the curve is not distinguishable from flat (a flat line fits its
        simultaneous band: :func:`daskpd.results.curves.flat_test`; the plot then draws
        it on the scale of ``params["target_std"]`` or ``params["response_std"]``);
        False without a band."""
        return band_is_flat(self)

    def summary(self) -> str:
        return f"{super().summary()}, {len(self.lines)} ICE lines{response_note(self)}{band_note(self)}"

    def metadata(self) -> dict:
        return {"method": "ice", "feature": self.feature, "kind": self.kind, "centered": self.centered,
                "engine": self.engine, "response": self.response, "target_class": self.target_class,
                "n_rows": self.n_rows, "weight_sum": self.weight_sum, "path": self.path, "params": self.params}

    def plot(self, ax=None, **kwargs):
        return plot_ice(self, ax=ax, **kwargs)
