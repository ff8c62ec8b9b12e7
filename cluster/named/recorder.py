"""Status and history of named jobs, written off the firing path and group-committed per name.

Attempts change a name's status (started, ended, staged, interrupted). Each change is queued
here and the silo moves on. A name's queued changes are written together, in one
compare-and-swap of its entry, ``LINGER_S`` after the first of them — or ``START_LINGER_S``
after it if all it says so far is that an attempt started, so that a short attempt's start and
end are one write — and the names due in one round are written concurrently. So ``get()``
shows an attempt that ended ``LINGER_S`` plus one write later, and one running
``START_LINGER_S`` plus one write after it started, as long as the store keeps up with one
write per name (a burst of more names than the store writes in a second takes longer: the
README gives figures); the firing path never waits for any of it.

A change applies only while the entry points at the generation it is about (an older
generation never touches a newer one's status), as ``update_entry`` does. A write that fails is
tried again at the next flush, up to ``WRITE_TRIES`` times. Changes queued when a silo dies are
lost; what they would have said is found again as the adopter marks the attempt interrupted
(only if its start was written), or runs it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
from collections.abc import Callable

from cluster.named.registry import Entry, update_entry
from storage import Store

__all__ = ["StatusRecorder", "LINGER_S"]

log = logging.getLogger("timeshard.named")

#: How long an end (or any change but a start) waits before it is written: the first of a burst waits this long.
LINGER_S = 0.05
#: How long a start waits: an attempt that ends sooner is written once, start and end together.
START_LINGER_S = 0.5
WRITES_AT_ONCE = 32
WRITE_TRIES = 5
_CACHE_LIMIT = 10_000

Change = Callable[[Entry], "Entry | None"]


class StatusRecorder:
    """Queues status changes per registry entry and writes them in the background (module docstring)."""

    def __init__(self, store: Store, known: dict[str, Entry]) -> None:
        self._store = store
        # The last entry written per key (shared with the hooks' own writes): usually still
        # current, as this silo is the only writer while it runs the job, which saves a read.
        self._known = known
        self._pending: dict[str, list[tuple[str, Change]]] = {}
        self._due: dict[str, float] = {}  # key -> when its queued changes are to be written
        self._heap: list[tuple[float, str]] = []  # (when, key); stale pairs are skipped
        self._tries: dict[str, int] = {}
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._writes: asyncio.Semaphore | None = None

    def add(self, key: str, job_id: str, change: Change, *, start: bool = False) -> None:
        """Queue ``change`` of entry ``key``, to apply while it points at ``job_id``; ``start``:
        the change records an attempt starting, which may wait longer (``START_LINGER_S``)."""
        self._pending.setdefault(key, []).append((job_id, change))
        self._schedule(key, START_LINGER_S if start else LINGER_S)

    def _schedule(self, key: str, delay: float) -> None:
        """Have ``key``'s queued changes written within ``delay`` (sooner if already due sooner)."""
        loop = asyncio.get_running_loop()
        when = loop.time() + delay
        due = self._due.get(key)
        if due is None or when < due:
            self._due[key] = when
            heapq.heappush(self._heap, (when, key))
            if self._wake is not None and self._heap[0][1] == key:
                self._wake.set()  # sooner than what the writer sleeps for
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._run())

    async def flush(self) -> None:
        """Write every change queued so far."""
        await self._write_keys(list(self._pending))

    async def flush_key(self, key: str) -> None:
        """Write the changes queued for ``key`` now (before a change made directly, to keep their order)."""
        if key in self._pending:
            await self._write_keys([key])

    async def close(self) -> None:
        """Write what is queued, then stop (the silo stops)."""
        if self._task is not None:
            self._task.cancel()
        await self.flush()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        while self._heap:
            when, key = self._heap[0]
            if self._due.get(key) != when:
                heapq.heappop(self._heap)  # written already, or due sooner since
                continue
            wait = when - loop.time()
            if wait > 0:
                self._wake.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), wait)
                continue
            # Everything due within the linger goes along: one round of writes per linger.
            horizon = loop.time() + LINGER_S
            keys = [k for k, due in self._due.items() if due <= horizon]
            await self._write_keys(keys)

    async def _write_keys(self, keys: list[str]) -> None:
        batch = [(key, self._pending.pop(key)) for key in keys if key in self._pending]
        for key, _ in batch:
            self._due.pop(key, None)
        if batch:
            await asyncio.gather(*(self._write(key, changes) for key, changes in batch))

    async def _write(self, key: str, changes: list[tuple[str, Change]]) -> None:
        def apply(entry: Entry) -> Entry | None:
            out = entry
            for job_id, change in changes:
                if out.job_id == job_id:
                    out = change(out) or out
            return None if out is entry else out

        if self._writes is None:
            self._writes = asyncio.Semaphore(WRITES_AT_ONCE)
        async with self._writes:
            try:
                written = await update_entry(self._store, key, None, apply, self._known.pop(key, None))
            except Exception as exc:
                tries = self._tries.get(key, 0) + 1
                if tries >= WRITE_TRIES:
                    self._tries.pop(key, None)
                    log.warning("status of a named job not recorded", extra={"key": key, "error": repr(exc)})
                    return
                self._tries[key] = tries
                self._pending[key] = changes + self._pending.get(key, [])  # first again, in order
                self._schedule(key, LINGER_S)
                return
        self._tries.pop(key, None)
        if written is not None:
            if len(self._known) >= _CACHE_LIMIT:
                self._known.clear()
            self._known[key] = written
