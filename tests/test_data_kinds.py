"""daskpd._data.kinds: one resolution of feature kinds from dtypes."""
import pandas as pd
import pytest

from daskpd._data.kinds import datetime_message, resolve_kinds
from daskpd._errors import DataError


@pytest.fixture
def dtypes():
    return pd.DataFrame({
        "f": [1.5], "i": [1], "b": [True], "s": ["x"], "c": pd.Categorical(["u"]),
        "t": pd.to_datetime(["2026-01-01"]), "S": pd.array(["x"], dtype="string"),
    }).dtypes


def test_kinds_from_dtypes(dtypes):
    got = resolve_kinds(dtypes, ["f", "i", "b", "s", "c", "S"])
    assert got == {"f": "numeric", "i": "numeric", "b": "numeric", "s": "categorical", "c": "categorical",
                   "S": "categorical"}


def test_declared_categorical_overrides_and_must_exist(dtypes):
    assert resolve_kinds(dtypes, ["i", "f"], categorical=["i"]) == {"i": "categorical", "f": "numeric"}
    with pytest.raises(DataError, match="nope"):
        resolve_kinds(dtypes, ["i"], categorical=["nope"])


def test_datetime_refused_with_one_message(dtypes):
    with pytest.raises(DataError) as e:
        resolve_kinds(dtypes, ["t"])
    assert str(e.value) == datetime_message("t", dtypes["t"]) and "'t'" in str(e.value)
