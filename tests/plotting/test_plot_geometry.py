"""Every curve plot at 1, 30 and 1,000 categories or bins, drawn by real matplotlib (Agg)
and checked by geometry measured with the figure's renderer:

* the count axis label does not overlap its tick labels (nor the curve's), and stays
  inside the figure;
* the count strip draws a bounded number of artists (separate bars up to 60 positions,
  else ONE step area with at most one step per 4 pixels);
* a categorical axis names at most ``MAX_LABELS`` categories, at >= 8 pt, apart, and
  says how many more there are;
* grids of curves: no two panels' titles, labels or tick labels collide.

The results are built from their dataclasses with a known generator (sizes, names and
counts are what the layout depends on; computing a 1,000-level result would spend the
test budget on the estimator, which tests/plotting/test_plotting.py covers with results
computed by the library).
"""
from __future__ import annotations

import itertools
from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from matplotlib.patches import Rectangle, StepPatch  # noqa: E402

from daskpd import ALEResult, CatStratPDResult, ICEResult, MarginalResult, PDResult, StratPDResult  # noqa: E402
from daskpd.plotting import MAX_LABELS  # noqa: E402
from daskpd.plotting.importance import plot_curves, plot_importances  # noqa: E402

SIZES = (1, 30, 1000)


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


# ------------------------------------------------------------------ results of n positions
def names(n):
    return np.array([f"ModelID-{i:04d}-Backhoe-Loader-variant" for i in range(n)], dtype=object)


def rows(n, seed=0):
    return np.random.default_rng(seed).integers(5, 400, n).astype(float)


def strat(n):
    n = max(n, 2)
    x = np.linspace(0, 1000, n)
    return StratPDResult(feature="MachineHours", target="price", x=x, pd=np.sin(x / 150), slope=np.cos(x / 150) / 150,
                         slope_count=np.full(n, 20), count=rows(n), supported=np.ones(n, bool), n_rows=10_000,
                         n_used=10_000, n_ignored=0, n_missing_x=0, n_bad_y=0, n_leaves=50, binned=n > 100,
                         params={"min_slopes_per_x": 5})


def catstrat(n):
    return CatStratPDResult(feature="ModelID", target="price", categories=pd.Index(names(n)),
                            pd=np.linspace(0, 3, n) + np.sin(np.arange(n)), count=rows(n), count_used=rows(n),
                            n_leaves_cat=np.full(n, 3), group=np.zeros(n, int), marginal_mean=np.zeros(n),
                            n_rows=10_000, n_used=10_000, n_ignored=0, n_missing_x=0, n_bad_y=0, n_leaves=40,
                            n_leaves_used=40, n_groups=1)


def pd_cat(n):
    return PDResult(features=("ModelID",), grid_values=[names(n)], average=30_000 + 50 * np.sin(np.arange(n)),
                    kinds=("categorical",), method="brute")


def ale(n, kind):
    if kind == "numeric":
        x = np.linspace(0, 1, n + 1)  # n bins
        c = np.r_[0, rows(n)]
    else:
        x = names(n)
        c = rows(n)
    a = np.cumsum(np.random.default_rng(1).normal(size=len(x)))
    return ALEResult(feature="ModelID" if kind != "numeric" else "age", kind=kind, x=x, ale=a - a.mean(), count=c,
                     weight=c, delta=np.zeros(len(x)), delta_std=np.zeros(len(x)))


def marg_cat(n):
    m = np.sin(np.arange(n))
    return MarginalResult(feature="ModelID", kind="categorical", x=names(n), lo=None, hi=None, count=rows(n),
                          weight=rows(n), y_mean=m, y_std=0.1 + 0 * m, pred_mean=m + 0.1, pred_std=0.1 + 0 * m,
                          target="price")


def ice_cat(n):
    lines = np.sin(np.arange(n))[None, :] + np.arange(5)[:, None]
    return ICEResult(feature="ModelID", kind="categorical", grid=names(n), pd=lines.mean(0), lines=lines,
                     line_x=np.zeros(5), line_index=np.arange(5), centered=False, engine="pandas", response="predict")


# ------------------------------------------------------------------ geometry
def boxes(axis, renderer):
    out = []
    lo, hi = sorted(axis.get_view_interval())
    for t in axis.get_major_ticks():
        lab = t.label1 if t.label1.get_visible() else t.label2
        if t.get_visible() and lab.get_visible() and lab.get_text() and lo - 1e-9 <= t.get_loc() <= hi + 1e-9:
            out.append(lab)
    return out


def overlap(a, b, pad=0.0):
    return min(a.x1, b.x1) - max(a.x0, b.x0) > pad and min(a.y1, b.y1) - max(a.y0, b.y0) > pad


def twins(ax):
    return [a for a in ax.figure.axes if a is not ax and a.bbox.bounds == ax.bbox.bounds]


def check_axes(ax, *, categorical=None, draw=True):
    """The checks shared by every plot (``categorical``: "x" or "y", the category axis)."""
    fig = ax.figure
    if draw:
        fig.canvas.draw()
    r = fig.canvas.get_renderer()
    figbox = fig.bbox
    for a in [ax, *twins(ax)]:
        for axis in (a.xaxis, a.yaxis):
            labs = boxes(axis, r)
            ext = [t.get_window_extent(r) for t in labs]
            for (i, p), (j, q) in itertools.combinations(enumerate(ext), 2):
                assert not overlap(p, q), f"{a.get_title()!r}: tick labels {labs[i].get_text()!r} / {labs[j].get_text()!r}"
    for t in (ax.title, ax.xaxis.label, ax.yaxis.label):  # inside the figure
        b = t.get_window_extent(r)
        if t.get_text():
            assert figbox.x0 - 1 <= b.x0 and b.x1 <= figbox.x1 + 1 and figbox.y0 - 1 <= b.y0 and b.y1 <= figbox.y1 + 1, \
                f"{t.get_text()!r} leaves the figure"
    for tw in twins(ax):  # the count strip
        label = tw.yaxis.label.get_window_extent(r)
        assert figbox.x0 - 1 <= label.x0 and label.x1 <= figbox.x1 + 1 and figbox.y0 - 1 <= label.y0
        for t in boxes(tw.yaxis, r) + boxes(ax.xaxis, r) + boxes(ax.yaxis, r):
            assert not overlap(label, t.get_window_extent(r)), f"count label over tick label {t.get_text()!r}"
        assert not overlap(label, ax.yaxis.label.get_window_extent(r))
        rects = [p for p in tw.patches if isinstance(p, Rectangle)]
        steps = [p for p in tw.patches if isinstance(p, StepPatch)]
        assert len(rects) <= 60 and len(steps) <= 1 and not (rects and steps)
        if steps:
            assert len(steps[0].get_data().values) <= max(20, tw.get_window_extent(r).width / 4)
        assert len(tw.lines) + len(tw.collections) <= 1
    if categorical:
        axis = ax.xaxis if categorical == "x" else ax.yaxis
        labs = boxes(axis, r)
        assert 1 <= len(labs) <= MAX_LABELS
        assert all(t.get_fontsize() >= 8 for t in labs)
        assert all(len(t.get_text()) <= 28 for t in labs)
    return r


@pytest.mark.parametrize("n", SIZES)
def test_stratpd(n):
    res = strat(n)
    ax = res.plot()
    check_axes(ax)
    tw = twins(ax)[0]
    if max(n, 2) > 60:
        (step,) = [p for p in tw.patches if isinstance(p, StepPatch)]
        assert step.get_data().values.sum() == pytest.approx(res.count.sum())  # every row is in the strip
        assert "range" in tw.get_ylabel()


# (a strip of one category is its bar: not drawn as a strip)
@pytest.mark.parametrize("n, kind", [(n, k) for k in ("bar", "strip") for n in SIZES if (k, n) != ("strip", 1)])
def test_catstratpd(n, kind):
    ax = catstrat(n).plot(kind=kind)
    if kind == "bar":
        check_axes(ax, categorical="y")
        assert ("and 970 more" in ax.get_ylabel()) == (n == 1000)
    else:
        check_axes(ax)
        assert ax.get_xticks().size == 0 and len(ax.texts) <= 10


@pytest.mark.parametrize("n", SIZES)
def test_categorical_pd(n):
    ax = pd_cat(n).plot()
    check_axes(ax, categorical="x")
    rects = [p for p in ax.patches if isinstance(p, Rectangle)]
    assert len(rects) == (n if n <= 60 else 0)  # hundreds of bars would be a wall: points only
    assert ("more" in ax.get_xlabel()) == (n > MAX_LABELS)


# (a categorical ALE needs two levels)
@pytest.mark.parametrize("n, kind", [(n, k) for k in ("numeric", "categorical") for n in SIZES
                                     if (k, n) != ("categorical", 1)])
def test_ale(n, kind):
    ax = ale(n, kind).plot()
    check_axes(ax, categorical="x" if kind == "categorical" else None)


@pytest.mark.parametrize("n", SIZES)
def test_marginal_and_ice_categorical(n):
    check_axes(marg_cat(n).plot(), categorical="x")
    check_axes(ice_cat(n).plot(), categorical="x")


def test_2way_heatmap_names_at_most_the_cap():  # 300 x 40 categories
    n = 300
    res = PDResult(features=("ModelID", "state"), grid_values=[names(n), names(40)],
                   average=np.random.default_rng(0).normal(size=(n, 40)), kinds=("categorical", "categorical"),
                   method="brute")
    ax = res.plot(kind="heatmap")
    check_axes(ax, categorical="x")
    check_axes(ax, categorical="y")


def test_importances_at_1000_features_name_the_top_30():
    t = pd.DataFrame({"importance": np.linspace(1, 0, 1000), "importance_std": 0.01, "kind": "numeric"},
                     index=pd.Index(names(1000), name="feature"))
    ax = plot_importances(t)
    check_axes(ax, categorical="y")
    assert "and 970 more" in ax.get_title()


def test_grid_of_curves_nothing_collides():
    curves = {"MachineHours": strat(1000), "age": ale(30, "numeric"), "ModelID": catstrat(200),
              "state": catstrat(12)}
    n = len(curves)
    table = pd.DataFrame({"importance": np.linspace(1, 0.1, n)}, index=list(curves))
    fig = plot_curves(SimpleNamespace(curves=curves, table=table), top_k=6, ncols=2)  # 2 x 2: neighbours both ways
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    panels = [a for a in fig.axes if a.get_visible() and a.get_title()]
    assert len(panels) == n
    for a in panels:
        check_axes(a, draw=False)
    # every text of one panel (title, axis labels, tick labels, count label) stays off every other panel's
    texts = {}
    for a in panels:
        own = [a.title, a.xaxis.label, a.yaxis.label, *boxes(a.xaxis, r), *boxes(a.yaxis, r)]
        for tw in twins(a):
            own += [tw.yaxis.label, *boxes(tw.yaxis, r)]
        texts[a] = [t.get_window_extent(r) for t in own if t.get_text()]
    for a, b in itertools.permutations(panels, 2):
        for box in texts[a]:
            assert not overlap(box, b.get_window_extent(r)), f"{a.get_title()!r} text over panel {b.get_title()!r}"
            assert not any(overlap(box, o) for o in texts[b])


def test_sklearn_display_names_at_most_the_cap():
    from sklearn.utils import Bunch

    from daskpd.plotting import PartialDependenceDisplay

    n = 100
    b = Bunch(grid_values=[names(n)], average=np.sin(np.arange(n))[None, :])
    disp = PartialDependenceDisplay(pd_results=[b], features=[(0,)], feature_names=["ModelID"], target_idx=0,
                                    deciles={0: None}, is_categorical=[(True,)]).plot()
    check_axes(disp.axes_.ravel()[0], categorical="x")


def test_job_figures_are_the_librarys():
    """A job's PNGs are drawn by daskpd.job.outputs.curve_figure: the result's own plot
    (constrained layout, count label off the tick labels, capped category names)."""
    from daskpd.job.outputs import curve_figure

    for method, res, cat in [("stratpd", strat(1000), None), ("catstratpd", catstrat(1000), "y"),
                             ("partial_dependence", pd_cat(1000), "x"), ("ale", ale(1000, "numeric"), None)]:
        fig = curve_figure(method, res.feature, res, "price")
        assert fig.get_layout_engine() is not None
        ax = fig.axes[0]
        check_axes(ax, categorical=cat)
        if method not in ("stratpd", "catstratpd"):
            assert "price" in ax.get_ylabel()


def catstrat_with_trials(n, seed=0):
    """Effects of both signs, the top one with a wide band (its band used to be clipped)."""
    rng = np.random.default_rng(seed)
    base = catstrat(n)
    eff = np.linspace(-3, 6, n) + rng.normal(scale=0.3, size=n)
    eff -= eff.min()
    eff[np.argmax(eff)] += 2.0
    spread = np.full(n, 0.3)
    spread[np.argmax(eff)] = 3.0  # a wide band on the top bar
    trials = eff + rng.normal(size=(20, n)) * spread
    trials -= trials[:, [int(np.argmin(eff))]]  # 0 at the anchor, as the library's trials are
    base.pd, base.trials_pd = eff, trials
    return base


@pytest.mark.parametrize("n", [3, 12, 30])
def test_catstratpd_counts_clear_of_bands_and_no_band_clipped(n):
    res = catstrat_with_trials(n)
    ax = res.plot(kind="bar")
    fig = ax.figure
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    x0, x1 = ax.get_xlim()
    (bands,) = [c for c in ax.collections if "band" in str(c.get_label())]
    segs = bands.get_segments()
    assert len(segs) == n
    for s in segs:  # every band inside the x limits: nothing clipped at the axis
        assert x0 <= s[:, 0].min() and s[:, 0].max() <= x1
    band_boxes = [bands.get_transform().transform(s) for s in segs]
    bars = [p.get_window_extent(r) for p in ax.patches if isinstance(p, Rectangle)]
    (right,) = ax.child_axes  # the n= column
    labels = [t.label2 for t in right.yaxis.get_major_ticks() if t.label2.get_visible() and t.label2.get_text()]
    assert len(labels) == n and all(t.get_text().startswith("n=") for t in labels)
    for t in labels:
        b = t.get_window_extent(r)
        assert b.x0 >= ax.bbox.x1 - 1 and b.x1 <= fig.bbox.x1 + 1  # right of the axes, inside the figure
        for pts in band_boxes:
            assert not (pts[:, 0].min() <= b.x1 and b.x0 <= pts[:, 0].max() and
                        pts[:, 1].min() - 2 <= b.y1 and b.y0 <= pts[:, 1].max() + 2), t.get_text()
        for bar in bars:
            assert not overlap(b, bar), t.get_text()
    check_axes(ax, categorical="y", draw=False)
    # the same in a job's figure (constrained layout)
    from daskpd.job.outputs import curve_figure

    fig = curve_figure("catstratpd", res.feature, res, "price")
    fig.canvas.draw()
    ax = fig.axes[0]
    x0, x1 = ax.get_xlim()
    (bands,) = [c for c in ax.collections if "band" in str(c.get_label())]
    assert all(x0 <= s[:, 0].min() and s[:, 0].max() <= x1 for s in bands.get_segments())
    for t in ax.child_axes[0].get_yticklabels():
        b = t.get_window_extent(fig.canvas.get_renderer())
        assert b.x0 >= ax.bbox.x1 - 1 and b.x1 <= fig.bbox.x1 + 1


def test_comparison_labels_stay_in_the_figure():
    """A long target name: the value axis' label wraps onto two lines inside the figure."""
    from daskpd.model import ComparisonResult

    x = np.linspace(0, 15, 50)
    res = ComparisonResult(feature="median_income", target="median_house_value",
                           curves={"StratPD": (x, x ** 1.5), "FPD": (x, 2 * x), "ALE": (x, 1.8 * x)})
    ax = res.plot()
    check_axes(ax)
    assert ax.get_ylabel() == "effect on median_house_value\n(aligned at the common left end)"
