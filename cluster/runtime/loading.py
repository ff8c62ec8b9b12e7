"""Loading: read and fold a shard's log once its window nears, queue its jobs, and clean up.

A shard beyond the lookahead stays dormant (nothing in memory per job). Once its window starts
within ``lookahead`` it is loaded; recurring occurrences missed while nobody held it are settled
by their misfire policy; and once drained and past its window, its log is deleted.
"""

from __future__ import annotations

import logging
from array import array
from collections.abc import Collection
from operator import itemgetter
from typing import Any

from cluster.model.clock import Clock
from cluster.model.occurrences import Misfire, catch_up
from cluster.model.options import ClusterOptions
from cluster.model.wire import timedelta_to_us, us_to_datetime
from cluster.runtime.hooks import SiloHooks, call_hooks
from cluster.runtime.metrics import SiloMetrics
from cluster.runtime.outcomes import shaped_next
from cluster.runtime.ownership import ShardTable, is_shards_copy
from cluster.runtime.quarantine import Quarantine
from cluster.runtime.queue import JobQueue
from cluster.runtime.runs import JobDecoder, RunTable, queues_next_of
from cluster.runtime.shard import Shard
from cluster.runtime.shardlog import (
    ATTEMPTS,
    DUE,
    EXPIRED,
    JOB,
    OCCURRENCE,
    OWNER,
    QUEUED,
    SCHEDULED,
    SHARD_PREFIX,
    add_op,
    remove_op,
)
from storage import Fenced, NotFound, StorageError, Store
from storage.generations import SEPARATOR, list_logs_between

log = logging.getLogger("timeshard.silo")


class Loading:
    """Loads due shards into the queue and deletes drained ones."""

    def __init__(self, store: Store, options: ClusterOptions, clock: Clock, queue: JobQueue[list[Any]], runs: RunTable,
                 shards: ShardTable, quarantine: Quarantine, hooks: list[SiloHooks], decode: JobDecoder,
                 metrics: SiloMetrics) -> None:
        self._store = store
        self._options = options
        self._clock = clock
        self._queue = queue
        self._runs = runs
        self._shards = shards
        self._quarantine = quarantine
        self._hooks = hooks
        self._decode = decode
        self._metrics = metrics

    async def load_due(self) -> None:
        """Load every held shard whose window starts within the lookahead."""
        horizon = self._clock.now_us() + timedelta_to_us(self._options.lookahead)
        self._shards.views.trim()  # a burst of cancels in a dormant shard does not keep its fold for good
        for shard in self._shards:
            if not shard.loaded and shard.meta.window_start <= horizon:
                async with shard.gate.exclusive():
                    if not shard.loaded:
                        try:
                            await shard.load(self._store)
                        except StorageError as exc:
                            log.warning("could not load shard", extra={"shard": shard.base, "error": repr(exc)})
                            continue
                        if not self._shards.holds(shard):
                            continue  # lost or rejoined while reading: its jobs are not ours to queue
                        settling = self.settle_misfires(shard)
                        self.queue_loaded(shard, settling=settling)

    def settle_misfires(self, shard: Shard) -> set[str]:
        """Recurring jobs whose occurrence passed while the shard was not loaded: per policy.

        Returns the jobs being settled: ``queue_loaded`` leaves them out, and each is queued
        once its settling is durable (its next occurrence), or at once if that write fails (the
        log still says the missed occurrence runs). Queueing the missed occurrence right away
        ran it against the SKIP policy, and left the next one unqueued.
        """
        assert shard.state is not None
        now_us = self._clock.now_us()
        grace = timedelta_to_us(self._options.misfire_grace)
        settling: set[str] = set()
        paused = shard.state.paused
        for job_id, entry in list(shard.state.live.items()):
            if entry[DUE] >= now_us - grace or entry[ATTEMPTS] or job_id in paused:
                continue  # on time, a retry, or paused: resuming settles what it missed
            job = self._decode.job_of(job_id, entry)
            if job is None or job.schedule is None or Misfire.parse(job.misfire) is not Misfire.SKIP:
                continue  # fire_once / fire_all fire the missed occurrence now; one-shots always do
            plan = catch_up(job.schedule, us_to_datetime(entry[SCHEDULED]), us_to_datetime(now_us),
                            Misfire.SKIP, entry[OCCURRENCE] - 1, job.repeats, job.ttl)
            times = None if plan.next_due is None else shaped_next(job, plan.next_due, self._metrics)[0]
            if times is None:
                op = remove_op(job_id, entry[OCCURRENCE], EXPIRED)
            else:
                scheduled, nxt = times
                op = add_op(job_id, nxt, entry[JOB], entry[OCCURRENCE], 0, scheduled)
            settling.add(job_id)
            self._runs.spawn(self._settle(shard, job_id, op))
        return settling

    async def _settle(self, shard: Shard, job_id: str, op: list[Any]) -> None:
        """Write ``op`` settling a missed occurrence; queue what the log then says is live."""
        try:
            await shard.write([op])
        finally:
            state = shard.state
            now = None if state is None else state.live.get(job_id)
            # Written: the next occurrence (an EXPIRED removal leaves nothing); not written: the
            # missed one, as before. Nothing if it went meanwhile (cancelled) or the shard did.
            if now is not None and self._shards.holds(shard) \
                    and not self._runs.queueing_next(job_id, shard, self._shards.holds) \
                    and not is_shards_copy(self._queue.get(job_id), shard):
                self._queue.push(job_id, now[DUE], now)

    def queue_loaded(self, shard: Shard, *, adopted: bool = False, settling: Collection[str] = ()) -> None:
        """Queue the live jobs of a shard just loaded or claimed; tell the hooks.

        A parked job is not queued, and a suspect one only after its back-off (see quarantine);
        nor one in ``settling`` (see ``settle_misfires``), nor a paused one (resuming queues it).
        """
        assert shard.state is not None
        queue_at, find, holds = self._quarantine.queue_at, self._runs.find, self._shards.holds
        self._count_damage(shard)
        live, paused = shard.state.live, shard.state.paused
        # Queued as one bulk (see cluster.runtime.queue): no queue object per job.
        keys: list[str] = []
        dues: array[int] = array("q")
        entries: list[list[Any]] = []
        for job_id, entry in live.items():
            if job_id in shard.unreadable or job_id in settling or (paused and job_id in paused):
                continue  # unreadable: kept, never run; settling: queued once settled; paused: on resume
            run = find(job_id)
            # A run of a shard we hold writes its outcome, which queues what comes next (also a
            # move into this shard); one of a shard we no longer hold (an older copy of this one,
            # lost or taken back) writes into a fenced log, so the job is queued anew. Found by
            # the simulation (seed 4593): a move's target taken back from its log queued the next
            # occurrence, and the move's own outcome queued it again while it ran. A run of
            # another shard's copy of the id (a flow step taken again) queues nothing of this
            # copy, so it is queued here (simulator seed 995762: adopted while the other copy
            # ran, it stayed live in its log, queued nowhere, and never fired).
            if run is None or not holds(run.shard) or not queues_next_of(run, shard, job_id):
                due = queue_at(shard, job_id, entry[DUE])
                if due is None:
                    continue  # parked
                if due == entry[DUE]:
                    keys.append(job_id)
                    dues.append(due)
                    entries.append(entry)
                else:  # a suspect held back
                    self._queue.push(job_id, due, entry)
        self._queue.push_bulk(keys, dues, entries, live.get, itemgetter(DUE), owner=shard, slot=QUEUED)
        self._shards.update_loaded_gauge()
        if self._hooks and shard.state.live:
            decoded = ((self._decode.job_of(i, e), e) for i, e in shard.state.live.items())
            jobs = [(job, e[OCCURRENCE], e[ATTEMPTS]) for job, e in decoded if job is not None]
            self._runs.spawn(call_hooks(self._hooks, "shard_loaded", jobs, adopted))

    def queue_entry(self, job_id: str, entry: list[Any]) -> None:
        """Queue one live entry of a held shard (a move carried out into it), unless it runs.

        A run of a shard this silo no longer holds (dropped, or taken back from its log) writes
        no outcome, so it queues nothing next: the entry is queued anew, as ``queue_loaded``
        does (found by the simulation, seed 3905: a move carried out at a take-back was lost).

        Only an entry still live: the moves of a claimed shard are settled one after another,
        each awaited, so the entry of one settled first may have run, moved on or been
        cancelled meanwhile (a target that already held the move hands back its current entry,
        whose owner runs it); queued then, a cancelled occurrence ran after its cancel returned
        (found by the simulation with operator pauses, seed 2638).
        """
        shard: Shard = entry[OWNER]
        state = shard.state
        if shard.lost or state is None or state.live.get(job_id) is not entry or job_id in state.paused:
            return  # gone, replaced, or paused (a paused job waits, unqueued, for its resume)
        if not self._runs.queueing_next(job_id, shard, self._shards.holds):
            self._queue.push(job_id, entry[DUE], entry)

    def may_queue_again(self, job_id: str, entry: list[Any]) -> bool:
        """Whether ``entry``, set aside in the timer queue behind another copy of its id, is queued
        when its turn comes: still live in a shard held here, neither paused nor parked, and no
        run in flight queues it next (that run's outcome does); else it is dropped."""
        shard: Shard = entry[OWNER]
        state = shard.state
        if (shard.lost or state is None or state.live.get(job_id) is not entry or job_id in state.paused
                or self._quarantine.parked(shard, job_id)):
            return False
        return not self._runs.queueing_next(job_id, shard, self._shards.holds)

    def _count_damage(self, shard: Shard) -> None:
        """Count what replay found wrong with ``shard`` once, when it is first queued here."""
        damage = shard.damage
        if damage is None or damage.counted:
            return
        damage.counted = True
        self._metrics.unreadable.inc(damage.unreadable)
        if damage.ranges:
            self._metrics.shards_damaged.inc()
            self._metrics.records_lost.inc(damage.lost)

    async def delete_drained(self) -> None:
        """Delete the logs of held shards that are empty and past their window.

        Not while a move decided in the shard is unsettled, nor while a shard that moved jobs
        into it exists: a move settled there later looks here for its proof (cluster.runtime.moves).
        Nor once this silo no longer holds it: a shard handed over (or lost) while an earlier
        one's delete was awaited is its next owner's to judge. Deleted here, it was judged against
        a listing bounded by the sources of the shards still held, which missed its own source:
        that source's next owner found the move's proof gone and ran the occurrence again
        (found by the simulation with torn logs, seed 107341: a duplicate).
        Every condition is looked at again once the shard's gate is ours: the listing and the
        deletes before it are awaited, and meanwhile the shard may be lost, or a move may land.
        """
        now = self._clock.now_us()
        # A shard just created (for a move's next occurrence, say) is empty until its first write.
        settled = self._clock.monotonic() - self._options.adoption_interval.total_seconds()
        # A retried schedule call finds what its earlier try ran here only while the log is kept
        # (``retry_window``): deleted, the retry added a recurring job whose chain had ended again,
        # and every occurrence ran twice (simulation, seed 1490: seven jobs, seventeen runs). A
        # shard taken over is kept as long from when it was taken: its earlier writes' time is
        # not known here.
        retried = self._clock.monotonic() - self._options.retry_window.total_seconds()
        listing = _SourceListing(self._store)
        for shard in self._shards:
            if not self._deletable(shard, now, settled, retried):
                continue
            assert shard.state is not None
            sources = frozenset(shard.state.sources)
            if sources:
                # Up to the last source's name alone (sources come from earlier windows): not the
                # windows ahead, however many there are. The sources of every shard held now, so
                # that one listing serves the round; it is listed again for a shard it falls short of.
                last = max(s for held in (shard, *self._shards) if held.state is not None for s in held.state.sources)
                try:
                    if await listing.any_exists(sources, last):
                        continue
                except StorageError:
                    return
            async with shard.gate.exclusive():
                if not self._deletable(shard, now, settled, retried) or shard.state is None or shard.state.sources != sources:
                    # Lost while we listed (its log is its next owner's to judge), or a move
                    # landed meanwhile from a source not looked for: looked at again next round.
                    continue
                await self._delete(shard)

    def _deletable(self, shard: Shard, now: int, settled: float, retried: float) -> bool:
        """Whether ``shard`` is held, drained, past its window and its retry window, and moves nothing still."""
        state = shard.state
        return (state is not None and self._shards.holds(shard) and not state.live and not state.pending
                and shard.meta.window_end < now and shard.held_since <= settled
                and max(shard.held_since, shard.added_at) <= retried
                and not self._runs.of_shard(shard))

    async def _delete(self, shard: Shard) -> None:
        # Sealed first: its writer closes for the delete, so it must not stay its window's open
        # shard, or what is written to that window later (a schedule, a move's next occurrence)
        # retries against a closed writer for good.
        self._shards.seal(shard)
        try:
            await shard.writer.close()
            await shard.writer.delete()  # every generation: a superseded one left would dangle
        except (Fenced, NotFound):
            pass
        except StorageError as exc:
            # Let go of it anyway: its writer is closed, so holding it would leave whatever is
            # written to it (a move's next occurrence) failing for good (found by the
            # simulation). If the delete did not land, the log is still ours, and adoption
            # takes it back to delete it later.
            log.warning("could not delete drained shard", extra={"shard": shard.base, "error": repr(exc)})
        self._shards.forget(shard)


class _SourceListing:
    """The shard logs that exist, listed once per round of deletes up to the last source named,
    and further when a shard names a source past that.

    One listing for the whole round, its bound set by the shards held when it was made, read a
    later shard's source as gone: the shards that set the bound had left the table meanwhile
    (their silo declared dead while a delete was under way), and the source sorted past it. The
    target was deleted; the source's next owner found its move's decision, the target gone, and
    made the move again: a second chain, an ended occurrence run twice (found by the simulation,
    seeds 101801 and 104021). A source listed absent stays so (a shard's name is never used
    again); one listed present keeps its target until the next round looks again.
    """

    def __init__(self, store: Store) -> None:
        self._store = store
        self._bases: set[str] = set()
        self._last: str | None = None  # the name the listing reached: every base up to it is in _bases

    async def any_exists(self, sources: frozenset[str], last: str) -> bool:
        """Whether any of ``sources`` exists; ``last`` bounds a listing made for them (at least their max)."""
        if self._last is None or max(sources) > self._last:
            # Not listed that far (the shards that set the bound left the table, or a move into
            # this one landed since): an unlisted source would read as gone.
            bound = max(last, *sources)
            self._bases = {head.base for head in await list_logs_between(
                self._store, SHARD_PREFIX, end=bound + SEPARATOR * 2)}
            self._last = bound
        return not self._bases.isdisjoint(sources)
