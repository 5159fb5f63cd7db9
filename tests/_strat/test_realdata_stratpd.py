"""StratPD on the real datasets in ../shared/data (skipped when the folder is absent)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import daskpd

pytestmark = pytest.mark.realdata


def test_rent_bathrooms_raise_price(shared_data):
    """Seed 000, Figure 1: bathrooms vs price on the NYC rent data (codependent with bedrooms)."""
    df = pd.read_csv(shared_data / "rent.csv")
    df = df[(df.price > 1_000) & (df.price < 10_000) & (df.latitude != 0)]
    res = daskpd.stratpd(df, target="price", feature="bathrooms", min_samples_leaf=15)
    f = res.to_frame().set_index("x")
    assert not res.binned
    # from 1 to 3 bathrooms each extra bathroom adds rent, all else being equal
    # (0 bathrooms is a few hundred odd listings)
    assert f.pd[2.0] > f.pd[1.0] + 500
    assert f.pd[3.0] > f.pd[2.0] + 300
    assert res.n_rows == len(df)


def test_bulldozer_messy_input(shared_data):
    """Strings, NaN everywhere, a date column, YearMade placeholders of 1000."""
    df = pd.read_csv(shared_data / "bulldozer_valid.csv", low_memory=False)
    df["saledate"] = pd.to_datetime(df.saledate, format="%m/%d/%Y %H:%M")
    df = df[df.YearMade > 1950]
    res = daskpd.stratpd(df, target="SalePrice", feature="YearMade",
                         features=["ModelID", "ProductGroup", "Enclosure", "state", "MachineHoursCurrentMeter",
                                   "saledate", "fiProductClassDesc", "Hydraulics"])
    f = res.to_frame()
    f = f[f.supported]
    # newer machines sell for more: the curve's right end is well above its left end
    assert f.pd.iloc[-1] - f.pd.iloc[0] > 10_000
    assert res.n_rows == len(df)


def test_flights_parquet_three_million_rows(shared_data):
    """A real multi-million-row parquet file read directly: string stratifiers, a timestamp."""
    path = shared_data / "flights_3m.parquet"
    res = daskpd.stratpd(str(path), target="delay", feature="distance", sample_size=100_000)
    assert res.n_rows == 3_000_000
    assert res.binned and len(res.x) <= 1000
    assert res.supported.sum() > 100
    assert np.isfinite(res.pd[res.supported]).all()
