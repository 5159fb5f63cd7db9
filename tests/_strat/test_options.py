"""The scan's typed options: FinishOptions (dict form kept) and keep_state normalised once."""
import os
import pathlib

import numpy as np
import pandas as pd
import pytest

import daskpd
from daskpd._errors import InvalidParameterError
from daskpd._strat.options import FinishOptions, KeepState, StateMode, TreeOptions, Trials


def test_finish_options_dict_round_trip():
    opts = FinishOptions(min_slopes_per_x=3, few_slopes="flat", band=(0.1, 0.9), centered=True, n_segments=0,
                         dtypes={"x": np.dtype("float64")}, run_params={"n_buckets": 2})
    d = opts.to_dict()
    assert d["band"] == [0.1, 0.9] and d["run_params"] == {"n_buckets": 2}
    assert FinishOptions.from_dict(d) == opts
    # the fields that are not set are left out, as the dicts the pipeline built had them
    assert "band" not in FinishOptions().to_dict() and "run_params" not in FinishOptions().to_dict()
    assert FinishOptions.of({"min_slopes_per_x": 2}) == FinishOptions(min_slopes_per_x=2)
    assert FinishOptions.of(None) == FinishOptions()


def test_finish_options_refuse_unknown_keys():
    with pytest.raises(InvalidParameterError, match="unknown option.*'min_slope'"):
        FinishOptions.from_dict({"min_slope": 3})
    with pytest.raises(InvalidParameterError, match="finish_options must be"):
        FinishOptions.of([("min_slopes_per_x", 3)])


def test_band_params_as_the_results_record_them():
    assert FinishOptions().band_params() == {}
    assert FinishOptions(band=(0.05, 0.95)).band_params() == {"band": [0.05, 0.95]}


def test_keep_state_normalised(tmp_path):
    assert KeepState.of(False).mode is StateMode.NONE and not KeepState.of(False).keeps
    assert KeepState.of(True).mode is StateMode.MEMORY
    assert KeepState.of(np.bool_(True)).mode is StateMode.MEMORY
    got = KeepState.of(pathlib.Path(tmp_path) / "s")
    assert got.mode is StateMode.SAVE and got.path == os.path.abspath(tmp_path / "s")
    # for the public parameter every string is a directory ("only" too); "only" is an internal mode
    assert KeepState.of("only") == KeepState(StateMode.SAVE, os.path.abspath("only"))
    assert KeepState.of("only", only=True).mode is StateMode.ONLY
    assert not StateMode.ONLY.finishes and StateMode.SAVE.finishes


def test_keep_state_invalid_value_names_the_parameter():
    with pytest.raises(InvalidParameterError, match=r"keep_state must be True or False, an instance of str .*got 3"):
        KeepState.of(3)
    with pytest.raises(InvalidParameterError, match="keep_state"):
        daskpd.strat_curves_and_importances(pd.DataFrame({"x": [1.0, 2.0], "y": [1.0, 2.0]}), target="y",
                                            keep_state=3)
    with pytest.raises(InvalidParameterError, match="SAVE"):
        KeepState(StateMode.MEMORY, "/tmp")


def test_tree_options_leaf_sizes_and_params_of_the_fit():
    from daskpd._data.options import ReadOptions
    from daskpd._data.request import open_request
    from daskpd._strat.pipeline import run_strat

    opts = TreeOptions(min_samples_leaf=12, min_samples_leaf_for={"c": np.int64(4)}, sample_size=300, honest=False)
    assert opts.min_samples_leaf_for == {"c": 4} and type(opts.min_samples_leaf_for["c"]) is int
    assert opts.leaf_size("c") == 4 and opts.leaf_size("x") == 12
    with pytest.raises(AttributeError):
        opts.sample_size = 5  # frozen: built once by the public function
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"x": rng.normal(size=600), "c": rng.choice(list("abc"), 600)})
    df["y"] = df.x + (df.c == "a")
    run = run_strat(open_request(df, "y", ["x", "c"], read=ReadOptions(categorical=["c"])), trees=opts, fit_only=True)
    params = run.stratification.params
    assert params["min_samples_leaf"] == {"x": 12, "c": 4}
    assert params["sample_size"] == 300 and params["honest"] is False and params["tree_method"] == "hist"
    assert len(run.sample) == 300  # not honest: the sample size itself is drawn


def test_trials_of_the_public_parameters():
    assert Trials.of(1, (0.05, 0.95)) == Trials() == Trials(0, None)  # one trial: no trial set, no band
    got = Trials.of(np.int64(7), (np.float32(0.25), 0.75))
    assert got == Trials(7, (0.25, 0.75)) and type(got.n_trials) is int and type(got.band[0]) is float
    assert Trials.of(3) == Trials(3, None)  # the importances' table records no band
