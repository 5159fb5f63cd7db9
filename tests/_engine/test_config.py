"""daskpd's dask config keys: one file of defaults, every key read has one, every key is
documented, and the usual dask overrides reach it (environment, dask.config.set)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import dask
import yaml

from daskpd._engine import config

ROOT = Path(__file__).resolve().parents[2]


def _keys_read_in_the_code() -> set:
    keys = set()
    for path in (ROOT / "daskpd").rglob("*.py"):
        if path.name == "config.py" and path.parent.name == "_engine":
            continue
        text = path.read_text()
        keys |= set(re.findall(r'config\.get\("([a-z-]+)"\)', text))
        assert not re.search(r'dask\.config\.get\(f?"daskpd\.', text), \
            f"{path}: read daskpd.* keys through daskpd._engine.config.get (one home for the defaults)"
    return keys


def test_every_key_read_has_a_default_and_a_doc():
    defaults = yaml.safe_load(Path(config.DEFAULTS_FILE).read_text())["daskpd"]
    read = _keys_read_in_the_code()
    assert len(read) >= 10, read
    assert read <= set(defaults), f"keys read without a default in daskpd.yaml: {sorted(read - set(defaults))}"
    assert set(defaults) <= read, f"defaults nobody reads: {sorted(set(defaults) - read)}"
    docs = "\n".join(p.read_text() for p in (ROOT / "docs").glob("*.md"))
    undocumented = [k for k in defaults if f"daskpd.{k}" not in docs]
    assert not undocumented, f"daskpd.* keys missing from docs/: {undocumented}"


def test_defaults_are_in_dask_config_and_set_overrides_them():
    assert config.get("worker-arrow-pool") == "system"
    assert config.get("task-memory") == "auto"
    with dask.config.set({"daskpd.task-memory": "512MiB"}):
        assert config.get("task-memory") == "512MiB"
    assert config.get("task-memory") == "auto"


def test_an_environment_variable_overrides_a_default_in_a_fresh_process():
    env = dict(os.environ, DASK_DASKPD__WORKER_HEAP_TRIM="0", DASK_DASKPD__SPLIT_EVERY="4")
    code = ("from daskpd._engine import config; "
            "print(config.get('worker-heap-trim'), config.get('split-every'), config.get('worker-arrow-pool'))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["0", "4", "system"]
