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
daskpd's: every panel's numbers come from ONE pass over ``X`` (a pandas or dask
DataFrame, or a parquet path), after one summary pass and the exact order statistics
that give the grids and the deciles.

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
from sklearn.inspection import PartialDependenceDisplay as _SkDisplay
from sklearn.utils import Bunch

from .._errors import InvalidParameterError
from ..model._common import DEFAULT_METHOD, all_classes, show_class, warn_method
from ..model._pd_pass import PDJob
from ..model._pd_recursion import resolve_pd_method
from ..model._pd_result import pd_results
from ..model._grids import check_grid_arg, grids_and_quantiles
from ..model._ice import ICEJob, finish_ice
from ..model._passes import Plan, run_jobs
from ..model._predictor import DEFAULT_BATCH_ROWS
from ..model._arrays import grid_names, open_model_input, resolve_columns
from ..model._setup import prepare_model_run

__all__ = ["PartialDependenceDisplay"]

_DECILES = np.arange(0.1, 1.0, 0.1)


def _entries(features, ds) -> list[tuple]:
    """scikit-learn's ``features``: a list whose entries are a name / index or a pair."""
    features = resolve_columns(features, ds)
    if isinstance(features, str):
        features = [features]
    if not isinstance(features, (list, tuple)) or not features:
        raise InvalidParameterError("PartialDependenceDisplay.from_estimator: parameter features must be a column "
                                    f"(name or index) or a list of columns and pairs; got {features!r}")
    out = []
    for e in features:
        fx = (e,) if isinstance(e, str) else tuple(e) if isinstance(e, (list, tuple)) else None
        if fx is None or not 1 <= len(fx) <= 2 or not all(isinstance(f, str) for f in fx):
            raise InvalidParameterError("PartialDependenceDisplay.from_estimator: parameter features: each entry "
                                        f"must be a column (name or index) or a pair of columns; got {e!r}")
        out.append(fx)
    return out


def _name_few_categories(display) -> bool:
    """Re-name every categorical axis of the drawn ``display`` with :func:`label_categories`;
    did any change?"""
    from matplotlib.category import StrCategoryLocator
    from matplotlib.ticker import FixedLocator

    from ._base import MAX_LABEL_CHARS, MAX_LABELS, label_categories

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
        mi = open_model_input(X, feature_names=feature_names, model=estimator, sample_weight=sample_weight,
                              storage_options=storage_options, filters=filters, caller=caller)
        ds, sample_weight = mi.dataset, mi.sample_weight
        entries = _entries(features, ds)
        kinds_ = [kind] * len(entries) if isinstance(kind, str) else list(kind)
        if len(kinds_) != len(entries) or any(k not in ("average", "individual", "both") for k in kinds_):
            raise InvalidParameterError(f"{caller}: parameter kind must be 'average', 'individual', 'both' or a "
                                        f"list of them, one per entry of features ({len(entries)}); got {kind!r}")
        bad = [e for e, k in zip(entries, kinds_) if len(e) == 2 and k != "average"]
        if bad:
            raise InvalidParameterError(f"{caller}: ICE lines cannot be drawn for 2-way entries {bad}; give them "
                                        "kind='average'")
        flat = list(dict.fromkeys(f for e in entries for f in e))
        ds.check(flat, "parameter features")
        grid = check_grid_arg(grid_names(custom_values, ds), flat)
        response = "auto" if response_method is None else response_method
        classes = all_classes(estimator, response, target)
        if classes:
            raise InvalidParameterError(f"{caller}: parameter target is required for a multi-class model: one of "
                                        f"[{', '.join(map(show_class, classes))}] (the class whose panels are drawn)")
        run = prepare_model_run(estimator, ds, flat, columns=columns, response=response, target_class=target,
                                engine=engine, sample_weight=sample_weight,
                                categorical_features=categorical_features,
                                storage_options=storage_options, filters=filters)
        pred = run.predictor
        method = DEFAULT_METHOD if method is None else method
        avg = list(dict.fromkeys(e for e, k in zip(entries, kinds_) if k == "average"))
        ice_feats = list(dict.fromkeys(e[0] for e, k in zip(entries, kinds_) if k != "average"))
        cats = [f for f in ice_feats if run.kinds[f] != "numeric"]
        if cats:
            raise InvalidParameterError(f"{caller}: ICE lines cannot be drawn for categorical features {cats}; give "
                                        "them kind='average'")
        if avg:
            warn_method(method, pred, run.weight, "average")
            method = resolve_pd_method(method, pred, run.kinds, avg, run.weight)
        n_lines = subsample
        if ice_feats and isinstance(subsample, numbers.Real) and not isinstance(subsample, numbers.Integral):
            if not 0 < subsample < 1:
                raise InvalidParameterError(f"{caller}: parameter subsample: a fraction must be in (0, 1); "
                                            f"got {subsample}")
            if not ds.is_pandas:
                raise InvalidParameterError(f"{caller}: parameter subsample: a fraction needs the row count of a "
                                            "pandas DataFrame; pass a number of lines (int) for dask or parquet data")
            n_lines = math.ceil(len(ds.frame) * subsample)
        elif ice_feats and (not isinstance(subsample, numbers.Integral) or subsample < 1):
            raise InvalidParameterError(f"{caller}: parameter subsample must be an int >= 1 or a fraction in (0, 1); "
                                        f"got {subsample!r}")

        grids, deciles_by_name = grids_and_quantiles(
            run.ddf, flat, run.kinds, grid_resolution=grid_resolution, percentiles=percentiles, grid=grid,
            quantiles={f: _DECILES for f in flat}, progress=progress)
        params = {"grid_resolution": grid_resolution, "percentiles": list(percentiles)}
        jobs = []
        brute_avg = bool(avg) and method == "brute"
        if brute_avg:
            jobs.append(PDJob([(e, [grids[f] for f in e]) for e in avg], run.kinds))
        ice_jobs = [ICEJob(f, grids[f], run.kinds, int(n_lines), 0 if random_state is None else int(random_state))
                    for f in ice_feats]
        jobs += ice_jobs
        parts = []
        if jobs:
            plan = Plan(jobs, predictor=pred, weight=run.weight,
                        batch_rows=DEFAULT_BATCH_ROWS if batch_rows is None else int(batch_rows))
            parts, _ = run_jobs(run.ddf, plan, progress=progress, name="daskpd-pd-display")
        results = {}
        if avg:
            results.update(pd_results(avg, grids, run.kinds, pred, parts[0] if brute_avg else None, params))
        ices = {j.feature: finish_ice(j, p, pred, centered=False, params=params)
                for j, p in zip(ice_jobs, parts[1:] if brute_avg else parts)}

        pd_bunches = []
        for e, k in zip(entries, kinds_):
            if k == "average":
                pd_bunches.append(results[e].to_bunch())
            else:
                r = ices[e[0]]
                b = Bunch(grid_values=[np.asarray(r.grid)], individual=r.lines[np.newaxis])
                if k == "both":
                    b["average"] = np.asarray(r.pd)[np.newaxis]
                pd_bunches.append(b)
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
            is_categorical=[tuple(run.kinds[f] != "numeric" for f in e) for e in entries],
        )
        return display.plot(ax=ax, n_cols=n_cols, line_kw=line_kw, ice_lines_kw=ice_lines_kw,
                            pd_line_kw=pd_line_kw, contour_kw=contour_kw, centered=centered)
