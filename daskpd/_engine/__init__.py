"""The engine: scheduling, reductions, hashing, memory.  Importing it adds daskpd's
``daskpd.*`` dask config defaults (:mod:`daskpd._engine.config`)."""
from . import config  # noqa: F401  (the defaults, before any module reads a key)
