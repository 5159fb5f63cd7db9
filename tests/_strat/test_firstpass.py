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
from daskpd._data.lake_footers import list_parquet_files
from daskpd._data.options import ReadOptions
from daskpd._data.request import open_request
from daskpd._strat.firstpass_cache import FirstPassCache
from daskpd._strat.firstpass_partial import file_partial, merged_sample
from daskpd._engine.hashing import sample_hash
from daskpd._engine.sample_pass import SampleJob
from daskpd._strat.options import KeepState, Reuse, StateMode, TreeOptions
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
    req = open_request(str(lake), TARGET, None, read=ReadOptions(categorical=["c"]), stratify_on=None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return run_strat(req, trees=TreeOptions(sample_size=K, min_samples_leaf=10, min_samples_leaf_for={"c": 5}),
                         keep_state=KeepState(StateMode.MEMORY), reuse=Reuse(first_pass_cache=cache),
                         warn_sample=False)


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
    write(lake, 4, 20000)  # far over 4x the mean file: its margin bound is below the sample's cutoff

    plain = run(lake)
    cache = FirstPassCache(cdir)  # the files' size and modification time, listed by each run
    first = run(lake, cache)
    assert_same(plain, first)
    assert (cache.stats["hits"], cache.stats["misses"]) == (0, 5)
    assert [os.path.basename(p) for p in cache.stats["read_again"]] == ["part-004.parquet"]
    assert entries(cdir) == 5 and cache.stats["bytes"] > 0

    assert_same(plain, run(lake, cache))  # a rerun: every file from the cache, nothing read
    assert (cache.stats["hits"], cache.stats["misses"], cache.stats["read_again"]) == (5, 0, [])

    write(lake, 5, 700)  # appended: only these are read
    write(lake, 6, 300)
    assert_same(run(lake), run(lake, cache))
    assert (cache.stats["hits"], cache.stats["misses"]) == (7 - 2, 2)
    assert entries(cdir) == 7

    write(lake, 1, 520, seed=99)  # rewritten: its entry is replaced, not used
    assert_same(run(lake), run(lake, cache))
    assert (cache.stats["hits"], cache.stats["misses"]) == (6, 1)
    assert entries(cdir) == 7

    os.remove(lake / "part-004.parquet")  # removed: its entry is dropped
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
        h = sample_hash(frames[p], 0)
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
    df = pd.DataFrame({"x1": np.arange(400.0) % 20, "x2": np.arange(400.0) % 7, TARGET: np.arange(400.0) % 5})
    cache = FirstPassCache(tmp_path / "c", {})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = daskpd.strat_curves_and_importances(df, target=TARGET, first_pass_cache=cache, progress=False)
    assert cache.stats["off"] == "the input is not a parquet lake" and not (tmp_path / "c").exists()
    assert len(out.to_frame()) == 2


def pass_one_both_ways(lake, cdir, features, caps, k=200):
    """(cache, pass 1 with the cache), after checking it against the unbounded bottom k
    and the distinct values of every row read."""
    from daskpd._strat.firstpass import cached_first_pass

    req = open_request(str(lake), TARGET, features, stratify_on=None)
    ddf = req.project()
    cache = FirstPassCache(cdir, stamps(lake))
    got = cached_first_pass(req, ddf, cache, k, 0, caps, TARGET)
    job = SampleJob(k, 0, caps, margin=None)
    want = job.finish(job.map(type("C", (), {"df": ddf.compute()})()))
    pd.testing.assert_frame_equal(got.sample.frame, want.frame, check_exact=True)
    assert got.sample.n_rows == want.n_rows
    for c in caps:
        assert (got.sample.distinct[c] is None) == (want.distinct[c] is None), c
        if want.distinct[c] is not None:
            np.testing.assert_array_equal(got.sample.distinct[c], want.distinct[c])
    return cache, got


def test_values_past_the_cap_are_left_out_of_the_entries_while_the_union_overflows(tmp_path):
    """A feature whose values over the lake exceed the cap: the entries leave them out
    (the cache stays the size of the sample), and the union is known to overflow while
    the files that showed it are there; when one of them leaves, the entries are read
    again and the values are exact once more."""
    from daskpd._strat.firstpass import DROPPED

    lake, cdir = tmp_path / "lake", tmp_path / "cache"
    lake.mkdir()
    for i in range(3):  # z: 40 values of its own per file; with a cap of 50, two files overflow
        n = 300
        pd.DataFrame({"z": (40 * i + np.arange(n) % 40).astype("int64"), "w": np.arange(n) % 7,
                      TARGET: np.sin(np.arange(n) + i)}).to_parquet(lake / f"part-{i}.parquet", index=False)
    caps = {"z": 50, "w": 50}

    def both():
        return pass_one_both_ways(lake, cdir, ["z", "w"], caps)

    cache, got = both()
    assert got.sample.distinct["z"] is None and len(got.sample.distinct["w"]) == 7
    kept = [entry(p) for p in cdir.glob("*.pkl")]
    assert len(kept) == 3 and all(e["partial"].sample.distinct["z"] == DROPPED for e in kept)
    cache, got = both()  # a rerun: the union still overflows, every entry is used
    assert (cache.stats["hits"], cache.stats["misses"]) == (3, 0)
    os.remove(lake / "part-2.parquet")
    os.remove(lake / "part-1.parquet")  # 40 values of z are left: the entries are read again
    cache, got = both()
    assert (cache.stats["hits"], cache.stats["misses"]) == (0, 1)
    assert len(got.sample.distinct["z"]) == 40


def test_a_new_hive_directory_reads_only_its_files(tmp_path):
    """A hive key is a categorical over every value of the key in the lake: a new
    directory changes every row's dtype, and the kept rows take the new categories."""
    lake, cdir = tmp_path / "lake", tmp_path / "cache"
    for i in range(4):
        (lake / f"day={i % 2}").mkdir(parents=True, exist_ok=True)
        write(lake / f"day={i % 2}", i, 300)
    pass_one_both_ways(lake, cdir, ["x1", "c", "day"], {"c": 50})
    (lake / "day=5").mkdir()
    write(lake / "day=5", 9, 300)
    cache, got = pass_one_both_ways(lake, cdir, ["x1", "c", "day"], {"c": 50})
    assert (cache.stats["hits"], cache.stats["misses"]) == (4, 1)
    assert list(got.sample.frame["day"].cat.categories) == [0, 1, 5]


def test_entries_of_appended_files_alone_are_those_of_a_pass_over_the_lake(tmp_path):
    """``cache_files`` (an incremental run under kept trees) keeps pass 1 of the new
    files alone, under the lake's key, leaving out the values the witness shows past the
    cap: the next pass over the lake reads no file, and equals the unbounded pass."""
    from daskpd._strat.firstpass import DROPPED, cache_files

    lake, cdir = tmp_path / "lake", tmp_path / "cache"
    lake.mkdir()

    def add(i):
        n = 300
        pd.DataFrame({"z": (40 * i + np.arange(n) % 40).astype("int64"), "w": np.arange(n) % 7,
                      TARGET: np.sin(np.arange(n) + i)}).to_parquet(lake / f"part-{i}.parquet", index=False)

    for i in range(3):
        add(i)
    caps = {"z": 50, "w": 50}
    pass_one_both_ways(lake, cdir, ["z", "w"], caps)
    add(3)
    add(4)
    req = open_request(str(lake), TARGET, ["z", "w"], stratify_on=None)
    cache = FirstPassCache(cdir, stamps(lake))
    new = [str(lake / "part-3.parquet"), str(lake / "part-4.parquet")]
    assert cache_files(req, req.project(), cache, new, 200, 0, caps, TARGET)
    assert (cache.stats["hits"], cache.stats["misses"]) == (0, 2) and entries(cdir) == 5
    kept = {e["path"]: e["partial"] for e in map(entry, cdir.glob("*.pkl"))}
    assert all(kept[p].sample.distinct["z"] == DROPPED for p in new)  # the union overflows: left out
    assert cache_files(req, req.project(), cache, new, 200, 0, caps, TARGET)  # already kept: nothing read
    assert (cache.stats["hits"], cache.stats["misses"]) == (2, 0)
    cache, got = pass_one_both_ways(lake, cdir, ["z", "w"], caps)  # bit for bit the unbounded pass
    assert (cache.stats["hits"], cache.stats["misses"], cache.stats["read_again"]) == (5, 0, [])


def entry(path) -> dict:
    """A cache entry's content (behind its checksum header)."""
    import pickle

    return pickle.loads(path.read_bytes().split(b"\n", 1)[1])


def rewrite_in_place(path, df) -> None:
    """``df`` written over ``path`` with the same size (uncompressed, fixed-width columns)
    and the old modification time restored: only the footer's bytes (its statistics)
    and the inode's change time tell the new file from the old."""
    st = os.stat(path)
    tmp = path.with_suffix(".new")
    df.to_parquet(tmp, index=False, compression=None)
    assert os.path.getsize(tmp) == st.st_size
    with open(path, "r+b") as fh:  # in place: the same inode
        fh.write(tmp.read_bytes())
    os.remove(tmp)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(path).st_mtime_ns == st.st_mtime_ns and os.path.getsize(path) == st.st_size


def test_a_same_size_rewrite_with_its_mtime_restored_is_not_served_from_the_cache(tmp_path):
    lake, cdir = tmp_path / "lake", tmp_path / "cache"
    lake.mkdir()
    rng = np.random.default_rng(3)
    frames = []
    for i in range(3):
        df = pd.DataFrame({"x1": rng.normal(size=500), "x2": rng.normal(size=500)})
        df[TARGET] = df.x1 ** 2 + df.x2
        df.to_parquet(lake / f"part-{i}.parquet", index=False, compression=None)
        frames.append(df)

    def go(cache=None):
        req = open_request(str(lake), TARGET, None, stratify_on=None)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return run_strat(req, trees=TreeOptions(sample_size=K, min_samples_leaf=10),
                             reuse=Reuse(first_pass_cache=cache), warn_sample=False)

    cache = FirstPassCache(cdir)
    go(cache)
    assert (cache.stats["hits"], cache.stats["misses"]) == (0, 3)
    changed = frames[1].assign(**{TARGET: frames[1][TARGET] * 3 + 1})  # other values, the same bytes a row
    rewrite_in_place(lake / "part-1.parquet", changed)
    got = go(cache)
    assert (cache.stats["hits"], cache.stats["misses"]) == (2, 1)  # the rewritten file was read again
    want = go()
    for f in ("x1", "x2"):
        pd.testing.assert_frame_equal(got.results[f].to_frame(), want.results[f].to_frame(), check_exact=True)


@pytest.mark.parametrize("damage", ["truncate", "random bytes", "foreign format", "old format", "empty"])
def test_a_damaged_entry_is_read_again_and_named(tmp_path, damage):
    lake, cdir = tmp_path / "lake", tmp_path / "cache"
    lake.mkdir()
    for i, n in enumerate([400, 500, 600]):
        write(lake, i, n)
    plain = run(lake)
    cache = FirstPassCache(cdir)
    run(lake, cache)
    victim = sorted(cdir.glob("*.pkl"))[1]
    data = victim.read_bytes()
    if damage == "truncate":
        victim.write_bytes(data[: len(data) // 2])
    elif damage == "random bytes":  # the same size, a stretch of the pickle replaced
        mid = len(data) // 2
        victim.write_bytes(data[:mid] + os.urandom(64) + data[mid + 64:])
    elif damage == "foreign format":
        victim.write_bytes(b"PK\x03\x04 not an entry at all")
    elif damage == "old format":  # an entry of the layout without a checksum header
        import pickle

        victim.write_bytes(pickle.dumps({"format": 1, "path": "x", "partial": entry(victim)["partial"]}))
    else:
        victim.write_bytes(b"")
    got = run(lake, cache)
    assert_same(plain, got)  # never the damaged entry's pass 1
    assert (cache.stats["hits"], cache.stats["misses"]) == (2, 1)
    assert [n for n, _ in cache.stats["unusable"]] == [victim.name]
    assert entry(victim)["partial"] is not None  # written again, whole
    run(lake, cache)
    assert (cache.stats["hits"], cache.stats["misses"], cache.stats["unusable"]) == (3, 0, [])
