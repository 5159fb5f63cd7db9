"""Individual conditional expectation (ICE) curves (Goldstein et al. 2015).

One curve per row: ``ICE_i(v) = f(v, x_C^(i))`` over the grid of ``feature``; their
(weighted) mean is the partial dependence.  Centred ICE (c-ICE) subtracts each curve's
value at the first grid point.

Three outputs, from one pass over the data:

* the PD (every row);
* a *seeded sample* of ``n_lines`` curves for plotting: the rows with the smallest
  keyed hash of their content (the same rows however the data is partitioned, a
  uniform sample without replacement), or every curve when ``n_lines=None`` (driver
  memory then grows with the rows: for small data only);
* optionally the full table, written by the workers as one parquet file per partition
  under ``path``, never collected on the driver.

Every ICE table has ONE long layout (:func:`~daskpd.model._ice_result.ice_frame`,
:data:`~daskpd.model._ice_result.ICE_COLUMNS`): one row per
(data row, grid value) -- ``feature``, the row's id ``partition`` and ``row`` (its
partition and its position in it), the ``id_columns`` when asked for, the grid value
(``x``, or ``category`` for a categorical feature) and the prediction ``ice``.  The
sampled lines (:meth:`~daskpd.model._ice_result.ICEResult.lines_frame`), the written table and a job's
``ice.parquet`` all have it, and a sampled line's id is its row's id in the written table.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from .._data.encode import as_float
from .._engine.hashing import row_hash
from .._errors import DataError, InvalidParameterError
from .._validation import validate_params
from ..results import dump_json, with_metadata
from ._arrays import model_read, open_model_input, resolve_columns
from ._common import require_class
from ._grids import GridOptions, build_grids, feature_quantiles
from ._ice_result import ICE_COLUMNS, ICEResult, ice_columns, ice_frame
from ._params import SPECS
from ._passes import Plan, Trials, run_jobs, set_sums, trial_params, trial_row_id
from ._pd_engine import engine_of
from ._pd_pass import curves_matrix, row_chunk
from ._predictor import DEFAULT_BATCH_ROWS
from ._setup import prepare_model_run

__all__ = ["ice"]


@dataclass
class _ICEPartial:
    sums: np.ndarray
    wsum: float
    n_rows: int
    lines: np.ndarray
    hashes: np.ndarray | None
    xs: np.ndarray
    index: np.ndarray
    ids: np.ndarray  # (rows, 2): each line's partition and position in it
    n_written: int
    keep: int | None
    trial_sums: np.ndarray | None = None  # with trials: (T, grid) trial-weighted sums of the rows' curves
    trial_wsum: np.ndarray | None = None  # (T,)

    @classmethod
    def combine(cls, parts):
        lines = np.concatenate([p.lines for p in parts], axis=0)
        xs = np.concatenate([p.xs for p in parts])
        index = np.concatenate([p.index for p in parts])
        ids = np.concatenate([p.ids for p in parts], axis=0)
        hashes = None
        keep = parts[0].keep
        if keep is not None:
            hashes = np.concatenate([p.hashes for p in parts])
            if len(hashes) > keep:
                sel = np.sort(np.argpartition(hashes, keep - 1)[:keep])
                lines, xs, index, ids, hashes = lines[sel], xs[sel], index[sel], ids[sel], hashes[sel]
        ts = None if parts[0].trial_sums is None else np.sum([p.trial_sums for p in parts], axis=0)
        tw = None if parts[0].trial_wsum is None else np.sum([p.trial_wsum for p in parts], axis=0)
        return cls(np.sum([p.sums for p in parts], axis=0), float(sum(p.wsum for p in parts)),
                   int(sum(p.n_rows for p in parts)), lines, hashes, xs, index, ids,
                   int(sum(p.n_written for p in parts)), keep, ts, tw)


def _obj(a) -> np.ndarray:
    out = np.empty(len(a), dtype=object)
    out[:] = list(a)
    return out


@dataclass
class ICEJob:
    feature: str
    grid: np.ndarray
    kinds: dict
    n_lines: int | None
    random_state: int
    path: str | None = None
    id_columns: list = field(default_factory=list)
    storage_options: dict | None = None

    def map(self, ctx):
        df = ctx.df
        n, G = ctx.n, len(self.grid)
        w = ctx.weights
        pred = ctx.plan.predictor
        sums = np.zeros(G)
        keep = self.n_lines
        xs_all = df[self.feature]
        xs_all = as_float(xs_all) if self.kinds[self.feature] == "numeric" else _obj(xs_all.to_numpy(dtype=object))
        index_all = _obj(df.index)
        hashes_all = row_hash(df[pred.columns], self.random_state, salt=7) if keep is not None else None
        best_lines = np.empty((0, G))
        best_h = np.empty(0, dtype=np.uint64)
        best_rows = np.empty(0, dtype=np.int64)
        all_lines = []
        writer = fh = None
        n_written = 0
        step = row_chunk(ctx, G)
        W = ctx.set_weights()[:, 1:] if ctx.n_sets > 1 else None  # bootstrap trials: their weight columns
        tsums = None if W is None else np.zeros((W.shape[1], G))
        try:
            for r0 in range(0, n, step):
                r1 = min(n, r0 + step)
                R = curves_matrix(ctx, (self.feature,), [self.grid], self.kinds, r0, r1)  # (G, m)
                sums += R @ w[r0:r1] if w is not None else R.sum(axis=1)
                if W is not None:
                    tsums += set_sums(R, W[r0:r1])
                if keep is None:
                    all_lines.append(R.T.copy())
                else:
                    h = hashes_all[r0:r1]
                    cand = np.argpartition(h, keep - 1)[:keep] if len(h) > keep else np.arange(len(h))
                    L = np.concatenate([best_lines, R.T[cand]], axis=0)
                    H = np.concatenate([best_h, h[cand]])
                    rows = np.concatenate([best_rows, cand + r0])
                    if len(H) > keep:
                        sel = np.argpartition(H, keep - 1)[:keep]
                        L, H, rows = L[sel], H[sel], rows[sel]
                    o = np.argsort(rows, kind="stable")
                    best_lines, best_h, best_rows = L[o], H[o], rows[o]
                if self.path is not None:
                    writer, fh = self._write(ctx, R, r0, r1, writer, fh)
                    n_written += r1 - r0
        finally:
            if writer is not None:
                writer.close()
            if fh is not None:
                fh.close()
        if keep is None:
            lines = np.concatenate(all_lines, axis=0) if all_lines else np.empty((0, G))
            rows = np.arange(n)
            hashes = None
        else:
            lines, rows, hashes = best_lines, best_rows, best_h
        ids = np.column_stack([np.full(len(rows), ctx.index, dtype="int64"), np.asarray(rows, dtype="int64")])
        return _ICEPartial(sums, ctx.wsum(), n, lines, hashes, xs_all[rows], index_all[rows], ids, n_written, keep,
                           tsums, None if W is None else W.sum(axis=0))

    def _write(self, ctx, R, r0, r1, writer, fh):
        import fsspec
        import pyarrow as pa
        import pyarrow.parquet as pq

        df = ctx.df.iloc[r0:r1]
        part = ctx.index
        frame = ice_frame(self.feature, self.kinds[self.feature], self.grid, part, np.arange(r0, r1), R.T,
                          {c: df[c].to_numpy() for c in self.id_columns})
        table = pa.Table.from_pandas(frame, preserve_index=False)
        if writer is None:
            fs, root = fsspec.core.url_to_fs(self.path, **(self.storage_options or {}))
            table = with_metadata(table, {"feature": self.feature, "grid": self.grid}, key=b"daskpd_ice")
            fh = fs.open(f"{root.rstrip('/')}/part.{part:05d}.parquet", "wb")
            writer = pq.ParquetWriter(fh, table.schema)
        writer.write_table(table)
        return writer, fh


def _prepare_path(path, storage_options, overwrite):
    import fsspec

    fs, root = fsspec.core.url_to_fs(os.fspath(path), **(storage_options or {}))
    if fs.exists(root):
        existing = [p for p in fs.ls(root, detail=False)] if fs.isdir(root) else [root]
        if existing and not overwrite:
            raise InvalidParameterError(f"parameter path: {path!r} already exists and is not empty; pass overwrite=True or "
                            "choose a new directory")
        for p in existing:
            name = p.rstrip("/").rsplit("/", 1)[-1]
            if name.startswith("part.") or name == "_daskpd_ice.json":
                fs.rm(p)
            elif overwrite:
                raise InvalidParameterError(f"parameter path: {path!r} holds other files ({name}); refusing to overwrite")
    fs.makedirs(root, exist_ok=True)
    return fs, root


def finish_ice(job: ICEJob, part: _ICEPartial, pred, *, centered: bool, params: dict, path=None) -> ICEResult:
    """The ICE result of a finished :class:`ICEJob` partial: lines in row-hash order, the
    PD over all rows, both centred at the first grid value when ``centered``."""
    if part.n_rows == 0:
        raise DataError("data has no rows")
    if part.wsum <= 0:
        raise DataError("the sample weights sum to 0")
    lines, xs, index, ids = part.lines, part.xs, part.index, part.ids
    if job.n_lines is not None and len(lines):
        o = np.argsort(part.hashes, kind="stable")
        lines, xs, index, ids = lines[o], xs[o], index[o], ids[o]
    pdv = part.sums / part.wsum
    trials = None
    if part.trial_sums is not None:
        with np.errstate(invalid="ignore", divide="ignore"):
            trials = part.trial_sums / part.trial_wsum[:, None]
    if centered:
        lines = lines - lines[:, :1]
        pdv = pdv - pdv[0]
        if trials is not None:
            trials = trials - trials[:, :1]
    f = job.feature
    return ICEResult(feature=f, kind=job.kinds[f], grid=job.grid, pd=pdv, lines=lines, line_x=xs, line_index=index,
                     centered=bool(centered), engine=engine_of(pred, (f,), job.kinds, need_rows=True),
                     response=pred.response, target_class=pred.target_class, n_rows=part.n_rows,
                     weight_sum=part.wsum, path=path, params=params, trials_pd=trials,
                     line_partition=ids[:, 0].astype("int32"), line_row=ids[:, 1])


@validate_params(SPECS["ice"])
def ice(
    model,
    data,
    feature: str,
    *,
    grid_resolution: int = 100,
    percentiles=(0.05, 0.95),
    grid=None,
    quantiles=None,
    n_lines: int | None = 100,
    centered: bool = False,
    random_state: int = 0,
    path=None,
    id_columns=None,
    overwrite: bool = False,
    sample_weight=None,
    response: str = "auto",
    target_class=None,
    columns=None,
    categorical_features=None,
    engine: str = "auto",
    batch_rows: int = DEFAULT_BATCH_ROWS,
    progress=None,
    storage_options=None,
    filters=None,
    n_trials: int = 1,
    bootstrap: bool = True,
    subsample_size: float = 0.75,
    band=(0.05, 0.95),
    row_id=None,
    feature_names=None,
) -> ICEResult:
    """ICE curves of ``feature`` for every row of ``data`` (see the module docstring).

    Parameters
    ----------
    model, data, grid_resolution, percentiles, grid, response, target_class, columns,
    categorical_features, engine, batch_rows, progress, storage_options, filters, feature_names
        As :func:`daskpd.partial_dependence` (one feature, a column name or index;
        ``grid`` may be an array; ``data`` may be a numpy or dask array).
    quantiles : list of float, optional
        Probabilities (e.g. ``numpy.arange(0.1, 1.0, 0.1)``, the deciles a plot marks): a
        numeric feature's exact quantiles at them, as :func:`daskpd.partial_dependence`'s,
        in the result's ``quantiles``.
    n_lines : int or None, default 100
        Curves returned for plotting: a uniform sample of rows chosen by a keyed hash of
        their content (reproducible for a given ``random_state``, independent of the
        partitioning).  None returns every curve, in data order (small data only).
    centered : bool, default False
        Centred ICE: subtract each curve's value at the first grid point (the PD is
        centred the same way).
    random_state : int, default 0
        Seeds the line sample.
    path : str, optional
        Directory (local or fsspec URL) to write the full ICE table to, one parquet file
        per partition, from the workers.  Uncentred values.
    id_columns : list of str, optional
        Data columns copied into the written table (e.g. a primary key).
    overwrite : bool, default False
        Allow ``path`` to exist (its ``part.*`` files are replaced).
    sample_weight : str or array, optional
        Weights for the PD (the lines are unweighted).
    n_trials, bootstrap, subsample_size, band, row_id
        T > 1: bootstrap trials of the PD (centred when ``centered``) in the same pass, as
        :func:`daskpd.partial_dependence`, seeded by ``random_state``: ``trials_pd``,
        ``band()``, ``pd_std, pd_lo, pd_hi`` in ``to_frame()``.  The lines are not resampled.

    Returns
    -------
    ICEResult
    """
    read = model_read(storage_options, filters)  # how the input is read, built once
    mi = open_model_input(data, read=read, feature_names=feature_names, model=model,
                          sample_weight=sample_weight)  # the request's one opening
    ds, sample_weight = mi.dataset, mi.sample_weight
    require_class(model, response, target_class, "ice")
    feature = resolve_columns(feature, ds, "feature")
    ds.check([feature], "parameter feature")
    id_columns = id_columns or []
    ds.check(id_columns, "id_columns")
    if id_columns and path is None:
        raise InvalidParameterError("ice: parameter id_columns is only used with path= (the written ICE table)")
    bad = [c for c in id_columns if c in ICE_COLUMNS]
    if bad:
        raise InvalidParameterError(f"ice: parameter id_columns: {bad} clash with the ICE table's own columns")
    grid_options = GridOptions.of(grid_resolution, percentiles, grid, [feature], ds, quantiles, caller="ice")
    trials = Trials.of(n_trials, bootstrap, subsample_size, random_state, row_id)
    run = prepare_model_run(model, ds, [feature], columns=columns, response=response, target_class=target_class,
                            engine=engine, sample_weight=sample_weight, categorical_features=categorical_features,
                            extra_columns=id_columns, read=read,
                            row_id=trial_row_id(trials))
    grids, qs = build_grids(run.ddf, [feature], run.kinds, grid_options)
    g = grids[feature]
    ddf = run.ddf
    if path is not None:
        path = os.fspath(path)
        _prepare_path(path, storage_options, overwrite)
    job = ICEJob(feature, g, run.kinds, n_lines, random_state, path, id_columns, storage_options)
    plan = Plan([job], predictor=run.predictor, weight=run.weight, batch_rows=batch_rows, trials=trials)
    (part,), _ = run_jobs(ddf, plan, name="daskpd-ice")
    params = {**grid_options.params(), "n_lines": n_lines, "random_state": random_state, "sample_weight": run.weight,
              "model": run.predictor.describe(), "custom_grid": bool(grid_options.grid), "id_columns": id_columns,
              **trial_params(trials, band, plan.repeats, plan.response_std)}
    res = finish_ice(job, part, run.predictor, centered=centered, params=params, path=path)
    res.quantiles = feature_quantiles(qs, [feature])
    if path is not None:
        import fsspec

        fs, root = fsspec.core.url_to_fs(path, **(storage_options or {}))
        with fs.open(f"{root.rstrip('/')}/_daskpd_ice.json", "w") as fh:
            fh.write(dump_json({**res.metadata(), "grid": g, "columns": ice_columns(run.kinds[feature], id_columns),
                                "rows_written": part.n_written}))
    return res
