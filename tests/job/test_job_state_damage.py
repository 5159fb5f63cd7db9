"""A kept state that cannot lie: every file of ``state/`` is sealed (size and checksum in
``state/seal.json``) and verified before use.  For every kind of state file and every
kind of damage -- cut short, random bytes written over part of it, deleted, replaced by a
file of another format, a key removed -- the next incremental run is a full run whose
one-line reason names the file and what is wrong (never a traceback, never a curve from
damaged sums), and its results equal a clean full run's.  Every (file, damage) pair is
checked through the plan (what decides the run); each damage and each kind of file is
also run for real on the cluster, its results compared with a clean full run."""
from __future__ import annotations

import io
import json
import os
import pickle
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from daskpd import cli
from daskpd._strat.stratification import FORMAT_VERSION
from daskpd.datasets import Bulldozer
from daskpd.job import incremental as nightly
from daskpd.job import inputs
from daskpd.job.run import run_job
from daskpd.job.seal import seal
from daskpd.job.spec_parse import load_spec

FEATURES = ["YearMade", "MachineHours", "ProductGroup", "ModelID"]
GEN = Bulldozer(random_state=0, n_models=30)

SPEC = """
name = "damage"
target = "SalePrice"
features = {features}
categorical = ["ModelID"]
sample_size = 3000
[importances]
n_trials = 3
[source]
path = "{lake}"
[output]
plots = false
report = false
[run]
incremental = true
refit = "never"
"""

#: one file of each kind a state holds (a glob under state/)
KINDS = {
    "files.json": "files.json",
    "stratification.pkl": "stratification.pkl",
    "seal.json": "seal.json",
    "state.json": "sums/state.json",
    "dtypes.pkl": "sums/dtypes.pkl",
    "vocabulary pickle": "sums/feature-0.vocab.pkl",
    "run vocabulary pickle": "sums/feature-3.run-0.vocab.pkl",
    "leaf .npy": "sums/feature-1.run-0.part-0.leaf.npy",
    "key .npy": "sums/feature-1.run-0.part-0.key.npy",
    "counts .npy": "sums/feature-2.run-0.part-0.counts.npy",
    "sums .npy": "sums/feature-0.run-0.part-0.sums.npy",
    "summary .npz": "sums/feature-0.summary.npz",
}
DAMAGES = ("truncate", "random bytes", "delete", "wrong format", "missing keys")
#: what the reason says for each damage (the seal itself is read, not checksummed)
SAYS = {"truncate": ("is truncated",), "random bytes": ("was altered",), "delete": ("is missing",),
        "wrong format": ("was altered", "is truncated", "longer than recorded"),
        "missing keys": ("was altered", "is truncated", "longer than recorded")}
SEAL_SAYS = {"truncate": ("cannot be read",), "random bytes": ("cannot be read", "is not a daskpd state seal",
                                                                "lists no files", "another format"),
             "delete": ("is missing",), "wrong format": ("is not a daskpd state seal",),
             "missing keys": ("lists no files",)}
#: the real runs: every damage, and every kind of file, at least once
RUNS = [("sums .npy", "random bytes"), ("dtypes.pkl", "truncate"), ("vocabulary pickle", "truncate"),
        ("files.json", "missing keys"), ("stratification.pkl", "wrong format"), ("seal.json", "delete"),
        ("state.json", "missing keys"), ("leaf .npy", "delete"), ("key .npy", "wrong format"),
        ("counts .npy", "random bytes"), ("summary .npz", "missing keys"),
        ("run vocabulary pickle", "random bytes")]


def damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif how == "random bytes":  # the same size: a stretch in the middle overwritten
        n = min(64, max(1, len(data) // 4))
        mid = len(data) // 2
        path.write_bytes(data[:mid] + np.random.default_rng(1).bytes(n) + data[mid + n:])
    elif how == "delete":
        path.unlink()
    elif how == "wrong format":  # a valid file of another kind in its place
        if path.suffix == ".json":
            path.write_text(json.dumps({"format": "something-else", "version": 99}))
        elif path.suffix == ".pkl":
            path.write_bytes(pickle.dumps({"format": "something-else", "payload": [1, 2, 3]}))
        elif path.suffix == ".npy":
            np.save(path, np.arange(7, dtype=np.float32))
        else:
            with open(path, "wb") as fh:
                np.savez(fh, other=np.arange(3))
    else:  # missing keys: the same format, a key left out
        if path.suffix == ".json":
            d = json.loads(data)
            d.pop({"files.json": "files", "seal.json": "files", "state.json": "features"}[path.name])
            path.write_text(json.dumps(d))
        elif path.suffix == ".pkl":
            d = pickle.loads(data)
            if isinstance(d, dict):
                d.pop(next(iter(d)))
            path.write_bytes(pickle.dumps(d, protocol=4))
        elif path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files[1:]}
            with open(path, "wb") as fh:
                np.savez(fh, **arrays)
        else:  # a raw array has no keys: one row fewer
            np.save(path, np.load(path)[:-1])


@pytest.fixture(scope="module")
def base(dask_cluster, tmp_path_factory):
    """The pristine job directory after a full run keeping its state, the lake grown by
    a file since, and the results of a clean full run of the grown lake."""
    root = tmp_path_factory.mktemp("damage")
    lake = root / "lake"
    lake.mkdir()
    for i in range(3):
        GEN.chunk(i, 2000).to_parquet(lake / f"part-{i:03d}.parquet", index=False)
    spec = root / "job.toml"
    spec.write_text(SPEC.format(features=json.dumps(FEATURES), lake=lake))
    kw = dict(scheduler=dask_cluster, progress=False, out=False, log=False)
    r1 = run_job(spec, output=root / "pristine", run_id="r1", **kw)
    assert json.loads((r1 / "manifest.json").read_text())["incremental"]["mode"] == "full"
    for kind, rel in KINDS.items():
        assert (r1 / "state" / rel).is_file(), (kind, sorted(p.name for p in (r1 / "state" / "sums").iterdir()))
    GEN.chunk(10, 1000).to_parquet(lake / "part-010.parquet", index=False)
    clean = run_job(spec, output=root / "clean", run_id="clean", **kw)  # no earlier state: a full run
    return {"root": root, "spec": spec, "lake": lake, "pristine": root / "pristine" / "damage", "clean": clean,
            "kw": kw}


def job_copy(base, name: str) -> Path:
    """A fresh copy of the pristine job directory (files copied, not linked)."""
    dst = base["root"] / "copies" / name / "damage"
    shutil.rmtree(dst.parent, ignore_errors=True)
    shutil.copytree(base["pristine"], dst, symlinks=True)
    return dst


def plan_of(base, job_dir: Path):
    job = load_spec(base["spec"])
    request = inputs.open_job_request(job, str(base["lake"]))
    lake = request.dataset.lake
    stamps = inputs.file_stamps(str(base["lake"]), footers={f.path: f.digest for f in lake.files})
    return nightly.plan(job, job_dir, request, stamps)


def says(kind: str, how: str, reason: str) -> None:
    rel = "r1/state/" + KINDS[kind]
    assert rel in reason, reason
    want = SEAL_SAYS[how] if kind == "seal.json" else SAYS[how]
    assert any(w in reason for w in want), (want, reason)
    assert reason.startswith("the state of run r1 is damaged: ") and "\n" not in reason


def test_the_pristine_state_is_used(base):
    p = plan_of(base, job_copy(base, "pristine"))
    assert p.mode == "incremental" and p.new_files and p.state is not None, p.reason


@pytest.mark.parametrize("how", DAMAGES)
@pytest.mark.parametrize("kind", list(KINDS))
def test_every_damage_of_every_state_file_plans_a_full_run_naming_it(base, kind, how):
    job_dir = job_copy(base, "plan")
    damage(job_dir / "r1" / "state" / KINDS[kind], how)
    p = plan_of(base, job_dir)
    assert p.mode == "full" and p.state is None and p.stratification is None
    says(kind, how, p.reason)


def test_a_state_of_another_format_plans_a_full_run(base):
    job_dir = job_copy(base, "version")
    seal = job_dir / "r1" / "state" / "seal.json"
    d = json.loads(seal.read_text())
    d["scan_state_format"] = d["scan_state_format"] - 1  # a state written by another daskpd
    seal.write_text(json.dumps(d))
    p = plan_of(base, job_dir)
    assert p.mode == "full" and "r1/state/seal.json records a state of another format" in p.reason, p.reason
    d.pop("digest")  # a seal of the older layout: no checksum named
    seal.write_text(json.dumps(d))
    assert "another format" in plan_of(base, job_dir).reason


@pytest.mark.parametrize("written_by", ["an older daskpd", "its state.json alone"])
def test_a_state_of_another_format_gives_a_full_run_that_says_why(base, capsys, written_by):
    """The next night on a state of another format (``FORMAT_VERSION``): a full run, exit
    0, one line naming the file and the formats, no traceback, the clean full run's results.
    An older daskpd records its format in the seal and in ``sums/state.json``; a state whose
    seal agrees with this daskpd but whose ``state.json`` does not is refused when it is read."""
    job_dir = job_copy(base, f"format-{written_by}".replace(" ", "_"))
    sdir = job_dir / "r1" / "state"
    meta = json.loads((sdir / "sums" / "state.json").read_text())
    assert meta["format_version"] == FORMAT_VERSION
    meta["format_version"] = FORMAT_VERSION - 1
    (sdir / "sums" / "state.json").write_text(json.dumps(meta))
    record = seal(sdir)  # a seal of the edited files: not damaged, of another format
    if written_by == "an older daskpd":
        record["scan_state_format"] = FORMAT_VERSION - 1
        (sdir / "seal.json").write_text(json.dumps(record))
    capsys.readouterr()
    argv = ["run", str(base["spec"]), "--output", str(job_dir.parent), "--run-id", "r2", "--scheduler",
            base["kw"]["scheduler"], "--no-progress"]
    assert cli.main(argv) == 0
    out = capsys.readouterr()
    r2 = job_dir / "r2"
    m = json.loads((r2 / "manifest.json").read_text())
    reason = m["incremental"]["reason"]
    assert m["incremental"]["mode"] == "full" and m["stratification"]["refitted"] is True
    if written_by == "an older daskpd":
        assert reason.startswith("the state of run r1 cannot be read by this daskpd: r1/state/seal.json records a "
                                 f"state of another format (state format {record['version']}, scan state format "
                                 f"{FORMAT_VERSION - 1}, "), reason
    else:
        assert reason.startswith("the state of run r1 cannot be used: r1/state/sums: DataError: scan state "), reason
        assert f"(format {FORMAT_VERSION - 1}); this is daskpd" in reason and f"(format {FORMAT_VERSION})" in reason
    assert "\n" not in reason
    said = out.out + out.err
    assert [ln for ln in said.splitlines() if "r1/state" in ln] == [f"daskpd: full run: {reason}"], said
    assert "Traceback" not in said
    for got, want in zip(frames(r2), frames(base["clean"])):
        pd.testing.assert_frame_equal(got.drop(columns=["run_id"], errors="ignore"),
                                      want.drop(columns=["run_id"], errors="ignore"), check_exact=True)


def test_a_file_added_to_the_state_plans_a_full_run(base):
    job_dir = job_copy(base, "added")
    (job_dir / "r1" / "state" / "sums" / "feature-9.run-0.part-0.sums.npy").write_bytes(b"\x93NUMPY")
    p = plan_of(base, job_dir)
    assert p.mode == "full" and "feature-9.run-0.part-0.sums.npy is not in the seal" in p.reason, p.reason


def frames(run_dir: Path) -> tuple:
    return tuple(pd.read_parquet(run_dir / f) for f in ("curves.parquet", "importances.parquet"))


@pytest.mark.parametrize("kind,how", RUNS)
def test_a_damaged_state_gives_a_full_run_equal_to_a_clean_one(base, kind, how):
    job_dir = job_copy(base, f"run-{kind}-{how}".replace(" ", "_"))
    damage(job_dir / "r1" / "state" / KINDS[kind], how)
    log = io.StringIO()
    kw = {**base["kw"], "log": log}
    r2 = run_job(base["spec"], output=job_dir.parent, run_id="r2", **kw)
    m = json.loads((r2 / "manifest.json").read_text())
    assert m["incremental"]["mode"] == "full" and m["stratification"]["refitted"] is True
    says(kind, how, m["incremental"]["reason"])
    lines = [ln for ln in log.getvalue().splitlines() if "r1/state/" in ln]
    assert lines == [f"daskpd: full run: {m['incremental']['reason']}"], log.getvalue()
    assert "Traceback" not in log.getvalue()
    for got, want in zip(frames(r2), frames(base["clean"])):
        pd.testing.assert_frame_equal(got.drop(columns=["run_id"], errors="ignore"),
                                      want.drop(columns=["run_id"], errors="ignore"), check_exact=True)
    # the full run kept a whole new state, sealed: the next night is incremental again
    GEN_NEXT = GEN.chunk(20, 500)
    lake = base["lake"]
    extra = lake / "part-020.parquet"
    GEN_NEXT.to_parquet(extra, index=False)
    try:
        p = plan_of(base, job_dir)
        assert p.mode == "incremental" and p.base_run == "r2", p.reason
    finally:
        os.remove(extra)
