"""Cancelling one job in one shard: claimed first if orphaned, waited for if it is running."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from cluster.runtime.adoption import Adoption
from cluster.runtime.hooks import SiloHooks, call_hooks
from cluster.runtime.lease import Lease
from cluster.runtime.loading import Loading
from cluster.runtime.moves import Moves
from cluster.runtime.ownership import ShardTable, is_shards_copy
from cluster.runtime.queue import JobQueue
from cluster.runtime.runs import Run, RunTable
from cluster.runtime.shard import Shard
from cluster.runtime.shardlog import (
    ATTEMPTS,
    CANCELLED,
    OCCURRENCE,
    RELEASED,
    SHARD_PREFIX,
    LiveJob,
    ShardState,
    remove_op,
    shards_before,
)
from storage import LogCorrupted, StorageError, Store, Unavailable, list_logs, read_log
from storage.generations import list_logs_between

CancelAnswer = tuple[str, "str | None"]

#: Cancels of one shard answered by one look at it and one append, at most.
MAX_BATCH = 1_000


@dataclass(frozen=True)
class _Found:
    """What a batch found for one cancel: its answer and the runs of older copies of the shard
    to stop, or the run in flight its caller cancels (``held``: whose outcome it holds), or
    neither: the shard is no longer this silo's (``lost``), and its owner is looked for again."""

    answer: CancelAnswer | None = None
    stale: list[Run] = field(default_factory=list)
    run: Run | None = None
    held: bool = False
    lost: bool = False


@dataclass(frozen=True)
class _Waiting:
    job_id: str
    answer: asyncio.Future[_Found]


def _first_try_pending(entry: LiveJob | None) -> bool:
    """Whether a live job (None: gone from its shard) has not run yet: its first occurrence, no attempt made."""
    return entry is not None and entry[OCCURRENCE] == 1 and entry[ATTEMPTS] == 0


class Cancelling:
    """Answers a client's cancel for a job in a shard this silo owns, or claims, or knows the owner of."""

    def __init__(self, store: Store, queue: JobQueue[list[Any]], runs: RunTable, shards: ShardTable,
                 adoption: Adoption, hooks: list[SiloHooks], moves: Moves, loading: Loading, lease: Lease) -> None:
        self._store = store
        self._lease = lease
        self._queue = queue
        self._runs = runs
        self._shards = shards
        self._adoption = adoption
        self._hooks = hooks
        self._moves = moves
        self._loading = loading
        # Keeps a run sent ahead of its due time from starting, if it has not (``Firing.withdraw``).
        self.withdraw_sent: Callable[[Run], Awaitable[bool]] | None = None
        # Per run id, the cancel of that run under way: its answer, or the error it raised.
        self._cancelling: dict[str, asyncio.Future[CancelAnswer | Exception]] = {}
        self._jobs_cancelling: dict[str, str] = {}  # job id -> the run id whose cancel is under way
        self._batches: dict[Shard, list[_Waiting]] = {}  # per shard, the cancels waiting for its next batch

    async def cancel(self, shard_base: str, job_id: str) -> CancelAnswer:
        """("cancelled" | "absent" | "moved" | "not_owner", the shard moved to or its owner)."""
        async with self._shards.retaking(shard_base):
            answer, shard = await self._cancel(shard_base, job_id)
        if answer[0] in ("cancelled", "moved") and shard is not None:
            # The shard that answered, not the one held now: a silo declared dead drops its
            # shards on rejoining, and the answer stands while the previous owner's sends may
            # still start (simulator seed 462368: one started 0.6 s after "cancelled").
            # Outside the lock: cancels of the shard's other jobs wait alongside, not behind it.
            await self._adoption.sent_before_over(shard)
        return answer

    async def _cancel(self, shard_base: str, job_id: str) -> tuple[CancelAnswer, Shard | None]:
        while True:
            answered = await self._cancel_once(shard_base, job_id)
            if answered is not None:
                return answered

    async def _cancel_once(self, shard_base: str, job_id: str) -> tuple[CancelAnswer, Shard | None] | None:
        """One look for ``job_id`` where this silo finds ``shard_base``: the answer and the shard
        that gave it; None if the shard proved no longer ours meanwhile (dropped): the caller
        looks for its owner again."""
        shard = self._shards.get(shard_base)
        if shard is None:
            shard = await self._adoption.claim_for_cancel(shard_base)
            if shard is None:
                return ("not_owner", await self.owner_of(shard_base)), None
        run = self._runs.find(job_id)
        if run is not None and run.shard is shard:
            return await self._cancel_run(run), shard
        if shard.state is not None and job_id in shard.state.pending:
            # Moved, but not known to have landed: settle first, so the forward given is the
            # one shard that holds the job.
            entry = await self._moves.settle(shard, job_id)
            if entry is not None:
                # Not pushed as is: a target that already held the move (settled meanwhile by
                # the adoption of this shard) hands back its current entry, which may be in
                # flight: queued again, it started a second run of one occurrence (found by
                # the simulation, seed 30091).
                self._loading.queue_entry(job_id, entry)
        found = await self._in_batch(shard, job_id)
        if found.lost:
            return None
        if found.run is not None:
            # It started while we waited for the gate: cancel the run in flight.
            return await self._cancel_run(found.run, found.held), shard
        assert found.answer is not None
        # Whatever the answer: "moved" sends the caller on to the shard the job moved to, which
        # answers "cancelled" while a run of this shard's older copy may still be on its way;
        # "absent" (removed from the fresh copy, say by a refused attempt) promises that nothing of
        # the job starts again, and the older copy's call still reached its handler 2 s after it
        # (simulator seed 202823: a named job's triggered run, after the put that replaced it).
        for old in found.stale:
            await self._stop_stale(old)
        return found.answer, shard

    async def _in_batch(self, shard: Shard, job_id: str) -> _Found:
        """Look at ``job_id`` in ``shard`` and remove it, together with the other cancels waiting
        for the same shard: one look at its log and one append for them all.

        Cancels of one shard take its gate exclusive, one after the other; each of a dormant
        shard also read its log, and each wrote its removal alone. Batched, the ones that come
        while a batch holds the gate go in the next: the same looks and removals, as many reads
        and appends as there are batches (issue 25, point 3).
        """
        future: asyncio.Future[_Found] = asyncio.get_running_loop().create_future()
        batch = self._batches.get(shard)
        if batch is None or len(batch) >= MAX_BATCH:
            batch = self._batches[shard] = []
            self._runs.spawn(self._run_batch(shard, batch))
        batch.append(_Waiting(job_id, future))
        try:
            return await future
        except asyncio.CancelledError:
            # Answered while this caller was cancelled: the run it found must not stay held.
            if future.done() and not future.cancelled() and future.exception() is None:
                found = future.result()
                if found.held and found.run is not None:
                    found.run.release_outcome()
            raise

    async def _run_batch(self, shard: Shard, batch: list[_Waiting]) -> None:
        try:
            async with shard.gate.exclusive():
                if self._batches.get(shard) is batch:
                    del self._batches[shard]  # cancels from now on wait for the next batch
                await self._cancel_batch(shard, [w for w in batch if not w.answer.done()])
        except Exception as exc:
            for waiting in batch:
                if not waiting.answer.done():
                    waiting.answer.set_exception(exc)
        except BaseException:
            for waiting in batch:
                waiting.answer.cancel()
            raise

    async def _cancel_batch(self, shard: Shard, batch: list[_Waiting]) -> None:
        """Cancel the jobs of ``batch`` in ``shard`` (the caller holds its gate exclusive).

        Each is answered: a run found in flight (its caller cancels it), "absent" or "moved"
        (nothing written), or, once the removals are durable, "cancelled". If they are not,
        each caller whose job was to be removed gets the error, and the jobs are queued again.

        First, whether memory may answer at all (``ShardTable.answers_for``): settling a move or
        waiting for the gate can outlast the lease, while a peer claims the shard and decides
        the move again elsewhere; memory then still names the first target, and "moved" sent
        the client there to hear the job absent, while it ran on from the peer's (a pause or a
        resume re-checks the same way, simulator seed 92363).
        """
        if not await self._shards.answers_for(shard, self._lease):
            for waiting in batch:
                waiting.answer.set_result(_Found(lost=True))
            return
        state = shard.state
        if state is None:  # dormant: what its log says, without loading the shard
            state = await self._shards.views.state(shard)
        # From here to the write, no await: what is looked at is what is removed.
        ops: list[list[Any]] = []
        removing: dict[str, tuple[_Waiting, tuple[int, list[Any]] | None, list[Any]]] = {}
        twice: list[_Waiting] = []  # cancels of a job another one of this batch removes
        for waiting in batch:
            job_id = waiting.job_id
            # Displaced too: removed here while unmarked, it could still start (or write its outcome).
            run = self._runs.of_copy(job_id, shard)
            if run is not None:
                # It started while we waited for the gate. Marked now, before any await, so that
                # its outcome (a retry, the next occurrence, or a refusal that queues it again)
                # brings nothing back; held, so that its outcome still counts should the removal
                # fail (see _cancel_one_run).
                run.cancelled = True
                held = run.run_id not in self._cancelling
                if held:
                    run.hold_outcome()
                waiting.answer.set_result(_Found(run=run, held=held))
                continue
            if job_id in removing:
                twice.append(waiting)
                continue
            entry = state.live.get(job_id)
            if entry is None:
                moved = state.moved.get(job_id)
                answer: CancelAnswer = ("moved", moved) if moved else ("absent", None)
                waiting.answer.set_result(_Found(answer, self._older_runs(shard, job_id)))
                continue
            queued = self._shards.unqueue(shard, job_id)  # first: it must not start while the removal is written
            removing[job_id] = (waiting, queued, entry)
            ops.append(remove_op(job_id, entry[OCCURRENCE], CANCELLED))
        if not ops:
            return
        try:
            await shard.write(ops)
        except StorageError as exc:
            # Not after ``LogCorrupted``: memory is not what the log says; the take-back queues the job.
            for job_id, (_, queued, entry) in removing.items():
                if (queued is not None and queued[1] is entry and state.live.get(job_id) is entry
                        and not isinstance(exc, LogCorrupted)):
                    self._queue.push(job_id, queued[0], entry)  # not cancelled after all: it still fires
            for waiting in [w for w, _, _ in removing.values()] + twice:
                waiting.answer.set_exception(exc)
            return
        for job_id in removing:
            await call_hooks(self._hooks, "job_cancelled", job_id)
        for job_id, (waiting, _, _) in removing.items():
            waiting.answer.set_result(_Found(("cancelled", None), self._older_runs(shard, job_id)))
        for waiting in twice:
            waiting.answer.set_result(_Found(("absent", None), self._older_runs(shard, waiting.job_id)))

    def _older_runs(self, shard: Shard, job_id: str) -> list[Run]:
        """Runs of ``job_id`` in flight from older copies of ``shard`` (dropped, or taken back).

        Both places matter: the run table's own entry, while the job has not started again from
        the fresh copy, and its displaced ones, once it has. The fresh copy's run may already have
        ended (its outcome queued the next occurrence, which a cancel then finds queued) while the
        older copy's call is still on its way to the handler (found by the simulation, seed 9159:
        it started 1.1 s after "cancelled").
        """
        return [run for run in (self._runs.find(job_id), *self._runs.displaced_of(job_id))
                if run is not None and run.shard is not shard and run.shard.base == shard.base]

    async def _stop_stale(self, run: Run) -> None:
        """Keep a run of an older copy of the shard from starting after a cancel returns.

        The copy was dropped (fenced by a write of ours whose answer was lost) or taken back from
        its log, and its job is queued anew from the fresh copy, which this cancel removed it
        from (or which moved it on); but the old run may still wait in its handler for its due
        time (dispatch ahead), under a lease that still holds, or its call may still be on its
        way. Withdrawn, or else waited for to its end (found by the simulation, seeds 4076, 9159).
        """
        run.cancelled = True
        if run.finished:
            return
        if run.sent_ahead is not None and self.withdraw_sent is not None and await self.withdraw_sent(run):
            self._runs.release(run)
            return
        await run.wait_finished()

    async def _cancel_run(self, run: Run, held: bool = False) -> CancelAnswer:
        """Cancel a run in flight, or share the answer of a cancel of it already under way.

        One cancel per run at a time: two would race, and the one whose write failed would
        undo what the other made durable (it un-cancels the run, and queues the job again once
        the run has ended), so the job would run after a cancel had returned "cancelled".
        ``held``: the caller holds the run's outcome (``Run.hold_outcome``); this takes it over.
        """
        under_way = self._cancelling.get(run.run_id)
        if under_way is not None:
            if held:
                run.release_outcome()  # that cancel holds it; its answer comes only once the run has ended
            answer = await asyncio.shield(under_way)
            if isinstance(answer, Exception):
                raise Unavailable(f"a cancel of {run.job_id} under way at the same time failed: {answer!r}")
            return answer
        under_way = self._cancelling[run.run_id] = asyncio.get_running_loop().create_future()
        self._jobs_cancelling[run.job_id] = run.run_id
        outcome: CancelAnswer | Exception = Unavailable(f"the cancel of {run.job_id} was interrupted")
        try:
            outcome = await self._cancel_one_run(run, held)
            return outcome
        except Exception as exc:
            outcome = exc
            raise
        finally:
            del self._cancelling[run.run_id]
            if self._jobs_cancelling.get(run.job_id) == run.run_id:
                del self._jobs_cancelling[run.job_id]
            under_way.set_result(outcome)

    def run_cancel_under_way(self, job_id: str) -> bool:
        """Whether a cancel of a run of ``job_id`` is under way: until it ends, the job must not be
        queued again by anyone else (its removal names the run's occurrence; see ``Pausing``)."""
        return job_id in self._jobs_cancelling

    async def _cancel_one_run(self, run: Run, held: bool = False) -> CancelAnswer:
        """Cancel a run in flight: it does not start if it has not yet, else it is waited for.

        A run may be in flight before it is due (dispatch ahead): marked cancelled, it is not sent
        if it has not been, and if it has, it is withdrawn from its handler *before* the removal
        is written, as a queued job leaves the queue first: a cancel that reaches a job before
        its due time keeps it from starting. A run its handler dropped has ended: once the
        removal is durable the cancel returns (its batch, still running others, later reports
        it refused, which writes and queues nothing for a cancelled run). A run that started,
        or whose withdraw got no answer, is waited for to its end, so that nothing it would
        write (a retry, the next occurrence) outlives the cancel. Until the removal is durable
        or has failed, the run's outcome is held, not dropped (``Run.stays_cancelled``).
        """
        run.cancelled = True  # first: the attempt must write no retry or next occurrence meanwhile
        if not held:
            run.hold_outcome()
        try:
            # Runs of older copies of this shard, perhaps waiting in their handler.
            displaced = [old for old in self._runs.displaced_of(run.job_id) if old.shard.base == run.shard.base]
            for old in displaced:
                old.cancelled = True
            # By identity: a displaced run is never staged, and the one staged is another copy's.
            staged = self._runs.staged.pop(run.job_id) if self._runs.staged.get(run.job_id) is run else None
            dropped = False
            if run.sent_ahead is not None and self.withdraw_sent is not None and not run.finished:
                dropped = await self.withdraw_sent(run)
            state = run.shard.state
            if state is not None and state.paused and run.job_id in state.paused:
                run.pause_removed = state.paused[run.job_id]  # the removal drops it; a move still under way keeps it
            try:
                # Shared, as writes hold a shard's gate: a pause or resume (exclusive) answers from
                # memory, where the removal is applied as it goes out; it must not answer "absent"
                # while the removal may yet fail (found by the simulation, seed 125919: it did, and
                # the job lived on, paused). Released before carrying on, which takes it exclusive.
                async with run.shard.gate.shared():
                    await run.shard.write([remove_op(run.job_id, run.entry[OCCURRENCE], CANCELLED)])
            except StorageError as exc:
                await self._carry_on(run, staged, known=not isinstance(exc, LogCorrupted))
                raise
        finally:
            run.release_outcome()  # before waiting for the run's end below: its outcome may go on now
        if dropped or staged is not None:
            # Never starts: ended now (only now: a failed write above queues it again). A staged
            # run was never sent, so nothing else would ever end it and the wait below never returned.
            self._runs.release(run)
        # The attempt already started and runs to its end; wait so that nothing it was about to
        # write (a retry, the next occurrence) outlives this cancel.
        await run.wait_finished()
        for old in displaced:
            # Kept from starting, or waited for, as a stale run found beside a queued job is (found
            # by the simulation, seed 1258 with operator pauses: it started after "cancelled").
            await self._stop_stale(old)
        moved = await self._moved_on(run)
        if moved is not None:
            return "moved", moved
        left = await self._cancel_left_here(run)
        if left is not None:
            return left
        await call_hooks(self._hooks, "job_cancelled", run.job_id)
        return "cancelled", None

    async def _cancel_left_here(self, run: Run) -> CancelAnswer | None:
        """Remove the next occurrence ``run``'s outcome left live in its shard; None if there is none.

        The outcome may have written it (the same shard: an ADD replacing the entry) before this
        cancel marked the run. This cancel's removal then names an occurrence already ended and
        removes nothing; the outcome removes the next one itself (``Outcomes._cancel_next``),
        but that write may fail, or be fenced by a peer that claimed the shard meanwhile, and
        the run ends all the same. The next occurrence then lives on in the log the shard's next
        owner reads: "cancelled" would not hold (found by the simulation, seed 65829: a silo,
        SIGSTOPped with the cancel pending, learnt at SIGCONT that it was declared dead, and the
        adopter ran the job). Still ours, it is removed here as a queued job is; no longer ours,
        the caller follows the shard to its owner, whose log holds it.
        """
        shard, job_id = run.shard, run.job_id
        if shard.state is None or job_id not in shard.state.live:
            return None
        if not self._shards.holds(shard):
            return "not_owner", await self.owner_of(shard.base)
        try:
            found = await self._in_batch(shard, job_id)
        except StorageError:
            if not self._shards.holds(shard):  # lost meanwhile (its write fenced): its owner's log holds it
                return "not_owner", await self.owner_of(shard.base)
            # Not removed: it fires, as the log says. The outcome took it off the queue
            # before its own removal failed, and queued nothing, the run being cancelled.
            entry = None if shard.state is None else shard.state.live.get(job_id)
            if entry is not None and not is_shards_copy(self._queue.get(job_id), shard):
                self._loading.queue_entry(job_id, entry)
            raise
        if found.lost:
            return "not_owner", await self.owner_of(shard.base)
        if found.run is not None:  # the next occurrence started meanwhile: cancel that run
            return await self._cancel_run(found.run, found.held)
        answer = found.answer
        return None if answer == ("absent", None) else answer  # absent: removed meanwhile, by another cancel

    async def _moved_on(self, run: Run) -> str | None:
        """The shard ``run``'s job moved on to, if its outcome moved it there and it is not known ended there.

        The outcome of a recurring job may have decided its move to the next occurrence before
        this cancel marked the run, or it lost the target before it could cancel the next
        occurrence there (``Outcomes._cancel_next``): the job then lives on in the target, and
        the caller must follow it there ("moved") rather than hear "cancelled" (found by the
        simulation, seed 1939).
        """
        source, job_id = run.shard, run.job_id
        state = source.state
        target = None if state is None else state.moved.get(job_id)
        if not target:
            return None  # it ended here
        if state is not None and job_id in state.pending and not source.lost:
            await self._moves.settle(source, job_id)  # so that the shard named is the one that holds it
        there = self._shards.get(target)
        if there is not None and self._shards.holds(there) and there.state is not None:
            landed = there.state
        else:  # no longer ours (or never loaded here): its log says
            try:
                landed = ShardState().replay((await read_log(self._store, target)).records())
            except StorageError:
                return target
        if job_id not in landed.live and landed.holds_move(job_id, run.entry[OCCURRENCE] + 1) \
                and not landed.moved.get(job_id):
            return None  # it landed there and ended there: cancelled by its outcome
        # Live there, or moved on from there (its next owner ran it and moved it on again):
        # the caller follows the chain (found by the simulation, seed 466479: taken as ended
        # there, "cancelled" was answered and the occurrence after next fired).
        return target

    async def _carry_on(self, run: Run, staged: Run | None, known: bool = True) -> None:
        """The removal of ``run``'s job is not durable: not cancelled after all, the job carries on,
        unless it has ended otherwise meanwhile.

        The run may have ended while this cancel waited for its withdraw; a second cancel then
        found the job queued, not running, and removed it. Queued again here, it would run after
        that cancel returned "cancelled" (found by the simulation). So only a job still live in
        the shard as this run's entry carries on, checked under the shard's gate, which a cancel
        of a queued job holds from its look at the log to its removal.

        ``known``: the shard's memory still says what its log holds. Not so once its writer found
        a write it was told failed had landed (``LogCorrupted``): a run that ended is then not
        run again from memory, as its outcome may be that very write (found by the simulation,
        seed 154 with named jobs: it ran twice); the shard is taken back from its log, which
        queues the job again if it is still to run.
        """
        async with run.shard.gate.exclusive():
            state = run.shard.state
            if run.shard.lost or state is None or state.live.get(run.job_id) is not run.entry:
                return  # removed or replaced meanwhile, or no longer ours: nothing to run again
            run.cancelled = False
            if staged is not None:
                self._runs.staged[run.job_id] = staged
            elif run.finished and known:
                # It ended meanwhile and skipped its outcome for the cancel: run it again.
                self._queue.push(run.job_id, run.due_us, run.entry)

    async def withdraw(self, shard: Shard, job_ids: Sequence[str], *, landed: bool = False) -> set[str]:
        """Take back the ADDs of a schedule call that failed: a REMOVE(CANCELLED) for each job.

        Returns the jobs that started meanwhile (their shard was loaded and they were due): those
        run to their end. ``landed``: the ADDs are known durable (their append was answered), so
        one no longer waiting on its first try in the loaded shard ran already, here or under an
        owner that held the shard meanwhile, and counts as started too. ``StorageError`` if the
        removals are not durable; the jobs are then left queued, to fire, as the log says they will.
        """
        started: set[str] = set()
        unqueued: list[tuple[str, int, list[Any]]] = []
        async with shard.gate.exclusive():
            live = shard.state.live if landed and shard.state is not None else None
            for job_id in job_ids:
                run = self._runs.find(job_id)
                if run is not None and run.shard is shard:
                    started.add(job_id)
                    continue
                if live is not None and not _first_try_pending(live.get(job_id)):
                    # Its REMOVE would take nothing back: a paused silo's call landed its batch,
                    # a peer adopted the shard and fired the job, and the call, failing on
                    # another batch, told its client "nothing done" (simulator seed 431343).
                    started.add(job_id)
                    continue
                queued = self._shards.unqueue(shard, job_id)  # first: it must not start while the removal is written
                if queued is not None:
                    unqueued.append((job_id, queued[0], queued[1]))
            try:
                # 1: the first occurrence, the only one a new job has
                await shard.write([remove_op(job_id, 1, CANCELLED) for job_id in job_ids if job_id not in started])
            except StorageError:
                for job_id, due_us, entry in unqueued:
                    if shard.state is not None and shard.state.live.get(job_id) is entry:
                        self._queue.push(job_id, due_us, entry)
                raise
        return started

    async def owner_of(self, shard_base: str) -> str | None:
        for head in await list_logs(self._store, shard_base):
            if head.base == shard_base:
                return head.metadata.get("owner")
        return None

    async def shards_from(self, window_us: int) -> list[tuple[str, str]]:
        """``(shard, owner)`` of every shard whose window starts at or after ``window_us``."""
        return [
            (head.base, head.metadata.get("owner", RELEASED))
            for head in await list_logs_between(self._store, SHARD_PREFIX, start=shards_before(window_us))
            if int(head.metadata.get("window_start", "0")) >= window_us
        ]
