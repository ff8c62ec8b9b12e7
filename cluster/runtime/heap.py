"""Keeping a long-lived process's heap out of the cycle collector's way (silos and handlers).

A trigger burst allocates a few objects per job that live for one Ray round trip: runs, attempts,
outcomes. With CPython's default thresholds (700 allocations) they outlive two young collections,
reach the oldest generation, and every so often a full collection walks the whole heap — every
loaded job, Ray's own objects — for 80-130 ms per silo per burst (issue 15's profile). Two settings,
for the process that runs a silo or a handler, never for a library caller's process:

- ``tune()``: a young generation of ``YOUNG`` allocations, so that most of a burst's objects die
  before a collection sees them, and fewer of them are promoted;
- ``settle()``: ``gc.freeze()`` once a shard is loaded: what loading built lives long, so later
  collections skip it. Frozen objects are still freed by reference counting; only cycles among
  them (a dropped shard and its state, one per shard window) wait for the next ``unfreeze``.
"""

from __future__ import annotations

import gc

__all__ = ["YOUNG", "tune", "settle"]

YOUNG = 50_000  # allocations between young collections (CPython's default: 700)


def tune() -> None:
    """Collect the young generation every ``YOUNG`` allocations (older ones as CPython does)."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG, middle, old)


def settle() -> None:
    """Move everything alive now out of the collector's sight (after loading a shard)."""
    gc.freeze()
