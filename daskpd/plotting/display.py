"""scikit-learn's ``PartialDependenceDisplay``, computed by daskpd.

:class:`PartialDependenceDisplay` *is* scikit-learn's
:class:`sklearn.inspection.PartialDependenceDisplay` (a subclass that changes nothing of
the drawing but the names of categories): its constructor takes the same ``pd_results``
(Bunches, e.g. a daskpd ``PDResult.to_bunch()``), ``features``, ``feature_names``,
``target_idx`` and ``deciles``, and ``plot(ax=...)`` draws the grid of panels, the ICE
lines, the contours and the decile ticks as scikit-learn does.  Afterwards, an axis of
more than 30 categories names at most 30 of them, evenly spread, cut to 28 characters,
at 8 pt (scikit-learn names every one, a black wall at hundreds of levels), and a figure
the display made itself is then laid out by constrained layout.  Only :meth:`from_estimator` is
daskpd's, and it only draws what a public function computes (as scikit-learn's calls
its ``partial_dependence``): ONE :func:`daskpd.model_curves` call gives every panel,
the averages (:func:`daskpd.partial_dependence`'s results) and the ICE lines
(:func:`daskpd.ice`'s) from ONE pass over ``X`` (a pandas or dask DataFrame, an array or
a parquet path), after one summary pass and the exact order statistics that give the
grids and the deciles (its ``quantiles=``).

Differences from scikit-learn's ``from_estimator`` (docs/model.md):

* ``method`` defaults to daskpd's ``"brute"`` (the average over the rows of ``X``), not
  ``"auto"``; a :class:`~daskpd.SklearnDifferenceWarning` says when scikit-learn's default
  would have used tree recursion.
* ICE panels (``kind="individual"`` / ``"both"``) draw a sample of ``subsample`` rows
  chosen by a keyed hash of their content (:func:`daskpd.ice`: the same rows however the
  data is partitioned; ``random_state`` seeds it), never collecting every row's curve;
  their average is over ALL rows.  A float ``subsample`` (a fraction) needs pandas data.
* The deciles are exact over all rows.
"""
from __future__ import annotations

import math
import numbers

import numpy as np
import pandas as pd
from sklearn.inspection import PartialDependenceDisplay as _SkDisplay
from sklearn.utils import Bunch

from .._errors import InvalidParameterError
from ..model import model_curves
from ._base import MAX_LABEL_CHARS, MAX_LABELS, label_categories

__all__ = ["PartialDependenceDisplay"]

_DECILES = np.arange(0.1, 1.0, 0.1)


def _entries(features) -> list[tuple]:
    """scikit-learn's ``features``: a list whose entries are a column (name or index) or a pair."""
    if isinstance(features, (str, numbers.Integral)):
        features = [features]
    if not isinstance(features, (list, tuple)) or not features:
        raise InvalidParameterError("PartialDependenceDisplay.from_estimator: parameter features must be a column "
                                    f"(name or index) or a list of columns and pairs; got {features!r}")
    out = []
    for e in features:
        fx = (e,) if isinstance(e, (str, numbers.Integral)) else tuple(e) if isinstance(e, (list, tuple)) else None
        if fx is None or not 1 <= len(fx) <= 2 or not all(isinstance(f, (str, numbers.Integral)) for f in fx):
            raise InvalidParameterError("PartialDependenceDisplay.from_estimator: parameter features: each entry "
                                        f"must be a column (name or index) or a pair of columns; got {e!r}")
        out.append(fx)
    return out


def _name_few_categories(display) -> bool:
    """Re-name every categorical axis of the drawn ``display`` with :func:`label_categories`;
    did any change?"""
    from matplotlib.category import StrCategoryLocator
    from matplotlib.ticker import FixedLocator


    axes = [a for a in np.ravel(np.asarray(getattr(display, "axes_", None), dtype=object)) if a is not None]
    changed = False
    for a in axes:
        for name, axis in (("x", a.xaxis), ("y", a.yaxis)):
            if not isinstance(axis.get_major_locator(), (FixedLocator, StrCategoryLocator)):
                continue
            locs = np.asarray(axis.get_major_locator()())  # no Tick objects: hundreds are slow to make
            texts = list(axis.get_major_formatter().format_ticks(locs))
            if len(texts) > MAX_LABELS or any(len(t) > MAX_LABEL_CHARS for t in texts):
                label_categories(a, locs, texts, axis=name)
                changed = True
    return changed


def _in_memory(X) -> bool:
    """Whether ``X`` is a pandas DataFrame or a numpy array (whose row count is known)."""
    return isinstance(X, (pd.DataFrame, np.ndarray))


def _check_grid(custom_values, entries, caller):
    """``custom_values``: None, or a dict whose keys are columns of ``features`` (as it names them)."""
    if custom_values is None:
        return None
    if not isinstance(custom_values, dict):
        raise InvalidParameterError(f"{caller}: parameter custom_values must be a dict {{feature: values}}; "
                                    f"got {type(custom_values).__name__}")
    named = {f for e in entries for f in e}
    unknown = [k for k in custom_values if k not in named]
    if unknown:
        raise InvalidParameterError(f"{caller}: parameter custom_values has entries for {unknown}, which are not "
                                    "among the columns of features (give each key as features names the column)")
    return dict(custom_values)


#: model_curves' parameter names in its messages -> the Display's
_NAMES = (("model_curves: ", ""), ("parameter target_class", "parameter target"),
          ("parameter grid ", "parameter custom_values "),
          ("parameter methods['partial_dependence']['method']", "parameter method"),
          ("parameter methods['partial_dependence']['grid_resolution']", "parameter grid_resolution"),
          ("parameter methods['ice']['grid_resolution']", "parameter grid_resolution"),
          ("parameter methods['partial_dependence']['percentiles']", "parameter percentiles"),
          ("parameter methods['ice']['percentiles']", "parameter percentiles"))


def _own_names(message: str, caller: str) -> str:
    """An error of :func:`daskpd.model_curves` in the Display's words (its parameters' names)."""
    for a, b in _NAMES:
        message = message.replace(a, b)
    return f"{caller}: {message}"


class PartialDependenceDisplay(_SkDisplay):
    """scikit-learn's ``PartialDependenceDisplay``; :meth:`from_estimator` computes with daskpd."""

    def plot(self, *args, **kwargs):
        """scikit-learn's ``plot``, then at most 30 named categories per axis (module docstring)."""
        out = super().plot(*args, **kwargs)
        own = not args and kwargs.get("ax") is None  # the figure is ours to lay out
        if _name_few_categories(self) and own:
            self.figure_.set_layout_engine("constrained")  # room for the vertical names
        return out

    @classmethod
    def from_estimator(cls, estimator, X, features, *, sample_weight=None, categorical_features=None,
                       feature_names=None, target=None, response_method="auto", n_cols=3, grid_resolution=100,
                       percentiles=(0.05, 0.95), custom_values=None, method=None, line_kw=None,
                       ice_lines_kw=None, pd_line_kw=None, contour_kw=None, ax=None, kind="average",
                       centered=False, subsample=1000, random_state=None, columns=None, engine="auto",
                       batch_rows=None, progress=None, storage_options=None, filters=None):
        """Partial dependence (and ICE) panels of ``features``, one per entry, on a grid
        of ``n_cols`` columns (scikit-learn's parameters; ``columns``, ``engine``,
        ``batch_rows``, ``progress``, ``storage_options``, ``filters`` are daskpd's, as
        in :func:`daskpd.partial_dependence`).  ``X`` may be a numpy or dask array,
        whose columns ``feature_names`` names (else the model's ``feature_names_in_``,
        else ``x0, x1, ...``); an integer entry of ``features`` is a column index.
        Returns the display, drawn."""
        caller = "PartialDependenceDisplay.from_estimator"
        entries = _entries(features)
        kinds_ = [kind] * len(entries) if isinstance(kind, str) else list(kind)
        if len(kinds_) != len(entries) or any(k not in ("average", "individual", "both") for k in kinds_):
            raise InvalidParameterError(f"{caller}: parameter kind must be 'average', 'individual', 'both' or a "
                                        f"list of them, one per entry of features ({len(entries)}); got {kind!r}")
        bad = [e for e, k in zip(entries, kinds_) if len(e) == 2 and k != "average"]
        if bad:
            raise InvalidParameterError(f"{caller}: ICE lines cannot be drawn for 2-way entries {bad}; give them "
                                        "kind='average'")
        avg = list(dict.fromkeys(e for e, k in zip(entries, kinds_) if k == "average"))
        ice_feats = list(dict.fromkeys(e[0] for e, k in zip(entries, kinds_) if k != "average"))
        n_lines = subsample
        if ice_feats and isinstance(subsample, numbers.Real) and not isinstance(subsample, numbers.Integral):
            if not 0 < subsample < 1:
                raise InvalidParameterError(f"{caller}: parameter subsample: a fraction must be in (0, 1); "
                                            f"got {subsample}")
            if not _in_memory(X):
                raise InvalidParameterError(f"{caller}: parameter subsample: a fraction needs the row count of a "
                                            "pandas DataFrame; pass a number of lines (int) for dask or parquet data")
            n_lines = math.ceil(len(X) * subsample)
        elif ice_feats and (not isinstance(subsample, numbers.Integral) or subsample < 1):
            raise InvalidParameterError(f"{caller}: parameter subsample must be an int >= 1 or a fraction in (0, 1); "
                                        f"got {subsample!r}")
        response = "auto" if response_method is None else response_method
        requests = {}
        if avg:
            requests["partial_dependence"] = {"features": avg, "grid_resolution": grid_resolution,
                                              "percentiles": percentiles,
                                              **({} if method is None else {"method": method})}
        if ice_feats:  # a sample of lines (their average is over all rows)
            requests["ice"] = {"features": ice_feats, "grid_resolution": grid_resolution,
                               "percentiles": percentiles, "n_lines": int(n_lines), "centered": False}
        grid = _check_grid(custom_values, entries, caller)
        try:  # every panel: one call, one pass
            out = model_curves(estimator, X, requests, grid=grid,
                               quantiles=_DECILES, sample_weight=sample_weight, response=response,
                               target_class=target, columns=columns, categorical_features=categorical_features,
                               engine=engine, progress=progress, storage_options=storage_options, filters=filters,
                               feature_names=feature_names,
                               random_state=0 if random_state is None else int(random_state),
                               **({} if batch_rows is None else {"batch_rows": int(batch_rows)}))
        except InvalidParameterError as exc:  # the Display's names for model_curves' parameters
            raise InvalidParameterError(_own_names(str(exc), caller)) from None
        results = {}  # entry -> the public function's result
        if avg:
            results.update(zip(avg, out["partial_dependence"].values()))
        if ice_feats:
            cats = [r.feature for r in out["ice"].values() if r.kind != "numeric"]
            if cats:
                raise InvalidParameterError(f"{caller}: ICE lines cannot be drawn for categorical features {cats}; "
                                            "give them kind='average'")
            results.update(((f,), r) for f, r in zip(ice_feats, out["ice"].values()))

        pd_bunches, named, kinds_by_name, deciles_by_name = [], [], {}, {}
        for e, k in zip(entries, kinds_):
            r = results[e] if k == "average" else results[(e[0],)]
            if k == "average":
                pd_bunches.append(r.to_bunch())
                names, fkinds = list(r.features), list(r.kinds)
            else:
                b = Bunch(grid_values=[np.asarray(r.grid)], individual=r.lines[np.newaxis])
                if k == "both":
                    b["average"] = np.asarray(r.pd)[np.newaxis]
                pd_bunches.append(b)
                names, fkinds = [r.feature], [r.kind]
            named.append(tuple(names))
            kinds_by_name.update(zip(names, fkinds))
            deciles_by_name.update({f: out.quantiles[f] for f in names if f in out.quantiles})
        flat = list(dict.fromkeys(f for e in named for f in e))
        entries = named
        index = {f: i for i, f in enumerate(flat)}
        display = cls(
            pd_results=pd_bunches,
            features=[tuple(index[f] for f in e) for e in entries],
            feature_names=flat,
            target_idx=0,  # every Bunch holds the one output asked for (target)
            deciles={index[f]: v for f, v in deciles_by_name.items()},
            kind=kinds_ if not isinstance(kind, str) else kind,
            subsample=int(n_lines) if ice_feats else subsample,
            random_state=random_state,
            is_categorical=[tuple(kinds_by_name[f] != "numeric" for f in e) for e in entries],
        )
        return display.plot(ax=ax, n_cols=n_cols, line_kw=line_kw, ice_lines_kw=ice_lines_kw,
                            pd_line_kw=pd_line_kw, contour_kw=contour_kw, centered=centered)
