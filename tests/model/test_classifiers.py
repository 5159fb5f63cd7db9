"""Classifiers, with real scikit-learn classifiers on scikit-learn's bundled real tables
(iris: 3 classes; breast cancer: binary).  A multi-class PD gives every class, as
scikit-learn does, and says so per class in its summary, its table and its plot; the
functions that explain one response ask for ``target_class`` by name.  A binary
classifier's positive class (``classes_[1]``) is named in every summary, table, metadata
and plot label."""
from __future__ import annotations

import json

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import pytest  # noqa: E402
from sklearn.datasets import load_breast_cancer, load_iris  # noqa: E402
from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestClassifier  # noqa: E402
from sklearn.inspection import partial_dependence as sk_pd  # noqa: E402

import daskpd  # noqa: E402
from daskpd import InvalidParameterError  # noqa: E402

Q = dict(progress=False)


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def iris():
    d = load_iris(as_frame=True)
    X = d.data.rename(columns=lambda c: c.replace(" (cm)", "").replace(" ", "_"))
    y = d.target_names[d.target]  # 'setosa', 'versicolor', 'virginica'
    return X, y, HistGradientBoostingClassifier(max_iter=20, random_state=0).fit(X, y)


@pytest.fixture(scope="module")
def cancer():
    d = load_breast_cancer(as_frame=True)
    X = d.data.iloc[:, :6].rename(columns=lambda c: c.replace(" ", "_"))
    y = np.where(d.target == 1, "benign", "malignant")  # classes_ = ['benign', 'malignant']
    return X, y, RandomForestClassifier(30, max_depth=5, random_state=0).fit(X, y)


def test_multiclass_pd_per_class_summary_table_and_plot(iris):
    X, _, m = iris
    classes = list(m.classes_)
    r = daskpd.partial_dependence(m, X, "petal_length", grid_resolution=12, method="brute", **Q)
    sk = sk_pd(m, X, ["petal_length"], grid_resolution=12, method="brute")
    np.testing.assert_allclose(r["average"], sk["average"], rtol=0, atol=1e-12)  # every class, as scikit-learn
    lines = r.summary().splitlines()
    assert lines[0] == "petal_length: 3 classes, one curve each (result.output(c) for one), 150 rows"
    for c, line in zip(classes, lines[1:]):
        one = r.output(c).average
        assert line.split()[:3] == ["P[class", "=", f"'{c}']"]
        assert f"12 positions, range [{one.min():.4g}, {one.max():.4g}]" in line
    t = r.to_frame()
    assert t.groupby("target_class").size().to_dict() == {c: 12 for c in classes}
    np.testing.assert_array_equal(t[t.target_class == "virginica"].pd, r.output("virginica").average)
    ax = r.plot()
    assert [tx.get_text() for tx in ax.get_legend().get_texts()] == [f"P[class = {c}]" for c in classes]
    drawn = [ln for ln in ax.get_lines() if ln.get_label() in {f"P[class = {c}]" for c in classes}]
    for ln, c in zip(drawn, classes):
        np.testing.assert_array_equal(ln.get_ydata(), r.output(c).average)
    assert ax.get_ylabel() == "partial dependence of the class probability"
    one = r.plot(target_class="setosa")
    assert "P[class = setosa]" in one.get_ylabel()
    # a 2-way PD: one panel per class, each titled with its class
    r2 = daskpd.partial_dependence(m, X, ("petal_length", "petal_width"), grid_resolution=6, method="brute", **Q)
    axes = r2.plot()
    assert [a.get_title() for a in axes] == [f"2-way PD, P[class = {c}]" for c in classes]
    fig = axes[0].figure
    fig.canvas.draw()
    rnd = fig.canvas.get_renderer()
    boxes = [a.get_tightbbox(rnd) for a in axes]
    for i in range(len(boxes)):  # the panels (with their colour bars' labels) do not overlap
        for j in range(i + 1, len(boxes)):
            b, c = boxes[i], boxes[j]
            assert min(b.x1, c.x1) - max(b.x0, c.x0) <= 1 or min(b.y1, c.y1) - max(b.y0, c.y0) <= 1


@pytest.mark.parametrize("call", ["ice", "ale", "marginal", "pd_variance", "compare", "h_statistic"])
def test_one_response_functions_ask_for_the_class(iris, call):
    X, y, m = iris
    fn = {"ice": lambda **k: daskpd.ice(m, X, "petal_length", **k, **Q),
          "ale": lambda **k: daskpd.ale(m, X, "petal_length", **k, **Q),
          "marginal": lambda **k: daskpd.marginal(X, "petal_length", model=m, **k, **Q),
          "pd_variance": lambda **k: daskpd.pd_variance(m, X, **k, **Q),
          "compare": lambda **k: daskpd.compare(m, X, "petal_length", stratpd=False, **k, **Q),
          "h_statistic": lambda **k: daskpd.h_statistic(m, X, ["petal_length", "petal_width"], n_points=30, **k,
                                                        **Q)}[call]
    with pytest.raises(InvalidParameterError, match=rf"{call}: parameter target_class is required for a multi-class "
                                                    r"classifier: one of \['setosa', 'versicolor', 'virginica'\]"):
        fn()
    res = fn(target_class="virginica")
    assert res.target_class == "virginica" if call != "compare" else res.results["FPD"].target_class == "virginica"


def test_binary_names_the_positive_class_everywhere(cancer, tmp_path):
    X, _, m = cancer
    assert list(m.classes_) == ["benign", "malignant"]
    f = "mean_radius"
    results = {"partial_dependence": daskpd.partial_dependence(m, X, f, grid_resolution=8, method="brute", **Q),
               "ice": daskpd.ice(m, X, f, grid_resolution=8, n_lines=10, **Q),
               "ale": daskpd.ale(m, X, f, bins=8, **Q),
               "marginal": daskpd.marginal(X, f, model=m, bins=8, **Q)}
    for name, r in results.items():
        assert r.target_class == "malignant", name
        assert ("response: P[class = 'malignant'] (the positive class, classes_[1]; target_class= for the other; "
                "classes ['benign', 'malignant'])") in r.summary(), name
        t = r.to_frame()
        assert (t.target_class == "malignant").all(), name
        path = r.to_parquet(tmp_path / f"{name}.parquet")
        meta = json.loads(pq.read_schema(path).metadata[b"daskpd"])
        assert meta["target_class"] == "malignant" and meta["response"] == "predict_proba", name
        assert meta["params"]["model"]["classes"] == ["benign", "malignant"], name
        ax = r.plot()
        assert "P[class = malignant] (positive class)" in ax.get_ylabel(), name
    pv = daskpd.pd_variance(m, X, [f, "mean_texture"], grid_resolution=6, **Q)
    assert (pv.to_frame().target_class == "malignant").all()
    h = daskpd.h_statistic(m, X, [f, "mean_texture"], n_points=30, **Q)
    assert (h.to_frame().target_class == "malignant").all() and "the positive class, classes_[1]" in h.summary()
    assert "of P[class = malignant] (positive class)" in h.plot().get_title()
    # the other class, asked for: named as such
    other = daskpd.partial_dependence(m, X, f, grid_resolution=8, method="brute", target_class="benign", **Q)
    assert "P[class = 'benign'] (the negative class, classes_[0], given as target_class" in other.summary()
    assert "(positive class)" not in other.plot().get_ylabel()
    np.testing.assert_allclose(other.average, 1 - results["partial_dependence"].average, rtol=0, atol=1e-12)
    # scikit-learn's number for the positive class
    sk = sk_pd(m, X, [f], grid_resolution=8, method="brute")
    np.testing.assert_allclose(results["partial_dependence"]["average"], sk["average"], rtol=0, atol=1e-12)
