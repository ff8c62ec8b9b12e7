"""Balance: a silo holding more than its fair share of the loaded shards hands some over.

A silo that joins (``Cluster.scale`` up, or a restart) starts with no shards; the others would
keep firing everything until their shards drained. So each adoption round counts, per live
silo, the shards within the lookahead (``Adoption.share``), and a silo above the fair share —
the total over the live silos, rounded up — hands its excess over, one shard at a time:

1. the shard is sealed (new jobs for its window go to a fresh shard) and its due jobs are held
   back instead of starting;
2. the runs of it already in flight finish and write their outcomes;
3. its owner is cleared by CAS (released, as a graceful stop does), and peers are asked to
   adopt at once. Silos below their share claim released shards first (``Adoption``).

The policy (fair share, settling, who takes a released log) and the release itself are
``cluster.runtime.logowner``'s, shared with the named-job registry's buckets (``Buckets.hand_over``).

Nothing is lost on the way: the log holds every job, and until the release lands the shard is
still this silo's; if the release fails, the held-back jobs are queued again, and a release
whose outcome is unknown is taken back by this silo's next adoption round if it did not land.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from cluster.model.clock import Clock
from cluster.model.options import ClusterOptions
from cluster.runtime.logowner import SETTLE_ROUNDS, release, settled_before
from cluster.runtime.metrics import SiloMetrics
from cluster.runtime.ownership import ShardTable
from cluster.runtime.quarantine import Quarantine
from cluster.runtime.queue import JobQueue
from cluster.runtime.runs import RunTable
from cluster.runtime.shard import Shard
from cluster.runtime.shardlog import RELEASED
from cluster.runtime.transport import Transport

__all__ = ["Balance", "POLL_S", "SETTLE_ROUNDS"]

log = logging.getLogger("timeshard.silo")

#: Seconds between looks at whether a shard's runs in flight have finished.
POLL_S = 0.02


class Balance:
    """Hands shards over to silos below their fair share."""

    def __init__(self, options: ClusterOptions, clock: Clock, shards: ShardTable, runs: RunTable,
                 queue: JobQueue[list[Any]], quarantine: Quarantine, transport: Transport, metrics: SiloMetrics,
                 peers: Callable[[], list[str]]) -> None:
        self._options = options
        self._clock = clock
        self._shards = shards
        self._runs = runs
        self._queue = queue
        self._quarantine = quarantine
        self._transport = transport
        self._metrics = metrics
        self._peers = peers
        self._busy = False  # one hand-over at a time

    def movable(self) -> list[Shard]:
        """The shards this silo could hand over now, best first: settled, loaded, healthy; sealed
        ones before the open ones new jobs go to."""
        now = self._clock.monotonic()
        settled = settled_before(now, self._options.adoption_interval.total_seconds())
        # Nor one whose dead previous owner's sends may still start: its next owner, claiming it
        # released, would not know to wait for them before it answers a cancel or pause.
        shards = [s for s in self._shards if s.loaded and not s.lost and s.leaving is None and s.held_since <= settled
                  and s.sent_before_until <= now and s.damage is None and not self._quarantine.quarantined(s)
                  and self._shards.holds(s) and not self._drained(s)]
        return sorted(shards, key=lambda s: (self._shards.is_open(s), s.meta.window_start))

    def _drained(self, shard: Shard) -> bool:
        """Whether ``shard`` is past its window with nothing live: kept only for its retry window
        until deleted, it carries no load to move. Handed over, its next owner replays its log for
        nothing, and a record damaged in it revives a job this silo saw end: it ran again long after
        the cluster had settled (simulation, seed 313993 with every kind: j7)."""
        return shard.live_count == 0 and shard.meta.window_end < self._clock.now_us()

    async def hand_over(self, excess: int) -> int:
        """Hand over up to ``excess`` shards, one by one; how many were released."""
        if excess <= 0 or self._busy or self._runs.closing:
            return 0
        self._busy = True
        try:
            released = 0
            for shard in self.movable()[:excess]:
                released += await self.release(shard)
            if released:
                self._transport.notify_adopt(self._peers())
            return released
        finally:
            self._busy = False

    async def release(self, shard: Shard) -> bool:
        """Hold back ``shard``'s due jobs, let its runs finish, then release it; whether it was."""
        self._shards.seal(shard)
        shard.leaving = []
        deadline = self._clock.monotonic() + self._options.handler_timeout.total_seconds() + 10
        while True:
            while self._runs.of_shard(shard):
                if self._clock.monotonic() > deadline or self._runs.closing or shard.lost:
                    self._keep(shard)
                    return False
                await asyncio.sleep(POLL_S)
            async with shard.gate.exclusive():  # no cancel or outcome write lands in between
                if self._runs.of_shard(shard):
                    continue  # a staged run was sent meanwhile: wait for it too
                if shard.lost or not self._shards.holds(shard):
                    return False
                landed = await release(shard.set_meta(shard.meta.with_owner(RELEASED, firing="")), shard.base)
                if landed is False:
                    self._shards.drop(shard, "fenced while handing it over")
                    return False
                if landed is None:  # let go either way: if it did not land, our next adoption round takes it back
                    self._shards.unsure()
                self._shards.let_go(shard)
            self._metrics.handed_over.inc()
            log.info("shard handed over", extra={"shard": shard.base, "jobs": shard.live_count})
            return True

    def _keep(self, shard: Shard) -> None:
        """Give up handing ``shard`` over: queue the due jobs held back meanwhile again."""
        held, shard.leaving = shard.leaving or [], None
        if not shard.lost:
            for due_us, job_id, entry in held:
                self._queue.push(job_id, due_us, entry)
