"""Issue 13: an interval without a slope is drawn as a dashed flat step, not as curve."""
from __future__ import annotations

import numpy as np
import pandas as pd

import daskpd
from daskpd.plotting.strat import curve_pieces


def test_gap_is_a_dashed_flat_step():
    # x in {0,1,2} in one stratum, {10,11,12} in the other: nothing covers [2, 10)
    x = np.array([0, 1, 2, 10, 11, 12] * 3, dtype=float)
    z = (x >= 10).astype(float)
    df = pd.DataFrame({"x": x, "z": z, "y": x ** 2 + 100 * z})
    res = daskpd.stratpd(df, target="y", feature="x", min_samples_leaf=1, min_slopes_per_x=1, max_bins=None,
                         honest=False)  # stratx's leaves: the hand-made strata
    np.testing.assert_allclose(res.pd, [0, 1, 4, 4, 25, 48])
    assert res.params["support"]["empty_intervals"] == 1
    assert "flat over 1 intervals no leaf slope covers" in res.summary()
    solid, gaps = curve_pieces(res)
    assert solid == [(0, 2), (3, 5)] and gaps == [(2, 3)]
    ax = res.plot(show_segments=False, show_counts=False)
    lines = ax.get_lines()
    dashed = [ln for ln in lines if ln.get_linestyle() == "--"]
    full = [ln for ln in lines if ln.get_linestyle() == "-"]
    assert len(dashed) == 1
    np.testing.assert_allclose(dashed[0].get_xdata(), [2, 10])
    np.testing.assert_allclose(dashed[0].get_ydata(), [4, 4])
    # no solid line crosses the gap
    for ln in full:
        xs = np.asarray(ln.get_xdata(), float)
        assert not ((xs <= 2).any() and (xs >= 10).any())
    import matplotlib.pyplot as plt

    plt.close("all")


def test_unsupported_position_inside_a_gap_is_skipped():
    # slopes over [1, 2) and [4, 5); x=3 sits in a single-x leaf: unsupported, not drawn
    df = pd.DataFrame({"x": [1.0, 2, 3, 3, 4, 5], "s": [0.0, 0, 1, 1, 2, 2], "y": [1.0, 2, 9, 9, 5, 7]})
    res = daskpd.stratpd(df, target="y", feature="x", features=["s"], min_samples_leaf=1, min_slopes_per_x=1, max_bins=None,
                         honest=False,
                         tree_method="exact")
    np.testing.assert_array_equal(res.supported, [True, True, False, True, True])
    solid, gaps = curve_pieces(res)
    assert solid == [(0, 1), (3, 4)] and gaps == [(1, 3)]
    assert res.params["support"]["unsupported_inside"] == 1
