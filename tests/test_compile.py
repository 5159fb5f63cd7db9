"""``daskpd compile``: every method run once, numba's cache filled for the kernels."""
import os

import pytest

from daskpd import cli
from daskpd._strat import numeric
from daskpd._warmup import _steps


def test_compile_runs_every_method_and_fills_the_cache(capsys):
    assert cli.main(["compile", "--rows", "2000"]) == 0
    captured = capsys.readouterr()
    out = captured.out.splitlines()
    assert "warning" not in captured.err.lower(), captured.err  # the warm-up table's notes are not the user's
    names = [name for name, _ in _steps(2000)]
    assert [ln.split(":")[0] for ln in out[:-1]] == names
    assert out[-1].startswith("compiled daskpd's kernels in ")
    # the StratPD finish kernel is in numba's on-disk cache (index and object files)
    cache = numeric._segments._cache._cache_path
    files = [f for f in os.listdir(cache) if f.startswith("numeric._segments-")]
    assert any(f.endswith(".nbi") for f in files) and any(f.endswith(".nbc") for f in files), files
    # CatStratPD's finish for both types of the CG block's counts (uint16; float64 for
    # groups whose counts can pass 2^16)
    from daskpd._strat import categorical_buckets

    kinds = {str(sig[-1]) for sig in categorical_buckets._prepare.signatures}
    assert {"array(uint16, 2d, C)", "array(float64, 2d, C)"} <= kinds, kinds


def test_compile_refuses_too_few_rows_with_a_clear_error(capsys):
    assert cli.main(["compile", "--rows", "10"]) == 2
    assert "--rows must be at least 1000 (got 10)" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        cli.main(["compile", "--rows", "x"])
    assert e.value.code == 2 and "--rows" in capsys.readouterr().err
