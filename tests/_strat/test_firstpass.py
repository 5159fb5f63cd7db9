"""Pass 1 cached per file (daskpd._strat.firstpass): a rerun reads only the files the
cache does not hold, and the sample, the trees, the curves and the importances equal a
run without the cache bit for bit -- on a first run (a file too big for its margin
bound is read again), a rerun, files appended, a file rewritten (its entry replaced)
and a file removed (its entry dropped); numeric and categorical features."""
from __future__ import annotations

import os
import warnings

import numpy as np
import pandas as pd
import pytest

import daskpd
from daskpd._data.lake import list_parquet_files
from daskpd._data.request import open_request
from daskpd._strat.firstpass import FirstPassCache, file_partial, merged_sample
from daskpd._engine.hashing import SampleJob, row_hash
from daskpd._strat.pipeline import run_strat

TARGET = "y"
LEVELS = np.array(["a", "b", "c", "d", "e", "f"])
K = 600  # the tree sample: fewer rows than the lake, so the bound and the cutoffs matter


def write(lake, i: int, n: int, seed: int | None = None) -> None:
    rng = np.random.default_rng(i if seed is None else seed)
    df = pd.DataFrame({"x1": rng.normal(size=n), "x2": rng.integers(0, 30, n).astype("int64"),
                       "c": LEVELS[rng.integers(0, len(LEVELS), n)]})
    df[TARGET] = df.x1 ** 2 + 0.5 * df.x2 + df.c.map(dict(zip(LEVELS, range(6)))).astype(float) \
        + rng.normal(scale=0.1, size=n)
    df.to_parquet(lake / f"part-{i:03d}.parquet", index=False)


def stamps(lake) -> dict:
    _, files = list_parquet_files(str(lake))
    return {p: (s, t) for p, s, t in files}


def run(lake, cache=None):
    req = open_request(str(lake), TARGET, None, categorical=["c"], stratify_on=None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return run_strat(req, sample_size=K, min_samples_leaf=10, min_samples_leaf_for={"c": 5},
                         keep_state=True, first_pass_cache=cache, warn_sample=False)


def assert_same(a, b) -> None:
    pd.testing.assert_frame_equal(a.sample, b.sample, check_exact=True)
    assert a.n_rows == b.n_rows
    assert a.stratification.id == b.stratification.id  # the sample, the trees and their parameters
    assert set(a.results) == set(b.results) == {"x1", "x2", "c"}
    for f in a.results:
        pd.testing.assert_frame_equal(a.results[f].to_frame(), b.results[f].to_frame(), check_exact=True)


def entries(cache_dir) -> int:
    return len([e for e in os.listdir(cache_dir) if e.endswith(".pkl")]) if os.path.isdir(cache_dir) else 0


def test_cached_first_pass_is_bit_identical_as_the_lake_changes(tmp_path):
    lake, cdir = tmp_path / "lake", tmp_path / "cache"
    lake.mkdir()
    for i, n in enumerate([400, 500, 600, 450]):
        write(lake, i, n)
    write(lake, 4, 9000)  # over 4x the mean file: its margin bound is below the sample's cutoff

    plain = run(lake)
    cache = FirstPassCache(cdir, stamps(lake))
    first = run(lake, cache)
    assert_same(plain, first)
    assert (cache.stats["hits"], cache.stats["misses"]) == (0, 5)
    assert [os.path.basename(p) for p in cache.stats["read_again"]] == ["part-004.parquet"]
    assert entries(cdir) == 5 and cache.stats["bytes"] > 0

    cache = FirstPassCache(cdir, stamps(lake))  # a rerun: every file from the cache, nothing read
    assert_same(plain, run(lake, cache))
    assert (cache.stats["hits"], cache.stats["misses"], cache.stats["read_again"]) == (5, 0, [])

    write(lake, 5, 700)  # appended: only these are read
    write(lake, 6, 300)
    cache = FirstPassCache(cdir, stamps(lake))
    assert_same(run(lake), run(lake, cache))
    assert (cache.stats["hits"], cache.stats["misses"]) == (7 - 2, 2)
    assert entries(cdir) == 7

    write(lake, 1, 520, seed=99)  # rewritten: its entry is replaced, not used
    cache = FirstPassCache(cdir, stamps(lake))
    assert_same(run(lake), run(lake, cache))
    assert (cache.stats["hits"], cache.stats["misses"]) == (6, 1)
    assert entries(cdir) == 7

    os.remove(lake / "part-004.parquet")  # removed: its entry is dropped
    cache = FirstPassCache(cdir, stamps(lake))
    assert_same(run(lake), run(lake, cache))
    assert (cache.stats["hits"], cache.stats["misses"]) == (6, 0)
    assert entries(cdir) == 6


def test_merge_names_the_files_whose_cutoff_is_too_low():
    """A file's partial keeps every row below its cutoff; the merge is the bottom k of all
    rows unless the k-th hash reaches a cutoff, and then names exactly those files."""
    rng = np.random.default_rng(0)
    frames = {f"f{i}": pd.DataFrame({"x": rng.normal(size=n), "y": rng.normal(size=n)})
              for i, n in enumerate([100] * 7 + [5000])}
    job = SampleJob(200, 0, {}, n_partitions=len(frames), margin=4)
    parts = {p: file_partial(df, job, "y").sample for p, df in frames.items()}
    for p, s in parts.items():  # every row below the cutoff is kept
        h = row_hash(frames[p], 0)
        assert s.n_rows == len(frames[p])
        if s.limit is not None:
            assert (h < s.limit).sum() == len(s.frame)
    merged, short = merged_sample(job, parts)
    assert short == ["f7"]
    full = SampleJob(200, 0, {}, margin=None)
    parts["f7"] = file_partial(frames["f7"], full, "y").sample
    merged, short = merged_sample(job, parts)
    assert short == []
    everything = pd.concat(frames.values(), ignore_index=True)
    expect = full.finish(full.map(type("C", (), {"df": everything})()))
    pd.testing.assert_frame_equal(job.finish(merged).frame, expect.frame, check_exact=True)


def test_cache_is_off_for_other_inputs(tmp_path):
    df = pd.DataFrame({"x1": np.arange(50.0), "x2": np.arange(50.0) % 7, TARGET: np.arange(50.0) % 5})
    cache = FirstPassCache(tmp_path / "c", {})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = daskpd.strat_curves_and_importances(df, target=TARGET, first_pass_cache=cache, progress=False)
    assert cache.stats["off"] == "the input is not a parquet lake" and not (tmp_path / "c").exists()
    assert len(out.to_frame()) == 2
