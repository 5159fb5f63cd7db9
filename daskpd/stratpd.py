"""StratPD for numeric features: the public function.

The pipeline (sample, trees, one scan, curves finished next to the data) is
:mod:`daskpd._strat.pipeline`; the finish (slopes, their average, the integral) is
:mod:`daskpd._strat.numeric`.
"""
from __future__ import annotations

import warnings

from ._strat.numeric import empty_curve_message
from ._strat.pipeline import check_int, run_strat
from ._strat.trees import DEFAULT_MAX_BINS, DEFAULT_SAMPLE_SIZE, DEFAULT_TREE_METHOD
from .io import DataError
from .results import StratPDResult

__all__ = ["stratpd", "driver_side"]


def stratpd(
    data,
    target: str,
    feature: str,
    *,
    features=None,
    min_samples_leaf: int = 15,
    min_slopes_per_x: int = 5,
    sample_size: int = DEFAULT_SAMPLE_SIZE,
    max_bins: int | None = DEFAULT_MAX_BINS,
    tree_method: str = DEFAULT_TREE_METHOD,
    random_state: int = 0,
    progress=None,
    storage_options: dict | None = None,
    filters=None,
) -> StratPDResult:
    """Model-free partial dependence of ``target`` on numeric ``feature`` (StratPD).

    Parameters
    ----------
    data : pandas DataFrame, dask DataFrame, or parquet path / glob / directory / URL
    target : str
        Numeric response column.
    feature : str
        Numeric (or boolean) column whose partial dependence is wanted.  For a
        categorical column use :func:`daskpd.catstratpd`.
    features : list of str, optional
        Columns the stratifying tree may use (default: every column but target);
        ``feature`` itself is always excluded.  Non-numeric ones are encoded for
        the tree (categories as codes learned from the sample, dates as numbers);
        missing values are kept and the tree routes them.
    min_samples_leaf : int, default 15
        Leaf size of the stratifying tree (fitted on the sample).
    min_slopes_per_x : int, default 5
        Positions averaging fewer leaf slopes are unsupported.
    sample_size : int, default 200,000
        Rows (bottom-k by seeded row hash) used to fit the tree; all rows if fewer.
    max_bins : int or None, default 1000
        If ``feature`` has more distinct values than this in the sample, it is cut into
        this many quantile bins (edges from the sample) and each bin is placed at the
        mean x of its rows; ``None`` never bins.  Integer-like features with few values
        keep their exact values.
    tree_method : {"hist", "exact"}, default "hist"
        How the stratifying tree is grown.  "hist": daskpd's histogram tree (columns
        cut into at most 1023 bins on the sample -- exact for columns with at most 1023
        distinct values -- and grown to full size; about 4x faster to fit).  "exact":
        scikit-learn's ``DecisionTreeRegressor`` (exact thresholds, as stratx).
    random_state : int, default 0
        Seeds the sample, the tree and the plotted segment sample.
    progress : bool or None
        Progress on stderr: None/True (default): a bar on a terminal, one line per
        stage (tasks done, elapsed time; no carriage returns) in a log or pipe;
        "bar" / "log" force a form; False: nothing.
    storage_options, filters
        Passed to ``dask.dataframe.read_parquet`` for path inputs.

    Returns
    -------
    StratPDResult
    """
    min_slopes_per_x = check_int("min_slopes_per_x", min_slopes_per_x, 1)
    if not isinstance(feature, str):
        raise DataError(f"feature must be a column name (str); got {feature!r}")
    run = run_strat(data, target, [feature], stratify_on=features, expect_kind="numeric",
                    min_samples_leaf=min_samples_leaf, sample_size=sample_size, max_bins=max_bins,
                    tree_method=tree_method, random_state=random_state, progress=progress,
                    storage_options=storage_options, filters=filters,
                    finish_options={"min_slopes_per_x": min_slopes_per_x})
    return driver_side(run, run.results[feature], min_slopes_per_x=min_slopes_per_x)


def driver_side(run, res: StratPDResult, *, min_slopes_per_x: int) -> StratPDResult:
    """What a curve finished on a worker still needs on the driver: the run's timings,
    and the empty-curve warning where the user sees it."""
    res.params["timings"] = {k: round(v, 4) for k, v in run.timings.items()}
    message = empty_curve_message(res, min_slopes_per_x)
    if message:
        warnings.warn(message, UserWarning, stacklevel=3)
    return res
