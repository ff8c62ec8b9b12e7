"""Status and history of named jobs, written off the firing path and group-committed per name.

Attempts change a name's status (started, ended, staged, interrupted). Each change is queued
here and the silo moves on. A name's queued changes are written together, in one
compare-and-swap of its entry, and the names of one round concurrently. An end is written at
once when few are waiting, after ``LINGER_S`` in a burst (group commit: what queues while a
round is written goes in the next); a start waits ``START_LINGER_S``, so that a short attempt's
start and end are one write. So ``get()`` shows an attempt that ended one write later, and one
running ``START_LINGER_S`` plus one write after it started, as long as the store keeps up with
one write per name (a burst of more names than the store writes in a second takes longer: the
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
import logging
from collections.abc import Callable

from cluster.model.waiting import wait_bounded
from cluster.named.registry import Entry, update_entry
from storage import Store

__all__ = ["StatusRecorder", "LINGER_S"]

log = logging.getLogger("timeshard.named")

#: How long the changes of a burst gather before they are written; a few are written at once.
LINGER_S = 0.1
#: More names than this waiting to be written is a burst.
EAGER_KEYS = 32
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
        self._soon: dict[str, None] = {}  # keys written in the next round
        # Keys holding only starts, by when the first came (in order), on the loop's clock: a
        # simulation on virtual time then replays, where the process's monotonic clock would not.
        self._starts: dict[str, float] = {}
        self._tries: dict[str, int] = {}
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None

    def add(self, key: str, job_id: str, change: Change, *, start: bool = False) -> None:
        """Queue ``change`` of entry ``key``, to apply while it points at ``job_id``; ``start``:
        the change records an attempt starting, which may wait longer (``START_LINGER_S``)."""
        pending = self._pending.get(key)
        if pending is None:
            self._pending[key] = [(job_id, change)]
        else:
            pending.append((job_id, change))
        if not start:
            self._soon[key] = None
            if self._wake is not None:
                self._wake.set()
        elif key not in self._starts:
            self._starts[key] = asyncio.get_running_loop().time()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def flush(self) -> None:
        """Write every change queued so far."""
        self._soon.clear()
        self._starts.clear()
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
        """Rounds of writes while changes are queued: a few ends (or other changes) at once, a burst
        of them after ``LINGER_S`` (and, as in a group commit, whatever queued while a round was
        written goes in the next), starts once ``START_LINGER_S`` old (looked at every ``LINGER_S``)."""
        wake = self._wake = asyncio.Event()
        while self._pending:
            if not self._soon:
                wake.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await wait_bounded(wake.wait(), LINGER_S)
            await asyncio.sleep(LINGER_S if len(self._soon) > EAGER_KEYS else 0)
            keys = list(self._soon)
            self._soon.clear()
            horizon = asyncio.get_running_loop().time() - START_LINGER_S + LINGER_S
            started = []
            for key, since in self._starts.items():
                if since > horizon:
                    break  # in order: the rest came later
                started.append(key)
            for key in started:
                del self._starts[key]
            await self._write_keys(keys + started)

    async def _write_keys(self, keys: list[str]) -> None:
        """Write the changes queued for ``keys``, ``WRITES_AT_ONCE`` names at a time."""
        batch = iter([(key, self._pending.pop(key)) for key in keys if key in self._pending])

        async def writer() -> None:
            for key, changes in batch:  # shared: each name is taken by one writer
                await self._write(key, changes)

        await asyncio.gather(*(writer() for _ in range(min(WRITES_AT_ONCE, len(keys)))))

    async def _write(self, key: str, changes: list[tuple[str, Change]]) -> None:
        def apply(entry: Entry) -> Entry | None:
            out = entry
            for job_id, change in changes:
                if out.job_id == job_id:
                    out = change(out) or out
            return None if out is entry else out

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
            self._soon[key] = None
            if self._task is None or self._task.done():
                self._task = asyncio.get_running_loop().create_task(self._run())
            return
        self._tries.pop(key, None)
        if written is not None:
            if len(self._known) >= _CACHE_LIMIT:
                self._known.clear()
            self._known[key] = written
