"""Columns that would mislead as default features or stratifying columns.

Found on the tree sample already drawn (no extra pass) and, for a parquet lake, in the
files' footers (read when the lake was opened):

* a likely **identifier**: an integer or text column with a distinct value in at least
  ``ID_SHARE`` of the sampled rows; a text column where at least ``NEAR_UNIQUE`` of the
  sampled rows hold a value no other sampled row holds (titles, free text); a column of
  keys by its type (UUIDs, fixed-size binary: :func:`key_type`, known before any row is
  read).  A curve over it means nothing, and trees split rows apart on it;
* a **row number**: an integer column numbering the rows 0..n-1 or 1..n, once or once per
  file or part -- in a lake's footers every row group holds exactly the numbers of its
  rows, in sequence (:func:`footer_row_number`); on a sample that holds every row, every
  integer from 0 (or 1) up is present, each at most as often as the one before it;
* a likely **leak**: a column that predicts the target almost perfectly (|Spearman| >=
  ``LEAK_SCORE`` for a number; for categories, their means explaining >= ``LEAK_R2`` of
  the target's variance, with at most a tenth as many levels as rows) -- as a feature it
  takes the importance, as a stratifying column it leaves nothing to stratify; or a
  **thresholded or binned copy** of the target (``y > 1``, deciles of ``y``): a column of
  few levels that cut the target into consecutive intervals where it is dense
  (:func:`~daskpd._data.suspect_steps.step_copy`), explaining at least ``STEP_LEAK_R2`` of its ranks' variance -- within
  each of its levels the target is truncated, so stratifying on it absorbs the other
  features' effects and their curves come out (nearly) flat.  A weaker or blurred step
  (``STEP_WARN_R2``, ``STEP_WARN_PURITY``) is only named in a warning (``leave=False``):
  a genuine discrete cause whose levels abut can look the same;
* **dates stored as strings**: a text column whose values parse as dates (a level per
  date; a number such as the year gives a curve).

:func:`suspect_columns` returns them as ``{column: Suspect(why, message)}``;
:func:`leave_out` takes them out of the default sets (the pipeline's note counts them,
as it counts constant columns) and returns the warnings for those named explicitly.
"""
from __future__ import annotations

import uuid
import warnings
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from .encode import as_float
from .kinds import is_text
from .suspect_steps import STEP_MAX_LEVELS, Step, step_copy

__all__ = ["Suspect", "suspect_columns", "sample_warnings", "leave_out", "footer_row_number",
           "WHY_IDENTIFIER", "WHY_ROW_NUMBER", "WHY_LEAK", "WHY_DATES", "SUSPECT_WHYS", "KEEP_HINT"]

#: the rows of the (hash-ordered, so uniform) tree sample the share and leak rules look at
WARN_ROWS = 10_000
#: a column holding this share of distinct values per (non-missing) row looks like an identifier
ID_SHARE = 0.99
#: a text column where this share of the sampled rows hold a value no other sampled row
#: holds looks like an identifier (a title): most of its levels would have one row, and a
#: level's effect from one row is that row's noise
NEAR_UNIQUE = 0.5
#: a row number (on a sample holding every row) spans at least this many values: fewer are
#: as likely a position within a period (a day of the year in daily data) as a row number
ROW_NUMBER_MIN = 500
#: |Spearman| (numeric) at which a column predicts the target almost perfectly (a dominant
#: honest feature comes close: 0.983 for y = 10 x1 + x2 + noise, 0.9995 for x1 in the
#: StratPD paper's y = x1^2 + x2 + 100)
LEAK_SCORE = 0.9999
#: the R^2 of a categorical column's means at which it predicts the target almost perfectly
LEAK_R2 = 0.995
WHY_IDENTIFIER = "likely identifier"
WHY_ROW_NUMBER = "row number"
WHY_LEAK = "likely leak"
WHY_DATES = "dates as strings"
#: every why of a suspect column
SUSPECT_WHYS = (WHY_IDENTIFIER, WHY_ROW_NUMBER, WHY_LEAK, WHY_DATES)
#: what keeps the suspect columns in the default sets (the notes' hint)
KEEP_HINT = "keep_suspect=True"


@dataclass(frozen=True)
class Suspect:
    """Why a column is suspect (``why``: the note's group) and the one-line warning;
    ``leave``: whether it leaves the default sets (False: a warning only)."""

    why: str
    message: str
    leave: bool = True


def _date_like(values: pd.Series) -> str | None:
    """A string that parses as a date, when every one of a few distinct strings does."""
    texts = [str(v) for v in pd.unique(values.dropna().astype(str))[:20]]
    if not texts or not all(any(c.isdigit() for c in t) and any(c in "-/:." for c in t) and len(t) >= 6
                            for t in texts):
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            parsed = pd.to_datetime(pd.Series(texts), errors="coerce", format="mixed")
        except (ValueError, TypeError):
            return None
    return texts[0] if parsed.notna().all() else None


def _keys(values: pd.Series) -> bool:
    """Values that are keys by their Python type (UUIDs, bytes)."""
    first = values.dropna()[:1]
    return len(first) == 1 and isinstance(first.iloc[0], (uuid.UUID, bytes, bytearray))


def _int_stat(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def footer_row_number(lake, column: str, sample_values=None) -> str | None:
    """Why ``column`` of a parquet lake is a row number, from its footers' statistics, or
    None: in every row group of every file it holds exactly ``num_rows`` consecutive
    integers, no nulls, in sequence from one row group to the next; each file starts at
    0 or 1, or the files together number their rows once, 0 (or 1) up.  ``sample_values``
    (the column in the tree sample): no value may repeat more often than there are files."""
    ranges = []
    for f in getattr(lake, "files", ()) or ():
        try:
            idx = f.schema.get_field_index(column)
        except KeyError:
            return None
        md = f.metadata
        if idx < 0 or md.num_columns != len(f.schema):  # nested types: the indices do not match
            return None
        first = last = None
        for r in range(md.num_row_groups):
            rg = md.row_group(r)
            if rg.num_rows == 0:
                continue
            st = rg.column(idx).statistics
            if st is None or not st.has_min_max or not (st.has_null_count and st.null_count == 0):
                return None
            lo, hi = st.min, st.max
            if not (_int_stat(lo) and _int_stat(hi)) or int(hi) - int(lo) + 1 != rg.num_rows:
                return None
            if last is not None and int(lo) != last + 1:
                return None
            first = int(lo) if first is None else first
            last = int(hi)
        if first is not None:
            ranges.append((first, last))
    if not ranges or max(b - a + 1 for a, b in ranges) < 2:
        return None
    if sample_values is not None and len(sample_values):
        if np.unique(np.asarray(sample_values), return_counts=True)[1].max() > len(ranges):
            return None
    if all(a in (0, 1) for a, _ in ranges):
        if len(ranges) == 1:
            return f"numbers the rows {ranges[0][0]}..{ranges[0][1]:,}"
        return f"numbers the rows of each of its {len(ranges):,} files from {ranges[0][0]}"
    rs = sorted(ranges)
    if rs[0][0] in (0, 1) and all(b[0] == a[1] + 1 for a, b in zip(rs, rs[1:])):
        return f"numbers the rows {rs[0][0]}..{rs[-1][1]:,} across its {len(rs):,} files"
    return None


def _sample_row_number(values: np.ndarray) -> str | None:
    """Why integer ``values`` (every row of the data, no missing value) are a row number,
    or None: every integer from 0 (or 1) to the largest is present, each at most as often
    as the one before it (a numbering that starts again in each file or part)."""
    lo, hi = int(values.min()), int(values.max())
    span = hi - lo + 1
    if lo not in (0, 1) or span < ROW_NUMBER_MIN or span > len(values):
        return None
    counts = np.bincount(values - lo)
    if counts.min() == 0 or (np.diff(counts) > 0).any():
        return None
    k = int(counts[0])
    return f"numbers the rows {lo}..{hi:,}" + ("" if k == 1 else f", starting again in each of {k} parts")


def _row_number(col: pd.Series, name: str, all_rows: bool, lake) -> str | None:
    if not pd.api.types.is_integer_dtype(col.dtype) or isinstance(col.dtype, pd.CategoricalDtype):
        return None
    if col.isna().any():
        return None
    values = col.to_numpy(dtype="int64")
    if lake is not None:
        why = footer_row_number(lake, name, values)
        if why is not None:
            return why
    return _sample_row_number(values) if all_rows and len(values) else None


def _leak(c, col, kind, text, y, ok_y, y_rank, nuniq):
    """``(score text, score, bar)`` of the leak rule, or None when it does not apply."""
    valid = col.notna().to_numpy()
    both = valid & ok_y
    if both.sum() < 100:
        return None
    if kind == "numeric" and not text:
        from scipy.stats import rankdata

        x = as_float(col) if not isinstance(col.dtype, pd.CategoricalDtype) else col.cat.codes.to_numpy(float)
        ry = y_rank() if both.all() else rankdata(y.to_numpy()[both])
        rx = rankdata(x[both])
        with np.errstate(invalid="ignore", divide="ignore"):
            score = abs(float(np.corrcoef(rx, ry)[0, 1]))
        return f"|Spearman| {score:.4f}", score, LEAK_SCORE
    if nuniq > both.sum() / 10:
        return None
    yy = y[both].to_numpy()
    groups = pd.Series(yy).groupby(col[both].astype(object).to_numpy()).transform("mean").to_numpy()
    tot = float(((yy - yy.mean()) ** 2).sum())
    score = 1.0 - float(((yy - groups) ** 2).sum()) / tot if tot > 0 else 0.0
    return f"R^2 {score:.3f} of its category means", score, LEAK_R2


def suspect_columns(sample: pd.DataFrame, target: str, columns: Sequence[str], kinds: dict | None = None, *,
                    n_rows: int | None = None, lake=None) -> dict:
    """``{column: Suspect}`` for the columns of ``columns`` that look like identifiers,
    row numbers, leaks or dates stored as strings on the tree ``sample`` (see the module
    docstring).  ``n_rows``: the rows of the data (the sample holds them all when it has
    as many); ``lake``: a parquet lake's footers (:class:`daskpd._data.lake.LakeSchema`).

    The share, near-unique and leak rules need 100 sampled rows with a value; the
    Spearman / category-means leak rule needs at least two columns besides the target
    (one column explains the target by construction); the binned-copy rule does not (a
    column of few levels cannot)."""
    kinds = kinds or {}
    columns = [c for c in dict.fromkeys(columns) if c != target and c in sample]
    all_rows = n_rows is not None and len(sample) >= n_rows
    sub = sample.iloc[:WARN_ROWS]
    if target not in sub:
        return {}
    y = pd.Series(as_float(sub[target]))
    ok_y = np.isfinite(y.to_numpy())
    ranks = []

    def y_rank():
        if not ranks:
            from scipy.stats import rankdata

            ranks.append(rankdata(y.to_numpy()))
        return ranks[0]

    # the leak rule needs two columns that vary (one explains the target by construction)
    varying = sum(int(sub[c].nunique(dropna=True) > 1) for c in columns)
    out: dict[str, Suspect] = {}
    for c in columns:
        col = sub[c]
        dtype = col.dtype
        text = is_text(dtype)
        row_number = _row_number(sample[c], c, all_rows, lake)
        if row_number is not None:
            out[c] = Suspect(WHY_ROW_NUMBER, f"column {c!r} looks like a row number ({row_number}); leave it out of "
                                             "features / stratify_on")
            continue
        valid = col.notna().to_numpy()
        n = int(valid.sum())
        if text and n and _keys(col):
            out[c] = Suspect(WHY_IDENTIFIER, f"column {c!r} holds keys ({type(col[valid].iloc[0]).__name__} values): "
                                             "an identifier; leave it out of features / stratify_on")
            continue
        if n < 100:
            continue
        if text:
            when = _date_like(col)
            if when is not None:
                out[c] = Suspect(WHY_DATES, f"column {c!r} holds dates as strings (e.g. {when!r}): each date is a "
                                            "category; convert it to a number (e.g. the year) for a curve")
                continue
        nuniq = int(col[valid].nunique())
        if (text or pd.api.types.is_integer_dtype(dtype)) and nuniq >= ID_SHARE * n:
            out[c] = Suspect(WHY_IDENTIFIER, f"column {c!r} looks like an identifier ({nuniq:,} distinct values in "
                                             f"{n:,} sampled rows); leave it out of features / stratify_on")
            continue
        if text:
            share, m = _singletons(col[valid])
            if share >= 0.6 * NEAR_UNIQUE and len(sample) > len(sub):  # a candidate: judged on the whole sample
                full = sample[c]
                share, m = _singletons(full[full.notna()])
            if share >= NEAR_UNIQUE:
                out[c] = Suspect(WHY_IDENTIFIER, f"column {c!r} looks like an identifier ({share:.0%} of {m:,} sampled "
                                                 "rows hold a value no other row holds, as titles or free text do); "
                                                 "leave it out of features / stratify_on")
                continue
        if varying >= 2:
            kind = kinds.get(c) or ("categorical" if text or pd.api.types.is_bool_dtype(dtype) else "numeric")
            leak = _leak(c, col, kind, text, y, ok_y, y_rank, nuniq)
            if leak is not None and np.isfinite(leak[1]) and leak[1] >= leak[2]:
                out[c] = Suspect(WHY_LEAK, f"column {c!r} predicts {target!r} almost perfectly ({leak[0]} on the "
                                           "sample): a leak? leave it out of features / stratify_on")
                continue
        step = step_copy(col, y) if nuniq <= STEP_MAX_LEVELS else None
        if step is not None and (step.is_leak or step.is_warning):
            out[c] = _step_suspect(c, target, step)
    return out


def _step_suspect(c: str, target: str, step: Step) -> Suspect:
    """The suspect of a column whose levels cut the target into (nearly) consecutive
    intervals: a leak when they explain ``STEP_LEAK_R2`` of its variance, else a warning."""
    measured = (f"its {step.levels} levels hold {step.purity:.1%} of the sampled rows in consecutive intervals of "
                f"{target!r} and explain R^2 {step.r2:.2f} of the variance of its ranks")
    if step.is_leak:
        return Suspect(WHY_LEAK, f"column {c!r} looks like a thresholded or binned copy of {target!r} ({measured}): "
                                 "stratifying on it absorbs the other features' effects and flattens their curves; "
                                 "a leak? leave it out of features / stratify_on")
    return Suspect(WHY_LEAK, f"column {c!r} may be a thresholded or binned copy of {target!r} ({measured}): if it was "
                             f"derived from {target!r}, stratifying on it absorbs part of the other features' effects "
                             "and flattens their curves -- pass stratify_on= (and features=) without it; if it is a "
                             "genuine cause, keep it", leave=False)


def _singletons(values: pd.Series) -> tuple[float, int]:
    """``(share, rows)``: the share of ``values`` held by no other row, and the rows."""
    if not len(values):
        return 0.0, 0
    counts = values.astype(object).value_counts(sort=False).to_numpy()
    return float((counts == 1).sum()) / len(values), len(values)


def sample_warnings(sample: pd.DataFrame, target: str, features, strat_cols, kinds: dict, *,
                    n_rows: int | None = None, lake=None) -> list[str]:
    """The warning line of every suspect column among ``features`` and ``strat_cols``."""
    cols = list(dict.fromkeys([*features, *strat_cols]))
    return [s.message for s in suspect_columns(sample, target, cols, kinds, n_rows=n_rows, lake=lake).values()]


def leave_out(suspects: dict, features: list, strat_cols: list, *, default_features: bool, default_strat: bool,
              keep: bool = False) -> tuple[list, list, dict, dict, list]:
    """``(features, strat_cols, left_features, left_strat, warnings)``: ``suspects`` taken
    out of the default sets (``default_features`` / ``default_strat``; none with ``keep``),
    ``{column: why}`` of what left each, and the warning lines of the suspects still used
    (named explicitly, or kept)."""
    leaving = {c: s for c, s in suspects.items() if s.leave}
    left_f = {} if keep or not default_features else {f: leaving[f].why for f in features if f in leaving}
    left_s = {} if keep or not default_strat else {c: leaving[c].why for c in strat_cols if c in leaving}
    features = [f for f in features if f not in left_f]
    strat_cols = [c for c in strat_cols if c not in left_s]
    used = set(features) | set(strat_cols)
    lines = [s.message for c, s in suspects.items() if c in used]
    return features, strat_cols, left_f, left_s, lines
