"""The firing lease: a silo fires only while its last heartbeat proves it still owns its shards.

Peers declare a silo dead after watching its membership row unchanged for ``suspicion_timeout``,
counted from when they first saw it — at the earliest when the heartbeat write *began*. So the
lease runs from that moment for a fraction of the timeout (``LEASE_FRACTION``), however slow the
write was: a silo that is paused or cut off from the store stops firing before anyone may adopt
its shards. Any other write to its row also lands after that heartbeat began, which is how a
peer that merely *saw* the row change knows when the lease is over (``membership.Departures``).

Handlers enforce it too, on their own host's wall clock, which may run behind the store's by up
to ``max_clock_skew``: the end a silo sends them (``handler_end``) is that much earlier than the
lease's, so what a silo sent starts nowhere once a peer may take its shards.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from cluster.model.clock import Clock
from cluster.model.options import LEASE_FRACTION

__all__ = ["LEASE_FRACTION", "Lease", "lease_end"]


def lease_end(written_from: float, suspicion_timeout: float) -> float:
    """When a lease renewed by a heartbeat that began at ``written_from`` (monotonic s) ends."""
    return written_from + LEASE_FRACTION * suspicion_timeout


class Lease:
    """Until when (monotonic) this silo may fire, and a wait for the next renewal."""

    def __init__(self, clock: Clock, suspicion_timeout: float, max_clock_skew: float) -> None:
        self._clock = clock
        self._suspicion = suspicion_timeout
        self._skew = max_clock_skew
        self.until = 0.0
        self.renewed_from: float | None = None  # monotonic start of the heartbeat that last renewed it
        self._renewed = asyncio.Event()
        # The task that renews the lease (the heartbeat loop), and a renewal it makes at once:
        # see ``wait_valid``.
        self.renewer: asyncio.Task[None] | None = None
        self.renew_now: Callable[[], Awaitable[None]] | None = None

    @property
    def valid(self) -> bool:
        # Ends *at* ``until``: a peer takes our shards from that instant on (``Departures``).
        return self._clock.monotonic() < self.until

    def renew(self, written_from: float) -> bool:
        """Extend the lease from a heartbeat that began at ``written_from``; True if it had lapsed."""
        lapsed = self._clock.monotonic() >= self.until
        self.until = lease_end(written_from, self._suspicion)
        self.renewed_from = written_from
        self._renewed.set()
        return lapsed

    async def wait_renewed(self) -> None:
        """Wait for the next renewal (the caller found the lease lapsed)."""
        self._renewed.clear()
        await self._renewed.wait()

    async def wait_valid(self) -> None:
        """Return once the lease holds, waiting out renewals as long as it has lapsed.

        In the renewing task itself the lease is renewed instead: a wait there waits for itself.
        A claim in a heartbeat round that declared a peer dead settles the claimed shard's moves,
        and one moved into a fresh shard waits for the lease (``ShardTable.open_shard``); once a
        VM suspension made the round outlast the lease, the heartbeat never beat again, and the
        silo held shards it had lost, their jobs queued unfired (simulator seed 449 with torn_logs).
        """
        while not self.valid:
            if self.renew_now is not None and asyncio.current_task() is self.renewer:
                await self.renew_now()
            else:
                await self.wait_renewed()

    def wall_end(self) -> float:
        """The lease's end (seconds since the epoch) on the silo's clock, the store's time."""
        return self._clock.now_us() / 1e6 + (self.until - self._clock.monotonic())

    def handler_end(self) -> float:
        """Until when (wall clock, s) a handler may start work this silo sends: the lease's end
        less ``max_clock_skew``.

        A handler compares this with its own host's clock, which may run that far behind the
        store's; peers take our shards as soon as the lease is over (``Departures``), and
        without the margin a handler could start our copy of a job beside the new owner's
        (simulator seed 10861). A handler whose clock runs ahead refuses a little early
        instead, and the silo sends the job again once its next heartbeat renews the lease.
        """
        return self.wall_end() - self._skew
