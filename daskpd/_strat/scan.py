"""The StratPD / CatStratPD scan: one pass, every feature, a reduction split by leaf.

:class:`StratScan` is the engine job of the model-free methods.  On each partition
(``map``) it applies every feature's stratifying tree and turns the rows into keyed
sums per (leaf, key) -- ``[n, sum y]``, plus ``sum x`` for a binned feature -- and
hands each *bucket* of leaves its own table.  Trials ride the finish, not the rows: each
is a bootstrap of the leaves (:mod:`daskpd._strat.leafboot`).
Leaves are numbered in a seeded random order (``leaf_index``) and bucket ``b`` of ``B``
holds the leaves ``ceil(b L / B) <= leaf < ceil((b + 1) L / B)``, so buckets are
balanced and a bucket's tables merge (``combine``) without the others.

Each merged bucket is finished next to its data, inside the combine task that merged it
(``finish_bucket``), by the feature's estimator (:mod:`daskpd._strat.estimator`), and
``reduce`` wires what follows as the estimator says (``ModelFreeEstimator.wire``):

* StratPD (numeric features): a bucket's leaves become slope segments, summed per
  position (:mod:`daskpd._strat.numeric`); the small per-position arrays of the buckets
  are then folded into the curve;
* CatStratPD (categorical features): each bucket is turned into its least-squares terms;
  a chain of tasks sums the explicit system over the buckets for a feature with few
  categories, or the buckets stay on the workers for conjugate-gradient rounds after the
  scan (:mod:`daskpd._strat.categorical_buckets`).

Both are exact and independent of the bucket count: float sums over leaves are made per
*virtual bucket* (``N_VIRTUAL`` fixed groups of consecutive leaves; a physical bucket is
a run of them) and folded in virtual-bucket order, so the same partitioning gives the
same bits whatever the memory limit, the scheduler or the number of buckets.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
from dask.sizeof import sizeof

from .._data.encode import FeatureEncoder, KeyCoder, as_float
from .._engine.hashing import fold_hash, fold_of, hash_order, unit_of
from .._engine.plan import Job, Kept
from .._engine.rows import Rows
from .._engine.sums import Table, reduce_tables
from .estimator import ModelFreeEstimator
from .estimators import entry_key, estimator_named
from .options import FinishOptions, StateMode
from .runs import write_part
from .trees import HonestTrees, leaf_nodes
from .virtual import N_VIRTUAL, bucket_bounds

__all__ = ["FeatureScan", "StratScan", "ScanPiece", "WithState", "N_VIRTUAL", "leaf_numbering", "bucket_bounds",
           "split_of", "MIN_UNITS"]

#: a map groups its rows itself when the feature's (leaf, key) grid has at most this
#: many cells per partition row (few cells: partitions shrink a lot); else it ships rows
MAP_GROUP_CELLS_PER_ROW = 2

def groups_at_map(fs, rows_per_partition: float) -> bool:
    """Whether a map groups a feature's rows itself: its (leaf, key) grid has at most
    ``MAP_GROUP_CELLS_PER_ROW`` cells per partition row."""
    cells = float(fs.n_leaves) * fs.coder.n_keys
    return cells <= MAP_GROUP_CELLS_PER_ROW * max(1.0, rows_per_partition)


def index_dtype(n: int):
    """The narrowest unsigned type holding ``0 .. n - 1`` (uint16, else int32): leaves and
    keys of the raw rows a map ships are most of what crosses between processes."""
    return np.uint16 if n <= 1 << 16 else np.int32


def leaf_numbering(tree, random_state: int, salt: int, split: int = 1) -> tuple[np.ndarray | None, int]:
    """``(leaf_index, n_leaves)``: the tree's leaf node ids -> leaves in a seeded random
    order (so that buckets of consecutive leaves are balanced), each leaf ``split``
    consecutive numbers (its parts, :func:`split_of`): a node's index is its first.
    ``n_leaves`` counts the numbers (leaves x split)."""
    if tree is None:
        return None, int(split)
    is_leaf = leaf_nodes(tree)
    nodes = np.flatnonzero(is_leaf)
    perm = np.random.default_rng([int(random_state), 0x1EAF, int(salt)]).permutation(len(nodes))
    index = np.full(len(is_leaf), -1, dtype=np.int64)
    index[nodes] = perm * int(split)
    return index, len(nodes) * int(split)


#: a stratification with fewer leaves than this splits each leaf into parts (by row hash)
#: until it has at least this many: the units the trials resample (a bootstrap of a few
#: clusters is short and erratic; :mod:`daskpd._strat.leafboot`)
MIN_UNITS = 30


def split_of(tree, honest: bool) -> int:
    """How many parts each leaf of an honest stratification is split into: enough for
    :data:`MIN_UNITS` units (1 with that many leaves; for a non-honest one, stratx's
    estimator leaf for leaf; and with nothing to stratify on)."""
    if not honest or tree is None:
        return 1
    return max(1, -(-MIN_UNITS // max(1, int(leaf_nodes(tree).sum()))))


@dataclass
class FeatureScan:
    """What the scan needs for one feature."""

    feature: str
    # the estimator's name (daskpd._strat.estimators): "numeric" (StratPD) | "categorical" (CatStratPD), the
    # feature's own; or another run besides it on the same feature ("binned_mean": the binned mean of y; see key)
    kind: str
    other: list  # the tree's input columns, in order
    # fitted HistTree or DecisionTreeRegressor, HonestTrees (a tree per fold), or None (one stratum)
    tree: object | None
    coder: KeyCoder
    leaf_index: np.ndarray | None
    n_leaves: int  # the units rows fall in: leaves x split
    min_samples_leaf: int | None = None
    split: int = 1  # each leaf's parts (by row hash): the units of the leaf bootstrap

    # estimator, key, binned and stats_per_set are worked out once per object (the scan
    # reads them per partition and per feature): a FeatureScan's fields are not reassigned
    _CACHED = ("estimator", "key", "binned", "stats_per_set")

    def __getstate__(self):
        """Pickled without what :func:`functools.cached_property` kept (worked out again)."""
        return {k: v for k, v in self.__dict__.items() if k not in self._CACHED}

    @cached_property
    def estimator(self) -> ModelFreeEstimator:
        """The model-free estimator of this feature (its ``kind``)."""
        return estimator_named(self.kind, f"feature {self.feature!r}")

    @cached_property
    def key(self):
        """This entry's name in the scan's tables, results and state: the feature for its
        kind's own estimator (StratPD, CatStratPD), ``(feature, kind)`` for another
        estimator of the same feature (:func:`daskpd._strat.estimators.entry_key`)."""
        return entry_key(self.feature, self.kind)

    @cached_property
    def binned(self) -> bool:
        return self.coder.binned

    @cached_property
    def stats_per_set(self) -> int:
        """``[n, sum_y]``, plus ``sum_x`` when binned (a leaf's bin sits at its own mean x)."""
        return 3 if self.binned else 2

    @property
    def honest(self) -> bool:
        return isinstance(self.tree, HonestTrees)

    @property
    def needs_hash(self) -> bool:
        """Whether a row's unit depends on its hash (its fold, or its part of a leaf)."""
        return self.honest or self.split > 1

    def leaves(self, X: np.ndarray, columns, h: np.ndarray | None = None) -> np.ndarray:
        """Unit (0..n_leaves-1) of every row of X (``columns``: the tree's inputs'
        positions in X; ``h``: the rows' hashes, :func:`daskpd._engine.hashing.row_hash`,
        when :attr:`needs_hash`)."""
        if self.tree is None or len(columns) == 0:
            base = np.zeros(X.shape[0], dtype=np.int64)
        elif self.honest:
            base = self.tree.apply(X, columns, self.leaf_map(), fold_of(h))
        elif hasattr(self.tree, "feature_"):
            base = self.tree.apply(X, columns, leaf_map=self.leaf_map())
        else:
            base = self.leaf_map()[self.tree.apply(X[:, columns].astype("float32"))]
        if self.split > 1:
            base = base + unit_of(h, self.split).astype(base.dtype)
        return base

    def leaf_map(self) -> np.ndarray:
        """``leaf_index`` as int32 (the tables' leaf type)."""
        if getattr(self, "_leaf_map", None) is None:
            self._leaf_map = self.leaf_index.astype(np.int32)
        return self._leaf_map


@dataclass
class WithState:
    """What ``StratScan.reduce`` returns with ``keep_state``: its usual output and one
    node per bucket giving that bucket's merged tables and counters, gathered by the
    driver one by one (never merged into one task: together they can outgrow a worker)."""

    result: object
    sums: list


@dataclass
class ScanPiece:
    """One bucket's tables ({entry key: Table, or Rows not yet grouped}, ``FeatureScan.key``),
    in bucket 0 the row counters ({entry key: (rows, missing x, bad y)}), and how many partitions it covers."""

    tables: dict
    counters: dict | None = None
    n_maps: int = 1

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.tables.values())


def _sum_counters(parts):
    have = [p.counters for p in parts if p.counters is not None]
    if not have:
        return None
    return {f: tuple(int(sum(c[f][k] for c in have)) for k in range(3)) for f in have[0]}


def _split_grouped(table: Table, bounds: np.ndarray) -> list[Table]:
    cut = np.searchsorted(table.leaf, bounds, side="left")
    return [Table(table.leaf[a:z], table.key[a:z], table.values[a:z]) for a, z in zip(cut[:-1], cut[1:])]


def _cut(table, bounds: np.ndarray) -> list:
    """A feature's raw rows or grouped table cut into the runs of leaves of ``bounds``."""
    return table.split(bounds) if isinstance(table, Rows) else _split_grouped(table, bounds)


@dataclass
class StratScan(Job):
    """The model-free scan (see the module docstring)."""

    target: str
    features: list  # of FeatureScan
    encoder: FeatureEncoder
    n_trials: int = 0  # leaf-bootstrap trials, made by the finish (daskpd._strat.leafboot)
    random_state: int = 0
    # the columns a row's fold hash is of (pass 1's), for the folds of honest trees and the
    # parts of split leaves (None: every column of the partition)
    hash_columns: list | None = None
    n_buckets: int = 1
    expected_rows: int = 0  # rows per partition, for the map's grouping decision
    group_from: dict = field(default_factory=dict)  # {entry key: partitions a merge covers before it groups raw rows}
    # how the curves are finished (see daskpd._strat.numeric / categorical)
    finish_options: FinishOptions = field(default_factory=FinishOptions)
    # what is kept of the merged (leaf, key) tables (daskpd._strat.state): nothing
    # (StateMode.NONE, the default), kept besides the results (MEMORY, SAVE) or kept
    # with no finish (ONLY)
    keep_state: StateMode = StateMode.NONE
    # with a kept state: a directory the workers share, where each bucket writes its own
    # tables (daskpd._strat.runs) instead of sending them to the driver
    state_dir: str | None = None

    @property
    def n_sets(self) -> int:
        """The statistics sets the finish makes: the curve's and one per trial (the
        tables hold the first only: a trial is its leaves' weights)."""
        return 1 + int(self.n_trials)

    def _group_at_map(self, fs: FeatureScan) -> bool:
        return groups_at_map(fs, self.expected_rows)

    # -- map / combine -------------------------------------------------------------

    def map(self, ctx):
        df = ctx.df
        y = as_float(df[self.target])
        y_ok = np.isfinite(y)
        X = ctx.cached(("strat-X", id(self.encoder)), lambda: self.encoder.transform(df))
        col = {c: j for j, c in enumerate(self.encoder.columns)}
        # the rows' hashes (the sample's: the same columns, seed and salt): folds and leaf parts
        cols = list(self.hash_columns) if self.hash_columns is not None else hash_order(df.columns)
        h = (ctx.cached(("fold-hash", self.random_state, tuple(cols)),
                        lambda: fold_hash(df[cols], self.random_state))
             if any(fs.needs_hash for fs in self.features) else None)
        piece = ScanPiece({}, {})
        for fs in self.features:
            s = df[fs.feature]
            est = fs.estimator
            x_ok, x = est.read_x(fs, s)
            ok = x_ok & y_ok
            every = bool(ok.all())
            sel = slice(None) if every else ok
            leaf = fs.leaves(X[sel], [col[c] for c in fs.other], None if h is None else h[sel])
            key = est.keys(fs, s, x, ok, every)
            rows = Rows(leaf.astype(index_dtype(fs.n_leaves), copy=False), key.astype(index_dtype(fs.coder.n_keys)),
                        y[sel], x[sel] if fs.binned else None)
            piece.tables[fs.key] = reduce_tables([rows], fs.coder.n_keys) if self._group_at_map(fs) else rows
            piece.counters[fs.key] = (len(df), int((~x_ok).sum()), int((x_ok & ~y_ok).sum()))
        return piece

    def split(self, piece: ScanPiece, granularity: int, n: int, part: int) -> list:
        """The piece of bucket ``part`` (of ``granularity``) cut by leaves into its ``n``
        buckets at ``granularity * n`` (the counters stay with the first)."""
        out = [ScanPiece({}, piece.counters if k == 0 else None, piece.n_maps) for k in range(n)]
        for fs in self.features:
            for k, p in enumerate(_cut(piece.tables[fs.key], self._bounds(fs, granularity, n, part))):
                out[k].tables[fs.key] = p
        return out

    @staticmethod
    def _bounds(fs, granularity: int, n: int, part: int) -> np.ndarray:
        return bucket_bounds(fs.n_leaves, granularity * n)[part * n:part * n + n + 1]

    def _stays_raw(self, fs, tabs, n_maps: int) -> bool:
        return all(isinstance(t, Rows) for t in tabs) and n_maps < self.group_from.get(fs.key, 0)

    def _merge_feature(self, fs, tabs, n_maps: int, concat: bool = True):
        if self._stays_raw(fs, tabs, n_maps):
            return Rows.concat(tabs) if concat else list(tabs)
        raw = [isinstance(t, Rows) for t in tabs]
        if any(raw) and not all(raw):  # a raw part is grouped on its own first
            tabs = [reduce_tables([t], fs.coder.n_keys) if r else t for t, r in zip(tabs, raw)]
        return reduce_tables(tabs, fs.coder.n_keys)

    def combine(self, parts, bucket=0):
        """The parts merged.  A feature's raw rows stay raw (concatenated, in order) while
        the merge covers fewer partitions than ``group_from[feature]``: grouping rows
        fewer than the (leaf, key) cells would not shrink them, only cost a sort now and
        a merge later.  The choice depends on the partitions covered only, never on the
        bucket count or the task layout, so the bits do not either."""
        n_maps = sum(p.n_maps for p in parts)
        tables = {fs.key: self._merge_feature(fs, [p.tables[fs.key] for p in parts], n_maps)
                  for fs in self.features}
        return ScanPiece(tables, _sum_counters(parts), n_maps)

    def combine_finish(self, parts, bucket):
        """The last merge of a bucket and its finish: raw rows that stay raw up to here
        go to the finish as the list of the parts' rows, which it groups in the same
        order as their concatenation (the same bits, without that copy: at 1e7 rows on
        one task level the concatenations were 0.95 s of the scan's CPU)."""
        n_maps = sum(p.n_maps for p in parts)
        tables = {fs.key: self._merge_feature(fs, [p.tables[fs.key] for p in parts], n_maps, concat=False)
                  for fs in self.features}
        return self.finish_bucket(ScanPiece(tables, _sum_counters(parts), n_maps), bucket)

    def combine_split(self, parts, bucket, granularity, n):
        """``split(combine(parts))`` in one go: raw rows that stay raw are cut straight
        into the pieces (:meth:`Rows.concat_split`), without the concatenated copy that
        the first task levels of a lake-sized scan would only cut up again."""
        n_maps = sum(p.n_maps for p in parts)
        out = [ScanPiece({}, _sum_counters(parts) if k == 0 else None, n_maps) for k in range(n)]
        for fs in self.features:
            tabs = [p.tables[fs.key] for p in parts]
            bounds = self._bounds(fs, granularity, n, bucket)
            raw = self._stays_raw(fs, tabs, n_maps)
            pieces = Rows.concat_split(tabs, bounds) if raw else _cut(self._merge_feature(fs, tabs, n_maps), bounds)
            for k, p in enumerate(pieces):
                out[k].tables[fs.key] = p
        return out

    # -- finishing -----------------------------------------------------------------

    def finish_bucket(self, piece: ScanPiece, bucket: int) -> dict:
        """A merged bucket turned, inside its last combine, into what the finish needs:
        ``{"features": {index: part}}``, each feature's part made by its estimator
        (``ModelFreeEstimator.finish_bucket``: StratPD's O(positions) arrays, CatStratPD's
        least-squares terms); with ``keep_state`` also ``"state"``: ``(tables, counters,
        {feature: the estimator's bucket_state})``."""
        parts, kept, pieces = {}, {}, {}
        counters = piece.counters or {}
        for i, fs in enumerate(self.features):
            table = piece.tables[fs.key]
            if isinstance(table, (Rows, list)):  # raw rows (a list: the parts of combine_finish, in order)
                table = reduce_tables(table if isinstance(table, list) else [table], fs.coder.n_keys)
            if self.keep_state.keeps:
                kept[fs.key] = (write_part(self.state_dir, f"bucket-{bucket}.feature-{i}", table)
                                    if self.state_dir else table)
                if not self.keep_state.finishes:
                    continue
            est = fs.estimator
            parts[i] = est.finish_bucket(self, i, table, counters.get(fs.key), self.virtual_span(fs, bucket))
            if self.keep_state.keeps:  # what the state's finish summary is made of (this bucket's leaves)
                got = est.bucket_state(self, i, table, parts[i])
                if got is not None:
                    pieces[fs.key] = got
        if self.keep_state.keeps:
            return {"features": parts, "state": (kept, piece.counters, pieces)}
        return {"features": parts}

    def virtual_span(self, fs, bucket: int) -> tuple:
        """``(lo, hi, shared_lo, shared_hi)``: the virtual buckets ``lo <= v < hi`` of the
        leaves of bucket ``bucket``, and whether the first / last holds leaves of the bucket
        before / after it too (only with a bucket count that does not divide ``N_VIRTUAL``)."""
        L = int(fs.n_leaves)
        l0, l1 = (int(v) for v in bucket_bounds(L, self.n_buckets)[bucket:bucket + 2])
        if l1 <= l0:
            return 0, 0, False, False
        lo, hi = l0 * N_VIRTUAL // L, (l1 - 1) * N_VIRTUAL // L + 1
        return (lo, hi, l0 > 0 and (l0 - 1) * N_VIRTUAL // L == lo, l1 < L and l1 * N_VIRTUAL // L == hi - 1)

    def pick_state(self, finished: dict):
        return finished["state"]

    def pick(self, finished: dict, index: int, k: int | None = None):
        """Feature ``index``'s part of a finished bucket (its ``k``-th item when given)."""
        part = finished["features"][index]
        return part if k is None else part[k]

    def call(self, index: int, op: str, *args):
        """A task of feature ``index``'s estimator: its method ``op`` (``ModelFreeEstimator.wire``)."""
        return getattr(self.features[index].estimator, op)(self, index, *args)

    def collect(self, *results) -> dict:
        return {fs.key: r for fs, r in zip(self.features, results)}

    def reduce(self, merged, node):
        B = self.n_buckets
        results, kept = {}, {}
        sums = ([node("pick_state", merged[b], key=f"state-{b}") for b in range(B)] if self.keep_state.keeps
                else [])
        if not self.keep_state.finishes:
            return WithState(node("collect", key="collect"), sums)
        # merged[b]: bucket b as finish_bucket left it (made inside its last combine); each
        # feature's estimator wires its own aggregate
        for i, fs in enumerate(self.features):
            results[i], refs = fs.estimator.wire(self, i, [merged[b] for b in range(B)], node)
            if refs is not None:  # its buckets stay where they are; its estimator's solve_kept follows (run_strat)
                kept[i] = refs
        out = node("collect", *[results[i] for i in range(len(self.features))], key="collect")
        out = Kept(out, kept) if kept else out
        return WithState(out, sums) if self.keep_state.keeps else out


# dask's memory manager counts these by their arrays (spilling decisions need it)
sizeof.register(ScanPiece)(lambda o: o.nbytes)
