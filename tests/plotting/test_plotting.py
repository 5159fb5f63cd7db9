"""Plots checked by their matplotlib artists (bar heights and bottoms, tick-label extents
measured with the renderer, legend entries, axis labels, colours), not by file size.

Every result here is computed by the library on small in-memory data (pandas input:
the local scheduler), so the plots are of real results."""
from __future__ import annotations

import itertools

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from matplotlib.collections import PathCollection  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

import daskpd  # noqa: E402
from daskpd.datasets import Quadratic  # noqa: E402
from daskpd.plotting import COUNT_FRACTION  # noqa: E402


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


pytestmark = pytest.mark.usefixtures("one_openmp_thread")


def bars(ax):
    return [p for p in ax.patches if isinstance(p, Rectangle) and p.get_width() != 0 or
            isinstance(p, Rectangle) and p.get_height() != 0]


def visible_label_boxes(axis, renderer):
    out = []
    for t in axis.get_major_ticks():
        lab = t.label1
        if t.get_visible() and lab.get_visible() and lab.get_text():
            # ticks outside the view are not drawn
            lo, hi = sorted(axis.get_view_interval())
            if lo - 1e-9 <= t.get_loc() <= hi + 1e-9:
                out.append(lab.get_window_extent(renderer))
    return out


def assert_no_overlap(boxes, what):
    for (i, a), (j, b) in itertools.combinations(enumerate(boxes), 2):
        ix = min(a.x1, b.x1) - max(a.x0, b.x0)
        iy = min(a.y1, b.y1) - max(a.y0, b.y0)
        assert ix <= 0 or iy <= 0, f"{what}: tick labels {i} and {j} overlap ({a} / {b})"


def assert_figure_ticklabels_apart(fig):
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    n = 0
    for k, ax in enumerate(fig.axes):
        if not ax.get_visible():
            continue
        for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            boxes = visible_label_boxes(axis, r)
            n += len(boxes)
            assert_no_overlap(boxes, f"axes {k} ({ax.get_title()!r}) {name}")
    assert n > 0


def lab(hex_or_rgb):
    """CIE L*a*b* (D65) of an sRGB colour."""
    rgb = np.asarray(matplotlib.colors.to_rgb(hex_or_rgb), dtype=float)
    lin = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    M = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]])
    xyz = M @ lin / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


# ------------------------------------------------------------------ data and models
@pytest.fixture(scope="module")
def cat_model():
    """A model where the categorical feature's PD is far from 0 (prices ~ 30,000)."""
    from sklearn.ensemble import HistGradientBoostingRegressor

    rng = np.random.default_rng(0)
    n = 4000
    levels = [f"level-with-a-long-name-{i:02d}" for i in range(24)]
    g = rng.integers(0, len(levels), n)
    X = pd.DataFrame({"g": g.astype(float), "hours": rng.uniform(0, 2_000_000, n), "u": rng.uniform(size=n)})
    y = 30_000 + 40 * g + 0.001 * X["hours"] * X["u"] + rng.normal(0, 5, n)
    m = HistGradientBoostingRegressor(max_iter=30, categorical_features=[0], random_state=0).fit(X, y)
    return m, X, levels


@pytest.fixture(scope="module")
def cat_pd(cat_model):
    m, X, _ = cat_model
    return daskpd.partial_dependence(m, X, ["g", "hours"], categorical_features=["g"], grid_resolution=30)


# ------------------------------------------------------------------ categorical PD bars
def test_categorical_pd_bars_start_at_a_baseline_so_the_lowest_category_has_a_bar(cat_pd):
    r = cat_pd["g"]
    y = np.asarray(r.average, dtype=float)
    assert y.min() > 29_000  # far from 0: the bars are drawn from the categories' mean
    ax = r.plot(target="price")
    rects = bars(ax)
    assert len(rects) == len(y)
    bottoms = np.array([p.get_y() for p in rects])
    heights = np.array([p.get_height() for p in rects])
    np.testing.assert_allclose(bottoms, y.mean())  # one common baseline, not the minimum
    np.testing.assert_allclose(bottoms + heights, y)  # every bar ends at its category's PD
    lowest = int(np.argmin(y))
    assert abs(heights[lowest]) > 0.1 * (y.max() - y.min())  # the lowest category has a bar
    assert any(abs(line.get_ydata()[0] - y.mean()) < 1e-9 for line in ax.lines)  # the baseline is drawn
    assert "mean of the categories" in [t.get_text() for t in ax.get_legend().get_texts()][0]
    assert ax.get_ylabel() == "partial dependence of predicted price"


def test_categorical_pd_bars_from_zero_when_zero_is_in_range():
    f = lambda d: d["g"].map({"a": -1.0, "b": 2.0, "c": 0.5}).to_numpy()  # noqa: E731
    df = pd.DataFrame({"g": list("abc") * 20})
    r = daskpd.partial_dependence(f, df, ["g"])["g"]
    ax = r.plot()
    rects = bars(ax)
    np.testing.assert_allclose([p.get_y() for p in rects], 0.0)
    np.testing.assert_allclose([p.get_height() for p in rects], r.average)
    assert ax.get_legend() is None
    assert ax.get_ylabel() == "partial dependence of the prediction"  # no target known: says what it is


# ------------------------------------------------------------------ PD variance, detailed
def test_pd_variance_detailed_tick_labels_do_not_overlap(cat_model):
    m, X, _ = cat_model
    imp = daskpd.pd_variance(m, X, ["g", "hours", "u"], categorical_features=["g"], grid_resolution=40)
    axes = imp.plot(kind="detailed", target="price")
    assert len(axes) == 3
    assert_figure_ticklabels_apart(axes[0].figure)
    assert all("predicted price" in a.get_ylabel() for a in axes)
    inter = daskpd.pd_variance(m, X, [("g", "hours"), ("hours", "u")], measure="interaction",
                               categorical_features=["g"], grid_resolution=40)
    axes = inter.plot(kind="detailed")
    assert len(axes) == 6
    assert_figure_ticklabels_apart(axes[0].figure)
    # and a user's own small figure: the labels are still kept apart
    fig, own = plt.subplots(1, 3, figsize=(7, 2.5))
    inter.plot(kind="detailed", top_k=1, ax=own)
    assert_figure_ticklabels_apart(fig)


def test_pd_variance_summary_names_the_target(cat_model):
    m, X, _ = cat_model
    imp = daskpd.pd_variance(m, X, ["hours", "u"], grid_resolution=10)
    ax = imp.plot(target="price")
    assert "predicted price" in ax.get_xlabel()


# ------------------------------------------------------------------ model-based y-axes
def test_model_based_axes_name_the_target(cat_model):
    m, X, _ = cat_model
    ice = daskpd.ice(m, X, "u", grid_resolution=10, n_lines=20)
    assert ice.plot(target="price").get_ylabel() == "ICE of predicted price"
    ale = daskpd.ale(m, X, ["u"], bins=10)["u"]
    assert ale.plot(target="price").get_ylabel() == "ALE (centred) of predicted price"
    assert ale.plot().get_ylabel() == "ALE (centred) of the prediction"
    Xy = X.assign(price=m.predict(X))
    marg = daskpd.marginal(Xy, ["u"], target="price", model=m, bins=10)["u"]
    ax = marg.plot()
    assert "price" in ax.get_ylabel()
    assert {t.get_text() for t in ax.get_legend().get_texts()} == {"mean price", "mean predicted price"}


def test_classifier_axes_name_the_class():
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(3)
    X = pd.DataFrame({"a": rng.normal(size=500), "b": rng.normal(size=500)})
    m = LogisticRegression().fit(X, np.where(X["a"] > 0, "yes", "no"))
    r = daskpd.partial_dependence(m, X, ["a"], grid_resolution=10)["a"]
    assert r.plot(target="churn").get_ylabel() == "partial dependence of P[churn = yes] (positive class)"


# ------------------------------------------------------------------ ALE / StratPD counts
def _count_axes(ax):
    others = [a for a in ax.figure.axes if a is not ax and a.bbox.bounds == ax.bbox.bounds]
    assert len(others) == 1
    return others[0]


def _assert_separate_low_bars(tw, n):
    rects = [p for p in tw.patches if isinstance(p, Rectangle)]
    assert len(rects) == n
    lo, hi = tw.get_ylim()
    tops = np.array([p.get_y() + p.get_height() for p in rects])
    assert tops.max() <= lo + COUNT_FRACTION * (hi - lo) * (1 + 1e-9)  # in the bottom quarter
    spans = sorted((p.get_x(), p.get_x() + p.get_width()) for p in rects)
    gaps = [b[0] - a[1] for a, b in zip(spans[:-1], spans[1:])]
    assert min(gaps) > 0  # separate bars, not a solid wall
    covered = sum(b - a for a, b in spans)
    assert covered < 0.75 * (spans[-1][1] - spans[0][0])


def _assert_one_low_step_area(tw, total_rows):
    """More than 60 positions: one filled step area (no hairlines) in the bottom quarter,
    at most one step per 4 pixels of the axes' width, holding every row."""
    from matplotlib.patches import StepPatch

    assert not [p for p in tw.patches if isinstance(p, Rectangle)]
    (step,) = [p for p in tw.patches if isinstance(p, StepPatch)]
    values, edges, _ = step.get_data()
    width_px = tw.get_window_extent().width
    assert len(values) <= max(20, width_px / 4)
    lo, hi = tw.get_ylim()
    assert np.max(values) <= lo + COUNT_FRACTION * (hi - lo) * (1 + 1e-9)
    if tw.get_yscale() == "linear":
        assert np.sum(values) == pytest.approx(total_rows)


def test_binned_stratpd_counts_are_separate_bars_in_the_bottom_quarter():
    q = Quadratic(random_state=1).frame(20_000)
    r = daskpd.stratpd(q, target="y", feature="x1", max_bins=40)
    assert r.binned
    ax = r.plot()
    tw = _count_axes(ax)
    _assert_separate_low_bars(tw, len(r.x))
    assert tw.get_ylabel() == "rows per bin"
    heights = sorted(p.get_height() for p in tw.patches)
    np.testing.assert_allclose(heights, np.sort(r.count))
    assert ax.get_ylabel() == "partial dependence of y"


def test_ale_counts_are_separate_bars(cat_model):
    m, X, _ = cat_model
    ale = daskpd.ale(m, X, ["u"], bins=20)["u"]
    ax = ale.plot()
    _assert_separate_low_bars(_count_axes(ax), len(ale.x) - 1)


# ------------------------------------------------------------------ CatStratPD strip
@pytest.fixture(scope="module")
def four_groups():
    """200 categories in 4 disjoint groups (z separates them, so no leaf mixes groups)."""
    rng = np.random.default_rng(0)
    n = 40_000
    c = rng.integers(0, 200, n)
    z = (c // 50).astype(float)
    y = np.sin(c / 7.0) + 3 * z + rng.normal(0, 0.1, n)
    df = pd.DataFrame({"c": c.astype(str), "z": z, "y": y})
    return daskpd.catstratpd(df, target="y", feature="c", random_state=0)


def test_catstratpd_strip_with_200_categories_has_a_group_legend_and_low_counts(four_groups):
    r = four_groups
    assert r.n_groups == 4 and len(r.categories) == 200
    ax = r.plot()  # 200 > top_k: the strip
    pts = [c for c in ax.collections if isinstance(c, PathCollection)]
    assert len(pts) == 1 and len(pts[0].get_offsets()) == 200
    face = pts[0].get_facecolors()[:, :3]
    leg = ax.get_legend()
    assert leg is not None and "disjoint groups" in leg.get_title().get_text()
    texts = [t.get_text() for t in leg.get_texts()]
    assert len(texts) == 4 and all(t.startswith(f"group {i}: 50 cat.") for i, t in enumerate(texts))
    # each legend colour is the colour of its group's points
    order = np.argsort(r.pd, kind="stable")
    groups = r.group[order]
    for g, h in enumerate(leg.legend_handles):
        col = np.asarray(matplotlib.colors.to_rgb(h.get_color()))
        assert np.allclose(face[groups == g], col, atol=1e-6)
    assert len({tuple(np.round(c, 3)) for c in face}) == 4
    tw = _count_axes(ax)
    _assert_one_low_step_area(tw, np.asarray(r.count, dtype=float).sum())
    # named extremes stay readable: their text boxes do not overlap each other
    ax.figure.canvas.draw()
    rr = ax.figure.canvas.get_renderer()
    from matplotlib.text import Text

    assert len(ax.texts) == 10  # the 5 lowest and 5 highest, their text (not the leader lines) apart
    assert_no_overlap([Text.get_window_extent(t, rr) for t in ax.texts], "named categories")


def test_catstratpd_strip_with_many_groups_says_colours_repeat():
    rng = np.random.default_rng(1)
    n = 30_000
    c = rng.integers(0, 120, n)
    z = (c // 10).astype(float)  # 12 groups
    df = pd.DataFrame({"c": c.astype(str), "z": z, "y": 2 * z + rng.normal(0, 0.1, n) + (c % 10) * 0.1})
    r = daskpd.catstratpd(df, target="y", feature="c", random_state=0)
    assert r.n_groups == 12
    leg = r.plot(kind="strip").get_legend()
    texts = [t.get_text() for t in leg.get_texts()]
    assert len(texts) == 10 and texts[-1] == "3 more groups (colours repeat)"


# ------------------------------------------------------------------ compare
def test_comparison_colours_are_distinct(cat_model):
    m, X, _ = cat_model
    Xy = X.assign(price=m.predict(X))
    res = daskpd.compare(m, Xy, "u", target="price", stratpd=True, grid_resolution=10)
    ax = res.plot()
    lines = [ln for ln in ax.get_lines() if not ln.get_label().startswith("_")]
    assert len(lines) >= 4
    labs = [lab(ln.get_color()) for ln in lines]
    for (i, a), (j, b) in itertools.combinations(enumerate(labs), 2):
        assert np.linalg.norm(a - b) > 25, (lines[i].get_label(), lines[j].get_label())  # CIE76 delta E
    assert "price" in ax.get_ylabel()
