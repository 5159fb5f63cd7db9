"""``daskpd history --against RUN_ID`` and ``--window N`` on a real nightly job: the
newest run's merged curves against a pinned run's.  A change planted in the appended
rows moves the merged curve by only their share of the rows, and the night after it
(no new file) the consecutive comparison sees nothing; against the run before the
change the accumulated move is flagged, on the changed feature only, and
``--fail-on-drift`` exits 3 on it.  Without a change nothing is flagged; a run id that
is not an earlier complete run, or a window beyond the runs, is refused in one line
naming the option and what it expects."""
from __future__ import annotations

import json

import pytest

from daskpd import cli
from daskpd.job.history import HistoryError, history
from daskpd.job.run import run_job
from test_job_newold import chunk, setup


@pytest.fixture(scope="module")
def nights(dask_cluster, tmp_path_factory):
    """r1: 20,000 rows; r2: 20,000 more from the same generator; r3: 20,000 more whose
    x2 curve is 3.0 higher at x2 = 1 (the merged curve moves by a third of that, a
    quarter of x2's range of 4); r4: no new file."""
    tmp_path = tmp_path_factory.mktemp("against")
    lake, spec = setup(tmp_path, "never", "[importances]\nn_trials = 10")  # every curve with its band
    out = tmp_path / "out"

    def run(rid):
        run_job(spec, scheduler=dask_cluster, output=out, run_id=rid, progress=False, out=False, log=False)

    run("r1")
    for i in range(4):
        chunk(20 + i, 5000).to_parquet(lake / f"q{i:03d}.parquet", index=False)
    run("r2")
    for i in range(4):
        chunk(30 + i, 5000, x2_step=3.0).to_parquet(lake / f"s{i:03d}.parquet", index=False)
    run("r3")
    run("r4")
    return out / "n"


def statuses(table):
    return dict(zip(table["feature"], table["status"]))


def test_against_flags_the_accumulated_change_on_the_changed_feature(nights, capsys):
    h = history(nights, output=None)
    assert [r.run_id for r in h.runs] == ["r1", "r2", "r3", "r4"]
    # the night after the change: the last two runs hold the same rows, and there is no new row to test (the
    # run that reuses r3's results does not carry r3's new-against-old comparison as its own)
    m4 = json.loads((nights / "r4" / "manifest.json").read_text())
    assert m4["reused_from"] == "r3" and m4["drift"][0]["skipped"] == "no file appended since run r3"
    assert not (nights / "r4" / "drift").exists() and not any(f.startswith("drift/") for f in m4["files"])
    assert set(h.latest_pair()["status"]) == {"ok"}
    assert h.summary()["new_vs_old"]["status"] == "not-compared" and not h.drifted()
    assert cli.main(["history", str(nights), "--fail-on-drift", "--no-write"]) == 0
    capsys.readouterr()

    h = history(nights, output=None, against="r1")
    assert h.pinned.run_id == "r1"
    got = statuses(h.against)
    assert got == {"x1": "ok", "x2": "drifted", "c": "ok"}, h.against[["feature", "z", "z_crit", "drift_sig"]]
    x2 = h.against.set_index("feature").loc["x2"]
    assert x2.noise_source == "band" and x2.z > x2.z_crit and x2.drift_sig > 0.1
    assert h.drifted()
    s = h.summary()["against"]
    assert s["run_id"] == "r1" and [d["feature"] for d in s["drifted"]] == ["x2"]
    assert s["counts"]["drifted"] == 1 and s["counts"]["ok"] == 2

    assert cli.main(["history", str(nights), "--against", "r1", "--fail-on-drift", "--no-write"]) == 3
    printed = capsys.readouterr().out
    assert "r1 -> r4 (against run r1, from --against r1: the curves of the two runs)" in printed
    # without --fail-on-drift the drift is reported, not an exit status
    assert cli.main(["history", str(nights), "--against", "r1", "--json", "--no-write"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["status"] == "drift" and s["against"]["run_id"] == "r1"
    # the page shows the table against the pinned run
    assert cli.main(["history", str(nights), "--against", "r1"]) == 0
    page = (nights / "history" / "history.html").read_text()
    assert "Against run r1 (from --against r1)" in page


def test_window_picks_the_run_n_runs_before_the_newest(nights, capsys):
    h = history(nights, output=None, window=2)  # r2: before the change
    assert h.pinned.run_id == "r2" and statuses(h.against)["x2"] == "drifted"
    assert cli.main(["history", str(nights), "--window", "3", "--fail-on-drift", "--no-write"]) == 3
    capsys.readouterr()
    h = history(nights, output=None, window=1)  # r3: the same rows as r4
    assert h.pinned.run_id == "r3" and set(h.against["status"]) == {"ok"} and not h.drifted()
    assert cli.main(["history", str(nights), "--window", "1", "--fail-on-drift", "--no-write"]) == 0


def test_against_a_run_of_the_same_generator_does_not_flag(nights, capsys):
    """r2 (40,000 rows) against r1 (its first 20,000): the same generator, twice the rows."""
    import shutil

    job = nights.parent / "same"
    job.mkdir()
    for rid in ("r1", "r2"):
        shutil.copytree(nights / rid, job / rid, symlinks=True)
    h = history(job, output=None, against="r1")
    assert h.pinned.run_id == "r1" and (h.against["drift"] > 0).all()  # two different curves of each feature
    assert set(h.against["status"]) == {"ok"}, h.against[["feature", "z", "z_crit", "drift", "drift_sig"]]
    assert (h.against["noise_source"] == "band").all()
    assert cli.main(["history", str(job), "--against", "r1", "--fail-on-drift", "--no-write"]) == 0


@pytest.mark.parametrize("args,message", [
    (["--against", "r9"], "--against 'r9': not a complete run before the newest one (r4); runs: r1, r2, r3, r4"),
    (["--against", "r4"], "--against 'r4': not a complete run before the newest one (r4)"),
    (["--window", "4"], "--window 4: the job has 4 complete run(s), so at most --window 3"),
    (["--window", "0"], "--window must be >= 1; got 0"),
    (["--window", "-2"], "--window must be >= 1; got -2"),
    (["--window", "1", "--against", "r1"], "--against and --window: give one or the other"),
])
def test_a_bad_run_id_or_window_is_one_line_naming_the_option(nights, capsys, args, message):
    assert cli.main(["history", str(nights), "--fail-on-drift", "--no-write", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("daskpd: error: ") and message in err


def test_window_not_an_integer_is_refused_by_the_parser(nights, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["history", str(nights), "--window", "two"])
    assert e.value.code == 2 and "--window: invalid int value: 'two'" in capsys.readouterr().err


@pytest.mark.parametrize("kwargs,message", [
    ({"against": "r9"}, "--against 'r9': not a complete run before the newest one"),
    ({"window": 4}, "--window 4: the job has 4 complete run(s), so at most --window 3"),
    ({"window": 0}, "--window 0: expected an integer >= 1"),
    ({"window": -1}, "--window -1: expected an integer >= 1"),
    ({"window": 1.5}, "--window 1.5: expected an integer >= 1"),
    ({"window": True}, "--window True: expected an integer >= 1"),
    ({"against": "r1", "window": 1}, "--against and --window: give one or the other"),
])
def test_the_python_entry_checks_them_too(nights, kwargs, message):
    with pytest.raises(HistoryError) as e:
        history(nights, output=None, **kwargs)
    assert message in str(e.value)


def fifth_run(nights, dask_cluster, tmp_path, history_table: str):
    """``(job dir, spec path, spec text)``: a copy of the four nights' runs under
    ``tmp_path/out/n`` and a fifth run, r5, of the same job with ``history_table`` added
    to its spec (the text is the spec without it)."""
    import shutil

    root = tmp_path / "out"
    job = root / "n"
    job.mkdir(parents=True)
    for rid in ("r1", "r2", "r3", "r4"):
        shutil.copytree(nights / rid, job / rid, symlinks=True)
    text = (nights.parent.parent / "job.toml").read_text().replace("[output]\n", f'[output]\ndir = "{root}"\n')
    spec = tmp_path / "job.toml"
    spec.write_text(text + history_table)
    run_job(spec, scheduler=dask_cluster, run_id="r5", progress=False, out=False, log=False)
    return job, spec, text


def test_the_job_specs_baseline_is_the_default_and_the_flags_win(nights, dask_cluster, tmp_path, capsys):
    """The job spec's ``[history] baseline`` pins the run ``history`` compares the newest
    one with when neither ``--against`` nor ``--window`` is given: the spec the newest run
    recorded (given the job directory), or the spec file given instead; the output names
    where the pinned run came from; a flag wins; a baseline that is not a run is a note."""
    job, spec, text = fifth_run(nights, dask_cluster, tmp_path, '\n[history]\nbaseline = "r1"\n')

    h = history(job, output=None)  # r5's manifest holds the spec
    assert h.pinned.run_id == "r1" and h.pinned_by == "[history] baseline = 'r1' in the job spec"
    assert statuses(h.against)["x2"] == "drifted" and h.drifted()
    assert history(job, output=None, use_spec=False).pinned is None
    assert cli.main(["history", str(job), "--fail-on-drift", "--no-write"]) == 3
    assert ("r1 -> r5 (against run r1, from [history] baseline = 'r1' in the job spec: the curves of the two runs)"
            in capsys.readouterr().out)
    assert cli.main(["history", str(spec), "--json", "--no-write"]) == 0  # the spec file, for the same job
    s = json.loads(capsys.readouterr().out)
    assert s["against"]["run_id"] == "r1" and s["against"]["by"] == "[history] baseline = 'r1' in the job spec"
    assert s["status"] == "drift"
    # a flag wins: r4 holds the same rows as r5
    assert cli.main(["history", str(spec), "--window", "1", "--fail-on-drift", "--no-write"]) == 0
    assert "r4 -> r5 (against run r4, from --window 1:" in capsys.readouterr().out
    # a baseline that is not a run before the newest: said, not compared, not an error
    gone = tmp_path / "gone.toml"
    gone.write_text(text + '\n[history]\nbaseline = "r0"\n')
    assert cli.main(["history", str(gone), "--fail-on-drift", "--no-write"]) == 0
    printed = capsys.readouterr().out
    assert ("no pinned run: [history] baseline = 'r0' in the job spec: not a complete run before the newest one "
            "(r5)") in printed
    from daskpd.job.history import job_of_spec

    win = tmp_path / "win.toml"
    win.write_text(text + "\n[history]\nwindow = 3\n")
    h = history(job_of_spec(win)[0], output=None, spec=job_of_spec(win)[1])
    assert h.pinned.run_id == "r2" and h.pinned_by == "[history] window = 3 in the job spec"


def test_the_job_specs_threshold_and_alpha_are_the_defaults_and_the_flags_win(nights, dask_cluster, tmp_path,
                                                                                capsys):
    """``[history] threshold`` and ``alpha`` are what ``history`` tests with when
    ``--threshold`` / ``--alpha`` are not given (the spec the newest run recorded, or the
    spec file given instead); the output says they came from the spec; a flag wins."""
    # x2 moved by far more than 0.1 of its scale against r1, but not by 50 times its scale
    job, spec, _ = fifth_run(nights, dask_cluster, tmp_path,
                             '\n[history]\nbaseline = "r1"\nthreshold = 50.0\nalpha = 0.001\n')

    h = history(job, output=None)  # r5's manifest holds the spec
    assert (h.threshold, h.alpha) == (50.0, 0.001)
    assert h.levels_by == "[history] threshold = 50 and alpha = 0.001 in the job spec"
    assert statuses(h.against)["x2"] == "ok" and not h.drifted()
    assert cli.main(["history", str(job), "--fail-on-drift", "--no-write"]) == 0
    assert "level 0.001 per curve; from [history] threshold = 50 and alpha = 0.001 in the job spec" in \
        capsys.readouterr().out
    assert cli.main(["history", str(spec), "--json", "--no-write"]) == 0  # the spec file, for the same job
    s = json.loads(capsys.readouterr().out)
    assert (s["threshold"], s["alpha"], s["status"]) == (50.0, 0.001, "no-drift")
    assert s["levels_by"] == "[history] threshold = 50 and alpha = 0.001 in the job spec"
    # a flag wins, and the other level still comes from the spec
    h = history(job, output=None, threshold=0.1)
    assert (h.threshold, h.alpha) == (0.1, 0.001) and h.levels_by == "[history] alpha = 0.001 in the job spec"
    assert statuses(h.against)["x2"] == "drifted"
    assert cli.main(["history", str(job), "--threshold", "0.1", "--fail-on-drift", "--no-write"]) == 3
    capsys.readouterr()
    # without the spec: the defaults
    h = history(job, output=None, use_spec=False)
    assert (h.threshold, h.alpha, h.levels_by) == (0.1, 0.01, "")
