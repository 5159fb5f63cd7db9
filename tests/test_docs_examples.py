"""Every ```python block of README.md and docs/*.md runs, so the docs cannot drift.

The blocks use names the reader supplies (``data``, ``df``, ``model``, a lake at
``lake/sales/``, ``s3://`` URLs); each document gets them here, small: a hive lake
written in a temporary directory, scikit-learn models fitted on it, and ``s3://``
rewritten to fsspec's in-memory filesystem (``memory://``) holding the same files.
A block that is not Python (a signature) must be fenced as ``text``, not ``python``."""
from __future__ import annotations

import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```python[^\n]*\n(.*?)^```", re.S | re.M)


def blocks():
    out = []
    for doc in DOCS:
        for i, m in enumerate(FENCE.finditer(doc.read_text(encoding="utf-8"))):
            out.append(pytest.param(doc.name, m.group(1), id=f"{doc.name}-{i + 1}"))
    return out


pytestmark = pytest.mark.usefixtures("one_openmp_thread")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The names the docs use, small."""
    import fsspec
    from sklearn.ensemble import HistGradientBoostingRegressor

    from daskpd.datasets import Bulldozer, Quadratic

    root = tmp_path_factory.mktemp("docs")
    gen = Bulldozer(random_state=0, n_models=30)
    lake = root / "lake" / "sales"
    mem = fsspec.filesystem("memory")
    frames = []
    lake.mkdir(parents=True)
    for i in range(3):  # lake/sales/*.parquet and the directory lake/sales/
        d = gen.chunk(i, 3000)
        frames.append(d)
        d.to_parquet(lake / f"part-{i}.parquet", index=False)
        with mem.open(f"/lake/sales/part-{i}.parquet", "wb") as fh:
            d.to_parquet(fh, index=False)
    sales = pd.concat(frames, ignore_index=True)
    sales_model = HistGradientBoostingRegressor(max_iter=20, random_state=0).fit(
        sales[["YearMade", "MachineHours"]], sales["SalePrice"])

    rng = np.random.default_rng(0)
    n = 4000
    df = pd.DataFrame({"x1": rng.uniform(0, 3, n), "x2": rng.uniform(0, 3, n), "x3": rng.uniform(0, 3, n),
                       "color": pd.Categorical(rng.choice(["red", "green", "blue"], n))})
    df["y"] = df.x1 ** 2 + df.x2 * df.x1 + df.color.map({"red": 0.0, "green": 1.0, "blue": 2.0}).astype(float)
    X = df.drop(columns="y")
    hgb = HistGradientBoostingRegressor(max_iter=20, categorical_features="from_dtype", random_state=0).fit(X, df.y)
    for i in range(2):
        with mem.open(f"/lake/table/part-{i}.parquet", "wb") as fh:
            df.iloc[i::2].to_parquet(fh, index=False)
    quad = Quadratic(random_state=0).frame(5000)
    names = {
        "README.md": {"model": sales_model},
        "catstratpd.md": {"data": sales},
        "guide.md": {"data": sales, "model": sales_model},
        "howto-sklearn.md": {"model": hgb, "df": df},
        "importances.md": {"data": quad},
        "model.md": {"model": hgb, "hgb": hgb, "df": df},
        "stratpd.md": {"data": quad},
    }
    yield root, names
    mem.rm("/lake", recursive=True)
    if mem.exists("/out"):
        mem.rm("/out", recursive=True)


@pytest.mark.parametrize("doc, code", blocks())
def test_docs_example_runs(doc, code, world, monkeypatch):
    import matplotlib.pyplot as plt

    import daskpd

    root, names = world
    monkeypatch.chdir(root)
    code = code.replace("s3://", "memory://")
    ns = {"daskpd": daskpd, "np": np, "pd": pd, **names.get(doc, {})}
    try:
        exec(compile(code, f"{doc} example", "exec"), ns)  # noqa: S102 - the docs' own code
    finally:
        plt.close("all")


def test_every_doc_with_python_has_its_names():
    docs = {d for d, _ in ((p.values[0], None) for p in blocks())}
    assert docs <= {"README.md", "catstratpd.md", "guide.md", "howto-sklearn.md", "importances.md", "model.md",
                    "pipeline.md", "stratpd.md"}, (
        "a new document has python examples: give its names in world()")
