"""`daskpd history`'s drift against the noise of the two runs: the pointwise test on the
curves' bands, the statuses, the cause (data / refit), the JSON summary and the exit
status a scheduler branches on; and, on data with a known generator, the rates at which
a real change is flagged and an unchanged generator is not."""
from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd
import pytest

from daskpd import cli
from daskpd.job import history as hist
from daskpd.job.outputs import curves_frame, importances_frame
from daskpd.job.run import dump_json
from test_report_history import cat, fake_run, num


def numeric(x, y, std, count=100.0):
    return num(x, y).assign(pd_std=std, count=count, category=pd.array([None] * len(x), dtype="string"),
                            supported=True)


def categorical(cats, y, std, count=100.0):
    return cat(cats, y).assign(pd_std=std, count=count, x=np.nan, supported=True)


# ------------------------------------------------------------------ the test on the bands
def test_band_z_is_the_difference_over_the_two_runs_noise():
    x = np.arange(11.0)
    a = numeric(x, x, np.r_[0.0, np.full(10, 0.3)])  # 0 at its zero, as a band anchored there is
    step = np.where(x >= 8, 1.2, 0.0)
    b = numeric(x, x + step, np.r_[0.0, np.full(10, 0.4)])
    bz = hist.band_z(a, b)
    # the common positions but the anchor: |diff| / sqrt(0.3^2 + 0.4^2) = |diff| / 0.5
    assert bz["z"] == pytest.approx(np.abs(step[1:]) / 0.5)
    # the local move at each point is curve_max's measure (so drift_sig <= curve_max)
    assert bz["local"].max() <= hist.curve_distance(a, b)["curve_max"] + 1e-12
    # the overlap starts inside one curve: that curve's spread at the new anchor is added
    c = numeric(x + 0.5, x + 0.5, np.full(11, 0.4))
    bz = hist.band_z(a, c)
    assert len(bz["z"]) == 20 - 1  # both curves' positions in [0.5, 10], but the anchor
    assert bz["z"].max() < 1e-9  # the same line: no difference
    # categorical: re-anchored on the best-determined common category ("u": std 0 in both)
    p = categorical(["u", "v", "w"], [0.0, 1.0, 2.0], [0.0, 0.1, 0.2])
    q = categorical(["u", "v", "w", "new"], [0.0, 1.5, 2.0, 9.0], [0.0, 0.1, 0.2, 0.5])
    bz = hist.band_z(p, q)
    assert sorted(bz["z"]) == pytest.approx(sorted([0.5 / np.hypot(0.1, 0.1), 0.0]))
    # no band in one of them: no test
    assert hist.band_z(p, q.drop(columns="pd_std")) is None
    assert hist.band_z(p, q.assign(pd_std=np.nan)) is None
    # Bonferroni over m points, Student's t with the trials' degrees of freedom
    from scipy import stats

    assert hist.critical_z(10, 0.01) == pytest.approx(stats.norm.ppf(1 - 0.01 / 20))
    assert hist.critical_z(10, 0.01, 19) == pytest.approx(stats.t.ppf(1 - 0.01 / 20, 19))
    assert hist.critical_z(10, 0.01, 19) > hist.critical_z(10, 0.01) > hist.critical_z(1, 0.01)


def _pair(tmp_path, name, prev, cur, manifests=({}, {}), stds=None):
    job = tmp_path / name
    for rid, curves, extra in (("r1", prev, manifests[0]), ("r2", cur, manifests[1])):
        d = fake_run(job, rid, curves, {f: 1.0 for _, f in curves}, stds)
        (d / "manifest.json").write_text(dump_json({"job": name, "run_id": rid, **extra}))
    return job


def test_status_needs_a_change_beyond_the_noise_and_the_threshold(tmp_path):
    x = np.arange(21.0)
    y = np.sqrt(x)
    moved = y + np.where(x > 15, 0.2 * (x - 15), 0.0)  # the right end moves by 1.0, 20% of the range
    tiny = y + np.where(x > 15, 0.01 * (x - 15), 0.0)  # 1%: significant on huge data, not worth an alarm
    runs = {"moved_within_noise": (numeric(x, y, 1.0), numeric(x, moved, 1.0)),
            "moved_beyond_noise": (numeric(x, y, 0.01), numeric(x, moved, 0.01)),
            "tiny_but_significant": (numeric(x, y, 1e-4), numeric(x, tiny, 1e-4))}
    prev = {("stratpd", k): v[0] for k, v in runs.items()}
    cur = {("stratpd", k): v[1] for k, v in runs.items()}
    t = hist.history(_pair(tmp_path, "bands", prev, cur), output=False).latest_pair().set_index("feature")
    assert (t.noise_source == "band").all()
    assert t.loc["moved_within_noise", "drift"] > 0.1 and t.loc["moved_within_noise", "z"] < 1
    assert t.loc["moved_within_noise", "status"] == "ok" and t.loc["moved_within_noise", "drift_sig"] == 0
    assert t.loc["moved_beyond_noise", "status"] == "drifted"
    assert t.loc["moved_beyond_noise", "drift_sig"] == pytest.approx(t.loc["moved_beyond_noise", "curve_max"])
    assert t.loc["tiny_but_significant", "z"] > 10 * t.loc["tiny_but_significant", "z_crit"]
    assert t.loc["tiny_but_significant", "status"] == "ok"
    assert list(t.index)[0] == "moved_beyond_noise"  # drifted first, then by z
    # no noise estimate at all (no band, no counts, no trials): the raw drift is "noisy" above the threshold
    prev = {("stratpd", "raw"): num(x, y), ("stratpd", "still"): num(x, y)}
    cur = {("stratpd", "raw"): num(x, moved), ("stratpd", "still"): num(x, y)}
    job = _pair(tmp_path, "raw", prev, cur)
    t = hist.history(job, output=False).latest_pair().set_index("feature")
    assert dict(t.status) == {"raw": "noisy", "still": "ok"} and (t.noise_source == "none").all()
    assert cli.main(["history", str(job), "--fail-on-drift", "--no-write"]) == 0  # noisy is not drifted
    # the importance's trials, without bands: the drift against their relative spread
    job = _pair(tmp_path, "trials", prev, cur, stds={"raw": 0.01, "still": 0.01})
    t = hist.history(job, output=False).latest_pair().set_index("feature")
    assert t.loc["raw", "noise_source"] == "trials" and t.loc["raw", "status"] == "drifted"


def test_cause_separates_data_from_a_refitted_stratification(tmp_path):
    def man(sid, fp, **incr):
        m = {"input": {"fingerprint": {"sha256": fp}}}
        if sid is not None:
            m["stratification"] = {"id": sid, "refitted": True, "fitted_rows": 1000}
        if incr:
            m["incremental"] = incr
        return m

    assert hist.pair_cause(man("s1", "a"), man("s1", "b"), "stratpd") == "data"
    assert hist.pair_cause(man("s1", "a"), man("s2", "b"), "catstratpd") == "data+refit"
    assert hist.pair_cause(man("s1", "a"), man("s2", "a"), "stratpd") == "refit"
    assert hist.pair_cause(man("s1", "a"), man("s1", "a"), "stratpd") == "none"
    assert hist.pair_cause(man(None, "a"), man("s1", "b"), "stratpd") == "unknown"  # an older run
    assert hist.pair_cause({}, {}, "stratpd") == "unknown"
    assert hist.pair_cause(man("s1", "a"), man("s2", "b"), "partial_dependence") == "data"  # no trees in a model PD
    x = np.arange(11.0)
    curves = {("stratpd", "x"): numeric(x, x, 0.1)}
    job = _pair(tmp_path, "cause", curves, curves,
                (man("s1", "a"), man("s1", "b", mode="incremental", reason="2 new files", base_run="r1")))
    h = hist.history(job, output=False)
    assert list(h.table.cause) == ["data"]
    s = h.summary()
    assert s["incremental"]["mode"] == "incremental" and s["stratification"]["r2"]["id"] == "s1"


def test_fail_on_drift_and_the_json_summary(tmp_path, capsys):
    x = np.arange(21.0)
    y = np.sqrt(x)
    prev = {("stratpd", "a"): numeric(x, y, 0.01), ("stratpd", "b"): numeric(x, y, 0.01),
            ("catstratpd", "c"): categorical(["u", "v"], [0.0, 1.0], [0.0, 0.01])}
    cur = {("stratpd", "a"): numeric(x, y + np.where(x > 15, 0.2 * (x - 15), 0.0), 0.01),
           ("stratpd", "b"): numeric(x, y, 0.01), ("stratpd", "d"): numeric(x, y, 0.01)}
    job = _pair(tmp_path, "sched", prev, cur, ({"stratification": {"id": "s1"}}, {"stratification": {"id": "s2"}}))
    out = tmp_path / "summary.json"
    assert cli.main(["history", str(job), "--fail-on-drift", "--json", str(out)]) == 3
    assert f"wrote {out}" in capsys.readouterr().out
    s = json.loads(out.read_text())
    assert s["compared"] == ["r1", "r2"] and s["status"] == "drift" and s["threshold"] == 0.1
    assert s["counts"] == {"drifted": 1, "noisy": 0, "ok": 1, "n/a": 0, "new": 1, "gone": 1}
    (d,) = s["drifted"]
    assert (d["method"], d["feature"], d["cause"]) == ("stratpd", "a", "data+refit")
    assert d["z"] > d["z_crit"] and d["drift_sig"] > 0.1 and d["noise_source"] == "band"
    assert [c["feature"] for c in s["curves"]] == ["a", "b", "d", "c"]  # drifted, ok, new, gone
    assert json.loads((job / "history" / "drift.json").read_text()) == s  # written next to drift.parquet too
    assert not list(tmp_path.glob(".summary.json.tmp-*"))
    # printed, with nothing written
    assert cli.main(["history", str(job), "--json", "--no-write", "--threshold", "0.5", "--fail-on-drift"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["status"] == "no-drift" and s["drifted"] == [] and s["counts"]["ok"] == 2
    # bad arguments: one line, exit 2
    assert cli.main(["history", str(job), "--json", str(tmp_path / "nope" / "s.json")]) == 2
    assert cli.main(["history", str(job), "--alpha", "1.5"]) == 2
    err = capsys.readouterr().err.strip().split("\n")
    assert "--json" in err[0] and "existing directory" in err[0] and "--alpha must be between 0 and 1" in err[1]


# ------------------------------------------------------------------ known generator, many seeds
EFFECTS = np.array([0.0, 1.0, 3.0, 2.5])
#: rows, trials, seed pairs of the statistical test; the change of x2's coefficient above x2 = 0.5
N, TRIALS, PAIRS, CHANGE = 2000, 20, 15, 2.0


def shifted_data(seed: int, n: int, change: float = 0.0) -> pd.DataFrame:
    """``y = 0.5 x1^2 + 4 x2 + change * max(x2 - 0.5, 0) + effect[c] + N(0, 1)``, x1 and x2
    discrete (the tree separates them exactly, so the band holds the curve's noise)."""
    rng = np.random.default_rng(seed)
    x1 = rng.integers(0, 11, n).astype(float)
    x2 = rng.integers(0, 5, n) / 4
    c = rng.integers(0, 4, n)
    y = 0.5 * x1 ** 2 + 4 * x2 + change * np.maximum(x2 - 0.5, 0.0) + EFFECTS[c] + rng.normal(0, 1, n)
    return pd.DataFrame({"x1": x1, "x2": x2, "c": c.astype(str), "y": y})


def in_memory_run(seed: int, change: float = 0.0) -> hist.Run:
    """A run's tables as a job writes them (the job's own writers), from the in-memory API."""
    import daskpd

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = daskpd.strat_curves_and_importances(shifted_data(seed, N, change), target="y", features=["x2"],
                                                  stratify_on=["x1", "x2", "c"], categorical_features=["c"],
                                                  n_trials=TRIALS, random_state=seed, progress=False)
    curves = curves_frame({("stratpd", f): r for f, r in res.curves.items()})
    man = {"spec": {"params": {"importances": {"n_trials": TRIALS}}}}
    return hist.Run(f"seed{seed}", None, man, curves, importances_frame({"importances": res}))


def test_a_known_shift_is_flagged_and_a_new_sample_is_not():
    """15 seed pairs: (seed 2i, seed 2i+1) from the same generator, and (seed 2i, seed 2i+1
    with x2's coefficient 4 -> 6 above x2 = 0.5).  Under no change a curve is flagged with
    probability at most alpha = 0.01 when its band is exact (less with the threshold), so
    3 or more false alarms of 15 has probability 0.0004 (binomial).  bench_drift.py
    flagged the change in 100 of 100 pairs (a rate of at least 0.97 at 95% confidence):
    11 or fewer detections of 15 has probability 0.0008 at 0.97."""
    false_alarms = detections = 0
    zs = []
    for i in range(PAIRS):
        a, b, changed = in_memory_run(2 * i), in_memory_run(2 * i + 1), in_memory_run(2 * i + 1, CHANGE)
        assert {"pd_std", "pd_lo", "pd_hi"} <= set(a.curves.columns)  # the job's curve table carries the band
        null = hist.compare(a, b).set_index("feature").loc["x2"]
        moved = hist.compare(a, changed).set_index("feature").loc["x2"]
        assert null.noise_source == moved.noise_source == "band"
        false_alarms += null.status == "drifted"
        detections += moved.status == "drifted"
        zs.append((null.z, moved.z))
    assert false_alarms <= 2, zs
    assert detections >= 12, zs


def test_centre_takes_each_groups_median_off_as_a_loop_of_nanmedian_does():
    """drift._centre (all groups at once) against a plain loop over the groups with
    np.nanmedian: the same bits, NaN and inf included, 1-D and trials x points."""
    import warnings

    from daskpd.job.drift import _centre

    def reference(v, group):
        out = np.array(v, dtype="float64", copy=True)
        for g in np.unique(group):
            k = group == g
            with warnings.catch_warnings(), np.errstate(invalid="ignore"):
                warnings.simplefilter("ignore", RuntimeWarning)
                out[..., k] -= np.nanmedian(out[..., k], axis=-1, keepdims=True)
        return out

    rng = np.random.default_rng(3)
    for case in range(60):
        P = int(rng.integers(1, 200))
        shape = (P,) if case % 3 == 0 else (int(rng.integers(1, 40)), P)
        v = rng.normal(size=shape)
        v[rng.uniform(size=shape) < 0.2] = np.nan
        if case % 5 == 0:
            v[..., 0] = np.inf
        group = rng.integers(0, max(1, P // 3), P)
        assert np.array_equal(_centre(v, group), reference(v, group), equal_nan=True), case
