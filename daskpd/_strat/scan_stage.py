"""Pass 2 of the model-free pipeline, as :func:`daskpd._strat.pipeline.run_strat` and
``run_under`` both run it: the home of planning the scan (:func:`plan_scan`: the
:class:`~daskpd._strat.scan.StratScan` job, its reduction sized by the memory model),
running it as the stage "scan and finish" (:func:`scan_and_finish`), the extra
estimators' scans (:func:`with_extra`), the buckets kept on the workers and their
solves (:func:`solve_kept_buckets`), and the kept state with the scratch directory its
buckets write to (:func:`state_parts_dir`, :func:`kept_state`).
"""
from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from typing import Sequence

from .._engine import scheduler
from .._engine.plan import Kept, build_pass, run_pass
from .._engine.progress import stage
from .estimators import estimator_named
from .options import FinishOptions, KeepState, StateMode, Trials
from .scan import StratScan, WithState
from .scan_sizing import check_scan_memory
from .state import ScanState, state_from_parts
from .stratification import Stratification, extra_scan

__all__ = ["plan_scan", "scan_and_finish", "with_extra", "solve_kept_buckets", "state_parts_dir", "kept_state"]


def state_parts_dir(keep_state: KeepState) -> str | None:
    """With ``keep_state`` a directory (:attr:`StateMode.SAVE`): a fresh scratch directory
    inside it where each bucket writes its own sums, when every worker sees it (a
    filesystem the workers share: a LocalCluster, or a shared mount); None otherwise (the
    driver gathers the sums)."""
    if keep_state.mode is not StateMode.SAVE:
        return None
    os.makedirs(keep_state.path, exist_ok=True)
    # named like a job's run in progress (".NAME.tmp-PID"): a job's clean-up removes it once its process is gone
    d = tempfile.mkdtemp(prefix=".daskpd-state-", suffix=f".tmp-{os.getpid()}", dir=keep_state.path)
    client = scheduler.current_client()
    if client is not None:
        try:
            seen = client.run(os.path.isdir, d)
        except Exception:  # noqa: BLE001 -- a worker that cannot tell: the driver gathers
            seen = {}
        if not seen or not all(seen.values()):
            shutil.rmtree(d, ignore_errors=True)
            return None
    return d


def kept_state(parts, scan, strat_id, n_rows, y_range, n_partitions, parts_dir) -> ScanState:
    """``state_from_parts``; the scratch directory of the buckets' files goes with the
    state's runs (removed once they are garbage: save the state before)."""
    state = state_from_parts(parts, scan, strat_id, n_rows, y_range, n_partitions)
    if parts_dir is not None:
        scratch = _Scratch(parts_dir)
        for st in state.features.values():
            for r in st.runs:
                r.keep_alive = scratch  # the files live as long as a run (of this state or a merged one) reads them
    return state


class _Scratch:
    """A directory removed once nothing refers to this object."""

    def __init__(self, path: str):
        self.path = path
        self._finalizer = weakref.finalize(self, shutil.rmtree, path, True)

    def close(self) -> None:
        """Remove the directory now (the state was saved: its files are linked there)."""
        self._finalizer()


def solve_kept_buckets(results: dict, kept: dict, scan) -> dict:
    """Finish the features whose buckets stayed on the workers (CatStratPD's with many
    categories: conjugate-gradient rounds over their buckets), one stage per feature."""
    results = dict(results)
    for i, refs in kept.items():
        fs = scan.features[i]
        with stage(f"solve {fs.feature}"):
            results[fs.key] = fs.estimator.solve_kept(scan, i, refs, results[fs.key])
    return results


def with_extra(strat: Stratification, scans: list, extra: Sequence[str]) -> list:
    """``scans`` and, after them, the scan of every extra estimator (``extra``: kind
    names) on each feature of its column kind (:func:`daskpd._strat.stratification.extra_scan`:
    the feature's positions; one leaf for an estimator ignoring the strata)."""
    more = [extra_scan(fs, kind) for kind in extra for fs in scans
            if fs.estimator.column_kind == estimator_named(kind).column_kind]
    return [*scans, *more]


def plan_scan(ddf, scans, strat: Stratification, n_rows: int, dtypes, trials: Trials, random_state: int,
               finish_options: FinishOptions, keep: StateMode, parts_dir=None,
               hash_columns=None) -> tuple[StratScan, int, int]:
    """``(scan, fan_in, arity)``: the scan job of ``scans`` (under ``strat``: its target,
    encoder and sample) over ``ddf`` (``n_rows`` rows), its reduction sized by the memory
    model (:func:`size_scan`), refused when it cannot fit (:func:`check_scan_memory`)."""
    n_trials = trials.n_trials
    sz = check_scan_memory(scans, n_rows, ddf.npartitions, n_trials, keep.keeps, parts_dir)
    fan_in, arity, grouping, n_buckets = sz.fan_in, sz.arity, sz.grouping, sz.n_buckets
    opts = finish_options.with_run({fs.feature: dtypes.get(fs.feature) for fs in scans},
                                   {"sample_rows": strat.sample_rows, "n_partitions": ddf.npartitions,
                                    "n_buckets": n_buckets, "fan_in": fan_in})
    scan = StratScan(target=strat.target, features=scans, encoder=strat.encoder, n_trials=n_trials,
                     random_state=random_state, hash_columns=hash_columns,
                     n_buckets=n_buckets, expected_rows=n_rows // max(1, ddf.npartitions), group_from=grouping,
                     finish_options=opts, keep_state=keep, state_dir=parts_dir)
    return scan, fan_in, arity


def scan_and_finish(ddf, scan: StratScan, fan_in, arity, parts_dir=None):
    """The scan as the stage "scan and finish": ``(results, kept, parts)`` -- the
    finished results, the categorical buckets kept on the workers for CG rounds (or
    None), and with ``keep_state`` the buckets' state parts.  A failed scan removes the
    scratch directory its buckets were writing their state parts to (``parts_dir``)."""
    try:
        with stage("scan and finish"):
            results, parts = _run_scan(ddf, scan, fan_in, arity)
    except BaseException:
        if parts_dir is not None:
            shutil.rmtree(parts_dir, ignore_errors=True)
        raise
    results, kept = (results.result, results.kept) if isinstance(results, Kept) else (results, None)
    return results, kept, parts


def _run_scan(ddf, scan: StratScan, fan_in, arity):
    """``run_pass`` of the scan, and with ``keep_state`` the buckets' merged tables, each
    gathered on its own by the driver (the same graph, one submission): ``(results,
    tables or None)``."""
    if not scan.keep_state.keeps:
        (results,) = run_pass(ddf, [scan], name="daskpd-strat", fan_in=fan_in, arity=arity)
        return results, None
    (out,) = build_pass(ddf, [scan], name="daskpd-strat", fan_in=fan_in, arity=arity)
    assert isinstance(out, WithState)
    res, sums = out.result, out.sums
    if isinstance(res, Kept):
        values, refs = scheduler.compute_keeping([res.result, *sums], [res.kept])
        return Kept(values[0], refs[0]), values[1:]
    values = scheduler.compute_streamed(res, *sums)
    return values[0], list(values[1:])
