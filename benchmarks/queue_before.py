"""The silo's timer queue before issue 15 (commit 02d495f), kept as a benchmark baseline.

The code is that commit's ``cluster/runtime/queue.py``, renamed and without ``wait_due``. Only
``benchmarks.queue`` uses it, to measure the thundering herd side by side with today's
``cluster.runtime.queue.JobQueue`` in the same run. Do not use it anywhere else.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable, Iterator
from operator import itemgetter
from typing import Generic, TypeVar

from cluster.model.clock import wall_clock_us

T = TypeVar("T")

Clock = Callable[[], int]

SLOT_SHIFT = 17
_by_due_then_key = itemgetter(0, 1)


class ResortingJobQueue(Generic[T]):
    """The timer queue as it was before issue 15, kept only as this benchmark's baseline.

    Its head slot's bucket is sorted lazily and every push into the head slot marks it unsorted,
    so each peek or pop after such a push re-sorts the whole bucket: quadratic when pushes and
    pops interleave on one busy slot. (``wait_due`` is left out: the benchmark does not wait.)

    ``push`` of a key already queued replaces it (a retry re-enqueues under the same id);
    ``cancel`` forgets a key in O(1); ``pop_due`` hands over every due entry in one batch, in
    due-time order, ties broken by key. ``wait_due`` sleeps until the earliest entry is due and
    wakes at once when an earlier one is pushed — there is no polling interval.
    """

    __slots__ = ("_slots", "_buckets", "_live", "_stored", "_clock", "_changed", "_head_sorted")

    def __init__(self, clock: Clock = wall_clock_us) -> None:
        self._slots: list[int] = []  # heap of slot numbers that have a bucket
        self._buckets: dict[int, list[tuple[int, str, T]]] = {}
        self._live: dict[str, tuple[int, str, T]] = {}
        self._stored = 0  # tuples held in buckets, tombstones included
        # The head slot's bucket is sorted and starts with a live entry: next_due and pop_due
        # then cost O(1) per call, however many jobs share the slot.
        self._head_sorted = False
        self._clock = clock
        self._changed: asyncio.Event | None = None

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, key: object) -> bool:
        return key in self._live

    def __iter__(self) -> Iterator[tuple[int, str, T]]:
        """Live entries ``(due, key, item)`` in no particular order."""
        return iter(list(self._live.values()))

    def get(self, key: str) -> tuple[int, T] | None:
        """The due time and item queued under ``key``, or None."""
        entry = self._live.get(key)
        return None if entry is None else (entry[0], entry[2])

    def push(self, key: str, due: int, item: T) -> None:
        """Queue ``item`` under ``key`` to fall due at ``due`` (µs); replaces an earlier entry."""
        entry = (due, key, item)
        self._live[key] = entry
        slot = due >> SLOT_SHIFT
        bucket = self._buckets.get(slot)
        if bucket is None:
            self._buckets[slot] = [entry]
            heapq.heappush(self._slots, slot)
        else:
            bucket.append(entry)
        self._stored += 1
        if slot == self._slots[0]:
            self._head_sorted = False
            if self._changed is not None:
                self._changed.set()  # may be earlier than what the waiter sleeps for
        if self._stored > 2 * len(self._live) + 64:
            self._compact()

    def cancel(self, key: str) -> bool:
        """Forget ``key``; True if it was queued. Its tuple is skipped when its slot drains."""
        if self._live.pop(key, None) is None:
            return False
        if self._stored > 2 * len(self._live) + 64:
            self._compact()
        return True

    def next_due(self) -> int | None:
        """The due time (µs) of the earliest live entry, or None when empty."""
        head = self._sorted_head()
        return None if head is None else head[0][0]

    def _sorted_head(self) -> list[tuple[int, str, T]] | None:
        """The head slot's bucket, sorted, its leading tombstones dropped (None when empty)."""
        slots, buckets, live = self._slots, self._buckets, self._live
        while slots:
            bucket = buckets[slots[0]]
            if not self._head_sorted:
                bucket.sort(key=_by_due_then_key)
                self._head_sorted = True
            dead = 0
            for entry in bucket:
                if live.get(entry[1]) is entry:
                    break
                dead += 1
            if dead:
                del bucket[:dead]
                self._stored -= dead
            if bucket:
                return bucket
            del buckets[heapq.heappop(slots)]
            self._head_sorted = False
        return None

    def pop_due(self, now: int | None = None, limit: int | None = None) -> list[tuple[int, str, T]]:
        """Remove and return every entry due at or before ``now`` (µs), earliest first.

        ``limit`` caps the batch so a silo at its concurrency limit takes no more than it can run;
        what is left stays queued in order.
        """
        if now is None:
            now = self._clock()
        live = self._live
        cap = len(live) if limit is None else limit
        batch: list[tuple[int, str, T]] = []
        while len(batch) < cap:
            bucket = self._sorted_head()
            if bucket is None or bucket[0][0] > now:
                break
            taken = 0
            for entry in bucket:
                if entry[0] > now or len(batch) >= cap:
                    break
                taken += 1
                if live.get(entry[1]) is entry:
                    del live[entry[1]]
                    batch.append(entry)
            del bucket[:taken]
            self._stored -= taken
        return batch

    def _compact(self) -> None:
        # Cancelled and replaced entries stay in their buckets as tombstones; rebuilding once they
        # outnumber live entries keeps memory proportional to live jobs at amortised O(1).
        buckets: dict[int, list[tuple[int, str, T]]] = {}
        for entry in self._live.values():
            buckets.setdefault(entry[0] >> SLOT_SHIFT, []).append(entry)
        self._buckets = buckets
        self._slots = list(buckets)
        heapq.heapify(self._slots)
        self._stored = len(self._live)
        self._head_sorted = False
