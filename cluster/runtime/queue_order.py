"""The two ways the timer queue keeps jobs in order without a tuple per comparison.

- ``Ordered``: a slot that has come to the head, as sorted runs merged like a binary counter
  (see ``cluster.runtime.queue`` for why: a herd of a million jobs at one instant costs about the
  same per job as sixty thousand).
- ``Bulk``: a batch of jobs (a loaded shard, a schedule call) sorted once into columns and read by
  a cursor, so the queue holds no object per job for it.
"""

from __future__ import annotations

import heapq
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from itertools import compress, islice
from operator import eq, itemgetter
from typing import Generic, TypeVar

T = TypeVar("T")

# Runs merge until they hold this many jobs, then are sealed. Measured on a 2-core machine with
# 60k-1M jobs due at one instant, pushed between pops: 1-4k alike, 16k 10-20% and 64k 40% slower
# (merging runs that no longer fit in the CPU caches costs more than a deeper heap of run ends).
MERGE_CAP = 4_096
_by_due_then_key = itemgetter(0, 1)


class Ordered(Generic[T]):
    """A slot that has been at the head: its entries in sorted runs.

    Each run is in descending ``(due, key)`` order, so its earliest entry is last and taking it is
    O(1). ``ends`` is a heap of ``(due, key, index)`` of each run's last entry; the index is unique,
    so equal ``(due, key)`` never fall through to comparing items. A run's index stays fixed while
    it lives: runs merged away or emptied leave ``None``, and their stale ends are skipped when
    they reach the top of the heap, until ``renumber`` clears both out.
    """

    __slots__ = ("runs", "ends", "growing", "count")

    def __init__(self, arrivals: list[tuple[int, str, T]]) -> None:
        """The entries of a slot that has just come to the head, sorted."""
        if 0 < len(arrivals) < MERGE_CAP:  # the usual case, built directly: one per slot drained
            arrivals.sort(key=_by_due_then_key, reverse=True)
            last = arrivals[-1]
            self.runs: list[list[tuple[int, str, T]] | None] = [arrivals]
            self.ends: list[tuple[int, str, int]] = [(last[0], last[1], 0)]
            self.growing: list[int] = [0]  # indices of runs below MERGE_CAP, oldest first
            self.count = 1  # runs not None
        else:
            self.runs, self.ends, self.growing, self.count = [], [], [], 0
            if arrivals:
                self.add(arrivals)

    def add(self, arrivals: list[tuple[int, str, T]]) -> None:
        """Sort ``arrivals`` into runs: O(k log k) for k arrivals, plus merges amortised O(log)."""
        runs, growing = self.runs, self.growing
        if len(arrivals) >= MERGE_CAP:
            # A slot loaded before it came to the head: sort it in cache-sized runs, not as one.
            for start in range(0, len(arrivals), MERGE_CAP):
                self._append(sorted(arrivals[start:start + MERGE_CAP], key=_by_due_then_key, reverse=True))
            return
        arrivals.sort(key=_by_due_then_key, reverse=True)
        if growing:
            growing[:] = [i for i in growing if runs[i] is not None]
        growing.append(self._append(arrivals))
        # Carry as a binary counter does: merging only runs of comparable size sorts each job
        # O(log MERGE_CAP) times, where merging into one run would be O(n) per look.
        while len(growing) > 1:
            below, top = runs[growing[-2]], runs[growing[-1]]
            assert below is not None and top is not None
            if len(below) > 2 * len(top):
                break
            runs[growing.pop()] = None
            runs[growing.pop()] = None
            self.count -= 2
            below += top
            below.sort(key=_by_due_then_key, reverse=True)  # two sorted runs: one linear merge
            index = self._append(below)
            if len(below) < MERGE_CAP:
                growing.append(index)
        if len(runs) > 2 * self.count + 32:
            self.renumber()

    def _append(self, run: list[tuple[int, str, T]]) -> int:
        index = len(self.runs)
        self.runs.append(run)
        self.count += 1
        last = run[-1]
        heapq.heappush(self.ends, (last[0], last[1], index))
        return index

    def advance(self, i: int) -> None:
        """Run ``i`` (the one at the top of ``ends``) lost its last entry: its next one goes on top, or it is done."""
        run = self.runs[i]
        assert run is not None
        if run:
            last = run[-1]
            heapq.heapreplace(self.ends, (last[0], last[1], i))
        else:
            heapq.heappop(self.ends)
            self.runs[i] = None
            self.count -= 1

    def renumber(self) -> None:
        """Drop emptied runs and stale ends: O(runs), once as many have gone as remain."""
        kept = [(i, run) for i, run in enumerate(self.runs) if run]
        new_index = {old: new for new, (old, _) in enumerate(kept)}
        self.runs = [run for _, run in kept]
        self.growing = [new_index[i] for i in self.growing if i in new_index]
        self.ends = [(run[-1][0], run[-1][1], new) for new, (_, run) in enumerate(kept)]
        heapq.heapify(self.ends)
        self.count = len(kept)


class Bulk(Generic[T]):
    """Jobs queued at once (a loaded shard's): columns in ``(due, key)`` order and a cursor.

    A cancelled or replaced job's item is set to None (its key stays, for bisection); what the
    cursor passed is cleared too (key "", item None), so a popped item is not kept alive by the bulk.
    """

    __slots__ = ("keys", "items", "dues", "pos", "count", "lookup", "due_of", "owner", "slot")

    def __init__(self, keys: list[str], items: list[T | None], dues: array[int],
                 lookup: Callable[[str], T | None], due_of: Callable[[T], int], owner: object,
                 slot: int | None) -> None:
        self.keys, self.items, self.dues = keys, items, dues
        self.pos = 0
        self.count = len(keys)  # positions at or after the cursor whose item is not None
        self.lookup, self.due_of, self.owner, self.slot = lookup, due_of, owner, slot

    def release(self) -> None:
        """Drop the columns: the bulk is drained or forgotten, but items marked with it may live on."""
        self.keys, self.items, self.dues = [], [], array("q")
        self.pos = self.count = 0

    def find(self, key: str, due: int) -> int | None:
        """The position of ``key``'s queued job, due at ``due``, at or after the cursor, or None."""
        lo = bisect_left(self.dues, due, self.pos)
        hi = bisect_right(self.dues, due, lo)
        if lo == hi:
            return None
        i = bisect_left(self.keys, key, lo, hi)
        return i if i < hi and self.keys[i] == key and self.items[i] is not None else None


def sorted_bulk(keys: Sequence[str], dues: Sequence[int], items: Sequence[T]) -> tuple[list[str], list[T | None], array[int]]:
    """The columns in ``(due, key)`` order: one sort by due (ints), then each run of equal dues by key.

    Gathered by ``itemgetter`` (C loops): twice as fast as list comprehensions at a million jobs.
    """
    n = len(keys)
    if n < 2:  # itemgetter of one index returns the item, not a tuple
        return list(keys), list(items), array("q", dues)
    pick = itemgetter(*sorted(range(n), key=dues.__getitem__))
    new_dues = array("q", pick(dues))
    new_keys: list[str] = list(pick(keys))
    new_items: list[T | None] = list(pick(items))
    ties = compress(range(n - 1), map(eq, new_dues, islice(new_dues, 1, None)))
    end = 0
    for start in ties:  # rare, except in a thundering herd
        if start < end:
            continue  # inside a run already sorted
        end = bisect_right(new_dues, new_dues[start], start)
        run = sorted(range(start, end), key=new_keys.__getitem__)
        new_keys[start:end] = [new_keys[i] for i in run]
        new_items[start:end] = [new_items[i] for i in run]
    return new_keys, new_items, new_dues
