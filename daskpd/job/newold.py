"""A run's new-against-old comparisons (docs/drift.md): which rows are new, the two
curves of every feature under one stratification (or one model-based layout), and the
drift test (:mod:`.drift`).

The **nightly** comparison is the default: the files appended since the base run (the
newest run keeping a state) against the rows of that run, on every run of an
incremental job whose old files did not change -- an incremental night (the new files'
sums against the kept ones) and a night that refits the trees (the new files scanned
once more under the new trees, their sums taken off all the rows'). ``[history]
baseline`` (a run id) and ``[history] window`` (N) add one more: the files appended
since that run (the N-th newest run keeping a state) against its rows, the files since
scanned under this run's trees.  Model-based curves are compared on incremental nights
(the new files' partials against the kept ones, under the kept grids and bins).

Each comparison is one family: its curves' p-values are adjusted together
(:func:`daskpd.job.drift.decide`), and the run writes them into ``drift/``
(:func:`write`) and its manifest (:func:`manifest_record`).
"""
from __future__ import annotations

import json
import os
import uuid
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from .._engine.scheduler import current_client
from .._strat import apart
from .._strat.apart import MAX_POSITIONS, CellChange, by_cells, cell_change, comparison_states, new_curve
from .._strat.estimators import ESTIMATORS, entry_key, estimator_of_method, feature_of
from .._strat.options import FinishOptions
from ..results.base import write_parquet
from .drift import POINT_COLUMNS, DriftRecord, compare_curves, critical, decide
from .seal import DIGEST, SEAL_NAME, StateDamaged, file_digest
from .store import list_runs

__all__ = ["Reference", "Comparison", "references", "model_free", "compare_states", "curve_entries", "start_compare", "Pending", "model_based", "model_night", "finish", "write",
           "manifest_record", "record_frame", "points_frame", "RECORD_COLUMNS", "DRIFT_DIR", "TESTS"]

#: the run directory's sub-directory holding its comparisons
DRIFT_DIR = "drift"
#: the comparisons a run can make, in the order the tables list them
TESTS = ("new-vs-old", "baseline", "window")
#: below this share of the new rows in the cells both sides hold, the record says so
SHARED_NOTE = 0.5


@dataclass
class Reference:
    """What a comparison compares: ``test`` (one of :data:`TESTS`), the reference run
    (``run_id``: its rows are the old ones), the new files (full paths) and, when it
    cannot be made, why (``skip``)."""

    test: str
    run_id: str | None
    new_files: list = field(default_factory=list)
    skip: str = ""


@dataclass
class Comparison:
    """One comparison of a run: its reference, its records (decided by :func:`finish`)
    and its settings."""

    reference: Reference
    records: list = field(default_factory=list)
    alpha: float = 0.01
    threshold: float = 0.1
    n_trials: int = 0


def _files_of(job_dir: Path, run_id: str) -> list[dict]:
    """The input files a run's state covers (``state/files.json``), its size and
    checksum checked against the state's seal first."""
    sdir = job_dir / run_id / "state"
    where = f"{run_id}/state/files.json"
    try:
        seal = json.loads((sdir / SEAL_NAME).read_bytes())
        want = seal["files"]["files.json"]
    except (OSError, ValueError, KeyError, TypeError):
        raise StateDamaged(f"{run_id}/state/{SEAL_NAME}", "cannot be read or does not list files.json") from None
    path = sdir / "files.json"
    try:
        if path.stat().st_size != want.get("bytes") or file_digest(path) != want.get(DIGEST):
            raise StateDamaged(where, "does not match its seal")
        got = json.loads(path.read_bytes())
    except OSError as exc:
        raise StateDamaged(where, f"cannot be read ({type(exc).__name__})") from None
    return list(got.get("files") or [])


def _since(job_dir: Path, run_id: str, stamps: list) -> tuple[list, str]:
    """(the files appended since ``run_id``, "") or ([], why not)."""
    try:
        old = _files_of(job_dir, run_id)
    except StateDamaged as exc:
        return [], f"the file list of run {run_id} cannot be used: {exc}"
    now = {f["rel"]: f for f in stamps}
    for f in old:
        cur = now.get(f["rel"])
        if cur is None:
            return [], f"file {f['rel']!r} of run {run_id} was removed since"
        if (cur["size"], cur["stamp"]) != (f["size"], f["stamp"]):
            return [], f"file {f['rel']!r} of run {run_id} changed since"
    seen = {f["rel"] for f in old}
    new = [f["path"] for f in stamps if f["rel"] not in seen]
    return new, "" if new else f"no file appended since run {run_id}"


def references(spec, job_dir: Path, plan) -> list[Reference]:
    """The comparisons this run makes (see the module docstring), each with its new files
    or why it cannot be made."""
    out = []
    if plan is None or not spec.run.incremental:
        return out
    if plan.mode == "incremental":
        out.append(Reference("new-vs-old", plan.base_run, list(plan.new_files),
                             "" if plan.new_files else f"no file appended since run {plan.base_run}"))
    elif plan.appended is not None:
        out.append(Reference("new-vs-old", plan.base_run, list(plan.appended),
                             "" if plan.appended else f"no file appended since run {plan.base_run}"))
    else:
        out.append(Reference("new-vs-old", plan.base_run, [],
                             "this run is a full run (incremental.reason says why)" if plan.base_run else "no earlier run keeps a state"))
    h = spec.history
    if h.baseline is None and h.window is None:
        return out
    kept = [r for r in list_runs(job_dir) if (job_dir / r / "state").is_dir()]
    if h.baseline is not None:
        test, ref = "baseline", h.baseline
        why = "" if ref in kept else f"run {ref} ([history] baseline) is not a complete run keeping a state"
    else:
        test = "window"
        ref = kept[-h.window] if len(kept) >= h.window else None
        why = "" if ref else f"[history] window = {h.window}: only {len(kept)} earlier run(s) keep a state"
    new, why2 = _since(job_dir, ref, plan.stamps) if not why else ([], why)
    out.append(Reference(test, ref, new, why or why2))
    return out


def _note(rows) -> str:
    new_kept, new_all, old_kept, old_all = rows
    if new_all > 0 and new_kept < SHARED_NOTE * new_all:
        return (f"only {new_kept / new_all:.0%} of the new rows fall in cells the old rows hold (new positions, "
                "categories or leaves): the rest is not compared")
    return ""


def model_free(spec, ref: Reference, stratification, curves: dict, finish_options: FinishOptions, *, new_state=None,
               old_state=None, whole_state=None) -> list[DriftRecord]:
    """The records of the model-free curves (``curves``: ``{(method, feature): result}``)
    of one comparison of a run (:func:`compare_states` with ``[history] n_trials``)."""
    methods = curve_entries(curves)
    return compare_states(new_state, stratification, methods, spec.history.n_trials, finish_options,
                          old_state=old_state, whole_state=whole_state)


def curve_entries(curves) -> dict:
    """``{entry key: method}`` of the model-free curves among ``curves`` (``{(method,
    feature): ...}`` or its keys): the state's name of each (the feature, or ``(feature,
    kind)`` for an extra estimator of it, :func:`daskpd._strat.estimators.entry_key`)."""
    methods = {e.method for e in ESTIMATORS.values()}
    return {entry_key(f, estimator_of_method(m).name): m for (m, f) in curves if m in methods}


def compare_states(new_state, stratification, methods: dict, n_trials: int, finish_options: FinishOptions | None = None, *,
                   old_state=None, whole_state=None, max_positions: int | None = None) -> list[DriftRecord]:
    """The new rows' curves against the old rows', feature by feature (undecided
    records: :func:`daskpd.job.drift.decide` tests them together).  ``new_state``: the
    sums of the new rows; ``old_state`` those of the rows before them, or
    ``whole_state`` those of all the rows (the new rows' sums are taken off), all
    scanned under ``stratification``; ``methods``: ``{entry key: method}``
    (:func:`curve_entries`: a feature's key for "stratpd" / "catstratpd", ``(feature,
    kind)`` for an extra estimator such as "binned_mean"), the curves to compare.  Both sides are put on shared positions
    and cells (:func:`daskpd._strat.apart.comparison_states`) and finished with
    ``n_trials`` leaf-bootstrap trials, paired by leaf; a numeric feature on at most
    ``max_positions`` positions (default :data:`daskpd._strat.apart.MAX_POSITIONS`); a
    categorical feature's new curve is the old one plus its change against the old
    rows' cell means (:func:`daskpd._strat.apart.cell_change`).
    With a distributed Client, on its workers (:func:`start_compare`)."""
    return start_compare(new_state, stratification, methods, n_trials, finish_options, old_state=old_state,
                         whole_state=whole_state, max_positions=max_positions).result()


class Pending:
    """A comparison started by :func:`start_compare`; :meth:`result` waits for its records."""

    def __init__(self, collect):
        self._collect = collect

    def result(self) -> list[DriftRecord]:
        return self._collect()


def start_compare(new_state, stratification, methods: dict, n_trials: int, finish_options: FinishOptions | None = None, *,
                  old_state=None, whole_state=None, max_positions: int | None = None) -> Pending:
    """:func:`compare_states` started: with a distributed Client the features' tasks are
    submitted to its workers now (:func:`_compare_on_cluster`) and run while the driver
    does other work; without, the comparison runs here when the result is asked for.
    A worker lost while it runs (e.g. restarted past its memory limit) costs only the
    tasks it held: the scheduler runs them again from their specs.  When the workers'
    comparison fails all the same (a task that keeps losing its worker, the cluster
    restarted), it runs here instead, with a RuntimeWarning saying why: the same
    records, later."""
    feats = [f for f in new_state.features if f in methods]
    if not feats:
        return Pending(list)
    client = current_client()

    def here():
        cmp_ = comparison_states(new_state.subset(feats), stratification, n_trials,
                                 old=None if old_state is None else old_state.subset(feats),
                                 whole=None if whole_state is None else whole_state.subset(feats),
                                 max_positions=max_positions or MAX_POSITIONS)
        # a categorical feature's new side: its change against the old rows' cell means
        cells = [f for f in feats if by_cells(stratification.scan_of(f).estimator)]
        curves = [f for f in feats if f not in cells]

        def new_side():
            got = cmp_.new.subset(curves).finish(stratification, finish_options) if curves else {}
            for f in cells:
                got[f] = cell_change(cmp_.new.features[f], cmp_.old.features[f], feature_of(f), cmp_.new.n_trials,
                                     stratification.random_state)
            return got

        # the two sides are independent finishes (numba kernels that release the GIL): one
        # thread each, the same results as one after the other
        with ThreadPoolExecutor(2, thread_name_prefix="daskpd-newold") as pool:
            sides = [pool.submit(new_side), pool.submit(cmp_.old.finish, stratification, finish_options)]
            new, old = (f.result() for f in sides)
        out = []
        for f in feats:
            coder = cmp_.new.features[f].coder
            rows = cmp_.rows[f]
            if f in cells:
                new[f] = new_curve(old[f], new[f])
            out.append(compare_curves(new[f], old[f], method=methods[f], feature=feature_of(f), paired=True,
                                      edges=coder.edges if coder.binned else None, rows_new=rows[1],
                                      rows_old=rows[3], note=_note(rows)))
        return out

    if client is None:
        return Pending(here)
    on_cluster = _compare_on_cluster(client, new_state, stratification, feats, methods, n_trials, finish_options,
                                     old_state, whole_state, max_positions or MAX_POSITIONS)

    def collect():
        try:
            return on_cluster.result()
        except Exception as exc:  # noqa: BLE001 -- a worker lost (out of memory, restarted): its tasks' inputs with it
            warnings.warn(f"the new-against-old comparison on the workers failed ({type(exc).__name__}: "
                          f"{' '.join(str(exc).split())[:200]}); compared on the driver instead", RuntimeWarning, stacklevel=2)
            return here()

    return Pending(collect)


def _visible(client, dirs: set) -> bool:
    """Whether every worker sees every directory of ``dirs`` (a filesystem they share)."""
    try:
        seen = client.run(lambda ds: all(os.path.isdir(d) for d in ds), sorted(dirs))
    except Exception:  # noqa: BLE001 -- a worker that cannot tell: the sums travel
        return False
    return bool(seen) and all(seen.values())


def _compare_on_cluster(client, new_state, stratification, feats, methods, n_trials, finish_options, old_state,
                        whole_state, max_positions) -> Pending:
    """:func:`compare_states` on the cluster's workers: per feature, the driver finds the
    comparison's positions and the new rows' sums on them (:func:`~daskpd._strat.apart.new_side`,
    the new rows are few), and the workers put the old rows' sums on them where the
    saved state is, read memory-mapped from its files (:func:`~daskpd._strat.apart.pair_task`;
    from the driver when a run is in memory or the workers do not see its files),
    finish each side (:func:`~daskpd._strat.apart.finish_task`) and compare them
    (:func:`_record_task`), every feature and side in parallel.  The same kernels on the
    same sums as on the driver: the same records, bit for bit.  Every input travels in
    its task's spec (none is scattered), so that a lost worker's tasks are run again
    (the pair task reads the old sums a chunk at a time and keeps the new rows' cells
    only: its memory follows the new rows, not the state's size)."""
    if (old_state is None) == (whole_state is None):
        raise ValueError("give exactly one of old_state= (the rows before the new ones) and whole_state= (all the rows)")
    base = old_state if old_state is not None else whole_state
    whole = whole_state is not None
    apart.check_states(new_state, base, stratification)
    light = {f: apart.on_disk(base.features[f]) for f in feats}
    dirs = set().union(*(apart.run_dirs(base.features[f]) for f in feats if light[f] is not None))
    if dirs and not _visible(client, dirs):
        light = dict.fromkeys(feats)
    n_old = base.n_rows - (new_state.n_rows if whole else 0)
    shells = [{"stratification_id": s.stratification_id, "target": s.target, "n_trials": int(n_trials), "n_rows": int(n),
               "y_range": s.y_range, "n_partitions": s.n_partitions} for s, n in ((new_state, new_state.n_rows),
                                                                               (base, n_old))]
    # the categorical features first: the longest
    order = sorted(feats, key=lambda f: stratification.kinds.get(feature_of(f)) != "categorical")
    records = {}
    for f in order:
        c = feature_of(f)  # the column of an entry key
        lab = f if isinstance(f, str) else "-".join(f)  # in the tasks' keys
        a, b = new_state.features[f], base.features[f]
        dtype = new_state.dtypes.get(c) if new_state.dtypes.get(c) is not None else base.dtypes.get(c)
        ns = apart.new_side(a, b, dtype, stratification.scan_of(f).estimator, max_positions)
        tok = _token()
        # every input travels in its task's spec, none scattered: a worker lost (e.g. restarted past its
        # memory limit) loses only results the scheduler computes again from the specs it holds
        strat_f = _submit(client, _given, apart.one_feature(stratification, f), pure=False,
                          key=f"daskpd-newold-strat-{lab}-{tok}")
        if light[f] is not None:  # the old sums read on a worker
            sides = _submit(client, apart.pair_task, a.counters, light[f], ns, whole, pure=False,
                            key=f"daskpd-newold-pair-{lab}-{tok}")
        else:
            sides = _submit(client, _given, apart.pair_sides(a.counters, b, ns, whole), pure=False,
                            key=f"daskpd-newold-pair-{lab}-{tok}")
        done = [client.submit(apart.finish_task, sides, i, {**shells[i], "dtypes": {c: dtype}}, strat_f,
                              finish_options, pure=False, key=f"daskpd-newold-finish-{i}-{lab}-{tok}")
                for i in (0, 1)]
        records[f] = client.submit(_record_task, sides, *done, methods[f], c,
                                   ns.target.edges if ns.target.binned else None, pure=False,
                                   key=f"daskpd-newold-record-{lab}-{tok}")

    def collect():
        got = dict(zip(records, client.gather(list(records.values()))))
        return [got[f] for f in feats]

    return Pending(collect)


def _token() -> str:
    return uuid.uuid4().hex[:12]


def _submit(client, fn, *args, **kwargs):
    """``client.submit``, without dask's warning on a large task spec: the new rows'
    sums travel in it on purpose (the scheduler holds them to run the task again)."""
    import dask

    with dask.config.set({"distributed.admin.large-graph-warning-threshold": "64GiB"}):
        return client.submit(fn, *args, **kwargs)


def _given(obj):
    """``obj`` itself: a task whose spec holds its result (computed again wherever it is lost)."""
    return obj


def _record_task(sides, new, old, method: str, feature: str, edges) -> DriftRecord:
    """A feature's record from its two finished sides (on a worker; a categorical
    feature's new side is its change, :func:`~daskpd._strat.apart.new_curve`)."""
    if isinstance(new, CellChange):
        new = new_curve(old, new)
    rows = sides[2]
    return compare_curves(new, old, method=method, feature=feature, paired=True, edges=edges, rows_new=rows[1],
                          rows_old=rows[3], note=_note(rows))


def model_based(new_results: dict, old_results: dict, rows_new: float, rows_old: float) -> list[DriftRecord]:
    """The records of the model-based curves of an incremental night: ``{(method,
    feature): result}`` of the new files' partials and of the kept ones, under the kept
    layout; their trials are row bootstraps of disjoint rows (independent)."""
    out = []
    for (m, f), r in new_results.items():
        o = old_results.get((m, f))
        if o is None:
            continue
        out.append(compare_curves(r, o, method=m, feature=f, paired=False, rows_new=rows_new, rows_old=rows_old))
    return out


def model_night(methods, features, out) -> list[DriftRecord]:
    """:func:`model_based` of an incremental night's model-based plan: ``out`` (a
    :class:`daskpd.model._multi.MethodsRun` made with ``apart=True``) holds the new files'
    results and the kept rows' (each counting its rows)."""

    def flat(results):
        return {(m, f): results[m][f] for m in methods if m in results
                and m not in ("pd_variance", "h_statistic") for f in features if f in results[m]}

    new, old = flat(out.apart[0]), flat(out.apart[1])
    rows = [(float(getattr(r, "n_rows", np.nan)), float(getattr(old[k], "n_rows", np.nan)))
            for k, r in new.items() if k in old]
    rows = rows[0] if rows else (np.nan, np.nan)
    recs = model_based(new, old, *rows)
    for (m, f) in old:  # a curve the new rows leave undefined: none of them falls inside its kept bins
        if (m, f) not in new:
            kind = getattr(old[(m, f)], "kind", "numeric")
            recs.append(DriftRecord(m, f, kind, pd.DataFrame(columns=POINT_COLUMNS), 0, False, np.nan, *rows,
                                    "no new row falls inside the kept bins"))
    return recs


#: the columns of a comparison's table (:func:`record_frame`)
RECORD_COLUMNS = ["method", "feature", "kind", "status", "drift", "drift_sig", "z", "z_crit", "p_value", "level",
                  "mdc", "n_trials", "trials_needed", "n_points", "scale", "paired", "rows_new", "rows_old", "where",
                  "why"]
def record_frame(records: list[DriftRecord]) -> pd.DataFrame:
    """One row a curve (:data:`RECORD_COLUMNS`)."""
    rows = [{c: (r.n_points if c == "n_points" else getattr(r, c)) for c in RECORD_COLUMNS} for r in records]
    return pd.DataFrame(rows, columns=RECORD_COLUMNS)


def points_frame(records: list[DriftRecord]) -> pd.DataFrame:
    """Every record's points (:data:`POINT_COLUMNS`), with the change's simultaneous band
    at the curve's level (``change_lo``, ``change_hi``: ``change -+ z_crit(p) se``) and
    whether the point is beyond it (``significant``)."""
    frames = []
    for r in records:
        p = r.points.copy()
        if not len(p):
            continue
        if np.isfinite(r.level):
            crit = critical(r.level, r.n_points, p["df"].to_numpy())
        else:
            crit = np.full(len(p), np.nan)
        p["change_lo"] = p["change"] - crit * p["se"]
        p["change_hi"] = p["change"] + crit * p["se"]
        p["significant"] = p["testable"].to_numpy() & (np.abs(p["t"].to_numpy()) > crit)
        frames.append(p[POINT_COLUMNS])
    if not frames:
        return pd.DataFrame(columns=POINT_COLUMNS)
    return pd.concat(frames, ignore_index=True)


def finish(cmp_: Comparison) -> Comparison:
    """Decide the comparison's records together (:func:`daskpd.job.drift.decide`)."""
    decide(cmp_.records, cmp_.alpha, cmp_.threshold)
    return cmp_


def tables(comparisons: list[Comparison], run_id: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(one row a curve and comparison, one row a point), with ``run_id``, ``test`` and
    ``ref_run_id`` first."""
    recs, pts = [], []
    for c in comparisons:
        if not c.records:
            continue
        head = {"run_id": run_id, "test": c.reference.test, "ref_run_id": c.reference.run_id}
        t = record_frame(c.records)
        recs.append(pd.concat([pd.DataFrame([head] * len(t)), t], axis=1))
        p = points_frame(c.records)
        if len(p):
            pts.append(pd.concat([pd.DataFrame([head] * len(p)), p], axis=1))
    rec = pd.concat(recs, ignore_index=True) if recs else pd.DataFrame()
    return rec, (pd.concat(pts, ignore_index=True) if pts else pd.DataFrame())


def write(run_dir: Path, comparisons: list[Comparison], run_id: str) -> list[str]:
    """``drift/comparisons.parquet`` and ``drift/points.parquet`` in the (temporary) run
    directory; their paths relative to it (none without a record)."""
    rec, pts = tables(comparisons, run_id)
    if not len(rec):
        return []
    d = Path(run_dir) / DRIFT_DIR
    d.mkdir(exist_ok=True)
    write_parquet(rec, d / "comparisons.parquet")
    write_parquet(pts if len(pts) else pd.DataFrame(columns=["run_id"]), d / "points.parquet")
    return [f"{DRIFT_DIR}/comparisons.parquet", f"{DRIFT_DIR}/points.parquet"]


def manifest_record(comparisons: list[Comparison]) -> list[dict]:
    """The manifest's ``drift``: per comparison its test, reference, new files, rows,
    settings, status counts and drifted curves (or why it was not made)."""
    out = []
    for c in comparisons:
        ref = c.reference
        item = {"test": ref.test, "ref_run_id": ref.run_id, "new_files": len(ref.new_files)}
        if ref.skip or not c.records:
            item["skipped"] = ref.skip or "no curve to compare"
            out.append(item)
            continue
        counts = {s: sum(r.status == s for r in c.records) for s in ("drifted", "ok", "untested")}
        rows_new = [r.rows_new for r in c.records if np.isfinite(r.rows_new)]
        rows_old = [r.rows_old for r in c.records if np.isfinite(r.rows_old)]
        item.update({"alpha": c.alpha, "threshold": c.threshold, "n_trials": c.n_trials,
                     "rows_new": int(max(rows_new)) if rows_new else None,
                     "rows_old": int(max(rows_old)) if rows_old else None,
                     "status": "drift" if counts["drifted"] else "no-drift", "counts": counts,
                     "drifted": [{"method": r.method, "feature": r.feature, "drift_sig": r.drift_sig, "z": r.z,
                                  "z_crit": r.z_crit, "where": r.where} for r in c.records if r.status == "drifted"]})
        out.append(item)
    return out
