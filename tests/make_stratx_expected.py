#!/usr/bin/env python
"""Run stratx 0.5 on its own unit cases (tests/stratx_unit_cases.py) and print the outputs
as the Python literal ``EXPECTED`` that tests/_strat/test_stratx_cases.py hard-codes.  Not a test
(pytest does not collect it): a generator of the tests' expected values.

Run it with a reference venv's python (benchmarks/setup_stratx.sh), never the project's:

    ~/.cache/daskpd-bench/stratx-old/bin/python tests/make_stratx_expected.py > /tmp/expected.py

stratx-old is needed for the categorical cases (stratx 0.5 uses ``np.float``); in
stratx-new the numeric cases run and the categorical ones are reported as errors.
Imports only stratx, numpy, pandas and the standard library.

Recorded per numeric case (``partial_dependence(X, y, feature, min_samples_leaf=...,
min_slopes_per_x=...)`` with X = the stratifying column + the feature):
``x`` = np.unique of the feature (stratx's grid), ``slope_count`` / ``slope`` on that grid
(``slope_counts_at_x``; ``slope_at_x``, NaN below min_slopes_per_x), ``pdpx`` / ``pdpy``
(stratx's curve after it drops positions), ``ignored``.
Per categorical case (``cat_partial_dependence(X, y, feature, min_samples_leaf=...)``):
``categories`` = codes with rows, ``effect`` = ``avg_per_cat`` there minus its minimum
(stratx's origin is arbitrary: its first leaf's lowest category), ``count`` =
``count_per_cat``; for the matrix cases also whether ``leaf_deltas`` equals the test's matrix.
"""
import importlib.util
import math
import os
import sys
import warnings

os.environ.setdefault("MPLBACKEND", "Agg")
warnings.simplefilter("ignore")

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("stratx_unit_cases",
                                              os.path.join(HERE, "stratx_unit_cases.py"))
cases_mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cases_mod)


def lit(v):
    """A Python literal for floats/ints/lists (nan -> nan)."""
    if isinstance(v, (list, tuple, np.ndarray)):
        return "[" + ", ".join(lit(x) for x in list(v)) + "]"
    if isinstance(v, (bool, np.bool_)):
        return repr(bool(v))
    if isinstance(v, (int, np.integer)):
        return repr(int(v))
    f = float(v)
    if math.isnan(f):
        return "nan"
    return repr(int(f)) + ".0" if f == int(f) and abs(f) < 1e15 else repr(f)


def run_numeric(case):
    from stratx.partdep import partial_dependence

    df = case["df"]
    X = df[case["stratify_on"] + [case["feature"]]]
    y = df[case["target"]]
    np.random.seed(0)
    (leaf_xranges, leaf_slopes, slope_counts_at_x, dx, slope_at_x, pdpx, pdpy, ignored) = partial_dependence(
        X, y, case["feature"], min_samples_leaf=case["min_samples_leaf"],
        min_slopes_per_x=case["min_slopes_per_x"])
    return {
        "x": np.unique(X[case["feature"]].values.round(decimals=10)),
        "slope_count": np.asarray(slope_counts_at_x).astype(int),
        "slope": np.asarray(slope_at_x, dtype=float),
        "pdpx": np.asarray(pdpx, dtype=float),
        "pdpy": np.asarray(pdpy, dtype=float),
        "ignored": int(ignored),
    }


def run_categorical(case):
    from stratx.partdep import cat_partial_dependence

    df = case["df"]
    X = df[case["stratify_on"] + [case["feature"]]]
    y = df[case["target"]]
    np.random.seed(0)
    leaf_deltas, leaf_counts, avg_per_cat, count_per_cat, ignored = cat_partial_dependence(
        X, y, case["feature"], min_samples_leaf=case["min_samples_leaf"])
    cats = np.unique(X[case["feature"]].values)
    eff = np.asarray(avg_per_cat, dtype=float)[cats]
    out = {
        "categories": cats.astype(int),
        "effect": eff - np.nanmin(eff),
        "count": np.asarray(count_per_cat)[cats].astype(int),
    }
    if case.get("leaf_deltas") is not None:
        # the test's matrix may have trailing all-NaN rows (codes above the largest code with rows)
        want = case["leaf_deltas"]
        k = leaf_deltas.shape[0]
        out["leaf_deltas_as_in_test"] = bool(leaf_deltas.shape[1] == want.shape[1] and np.isnan(want[k:]).all()
                                             and np.allclose(leaf_deltas, want[:k], equal_nan=True))
    return out


def main():
    import stratx

    print(f"# produced by: {os.path.basename(sys.executable)} tests/make_stratx_expected.py")
    print(f"# stratx {getattr(stratx, '__version__', '0.5')}, numpy {np.__version__}, python {sys.version.split()[0]}")
    print("EXPECTED = {")
    for case in cases_mod.all_cases():
        try:
            r = run_numeric(case) if case["kind"] == "numeric" else run_categorical(case)
        except Exception as exc:  # noqa: BLE001
            print(f"    # {case['name']}: {type(exc).__name__}: {str(exc).splitlines()[0]}")
            continue
        items = ", ".join(f"{k!r}: {lit(v)}" for k, v in r.items())
        print(f"    {case['name']!r}: {{{items}}},")
    print("}")


if __name__ == "__main__":
    main()
