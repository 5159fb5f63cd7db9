"""Warnings point at the user's line: whatever depth inside daskpd (or inside dask,
pandas or scikit-learn working for it) a warning is raised at, the user sees the line of
their own call, filtered by their own filters; third-party deprecation notices about
their internals do not leak out of a call."""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

import daskpd
from daskpd._caller_warnings import warnings_at_callers_line


def _frame(n=3000):
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"a": rng.integers(0, 5, n).astype(float), "b": rng.normal(size=n)})
    df["y"] = df.a + df.b
    return df


def test_a_warning_deep_in_the_pipeline_names_the_callers_line():
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        daskpd.stratpd(_frame(), target="y", feature="a", min_slopes_per_x=10**6, progress=False)
    found = [w for w in rec if "min_slopes_per_x=1000000" in str(w.message)]
    assert found and all(w.filename == __file__ for w in found), [(w.filename, w.lineno) for w in rec]


def test_the_callers_filters_apply():
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", message=".*min_slopes_per_x.*")
        daskpd.stratpd(_frame(), target="y", feature="a", min_slopes_per_x=10**6, progress=False)
    assert not [w for w in rec if "min_slopes_per_x" in str(w.message)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UserWarning, match="min_slopes_per_x"):
            daskpd.stratpd(_frame(), target="y", feature="a", min_slopes_per_x=10**6, progress=False)


def test_third_party_deprecations_are_dropped_and_other_warnings_kept():
    def work():  # stands for dask or pandas inside a call: a frame outside daskpd
        warnings.warn_explicit("an internal notice", FutureWarning, "/site-packages/pandas/core/x.py", 1)
        warnings.warn_explicit("about your model", UserWarning, "/site-packages/sklearn/base.py", 1)

    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        with warnings_at_callers_line():
            work()
    assert [(str(w.message), w.filename) for w in rec] == [("about your model", __file__)]


def test_a_call_inside_a_call_reports_once():
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        with warnings_at_callers_line():
            with warnings_at_callers_line():
                warnings.warn("once", UserWarning)
    assert [str(w.message) for w in rec] == ["once"] and rec[0].filename == __file__


def test_warnings_before_an_error_still_reach_the_caller():
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        with pytest.raises(ValueError, match="boom"):
            with warnings_at_callers_line():
                warnings.warn("first", UserWarning)
                raise ValueError("boom")
    assert [str(w.message) for w in rec] == ["first"]


def test_a_warning_reaches_code_run_as_a_script_string():
    """``python -c`` code (module ``__main__`` with a built-in loader) gets its warning."""
    import subprocess
    import sys

    code = ("import warnings, numpy as np, pandas as pd, daskpd\n"
            "warnings.simplefilter('always')\n"
            "df = pd.DataFrame({'a': np.arange(300.) % 5, 'b': np.arange(300.) % 7})\n"
            "df['y'] = df.a + df.b\n"
            "daskpd.stratpd(df, target='y', feature='a', min_slopes_per_x=10**6, progress=False)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "<string>:5: UserWarning: StratPD for feature 'a'" in out.stderr, out.stderr[-2000:]


def test_daskpd_notices_issued_at_the_callers_line_are_kept():
    """A FutureWarning daskpd raises with a stacklevel that already names the caller's
    file (a renamed parameter) is daskpd's own: not dropped with the third-party notices."""
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        with warnings_at_callers_line():
            warnings.warn("renamed", FutureWarning, stacklevel=1)  # this file: the caller's line
    assert [(str(w.message), w.filename) for w in rec] == [("renamed", __file__)]
