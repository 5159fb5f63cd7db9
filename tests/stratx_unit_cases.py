"""stratx 0.5's own unit cases, as pandas inputs (shared by the daskpd conformance tests and
the script that runs the reference on them).

Imports only numpy and pandas: ``tests/make_stratx_expected.py`` loads this module inside
the stratx venvs (which have no daskpd) to produce the expected outputs hard-coded in
``tests/_strat/test_stratx_cases.py``.

Source: the ``testing/`` folder of https://github.com/parrt/stratx (HEAD 97741af):
``test_strat.py``, ``test_slopes.py``, ``test_finite_diff.py`` (numeric) and
``test_catwise_leaves.py``, ``test_catmerge.py``, ``test_disjoint_catstrat.py``
(categorical).  Not included: ``test_nanavg_vectors.py`` and
``test_nanmerge_matrix_cols.py`` (arithmetic of two helper functions on bare vectors, no
data, no curve).

How each case fixes the stratification
--------------------------------------
In every case the stratifying tree sees exactly ONE column (``stratify_on``), as in
stratx's tests, where X has two columns and one of them is the feature.  A tree on a
single column has no random tie-break between features (scikit-learn's only source of
randomness with ``bootstrap=False, max_features=1.0``), so stratx's RandomForest(1 tree),
daskpd's ``tree_method="exact"`` (DecisionTreeRegressor) and its histogram tree (exact on
columns with <= 1023 values) all find the same leaves:

* ``test_strat`` / ``test_disjoint_catstrat`` / ``test_catwise_leaves``: the tests' own
  frames and ``min_samples_leaf``.
* ``test_slopes`` calls ``collect_discrete_slopes`` with ``min_samples_leaf=15`` (its
  ``check``'s default) on 2 rows: one leaf.  Run through ``partial_dependence`` with that
  leaf size and ``min_slopes_per_x=1`` (``test_strat``'s value; with stratx's default 5 the
  curve of a 2-row table is empty).
* ``test_finite_diff`` calls ``finite_differences(x, y)`` on one leaf's values: here x
  and y plus a constant stratifying column ``z`` (a constant column cannot be split: one
  leaf), ``min_samples_leaf=1``, ``min_slopes_per_x=1``.
* ``test_catmerge``'s matrix cases call ``avg_values_at_cat(leaf_deltas, leaf_counts,
  marginal_avg_y_per_cat)`` on hand-written matrices.  Each matrix is turned into rows:
  leaf ``j`` gets stratifier ``s = j``; category ``c`` with a delta ``d`` in leaf ``j``
  gets ``count`` rows (1 unless the test gives counts) with ``y = 10 * j + d``.  With
  ``min_samples_leaf=1`` a tree on ``s`` separates every leaf (y is never constant across
  two leaves), leaves come out in increasing ``s`` (depth-first, left first), and within
  each leaf the deltas from the lowest category are the test's column (the reference run
  checks this: ``leaf_deltas`` equals the test's matrix).  The marginal means the tests
  *invent* for their disjoint cases (e.g. ``[4, 8, 12, 2, 4]``) cannot come from any rows
  consistent with their deltas, so here the marginal means are those of the rows.
* ``test_catmerge``'s two temperature cases: ``toy_weather_data`` with
  ``np.random.seed(999)`` (n=9, p=4 and n=20, p=5) reads ``state_avgtemp.csv`` from the
  stratx repository; the generated rows are written out below (not the csv).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

nan = np.nan

SOURCE = "https://github.com/parrt/stratx testing/ at 97741af"


def _frame(**cols):
    return pd.DataFrame({k: list(v) for k, v in cols.items()})


def numeric_case(name, source, df, feature, stratify_on, min_samples_leaf, min_slopes_per_x=1, target="y"):
    return dict(name=name, source=source, kind="numeric", df=df, target=target, feature=feature,
                stratify_on=list(stratify_on), min_samples_leaf=min_samples_leaf, min_slopes_per_x=min_slopes_per_x)


def categorical_case(name, source, df, feature, stratify_on, min_samples_leaf, target="y", leaf_deltas=None):
    return dict(name=name, source=source, kind="categorical", df=df, target=target, feature=feature,
                stratify_on=list(stratify_on), min_samples_leaf=min_samples_leaf, leaf_deltas=leaf_deltas)


def frame_from_leaf_deltas(leaf_deltas, leaf_counts=None, level=10.0):
    """Rows whose leaves (stratifier ``s``) have exactly these per-category deltas.

    Leaf j (column j) -> s = j; category c (row c) with delta d -> ``leaf_counts[c, j]``
    rows (default 1 where d is not NaN) with y = level * j + d.
    """
    D = np.asarray(leaf_deltas, dtype=float)
    C = (~np.isnan(D)).astype(int) if leaf_counts is None else np.asarray(leaf_counts, dtype=int)
    s, cat, y = [], [], []
    for j in range(D.shape[1]):
        for c in range(D.shape[0]):
            for _ in range(C[c, j]):
                s.append(j)
                cat.append(c)
                y.append(level * j + D[c, j])
    return pd.DataFrame({"s": np.array(s, dtype="int64"), "cat": np.array(cat, dtype="int64"),
                         "y": np.array(y, dtype=float)})


def _matrix_case(name, source, leaf_deltas, leaf_counts=None):
    return categorical_case(name, source, frame_from_leaf_deltas(leaf_deltas, leaf_counts), "cat", ["s"], 1,
                            leaf_deltas=np.asarray(leaf_deltas, dtype=float))


# ------------------------------------------------------------------------- numeric

def numeric_cases():
    out = []
    T = "test_strat.py::"
    out.append(numeric_case("strat_binary_one_region", T + "test_binary_one_region",
                            _frame(x1=[1, 1], x2=[65, 60], y=[100, 130]), "x2", ["x1"], 2))
    out.append(numeric_case("strat_one_region", T + "test_one_region",
                            _frame(x1=[1, 1, 1], x2=[100, 101, 102], y=[10, 11, 12]), "x2", ["x1"], 3))
    out.append(numeric_case("strat_disjoint_regions", T + "test_disjoint_regions",
                            _frame(x1=[1, 1, 1, 5, 5, 5], x2=[100, 101, 102, 200, 201, 202],
                                   y=[10, 11, 12, 20, 19, 18]), "x2", ["x1"], 3))
    out.append(numeric_case("strat_disjoint_regions_with_isolated_single_x",
                            T + "test_disjoint_regions_with_isolated_single_x_in_between",
                            _frame(x1=[1, 1, 1, 3, 3, 3, 5, 5, 5], x2=[100, 101, 102, 150, 150, 150, 200, 201, 202],
                                   y=[10, 11, 12, 0, 0, 0, 20, 19, 18]), "x2", ["x1"], 3))
    S = "test_slopes.py::"
    out.append(numeric_case("slopes_2_discrete_records_positive_slope", S + "test_2_discrete_records_positive_slope",
                            _frame(x1=[1, 2], x2=[4, 5], y=[4, 7]), "x1", ["x2"], 15))
    out.append(numeric_case("slopes_unsupported_ignored", S + "test_unsupported_ignored",
                            _frame(x1=[1, 2], x2=[5, 5], y=[4, 7]), "x2", ["x1"], 15))
    out.append(numeric_case("slopes_2_discrete_records_negative_slope", S + "test_2_discrete_records_negative_slope",
                            _frame(x1=[1, 2], x2=[4, 5], y=[7, 4]), "x1", ["x2"], 15))
    out.append(numeric_case("slopes_sim_2cat_problem", S + "test_sim_2cat_problem",
                            _frame(x1=[1, 2], x2=[5, 5], y=[0, 30]), "x1", ["x2"], 15))
    F = "test_finite_diff.py::"
    for name, x, y in [("one_uniq_x", [1, 1], [5, 12]),
                       ("just_forward_diff_at_left", [1, 3], [5, 12]),
                       ("forward_diff_and_one_center", [1, 3, 4], [5, 12, 7]),
                       ("center_diff", [1, 3, 4, 7, 13], [5, 6, 8, 11, 15])]:
        out.append(numeric_case("fd_" + name, F + "test_" + name, _frame(z=[0] * len(x), x=x, y=y), "x", ["z"], 1))
    return out


# ------------------------------------------------------------------------- categorical

#: toy_weather_data(n=9, p=4) after np.random.seed(999) (stratx testing/test_catmerge.py)
WEATHER_9_4 = dict(
    dayofyear=[349, 358, 201, 226, 218, 17, 118, 265, 137],
    state=[0, 1, 2, 3, 3, 1, 3, 0, 2],
    temp=[96.9, 67.8, 86.07, 82.69, 81.89, 33.7, 71.89, 88.5, 79.67],
)
#: toy_weather_data(n=20, p=5) after np.random.seed(999)
WEATHER_20_5 = dict(
    dayofyear=[349, 358, 201, 226, 218, 17, 118, 265, 137, 177, 70, 67, 12, 12, 150, 229, 251, 307, 319, 328],
    state=[1, 3, 4, 3, 0, 1, 4, 3, 4, 0, 3, 2, 4, 4, 3, 1, 4, 2, 2, 0],
    temp=[66.9, 95.89, 81.27, 82.69, 83.8, 33.7, 72.97, 86.59, 74.87, 79.7, 67.09, 72.67, 62.37, 62.37, 75.09,
          54.9, 86.27, 96.67, 97.87, 94.8],
)


def categorical_cases():
    out = []
    W = "test_catwise_leaves.py::"
    out.append(categorical_case("cw_single_leaf", W + "test_single_leaf",
                                _frame(x1=[1, 1, 1, 1], x2=[3, 4, 4, 2], y=[5, 6, 5, 4]), "x2", ["x1"], 4))
    out.append(categorical_case("cw_two_leaves", W + "test_two_leaves",
                                _frame(x1=[1, 2, 1, 2], x2=[3, 4, 4, 2], y=[5, 6, 5, 4]), "x2", ["x1"], 2))
    out.append(categorical_case("cw_two_leaves_with_2nd_ignored", W + "test_two_leaves_with_2nd_ignored",
                                _frame(x1=[1, 1, 2, 2], x2=[3, 4, 4, 4], y=[5, 6, 7, 8]), "x2", ["x1"], 2))
    out.append(categorical_case("cw_three_leaves_no_overlap", W + "test_three_leaves_no_overlap",
                                _frame(x1=[1, 1, 3, 3, 4, 4], x2=[2, 3, 4, 5, 6, 7], y=[9, 7, 6, 5, 4, 3]),
                                "x2", ["x1"], 2))
    M = "test_catmerge.py::"
    out.append(_matrix_case("cm_single_leaf", M + "test_single_leaf", [[0], [1], [2], [nan], [0]]))
    out.append(_matrix_case("cm_two_leaves_with_one_refcat", M + "test_two_leaves_with_one_refcat",
                            [[0, 0], [1, 1], [2, 3], [nan, 2], [0, nan], [nan, nan]]))
    out.append(_matrix_case("cm_two_leaves_with_two_refcats", M + "test_two_leaves_with_two_refcats",
                            [[0, nan], [1, 0], [2, 3], [nan, 2], [0, nan], [nan, nan]]))
    out.append(_matrix_case("cm_merging_gets_negative_values", M + "test_merging_gets_negative_values",
                            [[0, nan], [1, nan], [2, 5], [nan, 0], [0, nan]]))
    out.append(_matrix_case("cm_two_leaves_with_non_0_and_1_catcodes", M + "test_two_leaves_with_non_0_and_1_catcodes",
                            [[nan, nan], [nan, nan], [0, nan], [5, nan], [1, 0], [2, 3], [nan, 7], [0, nan],
                             [nan, nan]]))
    out.append(_matrix_case("cm_two_leaves_with_disconnected_2nd_leaf", M + "test_two_leaves_with_disconnected_2nd_leaf",
                            [[0, nan], [1, nan], [2, nan], [nan, 0], [nan, 3]],
                            [[1, 0], [1, 0], [5, 0], [0, 3], [0, 2]]))
    out.append(_matrix_case("cm_3_leaves_disconnected_2nd_then_leaf_conn_to_disconnected",
                            M + "test_3_leaves_with_disconnected_2nd_leaf_followed_by_leaf_conn_to_disconnected_leaf",
                            [[0, nan, nan], [1, nan, nan], [nan, 0, nan], [nan, 3, 0], [nan, 3, 0], [4, nan, nan],
                             [5, nan, nan]]))
    out.append(_matrix_case("cm_3_leaves_disconnected_2nd_then_leaf_conn_to_first",
                            M + "test_3_leaves_with_disconnected_2nd_leaf_followed_by_leaf_conn_to_first_leaf",
                            [[0, nan, nan], [1, nan, nan], [nan, 0, nan], [nan, 3, nan], [nan, 3, nan], [4, nan, 0],
                             [5, nan, 1]]))
    out.append(_matrix_case("cm_3_leaves_with_2nd_incorporated_in_pass_2",
                            M + "test_3_leaves_with_2nd_incorporated_in_pass_2",
                            [[0, nan, nan], [1, nan, nan], [nan, 0, nan], [nan, 3, nan], [nan, 3, 0], [4, nan, 7],
                             [5, nan, 8], [6, nan, nan], [nan, 4, nan]]))
    out.append(categorical_case("cm_4state_temperature", M + "test_4state_temperature",
                                pd.DataFrame(WEATHER_9_4), "state", ["dayofyear"], 3, target="temp"))
    out.append(categorical_case("cm_temperature", M + "test_temperature",
                                pd.DataFrame(WEATHER_20_5), "state", ["dayofyear"], 5, target="temp"))
    D = "test_disjoint_catstrat.py::"
    out.append(categorical_case("dj_binary_one_region", D + "test_binary_one_region",
                                _frame(x1=[1, 1], x2=[3, 4], y=[100, 130]), "x2", ["x1"], 2))
    out.append(categorical_case("dj_one_region", D + "test_one_region",
                                _frame(x1=[1, 1, 1], x2=[3, 4, 5], y=[10, 15, 20]), "x2", ["x1"], 3))
    out.append(categorical_case("dj_disjoint_regions", D + "test_disjoint_regions",
                                _frame(x1=[1, 1, 1, 3, 3, 3], x2=[1, 2, 3, 5, 6, 7], y=[10, 13, 16, 50, 60, 70]),
                                "x2", ["x1"], 3))
    out.append(categorical_case("dj_disjoint_regions_with_isolated_single_x",
                                D + "test_disjoint_regions_with_isolated_single_x_in_between",
                                _frame(x1=[1, 1, 1, 3, 3, 3, 5, 5, 5], x2=[1, 2, 3, 4, 4, 4, 5, 6, 7],
                                       y=[10, 11, 12, 9, 7, 8, 20, 19, 18]), "x2", ["x1"], 3))
    yearmade = [1, 1, 1, 3, 3, 3, 5, 5, 5, 7, 7, 7]
    modelid = [1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15]
    out.append(categorical_case("dj_sawtooth_bulldozer", D + "test_sawtooth_derivative_disjoint_regions_bulldozer",
                                _frame(YearMade=yearmade, ModelID=modelid,
                                       y=[10, 9, 8, 12, 13, 14, 6, 5, 4, 16, 17, 18]), "ModelID", ["YearMade"], 3))
    out.append(categorical_case("dj_sawtooth_bulldozer_some_negative",
                                D + "test_sawtooth_derivative_disjoint_regions_bulldozer_some_negative",
                                _frame(YearMade=yearmade, ModelID=modelid,
                                       y=[0, -1, -2, 2, 3, 4, -4, -5, -6, 6, 7, 8]), "ModelID", ["YearMade"], 3))
    return out


def all_cases():
    return numeric_cases() + categorical_cases()
