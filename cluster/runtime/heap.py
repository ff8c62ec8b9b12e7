"""Keeping a long-lived process's heap out of the cycle collector's way (silos and handlers).

A trigger burst allocates a few objects per job that live for one Ray round trip: runs, attempts,
outcomes. With CPython's default thresholds (700 allocations) they outlive two young collections,
reach the oldest generation, and every so often a full collection walks the whole heap — every
loaded job, Ray's own objects — for 80-130 ms per silo per burst (issue 15's profile). Two settings,
for the process that runs a silo, never for a library caller's process: ``tune()`` sets a young
generation of ``YOUNG`` allocations, so that most of a burst's objects die before a collection
sees them, and fewer of them are promoted to be walked by full collections.

``gc.freeze()`` after each load, kept frozen, was tried and left out: a loaded shard is a reference
cycle (each entry points back at its shard), so a shard let go while loaded — handed over, lost,
adopted back — would stay frozen, and its jobs' memory would never be freed. A load does end with
``freeze()`` then ``unfreeze()`` at once (``storage.records.collector_paused``): that only moves
what it built to the oldest generation, where a full collection still frees it.
"""

from __future__ import annotations

import gc

__all__ = ["YOUNG", "tune"]

YOUNG = 50_000  # allocations between young collections (CPython's default: 700)


def tune() -> None:
    """Collect the young generation every ``YOUNG`` allocations (older ones as CPython does)."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG, middle, old)
