"""`daskpd validate` and `daskpd run`: every problem of a spec on its own line with its
key; "did you mean" for every name a user types (keys, methods, options, the target, the
features); a column with types that differ across the files, when it was only a default
column, says that leaving it out (key 'exclude') works."""
from __future__ import annotations

import numpy as np
import pandas as pd

from daskpd import cli

BAD = """
name = "x"
targt = "y"
methods = ["stratpd", "catstrapd"]
[source]
synthetic = "bulldoser"
rows = 0
[stratpd]
min_samples_lef = 3
"""


def run(argv, capsys):
    rc = cli.main(argv)
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_validate_lists_one_problem_per_line_with_its_key(tmp_path, capsys):
    spec = tmp_path / "job.toml"
    spec.write_text(BAD)
    rc, out, err = run(["validate", str(spec)], capsys)
    assert rc == 2 and out == "" and "Traceback" not in err
    lines = err.rstrip("\n").splitlines()
    assert lines[0] == f"daskpd: error: {spec}: 6 problems:"
    problems = lines[1:]
    assert len(problems) == 6 and all(p.startswith("  - ") for p in problems)
    want = ["unknown key 'targt' (did you mean 'target'?)",
            "missing required key 'target'",
            "key 'methods': unknown method 'catstrapd' (did you mean 'catstratpd'?)",
            "unknown key 'stratpd.min_samples_lef' (did you mean 'stratpd.min_samples_leaf'?)",
            "key 'source.synthetic': expected one of 'bulldozer', 'quadratic', 'linear', got string 'bulldoser' "
            "(did you mean 'bulldozer'?)",
            "key 'source.rows': expected an integer >= 1, got integer 0"]
    for w in want:
        assert sum(w in p for p in problems) == 1, (w, problems)
    # run reports the same way, and writes nothing
    rc, _, err2 = run(["run", str(spec), "--output", str(tmp_path / "out"), "--no-progress"], capsys)
    assert rc == 2 and err2 == err and not (tmp_path / "out").exists()


def test_check_data_suggests_the_target_and_features(tmp_path, capsys):
    spec = tmp_path / "job.toml"
    spec.write_text('name = "x"\ntarget = "SalePrise"\n[source]\nsynthetic = "bulldozer"\nrows = 1000\n')
    rc, _, err = run(["validate", str(spec), "--check-data"], capsys)
    assert rc == 2 and err.count("\n") == 1
    assert "column 'SalePrise' not found in data (key 'target'). Did you mean 'SalePrice'?" in err
    spec.write_text('name = "x"\ntarget = "SalePrice"\nfeatures = ["YearMade", "ModelId"]\n'
                    '[source]\nsynthetic = "bulldozer"\nrows = 1000\n')
    rc, _, err = run(["validate", str(spec), "--check-data"], capsys)
    assert rc == 2 and "column 'ModelId' not found in data (key 'features'). Did you mean 'ModelID'?" in err


def _mixed_lake(path):
    path.mkdir()
    rng = np.random.default_rng(0)
    for i in range(2):
        df = pd.DataFrame({"x": rng.normal(size=500), "z": rng.normal(size=500)})
        df["y"] = df.x + df.z
        df["m"] = np.arange(500) if i == 0 else np.array(["a"] * 500)  # int64 in one file, strings in the other
        df.to_parquet(path / f"p{i}.parquet")
    return path


def test_mixed_types_in_a_default_column_say_exclude_works(tmp_path, capsys):
    lake = _mixed_lake(tmp_path / "lake")
    spec = tmp_path / "job.toml"
    spec.write_text(f'name = "x"\ntarget = "y"\n[source]\npath = "{lake}"\n')
    rc, _, err = run(["validate", str(spec), "--check-data"], capsys)
    assert rc == 2 and err.count("\n") == 1
    assert "column 'm' has incompatible types across the parquet files" in err
    assert ("'m' was only one of the default columns (every column but the target), and the call works without it: "
            "add it to the job's key 'exclude' (exclude = ['m'])") in err
    spec.write_text(f'name = "x"\ntarget = "y"\nexclude = ["m"]\n[source]\npath = "{lake}"\n')
    rc, out, err = run(["validate", str(spec), "--check-data"], capsys)
    assert rc == 0 and "features: x, z" in out, err


def test_a_multiclass_model_needs_the_job_key_target_class(tmp_path, capsys):
    import joblib
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(2)
    df = pd.DataFrame({"a": rng.normal(size=300), "b": rng.normal(size=300)})
    df["y"] = np.digitize(df.a + df.b, [-0.5, 0.5]).astype(float)
    df.to_parquet(tmp_path / "data.parquet")
    joblib.dump(LogisticRegression().fit(df[["a", "b"]], np.array(["lo", "mid", "hi"])[df.y.astype(int)]),
                tmp_path / "m.joblib")
    spec = tmp_path / "job.toml"
    spec.write_text('name = "x"\ntarget = "y"\nmethods = ["ale"]\n[source]\npath = "data.parquet"\n'
                    '[model]\npath = "m.joblib"\ntrust_model = true\n')
    rc, _, err = run(["validate", str(spec), "--check-data"], capsys)
    assert rc == 2 and err.count("\n") == 1
    assert ("key 'model.target_class' is required: the model is a classifier of 3 classes (['hi', 'lo', 'mid'])"
            in err), err
    spec.write_text(spec.read_text() + 'target_class = "hi"\n')
    rc, out, err = run(["validate", str(spec), "--check-data"], capsys)
    assert rc == 0, err
