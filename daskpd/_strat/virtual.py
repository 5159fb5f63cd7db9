"""Virtual buckets: the fixed groups of consecutive leaves over which float sums are made.

A reduction split into ``B`` buckets (``B <= N_VIRTUAL``) gives bucket ``b`` the leaves
``ceil(b L / B) <= leaf < ceil((b + 1) L / B)`` (:func:`bucket_bounds`).  Float sums over
leaves are made per *virtual* bucket (:func:`virtual_of`: ``N_VIRTUAL`` fixed groups; a
physical bucket is a run of them) and folded in virtual-bucket order, so a curve does
not depend on how many buckets the reduction used.  The scan (:mod:`.scan`) cuts the
buckets; the finishers (:mod:`.numeric`, :mod:`.categorical_buckets`) sum per virtual
bucket.
"""
from __future__ import annotations

import numpy as np

from .._engine.memory import MAX_BUCKETS

__all__ = ["N_VIRTUAL", "virtual_of", "bucket_bounds"]

#: fixed leaf groups over which float sums are made (>= every bucket count)
N_VIRTUAL = MAX_BUCKETS


def bucket_bounds(n_leaves: int, n_parts: int) -> np.ndarray:
    """Leaf bounds of ``n_parts`` runs of consecutive leaves: ``ceil(b L / n_parts)``."""
    b = np.arange(n_parts + 1, dtype=np.int64)
    return -((-b * int(n_leaves)) // int(n_parts))


def virtual_of(leaf: np.ndarray, n_leaves: int) -> np.ndarray:
    """Virtual bucket of each leaf: ``leaf * N_VIRTUAL // n_leaves``."""
    return (np.asarray(leaf, dtype=np.int64) * N_VIRTUAL) // int(n_leaves)
