"""Quarantine: a shard whose owners keep dying while it fires runs its jobs in named batches; a
job that keeps killing its owner is found by halving its batch, then parked. Nothing is
abandoned or dropped.

What an adopter can prove about a death is what the dead owner wrote down before it fired. So
the owner marks its shard's metadata (``firing``) before attempts leave:

- ``*`` before the first batch goes out, cleared once the shard has been idle for a maintenance
  round: one metadata write per busy period, not per job;
- the digests of the jobs in flight, when the shard runs *isolated* (one batch at a time, at
  most ``BATCH`` jobs), written once before each batch.

The adopter reads the mark when it claims (``claimed_meta``). An owner that died while the mark
was clear (idle, or a graceful release) counts for nothing. One that died while it was set adds
one to the shard's ``deaths``; after ``max_adopted_count`` of those in a row the shard is
*quarantined*: all its jobs fire isolated. A death while a named batch was in flight makes every
job in it a *suspect* (group testing): its suspicion rises so that its next batch is at most half
as large (``batch_size``); jobs under no suspicion go in full batches, first after each death
and then in turn with the job due first (so neither kind starves the other). A killer is
thus alone in its batch after about log2(``BATCH``) deaths while innocent jobs stay in big
batches; a suspect whose batch ends with the owner alive is cleared. A job that was alone in
flight when ``max_adopted_count`` owners in a row died is *parked* — live in its log, not
queued, shown by ``timeshard status``, until ``timeshard release-quarantine`` releases the
shard; between those deaths it waits a back-off while its shard's other jobs fire. A shard with a
suspect job (not yet parked) runs isolated too. A shard held ``poison_forgiveness`` by one owner
leaves quarantine (its deaths start over); parked jobs stay parked until released.
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
from cluster.runtime.shardlog import DUE, RELEASED
from cluster.runtime.shardmeta import SEALED, ShardMeta
from storage import Fenced, StorageError

log = logging.getLogger("timeshard.silo")

FIRING_MANY = "*"  # the ``firing`` mark of a shard with attempts in flight, not known one by one
SUSPECT_BACKOFF_US = 2_000_000  # a suspect waits this long after the first death, doubling
MAX_SUSPECT_BACKOFF_US = 300_000_000
# Jobs fired together, under one mark, by an isolated shard. The mark names each by a 13-byte
# digest: 64 of them (832 bytes) and MAX_SUSPECTS suspects (16 bytes each) fit Azure's 8 KiB of
# metadata with room for the rest of ``ShardMeta``.
BATCH = 64
ALONE = BATCH.bit_length() - 1  # the suspicion at which a job fires alone: log2(BATCH) halvings
MAX_SUSPECTS = 256  # kept per shard, the most suspected first (4 dead batches' worth)


def digest(job_id: str) -> str:
    """A short, metadata-safe name for ``job_id`` (ids may be any text; metadata is ASCII)."""
    return hashlib.blake2b(job_id.encode(), digest_size=6).hexdigest()


def suspect_backoff_us(deaths: int) -> int:
    """How long a job waits after ``deaths`` owners in a row died while it was alone in flight."""
    return min(MAX_SUSPECT_BACKOFF_US, SUSPECT_BACKOFF_US << max(0, deaths - 1))


def batch_size(suspicion: int) -> int:
    """How many jobs of a suspicion go together: ``BATCH``, halved per death recorded against them."""
    return max(1, BATCH >> suspicion)


def blamed(suspicion: int, batch: int) -> int:
    """A job's suspicion after its owner died with it in a named batch of ``batch`` jobs.

    At least one more, and enough that its next batch is at most half this one: a job that was
    alone goes to ``ALONE + 1`` at once (one death while alone), whatever it was before.
    """
    return max(suspicion + 1, ALONE + 2 - batch.bit_length())


def claimed_meta(seen: ShardMeta, owner: str) -> ShardMeta:
    """The metadata ``owner`` claims a shard with, last seen as ``seen``: sealed, mark cleared,
    and the previous owner's death counted if it died while the shard was firing. A shard that
    ``owner`` itself holds on the store already (its own claim landed although the call failed)
    counts no death: nobody died."""
    died = seen.owner not in (RELEASED, owner)
    while_firing = died and bool(seen.firing)
    suspects = dict(seen.suspects)
    if while_firing and seen.firing != FIRING_MANY:
        named = set(seen.firing.split(","))
        for name in named:
            suspects[name] = blamed(suspects.get(name, 0), len(named))
    return seen.with_owner(owner, state=SEALED, adopted_count=seen.adopted_count + died, firing="",
                           deaths=seen.deaths + while_firing, suspects=_bounded(suspects))


def _bounded(suspects: dict[str, int]) -> tuple[tuple[str, int], ...]:
    ranked = sorted(suspects.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_SUSPECTS]
    return tuple(sorted(ranked))


class Quarantine:
    """Marks what a shard has in flight, and decides which shards fire isolated, in which batches,
    and which jobs wait."""

    def __init__(self, options: ClusterOptions, clock: Clock, queue: JobQueue[list[Any]], runs: RunTable,
                 shards: ShardTable, metrics: SiloMetrics) -> None:
        self._limit = options.max_adopted_count
        self._park_at = ALONE + self._limit  # ``max_adopted_count`` deaths while alone in flight
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
        """Whether ``shard`` fires in named batches: quarantined, or holding a suspect job."""
        meta = shard.meta
        return meta.deaths >= self._limit or any(count < self._park_at for _, count in meta.suspects)

    def parked(self, shard: Shard, job_id: str) -> bool:
        return bool(shard.meta.suspects) and self._suspicion(shard, job_id) >= self._park_at

    def queue_at(self, shard: Shard, job_id: str, due_us: int) -> int | None:
        """When a job of ``shard`` just loaded or claimed may run: None while parked, later if an
        owner died while it was alone in flight (a suspect in a batch only goes after the others)."""
        if not shard.meta.suspects:
            return due_us
        count = self._suspicion(shard, job_id)
        if count >= self._park_at:
            return None
        return due_us if count <= ALONE else max(due_us, self._clock.now_us() + suspect_backoff_us(count - ALONE))

    def next_batch(self, shard: Shard, lane: list[tuple[int, str, list[Any]]], room: int, *,
                   oldest: bool) -> list[tuple[int, str, list[Any]]]:
        """Take ``shard``'s next isolated batch out of ``lane`` (its due jobs): jobs of one suspicion,
        as many as ``batch_size`` allows (at most ``room``, but at least one).

        Which suspicion: the least (jobs under none go in full batches, so a shard in quarantine
        fires nearly as fast as any, and a killer cannot hold them back), or with ``oldest`` that
        of the job due first, so that suspects are not starved by a steady stream of new jobs.
        The lane alternates the two.
        """
        suspects = dict(shard.meta.suspects)
        counts = [suspects.get(digest(job_id), 0) if suspects else 0 for _, job_id, _ in lane]
        first_due = min(range(len(lane)), key=lambda i: lane[i][0])
        level = counts[first_due] if oldest else min(counts)
        size = min(batch_size(level), max(1, room))
        batch: list[tuple[int, str, list[Any]]] = []
        rest: list[tuple[int, str, list[Any]]] = []
        for item, count in zip(lane, counts, strict=True):
            (batch if count == level and len(batch) < size else rest).append(item)
        lane[:] = rest
        return batch

    def _suspicion(self, shard: Shard, job_id: str) -> int:
        return dict(shard.meta.suspects).get(digest(job_id), 0)

    def parked_jobs(self, shard: Shard) -> list[str]:
        """Ids of ``shard``'s parked jobs (their digests while it is dormant)."""
        parked = {d for d, count in shard.meta.suspects if count >= self._park_at}
        if not parked:
            return []
        if shard.state is None:
            return sorted(f"digest:{d}" for d in parked)
        return sorted(job_id for job_id in shard.state.live if digest(job_id) in parked)

    # -- marking what is in flight -------------------------------------------------------------

    async def cover(self, runs: Iterable[Run]) -> None:
        """Before a batch leaves: every shard it comes from is durably marked as firing."""
        # In the order the batch names them (a set would follow memory addresses): a replay marks alike.
        for shard in dict.fromkeys(r.shard for r in runs if not r.isolated):
            self._busy.add(shard)
            lock = self._lock(shard)
            # A held lock may be a clear in progress: its write would land after this batch left.
            if (shard.meta.firing != FIRING_MANY or lock.locked()) and not shard.lost:
                async with lock:
                    await self._mark(shard, FIRING_MANY, "a batch leaves")

    async def isolate(self, runs: list[Run]) -> None:
        """Before ``runs`` (one shard's isolated batch) leave: the shard's mark names each of them
        (``*`` if other attempts of it are in flight), in one metadata write.

        Raises ``StorageError`` (``Fenced`` included) if the mark is not durable: the runs must
        not leave, since a death during them could not be told apart from an unrelated one.
        """
        shard = runs[0].shard
        async with self._lock(shard):
            ours = {id(run) for run in runs}
            others = any(r.shard is shard and id(r) not in ours for r in self._runs.inflight.values())
            mark = FIRING_MANY if others else ",".join(sorted({digest(run.job_id) for run in runs}))
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
        self._metrics.jobs_parked.set(sum(1 for s in shards for _, n in s.meta.suspects if n >= self._park_at))

    def describe(self, shard: Shard) -> dict[str, Any]:
        """What ``status`` shows of ``shard``'s quarantine."""
        return {"owner_deaths": shard.meta.deaths, "quarantined": self.quarantined(shard),
                "suspects": sum(1 for _, n in shard.meta.suspects if n < self._park_at),
                "parked": self.parked_jobs(shard)}
