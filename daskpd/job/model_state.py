"""Incremental model-based job runs: the merged plan's layout and partial sums, kept next
to the model-free state (docs/jobs.md, "Nightly runs").

Given the model and the layout (every grid, ALE's bin edges and level order, the
marginal plot's bins: :class:`daskpd.model._multi.Layout`), the partials of the job's
model-based methods are sums over the rows (ICE's sampled lines: the rows of smallest
seeded hash), so a run with ``[run] incremental = true`` keeps, in its run directory,
``state/model/``: the layout and the merged partials (``state.pkl``) and what they
depend on (``meta.json``: the model file's sha256, :func:`layout_key`, and the rows the
partials cover and the layout was built from).  The next incremental run (:func:`plan`)
scans only the new files of the job's file plan (:func:`daskpd.job.incremental.plan`,
which also keeps the files covered when the job has no model-free method) under the kept
layout and adds their partials; it runs the model-based methods in full, with the reason
in one line, when the file plan is a full run (in a job with model-free methods: the
model-free part runs in full), the model file changed, or the parameters that fix the
layout changed.
"""
from __future__ import annotations

import hashlib
import json
import os
import pickle
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import __version__
from .._engine.stats import summarize
from .._errors import DataError
from ..results.base import atomic_path, dump_json, json_clean
from .spec import METHOD_PARAMS, JobSpec

__all__ = ["ModelPlan", "plan", "save", "kept_rows", "partial_rows", "layout_key", "model_sha256", "MODEL_DIR", "state_bytes",
           "outside_layout", "describe_outside"]

#: the sub-directory of a run's ``state/`` holding the model-based state
MODEL_DIR = "model"
#: the version of the state's pickle layout (a run kept by another version runs in full); 3: the layout
#: records the range of every feature it was built from (``Layout.ranges``)
VERSION = 3


def model_sha256(path: str | os.PathLike) -> str:
    """sha256 of the model file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def layout_key(spec: JobSpec, inputs, features, categorical) -> dict:
    """What fixes the layout and the partials besides the model: the methods and their
    parameters, the model's inputs and explained features, the categorical columns, the
    target, the response and the trials (JSON-able)."""
    def method_defaults(method):  # as execute.method_defaults (imported here, it would import this module back)
        return {k: v.default for k, v in METHOD_PARAMS[method].items()}

    m = spec.model
    return json_clean({
        "version": VERSION, "target": spec.target, "methods": list(spec.model_based),
        "params": {k: dict(spec.params.get(k) or method_defaults(k)) for k in spec.model_based},
        "inputs": list(inputs), "features": list(features), "categorical": sorted(c for c in categorical if c in inputs),
        "response": m.response, "target_class": m.target_class, "n_trials": m.n_trials, "bootstrap": m.bootstrap,
        "subsample_size": m.subsample_size, "band": list(m.band), "row_id": list(m.row_id or ()),
        "random_state": spec.random_state,
    })


@dataclass
class ModelPlan:
    """``mode`` "full" | "incremental", ``reason`` (one line), ``base_run``, the model
    file's ``sha256`` and ``key`` (:func:`layout_key`) of this run, and in "incremental"
    mode the kept ``layout``, the path of the kept partials and the rows the layout was
    built from (``fitted_rows``)."""

    mode: str
    reason: str
    sha256: str
    key: dict
    base_run: str | None = None
    new_files: list = field(default_factory=list)
    layout: object = None
    state_path: Path | None = None
    fitted_rows: int | None = None
    #: the new files' values outside the kept layout (:func:`outside_layout`), found on an incremental night
    outside: list = field(default_factory=list)
    #: True when they made this run build the grids and bins again (``[run] refit = "auto"``)
    rebuilt: bool = False

    def load_parts(self) -> list:
        with open(self.state_path, "rb") as fh:
            return pickle.load(fh)["parts"]

    def manifest(self) -> dict:
        out = {"mode": self.mode, "reason": self.reason, "base_run": self.base_run, "model_sha256": self.sha256}
        if self.outside:
            out.update(outside_layout=self.outside, layout_rebuilt=self.rebuilt)
        return out

    def rebuild(self, why: str) -> None:
        """Run in full after all (the new files' values fall outside the kept layout):
        the grids and bins are built again from every row."""
        self.mode, self.reason, self.rebuilt = "full", why, True
        self.layout = self.state_path = self.fitted_rows = None
        self.new_files = []


def plan(spec: JobSpec, job_dir: Path, free_plan, sha256: str, key: dict) -> ModelPlan:
    """The model-based part's plan, given the job's file plan (``free_plan``, an
    :class:`daskpd.job.incremental.Plan`: the model-free part's, or the files' alone in a
    job with no model-free method): see the module docstring."""

    def full(reason, base=None):
        return ModelPlan("full", reason, sha256, key, base)

    if not spec.run.incremental:
        return full("incremental runs are off ([run] incremental = false)")
    base = free_plan.base_run
    if free_plan.mode != "incremental":
        return full(f"the model-free part runs in full ({free_plan.reason})" if spec.model_free else free_plan.reason,
                    base)
    mdir = job_dir / base / "state" / MODEL_DIR
    try:
        meta = json.loads((mdir / "meta.json").read_text())
    except (OSError, ValueError):
        return full(f"run {base} keeps no model-based state", base)
    if meta.get("model_sha256") != sha256:
        return full(f"the model file changed since run {base} (sha256 {str(meta.get('model_sha256'))[:12]} -> "
                    f"{sha256[:12]})", base)

    if meta.get("daskpd") != __version__ or meta.get("version") != VERSION:
        return full(f"the model-based state of run {base} was written by daskpd {meta.get('daskpd')} (state format "
                    f"{meta.get('version')}); this is {__version__} (format {VERSION})", base)
    old = meta.get("layout_key") or {}
    if old != key:
        keys = sorted(k for k in set(old) | set(key) if old.get(k) != key.get(k))
        return full(f"the model-based methods' grids or parameters changed since run {base} "
                    f"({', '.join(keys)})", base)
    try:
        with open(mdir / "state.pkl", "rb") as fh:
            layout = pickle.load(fh)["layout"]
    except Exception as exc:  # a damaged or foreign file: a full run rebuilds it
        return full(f"the model-based state of run {base} cannot be read ({type(exc).__name__})", base)
    return ModelPlan("incremental", f"{len(free_plan.new_files)} new file(s) added to run {base}'s model-based sums",
                     sha256, key, base, list(free_plan.new_files), layout, mdir / "state.pkl",
                     meta.get("fitted_rows"))


def kept_rows(state_dir: Path) -> tuple[int, int]:
    """(rows the kept partials cover, rows their layout was built from) of a run's
    ``state/`` (``state_dir``); :class:`DataError` when they cannot be read."""
    try:
        meta = json.loads((Path(state_dir) / MODEL_DIR / "meta.json").read_text())
        return int(meta["n_rows"]), int(meta["fitted_rows"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DataError(f"its model-based state holds no row counts ({type(exc).__name__})") from None


def save(run_dir: Path, layout, parts: list, sha256: str, key: dict, fitted_rows: int | None = None) -> int:
    """Write ``state/model/`` into the (temporary) run directory; return its bytes.
    ``fitted_rows``: the rows the layout was built from (default: the partials' rows, a
    layout built in this run)."""
    n_rows = partial_rows(parts)
    mdir = Path(run_dir) / "state" / MODEL_DIR
    mdir.mkdir(parents=True)
    with atomic_path(mdir / "state.pkl") as tmp:
        with open(tmp, "wb") as fh:
            pickle.dump({"version": VERSION, "layout": layout, "parts": parts}, fh, protocol=pickle.HIGHEST_PROTOCOL)
    with atomic_path(mdir / "meta.json") as tmp:
        Path(tmp).write_text(dump_json({"model_sha256": sha256, "layout_key": key, "daskpd": __version__,
                                        "version": VERSION, "n_rows": n_rows,
                                        "fitted_rows": n_rows if fitted_rows is None else int(fitted_rows)}))
    return state_bytes(run_dir)


def partial_rows(parts: list) -> int:
    """The rows the partials cover (each job's partial counts every row it read)."""
    return max((int(getattr(p, "n_rows", 0)) for p in parts), default=0)


def state_bytes(run_dir: Path) -> int:
    mdir = Path(run_dir) / "state" / MODEL_DIR
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(mdir) for f in fs)


#: at most this many new categories are named in a note (the manifest lists them all)
NAMED_LEVELS = 5


def outside_layout(layout, dataset) -> list[dict]:
    """The new files' (``dataset``: :func:`daskpd.job.execute._new_files`) values outside
    the range the kept ``layout`` was built from, one summary pass over their feature
    columns: ``{"feature", "kind": "numeric", "layout_range": [lo, hi], "new_range": [lo,
    hi], "grid": [first, last] of partial dependence's grid, or None}`` (a value below or
    above the range; and ``"new_values"``, ``"held_by"`` when a value inside it is not
    among the feature's distinct values that a grid or bins of the layout are made of:
    :func:`_distinct_sets`) or ``{"feature", "kind": "categorical", "new_levels": [...]}``
    (a category it never saw).  Empty when the layout records no ranges (an older state)
    or nothing falls outside."""
    ranges = getattr(layout, "ranges", None) or {}
    frame = getattr(dataset, "frame", None)
    if frame is None or not ranges:
        return []
    kinds = {f: r["kind"] for f, r in ranges.items() if f in set(map(str, frame.columns))}
    if not kinds:
        return []
    if not hasattr(frame, "npartitions"):  # pandas
        import dask.dataframe as dd

        frame = dd.from_pandas(frame, npartitions=1, sort=False)
    sums = summarize(frame[list(kinds)], kinds)
    out = []
    for f in layout.features:
        r, s = ranges.get(f), sums.get(f)
        if r is None or s is None or s.n == 0:
            continue
        if r["kind"] == "categorical":
            old = set(r["levels"])
            new = [str(v) for v in (s.uniques if s.uniques is not None else []) if str(v) not in old]
            if new:
                out.append({"feature": f, "kind": "categorical", "new_levels": new})
        elif r.get("vmin") is not None:
            beyond = s.vmin < r["vmin"] or s.vmax > r["vmax"]
            between = _off_distinct(layout, f, s, r["vmin"], r["vmax"])
            if beyond or between:
                item = {"feature": f, "kind": "numeric", "layout_range": [r["vmin"], r["vmax"]],
                        "new_range": [float(s.vmin), float(s.vmax)], "grid": _pd_grid(layout, f)}
                if between:
                    item.update(new_values=between[0], held_by=between[1])
                out.append(item)
    return out


def _distinct_sets(layout, feature) -> list[tuple[str, "object"]]:
    """``(what, values)`` of every part of the layout that holds ``feature``'s distinct
    values themselves (not a range cut into intervals): partial dependence's (and ICE's,
    pd_variance's) grid when it was the feature's distinct values -- fewer points than
    its ``grid_resolution``; a grid of percentiles has exactly that many -- and the
    marginal plot's bins when they are its distinct values."""
    out = []
    for key, grids in (layout.grids or {}).items():
        g = grids.get(feature)
        try:
            res = int(key[0])
            g = np.asarray(g, dtype=float) if g is not None else None
        except (TypeError, ValueError, IndexError):
            continue
        if g is not None and len(g) < res:
            out.append(("the partial dependence grid", g[np.isfinite(g)]))
            break  # every grid of distinct values holds the same values
    for sp in layout.marginal or []:
        if getattr(sp, "feature", None) == feature and getattr(sp, "mode", None) == "values":
            out.append(("the marginal plot's bins", np.asarray(sp.values, dtype=float)))
    return out


def _off_distinct(layout, feature, summary, lo, hi):
    """``(new values, [what holds the distinct values])``: the new values inside the
    layout's range [lo, hi] that a grid or bins of the feature's distinct values does not
    hold (``new values`` None: more than the summary keeps, so some surely are not), or
    None."""
    sets = _distinct_sets(layout, feature)
    if not sets:
        return None
    if summary.uniques is None:  # more distinct new values than the summary keeps: more than any such grid
        return None, [what for what, _ in sets]
    u = np.asarray(summary.uniques, dtype=float)
    u = u[np.isfinite(u) & (u >= lo) & (u <= hi)]
    new, held_by = set(), []
    for what, vals in sets:
        off = u[~np.isin(u, vals)]
        if len(off):
            new.update(off.tolist())
            held_by.append(what)
    return (sorted(new), held_by) if new else None


def _pd_grid(layout, feature):
    """[first, last] value of the feature's partial dependence / ICE grid in the layout, or None."""
    for grids in (layout.grids or {}).values():
        g = grids.get(feature)
        if g is not None and len(g):
            try:
                g = np.asarray(g, dtype=float)
            except (TypeError, ValueError):
                return None
            return [float(g.min()), float(g.max())]
    return None


def _num(v: float) -> str:
    return f"{v:.6g}"


def describe_outside(items: list[dict]) -> str:
    """One clause per feature: what of the new rows falls outside the kept layout."""
    parts = []
    for it in items:
        if it["kind"] == "categorical":
            lv = it["new_levels"]
            named = ", ".join(repr(v) for v in lv[:NAMED_LEVELS]) + (f" and {len(lv) - NAMED_LEVELS} more"
                                                                     if len(lv) > NAMED_LEVELS else "")
            parts.append(f"feature {it['feature']!r}: {len(lv)} new categor{'y' if len(lv) == 1 else 'ies'} "
                         f"({named})")
            continue
        (lo, hi), (nlo, nhi) = it["layout_range"], it["new_range"]
        side = []
        if nlo < lo:
            side.append(f"down to {_num(nlo)}")
        if nhi > hi:
            side.append(f"up to {_num(nhi)}")
        grid = (f"; the partial dependence grid spans [{_num(it['grid'][0])}, {_num(it['grid'][1])}]"
                if it.get("grid") else "")
        said = []
        if side:
            said.append(f"new values {' and '.join(side)}, beyond the range [{_num(lo)}, {_num(hi)}] the grids and "
                        f"bins were built from{grid}")
        if "new_values" in it:
            vals = it["new_values"]
            if vals is None:
                what = "more distinct new values than the summary keeps, inside the range"
            else:
                named = ", ".join(_num(v) for v in vals[:NAMED_LEVELS]) + (
                    f" and {len(vals) - NAMED_LEVELS} more" if len(vals) > NAMED_LEVELS else "")
                what = f"{len(vals)} new value{'' if len(vals) == 1 else 's'} inside the range ({named})"
            said.append(f"{what}, not among the distinct values {' and '.join(it['held_by'])} "
                        f"{'holds' if len(it['held_by']) == 1 else 'hold'}")
        parts.append(f"feature {it['feature']!r}: " + "; ".join(said))
    return "; ".join(parts)
