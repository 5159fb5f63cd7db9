"""report.html (self-contained, escaped, rendered by a real browser) and `daskpd history`."""
from __future__ import annotations

import base64
import io
import json
import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from daskpd import cli
from daskpd.datasets import Quadratic
from daskpd.job import history as hist
from daskpd.job.run import dump_json, run_job
from test_job_run import REPO, make_lake

EVIL = "x<1>&\"'"  # a column name that must be escaped everywhere


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.imgs, self.refs, self.text = [], [], [], []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append(tag)
        if tag == "img":
            self.imgs.append(a)
        for k in ("src", "href"):
            if k in a and tag != "img":
                self.refs.append(a[k])

    def handle_data(self, data):
        self.text.append(data)


def parse(path: Path) -> _Collect:
    p = _Collect()
    p.feed(path.read_text(encoding="utf-8"))
    p.close()
    return p


def check_embedded_pngs(imgs) -> list[np.ndarray]:
    import matplotlib.image as mpimg

    out = []
    for a in imgs:
        src = a["src"]
        assert src.startswith("data:image/png;base64,"), src[:60]
        data = base64.b64decode(src.split(",", 1)[1], validate=True)
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        img = mpimg.imread(io.BytesIO(data), format="png")
        assert img.shape[0] > 100 and img.shape[1] > 100
        assert np.std(img[..., :3]) > 0.02  # not a blank image
        assert a.get("alt")
        out.append(img)
    return out


@pytest.fixture(scope="module")
def report_run(dask_cluster, tmp_path_factory):
    d = tmp_path_factory.mktemp("report")
    df = Quadratic(random_state=5).frame(6000).rename(columns={"x1": EVIL})
    df["grp"] = np.where(df["x3"] > 0.5, "<hi>", "lo&w")
    df.to_parquet(d / "data.parquet")
    (d / "job.toml").write_text("""
name = "report-test"
description = "<script>alert('no')</script> & friends"
target = "y"
sample_size = 5000
[source]
path = "data.parquet"
[stratpd]
max_bins = 100
""")
    return run_job(d / "job.toml", scheduler=dask_cluster, output=d / "out", run_id="r1", progress=False, out=False,
                   log=False)


@pytest.mark.cluster
def test_report_is_self_contained_and_escaped(report_run):
    path = report_run / "report.html"
    html = path.read_text(encoding="utf-8")
    p = parse(path)
    assert p.tags[:1] == ["html"] and "body" in p.tags
    assert "script" not in p.tags and "link" not in p.tags and "iframe" not in p.tags
    assert all(r.startswith("#") for r in p.refs), p.refs  # only in-page anchors: readable offline
    manifest = json.loads((report_run / "manifest.json").read_text())
    n_plots = len(manifest["plots"])
    assert n_plots == 1 + 4  # the importance chart and every curve (x1.., x2, x3: StratPD; grp: CatStratPD)
    assert len(p.imgs) == n_plots and len(list((report_run / "plots").glob("*.png"))) == n_plots
    check_embedded_pngs(p.imgs)
    # every text from the job is escaped
    assert "<script>alert" not in html and "&lt;script&gt;alert(&#x27;no&#x27;)&lt;/script&gt;" in html
    assert EVIL not in html and "x&lt;1&gt;&amp;&quot;&#x27;" in html
    assert "<hi>" not in html
    text = "".join(p.text)
    assert f"StratPD: {EVIL}" in text and "CatStratPD: grp" in text  # ...and reads back as the original
    for f in ("x2", "x3", "grp"):
        assert f in text
    assert "rows read" in text and "6,000" in text
    # the plot of the evil feature got a safe file name
    assert (report_run / "plots" / "stratpd-x_1.png").is_file()


def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        exe = shutil.which(name)
        if exe:
            return exe
    return None


@pytest.mark.cluster
def test_report_renders_in_headless_chromium(report_run, tmp_path):
    exe = _chromium()
    if exe is None:
        pytest.skip("no headless Chromium on this machine (apt-get install chromium): the screenshot check did "
                    "not run")
    shot = tmp_path / "shot.png"
    cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}", "--window-size=1200,2400",
           "--hide-scrollbars", (report_run / "report.html").as_uri()]
    subprocess.run(cmd, capture_output=True, timeout=120)
    assert shot.is_file() and shot.stat().st_size > 10_000
    import matplotlib.image as mpimg

    img = mpimg.imread(shot)[..., :3]
    nonwhite = (img < 0.95).any(axis=-1).mean()
    assert nonwhite > 0.03, nonwhite  # text, tables and plots, not an empty page
    colours = np.unique((img.reshape(-1, 3) * 255).astype(np.uint8), axis=0)
    assert len(colours) > 50  # anti-aliased text and rendered plot images
    # the plots were decoded and drawn: the StratPD curve colour (#1f4e8c) appears on the page
    curve = np.array([0x1f, 0x4e, 0x8c]) / 255
    assert (np.abs(img - curve).max(axis=-1) < 0.06).sum() > 200


# ------------------------------------------------------------------ history on hand-made runs
def fake_run(job_dir: Path, run_id: str, curves: dict, importances: dict | None = None, stds: dict | None = None):
    """A run directory with the files history reads; curves: (method, feature) -> frame;
    ``stds``: feature -> trial standard deviation of its importance (``importance_std``)."""
    d = job_dir / run_id
    d.mkdir(parents=True)
    frames = []
    for (m, f), c in curves.items():
        c = c.copy()
        c.insert(0, "feature", f)
        c.insert(0, "method", m)
        for col, dt in (("x", "float64"), ("category", "string"), ("count", "float64")):
            if col not in c:
                c[col] = pd.Series([None] * len(c), dtype=dt)
        c["supported"] = True
        frames.append(c)
    pd.concat(frames, ignore_index=True).astype({"category": "string"}).to_parquet(d / "curves.parquet")
    imp = pd.DataFrame([{"method": "importances", "feature": f, "importance": v, "importance_raw": v, "rank": i + 1}
                        for i, (f, v) in enumerate((importances or {}).items())],
                       columns=["method", "feature", "importance", "importance_raw", "rank"])
    if stds is not None:
        imp["importance_std"] = imp["feature"].map(stds).astype(float)
    imp.to_parquet(d / "importances.parquet")
    (d / "manifest.json").write_text(dump_json({"job": job_dir.name, "run_id": run_id}))
    return d


def num(x, y):
    return pd.DataFrame({"x": np.asarray(x, float), "pd": np.asarray(y, float)})


def cat(cats, y):
    return pd.DataFrame({"category": pd.array(cats, dtype="string"), "pd": np.asarray(y, float)})


def test_curve_distance_definitions():
    x = np.linspace(0, 1, 50)
    a = num(x, x).assign(category=pd.array([None] * 50, dtype="string"), supported=True)
    shifted = a.assign(pd=a.pd + 7.0)
    assert hist.curve_distance(a, shifted)["curve_distance"] == pytest.approx(0, abs=1e-12)  # PD: up to a constant
    scaled = a.assign(pd=1.5 * a.pd)
    g = np.linspace(0, 1, hist.GRID_POINTS)
    expected = np.sqrt(np.mean((0.5 * (g - 0.5)) ** 2)) / 1.5
    d = hist.curve_distance(a, scaled)
    assert d["curve_distance"] == pytest.approx(expected, rel=1e-9) and d["support_overlap"] == 1.0
    assert d["curve_rms"] == pytest.approx(expected * 1.5, rel=1e-9)
    moved = a.assign(x=a.x + 0.5)  # support [0.5, 1.5] vs [0, 1]
    d = hist.curve_distance(a, moved)
    assert d["support_overlap"] == pytest.approx(1 / 3) and d["n_common"] == hist.GRID_POINTS
    disjoint = a.assign(x=a.x + 2)
    d = hist.curve_distance(a, disjoint)
    assert d["support_overlap"] == 0 and np.isnan(d["curve_distance"])
    # the floor keeps a flat curve's noise small
    flat = a.assign(pd=0.01 * np.sin(20 * a.x))
    flat2 = a.assign(pd=-0.01 * np.sin(20 * a.x))
    assert hist.curve_distance(flat, flat2)["curve_distance"] > 0.5
    assert hist.curve_distance(flat, flat2, floor=1.0)["curve_distance"] < 0.02
    # categorical: common categories, Jaccard overlap
    c1 = cat(["a", "b", "c"], [0, 1, 2]).assign(x=np.nan, supported=True)
    c2 = cat(["a", "b", "d"], [5, 6, 9]).assign(x=np.nan, supported=True)
    d = hist.curve_distance(c1, c2)
    assert d["support_overlap"] == pytest.approx(2 / 4) and d["curve_distance"] == pytest.approx(0)
    assert d["n_common"] == 2


def test_history_on_hand_made_runs(tmp_path, capsys):
    job = tmp_path / "nightly"
    x = np.linspace(0, 10, 40)
    # every point with a band (pd_std, as a run with trials writes): the drift is tested against it
    base = {("stratpd", "a"): num(x, 2 * x).assign(pd_std=0.05), ("stratpd", "b"): num(x, np.sin(x)).assign(pd_std=0.05),
            ("catstratpd", "c"): cat(["u", "v", "w"], [0, 3, 1]).assign(pd_std=0.05)}
    imps = {"a": 10.0, "b": 2.0, "c": 1.0}
    fake_run(job, "2026-01-01", base, imps)
    fake_run(job, "2026-01-02", base, imps)  # identical: no drift
    changed = dict(base)
    changed[("stratpd", "b")] = num(x, 3 * np.sin(x)).assign(pd_std=0.05)  # b's curve triples
    del changed[("catstratpd", "c")]
    changed[("stratpd", "new")] = num(x, x).assign(pd_std=0.05)
    fake_run(job, "2026-01-03", changed, {"a": 10.0, "b": 6.0, "new": 1.0})
    (job / "latest").symlink_to("2026-01-03")
    (job / ".2026-01-04.tmp-1").mkdir()  # an unfinished run is not a run

    h = hist.history(job, output=True)
    assert [r.run_id for r in h.runs] == ["2026-01-01", "2026-01-02", "2026-01-03"]
    t = h.table
    first = t[t.run_id == "2026-01-02"].set_index("feature")
    assert (first.drift == 0).all() and (first.status == "ok").all()
    last = h.latest_pair().set_index("feature")
    assert last.loc["b", "status"] == "drifted" and last.loc["a", "status"] == "ok"
    assert last.loc["a", "drift"] == pytest.approx(0)
    # importance_change: (raw_new - raw_prev) / previous total = (6 - 2) / 13
    assert last.loc["b", "importance_change"] == pytest.approx(4 / 13)
    assert last.loc["a", "importance_change"] == pytest.approx(0)
    assert last.loc["b", "importance"] == pytest.approx(6 / 17) and last.loc["b", "importance_prev"] == pytest.approx(2 / 13)
    assert last.loc["c", "status"] == "gone" and last.loc["new", "status"] == "new"
    assert last.loc["b", "noise_source"] == "band" and last.loc["b", "z"] > last.loc["b", "z_crit"]
    assert list(h.latest_pair().feature)[0] == "b"  # drifted first
    # written: drift table, history.html with a plot per curve across runs, all embedded
    out = job / "history"
    assert set(os.listdir(out)) == {"drift.parquet", "drift.json", "history.html", "plots"}
    assert len(pd.read_parquet(out / "drift.parquet")) == len(t)
    p = parse(out / "history.html")
    imgs = check_embedded_pngs(p.imgs)
    assert len(imgs) == 1 + 4  # importance across runs + a, b, c, new
    assert all(r.startswith("#") for r in p.refs)
    # history is not itself a run, and `latest` is untouched
    assert [r.run_id for r in hist.load_runs(job)] == ["2026-01-01", "2026-01-02", "2026-01-03"]

    # the CLI
    assert cli.main(["history", str(job), "--no-write"]) == 0
    o = capsys.readouterr().out
    assert "2026-01-02 -> 2026-01-03" in o and "1 curve(s) drifted" in o
    assert cli.main(["history", str(job), "--fail-on-drift", "--no-write"]) == 3
    capsys.readouterr()
    assert cli.main(["history", str(job), "--json", "--no-write", "--feature", "a"]) == 0
    rows = json.loads(capsys.readouterr().out)["curves"]
    assert [r["feature"] for r in rows] == ["a"] and rows[0]["status"] == "ok"
    assert cli.main(["history", str(job), "--feature", "zzz"]) == 2
    assert "'zzz' not in any run" in capsys.readouterr().err
    assert cli.main(["history", str(job), "--threshold", "0.99", "--fail-on-drift", "--no-write"]) == 0


def test_history_errors(tmp_path, capsys):
    assert cli.main(["history", str(tmp_path / "nope")]) == 2
    assert "is not a directory" in capsys.readouterr().err
    (tmp_path / "job" / "r1").mkdir(parents=True)
    assert cli.main(["history", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no runs in" in err and err.count("\n") == 1
    fake_run(tmp_path / "job2", "only", {("stratpd", "a"): num([0, 1, 2], [0, 1, 2])})
    assert cli.main(["history", str(tmp_path / "job2"), "--fail-on-drift"]) == 0
    assert "nothing to compare yet" in capsys.readouterr().out
    fake_run(tmp_path / "job3", "r", {("stratpd", "a"): num([0, 1], [0, 1])})
    assert cli.main(["history", str(tmp_path / "job3" / "..")]) == 2
    assert "this looks like an output root" in capsys.readouterr().err


# ------------------------------------------------------------------ nightly, end to end
@pytest.mark.cluster
def test_nightly_job_then_history_flags_the_changed_feature(dask_cluster, tmp_path, monkeypatch):
    monkeypatch.setenv("DASKPD_LAKE", str(tmp_path / "lake"))
    out = tmp_path / "out"
    spec = REPO / "jobs" / "nightly.toml"

    def night(run_id, **lake):
        shutil.rmtree(tmp_path / "lake", ignore_errors=True)
        make_lake(tmp_path / "lake", years=range(2000, 2006), rows_per_year=5000, **lake)
        return run_job(spec, scheduler=dask_cluster, output=out, run_id=run_id, progress=False, out=False, log=False)

    night("2026-11-01")
    night("2026-11-02")  # the same data again: nothing moved
    job = out / "auctions-nightly"
    assert cli.main(["history", str(job), "--fail-on-drift", "--no-write"]) == 0
    h = hist.history(job, output=False)
    assert (h.table.drift == 0).all()
    night("2026-11-03", hours_effect=-1.5)  # MachineHours now costs 3/hour instead of 1.5
    assert cli.main(["history", str(job), "--fail-on-drift"]) == 3
    h = hist.history(job, output=False)
    last = h.latest_pair().set_index("feature")
    assert last.loc["MachineHours", "status"] == "drifted"
    assert last.loc["MachineHours", "importance_change"] > 0.1
    assert last.loc["YearMade", "status"] == "ok"
    # the spec's trials give every curve a band in curves.parquet, and the drift is tested against it:
    # ProductGroup's raw drift is large (its trees changed with the data) but within its band
    assert {"pd_std", "pd_lo", "pd_hi"} <= set(pd.read_parquet(job / "2026-11-03" / "curves.parquet").columns)
    assert (last.noise_source == "band").all()
    assert last.loc["ProductGroup", "drift"] > 0.1 and last.loc["ProductGroup", "status"] == "ok"
    assert last.loc["MachineHours", "curve_distance"] > 5 * last.loc["YearMade", "curve_distance"]
    assert (job / "history" / "history.html").is_file()
    assert os.readlink(job / "latest") == "2026-11-03"


# ------------------------------------------------------------------ layout and the importance chart
def _measure_in_chromium(html_path: Path, tmp_path: Path, width: int) -> dict:
    """Open a copy of the page (plus a measuring script) at ``width`` px; return the widths."""
    exe = _chromium()
    if exe is None:
        pytest.skip("no headless Chromium on this machine (apt-get install chromium): the layout check did not run")
    probe = tmp_path / "probe.html"
    script = ("<script>var d=document.documentElement,t=[].slice.call(document.querySelectorAll('table'));"
              "document.body.setAttribute('data-m',JSON.stringify({view:d.clientWidth,page:d.scrollWidth,"
              "tables:t.map(function(e){var b=e.parentNode.getBoundingClientRect();"
              "return [e.getBoundingClientRect().right,b.right,e.scrollWidth,e.parentNode.clientWidth]})}));"
              "</script>")
    probe.write_text(html_path.read_text(encoding="utf-8").replace("</body>", script + "</body>"), encoding="utf-8")
    cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}",
           f"--window-size={width},1000", "--dump-dom", probe.as_uri()]
    out = subprocess.run(cmd, capture_output=True, timeout=120, text=True).stdout
    import re

    m = re.search(r'data-m="([^"]*)"', out)
    assert m, out[-2000:]
    import html as _html

    return json.loads(_html.unescape(m.group(1)))


def test_history_tables_fit_a_1400px_window(tmp_path):
    job = tmp_path / "auctions-nightly"
    x = np.linspace(0, 10, 40)
    feats = ["MachineHoursCurrentMeter", "YearMade", "auctioneerID", "fiModelDescriptor", "ProductSize",
             "Enclosure_Type"]
    ids = ["20260101T020000Z", "20260102T020000Z", "20260103T020000Z", "20260104T020000Z"]
    for k, rid in enumerate(ids):
        curves = {("stratpd", f): num(x, (1 + 0.1 * k * (i == 0)) * np.sin(x + i)) for i, f in enumerate(feats)}
        curves[("catstratpd", "ProductGroup_Description")] = cat(["TEX", "WL", "BL", "TTT"], [0, 1, 2 + 0.1 * k, 3])
        fake_run(job, rid, curves, {f: 1.0 + i + 0.3 * k for i, f in enumerate(feats)})
    h = hist.history(job)
    m = _measure_in_chromium(h.written / "history.html", tmp_path, 1400)
    assert m["page"] <= m["view"], m  # the page does not scroll sideways
    assert len(m["tables"]) == 2
    for right, box_right, table_w, box_w in m["tables"]:
        assert table_w <= box_w + 1 and right <= box_right + 1, m  # every table fits; none needs its scroll bar


def test_report_importance_chart_is_the_plot_of_the_result():
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.container import BarContainer

    import daskpd
    from daskpd.job.report import importance_figure
    from daskpd.job.run import importances_frame

    rng = np.random.default_rng(4)
    n = 3000
    df = pd.DataFrame({"a": rng.uniform(size=n), "b": rng.uniform(size=n), "g": rng.choice(list("pqrs"), n)})
    df["y"] = 3 * df.a + df.b + df.g.map({"p": 0, "q": 1, "r": 2, "s": 0.5}) + rng.normal(0, 0.05, n)
    from daskpd._importance import strat_curves_and_importances

    res = strat_curves_and_importances(df, target="y", n_trials=3, random_state=0)
    lib = res.plot()
    long = importances_frame({"importances": res})  # the run's table, from the shared format
    rep = importance_figure(long, title="x").axes[0]

    def drawn(ax):
        (bc,) = [c for c in ax.containers if isinstance(c, BarContainer)]
        bars = [(round(p.get_y(), 6), p.get_width(), matplotlib.colors.to_hex(p.get_facecolor())) for p in bc]
        err = sorted(tuple(map(tuple, s)) for s in bc.errorbar.lines[2][0].get_segments())
        legend = [t.get_text() for t in ax.get_legend().get_texts()] if ax.get_legend() else []
        return (bars, err, [t.get_text() for t in ax.get_yticklabels()], ax.get_xlabel(),
                [t.get_text() for t in ax.texts], legend)

    assert drawn(rep) == drawn(lib)
    bars, err, labels, *_ = drawn(lib)
    assert len(bars) == 3 and len(err) == 3 and "categorical" in drawn(lib)[-1]
    import matplotlib.pyplot as plt

    plt.close("all")


# ------------------------------------------------------------------ drift confined to part of the range
def machine_hours_curve(right_end: float, changed_share: float = 0.27, n_rows: int = 20_000, seed: int = 0):
    """A StratPD-like MachineHours curve, 0 -> -50k over the rows' range; the last
    ``changed_share`` of the rows (by x) bend so that the right end reaches ``right_end``."""
    rng = np.random.default_rng(seed)
    hours = np.sort(rng.gamma(1.5, 4000.0, n_rows))  # skewed, as real meter readings
    x = np.quantile(hours, np.linspace(0, 1, 201))  # bins with equal rows
    count = np.full(len(x), n_rows / len(x))
    y = -50_000.0 * (x - x[0]) / (x[-1] - x[0])
    k = int(round((1 - changed_share) * (len(x) - 1)))  # the change starts at the 73% row quantile
    bend = np.zeros(len(x))
    bend[k:] = (right_end - y[-1]) * (x[k:] - x[k]) / (x[-1] - x[k])
    return pd.DataFrame({"x": x, "pd": y + bend, "count": count})


def test_curve_max_flags_a_change_in_27_percent_of_the_rows(tmp_path):
    # bands of 1% of the curve's range (as a run with trials writes them)
    base, moved = machine_hours_curve(-50_000).assign(pd_std=500.0), machine_hours_curve(-35_000).assign(pd_std=500.0)
    a = base.assign(category=pd.array([None] * len(base), dtype="string"), supported=True)
    b = moved.assign(category=pd.array([None] * len(moved), dtype="string"), supported=True)
    d = hist.curve_distance(a, b)
    assert d["curve_distance"] < 0.1  # the average alone misses it (the issue measured 0.070)
    assert d["curve_max"] == pytest.approx(15_000 / 50_000, rel=0.1)  # the right end moved by 30% of the range
    # noise of a few percent at single points is smoothed away, and a constant shift is no move
    noisy = a.assign(pd=a.pd + 7.0 + np.random.default_rng(1).normal(0, 0.01 * 50_000, len(a)))
    assert hist.curve_distance(a, noisy)["curve_max"] < 0.05
    # end to end: three nightly runs, the third with the bend; only MachineHours drifts, at the default threshold
    job = tmp_path / "nightly"
    other = num(np.arange(1990, 2012), np.linspace(0, 20_000, 22)).assign(pd_std=200.0)
    for rid, curve in (("2026-01-01", base), ("2026-01-02", base), ("2026-01-03", moved)):
        fake_run(job, rid, {("stratpd", "MachineHours"): curve, ("stratpd", "YearMade"): other},
                 {"MachineHours": 0.4, "YearMade": 0.6})
    h = hist.history(job, output=False)
    last = h.latest_pair().set_index("feature")
    assert last.loc["MachineHours", "status"] == "drifted" and last.loc["YearMade", "status"] == "ok"
    assert last.loc["MachineHours", "drift"] == pytest.approx(last.loc["MachineHours", "curve_max"])
    assert (h.table[h.table.run_id == "2026-01-02"].drift == 0).all()
    assert cli.main(["history", str(job), "--fail-on-drift", "--no-write"]) == 3


def test_curve_max_categorical_ignores_rare_categories():
    cats = [f"c{i}" for i in range(50)]
    counts = np.r_[np.full(49, 1000.0), 2.0]  # c49: 2 rows of 49,002
    y = np.linspace(0, 10, 50)
    a = cat(cats, y).assign(x=np.nan, supported=True, count=counts)
    rare = a.assign(pd=np.r_[y[:49], 50.0])  # a rare category jumps: noise, not drift
    assert hist.curve_distance(a, rare)["curve_max"] == pytest.approx(0, abs=1e-12)
    common = a.assign(pd=np.r_[y[:40], y[40:] + 4.0])  # ten common categories move by 4
    d = hist.curve_distance(a, common)
    # scale: the larger range (14)
    assert d["curve_max"] == pytest.approx(4.0 / 14.0, rel=1e-9) and d["curve_distance"] < d["curve_max"]


# ------------------------------------------------------------------ ranking by drift relative to noise
def store_history(job: Path, with_stds: bool):
    """Three runs of three curves whose ordering is known.  ``MachineHours`` (20,000 rows)
    really moved (its slope x1.3: drift 0.13); ``small_store`` (200 rows: a small store
    type) jumps by its noise alone (drift ~0.5, larger); ``YearMade`` did not move."""
    x = np.linspace(0, 10, 40)
    noise = np.random.default_rng(7).normal(0, 0.5, (3, 40))
    for k, rid in enumerate(["2026-03-01", "2026-03-02", "2026-03-03"]):
        curves = {("stratpd", "MachineHours"): num(x, -(1.3 if k == 2 else 1.0) * x).assign(count=500.0),
                  ("stratpd", "small_store"): num(x, np.sin(x) + noise[k]).assign(count=5.0),
                  ("stratpd", "YearMade"): num(x, 0.5 * x).assign(count=500.0)}
        imps = {"MachineHours": 10.0, "small_store": 1.0, "YearMade": 5.0}
        stds = {"MachineHours": 0.1, "small_store": 0.5, "YearMade": 0.1} if with_stds else None
        fake_run(job, rid, curves, imps, stds)


@pytest.mark.parametrize("with_stds", [False, True])
def test_history_ranks_curves_by_drift_relative_to_noise(tmp_path, with_stds):
    job = tmp_path / "stores"
    store_history(job, with_stds)
    h = hist.history(job, output=not with_stds, last=3)
    last = h.latest_pair()
    by_drift = list(last.sort_values("drift", ascending=False).feature)
    assert by_drift[0] == "small_store"  # the raw drift flags the noisiest curve...
    assert list(last.feature) == ["MachineHours", "small_store", "YearMade"]  # ...drift / noise does not
    t = last.set_index("feature")
    assert set(t.noise_source) == {"trials" if with_stds else "rows"}
    if with_stds:  # sqrt(sd_prev^2 + sd^2) / max(importance_prev, importance), in the table's units
        assert t.loc["MachineHours", "noise"] == pytest.approx(np.hypot(0.1, 0.1) / 10.0)
    else:  # sqrt(P_prev / N_prev + P / N): 40 points of 500 rows
        assert t.loc["MachineHours", "noise"] == pytest.approx(np.sqrt(2 / 500))
        assert t.loc["small_store", "noise"] == pytest.approx(np.sqrt(2 / 5))
    assert t.loc["MachineHours", "drift_noise"] == pytest.approx(t.loc["MachineHours", "drift"] / t.loc["MachineHours", "noise"])
    assert f"sorted by {hist.RANKED_BY}" in h.format_latest()
    if with_stds:
        return
    # the page: the measure is named, and the curve sections follow the same order
    html = (h.written / "history.html").read_text(encoding="utf-8")
    assert "Sorted by status (drifted, noisy, ok" in html
    heads = [html.index(f"<h3>stratpd: {f}</h3>") for f in ("MachineHours", "small_store", "YearMade")]
    assert heads == sorted(heads)


def test_history_plots_are_legible(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    job = tmp_path / "auctions-nightly"
    x = np.linspace(0, 10, 40)
    cats = [f"ModelID-{i:04d}" for i in range(300)]
    ids = [f"202601{d:02d}T020000Z" for d in range(1, 11)]
    for k, rid in enumerate(ids):
        fake_run(job, rid, {("stratpd", "MachineHours"): num(x, (1 + 0.05 * k) * x),
                            ("catstratpd", "ModelID"): cat(cats, np.sin(np.arange(300) + 0.1 * k))},
                 {"MachineHours": 2.0 + k, "ModelID": 1.0})
    runs = hist.load_runs(job)
    figs = [hist.feature_figure(runs, "stratpd", "MachineHours"), hist.feature_figure(runs, "catstratpd", "ModelID"),
            hist.importance_figure(runs, "importances")]
    for fig in figs:
        fig.canvas.draw()
        r = fig.canvas.get_renderer()
        ax = fig.axes[0]
        texts = [t for t in fig.findobj(matplotlib.text.Text) if t.get_text() and t.get_visible()]
        assert min(t.get_fontsize() for t in texts) >= 8
        ticks = [t for t in ax.get_xticklabels() if t.get_text()]
        assert all(t.get_rotation() == 0 for t in ticks) or len(ticks) > 12  # horizontal where they fit
        assert len(ticks) <= 30
        b = [t.get_window_extent(r) for t in ticks]
        assert all(p.x1 <= q.x0 or p.y1 <= q.y0 or q.y1 <= p.y0 for p, q in zip(b[:-1], b[1:]))
    # the newest run: a strong colour, thickest, on top; older runs fade with age
    lines = [ln for ln in figs[0].axes[0].get_lines()]
    newest = lines[-1]
    assert matplotlib.colors.to_hex(newest.get_color()) == hist.NEWEST_COLOR
    assert newest.get_linewidth() == max(ln.get_linewidth() for ln in lines)
    assert newest.get_zorder() == max(ln.get_zorder() for ln in lines)
    alphas = [ln.get_alpha() for ln in lines[:-2]]
    assert alphas == sorted(alphas) and alphas[0] < alphas[-1]
    # run ids stay horizontal and the newest is named
    imp_ax = figs[2].axes[0]
    assert imp_ax.get_xticklabels()[-1].get_text() == "20260110\nT020000Z"
    plt.close("all")
