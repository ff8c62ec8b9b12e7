"""Quarantine: a shard whose owners keep dying while it fires runs one job at a time; a job that
keeps killing its owner is parked. Nothing is abandoned or dropped.

What an adopter can prove about a death is what the dead owner wrote down before it fired. So
the owner marks its shard's metadata (``firing``) before an attempt leaves:

- ``*`` before the first batch goes out, cleared once the shard has been idle for a maintenance
  round: one metadata write per busy period, not per job;
- the digest of the one job in flight, when the shard runs *isolated* (one attempt at a time,
  each alone in its own call), written before each attempt.

The adopter reads the mark when it claims (``claimed_meta``). An owner that died while the mark
was clear (idle, or a graceful release) counts for nothing. One that died while it was set adds
one to the shard's ``deaths``; after ``max_adopted_count`` of those in a row the shard is
*quarantined*: all its jobs fire isolated. A death while one job alone was in flight also adds
one to that job's suspicion: it is queued again only after a back-off, and after
``max_adopted_count`` deaths in a row during its attempts it is *parked* — live in its log, not
queued, shown by ``timeshard status``, until ``timeshard release-quarantine`` releases the shard.
A shard with a suspect job (not yet parked) runs isolated too, so its other jobs keep firing
while the suspect's next attempt shows whether it was the killer. A suspect whose attempt ends
with the owner alive is cleared. A shard held ``poison_forgiveness`` by one owner leaves
quarantine (its deaths start over); parked jobs stay parked until released.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import weakref
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from cluster.model.clock import Clock
from cluster.model.options import ClusterOptions
from cluster.runtime.metrics import SiloMetrics
from cluster.runtime.ownership import ShardTable
from cluster.runtime.queue import JobQueue
from cluster.runtime.runs import Run, RunTable
from cluster.runtime.shard import Shard
from cluster.runtime.shardlog import DUE, RELEASED, SEALED, ShardMeta
from storage import Fenced, StorageError

log = logging.getLogger("timeshard.silo")

FIRING_MANY = "*"  # the ``firing`` mark of a shard with attempts in flight, not known one by one
SUSPECT_BACKOFF_US = 2_000_000  # a suspect waits this long after the first death, doubling
MAX_SUSPECT_BACKOFF_US = 300_000_000
MAX_SUSPECTS = 64  # kept per shard, the most suspected first: metadata is small (8 KiB on Azure)


def digest(job_id: str) -> str:
    """A short, metadata-safe name for ``job_id`` (ids may be any text; metadata is ASCII)."""
    return hashlib.blake2b(job_id.encode(), digest_size=6).hexdigest()


def suspect_backoff_us(deaths: int) -> int:
    """How long a job waits after ``deaths`` owners in a row died during its attempts."""
    return min(MAX_SUSPECT_BACKOFF_US, SUSPECT_BACKOFF_US << max(0, deaths - 1))


def claimed_meta(seen: ShardMeta, owner: str) -> ShardMeta:
    """The metadata ``owner`` claims a shard with, last seen as ``seen``: sealed, mark cleared,
    and the previous owner's death counted if it died while the shard was firing. A shard that
    ``owner`` itself holds on the store already (its own claim landed although the call failed)
    counts no death: nobody died."""
    died = seen.owner not in (RELEASED, owner)
    while_firing = died and bool(seen.firing)
    suspects = dict(seen.suspects)
    if while_firing and seen.firing != FIRING_MANY:
        suspects[seen.firing] = suspects.get(seen.firing, 0) + 1
    return seen.with_owner(owner, state=SEALED, adopted_count=seen.adopted_count + died, firing="",
                           deaths=seen.deaths + while_firing, suspects=_bounded(suspects))


def _bounded(suspects: dict[str, int]) -> tuple[tuple[str, int], ...]:
    ranked = sorted(suspects.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_SUSPECTS]
    return tuple(sorted(ranked))


class Quarantine:
    """Marks what a shard has in flight, and decides which shards fire isolated and which jobs wait."""

    def __init__(self, options: ClusterOptions, clock: Clock, queue: JobQueue[list[Any]], runs: RunTable,
                 shards: ShardTable, metrics: SiloMetrics) -> None:
        self._limit = options.max_adopted_count
        self._forgive_after = options.poison_forgiveness.total_seconds()
        self._clock = clock
        self._queue = queue
        self._runs = runs
        self._shards = shards
        self._metrics = metrics
        # One metadata change at a time per shard: each is a read-modify-write of ``shard.meta``.
        self._locks: weakref.WeakKeyDictionary[Shard, asyncio.Lock] = weakref.WeakKeyDictionary()
        self._busy: set[Shard] = set()  # shards that sent a batch since the last idle check
        self._survived: dict[Shard, set[str]] = {}  # suspects whose attempt ended with us alive

    # -- what a shard's metadata says ----------------------------------------------------------

    def quarantined(self, shard: Shard) -> bool:
        return shard.meta.deaths >= self._limit

    def isolates(self, shard: Shard) -> bool:
        """Whether ``shard`` fires one job at a time: quarantined, or holding a suspect job."""
        meta = shard.meta
        return meta.deaths >= self._limit or any(count < self._limit for _, count in meta.suspects)

    def parked(self, shard: Shard, job_id: str) -> bool:
        return bool(shard.meta.suspects) and self._suspicion(shard, job_id) >= self._limit

    def queue_at(self, shard: Shard, job_id: str, due_us: int) -> int | None:
        """When a job of ``shard`` just loaded or claimed may run: None while parked, later if suspect."""
        if not shard.meta.suspects:
            return due_us
        deaths = self._suspicion(shard, job_id)
        if deaths >= self._limit:
            return None
        return due_us if not deaths else max(due_us, self._clock.now_us() + suspect_backoff_us(deaths))

    def _suspicion(self, shard: Shard, job_id: str) -> int:
        return dict(shard.meta.suspects).get(digest(job_id), 0)

    def parked_jobs(self, shard: Shard) -> list[str]:
        """Ids of ``shard``'s parked jobs (their digests while it is dormant)."""
        parked = {d for d, count in shard.meta.suspects if count >= self._limit}
        if not parked:
            return []
        if shard.state is None:
            return sorted(f"digest:{d}" for d in parked)
        return sorted(job_id for job_id in shard.state.live if digest(job_id) in parked)

    # -- marking what is in flight -------------------------------------------------------------

    async def cover(self, runs: Iterable[Run]) -> None:
        """Before a batch leaves: every shard it comes from is durably marked as firing."""
        for shard in {r.shard for r in runs if not r.isolated}:
            self._busy.add(shard)
            lock = self._lock(shard)
            # A held lock may be a clear in progress: its write would land after this batch left.
            if (shard.meta.firing != FIRING_MANY or lock.locked()) and not shard.lost:
                async with lock:
                    await self._mark(shard, FIRING_MANY, "a batch leaves")

    async def isolate(self, run: Run) -> None:
        """Before ``run`` leaves alone: its shard's mark names it (``*`` if others are in flight).

        Raises ``StorageError`` (``Fenced`` included) if the mark is not durable: the run must
        not leave, since a death during it could not be told apart from an unrelated one.
        """
        shard = run.shard
        async with self._lock(shard):
            others = any(r.shard is shard and r is not run for r in self._runs.inflight.values())
            mark = FIRING_MANY if others else digest(run.job_id)
            await self._write(shard, firing=mark, suspects=self._without_survivors(shard))

    def survived(self, run: Run) -> None:
        """``run``, isolated, ended with this owner alive: its job is no suspect any more."""
        self._survived.setdefault(run.shard, set()).add(digest(run.job_id))

    async def settle(self, shard: Shard) -> None:
        """An isolated shard's lane ran dry: clear its mark and the suspects that ran clean."""
        async with self._lock(shard):
            if shard.lost:
                self._survived.pop(shard, None)
                return
            idle = not self._runs.of_shard(shard)
            try:
                await self._write(shard, firing="" if idle else shard.meta.firing,
                                  suspects=self._without_survivors(shard))
            except StorageError as exc:
                log.warning("could not clear a shard's firing mark", extra={"shard": shard.base, "error": repr(exc)})

    async def clear_idle(self) -> None:
        """Clear the mark of shards idle since the last call (a maintenance round)."""
        busy, self._busy = self._busy, set()
        for shard in self._shards:
            if shard.meta.firing and shard not in busy and not self._runs.of_shard(shard):
                await self.settle(shard)

    def _without_survivors(self, shard: Shard) -> tuple[tuple[str, int], ...]:
        clean = self._survived.pop(shard, set())
        return tuple(pair for pair in shard.meta.suspects if pair[0] not in clean)

    async def _mark(self, shard: Shard, mark: str, why: str) -> None:
        try:
            await self._write(shard, firing=mark)
        except StorageError as exc:
            # Fired anyway: losing a job is worse than missing one death in the count.
            log.warning("could not mark a shard as firing", extra={"shard": shard.base, "why": why, "error": repr(exc)})

    async def _write(self, shard: Shard, **changes: Any) -> None:
        meta = replace(shard.meta, **changes)
        if meta == shard.meta:
            return
        try:
            await shard.set_meta(meta)
        except Fenced:
            self._shards.drop(shard, "fenced while changing its metadata")
            raise

    def _lock(self, shard: Shard) -> asyncio.Lock:
        lock = self._locks.get(shard)
        if lock is None:
            lock = self._locks[shard] = asyncio.Lock()
        return lock

    # -- leaving quarantine --------------------------------------------------------------------

    async def forgive(self) -> None:
        """Shards held ``poison_forgiveness`` by this owner leave quarantine: deaths start over.

        Quarantine is for a shard whose jobs kill the silos that fire them; owners that died of
        other causes while it fired (a drill, a lost node) must not keep it slow for good.
        """
        now = self._clock.monotonic()
        for shard in self._shards:
            if shard.meta.deaths and now - shard.held_since > self._forgive_after:
                async with self._lock(shard):
                    was = self.quarantined(shard)
                    try:
                        await self._write(shard, deaths=0)
                    except StorageError:
                        continue
                if was:
                    log.warning("shard left quarantine", extra={"shard": shard.base})
        self.update_gauges()

    async def release(self, base: str) -> dict[str, Any] | None:
        """An operator's release: ``base`` leaves quarantine, its parked jobs are queued again.

        None if this silo does not hold ``base``. Raises ``StorageError`` if it cannot be written.
        """
        shard = self._shards.get(base)
        if shard is None:
            return None
        async with self._lock(shard):
            was = self.quarantined(shard)
            parked = self.parked_jobs(shard)
            await self._write(shard, deaths=0, suspects=())
        if shard.state is not None:
            for job_id in parked:
                entry = shard.state.live.get(job_id)
                if entry is not None:
                    self._queue.push(job_id, entry[DUE], entry)
        self.update_gauges()
        log.warning("shard released from quarantine", extra={"shard": base, "parked": len(parked)})
        return {"shard": base, "was_quarantined": was, "released_jobs": parked}

    # -- what status and metrics show -----------------------------------------------------------

    def update_gauges(self) -> None:
        shards = list(self._shards)
        self._metrics.shards_quarantined.set(sum(1 for s in shards if self.quarantined(s)))
        self._metrics.jobs_parked.set(sum(1 for s in shards for _, n in s.meta.suspects if n >= self._limit))

    def describe(self, shard: Shard) -> dict[str, Any]:
        """What ``status`` shows of ``shard``'s quarantine."""
        return {"owner_deaths": shard.meta.deaths, "quarantined": self.quarantined(shard),
                "suspects": sum(1 for _, n in shard.meta.suspects if n < self._limit),
                "parked": self.parked_jobs(shard)}
