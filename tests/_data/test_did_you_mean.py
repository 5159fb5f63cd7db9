"""Every name a user types gets a "did you mean" when it is close to a real one (the
target, features, weights, stratifying columns, a class, an option), and the message
names the parameter; a column with types that differ across a lake's files that was only
in a default set says how to leave it out (features= / stratify_on=)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import LinearRegression, LogisticRegression

import daskpd
from daskpd import DataError, InvalidParameterError

Q = dict(progress=False)


@pytest.fixture(scope="module")
def df():
    rng = np.random.default_rng(0)
    d = pd.DataFrame({"median_income": rng.normal(size=300), "population": rng.uniform(1, 5, 300),
                      "latitude": rng.normal(size=300)})
    return d.assign(median_house_value=2 * d.median_income + d.latitude, ocean=np.where(d.latitude > 0, "a", "b"))


@pytest.mark.parametrize("call, param, typo, right", [
    (lambda d, m: daskpd.stratpd(d, target="median_house_valu", feature="median_income", **Q),
     "parameter target", "median_house_valu", "median_house_value"),
    (lambda d, m: daskpd.stratpd(d, target="median_house_value", feature="median_incom", **Q),
     "parameter feature", "median_incom", "median_income"),
    (lambda d, m: daskpd.catstratpd(d, target="median_house_value", feature="Ocean", **Q),
     "parameter feature", "Ocean", "ocean"),
    (lambda d, m: daskpd.importances(d, target="median_house_value", features=["latitud"], **Q),
     "parameter features", "latitud", "latitude"),
    (lambda d, m: daskpd.stratpd(d, target="median_house_value", feature="median_income", stratify_on=["latitud"], **Q),
     "parameter stratify_on", "latitud", "latitude"),
    (lambda d, m: daskpd.partial_dependence(m, d, "median_incme", **Q),
     "parameter features", "median_incme", "median_income"),
    (lambda d, m: daskpd.ice(m, d, "latitud", **Q), "parameter feature", "latitud", "latitude"),
    (lambda d, m: daskpd.marginal(d, "median_income", target="median_house_valu", **Q),
     "parameter target", "median_house_valu", "median_house_value"),
    (lambda d, m: daskpd.compare(m, d, "median_income", target="house_value", **Q),
     "parameter target", "house_value", "median_house_value"),
    (lambda d, m: daskpd.partial_dependence(m, d, "median_income", sample_weight="populaton", **Q),
     "parameter sample_weight", "populaton", "population"),
    (lambda d, m: daskpd.h_statistic(m, d, [("median_income", "latitud")], **Q),
     "parameter pairs", "latitud", "latitude"),
    (lambda d, m: daskpd.h_statistic(m, d, [], features=["populaton"], **Q),
     "parameter features", "populaton", "population"),
])
def test_a_typo_names_the_parameter_and_the_column_meant(df, call, param, typo, right):
    m = LinearRegression().fit(df[["median_income", "population", "latitude"]], df.median_house_value)
    with pytest.raises(DataError) as e:
        call(df, m)
    msg = str(e.value)
    assert f"{typo!r}" in msg and param in msg and f"Did you mean {right!r}?" in msg, msg


def test_options_and_classes(df):
    m = LogisticRegression().fit(df[["median_income"]], np.where(df.latitude > 0, "yes", "no"))
    with pytest.raises(InvalidParameterError, match=r"target_class='yse' is not one of .*; did you mean 'yes'\?"):
        daskpd.partial_dependence(m, df, "median_income", target_class="yse", **Q)
    with pytest.raises(InvalidParameterError, match=r"parameter response must be .*Did you mean 'predict_proba'\?"):
        daskpd.ale(m, df, "median_income", response="predict_prob", **Q)
    with pytest.raises(DataError) as e:  # nothing close: no guess
        daskpd.stratpd(df, target="zzz", feature="median_income", **Q)
    assert "Did you mean" not in str(e.value) and "available columns" in str(e.value)


def test_mixed_types_in_a_default_column_say_how_to_leave_it_out(tmp_path):
    rng = np.random.default_rng(1)
    for i in range(2):
        d = pd.DataFrame({"x": rng.normal(size=400), "z": rng.normal(size=400)})
        d["y"] = d.x + d.z
        d["m"] = np.arange(400) if i == 0 else np.array(["a"] * 400)
        d.to_parquet(tmp_path / f"p{i}.parquet")
    with pytest.raises(DataError, match=r"incompatible types .*'m' was only one of the default columns .* works "
                                        r"without it: pass stratify_on=\['x', 'z'\] \(or features=\)"):
        daskpd.stratpd(str(tmp_path), target="y", feature="x", **Q)
    with pytest.raises(DataError, match=r"works without it: pass features=\['x', 'z'\]"):
        daskpd.importances(str(tmp_path), target="y", **Q)
    res = daskpd.stratpd(str(tmp_path), target="y", feature="x", stratify_on=["z"], **Q)  # as the message says
    assert res.n_rows == 800
    with pytest.raises(DataError, match="incompatible types") as e:  # asked for by name: no such offer
        daskpd.stratpd(str(tmp_path), target="y", feature="x", stratify_on=["z", "m"], **Q)
    assert "leave it out" not in str(e.value)
