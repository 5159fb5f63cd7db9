"""A flat effect looks flat for the model-based curves too: a PD, ICE's average, ALE or
marginal curve not distinguishable from flat (``is_flat()``: a flat line fits its
simultaneous band) is drawn on a value axis spanning at least ``FLAT_SPAN`` standard
deviations of the model's response (``params["response_std"]``, measured in the same pass
as the trials) -- of the target for a marginal plot of the target
(``params["target_std"]``) -- while a real effect keeps the limits its data give.
Measured on the drawn figure (Agg renderer)."""
from __future__ import annotations

import warnings

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

import daskpd  # noqa: E402
from daskpd.model._passes import ResponseSpread  # noqa: E402
from daskpd.plotting.bands import FLAT_SPAN  # noqa: E402

COLS = ["x1", "x2", "noise"]


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


def model(X):
    """3 x1 + x2, and a term in ``noise`` whose effect averages to nothing over x2."""
    X = np.asarray(X, dtype="float64")
    return 3 * X[:, 0] + X[:, 1] + 0.5 * X[:, 1] * (X[:, 2] - 0.5)


@pytest.fixture(scope="module")
def data():
    r = np.random.default_rng(1)
    n = 5000
    df = pd.DataFrame({"x1": r.uniform(0, 10, n), "x2": r.normal(size=n), "noise": r.uniform(size=n)})
    df["y"] = 3 * df.x1 + df.x2 + r.normal(0, 2, n)
    return df


def run(method, data, feature, n_trials=20):
    res = _run(method, data, feature, n_trials)
    return next(iter(res.values())) if isinstance(res, dict) else res


def _run(method, data, feature, n_trials):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if method == "pd":
            return daskpd.partial_dependence(model, data, [feature], columns=COLS, n_trials=n_trials, progress=False)
        if method == "ice":
            return daskpd.ice(model, data, feature, columns=COLS, n_trials=n_trials, progress=False)
        if method == "ale":
            return daskpd.ale(model, data, [feature], columns=COLS, n_trials=n_trials, progress=False)
        return daskpd.marginal(data, [feature], target="y", model=model, columns=COLS, n_trials=n_trials,
                               progress=False)


def drawn(res, ax):
    """The values the curve (and its band) put on the axes."""
    b = res.band()
    v = np.concatenate([np.asarray(res.pd, dtype="float64"), b["lo"], b["hi"]])
    if hasattr(res, "lines"):
        v = np.concatenate([v, np.asarray(res.lines, dtype="float64").ravel()])
    if getattr(res, "y_std", None) is not None:
        v = np.concatenate([v, res.y_mean - res.y_std, res.y_mean + res.y_std])
    v = v[np.isfinite(v)]
    return v.min(), v.max()


@pytest.mark.parametrize("method", ["pd", "ice", "ale", "marginal"])
def test_a_flat_model_curve_is_drawn_on_the_responses_scale(data, method):
    res = run(method, data, "noise")
    # every k-th row's predictions (at most SPREAD_ROWS a partition): close to every row's spread
    assert res.params["response_std"] == pytest.approx(model(data[COLS].to_numpy()).std(), rel=0.03)
    std = res.params.get("target_std") or res.params["response_std"]
    if method == "marginal":  # its band is on the target's means: the target's spread
        assert res.params["target_std"] == pytest.approx(data.y.std(ddof=0), rel=1e-6)
    assert res.is_flat() and "NOT distinguishable from flat" in res.summary()
    ax = res.plot()
    ax.figure.canvas.draw()
    lo, hi = ax.get_ylim()
    assert hi - lo >= FLAT_SPAN * std - 1e-9  # not a zoom onto the wiggles
    dlo, dhi = drawn(res, ax)
    assert lo <= dlo and hi >= dhi  # nothing drawn is cut off
    curve = np.nanmax(res.pd) - np.nanmin(res.pd)
    assert curve < 0.25 * (hi - lo)  # the wiggles take a small part of the axis


@pytest.mark.parametrize("method", ["pd", "ice", "ale", "marginal"])
def test_a_real_model_effect_keeps_the_limits_of_its_data(data, method):
    res = run(method, data, "x1")
    assert not res.is_flat()
    ax = res.plot()
    lo, hi = ax.get_ylim()
    dlo, dhi = drawn(res, ax)
    assert lo <= dlo and hi >= dhi
    assert (hi - lo) <= 1.25 * (dhi - dlo)  # matplotlib's margins, no more


def test_flat_trials_are_faint_and_never_vertical(data):
    res = run("pd", data, "noise")
    ax = res.plot(show_trials=True)
    ax.figure.canvas.draw()
    trials = [ln for ln in ax.get_lines() if ln.get_alpha() is not None and ln.get_alpha() < 0.3]
    assert len(trials) == 20
    to_px = ax.transData.transform
    for ln in trials:
        px = to_px(np.c_[ln.get_xdata(), ln.get_ydata()])
        dx, dy = np.diff(px[:, 0]), np.abs(np.diff(px[:, 1]))
        assert dx.min() >= 1.0 and (dy / dx).max() < 40


def test_the_response_spread_without_trials_and_its_merge(data):
    res = run("pd", data, "noise", n_trials=1)
    assert "response_std" not in res.params  # the pass without trials is unchanged
    r = np.random.default_rng(2)
    p, w = r.normal(3, 2, 1000), r.uniform(0.5, 2, 1000)

    def part(a, b):
        m = np.average(p[a:b], weights=w[a:b])
        return ResponseSpread(w[a:b].sum(), m, float((w[a:b] * (p[a:b] - m) ** 2).sum()))

    merged = ResponseSpread.combine([part(0, 10), ResponseSpread(), part(10, 700), part(700, 1000)])
    full = np.sqrt(np.average((p - np.average(p, weights=w)) ** 2, weights=w))
    assert merged.std() == pytest.approx(full, rel=1e-12)
    assert ResponseSpread().std() is None
