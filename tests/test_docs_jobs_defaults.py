"""docs/jobs.md's full job-spec example shows the library's defaults.

The ```toml block of docs/jobs.md under "The job spec" lists every key of a job spec.
Each value it shows -- set, or commented out (``# key = value``) -- must equal the
default the job runner uses for that key, taken from the library itself: the parameter
tables of :mod:`daskpd.job.schema` (derived from the library functions' signatures) and
the structural tables of :mod:`daskpd.job.spec_keys`.  The only values exempt are those of
keys that have no default (required, or empty by default), listed in ``EXAMPLES``, and
the test checks that they really have none.  So a default edited in the library or in
the doc fails here until both agree, and a key added to the spec fails until the doc
lists it.
"""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from daskpd.job import schema, spec_keys

DOC = Path(__file__).resolve().parents[1] / "docs" / "jobs.md"

#: keys whose value in the example is an illustration: they have no default
EXAMPLES = {"name", "description", "target", "features", "exclude", "categorical", "numeric", "stratify_on", "methods", "source.path",
            "source.columns", "source.filters", "source.storage_options", "source.read_options",
            "source.synthetic", "source.rows", "source.params", "model.path", "model.fit", "model.trusted_types",
            "model.features", "model.columns", "model.target_class", "cluster.scheduler", "cluster.n_workers",
            "cluster.threads_per_worker", "output.dir", "model.row_id",
            "source.version", "source.timestamp", "source.iceberg", "source.catalog", "source.catalog_properties",
            "source.snapshot_id", "history.baseline", "history.window"}
NO_DEFAULT = (None, (), [], {}, "")
TABLES = {"source", "output", "cluster", "model", "run", "history"}


def library_keys() -> dict[str, schema.Key]:
    """dotted key -> the library's Key (check and default) for every key of a job spec."""
    keys = {k: v for k, v in {**spec_keys.TOP_KEYS, **schema.top_params()}.items() if k not in TABLES}
    for table, kmap in (("source", spec_keys.SOURCE_KEYS), ("output", spec_keys.OUTPUT_KEYS),
                        ("cluster", spec_keys.CLUSTER_KEYS), ("run", spec_keys.RUN_KEYS), ("history", spec_keys.HISTORY_KEYS),
                        ("model", {**spec_keys.MODEL_KEYS, **schema.model_params()}), *schema.method_params().items()):
        keys.update({f"{table}.{k}": v for k, v in kmap.items()})
    return keys


def example_block() -> str:
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## The job spec"):]
    m = re.search(r"^```toml\n(.*?)^```", section, re.S | re.M)
    assert m, "docs/jobs.md: no ```toml block under 'The job spec'"
    return m.group(1)


def shown_values() -> dict[str, tuple[object, bool]]:
    """dotted key -> (value, commented out) for every key the example shows."""
    block = example_block()
    out = {}

    def walk(d, prefix=""):
        for k, v in d.items():
            if isinstance(v, dict) and not prefix and k not in ("storage_options", "read_options", "params"):
                walk(v, f"{k}.")
            else:
                out[prefix + k] = (v, False)

    walk(tomllib.loads(block))
    table = ""
    for line in block.splitlines():
        if m := re.match(r"^\[(\w+)\]", line):
            table = m.group(1) + "."
        elif m := re.match(r"^#\s*([a-z_]+)\s*=\s*(.*)$", line):
            key = table + m.group(1)
            assert key not in out, f"{key} is shown both set and commented out"
            out[key] = (tomllib.loads(f"v = {m.group(2)}")["v"], True)
    return out


def _norm(v):
    if isinstance(v, (list, tuple)):
        return tuple(_norm(x) for x in v)
    return v


def test_the_example_lists_every_key_and_no_other():
    shown, keys = set(shown_values()), set(library_keys())
    assert not keys - shown, f"docs/jobs.md's example does not show: {sorted(keys - shown)}"
    assert not shown - keys, f"docs/jobs.md's example shows keys the spec does not have: {sorted(shown - keys)}"


def test_example_keys_really_have_no_default():
    keys = library_keys()
    wrong = {k: keys[k].default for k in EXAMPLES if k in keys and _norm(keys[k].default) not in NO_DEFAULT}
    assert not wrong, f"these keys have a default, so the doc must show it: {wrong}"
    assert EXAMPLES <= set(keys), sorted(EXAMPLES - set(keys))


@pytest.mark.parametrize("key", sorted(set(shown_values()) - EXAMPLES))
def test_shown_value_is_the_library_default(key):
    value, commented = shown_values()[key]
    k = library_keys()[key]
    assert not k.required, key
    assert _norm(k.check(value)) == _norm(k.default), (
        f"docs/jobs.md shows {key} = {value!r}{' (commented out)' if commented else ''}; "
        f"the library's default is {k.default!r}")


def test_the_doc_names_the_histogram_trees_bins():
    """The comment on tree_method states the bin rule of daskpd._strat.histbins."""
    from daskpd._strat import histbins

    assert f"{histbins.MAX_TREE_BINS_LIMIT:,}" in example_block()
