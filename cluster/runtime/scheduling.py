"""Adding new jobs: all of a call or none of it, and a retried call never makes a second copy.

A call writes one batch per due-time window, each into this silo's open shard for that window.
Its jobs are queued only once every batch is durable; when one batch fails, the ones that landed
are taken back by a durable REMOVE before the call fails, so a caller told "failed" gets no job.

A client that lost a silo mid-call cannot know whether that call landed: it sends the same job
ids again, to another silo, naming the lost ones as *suspects*. Before writing, this silo makes
sure no suspect can still add them: each shard a suspect created for those windows must have
left its creator — claimed by an adopter, by its creator's next incarnation, or now by us, once
it is an orphan. Jobs found there are answered with that shard and not written again.
"""

from __future__ import annotations

import asyncio
import logging
from array import array
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Sequence
from operator import itemgetter
from typing import Any

from cluster.model.errors import EarlierTryUnsettled, ScheduleInDoubt
from cluster.model.options import ClusterOptions
from cluster.model.wire import timedelta_to_us, unpack
from cluster.runtime.adoption import Adoption
from cluster.runtime.cancel import Cancelling
from cluster.runtime.hooks import SiloHooks, tell_landed
from cluster.runtime.membership import Identity, Member, parse_owner
from cluster.runtime.ownership import AddFailed, ShardTable, is_shards_copy
from cluster.runtime.queue import JobQueue
from cluster.runtime.runs import RunTable
from cluster.runtime.shard import Shard
from cluster.runtime.shardlog import (
    DUE,
    QUEUED,
    RELEASED,
    SHARD_PREFIX,
    add_op,
    creator_of,
    format_window,
    landed_ids,
    shards_before,
    window_of,
)
from storage import Fenced, NotFound, StorageError, Store, list_logs, read_log
from storage.generations import list_logs_between

log = logging.getLogger("timeshard.silo")

# (job id, due µs, packed job), as a client sends it; a fourth element, when given and not None, is
# the first occurrence's scheduled time (µs) where a jittered job fires later than it.
Item = tuple[Any, ...]

# How often taking back a failed call's landed batch is tried before the call reports it in doubt.
WITHDRAW_ATTEMPTS = 3


def _silo_of(suspect: str) -> str:
    """The silo a suspect names: a silo id, or one incarnation of it ("s0#2")."""
    parsed = parse_owner(suspect)
    return suspect if parsed is None else parsed[0]


def _open_to_suspects(owner: str | None, creator: tuple[str, int], suspects: Collection[str]) -> bool:
    """Whether a shard whose owner is ``owner`` may still take a suspect's earlier try: held by
    its creator, released and not claimed yet, or held by the very incarnation a suspect names
    (see ``Scheduling._fenced_from_suspects``)."""
    if owner in (f"{creator[0]}#{creator[1]}", RELEASED):
        return True
    held_by = parse_owner(owner) if owner is not None else None
    return held_by is not None and held_by[0] == creator[0] and owner in suspects


def _recurring(item: Item) -> bool:
    """Whether the job of ``item`` (checked by ``Silo.schedule``) has a schedule: only such a job moves on."""
    return unpack(item[2])[7] is not None


def _add(item: Item) -> list[Any]:
    """The ADD of a new job's first occurrence."""
    return add_op(item[0], item[1], item[2], 1, 0, item[3] if len(item) > 3 else None)


class Scheduling:
    """Durably adds a client's jobs; see the module docstring for the two promises it keeps."""

    def __init__(self, store: Store, options: ClusterOptions, me: Identity, queue: JobQueue[list[Any]],
                 runs: RunTable, shards: ShardTable, adoption: Adoption, cancelling: Cancelling) -> None:
        self._store = store
        self._options = options
        self._me = me
        self._queue = queue
        self._runs = runs
        self._shards = shards
        self._adoption = adoption
        self._cancelling = cancelling
        self._calls = 0  # schedule calls in progress here
        self._writing: Counter[str] = Counter()  # the job ids they write: a retry naming this silo waits for those
        self.hooks: list[SiloHooks] = []  # told of each landed batch (the silo's list, filled once it joined)

    async def schedule(self, jobs: Sequence[Item], suspects: Collection[str] = (),
                       settled: Collection[str] = ()) -> list[str]:
        """Add ``jobs``; returns each one's shard, in order. ``suspects``: silos that may hold an
        earlier try of this call (a retry), each named by id or, when only one incarnation can
        have sent it (a flow intent's writer), as that incarnation ("s0#2"); jobs found there
        are not added again. ``settled``: incarnations that refused this retry as holders
        (``EarlierTryUnsettled``), no call of the earlier try under way in them then: their
        shards are searched without waiting on them."""
        duration = timedelta_to_us(self._options.shard_duration)
        by_window: dict[int, list[int]] = defaultdict(list)
        for i, item in enumerate(jobs):
            by_window[window_of(item[1], duration)].append(i)
        names = [""] * len(jobs)
        owner = self._me.owner  # this call's incarnation: it writes under no other
        if suspects:
            found = await self._find_earlier_tries(
                {w: {jobs[i][0] for i in ix} for w, ix in by_window.items()}, set(suspects), set(settled))
            found.update(await self._find_moved_on({item[0]: window_of(item[1], duration) for item in jobs
                                                    if item[0] not in found and _recurring(item)}))
            for i, item in enumerate(jobs):
                names[i] = found.get(item[0], "")
        batches = {w: [jobs[i] for i in ix if not names[i]] for w, ix in by_window.items()}
        batches = {w: items for w, items in batches.items() if items}
        writing = [item[0] for items in batches.values() for item in items]
        self._calls += 1
        self._writing.update(writing)
        try:
            landed = await self._write_all(batches, owner)
        finally:
            self._calls -= 1
            self._writing.subtract(writing)
            self._writing += Counter()  # drops the ids no call writes any more
        for (window, items), shard in zip(batches.items(), landed, strict=True):
            self._queue_new(shard, items)
            if self.hooks:
                tell_landed(self.hooks, shard.base, items)
            for i in by_window[window]:
                names[i] = names[i] or shard.base
        return names

    async def _write_all(self, batches: dict[int, list[Item]], owner: str) -> list[Shard]:
        """Write every batch; all durable, or the landed ones taken back before raising."""

        async def write(window: int, items: list[Item]) -> Shard:
            # Not queued yet: nothing of the call may start before all of it is durable. A call
            # that needs a fresh shard waits for a lapsed lease at most a suspicion timeout:
            # by then peers may be taking this silo's work, and another silo takes the call.
            return await self._shards.write_to_window(window, [_add(item) for item in items], queue=False,
                                                     owner=owner,
                                                     lease_wait=self._options.suspicion_timeout.total_seconds())

        results = await asyncio.gather(*(write(w, items) for w, items in batches.items()), return_exceptions=True)
        failure = next((r for r in results if isinstance(r, BaseException)), None)
        if failure is None:
            return [r for r in results if isinstance(r, Shard)]
        # A failed batch may still land (its writer settles the doubt before the next append), so
        # it is taken back too, from the shard it went into: even one no longer held here (found
        # by the simulation, seed 8846: dropped while its append was in doubt, it was not taken
        # back, and the caller was told "not scheduled" of jobs its next owner fired).
        may_fire: dict[str, str | None] = {}
        for r, items in zip(results, batches.values(), strict=True):
            shard = r if isinstance(r, Shard) else r.shard if isinstance(r, AddFailed) else None
            if shard is not None:  # None: it failed before anything was written
                may_fire.update(await self._withdraw(self._shards.get(shard.base) or shard, items,
                                                     landed=isinstance(r, Shard)))
        error = failure.error if isinstance(failure, AddFailed) else failure
        if may_fire:
            log.error("schedule call failed and could not take back all it wrote",
                      extra={"jobs": len(may_fire), "error": repr(error)})
            raise ScheduleInDoubt(f"schedule failed: {error!r}", may_fire) from error
        raise error

    async def _withdraw(self, shard: Shard, items: list[Item], *, landed: bool) -> dict[str, str | None]:
        """Take back ``items`` from ``shard``, retried; returns the ones that may still fire
        (or fired already). ``landed``: their append was answered (see ``Cancelling.withdraw``).

        Those not taken back are queued, as their log says: written unqueued, they stayed live
        in the log and in memory, queued nowhere, until the shard was next loaded; the caller
        told they may fire saw them neither fire nor go (simulator seed 311450, every kind).
        """
        job_ids = [item[0] for item in items]
        for _ in range(WITHDRAW_ATTEMPTS):
            try:
                started = await self._cancelling.withdraw(shard, job_ids, landed=landed)
            except Fenced:
                break  # adopted meanwhile: the new owner holds what landed
            except StorageError as exc:
                log.warning("taking back a failed schedule call failed; trying again",
                            extra={"shard": shard.base, "error": repr(exc)})
                continue
            return dict.fromkeys(started, shard.base)
        else:  # not after Fenced: the shard's new owner queues what landed
            if self._shards.get(shard.base) is shard:
                self._queue_new(shard, items)
        return dict.fromkeys(job_ids, shard.base)

    def _queue_new(self, shard: Shard, items: list[Item]) -> None:
        """Queue a landed batch, if its shard is loaded and still ours (a dormant one loads later)."""
        state = shard.state
        if state is None or shard.lost:
            return
        live = state.live
        # Queued as one bulk per batch (see cluster.runtime.queue): no queue object per job.
        keys: list[str] = []
        dues: array[int] = array("q")
        entries: list[list[Any]] = []
        taken: set[str] = set()  # a job named twice in one call is queued once
        aside, drop = self._queue.waiting_aside, self._queue.drop
        for item in items:
            job_id = item[0]
            entry = live.get(job_id)
            run = self._runs.find(job_id)
            queued = self._queue.get(job_id)
            # A load that ran meanwhile queued it already, and it may even have started. A run of
            # another shard's copy is not this one: a retry adds a job again once the log its
            # earlier try ran in no longer records it, even while that run is still finishing
            # here, and its outcome queues nothing of this shard (simulator seed 346763). Nor is
            # another shard's copy queued under the id: its log lost the record (damage at rest)
            # the retry looked for, so it lives in memory only; this copy, the one its caller was
            # told of, takes the id's one place in the queue. Left unqueued, it was live in its
            # log and never fired while the other ran, to run again after a failover.
            if (entry is not None and job_id not in taken and (run is None or run.shard.base != shard.base)
                    and not is_shards_copy(queued, shard)):
                if queued is not None or job_id in aside:
                    drop(job_id)  # a copy the retry found no record of: not set aside to run after this one
                taken.add(job_id)
                keys.append(job_id)
                dues.append(entry[DUE])
                entries.append(entry)
        self._queue.push_bulk(keys, dues, entries, live.get, itemgetter(DUE), owner=shard, slot=QUEUED,
                              disjoint_only=True)

    async def _find_earlier_tries(self, ids_by_window: dict[int, set[str]], suspects: set[str],
                                  settled: Collection[str] = ()) -> dict[str, str]:
        """Where an earlier try of this call landed: job id -> shard, for the ones found.

        Raises ``EarlierTryUnsettled`` (nothing written) while a suspect may still add to a shard:
        it still owns one it created for these windows and is not yet proven dead, or it is
        this silo and a call still writing one of these jobs is in progress here. Only such a
        call can be an earlier try (a retry sends the same job ids); refused while this silo
        wrote any other jobs, a flow step taken over by the silo that must settle it was put
        off to its next reconcile round whenever a step of another flow was being scheduled
        there, and an acknowledged flow never ran (simulator seed 202493 with every fault).
        """
        silos = {_silo_of(suspect) for suspect in suspects}
        if self._me.silo_id in silos and any(self._writing[i] for ids in ids_by_window.values() for i in ids):
            raise EarlierTryUnsettled(f"silo {self._me.silo_id} is still writing a schedule call of these jobs")
        members = await self._adoption.read_members()
        found: dict[str, str] = {}
        unsettled: list[str] = []
        holders: set[str] = set()  # who holds a shard an earlier try may still reach: see EarlierTryUnsettled
        for window, ids in ids_by_window.items():
            for head in await list_logs(self._store, f"{SHARD_PREFIX}{format_window(window)}-"):
                creator = creator_of(head.base)
                if creator is None or creator[0] not in silos:
                    continue
                owner = head.metadata.get("owner")
                if owner == self._me.owner and _open_to_suspects(owner, creator, suspects):
                    holders.add(owner)  # settled for this silo; any other would wait on it
                if owner not in settled and not await self._fenced_from_suspects(head.base, head.metadata, creator,
                                                                                  suspects, members):
                    unsettled.append(head.base)
                    if owner is not None and parse_owner(owner) is not None:
                        holders.add(owner)
                    continue
                for job_id in landed_ids(await self._records_kept(head.base), ids - found.keys()):
                    found[job_id] = head.base
        if unsettled:
            raise EarlierTryUnsettled(f"shards {unsettled} may still take an earlier try of this call; "
                                      "their creators are not yet proven dead", sorted(holders),
                                      self._me.owner if self._me.owner in holders else None)
        if found:
            log.info("retried schedule call found jobs of its earlier try", extra={"jobs": len(found)})
        return found

    async def _find_moved_on(self, windows: dict[str, int]) -> dict[str, str]:
        """Where recurring jobs of an earlier try live on after moving out of the shard they
        were added to: job id -> a shard, of their first window or a later one, whose log holds them.

        Their first shard may be gone, deleted once drained (a move leaves the job nowhere
        there), or compacted (its snapshot keeps only live jobs), so a retry that looked in the
        suspects' shards alone wrote them again beside the chain they had moved on in: two
        chains (simulation with every fault, seeds 42872 and 53763: into a later window; seed
        219412: an adopter of the first shard, not a suspect, moved the next occurrence into its
        own shard of the same window). These shards need no fencing: a move's ADD is written
        once the move is decided in a shard the search above fenced. Only on a retry, and only
        for recurring jobs found nowhere else (one-shot jobs never leave their shard).
        """
        found: dict[str, str] = {}
        # From the earliest first window on: the shards before it cannot hold a move of these.
        later = await list_logs_between(self._store, SHARD_PREFIX,
                                        start=shards_before(min(windows.values()))) if windows else ()
        for head in later:
            window = int(head.metadata.get("window_start", "0"))
            wanted = {job_id for job_id, first in windows.items() if first <= window and job_id not in found}
            if wanted:
                found.update(dict.fromkeys(landed_ids(await self._records_kept(head.base), wanted), head.base))
        if found:
            log.info("retried schedule call found jobs of its earlier try moved on", extra={"jobs": len(found)})
        return found

    async def _records_kept(self, base: str) -> Iterable[list[Any]]:
        """The records of a shard the search listed; none once its log is gone.

        A drained shard is deleted once its ``retry_window`` is over, maybe between the listing
        and this read: gone, it holds nothing an earlier try can still add to or be found in, as
        the next listing would say. Raised instead, the retry failed, and a flow step taken over
        from a client's intent waited for its taker's next reconcile round: the acknowledged
        flow's first step ran two minutes after its submit (simulator seed 285077, every kind).
        """
        try:
            return (await read_log(self._store, base)).records()
        except NotFound:
            return ()

    async def _fenced_from_suspects(self, base: str, metadata: dict[str, str], creator: tuple[str, int],
                                    suspects: set[str], members: dict[str, Member]) -> bool:
        """Whether no suspect can append to ``base`` any more; claims it if it is an orphan still
        under a suspect, since only a claim's CAS fences a write to come.

        A claim by the creator's next incarnation fences the creator, but is taken as no fence
        when ``suspects`` names that very incarnation ("s0#2": a flow step's intent written by
        it): the earlier try may be its own, still running. Taken as fenced, the retry found
        nothing and wrote its copy, and the paused writer, resumed, wrote its own into a fresh
        shard: the step ran twice (simulator seed 154 with flows: s0#2 had claimed s0#1's shard,
        then wrote an intent and paused). A suspect named by silo alone (a client's retry, a
        client's flow intent) is not such an incarnation: waiting on its next incarnation's
        claim waited as long as the shard lived, which need not end (seed 2053 with flows: s1#2
        held s1#1's drained shard to the end of the run, and the client's intent was never
        taken over)."""
        owner = metadata.get("owner")
        if not _open_to_suspects(owner, creator, suspects):
            return True  # claimed since by another silo, or by an incarnation sending no earlier try
        if self._shards.get(base) is not None or owner == self._me.owner:
            return True  # our own, and no call of ours is in progress (checked before)
        if not self._adoption.orphaned(metadata, members):
            return False
        return await self._adoption.claim_for_cancel(base) is not None
