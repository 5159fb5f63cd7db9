"""The H-statistic's heat map at 2, 12 and 45 features (Agg, geometry measured with the
renderer): tick labels apart and at >= 8 pt, at most 30 features named (the title says
how many more), the cells' values inside their cells, the total bars level with the heat
map's rows, every text inside the figure.  The results are built from their dataclass
with a known generator (the layout depends on the sizes and names, not the estimator;
tests/model/test_h_statistic.py computes real ones and draws one)."""
from __future__ import annotations

import itertools

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import daskpd  # noqa: E402
from daskpd import HStatisticResult  # noqa: E402
from daskpd.plotting import MAX_LABELS  # noqa: E402


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


def result(k, trials=False):
    names = [f"feature-{i:02d}-with-a-rather-long-name" for i in range(k)]
    pairs = list(itertools.combinations(names, 2))
    rng = np.random.default_rng(k)
    h2 = rng.uniform(0, 0.6, len(pairs))
    tot = rng.uniform(0, 0.3, k)
    T = 5 if trials else None
    return HStatisticResult(pairs, h2, np.sqrt(h2), names, tot, np.sqrt(tot), {n: "numeric" for n in names},
                            n_points=500, n_rows=10_000, params={"band": [0.05, 0.95]},
                            trials_h2=None if T is None else h2 + rng.normal(0, 0.01, (T, len(pairs))),
                            trials_h2_total=None if T is None else tot + rng.normal(0, 0.01, (T, k)))


def inside(b, box):
    return box.x0 - 1 <= b.x0 and b.x1 <= box.x1 + 1 and box.y0 - 1 <= b.y0 and b.y1 <= box.y1 + 1


def overlap(a, b):
    return min(a.x1, b.x1) - max(a.x0, b.x0) > 0 and min(a.y1, b.y1) - max(a.y0, b.y0) > 0


@pytest.mark.parametrize("k", (2, 12, 45))
def test_heat_map_geometry(k):
    res = result(k, trials=k == 12)
    ax = res.plot()
    fig = ax.figure
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    shown = min(k, MAX_LABELS)
    assert ax.get_images()[0].get_array().shape == (shown, shown)
    for axis in (ax.xaxis, ax.yaxis):
        labs = [t for t in axis.get_ticklabels() if t.get_text()]
        assert len(labs) == shown and all(t.get_fontsize() >= 8 for t in labs)
        ext = [t.get_window_extent(r) for t in labs]
        for p, q in itertools.combinations(ext, 2):
            assert not overlap(p, q)
        assert all(inside(b, fig.bbox) for b in ext)
    assert inside(ax.title.get_window_extent(r), fig.bbox)
    assert (f"top {shown} of {k}" in ax.get_title()) == (k > MAX_LABELS)
    # the values sit in their cells, up to 12 features
    texts = ax.texts
    assert len(texts) == (shown * (shown - 1) if k <= 12 else 0)
    for t in texts:
        x, y = t.get_position()
        b = t.get_window_extent(r)
        cell = ax.transData.transform([[x - 0.5, y + 0.5], [x + 0.5, y - 0.5]])
        assert cell[0, 0] - 1 <= b.x0 and b.x1 <= cell[1, 0] + 1 and cell[0, 1] - 1 <= b.y0 and b.y1 <= cell[1, 1] + 1
    # the totals: one bar per row, level with the heat map's rows
    bars = [a for a in fig.axes if a is not ax and a.get_xlabel().startswith("total")]
    assert len(bars) == 1
    bx = bars[0]
    rects = bx.patches
    assert len(rects) == shown
    for i, rect in enumerate(rects):
        yc = bx.transData.transform([[0, rect.get_y() + rect.get_height() / 2]])[0, 1]
        row = ax.transData.transform([[0, i]])[0, 1]
        assert abs(yc - row) < 1.0, (i, yc, row)
    assert inside(bx.xaxis.label.get_window_extent(r), fig.bbox)
    assert len(bx.collections) == (1 if k == 12 else 0)  # the bands' error bars, with trials


def test_into_given_axes_and_a_computed_result():
    X = np.random.default_rng(0).uniform(-1, 1, (200, 3))
    import pandas as pd

    df = pd.DataFrame(X, columns=["a", "b", "c"])
    res = daskpd.h_statistic(lambda d: d["a"].to_numpy() * d["b"].to_numpy() + d["c"].to_numpy(), df,
                             n_points=100, progress=False)
    fig, ax = plt.subplots()
    out = res.plot(ax=ax)
    assert out is ax and len(fig.axes) == 2  # the heat map and its colour bar, no totals panel
    img = ax.get_images()[0].get_array()
    order = [t.get_text() for t in ax.get_yticklabels()]
    i, j = order.index("a"), order.index("b")
    assert img[i, j] == pytest.approx(res.h2[res.pairs.index(("a", "b"))])
