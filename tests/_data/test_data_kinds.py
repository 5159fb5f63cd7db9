"""daskpd._data.kinds and open_request: one kind rule for every method."""
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from sklearn.linear_model import LinearRegression

import daskpd
from daskpd._data.kinds import datetime_message, kind_of
from daskpd._data.options import ReadOptions
from daskpd._data.request import open_request
from daskpd._errors import DataError


@pytest.fixture
def frame():
    return pd.DataFrame({
        "f": [1.5, 2.5], "i": [1, 2], "b": [True, False], "s": ["x", "y"], "c": pd.Categorical(["u", "v"]),
        "t": pd.to_datetime(["2026-01-01", "2026-01-02"]), "S": pd.array(["x", "y"], dtype="string"),
        "y": [0.0, 1.0],
    })


def test_kinds_from_dtypes(frame):
    got = {c: kind_of(t) for c, t in frame.dtypes.items()}
    assert got == {"f": "numeric", "i": "numeric", "b": "categorical", "s": "categorical", "c": "categorical",
                   "t": "datetime", "S": "categorical", "y": "numeric"}
    assert kind_of(pd.ArrowDtype(pa.struct([("a", pa.int64())]))) == "unsupported"
    assert kind_of(np.dtype(object), pa.list_(pa.int64())) == "unsupported"
    assert kind_of(np.dtype(object), pa.binary()) == "unsupported"


def test_request_kinds_declared_and_checked(frame):
    r = open_request(frame, "y", ["f", "i", "b", "s", "c", "S"])
    assert r.kinds == {"f": "numeric", "i": "numeric", "b": "categorical", "s": "categorical", "c": "categorical",
                       "S": "categorical"}
    assert open_request(frame, "y", ["i", "f"], read=ReadOptions(categorical=["i"])).kinds == {"i": "categorical", "f": "numeric"}
    with pytest.raises(DataError, match="parameter categorical_features names column 'nope' not found"):
        open_request(frame, "y", ["i"], read=ReadOptions(categorical=["nope"]))
    # defaults: every column but the target, the datetime left out with its reason
    d = open_request(frame, "y")
    assert d.features == ["f", "i", "b", "s", "c", "S"] and d.left_out == {"t": "datetime"}
    assert d.stratify_on == ["f", "i", "b", "s", "c", "t", "S"]  # dates stratify, as numbers


def test_datetime_refused_with_one_message(frame):
    for call in (lambda: open_request(frame, "y", ["t"]),
                 lambda: daskpd.stratpd(frame, target="y", feature="t"),
                 lambda: daskpd.catstratpd(frame, target="y", feature="t"),
                 lambda: daskpd.importances(frame, target="y", features=["t"])):
        with pytest.raises(DataError) as e:
            call()
        assert str(e.value) == datetime_message("t", frame.dtypes["t"])


def test_a_boolean_is_categorical_in_every_method():
    rng = np.random.default_rng(0)
    n = 4_000
    df = pd.DataFrame({"flag": rng.random(n) < 0.3, "a": rng.normal(size=n)})
    df["y"] = 2.0 * df.flag + df.a + rng.normal(scale=0.1, size=n)
    model = LinearRegression().fit(df[["flag", "a"]], df.y)
    assert daskpd.importances(df, target="y").loc["flag", "kind"] == "categorical"
    assert daskpd.catstratpd(df, target="y", feature="flag").kind == "categorical"
    assert daskpd.partial_dependence(model, df, "flag", method="brute").kind == "categorical"
    assert daskpd.ale(model, df, "flag").kind == "categorical"
    # named in StratPD (a method for numbers), a boolean is 0/1
    res = daskpd.stratpd(df, target="y", feature="flag", min_samples_leaf=30)
    assert res.kind == "numeric" and list(res.x) == [0.0, 1.0] and res.pd[1] == pytest.approx(2.0, abs=0.1)
