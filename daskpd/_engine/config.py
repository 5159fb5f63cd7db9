"""daskpd's settings in dask's config: the ``daskpd.*`` keys and their defaults.

The defaults live in one file, ``daskpd/daskpd.yaml``, added to dask's defaults when
daskpd is imported (as dask and distributed add theirs), so that ``dask.config.get``
finds every key and a user's YAML, environment variable (``DASK_DASKPD__TASK_MEMORY``)
or ``dask.config.set`` overrides it.  Worker processes import daskpd with the first task
that uses it, so they get the same defaults.
"""
from __future__ import annotations

import os

import dask
import yaml

__all__ = ["get", "DEFAULTS_FILE"]

#: the file holding every ``daskpd.*`` key's default
DEFAULTS_FILE = os.path.join(os.path.dirname(os.path.dirname(__file__)), "daskpd.yaml")

with open(DEFAULTS_FILE) as _f:
    dask.config.update_defaults(yaml.safe_load(_f))


def get(key: str):
    """The value of the dask config key ``daskpd.<key>`` (its default from daskpd.yaml)."""
    return dask.config.get(f"daskpd.{key}")
