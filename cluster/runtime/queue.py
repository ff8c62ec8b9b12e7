"""The silo's local timer queue: jobs ordered by due time, woken exactly when one falls due.

Due times are integers of microseconds since the Unix epoch (UTC), the same unit the shard log
stores, so nothing is converted on the hot path and comparisons are exact.

A binary heap of one tuple per job spends most of its time in tuple comparisons (about 20 per pop
at a million jobs). Jobs are instead kept in *slots* of ~131 ms (``due >> 17``): a heap of slot
numbers (plain ints, cheap to compare) and per slot an unsorted list of arrivals, sorted only when
the slot first comes to the head. Draining a million jobs then costs a few comparisons each.

A slot that has come to the head stays ordered, as *sorted runs* (see ``Ordered``). A job pushed
into it later (a shard loaded while its jobs fall due, a retry queued into the current slot) waits
among the slot's arrivals, in O(1); the next look at the head sorts the arrivals into a new run,
and small runs merge as a binary counter carries, up to ``MERGE_CAP`` jobs. A heap of the runs'
earliest entries then yields the slot in order. Each job is sorted O(log MERGE_CAP) times and
popped in O(log runs), so a thundering herd of a million jobs due at one instant costs about the
same per job as sixty thousand, however pushes, peeks and pops interleave. (Re-sorting the whole
head slot after each push into it, as this queue once did, was quadratic.)

Memory matters too: a silo may hold hundreds of thousands of loaded jobs. Each job is one 3-tuple
``(due, key, item)`` in its slot's lists plus one dict slot pointing at that same tuple — about
110 bytes on top of the item; an ordered slot adds a few objects per run of thousands of jobs, none
per job. Cancel is O(1): it drops the dict slot, and the tuple left behind is a tombstone,
recognised when it reaches the front because the dict no longer points at it. Ordering compares
``(due, key)`` only, never items.

A loaded shard queues all its jobs at once (``push_bulk``), and so does a schedule call into a
loaded shard; those are most of a silo's jobs. They are kept as *bulks*: columns sorted by
``(due, key)`` once and read by a cursor — per job a key and an item reference and a due in an
``array`` (24 B), no tuple and no dict slot. A heap of bulks by their next job merges them with
the slots. A bulk job is found by key (``get``, ``cancel``, a ``push`` that replaces it) through
its owner's own index of its items (``lookup``: the shard's live jobs), the item naming its bulk
(``slot``), then by bisection on ``(due, key)``; a bulk item its owner no longer holds under its
key (the job was added again) is skipped when the cursor reaches it.

A key has one place in the queue, yet two shards of one silo may each hold a live *copy* of a job
under one id (a flow step taken over twice, a retry that wrote its job again). Given ``copy_of``,
the copy due first holds the place and the others wait *aside* (cluster.runtime.queue_copies).
When the place empties, the earliest one ``restorable`` allows is queued; after a batch, only once
the caller started it (``settle_aside``), so two copies of one id never leave in one batch.
Replaced instead, the other copy stayed live in its log, queued nowhere (simulator seed 1187329).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Generic, TypeVar

from cluster.model.clock import wall_clock_us
from cluster.model.waiting import wait_bounded
from cluster.runtime.queue_copies import Aside
from cluster.runtime.queue_order import Bulk, Ordered, sorted_bulk

T = TypeVar("T")

Clock = Callable[[], int]

SLOT_SHIFT = 17  # 2**17 µs ≈ 131 ms per slot: few slots to order, few jobs to sort in each
SMALL_SLOT = 64  # an ordered slot this small goes back to one list when the head moves before it


class JobQueue(Generic[T]):
    """A due-time priority queue keyed by job id, with an async wait for the next due job.

    ``push`` of a key already queued replaces it (a retry re-enqueues under the same id);
    ``cancel`` forgets a key in O(1); ``pop_due`` hands over every due entry in one batch, in
    due-time order, ties broken by key. ``wait_due`` sleeps until the earliest entry is due and
    wakes at once when an earlier one is pushed — there is no polling interval. Every operation
    costs O(log n) amortised or less, however many jobs share a due time.
    """

    __slots__ = ("_slots", "_arrivals", "_ordered", "_live", "_stored", "_clock", "_changed", "_bulks", "_bulk_seq",
                 "_owners", "_aside", "_waiting", "_vacant", "_popping", "_restored", "restorable")

    def __init__(self, clock: Clock = wall_clock_us, copy_of: Callable[[T], object] | None = None) -> None:
        self._slots: list[int] = []  # heap of slot numbers; each has an _arrivals list
        # Per slot, entries in the order they were pushed: the slot's only list until it first
        # comes to the head, afterwards those not yet sorted into its runs.
        self._arrivals: dict[int, list[tuple[int, str, T]]] = {}
        self._ordered: dict[int, Ordered[T]] = {}  # slots that have been at the head
        self._live: dict[str, tuple[int, str, T]] = {}
        self._stored = 0  # tuples held in slots, tombstones included
        self._clock = clock
        self._changed: asyncio.Event | None = None
        # Heap of (due, key, sequence, bulk) by each bulk's job at its cursor: a bulk's key may be
        # earlier than its true next job (what the cursor sits on was cancelled), never later.
        self._bulks: list[tuple[int, str, int, Bulk[T]]] = []
        self._bulk_seq = 0
        self._owners: dict[object, list[Bulk[T]]] = {}  # the bulks not yet drained, by owner
        self._aside: Aside[T] | None = None if copy_of is None else Aside(copy_of)
        self._waiting: dict[str, list[tuple[int, T]]] = {} if self._aside is None else self._aside.waiting
        # Keys found empty while a batch was being taken: offered at the next ``settle_aside``,
        # once the batch's runs started (a copy restored mid-batch would leave beside its twin).
        self._vacant: list[str] = []
        self._popping = False
        self._restored = 0  # items queued again from aside: a look at the head that restored one looks again
        #: Whether an item set aside is queued when its turn comes (its job is still live there,
        #: not paused, not queued next by a run); the ones it refuses are dropped.
        self.restorable: Callable[[str, T], bool] = lambda key, item: True

    def __len__(self) -> int:
        """Entries queued; a bulk job its owner replaced (added again) counts until it is passed."""
        return len(self._live) + sum(bulk.count for *_, bulk in self._bulks)

    def __contains__(self, key: object) -> bool:
        return key in self._live or (type(key) is str and self._in_bulk(key) is not None)

    def __iter__(self) -> Iterator[tuple[int, str, T]]:
        """Live entries ``(due, key, item)`` in no particular order."""
        queued = list(self._live.values())
        for *_, bulk in self._bulks:
            for i in range(bulk.pos, len(bulk.keys)):
                key, item = bulk.keys[i], bulk.items[i]
                if item is not None and key not in self._live and bulk.lookup(key) is item:
                    queued.append((bulk.dues[i], key, item))
        return iter(queued)

    def get(self, key: str) -> tuple[int, T] | None:
        """The due time and item queued under ``key``, or None."""
        entry = self._live.get(key)
        if entry is not None:
            return entry[0], entry[2]
        found = self._in_bulk(key)
        if found is None:
            return None
        bulk, i = found
        item = bulk.items[i]
        assert item is not None
        return bulk.dues[i], item

    def _in_bulk(self, key: str) -> tuple[Bulk[T], int] | None:
        """Where ``key``'s job waits in a bulk: one lookup per owner, then one bisection."""
        for bulks in self._owners.values():
            first = bulks[0]  # one owner's bulks share its lookup
            item = first.lookup(key)
            if item is None:
                continue
            due = first.due_of(item)
            if first.slot is not None:  # the item names its bulk
                marked = item[first.slot]  # type: ignore[index]
                candidates = [marked] if isinstance(marked, Bulk) else []
            else:
                candidates = bulks
            for bulk in candidates:
                i = bulk.find(key, due)
                if i is not None and bulk.items[i] is item:
                    return bulk, i
        return None

    def _cancel_bulk(self, key: str) -> tuple[int, T] | None:
        found = self._in_bulk(key) if self._bulks else None
        if found is None:
            return None
        bulk, i = found
        item = bulk.items[i]
        assert item is not None
        bulk.items[i] = None
        bulk.count -= 1
        return bulk.dues[i], item

    def _unqueue(self, key: str) -> tuple[int, T] | None:
        """Take ``key``'s entry out of the queue, leaving what is set aside: its due time and item, or None."""
        entry = self._live.pop(key, None)
        if entry is None:
            return self._cancel_bulk(key) if self._bulks else None
        if self._stored > 2 * len(self._live) + 64:
            self._compact()
        return entry[0], entry[2]

    @property
    def waiting_aside(self) -> Mapping[str, object]:
        """The keys with an item set aside (read only)."""
        return self._waiting

    def settle_aside(self, keys: Iterable[str]) -> None:
        """These keys' batch started: offer their earliest items aside (and those of keys passed empty)."""
        if not self._waiting:
            self._vacant.clear()
            return
        vacant, self._vacant = self._vacant, []
        for key in (*keys, *vacant):
            if key in self._waiting:
                queued = self.get(key)
                if queued is None:
                    self._restore(key)
                else:
                    self._turn_if_earlier(key, queued[0])

    def _restore(self, key: str) -> None:
        """Queue ``key``'s earliest item aside that ``restorable`` allows (dropping those it refuses)."""
        found = None if self._aside is None else self._aside.next_turn(key, self.restorable)
        if found is not None:
            self._restored += 1
            self.push(key, *found)  # behind what is queued there if that is due first

    def _vacated(self, key: str) -> None:
        """A stale bulk item under ``key`` was passed: an item aside takes the place left empty."""
        if key in self._waiting and key not in self:
            if self._popping:
                self._vacant.append(key)
            else:
                self._restore(key)

    def drop(self, key: str) -> None:
        """Forget everything under ``key``, queued or set aside: nothing of it is queued any more."""
        self._unqueue(key)
        self._waiting.pop(key, None)

    def take(self, key: str, which: Callable[[T], bool]) -> tuple[int, T] | None:
        """The item under ``key`` that ``which`` picks, queued or aside, taken off; None if none is."""
        queued = self.get(key)
        if queued is not None and which(queued[1]):
            self._unqueue(key)
            self._restore(key)
            return queued
        return None if self._aside is None else self._aside.take(key, which)

    def push_bulk(self, keys: Sequence[str], dues: Sequence[int], items: Sequence[T],
                  lookup: Callable[[str], T | None], due_of: Callable[[T], int], owner: object = None,
                  slot: int | None = None, disjoint_only: bool = False) -> None:
        """Queue many items at once, each ``items[i]`` under ``keys[i]`` (distinct) at ``dues[i]``.

        ``lookup(key)`` returns the item that is current under ``key`` and ``due_of(item)`` its
        due time (a loaded shard's live jobs, by id): that is how a bulk finds a job to cancel or
        replace without an index of its own, and a bulk item that is no longer current (its job
        was added again, replacing it) is skipped. Every bulk of one
        ``owner`` must share its lookup. With ``slot``, each item (a list) gets a reference to
        its bulk at that index, so that it is found in one bisection however many bulks its owner
        has. Replaces earlier entries, as ``push`` does; ``forget(owner)`` drops the owner's bulks.

        With ``disjoint_only``, the items form a bulk only if their due times do not overlap
        those left in the owner's other bulks, and are pushed one by one otherwise: bulks that
        interleave cost a pop a heap step per job (3 µs against 1.2 µs for 1,000-job bulks of
        random due times), while disjoint ones, as schedule calls for successive stretches of
        time make them (in whatever order they land), cost nothing more.
        """
        group = self._owners.get(owner)
        if disjoint_only and group and dues:
            low, high = min(dues), max(dues)
            if any(bulk.pos < len(bulk.dues) and low <= bulk.dues[-1] and high >= bulk.dues[bulk.pos]
                   for bulk in group):
                for key, due, item in zip(keys, dues, items, strict=True):
                    self.push(key, due, item)
                return
        live, bulks, aside, replace = self._live, self._bulks, self._waiting, self._replace
        behind: list[int] = []  # positions set aside behind another copy due first
        for i, key in enumerate(keys):
            if (key in live or bulks or (aside and key in aside)) and not replace(key, dues[i], items[i]):
                behind.append(i)
        if self._stored > 2 * len(live) + 64:
            self._compact()
        if behind:
            gone = set(behind)
            keys, dues, items = ([xs[i] for i in range(len(keys)) if i not in gone] for xs in (keys, dues, items))  # type: ignore[assignment]
        keys_sorted, items_sorted, dues_sorted = sorted_bulk(keys, dues, items)
        if not keys_sorted:
            return
        bulk = Bulk(keys_sorted, items_sorted, dues_sorted, lookup, due_of, owner, slot)
        if slot is not None:
            for marked in items_sorted:
                marked[slot] = bulk  # type: ignore[index]
        self._owners.setdefault(owner, []).append(bulk)
        self._bulk_seq += 1
        heapq.heappush(self._bulks, (dues_sorted[0], keys_sorted[0], self._bulk_seq, bulk))
        if self._changed is not None:
            self._changed.set()
        if self._waiting:
            for key, due in zip(keys, dues, strict=True):
                self._turn_if_earlier(key, due)

    def _turn_if_earlier(self, key: str, due: int) -> None:
        """``key`` was just queued at ``due``: a copy aside due before it takes its turn, if it may run."""
        if self._aside is not None and self._aside.earlier_than(key, due):
            self._restore(key)

    def forget(self, owner: object, owned: Callable[[T], bool] | None = None) -> None:
        """Drop every bulk pushed with ``owner`` (a shard let go of), and every entry pushed alone
        or set aside whose item is ``owned``: none of its jobs is queued any more. O(bulks +
        entries pushed alone)."""
        if owned is not None and self._aside is not None:
            self._aside.forget(owned)
        for bulk in self._owners.pop(owner, ()):
            bulk.release()
        kept = [top for top in self._bulks if top[3].owner is not owner]
        if len(kept) != len(self._bulks):
            heapq.heapify(kept)
            self._bulks = kept
        if owned is not None:
            for key in [key for key, (_, _, item) in self._live.items() if owned(item)]:
                self.cancel(key)
        for key in [key for key in self._waiting if key not in self]:  # its place was the owner's
            self._restore(key)

    def _bulk_top(self) -> Bulk[T] | None:
        """The bulk holding the earliest bulk job, its cursor on that job; None if none is left."""
        bulks, live = self._bulks, self._live
        while bulks:
            due, key, seq, bulk = bulks[0]
            keys, items, pos, n, lookup = bulk.keys, bulk.items, bulk.pos, len(bulk.keys), bulk.lookup
            while pos < n and (items[pos] is None or keys[pos] in live or lookup(keys[pos]) is not items[pos]):
                if items[pos] is not None:  # replaced since: by a push, or in its owner (a job added again)
                    bulk.count -= 1
                    if self._waiting:
                        self._vacated(keys[pos])
                keys[pos], items[pos] = "", None
                pos += 1
            bulk.pos = pos
            if pos == n:
                heapq.heappop(bulks)
                self._drained(bulk)
                continue
            if bulk.dues[pos] != due or keys[pos] != key:
                heapq.heapreplace(bulks, (bulk.dues[pos], keys[pos], seq, bulk))
                continue
            return bulk
        return None

    def _drained(self, bulk: Bulk[T]) -> None:
        group = self._owners.get(bulk.owner)
        if group is not None and bulk in group:
            group.remove(bulk)
            if not group:
                del self._owners[bulk.owner]
        bulk.release()

    def _replace(self, key: str, due: int, item: T) -> bool:
        """Take what is queued under ``key`` out for ``item``; False if another copy due first keeps it."""
        old = self._live.get(key)
        found = self._in_bulk(key) if old is None and self._bulks else None
        if self._aside is not None and (old is not None or found is not None or self._waiting):
            current = (old[0], old[2]) if old is not None else \
                None if found is None else (found[0].dues[found[1]], found[0].items[found[1]])
            if not self._aside.takes_place(key, current, due, item):  # type: ignore[arg-type]
                return False
        if old is not None:
            del self._live[key]  # its tuple is a tombstone from here
        elif found is not None:
            bulk, i = found
            bulk.items[i] = None
            bulk.count -= 1
        return True

    def push(self, key: str, due: int, item: T) -> None:
        """Queue ``item`` under ``key`` to fall due at ``due`` (µs); replaces an earlier entry (of
        another copy: the one due first is queued, the other set aside; see the module's docstring)."""
        if (key in self._live or self._bulks or self._waiting) and not self._replace(key, due, item):
            return
        entry = (due, key, item)
        self._live[key] = entry
        slot = due >> SLOT_SHIFT
        arrivals = self._arrivals.get(slot)
        if arrivals is None:
            if self._slots and slot < self._slots[0]:
                self._unorder(self._slots[0])  # no longer the head
            self._arrivals[slot] = [entry]
            heapq.heappush(self._slots, slot)
        else:
            arrivals.append(entry)  # O(1) even into the head slot: sorted in at the next look
        self._stored += 1
        if slot == self._slots[0] and self._changed is not None:
            self._changed.set()  # may be earlier than what the waiter sleeps for
        if self._stored > 2 * len(self._live) + 64:
            self._compact()
        if self._waiting:
            self._turn_if_earlier(key, due)

    def cancel(self, key: str) -> bool:
        """Forget ``key``'s queued entry; True if there was one. Its tuple is skipped when it reaches
        the front. An item of another copy set aside under ``key`` is queued in its place."""
        if self._unqueue(key) is None:
            return False
        if self._waiting:
            self._restore(key)
        return True

    def next_due(self) -> int | None:
        """The due time (µs) of the earliest live entry, or None when empty."""
        while True:
            restored = self._restored
            head = self._head()
            due = None if head is None else head.ends[0][0]
            if self._bulks:
                bulk = self._bulk_top()  # may queue a copy set aside (``_vacated``): then look again
                if bulk is not None and (due is None or bulk.dues[bulk.pos] < due):
                    due = bulk.dues[bulk.pos]
            if restored == self._restored:
                return due

    def _head(self) -> Ordered[T] | None:
        """The head slot, ordered, the top of its ``ends`` a live entry; None when empty."""
        slots, live = self._slots, self._live
        while slots:
            slot = slots[0]
            head = self._ordered.get(slot)
            arrivals = self._arrivals[slot]
            if head is None:
                head = self._ordered[slot] = Ordered(arrivals)
                self._arrivals[slot] = []
            elif arrivals:
                self._arrivals[slot] = []
                head.add(arrivals)
            runs, ends = head.runs, head.ends
            while ends:
                _, key, i = ends[0]
                run = runs[i]
                if run is None:  # merged away: its entries are in a later run
                    heapq.heappop(ends)
                    continue
                entry = run[-1]
                if live.get(key) is entry:
                    return head
                run.pop()  # a tombstone
                self._stored -= 1
                head.advance(i)
            heapq.heappop(slots)
            del self._arrivals[slot], self._ordered[slot]
        return None

    def _unorder(self, slot: int) -> None:
        """Keep a small slot that is no longer the head as one list again, without the runs' objects.

        Otherwise pushes of ever earlier jobs, each peeked at, would leave a few hundred bytes of
        order behind in each slot they passed through. Sorting it again later costs O(SMALL_SLOT).
        """
        ordered = self._ordered.get(slot)
        if ordered is None or ordered.count != 1:
            return
        run = next(run for run in ordered.runs if run is not None)
        if len(run) > SMALL_SLOT:
            return
        run += self._arrivals[slot]
        self._arrivals[slot] = run
        del self._ordered[slot]

    def pop_due(self, now: int | None = None, limit: int | None = None) -> list[tuple[int, str, T]]:
        """Remove and return every entry due at or before ``now`` (µs), earliest first.

        ``limit`` caps the batch so a silo at its concurrency limit takes no more than it can run;
        what is left stays queued in order.
        """
        if now is None:
            now = self._clock()
        cap = len(self) if limit is None else limit
        batch: list[tuple[int, str, T]] = []
        self._popping = True
        try:
            self._pop_due(now, cap, batch)
        finally:
            self._popping = False
        return batch

    def _pop_due(self, now: int, cap: int, batch: list[tuple[int, str, T]]) -> None:
        if not self._bulks:
            self._pop_slots(now, cap, batch)
            return
        while len(batch) < cap:
            bulk = self._bulk_top()
            if bulk is None:
                self._pop_slots(now, cap, batch)
                break
            due, key = bulk.dues[bulk.pos], bulk.keys[bulk.pos]
            head = self._head()
            if head is not None and head.ends[0][:2] <= (due, key):
                if head.ends[0][0] > now:
                    break
                # The slots' jobs before this bulk job; one alone when it shares the bulk job's due.
                before = min(now, due - 1)
                self._pop_slots(before, cap, batch) if head.ends[0][0] <= before else \
                    self._pop_slots(due, len(batch) + 1, batch)
                continue
            if due > now:
                break
            stop = (now + 1, "") if head is None else min((now + 1, ""), head.ends[0][:2])
            bulks = self._bulks
            for j in (1, 2):  # the next bulk's job: the heap's second smallest is one of these
                if j < len(bulks) and bulks[j][:2] < stop:
                    stop = bulks[j][:2]
            self._pop_bulk(bulk, stop, cap, batch)

    def _pop_bulk(self, bulk: Bulk[T], stop: tuple[int, str], cap: int, batch: list[tuple[int, str, T]]) -> None:
        """Move ``bulk``'s jobs before ``stop`` (``(due, key)``) into ``batch``, up to ``cap``.

        The job at the cursor goes whatever ``stop`` says (it is the earliest of all, and a stale
        heap key may equal it), so every call takes at least one.
        """
        keys, items, dues, live, lookup = bulk.keys, bulk.items, bulk.dues, self._live, bulk.lookup
        pos, n = bulk.pos, len(keys)
        stop_due, stop_key = stop
        first = pos
        while pos < n and len(batch) < cap:
            due, key, item = dues[pos], keys[pos], items[pos]
            if item is not None and key not in live and lookup(key) is item:
                if pos != first and (due > stop_due or (due == stop_due and key >= stop_key)):
                    break
                batch.append((due, key, item))
                bulk.count -= 1
            elif item is not None:
                bulk.count -= 1  # replaced since: by a push, or in its owner
                if self._waiting:
                    self._vacated(key)
            keys[pos], items[pos] = "", None
            pos += 1
        bulk.pos = pos

    def _pop_slots(self, now: int, cap: int, batch: list[tuple[int, str, T]]) -> None:
        """Move the slots' entries due at or before ``now`` into ``batch``, up to ``cap``, earliest first."""
        live = self._live
        while len(batch) < cap:
            head = self._head()
            if head is None:
                break
            runs, ends = head.runs, head.ends
            if len(ends) == 1:  # one run: take a stretch of it, no heap work per entry
                i = ends[0][2]
                run = runs[i]
                assert run is not None
                if run[-1][0] > now:
                    break
                taken = 0
                for entry in reversed(run):
                    if entry[0] > now or len(batch) >= cap:
                        break
                    taken += 1
                    if live.get(entry[1]) is entry:
                        del live[entry[1]]
                        batch.append(entry)
                del run[len(run) - taken:]
                self._stored -= taken
                head.advance(i)
                continue
            taken = 0
            while ends and len(batch) < cap:  # several runs: the earliest end each time
                due, key, i = ends[0]
                if due > now:
                    break
                run = runs[i]
                if run is None:  # merged away
                    heapq.heappop(ends)
                    continue
                entry = run.pop()
                taken += 1
                if live.get(key) is entry:
                    del live[key]
                    batch.append(entry)
                head.advance(i)
            self._stored -= taken
            if ends:
                break  # the rest is not due yet (or the batch is full)

    async def wait_due(self, timeout: float | None = None, ahead: int = 0) -> bool:
        """Sleep until the earliest entry is due in ``ahead`` µs or less; True if one is, False on ``timeout`` (seconds).

        A push of an earlier entry cuts the sleep short and the wait re-arms for the new time, so
        the silo's timer always fires at the next due time (less ``ahead``) and never before it.
        """
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        if self._changed is None:
            self._changed = asyncio.Event()
        while True:
            due = self.next_due()
            now = self._clock()
            if due is not None and due - ahead <= now:
                return True
            sleep = None if due is None else (due - ahead - now) / 1e6
            if deadline is not None:
                left = deadline - loop.time()
                if left <= 0:
                    return False
                sleep = left if sleep is None else min(sleep, left)
            self._changed.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await wait_bounded(self._changed.wait(), sleep)

    def _compact(self) -> None:
        # Cancelled and replaced entries stay in their slots as tombstones; dropping them once
        # they outnumber live entries keeps memory proportional to live jobs at amortised O(1).
        # Filtering keeps each run in order, so nothing is sorted again.
        live = self._live
        stored = 0
        for arrivals in self._arrivals.values():
            arrivals[:] = [entry for entry in arrivals if live.get(entry[1]) is entry]
            stored += len(arrivals)
        for ordered in self._ordered.values():
            for run in ordered.runs:
                if run:
                    run[:] = [entry for entry in run if live.get(entry[1]) is entry]
                    stored += len(run)
            ordered.renumber()
        for slot, arrivals in list(self._arrivals.items()):
            order = self._ordered.get(slot)
            if not arrivals and (order is None or not order.runs):
                del self._arrivals[slot]
                self._ordered.pop(slot, None)
        self._slots = list(self._arrivals)
        heapq.heapify(self._slots)
        self._stored = stored
