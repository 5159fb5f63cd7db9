"""Sufficient statistics of the model-free methods as objects: a fitted
:class:`Stratification` and the mergeable :class:`ScanState` of a scan under it.

A **stratification** is what pass 1 and the tree fit produce: the sample's identity,
one stratifying tree per feature (its leaves numbered), the encoder of the stratifying
columns, each feature's positions (bin edges, or its exact values / levels), the random
state and the parameters.  Given one, ``stratpd`` / ``catstratpd`` / ``importances``
skip the sample and the fit and only scan (``stratification=``).

A **scan state** holds, per feature, the exact sums per (leaf, position) of a scan
under a stratification -- ``[n, sum y]`` (and ``sum x`` for a binned feature) per
statistics set (all rows, then each bootstrap trial) -- with the position vocabulary
it is coded in (:class:`daskpd._data.encode.KeyCoder`: bin edges, or the exact values /
levels seen).  Positions are keyed by *value*: two states merge (``a + b``) by taking
the union of their vocabularies, recoding both tables and adding the sums, so files
appended to a lake are scanned alone and merged with the state of the old files, new x
values and new levels included.  :meth:`ScanState.finish` turns a state into the same
result objects as a scan (the same kernels: ``StratScan.finish_bucket`` and the
curve / effects finishes).

Files: a stratification is one pickle (versioned; loading refuses another format
version or another daskpd minor version); a state is a directory of raw ``.npy`` arrays
per feature (leaf and key as the smallest unsigned integers holding them, the row counts
as ``uint32``, the other sums as ``float64``) plus ``state.json``.  Both are written
atomically.
"""
from __future__ import annotations

import io
import json
import os
import pickle
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

import numpy as np

from .. import __version__
from .._data.encode import KeyCoder
from .._engine.sums import Table, reduce_tables
from .._errors import DataError
from ..results.base import atomic_path, dump_json
from .delta_lookup import RunView
from .estimator import DeltaInputs
from .estimators import entry_key, estimator_named, feature_of
from .options import FinishOptions
from .positions import code_map, position_labels, recode, union_coder
from .runs import PARTS, read_table, write_part
from .scan import ScanPiece, StratScan
from .stratification import FORMAT_VERSION, Stratification, check_format

__all__ = ["ScanState", "FeatureState", "state_from_parts", "attach_summaries"]

#: :meth:`ScanState.merge_finish` merges and finishes this many features at a time
MERGE_THREADS = 2
#: an incremental finish compacts a feature's runs into one when they would exceed this
#: count, or when the appended runs' cells exceed this share of the first run's
MAX_RUNS = 8
COMPACT_SHARE = 0.5

_STATE_MAGIC = "daskpd-scan-state"


# ---------------------------------------------------------------------------------
# the state


class Run:
    """One sorted run of a feature's (leaf, code) sums in the codes of its own ``coder``:
    in memory (``table``) or saved (``sources``: ``(directory, part)`` per file set, the
    parts of the run in order, holding disjoint ranges of leaves -- the buckets of a scan
    that wrote them itself; read memory-mapped)."""

    def __init__(self, coder: KeyCoder, table: Table | None = None, sources: list | None = None):
        self.coder = coder
        self._table = table
        self.sources = list(sources) if sources is not None else None

    @property
    def n_cells(self) -> int:
        if self._table is not None:
            return len(self._table)
        return int(sum(p["n_cells"] for _, p in self.sources))

    @property
    def nbytes(self) -> int:
        if self._table is not None:
            return int(self._table.nbytes)
        return int(sum(p["n_cells"] * (12 + 8 * p["n_values"]) for _, p in self.sources))

    def table(self) -> Table:
        """The sums in memory (read in full when saved)."""
        if self._table is None:
            tabs = [read_table(d, p["name"], p["counts"]) for d, p in self.sources]
            tabs = [t for t in tabs if len(t)] or tabs[:1]
            self._table = tabs[0] if len(tabs) == 1 else Table(
                np.concatenate([t.leaf for t in tabs]), np.concatenate([t.key for t in tabs]),
                np.concatenate([t.values for t in tabs], axis=0))
        return self._table

    def views(self, coder: KeyCoder) -> list:
        """:class:`RunView` s in the codes of ``coder`` (a superset vocabulary), one per
        part (a leaf's cells are all in one part); saved arrays stay memory-mapped."""
        mapping = code_map(self.coder, coder)
        kmap = np.arange(self.coder.n_keys, dtype=np.int64) if mapping is None else mapping
        if self._table is not None:
            t = self._table
            return [RunView(t.leaf, t.key, kmap, lambda j: t.values[:, j])]
        return [_part_view(d, p, kmap) for d, p in self.sources if p["n_cells"]]


#: one thread at a time opens a saved array: ``np.load`` parses its header with ``ast``, which
#: CPython 3.11 can fail when threads do it at once ("AST constructor recursion depth mismatch")
_OPEN_LOCK = threading.Lock()


def _part_view(d: str, p: dict, kmap) -> RunView:
    def load(part):
        with _OPEN_LOCK:
            a = np.load(os.path.join(d, f"{p['name']}.{part}.npy"), mmap_mode="r", allow_pickle=False)
        return a.view(np.ndarray)

    leaf, key, ints, sums = (load(part) for part in PARTS)
    counts = list(p["counts"])
    floats = [j for j in range(p["n_values"]) if j not in counts]

    def column(j):
        return ints[:, counts.index(j)] if j in counts else sums[:, floats.index(j)]
    return RunView(leaf, key, kmap, column)


class FeatureState:
    """One feature's merged sums: the vocabulary of positions seen (``coder``), the
    counters (rows read, missing x, bad y), the sums as sorted runs (``runs``: one after
    a full scan, one more per incremental run until compacted; ``table`` merges them),
    the finish summary its estimator keeps (:class:`~daskpd._strat.delta.NumericSummary`
    for StratPD, :class:`~daskpd._strat.catdelta.CatSummary` for CatStratPD, or None) and
    ``kind``, the estimator's name (:mod:`daskpd._strat.estimators`; by default the
    positions' kind, which is StratPD's and CatStratPD's name)."""

    def __init__(self, coder: KeyCoder, table: Table | None = None, counters=(0, 0, 0), *, runs=None,
                 summary=None, kind: str | None = None):
        self.coder = coder
        self.kind = coder.kind if kind is None else kind
        self.counters = tuple(counters)
        self.runs = list(runs) if runs is not None else [Run(coder, table)]
        self.summary = summary
        self._table = table if runs is None else None

    @property
    def table(self) -> Table:
        """The sums (the runs merged, in the codes of ``coder``)."""
        if self._table is None:
            if len(self.runs) == 1 and code_map(self.runs[0].coder, self.coder) is None:
                self._table = self.runs[0].table()
            else:
                self._table = reduce_tables([recode(r.table(), r.coder, self.coder) for r in self.runs],
                                            self.coder.n_keys)
        return self._table

    @property
    def nbytes(self) -> int:
        if self._table is not None:
            return int(self._table.nbytes)
        return int(sum(r.nbytes for r in self.runs))

    @property
    def n_cells(self) -> int:
        return int(sum(r.n_cells for r in self.runs))

    @property
    def estimator(self):
        return estimator_named(self.kind)


def _check_mergeable(self, other) -> None:
    if not isinstance(other, ScanState):
        raise TypeError(f"a ScanState merges with a ScanState, not {type(other).__name__}")
    if other.stratification_id != self.stratification_id:
        raise DataError(f"the states were scanned under different stratifications ({self.stratification_id} "
                        f"and {other.stratification_id})")
    if other.n_trials != self.n_trials:
        raise DataError(f"the states carry different trials (n_trials {self.n_trials} and {other.n_trials})")
    if list(other.features) != list(self.features):
        raise DataError(f"the states hold different features ({list(self.features)} and {list(other.features)})")


def _add_counters(a, b) -> tuple:
    return tuple(int(x) + int(y) for x, y in zip(a, b))


@dataclass
class ScanState:
    """Merged per-(feature, leaf, position) sums of a scan under a stratification (see
    the module docstring).  ``a + b`` (or ``a.merge(b)``) is the state of the data of
    both; :meth:`finish` gives the results; :meth:`save` / :meth:`load`."""

    stratification_id: str
    target: str
    n_trials: int  # the trials its finish summaries hold (the sums themselves hold none)
    features: dict  # {entry key: FeatureState} (the feature, or (feature, kind) for another estimator of it)
    n_rows: int
    y_range: tuple | None
    n_partitions: int = 0
    dtypes: dict = field(default_factory=dict)
    #: after :meth:`delta_finish`: {feature: "delta" | "runs" | "merge"}, how each was finished
    finish_modes: dict = field(default_factory=dict, repr=False, compare=False)
    finish_seconds: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def n_sets(self) -> int:
        return 1 + int(self.n_trials)

    @property
    def nbytes(self) -> int:
        """The bytes of the sums (the tables' arrays)."""
        return int(sum(s.nbytes for s in self.features.values()))

    def __repr__(self) -> str:
        return (f"ScanState(stratification={self.stratification_id!r}, {len(self.features)} feature(s), "
                f"{self.n_rows:,} rows, trials={self.n_trials}, {self.nbytes:,} bytes)")

    def merge(self, other: "ScanState") -> "ScanState":
        """The state of both scans' data (the same stratification and trials)."""
        _check_mergeable(self, other)
        feats = {}
        for f, a in self.features.items():
            b = other.features[f]
            coder = union_coder(a.coder, b.coder, self.dtypes.get(feature_of(f)))
            tables = [recode(a.table, a.coder, coder), recode(b.table, b.coder, coder)]
            feats[f] = FeatureState(coder, reduce_tables(tables, coder.n_keys), _add_counters(a.counters, b.counters),
                                    kind=a.kind)
        ranges = [r for r in (self.y_range, other.y_range) if r is not None]
        y_range = (min(r[0] for r in ranges), max(r[1] for r in ranges)) if ranges else None
        return ScanState(self.stratification_id, self.target, self.n_trials, feats,
                         self.n_rows + other.n_rows, y_range, self.n_partitions + other.n_partitions,
                         dict(self.dtypes))

    __add__ = merge

    # -- finishing -----------------------------------------------------------------

    def scan_job(self, stratification: Stratification, finish_options: FinishOptions | dict | None = None
                 ) -> StratScan:
        """The scan job that finishes this state (its features coded by the state's vocabularies)."""
        if stratification.id != self.stratification_id:
            raise DataError(f"the state was scanned under stratification {self.stratification_id}, not "
                            f"{stratification.id}")
        fss = []
        for f, st in self.features.items():
            fs = stratification.scan_of(f)
            fss.append(replace(fs, coder=st.coder))
        opts = FinishOptions.of(finish_options).with_run(
            {feature_of(f): self.dtypes.get(feature_of(f)) for f in self.features},
            {"sample_rows": stratification.sample_rows, "n_partitions": self.n_partitions, "n_buckets": 1,
             "fan_in": 0}, keep_run_params=True)
        return StratScan(target=self.target, features=fss, encoder=stratification.encoder, n_trials=self.n_trials,
                         random_state=stratification.random_state, n_buckets=1, finish_options=opts)

    def finish(self, stratification: Stratification, finish_options: FinishOptions | dict | None = None) -> dict:
        """``{feature: StratPDResult | CatStratPDResult}`` from the sums, by the scan's own
        finishing kernels (one bucket holding every leaf: the bits do not depend on the
        bucket count).  ``finish_options``: a :class:`~daskpd._strat.options.FinishOptions`
        (or a dict of its fields: ``min_slopes_per_x``, ``few_slopes``, ``band``, ... as
        for :func:`daskpd.stratpd`; None: the defaults)."""
        scan = self.scan_job(stratification, finish_options)
        counters = {f: st.counters for f, st in self.features.items()}
        piece = ScanPiece({f: st.table for f, st in self.features.items()}, counters, 1)
        finished = scan.finish_bucket(piece, 0)
        return {fs.key: fs.estimator.finish_state(scan, i, finished["features"][i])
                for i, fs in enumerate(scan.features)}

    def subset(self, features) -> "ScanState":
        """The state of some of its features (the same rows and trials)."""
        return ScanState(self.stratification_id, self.target, self.n_trials,
                         {f: self.features[f] for f in features}, self.n_rows, self.y_range, self.n_partitions,
                         {feature_of(f): self.dtypes.get(feature_of(f)) for f in features})

    def merge_finish(self, other: "ScanState", stratification: Stratification,
                     finish_options: FinishOptions | dict | None = None) -> tuple["ScanState", dict]:
        """``(self + other, (self + other).finish(...))``, each feature merged and finished
        on its own, ``MERGE_THREADS`` at a time (the sums stay where they are: shipping
        them to the workers costs more than the kernels do; a categorical feature's solve
        may run on the cluster while the numeric ones merge here): the same kernels and
        the same bits as merging and finishing all at once."""
        # the estimators that finish first (CatStratPD's: the longest, its solve may run on the cluster)
        order = sorted(self.features, key=lambda f: not stratification.scan_of(f).estimator.finish_first)
        one = {f: (self.subset([f]), other.subset([f])) for f in order}
        opts = FinishOptions.of(finish_options)

        def work(ab):
            return _merge_finish(*ab, stratification, opts)

        if MERGE_THREADS > 1:
            with ThreadPoolExecutor(MERGE_THREADS) as pool:
                done = dict(zip(one, pool.map(work, one.values())))
        else:
            done = {f: work(ab) for f, ab in one.items()}
        first = next(iter(done.values()))[0]
        state = ScanState(first.stratification_id, first.target, first.n_trials,
                          {f: done[f][0].features[f] for f in self.features}, first.n_rows, first.y_range,
                          first.n_partitions, dict(self.dtypes))
        return state, {f: done[f][1][f] for f in self.features}

    def delta_finish(self, other: "ScanState", stratification: Stratification,
                     finish_options: FinishOptions | dict | None = None) -> tuple["ScanState", dict]:
        """``(self + other, results)`` as :meth:`merge_finish`, without merging the sums:
        ``other``'s sums become one more run of each feature (compacted into one when the
        runs exceed ``MAX_RUNS`` or their cells ``COMPACT_SHARE`` of the first run's), a
        numeric feature's curve is its finish summary updated by the cells ``other``
        touches (:func:`daskpd._strat.delta.apply_delta`), a categorical feature's
        :class:`~daskpd._strat.catdelta.CatSummary` (explicit normal equations) is
        updated by the leaves ``other`` touches (:func:`daskpd._strat.catdelta.apply_cat_delta`)
        and solved directly, a categorical feature with more than ``EXPLICIT_MAX_KEYS``
        categories is solved by conjugate gradients over its runs and ``other``'s,
        unmerged (:mod:`daskpd._strat.catruns`), and a numeric feature without a usable
        summary is merged and finished in full.  ``finish_modes`` of the returned state
        says which feature took which path ("delta", "runs" or "merge")."""
        _check_mergeable(self, other)
        opts = FinishOptions.of(finish_options)
        k = int(opts.n_segments)
        coders = {f: union_coder(a.coder, other.features[f].coder, self.dtypes.get(feature_of(f)))
                  for f, a in self.features.items()}
        counters = {f: _add_counters(a.counters, other.features[f].counters) for f, a in self.features.items()}
        ranges = [r for r in (self.y_range, other.y_range) if r is not None]
        y_range = (min(r[0] for r in ranges), max(r[1] for r in ranges)) if ranges else None
        shell = ScanState(self.stratification_id, self.target, self.n_trials,
                          {f: FeatureState(coders[f], Table.empty(0), counters[f], kind=a.kind)
                           for f, a in self.features.items()},
                          self.n_rows + other.n_rows, y_range, self.n_partitions + other.n_partitions,
                          dict(self.dtypes))
        scan = shell.scan_job(stratification, opts)
        n_sets = self.n_sets

        def work(i):
            t0 = time.perf_counter()
            fs = scan.features[i]
            f = fs.key
            a, b = self.features[f], other.features[f]
            coder = coders[f]
            new_run = Run(b.coder, b.table)
            runs = [*a.runs, new_run]
            base = runs[0].n_cells
            compact = len(runs) > MAX_RUNS or sum(r.n_cells for r in runs[1:]) > COMPACT_SHARE * max(base, 1)
            est = fs.estimator
            merged = None
            got = est.delta_finish(DeltaInputs(
                scan, i, a.summary, counters[f], stratification.random_state, kmap=lambda: code_map(a.coder, coder),
                old_views=lambda: [v for r in a.runs for v in r.views(coder)],
                new_table=lambda: recode(b.table, b.coder, coder)))
            if got is not None:
                summary, result, mode = got
            else:
                merged = FeatureState(coder, reduce_tables([recode(r.table(), r.coder, coder) for r in runs],
                                                           coder.n_keys), counters[f], kind=a.kind)
                one = ScanState(self.stratification_id, self.target, self.n_trials, {f: merged},
                                shell.n_rows, y_range, shell.n_partitions,
                                {fs.feature: self.dtypes.get(fs.feature)})
                result = one.finish(stratification, opts)[f]
                summary = est.merged_summary(fs, merged.table, n_sets, stratification.random_state, k)
                mode = "merge"
            if compact:
                table = merged.table if merged is not None else reduce_tables(
                    [recode(r.table(), r.coder, coder) for r in runs], coder.n_keys)
                runs = [Run(coder, table)]
            return (FeatureState(coder, None, counters[f], runs=runs, summary=summary, kind=a.kind), result,
                    (mode, time.perf_counter() - t0))

        # the estimators that finish first (CatStratPD's: the longest)
        order = sorted(range(len(scan.features)), key=lambda i: not scan.features[i].estimator.finish_first)
        if MERGE_THREADS > 1:
            with ThreadPoolExecutor(MERGE_THREADS) as pool:
                done = dict(zip(order, pool.map(work, order)))
        else:
            done = {i: work(i) for i in order}
        names = [fs.key for fs in scan.features]
        state = ScanState(shell.stratification_id, shell.target, shell.n_trials,
                          {names[i]: done[i][0] for i in range(len(names))}, shell.n_rows, y_range,
                          shell.n_partitions, dict(self.dtypes))
        state.finish_modes = {names[i]: done[i][2][0] for i in range(len(names))}
        state.finish_seconds = {names[i]: done[i][2][1] for i in range(len(names))}
        return state, {names[i]: done[i][1] for i in range(len(names))}

    # -- files ---------------------------------------------------------------------

    def save(self, path) -> str:
        """Write to a directory (``state.json`` and one ``.npz`` file of sums per feature),
        atomically (a reader sees the old directory or the new one); return the path."""
        path = os.fspath(path)
        meta = {"format": _STATE_MAGIC, "format_version": FORMAT_VERSION, "daskpd_version": __version__,
                "stratification_id": self.stratification_id, "target": self.target, "n_trials": self.n_trials,
                "n_rows": self.n_rows,
                "y_range": None if self.y_range is None else list(self.y_range), "n_partitions": self.n_partitions,
                "features": []}
        self._write(path, meta)
        return path

    def _write(self, path, meta) -> None:
        aside = None
        with atomic_path(path) as tmp:
            os.makedirs(tmp)
            for i, (f, st) in enumerate(self.features.items()):
                c = st.coder
                _write_vocab(os.path.join(tmp, f"feature-{i}.vocab.pkl"), c)
                runs = []
                for seq, r in enumerate(st.runs):
                    name = f"feature-{i}.run-{seq}"
                    parts = None
                    if r.sources is not None:
                        parts = [dict(p, name=f"{name}.part-{j}") for j, (_, p) in enumerate(r.sources)]
                        if not all(_link_run(d, p["name"], tmp, q["name"]) for (d, p), q in zip(r.sources, parts)):
                            parts = None
                    if parts is None:
                        parts = [write_part(tmp, name, r.table())]
                    _write_vocab(os.path.join(tmp, f"{name}.vocab.pkl"), r.coder)
                    runs.append({"name": name, "n_cells": r.n_cells, "parts": parts})
                if st.summary is not None:
                    with open(os.path.join(tmp, f"feature-{i}.summary.npz"), "wb") as fh:
                        np.savez(fh, **st.summary.arrays())
                # "kind": the estimator's name ("positions": the coder's kind, when another)
                meta["features"].append({"feature": feature_of(f), "kind": st.kind, **({} if c.kind == st.kind else
                                                                           {"positions": c.kind}),
                                         "binned": c.binned, "nan_level": c.nan_level,
                                         "counters": list(st.counters), "n_cells": st.n_cells, "runs": runs,
                                         "summary": st.summary is not None,
                                         "dtype": None if self.dtypes.get(feature_of(f)) is None else
                                         str(self.dtypes.get(feature_of(f)))})
            with open(os.path.join(tmp, "state.json"), "w") as fh:
                fh.write(dump_json(meta))
            with open(os.path.join(tmp, "dtypes.pkl"), "wb") as fh:
                pickle.dump(self.dtypes, fh, protocol=4)
            if os.path.isdir(path):  # an old state: moved aside only once the new one is complete
                aside = f"{path}.old-{os.getpid()}"
                os.rename(path, aside)
        if aside is not None:
            shutil.rmtree(aside, ignore_errors=True)

    @staticmethod
    def read_meta(path) -> dict:
        """``state.json`` of a saved state (``n_rows``, ``stratification_id``, the
        features' counters and cell counts), checked like :meth:`load`, without the sums."""
        path = os.fspath(path)
        try:
            with open(os.path.join(path, "state.json")) as fh:
                meta = json.load(fh)
        except (OSError, ValueError) as exc:
            raise DataError(f"scan state {path!r} cannot be read: {type(exc).__name__}: {exc}") from None
        check_format("scan state", path, meta, _STATE_MAGIC)
        return meta

    @classmethod
    def load(cls, path) -> "ScanState":
        """Read a state written by :meth:`save`: its runs stay on disk, memory-mapped
        (an incremental finish reads the pages of the cells it looks up; ``table``
        reads them in full)."""
        path = os.fspath(path)
        meta = cls.read_meta(path)
        with open(os.path.join(path, "dtypes.pkl"), "rb") as fh:
            dtypes = pickle.load(fh)
        feats = {}
        for i, fm in enumerate(meta["features"]):
            est = estimator_named(fm.get("kind"), f"scan state {path!r}, feature {fm.get('feature')!r}")
            coder = _read_vocab(os.path.join(path, f"feature-{i}.vocab.pkl"), fm)
            runs = [Run(_read_vocab(os.path.join(path, f"{r['name']}.vocab.pkl"), fm), None,
                        [(path, p) for p in r["parts"]]) for r in fm["runs"]]
            summary = None
            if fm.get("summary"):
                with np.load(os.path.join(path, f"feature-{i}.summary.npz"), allow_pickle=False) as z:
                    arrays = {k: z[k] for k in z.files}
                summary = est.load_summary(arrays)
            feats[entry_key(fm["feature"], est.name)] = FeatureState(coder, None, tuple(int(c) for c in fm["counters"]), runs=runs,
                                                summary=summary, kind=est.name)
        y_range = None if meta["y_range"] is None else tuple(meta["y_range"])
        return cls(meta["stratification_id"], meta["target"], int(meta["n_trials"]), feats,
                   int(meta["n_rows"]), y_range, int(meta.get("n_partitions", 0)), dtypes)


def _write_vocab(path: str, c: KeyCoder) -> None:
    vocab = {"edges": np.asarray(c.edges, "float64")} if c.binned else {"values": position_labels(c)}
    buf = io.BytesIO()
    pickle.dump(vocab, buf, protocol=4)  # labels keep their Python types (ints, strings, ...)
    with open(path, "wb") as fh:
        fh.write(buf.getvalue())


def _read_vocab(path: str, fm: dict) -> KeyCoder:
    with open(path, "rb") as fh:
        vocab = pickle.load(fh)
    kind = fm.get("positions", fm["kind"])
    return (KeyCoder(kind, edges=vocab["edges"]) if fm["binned"] else
            KeyCoder(kind, values=vocab["values"], nan_level=fm["nan_level"]))


def _link_run(d: str, old: str, directory: str, name: str) -> bool:
    """Hard-link a saved run's files under ``name`` (False: not possible here)."""
    try:
        for part in PARTS:
            os.link(os.path.join(d, f"{old}.{part}.npy"), os.path.join(directory, f"{name}.{part}.npy"))
    except OSError:  # another filesystem, or no hard links: written again
        for part in PARTS:
            try:
                os.unlink(os.path.join(directory, f"{name}.{part}.npy"))
            except FileNotFoundError:
                pass
        return False
    return True


def _table_of_runs(st: FeatureState, n_values: int) -> Table:
    """A feature's sums without keeping them on the state (its runs read, not cached)."""
    if len(st.runs) != 1:
        return st.table
    views = [v for v in st.runs[0].views(st.coder) if len(v)]
    if not views:
        return Table.empty(n_values)
    return Table(np.concatenate([np.asarray(v.leaf, np.int64) for v in views]),
                 np.concatenate([v.kmap[np.asarray(v.key, np.int64)] for v in views]),
                 np.concatenate([np.column_stack([v.column(j) for j in range(n_values)]) for v in views]))


def attach_summaries(state: ScanState, stratification: Stratification) -> None:
    """Give each feature of a kept state (a full scan's) the finish summary its estimator
    keeps when the buckets made none (``ModelFreeEstimator.attach_summary``: CatStratPD's
    explicit normal equations, when they fit), from its sums, in place."""
    n_sets = state.n_sets
    for f, st in state.features.items():
        fs = stratification.scan_of(f)
        st.summary = fs.estimator.attach_summary(fs, st, n_sets, stratification.random_state,
                                                 lambda st=st, fs=fs: _table_of_runs(st, fs.stats_per_set))


def _merge_finish(a: ScanState, b: ScanState, stratification: Stratification, finish_options: FinishOptions
                  ) -> tuple:
    merged = a.merge(b)
    return merged, merged.finish(stratification, finish_options)


def state_from_parts(parts: list, scan: StratScan, stratification_id: str, n_rows: int, y_range,
                     n_partitions: int) -> ScanState:
    """The state of a scan from its buckets' merged tables (``parts``: per bucket, in
    bucket order, ``(tables, counters or None[, {feature: the estimator's bucket_state}])``; a
    bucket holds a run of leaves, so their tables concatenate in (leaf, key) order).  A
    bucket that wrote its tables itself (``scan.state_dir``) gives their descriptions:
    the feature's run is then those files, in bucket order, read memory-mapped.  With
    the buckets' states (a scan that also finished), a feature keeps the finish summary
    its estimator makes of them (``ModelFreeEstimator.summary_from_buckets``: StratPD's,
    :func:`daskpd._strat.delta.summary_from_buckets`)."""
    counters = next((p[1] for p in parts if p[1] is not None), {}) or {}
    pieces = [p[2] if len(p) > 2 else {} for p in parts]
    feats = {}
    for i, fs in enumerate(scan.features):  # each feature's tables are let go once concatenated (peak: the state + one)
        got = [p[0].pop(fs.key) for p in parts]
        m = fs.stats_per_set
        if got and isinstance(got[0], dict):  # written by the buckets
            sources = [(scan.state_dir, g) for g in got if g["n_cells"]]
            run = Run(fs.coder, None, sources) if sources else Run(fs.coder, Table.empty(m))
        else:
            tabs = [t for t in got if len(t)]
            run = Run(fs.coder, Table(np.concatenate([t.leaf for t in tabs]).astype(np.int32),
                                      np.concatenate([t.key for t in tabs]).astype(np.int64),
                                      np.concatenate([t.values for t in tabs], axis=0)) if tabs else Table.empty(m))
        del got
        summary = fs.estimator.summary_from_buckets(scan, i, [p.get(fs.key) for p in pieces])
        feats[fs.key] = FeatureState(fs.coder, None, tuple(counters.get(fs.key, (0, 0, 0))), runs=[run],
                                         summary=summary, kind=fs.kind)
    dtypes = dict(scan.finish_options.dtypes or {})
    return ScanState(stratification_id, scan.target, scan.n_trials, feats, int(n_rows),
                     y_range, int(n_partitions), dtypes)
