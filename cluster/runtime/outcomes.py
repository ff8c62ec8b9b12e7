"""What an attempt's outcome means, made durable: a removal, a retry, or the next occurrence.

An outcome that cannot be written yet (the store is down) is kept and written again, rather
than the job run again; its run stays in flight meanwhile, which holds back new work. A write
fenced by another owner ends the matter: that owner replays the job from the log.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Coroutine
from datetime import datetime
from typing import Any, TypeVar

from cluster.model.attempt import OVERLAP_CANCELLED, JobFailed, Outcome
from cluster.model.clock import Clock, now_datetime
from cluster.model.jobs import ScheduledJob
from cluster.model.limits import code_allowed
from cluster.model.occurrences import Misfire, Overlap, cap_fire_all, catch_up, next_occurrence, overlapped
from cluster.model.options import ClusterOptions
from cluster.model.policies import DEFAULT_FAILURE_POLICY, FailurePolicy
from cluster.model.shape import allowed_from
from cluster.model.wire import datetime_to_us, timedelta_to_us, us_to_datetime
from cluster.runtime.hooks import AttemptEnd, call_hooks
from cluster.runtime.metrics import SiloMetrics
from cluster.runtime.moves import Moves
from cluster.runtime.ownership import ShardTable
from cluster.runtime.queue import JobQueue
from cluster.runtime.runs import Run, RunTable
from cluster.runtime.shard import Shard
from cluster.runtime.shardlog import (
    CANCELLED,
    EXHAUSTED,
    EXPIRED,
    JOB,
    MOVED,
    OCCURRENCE,
    OWNER,
    SCHEDULED,
    SUCCEEDED,
    add_op,
    remove_op,
    retry_op,
    window_of,
)
from storage import Fenced, LogCorrupted, StorageError

log = logging.getLogger("timeshard.silo")

T = TypeVar("T")
FIRST_RETRY_DELAY = 0.2  # seconds before an outcome write is tried again; doubles up to the max
MAX_RETRY_DELAY = 5.0


def shaped_next(job: ScheduledJob, scheduled: datetime, metrics: SiloMetrics) -> tuple[tuple[int, int] | None, int]:
    """``(scheduled_us, fire_us)`` of the occurrence ``scheduled`` names, once ``job``'s bounds and
    exclusions have moved it on (None: the job has no occurrence left), and how many occurrences
    exclusions skipped on the way; skips are counted in ``metrics``.

    The fire time is the scheduled one plus the job's jitter; the series goes on from the
    scheduled one. ``ttl`` bounds the fire time, jitter included (firing expires a job past it).
    """
    excluded = 0
    if job.shaped:
        found = allowed_from(job.schedule, scheduled, job.bounds)
        excluded = found.excluded
        if excluded:
            metrics.excluded.inc(excluded)
        if found.past_end:
            metrics.out_of_bounds.inc()
        if found.scheduled is None:
            return None, excluded
        scheduled = found.scheduled
    scheduled_us = datetime_to_us(scheduled)
    fire_us = job.fire_us(scheduled_us)
    if job.ttl is not None and fire_us > datetime_to_us(job.ttl):
        return None, excluded
    return (scheduled_us, fire_us), excluded


async def _together(calls: list[Coroutine[Any, Any, None]]) -> None:
    """Run ``calls`` side by side; a lone one is awaited as it is, without a task of its own."""
    if len(calls) == 1:
        await calls[0]
    elif calls:
        await asyncio.gather(*calls)


class Outcomes:
    """Writes outcomes of attempts into their shards and queues what comes next."""

    def __init__(self, options: ClusterOptions, clock: Clock, queue: JobQueue[list[Any]], runs: RunTable,
                 shards: ShardTable, metrics: SiloMetrics, moves: Moves) -> None:
        self._options = options
        self._clock = clock
        self._queue = queue
        self._runs = runs
        self._shards = shards
        self._metrics = metrics
        self._moves = moves

    async def complete_batch(self, runs: list[Run], outcomes: list[Outcome]) -> None:
        """Record the outcomes of a delivered batch, ``outcomes[i]`` belonging to ``runs[i]``."""
        # The common case — a one-shot job that succeeded — needs only a REMOVE: one write per
        # shard for the whole batch, its hooks told once it is durable. Everything else goes
        # through complete().
        simple: dict[Shard, list[Run]] = defaultdict(list)
        rest: list[tuple[Run, Outcome]] = []
        if len(outcomes) != len(runs):
            # The handler's process answered for some other number of attempts: record what it
            # answered, and the rest as failed, so that no run stays in flight for good.
            log.error("handler answered for the wrong number of attempts", extra={"sent": len(runs),
                                                                                 "answered": len(outcomes)})
            outcomes = [*outcomes[: len(runs)],
                        *(Outcome(r.run_id, "the handler gave no outcome for this attempt", "MissingOutcome")
                          for r in runs[len(outcomes):])]
        held: dict[Shard, bool] = {}  # per shard, once per batch: whether it is still ours
        for run, outcome in zip(runs, outcomes, strict=True):
            shard = run.entry[OWNER]
            ours = held.get(shard)
            if ours is None:
                ours = held[shard] = self._shards.holds(shard)
            if not ours:
                self._discard(run)
                continue
            head = run.head
            if (outcome.error is None and not outcome.refused and not head.recurring
                    and not run.cancelled and not head.retry_always):
                simple[shard].append(run)
            else:
                rest.append((run, outcome))
        succeeded = sum(len(v) for v in simple.values())
        if succeeded:
            self._metrics.succeeded.inc(succeeded)
        await asyncio.gather(*(self._remove_succeeded(shard, rs) for shard, rs in simple.items()),
                             *(self.complete(run, outcome) for run, outcome in rest))

    async def _remove_succeeded(self, shard: Shard, runs: list[Run]) -> None:
        written: list[Run] = []

        async def removals() -> list[Any]:
            live = [r for r in runs if not r.cancelled]
            touched = await shard.write([remove_op(r.job_id, r.entry[OCCURRENCE], SUCCEEDED) for r in live])
            written.extend(live)
            return touched

        marked: list[Run] = []
        # By identity: ``in`` on a list of runs compares them field by field (a dataclass's
        # ``__eq__``), quadratic in the batch: 1.2 s of CPU for 3,500 named jobs' ends (issue 25).
        done: set[int] = set()
        try:
            await self._until_durable(shard, removals, done=lambda: all(r.cancelled for r in runs), jobs=len(runs))
            done = {id(r) for r in written}
            # Marked by a cancel since their success came in, and left out: that cancel may yet fail.
            marked = [r for r in runs if r.cancelled and id(r) not in done]
        finally:
            left = {id(r) for r in marked}
            self._runs.release_all([r for r in runs if id(r) not in left] if left else runs)
        # As complete() tells them: a one-shot job that succeeded is finished; and each run's
        # hooks apart from the others'. Told one after another, a hook that took long held back
        # the rest: a flow hook recording a step's success schedules its dependants, and that
        # call waited for a rejoin that never came (its silo, declared dead, was superseded);
        # the batch's other steps' successes never reached their flow logs, their drained shard
        # was deleted, and reconcile ran them again (simulator seed 31 with buckets).
        hooked = [r for r in written if r.hooks]
        end = AttemptEnd(True, None, now_datetime(self._clock), None, None, True)
        await _together([
            *(call_hooks(r.hooks, "attempt_ended", r.event(), end) for r in hooked),
            # Told it succeeded: a compaction that folded the removal away leaves its log
            # saying only that the job ended (simulator seed 335398, every kind).
            *(call_hooks(r.hooks, "attempt_unsure", r.event(), end) for r in runs
              if r.hooks and id(r) not in done and id(r) not in left),
            *(self.complete(r, Outcome(r.run_id), counted=True) for r in marked)])

    def _discarded(self, run: Run) -> bool:
        """Whether ``run``'s outcome comes too late to record: its shard is no longer ours.

        Lost to another owner, released at a stop, or held by an incarnation this silo no
        longer is (it rejoined): whoever holds the shard next replays the job from its log.
        """
        if self._shards.holds(run.shard):
            return False
        self._discard(run)
        return True

    def _discard(self, run: Run) -> None:
        log.info("outcome of an ended ownership discarded", extra={"job": run.job_id, "shard": run.shard.base})
        self._runs.release(run)

    async def complete(self, run: Run, outcome: Outcome, *, counted: bool = False) -> None:
        """Record ``outcome`` of ``run`` durably, then tell the run's hooks how it ended.

        A run a cancel marked counts as cancelled only once that cancel's removal is durable:
        should it fail, the outcome is recorded as if no cancel had come (``Run.stays_cancelled``).
        """
        if self._discarded(run):
            return
        end: AttemptEnd | None = None
        try:
            if run.cancelled:
                await run.stays_cancelled()
            if outcome.refused:
                # The handler saw our lease had run out and did not start it: no attempt was
                # made. Queue it again; if the shard was taken meanwhile, the write fences us.
                if not run.shard.lost and not run.cancelled:
                    self._queue.push(run.job_id, run.due_us, run.entry)
                return
            if counted:
                pass
            elif self._superseded(run, outcome):
                self._metrics.overlap_cancelled.inc()
            else:
                (self._metrics.succeeded if outcome.succeeded else self._metrics.failed).inc()
            end = await self._until_durable(run.shard, lambda: self._record(run, outcome),
                                            done=lambda: run.cancelled, jobs=1)
        finally:
            self._runs.release(run)
        if end is not None and run.hooks:
            await call_hooks(run.hooks, "attempt_ended", run.event(), end)
        elif run.hooks and not run.cancelled:
            await call_hooks(run.hooks, "attempt_unsure", run.event())

    async def _until_durable(self, shard: Shard, write: Callable[[], Awaitable[T]], *, done: Callable[[], bool],
                             jobs: int) -> T | None:
        """``write()`` until it is durable or ``done()``; None if fenced, given up, or done.

        The invariant: no run holds its slot for good. Every way out of the loop is bounded by
        the store answering again: a write lands; or ``Fenced`` (claimed by another silo: the
        shard is dropped and its new owner replays the job); or ``LogCorrupted`` (the shard is
        taken back from its log, which queues the job again); or this incarnation stops holding
        the shard. Nothing acknowledged is lost on the way: an outcome not recorded means the
        job is still in the log, and runs again.
        """
        delay = FIRST_RETRY_DELAY
        while not done():
            if not self._shards.holds(shard):
                return None  # our ownership ended while we retried: the next owner replays the job
            try:
                return await write()
            except Fenced:
                self._shards.drop(shard, "fenced while writing outcomes")
                return None
            except LogCorrupted as exc:
                # The writer stopped for good: the shard is taken back from its log, which queues
                # this job again. Until then, retried like an outage (the store may not answer).
                if await self._shards.taken_back(shard):
                    return None
                log.warning("outcomes not durable yet, retrying", extra={"jobs": jobs, "error": repr(exc)})
                await asyncio.sleep(delay)
                delay = min(2 * delay, MAX_RETRY_DELAY)
            except StorageError as exc:
                if self._runs.closing:
                    log.error("outcomes not recorded at stop; the jobs will run again", extra={"jobs": jobs})
                    return None
                log.warning("outcomes not durable yet, retrying", extra={"jobs": jobs, "error": repr(exc)})
                await asyncio.sleep(delay)
                delay = min(2 * delay, MAX_RETRY_DELAY)
        return None

    async def _record(self, run: Run, outcome: Outcome) -> AttemptEnd:
        """Write what the outcome means — a retry, the next occurrence or the end — durably."""
        policy = run.job.retry_policy
        attempts = run.number
        exc = None if outcome.succeeded else JobFailed(outcome.error_type or "Error", outcome.error or "",
                                                       timed_out=outcome.timed_out)
        retry = exc is not None or policy.strategy == "always"
        # Stopped for the next occurrence, which is due: not a failure to run again.
        retry_at = self._decide(policy, run, outcome, exc) if retry and not self._superseded(run, outcome) else None
        error = None if exc is None else f"{exc.error_type}: {exc.message}"
        if retry_at is not None:
            due_us = datetime_to_us(retry_at)
            (entry,) = await run.shard.write([retry_op(run.job_id, due_us, attempts)])
            if entry is not None and not await run.stays_cancelled():
                self._queue_unless_paused(run.job_id, due_us, entry)
            self._metrics.retried.inc()
            return AttemptEnd(outcome.succeeded, error, now_datetime(self._clock), retry_at, None, False)
        if exc is not None:
            log.warning("job failed, retries exhausted", extra={"job": run.job_id, "attempts": attempts, "error": error})
        nxt, excluded, skipped = await self.end_occurrence(run, SUCCEEDED if outcome.succeeded else EXHAUSTED)
        return AttemptEnd(outcome.succeeded, error, now_datetime(self._clock), None,
                          None if nxt is None else us_to_datetime(nxt), nxt is None, excluded, skipped)

    @staticmethod
    def _superseded(run: Run, outcome: Outcome) -> bool:
        """Whether the handler stopped ``run`` as its job's next occurrence came due (cancel_other)."""
        return bool(run.stop_us) and outcome.error_type == OVERLAP_CANCELLED

    def _decide(self, policy: FailurePolicy, run: Run, outcome: Outcome, exc: JobFailed | None) -> datetime | None:
        """The policy's next attempt; a policy that raises (a retry function that does not import,
        takes the wrong arguments, or is outside ``allowed_code_prefixes``) is logged and replaced
        by the default policy, so the attempt still ends in a durable outcome."""
        last = us_to_datetime(run.due_us)
        ctx = run.context() if exc is not None else None
        try:
            path = getattr(policy, "path", None)
            if isinstance(path, str) and not code_allowed(path, self._options.allowed_code_prefixes):
                raise PermissionError(f"retry function {path!r} is outside allowed_code_prefixes")
            return policy.decide(run.number, last, succeeded=outcome.succeeded, ctx=ctx, exc=exc)
        except Exception as error:
            log.error("failure policy raised; the default policy decides", extra={"job": run.job_id,
                                                                                  "error": repr(error)})
            return DEFAULT_FAILURE_POLICY.decide(run.number, last, succeeded=outcome.succeeded, ctx=ctx, exc=exc)

    async def end_occurrence(self, run: Run, outcome: str) -> tuple[int | None, int, int]:
        """The occurrence ended: remove it, or move the job to its next occurrence. Returns when
        that one fires (None: the job is finished), and how many occurrences its exclusions and
        its overlap policy skipped on the way."""
        entry = run.entry
        times, excluded, skipped, buffered = (None, 0, 0, False) if outcome == EXPIRED else self._next_time(run)
        if times is None:
            await run.shard.write([remove_op(run.job_id, entry[OCCURRENCE], outcome)])
            self._count_overlap(skipped, False)
            return None, excluded, skipped
        scheduled, nxt = times
        add = add_op(run.job_id, nxt, entry[JOB], entry[OCCURRENCE] + 1, 0, scheduled)
        window = window_of(nxt, timedelta_to_us(self._options.shard_duration))
        if self._shards.open_for(window) is run.shard:
            (new_entry,) = await run.shard.write([add])  # same shard: the ADD replaces the entry
        else:
            # One durable decision in this shard, carrying the next occurrence; then carried out.
            # An adopter of this shard sees either the occurrence still live (and runs it) or
            # the decision (and carries it out): never both, so the job keeps one chain.
            if not self._shards.holds(run.shard):
                # Begun under an incarnation this silo no longer is: the shard's next owner moves it.
                raise Fenced(f"shard {run.shard.base!r} is held by an ended incarnation")
            target = await self._shards.open_shard(window)
            nxt_entry = add[2:7]
            state = run.shard.state
            paused = None if state is None or not state.paused else state.paused.get(run.job_id)
            if paused is None and state is not None and run.job_id not in state.live:
                # A cancel removed this occurrence while the outcome was under way, dropping its
                # pause from the state; the job lives on by this move, still paused (found by the
                # simulation, seed 73583: the next occurrence landed unpaused and fired).
                paused = run.pause_removed
            if paused is not None:
                nxt_entry.append(paused)  # paused while this attempt ran: the next occurrence stays paused
            decision = remove_op(run.job_id, entry[OCCURRENCE], MOVED, target.base, nxt_entry)
            await run.shard.write([decision])
            # Queued below, once this occurrence is fully written: the next one must not start
            # while this run still counts as in flight.
            new_entry = await self._moves.settle(run.shard, run.job_id)
        # Counted once the decision is durable: a write tried again is counted once, and a
        # replay of the log counts nothing (the decision is already taken).
        self._count_overlap(skipped, buffered)
        if await run.stays_cancelled():
            await self._cancel_next(run.job_id, run.shard)
            return None, excluded, skipped
        started = self._runs.find(run.job_id)
        if new_entry is not None and (started is None or started is run or started.entry is not new_entry):
            # Not when the next occurrence runs already: a take-back of this run's shard carried
            # out the same move and queued it while this older copy's outcome was being written.
            # Queued again, it ran twice from one shard, its silo alive (simulator seed 1259).
            self._queue_unless_paused(run.job_id, nxt, new_entry)
        return nxt, excluded, skipped

    def _queue_unless_paused(self, job_id: str, due_us: int, entry: list[Any]) -> None:
        """Queue what an outcome wrote, unless its job is paused: it then waits, unqueued, for the resume.

        Queued while paused, it would start as soon as a resume is applied to the shard, before
        that resume is durable or has decided to queue it itself: two runs of one occurrence
        (found by the simulation, seed 2128).
        """
        state = entry[OWNER].state
        if state is not None and state.paused and job_id in state.paused:
            return
        self._queue.push(job_id, due_us, entry)

    def _count_overlap(self, skipped: int, buffered: bool) -> None:
        if skipped:
            self._metrics.overlap_skipped.inc(skipped)
        if buffered:
            self._metrics.overlap_buffered.inc()

    async def expire(self, run: Run) -> None:
        """Remove a job whose ttl passed before this occurrence could start."""
        try:
            await self.end_occurrence(run, EXPIRED)
        except Fenced:
            self._shards.drop(run.shard, "fenced while expiring a job")
        except StorageError as exc:
            # Not durable: the job stays in its log and is expired again when next loaded.
            log.warning("could not record an expiry", extra={"job": run.job_id, "error": repr(exc)})

    async def _cancel_next(self, job_id: str, source: Shard) -> None:
        state = source.state
        shard: Shard | None = source  # the next occurrence stayed in this shard, or moved on
        if state is not None and job_id not in state.live:
            shard = self._shards.get(state.moved.get(job_id) or "")
        if shard is not None and shard.state is not None and job_id in shard.state.live:
            self._shards.unqueue(shard, job_id)
            await shard.write([remove_op(job_id, shard.state.live[job_id][OCCURRENCE], CANCELLED)])

    def _next_time(self, run: Run) -> tuple[tuple[int, int] | None, int, int, bool]:
        """``(scheduled_us, fire_us)`` of the job's next occurrence (None when it has none left);
        how many occurrences its exclusions skipped to reach it; how many its overlap policy
        skipped; and whether the next one waited for this one (it is due already)."""
        job, entry = run.job, run.entry
        scheduled = us_to_datetime(entry[SCHEDULED])
        nxt = next_occurrence(job.schedule, scheduled, entry[OCCURRENCE], job.repeats, job.ttl)
        if nxt is None:
            return None, 0, 0, False
        now = now_datetime(self._clock)
        skipped, buffered = 0, False
        grace = self._options.misfire_grace
        if run.head.overlap != "allow_all" and job.schedule is not None:
            # The policy decides for every occurrence due by now: they came due while this one
            # was in flight (running, retrying, or waiting for a silo). See ``overlapped``.
            plan = overlapped(Overlap(run.head.overlap), job.schedule, nxt, now, job.ttl)
            nxt, skipped, buffered = plan.next_due, plan.skipped, plan.buffered
        elif nxt < now - grace:
            misfire = Misfire.parse(job.misfire)
            # This fire was itself the one catch-up fire_once allows when it ran late.
            late = us_to_datetime(run.due_us) < now - grace
            if misfire is Misfire.SKIP or (misfire is Misfire.FIRE_ONCE and late):
                nxt = catch_up(job.schedule, nxt, now, Misfire.SKIP, entry[OCCURRENCE], job.repeats, job.ttl).next_due
            elif misfire is Misfire.FIRE_ALL and job.schedule is not None:
                nxt = cap_fire_all(job.schedule, nxt, now)
        if nxt is None:
            return None, 0, skipped, buffered
        times, excluded = shaped_next(job, nxt, self._metrics)
        return times, excluded, skipped, buffered
