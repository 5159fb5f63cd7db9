"""The default feature set: constant / empty columns and hive partition keys are left
out with one counted warning; a feature named explicitly is still used, and a constant
one named explicitly raises a DataError naming it."""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import daskpd
from daskpd._data.hive import partition_keys
from daskpd._importance import strat_curves_and_importances
from daskpd import DataError

def frame(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"x1": rng.uniform(size=n), "x2": rng.uniform(size=n),
                       "const": 7.0, "empty": np.nan, "flag": "same"})
    df["y"] = 3 * df.x1 + df.x2 + rng.normal(0, 0.05, n)
    return df


def test_constant_and_empty_columns_are_left_out_of_the_default_features():
    with pytest.warns(UserWarning) as rec:
        res = strat_curves_and_importances(frame(), target="y", progress=False)
    notes = [str(w.message) for w in rec if "left out of the default features" in str(w.message)]
    assert notes == ["importances: 3 of 5 columns left out of the default features: 2 constant ('const', 'flag'); "
                     "1 empty ('empty'); name them in features= to score them"]
    assert sorted(res.table.index) == ["x1", "x2"]
    assert res.params["skipped_features"] == {"const": "constant", "empty": "empty", "flag": "constant"}
    t = daskpd.importances(frame(), target="y", progress=False)  # the table function, too
    assert sorted(t.index) == ["x1", "x2"]


def test_a_constant_feature_named_explicitly_still_raises():
    with pytest.raises(DataError, match="feature 'const' is constant"):
        strat_curves_and_importances(frame(), target="y", features=["x1", "const"], progress=False)
    with pytest.raises(DataError, match="feature 'const' is constant"):
        daskpd.stratpd(frame(), target="y", feature="const")


def test_every_default_feature_constant_is_an_error():
    df = frame()[["const", "flag", "y"]]
    with pytest.raises(DataError, match="every feature is constant or empty"):
        strat_curves_and_importances(df, target="y", progress=False)


def write_lake(root: Path, years=(2010, 2011, 2012), n=2000) -> Path:
    rng = np.random.default_rng(1)
    for y in years:
        d = root / f"sale_year={y}" / "state=ok"
        d.mkdir(parents=True)
        df = pd.DataFrame({"x1": rng.uniform(size=n), "x2": rng.uniform(size=n)})
        df["y"] = 2 * df.x1 + df.x2 + 0.1 * (y - 2010) + rng.normal(0, 0.05, n)
        df.to_parquet(d / "part-0.parquet", index=False)
    return root


def test_partition_keys_of_a_hive_lake(tmp_path):
    lake = write_lake(tmp_path / "lake")
    assert partition_keys(str(lake)) == ["sale_year", "state"]
    assert partition_keys(str(lake) + "/") == ["sale_year", "state"]
    assert partition_keys(str(lake / "sale_year=2011")) == ["state"]
    assert partition_keys(str(lake / "sale_year=201[12]" / "*" / "*.parquet")) == ["sale_year", "state"]
    assert partition_keys(frame()) == []
    flat = tmp_path / "flat"
    flat.mkdir()
    frame().to_parquet(flat / "a.parquet")
    assert partition_keys(str(flat)) == [] and partition_keys(str(flat / "a.parquet")) == []


def test_a_lake_filtered_on_its_partition_key(tmp_path):
    lake = write_lake(tmp_path / "lake")
    with pytest.warns(UserWarning, match=r"2 hive partition keys \('sale_year', 'state'\)"):
        res = strat_curves_and_importances(str(lake), target="y", filters=[("sale_year", "==", 2011)], progress=False)
    assert sorted(res.table.index) == ["x1", "x2"]
    assert res.params["skipped_features"] == {"sale_year": "hive partition key", "state": "hive partition key"}
    # named explicitly, the key is a feature (unfiltered: not constant)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        res = strat_curves_and_importances(str(lake), target="y", features=["x1", "sale_year"], progress=False)
    assert not [w for w in rec if "left out" in str(w.message)]
    assert sorted(res.table.index) == ["sale_year", "x1"]


@pytest.mark.realdata
def test_bulldozer_csv_default_path(shared_data):
    df = pd.read_csv(shared_data / "bulldozer_valid.csv", low_memory=False)
    with pytest.warns(UserWarning, match=r"3 of 52 columns left out of the default features: 1 constant "
                                         r"\('Backhoe_Mounting'\); 1 likely identifier \('SalesID'\); 1 dates as "
                                         r"strings \('saledate'\)"):
        t = daskpd.importances(df, target="SalePrice", sample_size=20_000, progress=False)
    assert "Backhoe_Mounting" not in t.index and "YearMade" in t.index and len(t) == 49
    assert "SalesID" not in t.index and "saledate" not in t.index
