"""daskpd.datasets: generators with a known truth, deterministic by (random_state, chunk),
and the atomic parquet writer."""
import numpy as np
import pandas as pd
import pytest

from daskpd.datasets import GENERATORS, Bulldozer, Linear, Quadratic, write_parquet


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_rows_depend_on_seed_and_chunk_only(name):
    gen = GENERATORS[name](random_state=3, chunk_rows=400)
    a = gen.frame(1_000)
    assert len(a) == 1_000 and gen.target in a.columns
    # chunk 2 is the same whether or not chunks 0 and 1 were drawn (a worker can make it alone)
    pd.testing.assert_frame_equal(GENERATORS[name](random_state=3).chunk(2, 200),
                                  a.iloc[800:].reset_index(drop=True))
    pd.testing.assert_frame_equal(GENERATORS[name](random_state=3, chunk_rows=400).frame(1_000), a)
    assert not GENERATORS[name](random_state=4, chunk_rows=400).frame(1_000).equals(a)


def test_quadratic_and_linear_truths_are_the_generating_functions():
    df = Quadratic(random_state=0, noise=0.0, spread=0.0).frame(500)
    # with no noise and x2 == x1, y is exactly x1^2 + x2
    np.testing.assert_allclose(df.y, df.x1 ** 2 + df.x2)
    x = np.array([0.5, 1.0, 2.0])
    np.testing.assert_allclose(Quadratic().truth("x1", x), x ** 2 - 0.25)
    np.testing.assert_allclose(Quadratic().truth("x3", x), 0.0)
    with pytest.raises(KeyError):
        Quadratic().truth("nope", x)
    lin = Linear(betas=(3.0, 0.0), noise=0.0)
    d = lin.frame(200)
    np.testing.assert_allclose(d.y, 3 * d.x1)
    np.testing.assert_allclose(lin.truth("x1", x), 3 * (x - 0.5))


def test_quadratic_decimals_limit_distinct_values():
    df = Quadratic(random_state=1, decimals=1).frame(5_000)
    assert df.x1.nunique() <= 31 and np.allclose(df.x1, df.x1.round(1))


def test_bulldozer_year_effect_is_its_truth():
    years = np.arange(1960, 2011)
    t = Bulldozer().truth("YearMade", years)
    np.testing.assert_allclose(t, Bulldozer.year_effect(years) - Bulldozer.year_effect(years).min())


def test_write_parquet_atomic_directory(tmp_path):
    out = write_parquet(Quadratic(random_state=2), 2_500, tmp_path / "q", rows_per_file=1_000)
    files = sorted(p.name for p in (tmp_path / "q").iterdir())
    assert files == ["part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    pd.testing.assert_frame_equal(pd.read_parquet(out), Quadratic(random_state=2, chunk_rows=1_000).frame(2_500))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q"]  # no temporary directory left
    # overwrite=False keeps what is there; the default replaces it
    write_parquet(Quadratic(random_state=9), 10, out, overwrite=False)
    assert len(pd.read_parquet(out)) == 2_500
    write_parquet(Quadratic(random_state=9), 10, out)
    assert len(pd.read_parquet(out)) == 10
