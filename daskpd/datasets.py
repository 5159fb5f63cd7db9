"""Synthetic data with a known generator, at any size, written to parquet in chunks.

Each generator produces a table chunk by chunk; chunk ``i`` depends only on
``(random_state, i)``, so any size is produced with memory bounded by one chunk, and
the same rows come out whatever the chunking of the *reader*.  ``truth(feature, x)``
gives the true partial dependence (Parr & Wilson (2021), Definition 1: the integral of dy/dx from
the feature's minimum), so tests and benchmarks can measure error.

* :class:`Quadratic` -- Parr & Wilson's example: ``y = x1**2 + x2 + noise`` with x2 strongly
  correlated with x1 (x2 = x1 + N(0, spread)), plus an irrelevant x3.
* :class:`Bulldozer` -- a bulldozer-auction-like table: integer ``YearMade``, float
  ``MachineHours``, string ``ProductGroup`` and ``ModelID`` (models are produced in
  era windows, so ModelID is codependent with YearMade), additive SalePrice.
* :class:`Linear` -- ``y = sum(beta_j x_j) + noise`` with p independent U(0, 1)
  features (PD-variance and importance tests: known order, irrelevant features).
* :class:`Lake` -- the lake-scale benchmark table: ten features of very different
  cardinality (101 to ~n distinct numeric values, a 50-level string and a 5,000-level
  integer categorical), two codependent pairs, additive y.
"""
from __future__ import annotations

import abc
import os
import shutil
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .results.base import atomic_path

__all__ = ["Quadratic", "Bulldozer", "Linear", "Lake", "write_parquet", "fit_model", "GENERATORS", "MODEL_FITS"]

#: the models :func:`fit_model` fits (a job's ``[model] fit``)
MODEL_FITS = ("hist_gradient_boosting",)


@dataclass
class _Generator(abc.ABC):
    random_state: int = 0
    chunk_rows: int = 500_000

    target = "y"

    @abc.abstractmethod
    def chunk(self, i: int, rows: int) -> pd.DataFrame:
        """Rows of chunk ``i`` (a function of ``random_state`` and ``i`` only)."""

    def _rng(self, i: int) -> np.random.Generator:
        return np.random.default_rng([int(self.random_state), int(i)])

    def frame(self, n: int) -> pd.DataFrame:
        """The first ``n`` rows as one pandas DataFrame (for small n)."""
        return pd.concat(list(self.chunks(n)), ignore_index=True)

    def chunks(self, n: int):
        n = int(n)
        for i, start in enumerate(range(0, n, self.chunk_rows)):
            yield self.chunk(i, min(self.chunk_rows, n - start))


@dataclass
class Quadratic(_Generator):
    spread: float = 0.5  # sd of x2 around x1
    noise: float = 0.1
    decimals: int | None = None  # round x1 to this many decimals (2 -> 301 distinct values)
    x1_max: float = 3.0

    target = "y"
    features = ("x1", "x2", "x3")

    def chunk(self, i, rows):
        r = self._rng(i)
        x1 = r.uniform(0, self.x1_max, rows)
        if self.decimals is not None:
            x1 = np.round(x1, self.decimals)
        x2 = x1 + r.normal(0, self.spread, rows)
        x3 = r.uniform(0, 1, rows)
        y = x1 ** 2 + x2 + r.normal(0, self.noise, rows)
        return pd.DataFrame({"x1": x1, "x2": x2, "x3": x3, "y": y})

    def truth(self, feature: str, x):
        x = np.asarray(x, dtype=float)
        if feature == "x1":
            return x ** 2 - x.min() ** 2
        if feature == "x2":
            return x - x.min()
        if feature == "x3":
            return np.zeros_like(x)
        raise KeyError(feature)


@dataclass
class Linear(_Generator):
    betas: tuple = (10.0, 5.0, 2.0, 1.0, 0.0)
    noise: float = 0.1

    target = "y"

    @property
    def features(self):
        return tuple(f"x{j + 1}" for j in range(len(self.betas)))

    def chunk(self, i, rows):
        r = self._rng(i)
        X = r.uniform(0, 1, (rows, len(self.betas)))
        y = X @ np.asarray(self.betas, float) + r.normal(0, self.noise, rows)
        df = pd.DataFrame(X, columns=list(self.features))
        df["y"] = y
        return df

    def truth(self, feature, x):
        x = np.asarray(x, float)
        return self.betas[self.features.index(feature)] * (x - x.min())


@dataclass
class Bulldozer(_Generator):
    """SalePrice = 20000 + f(YearMade) - 1.5*MachineHours + model[ModelID] + group[ProductGroup] + noise.

    Every model belongs to one product group, and by default every machine of a model
    is listed in it (as in the real auctions), so that ProductGroup is a function of
    ModelID: given the model, its effect cannot be told apart from the model's.
    ``group_share`` > 0 lists that share of the machines in a product group drawn at
    random instead (a model sold in several configurations): ProductGroup's effect is
    then identifiable beside ModelID's."""

    n_models: int = 200
    noise: float = 2000.0
    year_range: tuple = (1960, 2011)
    group_share: float = 0.0

    target = "SalePrice"
    features = ("YearMade", "MachineHours", "ProductGroup", "ModelID")
    groups = ("TEX", "WL", "SSL", "BL", "TTT", "MG")
    group_effect = (0.0, 8000.0, -5000.0, 3000.0, 12000.0, 6000.0)

    def __post_init__(self):
        if not 0 <= self.group_share <= 1:
            raise ValueError(f"group_share must be in [0, 1]; got {self.group_share}")
        r = np.random.default_rng([int(self.random_state), 1 << 30])
        lo, hi = self.year_range
        k = self.n_models
        # integer codes with gaps, as strings ("M1003"), like real model ids
        self.model_codes = np.sort(r.choice(np.arange(1000, 1000 + 10 * k), k, replace=False))
        self.model_names = np.array([f"M{c}" for c in self.model_codes])
        self.model_group = r.integers(0, len(self.groups), k)
        self.model_effect = np.round(r.normal(0, 6000, k), 2)
        start = r.integers(lo, hi - 5, k)
        self.model_era = np.c_[start, np.minimum(hi, start + r.integers(6, 25, k))]

    @staticmethod
    def year_effect(year):
        year = np.asarray(year, float)
        return 600.0 * (year - 1960) + 15.0 * (year - 1960) ** 1.5

    def chunk(self, i, rows):
        r = self._rng(i)
        m = r.integers(0, self.n_models, rows)
        lo, hi = self.model_era[m, 0], self.model_era[m, 1]
        year = lo + np.floor(r.uniform(0, 1, rows) * (hi - lo + 1)).astype(int)
        age = 2012 - year
        hours = np.round(age * r.uniform(100, 600, rows), 1)
        g = self.model_group[m]
        noise = r.normal(0, self.noise, rows)
        if self.group_share > 0:  # drawn after the rest: group_share = 0 keeps the same rows
            other = r.uniform(0, 1, rows) < self.group_share
            g = np.where(other, r.integers(0, len(self.groups), rows), g)
        price = (20000 + self.year_effect(year) - 1.5 * hours + self.model_effect[m]
                 + np.asarray(self.group_effect)[g] + noise)
        return pd.DataFrame({
            "YearMade": year.astype("int64"),
            "MachineHours": hours,
            "ProductGroup": pd.array(np.asarray(self.groups)[g], dtype="str"),
            "ModelID": pd.array(self.model_names[m], dtype="str"),
            "SalePrice": price,
        })

    def truth(self, feature, x):
        if feature == "YearMade":
            x = np.asarray(x, float)
            return self.year_effect(x) - self.year_effect(x.min())
        if feature == "MachineHours":
            x = np.asarray(x, float)
            return -1.5 * (x - x.min())
        if feature == "ModelID":
            # a model's total effect (its own + its product group's), mean-centred over models
            eff = self.model_effect + np.asarray(self.group_effect)[self.model_group]
            s = pd.Series(eff - eff.mean(), index=self.model_names)
            return s.reindex(np.asarray(x)).to_numpy()
        raise KeyError(feature)


@dataclass
class Lake(_Generator):
    """Ten features of very different cardinality, additive y (the lake benchmark).

    ======= =============================================== ===========================
    column  values                                          effect on y
    ======= =============================================== ===========================
    x1      integers 0..100 (101 distinct)                  2 sqrt(x1)
    x2      x1 / 10 + U(0, 2), rounded to 2 decimals        0.5 x2^2       (codependent)
            (~1,200 distinct)
    x3      integers 0..9,999                               x3 / 1,000
    x4      integers 0..99,999                              3 sin(x4 / 20,000)
    x5      U(0, 1) rounded to 6 decimals (~1e6 distinct)   4 x5
    x6      integers 0..9,999,999 (~1e7 distinct)           0              (irrelevant)
    x7      U(-1, 1), full float64 (~n distinct)            3 abs(x7)
    x8      x7 + N(0, 0.5), full float64                    2 x8           (codependent)
    s50     50 string levels "L00".."L49"                   N(0, 2) per level
    k5000   5,000 integer codes 0..4,999 (declare it        N(0, 1) per level
            categorical)
    ======= =============================================== ===========================

    ``y = sum of the effects + N(0, noise)``.  ``truth(feature, x)`` is the effect minus
    its value at the smallest x (numeric), or minus the smallest effect (categorical),
    which is what StratPD / CatStratPD estimate.
    """

    noise: float = 1.0

    target = "y"
    features = ("x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8", "s50", "k5000")
    categorical = ("s50", "k5000")

    def __post_init__(self):
        r = np.random.default_rng([int(self.random_state), 1 << 31])
        self.s50_levels = np.array([f"L{i:02d}" for i in range(50)])
        self.s50_effect = r.normal(0.0, 2.0, 50)
        self.k5000_effect = r.normal(0.0, 1.0, 5000)

    _EFFECTS = {
        "x1": lambda v: 2.0 * np.sqrt(v),
        "x2": lambda v: 0.5 * v ** 2,
        "x3": lambda v: v / 1000.0,
        "x4": lambda v: 3.0 * np.sin(v / 20000.0),
        "x5": lambda v: 4.0 * v,
        "x6": lambda v: 0.0 * v,
        "x7": lambda v: 3.0 * np.abs(v),
        "x8": lambda v: 2.0 * v,
    }

    def chunk(self, i, rows):
        r = self._rng(i)
        x1 = r.integers(0, 101, rows)
        x7 = r.uniform(-1.0, 1.0, rows)
        cols = {
            "x1": x1.astype("int64"),
            "x2": np.round(x1 / 10.0 + r.uniform(0.0, 2.0, rows), 2),
            "x3": r.integers(0, 10_000, rows).astype("int64"),
            "x4": r.integers(0, 100_000, rows).astype("int64"),
            "x5": np.round(r.uniform(0.0, 1.0, rows), 6),
            "x6": r.integers(0, 10_000_000, rows).astype("int64"),
            "x7": x7,
            "x8": x7 + r.normal(0.0, 0.5, rows),
        }
        s = r.integers(0, 50, rows)
        k = r.integers(0, 5000, rows)
        y = sum(self._EFFECTS[f](np.asarray(v, dtype="float64")) for f, v in cols.items())
        y = y + self.s50_effect[s] + self.k5000_effect[k] + r.normal(0.0, self.noise, rows)
        df = pd.DataFrame(cols)
        df["s50"] = pd.array(self.s50_levels[s], dtype="str")
        df["k5000"] = k.astype("int64")
        df["y"] = y
        return df

    def truth(self, feature, x):
        if feature in self._EFFECTS:
            x = np.asarray(x, dtype="float64")
            f = self._EFFECTS[feature]
            return f(x) - f(np.full(1, x.min()))[0]
        if feature == "s50":
            eff = pd.Series(self.s50_effect - self.s50_effect.min(), index=self.s50_levels)
            return eff.reindex(np.asarray(x, dtype=object)).to_numpy()
        if feature == "k5000":
            eff = pd.Series(self.k5000_effect - self.k5000_effect.min(), index=np.arange(5000))
            return eff.reindex(np.asarray(x, dtype="int64")).to_numpy()
        raise KeyError(feature)


GENERATORS = {"quadratic": Quadratic, "bulldozer": Bulldozer, "linear": Linear, "lake": Lake}


def write_parquet(gen: _Generator, n: int, path, *, rows_per_file: int | None = None, overwrite: bool = True) -> str:
    """Write ``n`` rows of ``gen`` as a directory of parquet files, one chunk at a time.

    Written into a hidden temporary directory and renamed at the end, so a reader never sees a
    half-written dataset.  Returns the directory.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = os.fspath(path)
    if rows_per_file:
        gen.chunk_rows = int(rows_per_file)
    if os.path.exists(path):
        if not overwrite:
            return path
        shutil.rmtree(path)
    with atomic_path(path) as tmp:
        os.makedirs(tmp)
        for i, chunk in enumerate(gen.chunks(n)):
            pq.write_table(pa.Table.from_pandas(chunk, preserve_index=False),
                           os.path.join(tmp, f"part-{i:05d}.parquet"))
    return path


def fit_model(gen: _Generator, n: int, kind: str = "hist_gradient_boosting", *, random_state: int = 0):
    """A model of ``gen``'s target fitted on its first ``n`` rows (a job's ``[model]
    fit``, for demos): scikit-learn's HistGradientBoostingRegressor with the non-numeric
    columns as pandas categories, so that the model encodes them itself
    (``categorical_features="from_dtype"``; it then predicts on their strings too) and
    daskpd's exact tree engine computes its partial dependence."""
    from sklearn.ensemble import HistGradientBoostingRegressor

    if kind not in MODEL_FITS:
        raise ValueError(f"unknown model {kind!r}; expected one of {', '.join(MODEL_FITS)}")
    df = gen.frame(n)
    X = df.drop(columns=[gen.target])
    X = X.astype({c: "category" for c in X.columns if not pd.api.types.is_numeric_dtype(X[c])})
    # small (50 trees of 15 leaves): a demo's model, quick to fit and to explain
    model = HistGradientBoostingRegressor(max_iter=50, max_leaf_nodes=15, learning_rate=0.2,
                                          categorical_features="from_dtype", random_state=random_state)
    return model.fit(X, df[gen.target])
