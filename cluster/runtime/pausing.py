"""Pausing and resuming one job in one shard: a record in the shard's log, honoured by firing.

A pause is a ``PAUSE`` record in the log of the shard that holds the job, so it holds across a
failover: whoever replays the shard (a restart, an adopter) folds it and does not queue the job.
It belongs to the job, not to an occurrence: a recurring job paused while an attempt runs
carries it to its next occurrence (see ``cluster.runtime.shardlog``).

What a pause does to an attempt already under way: one that has started runs to its end and
writes its outcome (a retry or the next occurrence), which then waits, unqueued, for the
resume; one sent ahead to its handler and not started yet is withdrawn; nothing new starts.

On resume the job is queued again at its pending due time. A one-shot job or a retry that came
due meanwhile fires at once. A recurring job whose occurrence came due meanwhile follows its
misfire policy, as after an outage: ``fire_once`` fires it once and resumes on the grid,
``fire_all`` fires each missed occurrence (bounded), ``skip`` moves on to the first occurrence
after now, written in the same append as the resume.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from cluster.model.clock import Clock
from cluster.model.occurrences import Misfire, catch_up
from cluster.model.options import ClusterOptions
from cluster.model.wire import datetime_to_us, timedelta_to_us, us_to_datetime
from cluster.runtime.adoption import Adoption
from cluster.runtime.cancel import Cancelling
from cluster.runtime.lease import Lease
from cluster.runtime.metrics import SiloMetrics
from cluster.runtime.moves import Moves
from cluster.runtime.ownership import ShardTable, is_shards_copy
from cluster.runtime.quarantine import Quarantine
from cluster.runtime.queue import JobQueue
from cluster.runtime.runs import JobDecoder, Run, RunTable
from cluster.runtime.shard import Shard
from cluster.runtime.shardlog import (
    ATTEMPTS,
    DUE,
    EXPIRED,
    JOB,
    OCCURRENCE,
    OWNER,
    SCHEDULED,
    ShardState,
    add_op,
    pause_op,
    remove_op,
    resume_op,
)
from storage import StorageError, Store

#: ("paused" | "already_paused" | "resumed" | "not_paused" | "absent" | "moved" | "not_owner", info):
#: info is the pause record ``[note, by, since_us]`` now in force after a pause, the shard the job
#: moved to, or the owner of the shard.
PauseAnswer = tuple[str, Any]


class Pausing:
    """Answers a client's pause or resume of a job in a shard this silo owns, or claims, or knows the owner of."""

    def __init__(self, store: Store, options: ClusterOptions, clock: Clock, queue: JobQueue[list[Any]], runs: RunTable,
                 shards: ShardTable, adoption: Adoption, moves: Moves, cancelling: Cancelling, quarantine: Quarantine,
                 decode: JobDecoder, metrics: SiloMetrics, lease: Lease) -> None:
        self._store = store
        self._options = options
        self._clock = clock
        self._queue = queue
        self._runs = runs
        self._shards = shards
        self._adoption = adoption
        self._moves = moves
        self._cancelling = cancelling
        self._quarantine = quarantine
        self._decode = decode
        self._metrics = metrics
        self._lease = lease
        # Keeps a run sent ahead of its due time from starting, if it has not: True if withdrawn,
        # False if it started, None without an answer (``Firing.withdraw_answer``).
        self.withdraw_sent: Callable[[Run], Awaitable[bool | None]] | None = None

    async def pause(self, shard_base: str, job_id: str, note: str | None, by: str) -> PauseAnswer:
        """Pause ``job_id`` in ``shard_base`` durably; an existing pause is kept as it is."""
        return await self._on_owner(shard_base, job_id, lambda shard: self._pause(shard, job_id, note, by))

    async def resume(self, shard_base: str, job_id: str) -> PauseAnswer:
        """Resume ``job_id`` in ``shard_base`` durably and queue it (its missed occurrences per its misfire policy)."""
        return await self._on_owner(shard_base, job_id, lambda shard: self._resume(shard, job_id))

    async def _on_owner(self, shard_base: str, job_id: str,
                        act: Callable[[Shard], Awaitable[PauseAnswer | None]]) -> PauseAnswer:
        """Run ``act`` on the shard if this silo holds it (claimed first if orphaned), as a cancel does.

        Held means provably still ours (``ShardTable.answers_for``): a pause or resume answers
        "already_paused", "not_paused", "moved" or "absent" from memory, with no write that a
        lost shard would fence. ``act`` asks again under the shard's gate (None: lost), since
        settling a move or waiting for the gate can outlast the lease; then whoever holds the
        shard now is looked for again.
        """
        async with self._shards.retaking(shard_base):
            while True:
                shard = self._shards.get(shard_base)
                if shard is not None and not await self._shards.answers_for(shard, self._lease):
                    if self._shards.get(shard_base) not in (None, shard):
                        continue  # taken back from its log meanwhile: the fresh copy answers
                    shard = None
                if shard is None:
                    shard = await self._adoption.claim_for_cancel(shard_base)
                    if shard is None:
                        return "not_owner", await self._cancelling.owner_of(shard_base)
                await self._settled(shard, job_id)
                answer = await act(shard)
                if answer is not None:
                    break
        if answer[0] in ("paused", "already_paused", "moved"):
            # What the shard's previous owner sent ahead may start until its lease ends (outside
            # the lock: the shard's other pauses and cancels wait alongside).
            await self._adoption.sent_before_over(shard)
        return answer

    async def _still_ours(self, shard: Shard) -> bool:
        """Whether memory of ``shard`` may still answer (the caller holds its gate).

        A resume that passed the look before its silo was paused settled the job's move across
        the pause, while a peer claimed the shard and decided the move again elsewhere; memory
        still named the first target, which the peer had proven empty, so the resume followed
        "moved" there, heard "absent", and the job stayed paused for good (found by the
        simulation, seed 92363).
        """
        return await self._shards.answers_for(shard, self._lease)

    async def _settled(self, shard: Shard, job_id: str) -> None:
        """Make a move of ``job_id`` decided in ``shard`` land first, so the forward given is the one
        shard that holds the job (and the pause it carries).

        A run of this shard still in flight is settling that very move in its outcome, which
        queues what lands: it is waited for, not raced (a second settle here queued the next
        occurrence while the run's outcome queued it too: two runs of one job, found by the
        simulation, seed 141). Otherwise the move is settled here and what lands is queued, as
        a cancel does.
        """
        if shard.state is None or job_id not in shard.state.pending:
            return
        run = self._runs.find(job_id)
        if run is not None and run.shard is shard:
            await run.wait_finished()
        if shard.lost or shard.state is None or job_id not in shard.state.pending:
            return
        entry = await self._moves.settle(shard, job_id)
        landed = None if entry is None else entry[OWNER].state
        if (entry is not None and self._may_queue(job_id, entry[OWNER])
                and not (landed is not None and job_id in landed.paused)):  # paused: its resume queues it
            self._queue.push(job_id, entry[DUE], entry)

    def _may_queue(self, job_id: str, shard: Shard) -> bool:
        """Whether queueing ``shard``'s copy of ``job_id`` is this role's to do: not while a run of a
        shard we hold is in flight whose outcome queues that copy next, nor while a cancel of its
        last run is under way (that cancel's removal names the run's occurrence: a job queued and
        run meanwhile would move on past it, and the cancel would answer "cancelled" for a job that
        lives on; found by the simulation, seed 1534)."""
        if self._runs.queueing_next(job_id, shard, self._shards.holds):
            return False
        return not self._cancelling.run_cancel_under_way(job_id)

    async def _state(self, shard: Shard) -> ShardState:
        if shard.state is not None:
            return shard.state
        # Dormant: what its log says, without loading the shard (its load folds the record).
        return await self._shards.views.state(shard)

    @staticmethod
    def _elsewhere(shard: Shard, state: ShardState, job_id: str) -> PauseAnswer | None:
        """Where ``job_id``, not live in ``shard``, went; None to look again: its move was decided
        after ``_settled`` looked (by the outcome of a run then in flight) and has not landed yet.

        Its target does not hold the job until then, and may never: answered "moved" there, a
        client heard "absent" once the source's next owner had carried the move out elsewhere,
        and the job stayed paused for good (found by the simulation, seed 997178). Looked at
        again, the move is settled first, as for a move decided before the call came.
        """
        if state is shard.state and job_id in state.pending:
            return None
        moved = state.moved.get(job_id)
        return ("moved", moved) if moved else ("absent", None)

    async def _pause(self, shard: Shard, job_id: str, note: str | None, by: str) -> PauseAnswer | None:
        async with shard.gate.exclusive():
            if not await self._still_ours(shard):
                return None
            state = await self._state(shard)
            entry = state.live.get(job_id)
            if entry is None:
                return self._elsewhere(shard, state, job_id)
            current = state.paused.get(job_id)
            if current is not None:
                return "already_paused", list(current)
            queued = self._shards.unqueue(shard, job_id)  # first: it must not start while the pause is written
            op = pause_op(job_id, note, by, self._clock.now_us())
            try:
                await shard.write([op])
            except StorageError:
                # Not paused after all: it still fires. The pause was applied as its write went
                # out, so firing may have released the job from a batch about to leave meanwhile
                # ("resuming queues it"): queued again unless a run or a cancel of it holds it
                # (found by the simulation, seed 1700: live, not paused, never queued again).
                live = shard.state
                now = None if live is None else live.live.get(job_id)
                if (live is not None and now is not None and job_id not in live.paused and self._shards.holds(shard)
                        and not is_shards_copy(self._queue.get(job_id), shard) and self._may_queue(job_id, shard)):
                    due = (queued[0] if queued is not None and queued[1] is now
                           else self._quarantine.queue_at(shard, job_id, now[DUE]))
                    if due is not None:  # parked: an operator's release-quarantine queues it
                        self._queue.push(job_id, due, now)
                raise
        for run in (self._runs.find(job_id), *self._runs.displaced_of(job_id)):
            if run is not None and run.shard.base == shard.base:
                await self._not_to_start(run)
        return "paused", op[2:5]

    async def _not_to_start(self, run: Run) -> None:
        """Return once ``run`` (of this copy of the shard, or of an older one, dropped or taken
        back) cannot start any more: the caller is told "paused" next, and nothing may start after.

        One not sent yet is released when it would be, as paused. One that left may not have
        started yet (its handler waits for its due time, or the call is still on its way): sent
        ahead, it is withdrawn, and its batch reports it refused, which queues it again where
        firing leaves it while paused (or nowhere, for an older copy); one that started runs to
        its end, as any started attempt. Otherwise (a handler that cannot be asked, or a withdraw
        without an answer) its handler's call is waited for to its end, as a cancel waits for the
        run: a pause that answered first let it start afterwards (found by the simulation, its
        pause check judged by starts: a delivery slow on its way, seed 78; a withdraw whose
        answer was lost). Only the call: its outcome, written after, starts nothing.
        """
        if not run.delivering:
            return
        if (run.sent_ahead is not None and self.withdraw_sent is not None
                and await self.withdraw_sent(run) is not None):
            return  # withdrawn, or started before the handler answered
        await run.wait_answered()

    async def _resume(self, shard: Shard, job_id: str) -> PauseAnswer | None:
        async with shard.gate.exclusive():
            if not await self._still_ours(shard):
                return None
            state = await self._state(shard)
            entry = state.live.get(job_id)
            if entry is None:
                return self._elsewhere(shard, state, job_id)
            if job_id not in state.paused:
                return "not_paused", None
            # A run of a shard we hold writes its outcome, which queues what comes next; one of a
            # copy we no longer hold writes nothing, so the job is queued here (as queue_loaded does).
            ours = not self._may_queue(job_id, shard)
            settle, missed = (None, 0) if ours else self._catch_up(job_id, entry)
            await shard.write([resume_op(job_id)] + ([settle] if settle is not None else []))
            self._metrics.paused_occurrences.inc(missed)
            live = shard.state
            now = None if live is None else live.live.get(job_id)
            # A run in flight queues what comes next itself; a dormant shard queues at its load.
            # Asked again after the write: the resume is applied to the shard as the write is
            # submitted, so a run may have started while it was made durable (seed 2128).
            if (now is not None and self._may_queue(job_id, shard) and self._shards.holds(shard)
                    and not is_shards_copy(self._queue.get(job_id), shard)):
                due = self._quarantine.queue_at(shard, job_id, now[DUE])
                if due is not None:  # parked: an operator's release-quarantine queues it
                    self._queue.push(job_id, due, now)
        return "resumed", None

    def _catch_up(self, job_id: str, entry: list[Any]) -> tuple[list[Any] | None, int]:
        """(The op settling occurrences missed while paused, or None; how many came due meanwhile).

        Only ``skip`` needs an op: it moves on to the first occurrence after now (or ends the
        job if none is left), as ``Loading.settle_misfires`` does for an outage. The other
        policies fire the pending occurrence now, and the outcome of that late fire applies the
        policy to the rest (``Outcomes._next_time``).
        """
        now_us = self._clock.now_us()
        if entry[DUE] > now_us:
            return None, 0
        job = self._decode.job_of(job_id, entry)
        if job is None:
            return None, 0
        if entry[ATTEMPTS] or job.schedule is None:
            return None, 1  # a retry, or a one-shot job: fires at once
        scheduled, now = us_to_datetime(entry[SCHEDULED]), us_to_datetime(now_us)
        fired = entry[OCCURRENCE] - 1
        missed = len(catch_up(job.schedule, scheduled, now, Misfire.FIRE_ALL, fired, job.repeats, job.ttl).fire_now)
        grace = timedelta_to_us(self._options.misfire_grace)
        if entry[DUE] >= now_us - grace or Misfire.parse(job.misfire) is not Misfire.SKIP:
            return None, missed
        plan = catch_up(job.schedule, scheduled, now, Misfire.SKIP, fired, job.repeats, job.ttl)
        if plan.next_due is None:
            return remove_op(job_id, entry[OCCURRENCE], EXPIRED), missed
        nxt = datetime_to_us(plan.next_due)
        return add_op(job_id, nxt, entry[JOB], entry[OCCURRENCE], 0, nxt), missed
