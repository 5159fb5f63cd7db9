"""A flat effect looks flat: a StratPD / CatStratPD curve not distinguishable from flat (a
flat line fits its simultaneous band) is drawn on a value axis spanning at least
``FLAT_SPAN`` standard deviations of the target (``params["target_std"]``, from the tree
sample), not zoomed onto its noise; trial curves are faint lines whose segments are never
vertical, and leaf slope segments are short ticks, not streaks across the axes.  Measured
on the drawn figure (Agg renderer)."""
from __future__ import annotations

import warnings

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from matplotlib.collections import LineCollection  # noqa: E402

import daskpd  # noqa: E402
from daskpd.plotting.bands import FLAT_SPAN, flat_limits, is_flat  # noqa: E402
from daskpd.plotting.strat import SEGMENT_RISE  # noqa: E402


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def data():
    """y = 3 x1 + x2 + noise and a column of pure noise (its true effect: none)."""
    r = np.random.default_rng(1)
    n = 5000
    df = pd.DataFrame({"x1": r.uniform(0, 10, n), "x2": r.normal(size=n), "noise": r.uniform(size=n)})
    df["y"] = 3 * df.x1 + df.x2 + r.normal(0, 2, n)
    df["cn"] = pd.cut(df.noise, 8, labels=list("abcdefgh")).astype(str)
    return df


def quiet(func, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return func(*args, **kwargs)


def test_a_noise_curve_is_drawn_on_the_targets_scale_with_faint_trials_and_no_streaks(data):
    res = quiet(daskpd.stratpd, data, target="y", feature="noise", features=["x1", "x2", "noise"], n_trials=10,
                progress=False)
    std = res.params["target_std"]
    assert std == pytest.approx(data.y.std(), rel=1e-12)  # the tree sample is every row here
    assert is_flat(res)
    ax = res.plot(show_trials=True)
    fig = ax.figure
    fig.canvas.draw()
    lo, hi = ax.get_ylim()
    assert hi - lo >= FLAT_SPAN * std - 1e-9  # not a zoom onto the wiggles
    curve_range = np.nanmax(res.pd[res.supported]) - np.nanmin(res.pd[res.supported])
    assert curve_range < 0.5 * (hi - lo)  # the noise takes under half the axis
    to_px = ax.transData.transform
    trials = [ln for ln in ax.get_lines() if ln.get_alpha() is not None and ln.get_alpha() < 0.3]
    assert 1 <= len(trials) <= 10
    for ln in trials:
        px = to_px(np.c_[ln.get_xdata(), ln.get_ydata()])
        dx, dy = np.diff(px[:, 0]), np.abs(np.diff(px[:, 1]))
        assert dx.min() >= 1.0, "a trial segment narrower than a pixel: a vertical streak"
        assert (dy / dx).max() < 40  # steeper than ~88 degrees would read as vertical
    (segs,) = [c for c in ax.collections if isinstance(c, LineCollection)]
    rise = np.array([abs(s[1, 1] - s[0, 1]) for s in segs.get_segments()])
    assert len(rise) and rise.max() <= SEGMENT_RISE * (hi - lo) * (1 + 1e-9)


def strat_result(effect: float, spread: float, std: float = 10.0):
    """A StratPD result of a known curve (``effect`` x over [0, 1]) and 20 trials around
    it (``spread``: their noise), the target's standard deviation ``std``."""
    from daskpd import StratPDResult

    x = np.linspace(0, 1, 200)
    pdv = effect * x
    r = np.random.default_rng(0)
    trials = pdv + r.normal(0, spread, (20, len(x)))
    trials -= trials[:, :1]
    n = len(x)
    return StratPDResult(feature="f", target="y", x=x, pd=pdv, slope=np.full(n, effect), slope_count=np.full(n, 20),
                         count=np.full(n, 50.0), supported=np.ones(n, bool), n_rows=10_000, n_used=10_000,
                         n_ignored=0, n_missing_x=0, n_bad_y=0, n_leaves=50, binned=False,
                         params={"min_slopes_per_x": 5, "target_std": std}, trials_pd=trials)


def test_a_real_effect_keeps_its_own_scale():
    real = strat_result(effect=2.0, spread=0.05)  # the band far narrower than the curve's rise
    assert not is_flat(real) and flat_limits(real, -1.0, 1.0) == (-1.0, 1.0)
    lo, hi = real.plot(show_segments=False).get_ylim()
    assert hi - lo < FLAT_SPAN * 10.0 and hi - lo < 3.0  # zoomed onto the curve: its effect is real
    flat = strat_result(effect=0.2, spread=0.5)
    assert is_flat(flat)
    lo, hi = flat.plot(show_segments=False).get_ylim()
    assert hi - lo == pytest.approx(FLAT_SPAN * 10.0)


@pytest.mark.parametrize("kind", ["bar", "strip"])
def test_flat_categorical_effects_on_the_targets_scale(data, kind):
    # 30 trials: the flat test's simultaneous band needs a few more than 10 over 8 categories
    res = quiet(daskpd.catstratpd, data, target="y", feature="cn", features=["x1", "x2", "cn"], n_trials=30,
                progress=False)
    assert is_flat(res)
    ax = res.plot(kind=kind)
    lo, hi = ax.get_xlim() if kind == "bar" else ax.get_ylim()
    assert hi - lo >= FLAT_SPAN * res.params["target_std"] - 1e-9
    b = res.band()
    assert lo <= np.nanmin(b["lo"]) and hi >= np.nanmax(b["hi"])  # the band is never cut off
