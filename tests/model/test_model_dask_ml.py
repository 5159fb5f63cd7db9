"""Models trained with dask-ml are the ``model`` of every model-based function: its
wrappers give their fitted estimator (a tree model gets the exact tree engine), its own
estimators predict on the partitions."""
import warnings

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from sklearn.ensemble import GradientBoostingRegressor
from sklearn.linear_model import SGDRegressor

import daskpd

dask_ml = pytest.importorskip("dask_ml", reason="dask-ml is in the test extras")
from dask_ml.linear_model import LinearRegression  # noqa: E402
from dask_ml.wrappers import Incremental, ParallelPostFit  # noqa: E402


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    n = 4_000
    df = pd.DataFrame({"a": rng.normal(size=n), "b": rng.uniform(-2, 2, size=n)})
    df["y"] = 2.0 * df.a + df.b ** 2 + rng.normal(scale=0.1, size=n)
    return df


CALLS = {
    "partial_dependence": lambda m, X, **kw: daskpd.partial_dependence(m, X, "a", method="brute", **kw),
    "ice": lambda m, X, **kw: daskpd.ice(m, X, "a", **kw),
    "ale": lambda m, X, **kw: daskpd.ale(m, X, "a", **kw),
    "marginal": lambda m, X, **kw: daskpd.marginal(X, "a", model=m, **kw),
    "pd_variance": lambda m, X, **kw: daskpd.pd_variance(m, X, **kw),
}


def _same(a, b):
    fa, fb = a.to_frame(), b.to_frame()
    pd.testing.assert_frame_equal(fa, fb)


def _models(df):
    X, y = df[["a", "b"]], df["y"]
    gb = GradientBoostingRegressor(n_estimators=15, max_depth=3, random_state=0)
    ppf = ParallelPostFit(GradientBoostingRegressor(n_estimators=15, max_depth=3, random_state=0)).fit(X, y)
    inc = Incremental(SGDRegressor(random_state=0, max_iter=5, tol=None))
    inc.fit(dd.from_pandas(X, npartitions=2).to_dask_array(lengths=True),
            dd.from_pandas(y, npartitions=2).to_dask_array(lengths=True))
    lin = LinearRegression().fit(X.to_numpy(), y.to_numpy())
    return {"ParallelPostFit": (ppf, gb.fit(X, y), None), "Incremental": (inc, inc.estimator_, ["a", "b"]),
            "LinearRegression": (lin, lin, ["a", "b"])}


@pytest.mark.parametrize("method", sorted(CALLS))
def test_dask_ml_models_in_every_model_based_function(data, method):
    X = data[["a", "b"]]
    for name, (model, plain, columns) in _models(data).items():
        kw = {"progress": False} if columns is None else {"progress": False, "columns": columns}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = CALLS[method](model, X, **kw)
            ref = CALLS[method](plain, X, **kw)
        _same(got, ref)
        assert np.isfinite(np.asarray(got.to_frame().select_dtypes("number"), dtype=float)).any(), name


def test_a_tree_model_wrapped_by_dask_ml_gets_the_tree_engine(data):
    X, y = data[["a", "b"]], data["y"]
    ppf = ParallelPostFit(GradientBoostingRegressor(n_estimators=15, max_depth=3, random_state=0)).fit(X, y)
    fast = daskpd.partial_dependence(ppf, X, "a", method="recursion", engine="tree", progress=False)
    exact = daskpd.partial_dependence(ppf.estimator, X, "a", method="recursion", engine="tree", progress=False)
    np.testing.assert_array_equal(fast.pd, exact.pd)
