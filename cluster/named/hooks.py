"""The silo side of named jobs: the generation fence, and each name's status as attempts start and end.

Every silo runs ``NamedJobHooks``. For a job that is not named it returns at once (one dict
lookup). A named job's attempt starts only once the job is *cleared* — its registry entry seen
pointing at it, read ahead of its due time (``cluster.named.fence``, where the argument is) — so
the firing path makes no registry write and, in the common case, no read. Its status changes
are queued and group-committed per name in the background (``cluster.named.recorder``), each
applied only while the entry still points at that job: an older generation never touches the
status of a newer one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from cluster.model.jobs import ScheduledJob
from cluster.model.trigger import TRIGGERED_FROM, triggered_from
from cluster.model.wire import datetime_to_us, pack, timedelta_to_us, unpack
from cluster.named.bucket import BUCKETS
from cluster.named.buckets import Buckets, WireOutcome, WirePut, outcome_to_wire, put_from_wire
from cluster.named.fence import Clearance
from cluster.named.recorder import StatusRecorder
from cluster.named.registry import (
    NAMED_MARK,
    REPLACES_MARK,
    AttemptRecord,
    Entry,
    JobStatus,
    Retired,
    clip_error,
    update_entry,
    with_history,
)
from cluster.runtime.hooks import AttemptEnd, AttemptEvent, SiloHooks, SiloView
from cluster.runtime.shardlog import window_of
from storage import Store

__all__ = ["NamedJobHooks", "started", "ended", "interrupted", "staged"]

_CACHE_LIMIT = 10_000
_MARK = NAMED_MARK.encode()


def started(status: JobStatus, event: AttemptEvent, owner: str) -> JobStatus:
    """Return ``status`` with ``event`` running; a leftover attempt of another silo was interrupted.

    A triggered run (``cluster.model.trigger``) shows as running only if nothing else is, and
    leaves the schedule's fields (next fire, Dapr's counters) alone.
    """
    triggered = TRIGGERED_FROM in event.job.metadata
    current = status.current_attempt
    if (current is not None and current.run_id != event.run_id and current.owner != owner
            and not triggered and not current.triggered):
        # A triggered run elsewhere is no leftover of this chain: it ends and counts on its own.
        status = interrupted(status, owner) or status
    record = AttemptRecord(event.run_id, event.attempt, event.occurrence, event.scheduled_for, event.started_at, owner,
                           triggered=triggered)
    status = replace(status, staged_target=None, staged_since=None)
    if triggered:
        return status if status.current_attempt is not None else replace(status, current_attempt=record)
    return replace(status, current_attempt=record, attempts=event.attempt, last_attempted=event.scheduled_for,
                   next_fire=None)


def ended(status: JobStatus, event: AttemptEvent, end: AttemptEnd, owner: str, history_size: int = 10) -> JobStatus:
    """Return ``status`` after the attempt ``event`` ended as ``end`` says, kept in its history."""
    triggered = TRIGGERED_FROM in event.job.metadata
    current = status.current_attempt
    record = current if current is not None and current.run_id == event.run_id else AttemptRecord(
        event.run_id, event.attempt, event.occurrence, event.scheduled_for, event.started_at, owner,
        triggered=triggered)
    outcome = "succeeded" if end.succeeded else "failed"
    last = replace(record, outcome=outcome, error=clip_error(end.error), ended_at=end.ended_at)
    status = replace(
        status,
        successful=status.successful + end.succeeded,
        failed=status.failed + (not end.succeeded),
        consecutive_failures=0 if end.succeeded else status.consecutive_failures + 1,
        current_attempt=None if current is None or current.run_id == event.run_id else current,
        last_attempt=last,
        history=with_history(status.history, last, history_size),
        staged_target=None,
        staged_since=None,
    )
    if triggered:
        return status  # the schedule's own fields are the schedule's: an extra run moves none of them
    occurrence_over = end.retry_at is None
    return replace(
        status,
        # Dapr's counters belong to one occurrence: a new one starts at 0 / None.
        attempts=0 if occurrence_over else event.attempt,
        last_attempted=None if occurrence_over else event.scheduled_for,
        next_fire=end.retry_at or end.next_occurrence,
        finished=end.finished,
        excluded=status.excluded + end.excluded,
        overlap_skipped=status.overlap_skipped + end.skipped,
    )


def interrupted(status: JobStatus, owner: str, history_size: int = 10, triggered: bool = False) -> JobStatus | None:
    """Return ``status`` with its running attempt counted as interrupted, or None if there is none
    that another silo incarnation (``owner`` is this one) was running. ``triggered``: whether the
    job found (in an adopted shard) is a triggered run; only a running attempt of its kind is its own."""
    current = status.current_attempt
    if current is None or current.owner == owner or current.triggered != triggered:
        return None
    last = replace(current, outcome="interrupted", error="the silo running it stopped without an answer")
    return replace(
        status,
        interrupted=status.interrupted + 1,
        consecutive_failures=status.consecutive_failures + 1,
        current_attempt=None,
        last_attempt=last,
        history=with_history(status.history, last, history_size),
    )


def staged(status: JobStatus, target: str, since: datetime) -> JobStatus | None:
    """Return ``status`` showing the job waiting for its absent ``target`` since ``since``; None if
    it already shows that (the earliest time is kept: a failover stages it again later)."""
    if status.staged_target == target:
        return None
    return replace(status, staged_target=target, staged_since=since)


class NamedJobHooks(SiloHooks):
    """The generation fence (``cluster.named.fence``) and the status of named jobs (``cluster.named.recorder``)."""

    def __init__(self, store: Store, silo: SiloView) -> None:
        self._store = store
        self._silo = silo
        # The last entry written per key: usually still current (this silo is the only writer
        # while it owns the job), which saves a read per update.
        self._known: dict[str, Entry] = {}
        self.clearance = Clearance(store)
        self.recorder = StatusRecorder(store, self._known)
        # The registry buckets this silo owns, when names are kept in them (opt-in, issue 25 point 5).
        self.buckets = Buckets(store, silo.log_owner, silo.lease, BUCKETS, self._schedule) \
            if silo.options.named_registry == "experimental-buckets" else None

    metadata_keys = (NAMED_MARK,)

    def interested(self, job: ScheduledJob) -> bool:
        return NAMED_MARK in job.metadata

    async def admit(self, event: AttemptEvent) -> bool | None:
        """Whether the attempt may start: its job is cleared (see ``cluster.named.fence``).

        From memory for a job cleared ahead of its due time, the common case; else the entry is
        read now, and the attempt deferred (None) while its put may still point the name at it.
        """
        job = event.job
        key = job.metadata.get(NAMED_MARK)
        if key is None:
            return True
        if TRIGGERED_FROM in job.metadata:
            return await self._admit_triggered(event, key)
        verdict = await self.clearance.verdict(key, job.id, job.generation, job.metadata.get(REPLACES_MARK))
        if not isinstance(verdict, str):
            return verdict
        # A later occurrence was carried on from a copy that ran; a first one must be the copy
        # the entry names: a second copy elsewhere is out of reach of a put's cancel.
        return event.occurrence > 1 or verdict == event.shard

    async def _admit_triggered(self, event: AttemptEvent, key: str) -> bool:
        """A triggered run: record it as running while the entry points at the generation it ran
        from, else refuse it. Not named by the entry as a generation is, so checked at each start
        (module docstring of fence); and the same compare-and-swap lists the run among the jobs
        the entry retires. Admitted, the attempt still has a way to go before it starts: a put or
        delete that replaces the generation meanwhile then cancels the run before it returns (a
        cancel stops an attempt not yet sent), as it cancels the generation itself."""
        owner = self._silo.owner
        job_id = triggered_from(event.job)
        run = Retired(event.job.id, event.shard, datetime_to_us(event.job.due)) if event.shard else None
        await self.recorder.flush_key(key)  # this run's own earlier changes first, in order
        return await self._update(key, job_id, lambda e: replace(e, status=started(e.status, event, owner),
                                                                  retire=_retiring(e.retire, run))) is not None

    async def attempt_started(self, event: AttemptEvent) -> None:
        key = event.job.metadata.get(NAMED_MARK)
        if key is not None and TRIGGERED_FROM not in event.job.metadata:
            owner = self._silo.owner
            self.recorder.add(key, event.job.id, lambda e: replace(e, status=started(e.status, event, owner)),
                              start=True)

    async def attempt_ended(self, event: AttemptEvent, end: AttemptEnd) -> None:
        key = event.job.metadata.get(NAMED_MARK)
        if key is not None:
            owner, size = self._silo.owner, self._silo.options.history_size
            # A triggered run over for good has nothing left for a put or delete to cancel.
            done = event.job.id if end.finished and TRIGGERED_FROM in event.job.metadata else None
            self.recorder.add(key, triggered_from(event.job),
                              lambda e: replace(e, status=ended(e.status, event, end, owner, size),
                                                retire=tuple(r for r in e.retire if r.job_id != done)))
            if end.finished:
                self.clearance.forget(event.job.id)

    async def attempt_staged(self, event: AttemptEvent, target: str, since: datetime) -> None:
        key = event.job.metadata.get(NAMED_MARK)
        if key is not None:
            self.recorder.add(key, triggered_from(event.job), lambda e: _with_status(e, staged(e.status, target, since)))

    async def job_cancelled(self, job_id: str) -> None:
        self.clearance.forget(job_id)

    def jobs_landed(self, shard: str, items: Sequence[Sequence[Any]]) -> None:
        """Clear the named jobs of a schedule call ahead of their due time (a put's own, mostly).

        Not those of a window that starts beyond the lookahead: their shard is dormant, and is
        cleared whole by ``shard_loaded`` when it loads, before that window starts. Cleared now,
        each cost the silo registry reads while its put was still under way (one to four per
        put at 20-110 ms a round, issue 25) and a clearance held for days for nothing."""
        options = self._silo.options
        loads_later = self._silo.clock.now_us() + timedelta_to_us(options.lookahead)
        duration = timedelta_to_us(options.shard_duration)
        for item in items:
            packed = item[2]
            if window_of(item[1], duration) > loads_later:
                continue
            if _MARK in packed:  # a substring test: plain jobs are not decoded
                job = ScheduledJob.from_wire(unpack(packed))
                key = job.metadata.get(NAMED_MARK)
                if key is not None and TRIGGERED_FROM not in job.metadata:
                    self.clearance.prefetch(key, job.id, job.generation, landed=True)

    async def shard_loaded(self, jobs: Sequence[tuple[ScheduledJob, int, int]], adopted: bool) -> None:
        owner, size = self._silo.owner, self._silo.options.history_size
        for job, _, _ in jobs:
            key = job.metadata.get(NAMED_MARK)
            if key is None:
                continue
            kind = TRIGGERED_FROM in job.metadata
            if not kind:
                # Before any of these jobs is admitted: the silo spawns this call as it queues
                # them, ahead of the tasks that deliver them, and this hook comes first.
                self.clearance.recheck(key, job.id, job.generation)
            if adopted:
                self.recorder.add(key, triggered_from(job), _interrupting(owner, size, kind))

    async def close(self) -> None:
        if self.buckets is not None:
            await self.buckets.release_all()  # peers take them at once
        await self.clearance.close()
        await self.recorder.close()

    async def maintain(self) -> None:
        if self.buckets is not None:
            await self.buckets.take()

    def service(self, method: str) -> Callable[..., Awaitable[Any]] | None:
        return self._named_put if method == "named_put" and self.buckets is not None else None

    async def _named_put(self, sent: Sequence[WirePut]) -> list[WireOutcome]:
        """Puts sent to this silo as the owner of their buckets (``Buckets.put_many``)."""
        assert self.buckets is not None
        outcomes = await self.buckets.put_many([put_from_wire(one) for one in sent])
        return [outcome_to_wire(outcome) for outcome in outcomes]

    async def _schedule(self, jobs: Sequence[ScheduledJob]) -> list[str]:
        return await self._silo.schedule([(j.id, datetime_to_us(j.first_fire), pack(j.to_wire())) for j in jobs])

    async def _update(self, key: str, job_id: str, change: Any) -> Entry | None:
        entry = await update_entry(self._store, key, job_id, change, self._known.pop(key, None))
        if entry is not None:
            if len(self._known) >= _CACHE_LIMIT:
                self._known.clear()
            self._known[key] = entry
        return entry


def _retiring(retire: tuple[Retired, ...], run: Retired | None) -> tuple[Retired, ...]:
    """``retire`` with ``run`` on it, once (a retry of the run is admitted again)."""
    if run is None or any(r.job_id == run.job_id for r in retire):
        return retire
    return (*retire, run)


def _interrupting(owner: str, size: int, triggered: bool) -> Callable[[Entry], Entry | None]:
    return lambda e: _with_status(e, interrupted(e.status, owner, size, triggered))


def _with_status(entry: Entry, status: JobStatus | None) -> Entry | None:
    return None if status is None else replace(entry, status=status)
