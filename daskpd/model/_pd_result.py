"""The result of a partial dependence (:class:`PDResult`), and its making from a finished
:class:`~daskpd.model._pd_pass.PDJob` partial or by tree recursion (:func:`pd_results`).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from .._errors import DataError, InvalidParameterError
from ..plotting.model import plot_pd
from ..results import CurveResult, curve_frame
from ..results.curves import DEFAULT_BAND, band_columns, band_is_flat, band_note, trial_band
from ._common import class_columns, is_class_output, response_label, response_note
from ._pd_engine import engine_of
from ._pd_recursion import recursion_average
from ._predictor import Predictor

__all__ = ["PDResult", "pd_results"]


@dataclass(repr=False)
class PDResult(CurveResult):
    """Partial dependence of the model's response on one feature or a pair.

    ``grid_values``  list (one or two arrays) of the grid values of ``features``
    ``average``      PD, shape ``(len(g0),)`` or ``(len(g0), len(g1))``
    ``kinds``        "numeric" | "categorical" per feature
    ``quantiles``    ``{feature: values}``: with ``quantiles=``, each numeric feature's exact quantiles
    """

    features: tuple
    grid_values: list
    average: np.ndarray
    kinds: tuple
    method: str
    engine: str | None = None
    response: str = "predict"
    target_class: object = None
    n_rows: int = 0
    weight_sum: float = 0.0
    params: dict = field(default_factory=dict)
    outputs: list | None = None
    individual: np.ndarray | None = None
    pd_kind: str = "average"
    trials_pd: np.ndarray | None = None  # (n_trials, *grid), (n_outputs, n_trials, *grid) with outputs
    quantiles: dict | None = None

    # -- bootstrap trials and their band (n_trials > 1; the model is fixed)

    @property
    def n_trials(self) -> int:
        return 1 if self.trials_pd is None else self.trials_pd.shape[0 if self.outputs is None else 1]

    def band(self) -> dict | None:
        """``{"std", "lo", "hi", "n"}`` over the trials at every grid cell (one output;
        see :func:`daskpd.results.curves.trial_band`), None without trials."""
        if self.trials_pd is None or self.outputs is not None:
            return None
        return trial_band(self.trials_pd, tuple(self.params.get("band", DEFAULT_BAND)), center=self.average)

    def is_flat(self) -> bool:
        """Whether the curve is not distinguishable from flat (a flat line fits its
        simultaneous band: :func:`daskpd.results.curves.flat_test`; the plot then draws
        it on the scale of ``params["target_std"]`` or ``params["response_std"]``);
        False without a band."""
        return band_is_flat(self)

    # -- scikit-learn's Bunch: result["average"], result["grid_values"], result["individual"]

    @property
    def n_outputs(self) -> int:
        return 1 if self.outputs is None else len(self.outputs)

    def keys(self) -> list:
        """scikit-learn's keys for this ``kind``: ``grid_values`` and ``average`` and/or ``individual``."""
        return ["grid_values", *(["average"] if self.pd_kind in ("average", "both") else []),
                *(["individual"] if self.pd_kind in ("individual", "both") else [])]

    def __getitem__(self, key):
        """scikit-learn's shapes: ``average`` ``(n_outputs, *grid)``, ``individual``
        ``(n_outputs, n_rows, *grid)``.  (The attributes keep daskpd's shapes: ``.average``
        is ``(*grid)`` for one output.)"""
        if key not in self.keys():
            raise KeyError(f"{key!r}: this partial dependence (kind={self.pd_kind!r}) has the keys {self.keys()}"
                           + ("; the average is the attribute .average" if key == "average" else ""))
        if key == "grid_values":
            return list(self.grid_values)
        arr = self.average if key == "average" else self.individual
        return arr if self.outputs is not None else arr[np.newaxis]

    def __contains__(self, key) -> bool:
        return key in self.keys()

    def __iter__(self):
        return iter(self.keys())

    def to_bunch(self):
        """A ``sklearn.utils.Bunch`` with scikit-learn's keys and shapes (what
        ``sklearn.inspection.partial_dependence`` returns, and what
        ``PartialDependenceDisplay`` draws)."""
        from sklearn.utils import Bunch

        return Bunch(**{k: self[k] for k in self.keys()})

    def output(self, target_class) -> "PDResult":
        """The PD of one class, when the result holds every class (``outputs``)."""
        if self.outputs is None:
            if target_class is None or target_class == self.target_class:
                return self
            raise InvalidParameterError(f"parameter target_class: this result holds class {self.target_class!r} only")
        hits = [i for i, c in enumerate(self.outputs) if c == target_class]
        if not hits:
            raise InvalidParameterError(f"parameter target_class={target_class!r} is not one of {self.outputs}")
        k = hits[0]
        return replace(self, average=self.average[k], target_class=self.outputs[k], outputs=None,
                       individual=None if self.individual is None else self.individual[k],
                       trials_pd=None if self.trials_pd is None else self.trials_pd[k])

    @property
    def feature(self) -> str:
        return self.features[0] if len(self.features) == 1 else self.features

    @property
    def x(self) -> np.ndarray:
        return self.grid_values[0]

    @property
    def pd(self) -> np.ndarray:
        return self.average

    def __repr__(self) -> str:
        shape = "x".join(str(len(g)) for g in self.grid_values)
        return (f"PDResult(features={self.features}, grid={shape}, method={self.method!r}, engine={self.engine!r}, "
                f"response={self.response!r}, rows={self.n_rows})")

    @property
    def kind(self) -> str:
        return self.kinds[0]

    def curve(self) -> dict:
        """1-way: the grid and the PD.  2-way: one row per cell (row-major), the first
        feature in the head, the second in ``feature_2``, ``kind_2``, ``x_2`` | ``category_2``.
        A result holding every class stacks them, with a ``target_class`` column."""
        if self.outputs is None:
            c = self._curve(self.average, self.band())
            c["extra"].update(class_columns(self, len(c["pd"])))
            return c
        cs = [self._curve(self.average[k], self.output(self.outputs[k]).band()) for k in range(self.n_outputs)]
        extra = {k: np.concatenate([c["extra"][k] for c in cs]) for k in cs[0]["extra"]}
        labels = np.empty(sum(len(c["pd"]) for c in cs), dtype=object)
        labels[:] = [lab for lab, c in zip(self.outputs, cs) for _ in range(len(c["pd"]))]
        extra["target_class"] = labels
        return {"positions": np.concatenate([np.asarray(c["positions"], dtype=object if self.kinds[0] != "numeric"
                                                        else "float64") for c in cs]),
                "pd": np.concatenate([c["pd"] for c in cs]), "extra": extra}

    def _curve(self, average, band=None) -> dict:
        cols = {k: np.asarray(v).reshape(-1) for k, v in band_columns(band).items()}
        if len(self.features) == 1:
            return {"positions": self.grid_values[0], "pd": average, "extra": cols}
        g0, g1 = self.grid_values
        second = np.tile(np.asarray(g1, dtype="float64" if self.kinds[1] == "numeric" else object), len(g0))
        extra = {"feature_2": np.full(len(second), self.features[1], dtype=object),
                 "kind_2": np.full(len(second), self.kinds[1], dtype=object),
                 ("x_2" if self.kinds[1] == "numeric" else "category_2"): second, **cols}
        return {"positions": np.repeat(g0, len(g1)), "pd": average.reshape(-1), "extra": extra}

    def to_frame(self) -> pd.DataFrame:
        c = self.curve()
        return curve_frame(self.features[0], self.kinds[0], c["positions"], c["pd"], n_rows=self.n_rows,
                           extra=c["extra"])

    def summary(self) -> str:
        """A few lines: the grid, the range, the rows; a classifier's response (for a
        binary one, that it is the positive class); with every class, one line each."""
        if self.outputs is None:
            return super().summary() + response_note(self) + band_note(self)
        what = "categories" if self.kinds[0] == "categorical" else "positions"
        classes = is_class_output(self)
        name = self.feature if len(self.features) == 1 else " x ".join(self.features)
        lines = [f"{name}: {self.n_outputs} {'classes' if classes else 'outputs'}, one curve each "
                 f"(result.output(c) for one){f', {self.n_rows:,} rows' if self.n_rows else ''}"]
        width = max(len(self._output_label(c)) for c in self.outputs)
        for c in self.outputs:
            y = np.asarray(self.output(c).average, dtype="float64").reshape(-1)
            ok = np.isfinite(y)
            rng = f"[{np.min(y[ok]):.4g}, {np.max(y[ok]):.4g}]" if ok.any() else "[nan, nan]"
            lines.append(f"  {self._output_label(c):<{width}}  {y.size} {what}, range {rng}")
        return "\n".join(lines)

    def _output_label(self, c) -> str:
        return response_label(self.response, c) or f"output {c}"

    def metadata(self) -> dict:
        return {"method": "partial_dependence", "pd_method": self.method, "engine": self.engine,
                "features": list(self.features), "kinds": list(self.kinds), "response": self.response,
                "target_class": self.target_class, "n_rows": self.n_rows, "weight_sum": self.weight_sum,
                "kind": self.pd_kind, "outputs": self.outputs, "params": self.params}

    def plot(self, ax=None, target_class=None, **kwargs):
        """The curve (1-way) or surface (2-way).  A result holding every class draws one
        curve per class on one axes (1-way) or one panel per class (2-way, returning
        the panels); ``target_class`` draws that class alone."""
        if target_class is not None:
            return plot_pd(self.output(target_class), ax=ax, **kwargs)
        return plot_pd(self, ax=ax, **kwargs)


def pd_results(items, grids: dict, kinds: dict, pred: Predictor, part, params: dict) -> dict:
    """``{item: PDResult}`` from a finished :class:`PDJob` partial (brute), or by tree
    recursion when ``part`` is None."""
    results = {}
    if part is None:
        for it in items:
            avg = recursion_average(pred, it, [grids[f] for f in it])
            results[it] = PDResult(features=it, grid_values=[grids[f] for f in it], average=avg,
                                   kinds=tuple(kinds[f] for f in it), method="recursion", engine=None,
                                   response=pred.response, target_class=pred.target_class, params=params)
        return results
    if part.wsum <= 0:
        raise DataError("data has no rows" if part.n_rows == 0 else "the sample weights sum to 0")
    for it, s in zip(items, part.sums):
        gs = [grids[f] for f in it]
        eng = engine_of(pred, it, kinds, need_rows=part.rows is not None,
                        sets=1 if part.set_wsum is None else len(part.set_wsum))
        shape = [len(g) for g in gs]
        trials = None
        if part.set_wsum is not None:  # bootstrap trials: one row of sums per weight set
            with np.errstate(invalid="ignore", divide="ignore"):
                trials = (s[1:] / part.set_wsum[1:, None]).reshape([len(s) - 1, *shape])
            s = s[0]
        results[it] = PDResult(features=it, grid_values=gs, average=(s / part.wsum).reshape(shape),
                               kinds=tuple(kinds[f] for f in it), method="brute", engine=eng,
                               response=pred.response, target_class=pred.target_class, n_rows=part.n_rows,
                               weight_sum=part.wsum, params=params, trials_pd=trials)
    return results
