"""Job specs: validation, error messages naming the key, and the CLI's handling of bad specs."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from daskpd import cli
from daskpd.job.spec import METHOD_PARAMS, SpecError, check_name
from daskpd.job.spec_parse import expand_env, load_spec, parse_spec

REPO = Path(__file__).resolve().parents[2]
DASKPD = Path(sys.executable).with_name("daskpd")

MINIMAL = """
name = "t"
target = "y"
[source]
path = "data.parquet"
"""


def write(tmp_path, text, name="job.toml", data=True):
    if data:
        (tmp_path / "data.parquet").write_bytes(b"PAR1")  # existence is all validation checks
    p = tmp_path / name
    p.write_text(text)
    return p


def errors_of(tmp_path, text, **kw) -> list[str]:
    with pytest.raises(SpecError) as ei:
        load_spec(write(tmp_path, text, **kw))
    return ei.value.errors


# ------------------------------------------------------------------ valid specs
def test_minimal_spec_defaults(tmp_path):
    spec = load_spec(write(tmp_path, MINIMAL))
    assert spec.name == "t" and spec.target == "y"
    assert spec.features is None and spec.categorical == () and spec.exclude == ()
    assert spec.methods == ("stratpd", "catstratpd", "importances")
    assert spec.source.path == str(tmp_path / "data.parquet")  # relative to the spec file
    assert spec.params["stratpd"] == {"min_samples_leaf": 15, "min_slopes_per_x": 5, "few_slopes": "interpolate",
                                      "max_bins": 1000}
    assert spec.params["catstratpd"]["min_samples_leaf"] == 5
    assert spec.output.dir is None and spec.output.plots and spec.output.report and spec.output.keep == 0
    assert spec.model is None and spec.cluster.scheduler is None
    assert spec.spec_text.strip().startswith('name = "t"')
    assert spec.tree_method == "hist"
    assert load_spec(write(tmp_path, MINIMAL.replace('target = "y"', 'target = "y"\ntree_method = "exact"'))).tree_method == "exact"


def test_full_spec(tmp_path):
    (tmp_path / "m.skops").write_bytes(b"x")
    (tmp_path / "lake").mkdir()
    text = """
name = "full.job-1"
description = "all the keys"
target = "SalePrice"
features = ["YearMade", "ModelID", "MachineHours"]
categorical = "ModelID"
methods = ["stratpd", "catstratpd", "importances", "partial_dependence"]
sample_size = 5000
random_state = 7

[source]
path = "lake"
columns = ["SalePrice", "YearMade", "ModelID", "MachineHours"]
filters = [["sale_year", ">=", 2005], ["state", "in", ["CA", "NY"]]]
storage_options = { anon = true }
fingerprint = "content"

[stratpd]
min_samples_leaf = 10
max_bins = false

[catstratpd]
nan_as_level = true

[importances]
n_trials = 3

[partial_dependence]
grid_resolution = 20

[model]
path = "m.skops"
trusted_types = ["sklearn.ensemble._gb.GradientBoostingRegressor"]

[cluster]
scheduler = "tcp://10.0.0.1:8786"

[output]
dir = "../runs"
keep = 3
"""
    spec = load_spec(write(tmp_path, text))
    assert spec.name == "full.job-1" and spec.categorical == ("ModelID",)
    assert spec.source.filters == [[("sale_year", ">=", 2005), ("state", "in", ("CA", "NY"))]]
    assert spec.source.storage_options == {"anon": True} and spec.source.fingerprint == "content"
    assert spec.params["stratpd"]["max_bins"] is None and spec.params["stratpd"]["min_samples_leaf"] == 10
    assert spec.params["importances"]["n_trials"] == 3 and "bootstrap" not in spec.params["importances"]
    assert spec.model.path == str(tmp_path / "m.skops") and spec.model.format == "skops"
    assert spec.model_based == ("partial_dependence",)
    assert spec.output.dir == str(tmp_path.parent / "runs") and spec.output.keep == 3
    d = spec.to_dict()
    assert d["source"]["filters"] == [[["sale_year", ">=", 2005], ["state", "in", ["CA", "NY"]]]]


def test_dnf_filters_and_ops(tmp_path):
    spec = load_spec(write(tmp_path, MINIMAL + 'filters = [[["a", "=", 1]], [["b", "not in", [1, 2]], ["c", "<", 2.5]]]\n'))
    assert spec.source.filters == [[("a", "==", 1)], [("b", "not in", (1, 2)), ("c", "<", 2.5)]]


def test_synthetic_source(tmp_path):
    spec = load_spec(write(tmp_path, 'name = "s"\ntarget = "y"\n[source]\nsynthetic = "quadratic"\nrows = 1000\n'
                                     "params = { spread = 0.2 }\n", data=False))
    assert spec.source.synthetic == "quadratic" and spec.source.rows == 1000 and spec.source.path is None


def test_env_expansion(tmp_path, monkeypatch):
    (tmp_path / "lake").mkdir()
    monkeypatch.setenv("MY_LAKE", str(tmp_path / "lake"))
    spec = load_spec(write(tmp_path, 'name = "e"\ntarget = "y"\n[source]\npath = "$MY_LAKE"\n'
                                     '[output]\ndir = "${MY_OUT:-out}"\n', data=False))
    assert spec.source.path == str(tmp_path / "lake")
    assert spec.output.dir == str(tmp_path / "out")
    errs = []
    assert expand_env("${A}/${B:-b}", "k", errs, {"A": "a"}) == "a/b" and not errs
    expand_env("$NOPE/x", "source.path", errs, {})
    assert errs == ["key 'source.path': environment variable NOPE is not set (in '$NOPE/x'; use ${NOPE:-default} "
                    "for a default)"]


@pytest.mark.parametrize("path", sorted((REPO / "jobs").glob("*.toml")), ids=lambda p: p.name)
def test_example_jobs_validate(path, monkeypatch, tmp_path):
    (tmp_path / "auctions").mkdir()
    monkeypatch.setenv("DASKPD_LAKE", str(tmp_path))
    spec = load_spec(path)
    assert spec.target == "SalePrice"
    assert set(spec.model_free) == {"stratpd", "catstratpd", "importances"}


def test_example_job_names():
    names = {load_spec(p, check_files=False).name for p in (REPO / "jobs").glob("*.toml")}
    assert {"bulldozer-demo", "auctions-lake", "auctions-nightly"} <= names


# ------------------------------------------------------------------ invalid specs
def test_unknown_keys_named_with_dotted_path_and_suggestion(tmp_path):
    errs = errors_of(tmp_path, MINIMAL.replace('target = "y"', 'target = "y"\ntargte = "z"')
                     + "[stratpd]\nmin_sample_leaf = 3\n")
    assert any("unknown key 'targte'" in e and "did you mean 'target'" in e for e in errs), errs
    assert any("unknown key 'stratpd.min_sample_leaf'" in e and "did you mean 'stratpd.min_samples_leaf'" in e
               for e in errs), errs


def test_unknown_nested_source_key(tmp_path):
    errs = errors_of(tmp_path, MINIMAL + "filter = []\n")
    assert errs == [errs[0]] and "unknown key 'source.filter'" in errs[0] and "'source.filters'" in errs[0]


def test_missing_target(tmp_path):
    errs = errors_of(tmp_path, MINIMAL.replace('target = "y"\n', ""))
    assert errs == ["missing required key 'target'"]


def test_missing_source(tmp_path):
    assert errors_of(tmp_path, 'name = "a"\ntarget = "y"\n') == ["missing required key 'source'"]


@pytest.mark.parametrize("line, key, expected", [
    ('sample_size = "big"', "sample_size", "expected an integer >= 2, got string 'big'"),
    ("sample_size = 1", "sample_size", "expected an integer >= 2, got integer 1"),
    ("random_state = -1", "random_state", "expected an integer >= 0"),
    ("features = [1, 2]", "features", "expected an array of non-empty strings"),
    ('features = ["a", "a"]', "features", "'a' repeated"),
    ("description = 3", "description", "expected a string, got integer 3"),
    ("source = 3", "source", "expected a table, got integer 3"),
    ('tree_method = "fast"', "tree_method", "'fast'"),
])
def test_wrong_types(tmp_path, line, key, expected):
    text = MINIMAL.replace('target = "y"', f'target = "y"\n{line}')
    if line.startswith("source"):
        text = f'name = "t"\ntarget = "y"\n{line}\n'
    errs = errors_of(tmp_path, text)
    assert any(e.startswith(f"key '{key}':") and expected in e for e in errs), errs


@pytest.mark.parametrize("table, line, expected", [
    ("stratpd", "min_samples_leaf = 0", "key 'stratpd.min_samples_leaf': expected an integer >= 1, got integer 0"),
    ("stratpd", "max_bins = true", "key 'stratpd.max_bins': expected an integer >= 2 or false, got boolean true"),
    ("catstratpd", 'nan_as_level = "yes"', "key 'catstratpd.nan_as_level': expected true or false"),
    ("importances", "n_trials = 2.5", "key 'importances.n_trials': expected an integer in [1, 10000], got float 2.5"),
    ("output", "keep = -1", "key 'output.keep': expected an integer >= 0"),
    ("importances", "bootstrap = false", "unknown key 'importances.bootstrap'"),
    ("cluster", "n_workers = 0", "key 'cluster.n_workers': expected an integer >= 1"),
])
def test_wrong_types_in_tables(tmp_path, table, line, expected):
    errs = errors_of(tmp_path, MINIMAL.replace("[source]", f"[{table}]\n{line}\n[source]"))
    assert any(expected in e for e in errs), errs


@pytest.mark.parametrize("filters, expected", [
    ('"a > 1"', "expected an array of [column, operator, value] triples"),
    ('[["a", "~", 1]]', "item 1: operator '~' is not one of"),
    ('[["a", "in", 1]]', "operator 'in' needs an array of values"),
    ('[["a", ">"]]', "item 1: expected an array of [column, operator, value] triples"),
])
def test_bad_filters(tmp_path, filters, expected):
    errs = errors_of(tmp_path, MINIMAL + f"filters = {filters}\n")
    assert len(errs) == 1 and errs[0].startswith("key 'source.filters':") and expected in errs[0], errs


def test_missing_data_file(tmp_path):
    errs = errors_of(tmp_path, MINIMAL.replace("data.parquet", "nope/*.parquet"))
    assert errs == [f"key 'source.path': {str(tmp_path / 'nope/*.parquet')!r} does not exist (the glob matches no file)"]


def test_unset_env_var_in_path(tmp_path, monkeypatch):
    monkeypatch.delenv("DASKPD_NO_SUCH_VAR", raising=False)
    errs = errors_of(tmp_path, MINIMAL.replace("data.parquet", "${DASKPD_NO_SUCH_VAR}/x"))
    assert any("environment variable DASKPD_NO_SUCH_VAR is not set" in e for e in errs), errs


@pytest.mark.parametrize("name, expected", [
    ("../escape", "may contain only letters"),
    ("a..b", "must not contain '..'"),
    ("..", "must not contain '..'"),
    ("a/b", "may contain only letters"),
    (".hidden", "must not start with '.'"),
    ("latest", "is reserved"),
    ("", "expected a non-empty string"),
])
def test_bad_job_names(tmp_path, name, expected):
    errs = errors_of(tmp_path, MINIMAL.replace('name = "t"', f"name = {name!r}".replace("'", '"')))
    assert len(errs) == 1 and "name" in errs[0] and expected in errs[0], errs


def test_check_name_run_ids():
    assert check_name("2026-11-22", "run id") == "2026-11-22"
    for bad in ("a..b", "x/y", "history", "LATEST"):
        with pytest.raises(ValueError):
            check_name(bad, "run id")


def test_methods_validation(tmp_path):
    errs = errors_of(tmp_path, MINIMAL.replace('target = "y"', 'target = "y"\nmethods = ["stratpd", "shap"]'))
    assert any("key 'methods': unknown method 'shap'" in e for e in errs), errs
    errs = errors_of(tmp_path, MINIMAL.replace('target = "y"', 'target = "y"\nmethods = ["ice"]'))
    assert any("ice needs a model" in e for e in errs), errs
    errs = errors_of(tmp_path, MINIMAL.replace('target = "y"', 'target = "y"\nmethods = ["stratpd"]')
                     + "[catstratpd]\nmin_samples_leaf = 3\n")
    assert any("table [catstratpd] is given but 'catstratpd' is not in 'methods'" in e for e in errs), errs


def test_pickle_model_needs_trust(tmp_path):
    (tmp_path / "m.pkl").write_bytes(b"x")
    text = MINIMAL.replace('target = "y"', 'target = "y"\nmethods = ["partial_dependence"]') + \
        '[model]\npath = "m.pkl"\n'
    errs = errors_of(tmp_path, text)
    assert len(errs) == 1 and errs[0].startswith("key 'model.trust_model':") and "runs arbitrary code" in errs[0]
    spec = load_spec(write(tmp_path, text + "trust_model = true\n"))
    assert spec.model.format == "pickle" and spec.model.trust_model


def test_model_file_missing_and_unknown_format(tmp_path):
    text = MINIMAL.replace('target = "y"', 'target = "y"\nmethods = ["ale"]') + '[model]\npath = "m.bin"\n'
    errs = errors_of(tmp_path, text)
    assert any(e.startswith("key 'model.path':") and "does not exist" in e for e in errs), errs
    assert any(e.startswith("key 'model.format':") for e in errs), errs


def test_source_needs_exactly_one_of_path_and_synthetic(tmp_path):
    errs = errors_of(tmp_path, 'name = "a"\ntarget = "y"\n[source]\nformat = "csv"\n')
    assert any("expected exactly one of 'source.path'" in e for e in errs), errs
    errs = errors_of(tmp_path, 'name = "a"\ntarget = "y"\n[source]\nsynthetic = "bulldozer"\n', data=False)
    assert errs == ["missing required key 'source.rows' (rows of the synthetic dataset)"]
    errs = errors_of(tmp_path, 'name = "a"\ntarget = "y"\n[source]\nsynthetic = "bulldozer"\nrows = 5\n'
                               "params = { n_model = 3 }\n", data=False)
    assert any("unknown key 'source.params.n_model'" in e and "did you mean 'source.params.n_models'" in e
               for e in errs), errs


def test_synthetic_only_keys_rejected_with_a_path(tmp_path):
    errs = errors_of(tmp_path, MINIMAL + "rows = 10\nrandom_state = 1\n")
    assert errs == ["key 'source.rows' applies only to a synthetic source",
                    "key 'source.random_state' applies only to a synthetic source"]


def test_target_in_features_and_columns(tmp_path):
    errs = errors_of(tmp_path, MINIMAL.replace('target = "y"', 'target = "y"\nfeatures = ["y", "x"]')
                     + 'columns = ["x"]\n')
    assert "key 'features': lists the target 'y'" in errs
    assert "key 'source.columns': does not list the target 'y'" in errs


def test_all_problems_reported_at_once(tmp_path):
    errs = errors_of(tmp_path, 'name = "a..b"\nbogus = 1\n[source]\npath = "missing.parquet"\n', data=False)
    assert len(errs) == 4, errs
    msg = str(SpecError("job.toml", errs))
    assert msg.splitlines() == ["job.toml: 4 problems:", *(f"  - {e}" for e in errs)]  # one problem per line


def test_invalid_toml_and_missing_file(tmp_path):
    with pytest.raises(SpecError, match=r"invalid TOML: .*line 2"):
        load_spec(write(tmp_path, 'name = "a"\ntarget = \n'))
    with pytest.raises(SpecError, match="the job spec file does not exist"):
        load_spec(tmp_path / "nope.toml")


def test_every_method_has_a_param_table():
    from daskpd.job.spec import METHODS

    assert set(METHOD_PARAMS) == set(METHODS)


def test_parse_spec_rejects_non_table():
    with pytest.raises(SpecError):
        parse_spec([1, 2])


# ------------------------------------------------------------------ the CLI on bad specs
BAD_SPECS = {
    "unknown-key": (MINIMAL + "colums = ['y']\n", "unknown key 'source.colums'"),
    "missing-target": (MINIMAL.replace('target = "y"\n', ""), "missing required key 'target'"),
    "wrong-type": (MINIMAL.replace('target = "y"', 'target = "y"\nsample_size = "lots"'),
                   "key 'sample_size': expected an integer >= 2, got string 'lots'"),
    "missing-file": (MINIMAL.replace("data.parquet", "gone.parquet"), "key 'source.path':"),
    "dotdot-name": (MINIMAL.replace('name = "t"', 'name = "x..y"'), "must not contain '..'"),
}


@pytest.mark.parametrize("case", sorted(BAD_SPECS))
def test_cli_bad_spec_exit_2_one_line_nothing_written(tmp_path, capsys, case):
    text, expected = BAD_SPECS[case]
    spec = write(tmp_path, text)
    out = tmp_path / "out"
    rc = cli.main(["run", str(spec), "--output", str(out), "--no-progress"])
    cap = capsys.readouterr()
    assert rc == 2
    lines = cap.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("daskpd: error: ") and expected in lines[0], cap.err
    assert "Traceback" not in cap.err and cap.out == ""
    assert not out.exists()


def test_cli_subprocess_bad_spec(tmp_path):
    """The installed console script: exit status 2, one line on stderr, nothing written."""
    spec = write(tmp_path, MINIMAL.replace('name = "t"', 'name = "../evil"'))
    out = tmp_path / "out"
    p = subprocess.run([str(DASKPD), "run", str(spec), "--output", str(out)], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("daskpd: error: ") and "Traceback" not in p.stderr
    assert "may contain only letters" in p.stderr
    assert not out.exists() and sorted(os.listdir(tmp_path)) == ["data.parquet", "job.toml"]


def test_cli_validate(tmp_path, capsys):
    assert cli.main(["validate", str(write(tmp_path, MINIMAL))]) == 0
    assert "ok: job 't'" in capsys.readouterr().out
    assert cli.main(["validate", str(tmp_path / "nope.toml")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_cli_validate_check_data_names_missing_column(tmp_path, capsys):
    import pandas as pd

    pd.DataFrame({"x": [1.0, 2.0], "y": [1.0, 3.0]}).to_parquet(tmp_path / "d.parquet")
    spec = write(tmp_path, MINIMAL.replace("data.parquet", "d.parquet").replace(
        'target = "y"', 'target = "y"\nfeatures = ["x", "z"]'), data=False)
    assert cli.main(["validate", str(spec)]) == 0
    capsys.readouterr()
    assert cli.main(["validate", str(spec), "--check-data"]) == 2
    err = capsys.readouterr().err
    assert "'z' not found" in err and "available columns: x, y" in err


def test_cli_usage_errors(tmp_path, capsys):
    spec = write(tmp_path, MINIMAL)
    assert cli.main(["run", str(spec), "--run-id", "../x", "--output", str(tmp_path / "o")]) == 2
    assert "--run-id" in capsys.readouterr().err
    assert cli.main(["run", str(spec), "--tls-cert", "c.pem"]) == 2
    assert "--tls-ca-file and --tls-cert go together" in capsys.readouterr().err
    with pytest.raises(SystemExit) as ei:
        cli.main(["run"])
    assert ei.value.code == 2
    assert not (tmp_path / "o").exists()



def test_few_slopes_is_a_spec_key(tmp_path):
    """[stratpd] few_slopes comes from stratpd's signature and constraints."""
    from daskpd.job.spec_parse import load_spec

    lake = tmp_path / "lake"
    lake.mkdir()
    for rule in ("interpolate", "flat"):
        p = tmp_path / f"{rule}.toml"
        p.write_text(f'name = "fs"\ntarget = "y"\nmethods = ["stratpd"]\n[source]\npath = "{lake}"\n'
                     f'[stratpd]\nfew_slopes = "{rule}"\n')
        assert load_spec(p, check_files=False).params["stratpd"]["few_slopes"] == rule
    p = tmp_path / "bad.toml"
    p.write_text(f'name = "fs"\ntarget = "y"\nmethods = ["stratpd"]\n[source]\npath = "{lake}"\n'
                 '[stratpd]\nfew_slopes = "carry"\n')
    with pytest.raises(Exception, match="few_slopes"):
        load_spec(p, check_files=False)


def test_model_trials_keys(tmp_path):
    """[model] n_trials / bootstrap / subsample_size / band: the functions' names and checks;
    recursion (which reads no rows) cannot have trials."""
    (tmp_path / "m.skops").write_bytes(b"x")
    text = MINIMAL.replace('target = "y"', 'target = "y"\nmethods = ["partial_dependence", "ale"]') + \
        '[model]\npath = "m.skops"\nn_trials = 20\nbootstrap = false\nsubsample_size = 0.5\nband = [0.1, 0.9]\n'
    spec = load_spec(write(tmp_path, text))
    m = spec.model
    assert (m.n_trials, m.bootstrap, m.subsample_size, m.band) == (20, False, 0.5, (0.1, 0.9))
    assert load_spec(write(tmp_path, MINIMAL + '[model]\npath = "m.skops"\n')).model.n_trials == 1
    errs = errors_of(tmp_path, text.replace("n_trials = 20", "n_trials = 0"))
    assert len(errs) == 1 and errs[0] == "key 'model.n_trials': expected an integer in [1, 10000], got integer 0", errs
    errs = errors_of(tmp_path, text + '[partial_dependence]\nmethod = "recursion"\n')
    assert len(errs) == 1 and "recursion" in errs[0] and "model.n_trials" in errs[0], errs


def test_model_fit_only_with_a_synthetic_source(tmp_path):
    syn = ('name = "d"\ntarget = "SalePrice"\nmethods = ["partial_dependence"]\n'
           '[source]\nsynthetic = "bulldozer"\nrows = 1000\n')
    spec = load_spec(write(tmp_path, syn + '[model]\nfit = "hist_gradient_boosting"\n', data=False))
    assert spec.model.fit == "hist_gradient_boosting" and spec.model.path == ""
    errs = errors_of(tmp_path, syn + '[model]\nfit = "hist_gradient_boosting"\npath = "m.skops"\n', data=False)
    assert any("give one of 'model.path' (a saved model) and 'model.fit'" in e for e in errs), errs
    errs = errors_of(tmp_path, syn + '[model]\nfit = "hist_gradient_bosting"\n', data=False)
    assert any("(did you mean 'hist_gradient_boosting'?)" in e for e in errs), errs
    errs = errors_of(tmp_path, syn + "[model]\nn_trials = 2\n", data=False)
    assert any("missing required key 'model.path'" in e for e in errs), errs
    errs = errors_of(tmp_path, MINIMAL.replace('target = "y"', 'target = "y"\nmethods = ["ale"]')
                     + '[model]\nfit = "hist_gradient_boosting"\n')
    assert any("key 'model.fit': a job fits 'hist_gradient_boosting' on a synthetic source only" in e
               for e in errs), errs


# ------------------------------------------------------------------ table sources and incremental runs
def test_table_source_keys(tmp_path):
    """A Delta table (its directory, a pinned version or timestamp), an Iceberg table
    through its catalog or by its metadata JSON (a pinned snapshot), each key checked
    against the source it applies to."""
    (tmp_path / "events" / "_delta_log").mkdir(parents=True)
    spec = load_spec(write(tmp_path, MINIMAL.replace('"data.parquet"', '"events"\nversion = 3')))
    assert (spec.source.path, spec.source.version, spec.source.is_iceberg) == (str(tmp_path / "events"), 3, False)
    spec = load_spec(write(tmp_path, MINIMAL.replace('"data.parquet"', '"events"\ntimestamp = 2026-12-01T00:00:00Z')))
    assert spec.source.timestamp == "2026-12-01T00:00:00+00:00"
    ice = MINIMAL.replace('path = "data.parquet"', 'iceberg = "ns.events"\ncatalog = "prod"\nsnapshot_id = 12\n'
                          'catalog_properties = { type = "sql", uri = "sqlite:///c.db" }')
    spec = load_spec(write(tmp_path, ice))
    s = spec.source
    assert (s.path, s.iceberg, s.catalog, s.snapshot_id, s.is_iceberg) == (None, "ns.events", "prod", 12, True)
    assert s.catalog_properties == {"type": "sql", "uri": "sqlite:///c.db"} and s.label == "iceberg:ns.events"
    (tmp_path / "v1.metadata.json").write_text("{}")
    assert load_spec(write(tmp_path, MINIMAL.replace("data.parquet", "v1.metadata.json"))).source.is_iceberg

    errs = errors_of(tmp_path, MINIMAL.replace('path = "data.parquet"', 'path = "data.parquet"\niceberg = "ns.t"'))
    assert any("expected exactly one of 'source.path'" in e for e in errs)
    assert errors_of(tmp_path, MINIMAL.replace('"data.parquet"', '"data.parquet"\nsnapshot_id = 3')) == [
        "key 'source.snapshot_id': applies to an Iceberg table only ('source.iceberg', or a path to a metadata JSON)"]
    assert errors_of(tmp_path, ice.replace("snapshot_id = 12", "version = 2")) == [
        "key 'source.version': applies to a Delta table only (a directory holding _delta_log/)"]
    assert errors_of(tmp_path, ice.replace("snapshot_id = 12", 'snapshot_id = 12\ntimestamp = "2026-01-01"')) == [
        "keys 'source.timestamp' and 'source.version' / 'source.snapshot_id': give one or the other"]
    assert errors_of(tmp_path, ice.replace("snapshot_id = 12", 'timestamp = "yesterday"')) == [
        "key 'source.timestamp': expected an ISO 8601 date-time (e.g. 2026-12-01T00:00:00Z), got string 'yesterday'"]
    assert errors_of(tmp_path, MINIMAL.replace('"data.parquet"', '"data.parquet"\nformat = "delta"')) == [
        f"key 'source.format': \"delta\", but {str(tmp_path / 'data.parquet')!r} holds no _delta_log/ directory"]


def test_incremental_defaults_to_refit_auto_and_validate_says_when_no_night_can_be(tmp_path, capsys):
    spec = load_spec(write(tmp_path, MINIMAL + "[run]\nincremental = true\n"))
    assert (spec.run.incremental, spec.run.refit, spec.run.refit_share) == (True, "auto", 0.1)
    assert cli.main(["validate", str(write(tmp_path, MINIMAL + "[run]\nincremental = true\n"))]) == 0
    assert "note" not in capsys.readouterr().out
    (tmp_path / "d.csv").write_text("x,y\n1,2\n")
    spec = write(tmp_path, MINIMAL.replace("data.parquet", "d.csv") + "[run]\nincremental = true\n")
    assert cli.main(["validate", str(spec)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "  note: [run] incremental = true, but every night is a full run: CSV sources are read in full (a CSV " \
           "file has no footer that counts its rows)" in out
    spec = write(tmp_path, MINIMAL + '[importances]\npvalues = true\n[run]\nincremental = true\n')
    assert cli.main(["validate", str(spec)]) == 0
    assert "every night is a full run: importances.pvalues refits trees on the sample" in capsys.readouterr().out
    spec = write(tmp_path, MINIMAL + '[run]\nincremental = true\nrefit = "always"\n')
    assert cli.main(["validate", str(spec)]) == 0
    assert 'every night is a full run: refit = "always": the trees are fitted again on every run' in \
        capsys.readouterr().out
