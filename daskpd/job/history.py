"""``daskpd history OUTPUT/JOB_NAME``: how each feature moved between consecutive runs.

Runs are the complete run directories of the job (those holding ``manifest.json``),
ordered by run id (the default ids are UTC timestamps and sort in time order; so do
ISO dates).  For every consecutive pair (previous, current) and every curve
(method, feature) the drift table has:

``importance_prev``, ``importance``
    the feature's share of the total importance in each run (its importance divided
    by the sum over the run's features).  Curves of StratPD/CatStratPD use the
    ``importances`` table, model-based curves the ``pd_variance`` one; NaN if the job
    computed no importance.
``importance_change``
    the change of the feature's *unnormalised* importance (``importance_raw``, in
    units of the target), divided by the previous run's total (sum over features):
    0.05 = the feature gained five percent of the previous total.  Unlike a change
    of shares, this does not move every feature when one of them changes.
``curve_rms``
    root-mean-square difference of the two curves, in units of the target, after
    centring each on the common support (partial dependence is defined up to an
    additive constant: StratPD is 0 at its leftmost supported x, which moves when
    the support does).  Numeric features: both curves are linearly interpolated on
    101 evenly spaced points of the *overlap* of their supported x ranges.
    Categorical features: the categories both runs estimated.
``curve_distance``
    ``curve_rms / scale`` with ``scale`` the larger of the two curves' ranges (max -
    min on the common support), floored at 10% of the largest curve range of the
    previous run (all features of the same method).  So 0.1 means "the curve moved
    by a tenth of its own size", and the noise of a flat, irrelevant feature is
    measured against the effects that matter rather than against its own noise.
``curve_max``
    the largest local move of the curve, a fraction of the same ``scale``: the two
    curves' difference on the common points, less its row-weighted median (so the
    rows whose part of the curve did not move stay at 0, whatever the constant PD is
    defined up to),
    smoothed over a window of 5 of the 101 grid points (numeric: 5% of the range, so
    a single noisy point does not count as a move), then the largest absolute value.
    A change confined to part of the range (the right end of a curve moving from
    -50k to -35k over the last quarter of the rows) is diluted by ``curve_distance``'s
    average (0.07) but not by this maximum (0.3).  Categorical: the common
    categories holding at least 1% of the rows in both runs (all common categories
    when the curves have no counts), unsmoothed.
``support_overlap``
    numeric: length of the overlap of the supported x ranges / length of their
    union; categorical: Jaccard index of the sets of estimated categories.
``scale``
    the unit of the fractions: the larger of the two curves' ranges on the common
    support, floored as ``curve_distance`` says.
``drift``
    the raw drift: ``max(curve_distance, curve_max, |importance_change|, 1 -
    support_overlap)``; missing terms (NaN) are ignored.
``noise``, ``noise_source``, ``z``, ``z_crit``, ``drift_sig``
    the drift against the noise of the two runs.  ``"band"`` when both curves have a
    band (``pd_std``, from bootstrap trials): :func:`band_z` re-anchors both curves at a
    common point and divides their difference at every common point by
    ``sqrt(s_prev^2 + s_cur^2)`` (plus the anchor's spread); ``z`` is the largest,
    ``z_crit`` the Bonferroni critical value of the points at family-wise level
    ``alpha`` (Student's t with the trials' degrees of freedom: ``[importances] n_trials``
    for StratPD/CatStratPD, ``[model] n_trials`` for the model-based curves), ``drift_sig`` the
    largest local move (``curve_max``'s measure) among the points beyond ``z_crit``;
    ``noise`` the median standard error (a fraction of ``scale``).  Otherwise
    ``"trials"`` (the importance's trial standard deviation: ``noise = sqrt(std_prev**2
    + std**2) / max(importance_prev, importance)``, ``z`` = the shape's drift / noise),
    ``"rows"`` (``sqrt(P_prev / N_prev + P / N)``, the relative standard error of a point
    estimated from ``N / P`` rows: a ranking, not a test, so ``z_crit`` is NaN) or
    ``"none"``.
``drift_noise``
    ``drift / max(noise, 0.01)``.
``status``
    ``drifted`` when ``drift_sig > threshold`` (the change is beyond the noise and
    larger than the threshold); ``ok``; ``noisy`` when the raw drift exceeds the
    threshold and there is no calibrated noise (``rows`` or ``none``) to test it
    against; ``n/a`` when the curves share fewer than two points; ``new`` / ``gone``
    when the curve exists in only one of the two runs.
``cause``
    :func:`pair_cause`: ``data`` (both runs' ``manifest["stratification"]["id"]``
    agree), ``refit`` (the ids differ, the input fingerprint does not), ``data+refit``,
    ``none`` (same id, same input) or ``unknown`` (no id); model-based curves, which
    use no trees: ``data`` or ``none``.

The table of the last two runs and the history page's sections are ordered by
:data:`RANKED_BY`.  docs/jobs.md, "History and drift", has the full account.

Outputs (``OUTPUT/JOB_NAME/history/`` by default, replaced atomically):
``drift.parquet`` (every consecutive pair), ``drift.json`` (:func:`summary`, for a
scheduler), ``history.html`` (self-contained: the
drift table of the last two runs, the importance of each feature across runs, and a
plot of each feature's curves across the last ``N`` runs) and ``plots/*.png``.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from . import history_newold
from .history_newold import HistoryError
from .history_curves import GRID_POINTS, MAX_WINDOW, band_z, curve_distance, curve_noise
from .history_render import NEWEST_COLOR, feature_figure, importance_figure, run_styles, write_history
from .history_runs import Run, load_runs, unfinished_newest
from .history_stats import (ALPHA, COLUMNS, IMPORTANCE_FOR, NOISE_FLOOR, RANKED_BY, SCALE_FLOOR, STATUS_ORDER, History,
                            compare, critical_z, drift_table, pair_cause, rank_rows, run_trials, summary,
                            write_summary)
from .spec_parse import load_spec
from .store import DEFAULT_OUTPUT

__all__ = ["HistoryError", "History", "history", "job_of_spec", "load_runs", "unfinished_newest", "curve_distance", "drift_table", "compare", "band_z",
           "critical_z", "pair_cause", "run_trials", "summary", "write_summary", "rank_rows", "Run", "COLUMNS",
           "IMPORTANCE_FOR", "GRID_POINTS", "SCALE_FLOOR", "MAX_WINDOW", "NOISE_FLOOR", "ALPHA", "STATUS_ORDER",
           "RANKED_BY", "curve_noise", "feature_figure", "importance_figure", "run_styles", "NEWEST_COLOR"]


def job_of_spec(path: str | os.PathLike, output: str | os.PathLike | None = None):
    """``(job directory, spec)`` of a job spec file: ``OUTPUT/NAME`` with ``OUTPUT`` the
    given root, else the spec's ``output.dir``, else ``./daskpd-runs`` (as ``daskpd run``
    writes it)."""
    spec = load_spec(path, check_files=False)
    root = Path(output if output is not None else (spec.output.dir or DEFAULT_OUTPUT)).expanduser().resolve()
    return root / spec.name, spec


def _levels(threshold, alpha, settings: dict) -> tuple:
    """``(threshold, alpha, by)``: each given value, else the job spec's ``[history]``
    one (a finite threshold >= 0, an alpha in (0, 1); another recorded value is not
    used), else the default; ``by`` names the spec's values that are not the defaults,
    or ""."""
    from_spec = []

    def pick(given, key, default, ok):
        if given is not None:
            return given
        v = settings.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and ok(float(v)):
            if float(v) != default:
                from_spec.append(f"{key} = {float(v):g}")
            return float(v)
        return default

    threshold = pick(threshold, "threshold", 0.1, lambda v: np.isfinite(v) and v >= 0)
    alpha = pick(alpha, "alpha", ALPHA, lambda v: 0 < v < 1)
    by = f"[history] {' and '.join(from_spec)} in the job spec" if from_spec else ""
    return threshold, alpha, by


def history(job_dir: str | os.PathLike, *, features=None, last: int = 10, threshold: float | None = None,
            alpha: float | None = None, output=True, against: str | None = None, window: int | None = None,
            spec=None, use_spec: bool = True) -> History:
    """Compare the runs of a job.  ``output``: True (JOB_DIR/history), a directory, or None/False.
    ``against`` (a run id) or ``window`` (N): also compare the newest run's curves with
    that run's (the N-th run before the newest).  Without either (and ``use_spec``), the
    job spec's ``[history] baseline`` or ``window`` does: of ``spec`` (a
    :class:`~daskpd.job.spec.JobSpec`), else of the spec the newest run recorded; a run
    it names that is not there is noted (``History.pin_note``), not an error.
    ``threshold`` and ``alpha`` left None take the same spec's ``[history] threshold``
    and ``alpha`` (with ``use_spec``), else 0.1 and :data:`ALPHA`; ``History.levels_by``
    says where they came from."""
    job_dir = Path(job_dir)
    runs = load_runs(job_dir)
    settings = history_newold.spec_history(runs, spec) if use_spec else {}
    threshold, alpha, levels_by = _levels(threshold, alpha, settings)
    if features:
        known = {str(f) for r in runs for f in r.curves["feature"].unique()}
        unknown = [f for f in features if f not in known]
        if unknown:
            raise HistoryError(f"feature{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} not in any "
                               f"run of {job_dir.name!r}; features: {', '.join(sorted(known))}")
    table = drift_table(runs, threshold, alpha)
    if features and len(table):
        table = table[table["feature"].isin(list(features))].reset_index(drop=True)
    nvo, nvo_pts = history_newold.latest(runs[-1], features)
    pin = history_newold.pinned(runs, against, window)
    by = f"--against {against}" if against is not None else f"--window {window}" if window is not None else ""
    note = ""
    if against is None and window is None and use_spec:
        pin, by, note = history_newold.pinned_by_spec(runs, history_newold.spec_history(runs, spec))
    pinned_table = pd.DataFrame()
    if pin is not None:
        pinned_table = compare(pin, runs[-1], threshold, alpha)
        if features and len(pinned_table):
            pinned_table = pinned_table[pinned_table["feature"].isin(list(features))].reset_index(drop=True)
    h = History(job_dir=job_dir, runs=runs, table=table, threshold=threshold,
                features=list(features) if features else None, alpha=alpha, new_vs_old=nvo,
                new_vs_old_points=nvo_pts, pinned=pin, against=pinned_table, pinned_by=by if pin is not None else "",
                pin_note=note, levels_by=levels_by)
    if output:
        out_dir = job_dir / "history" if output is True else Path(output)
        h.written = write_history(h, out_dir.resolve(), last)
    return h
