"""The silo side of named jobs: keep each name's status current as its attempts start and end.

Every silo runs ``NamedJobHooks``. For a job that is not named it returns at once (one dict
lookup). For a named job it writes the attempt into the name's registry entry by one
compare-and-swap on its metadata, and only while the entry still points at that job: an older
generation never touches the status of a newer one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from cluster.model.jobs import ScheduledJob
from cluster.model.trigger import TRIGGERED_FROM, triggered_from
from cluster.named.registry import (
    NAMED_MARK,
    AttemptRecord,
    Entry,
    JobStatus,
    clip_error,
    read_entry,
    update_entry,
    with_history,
)
from cluster.runtime.hooks import AttemptEnd, AttemptEvent, SiloHooks, SiloView
from storage import Store

__all__ = ["NamedJobHooks", "started", "ended", "interrupted", "staged"]

_CACHE_LIMIT = 10_000


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
    """Records attempts of named jobs in their registry entries (see the module docstring)."""

    def __init__(self, store: Store, silo: SiloView) -> None:
        self._store = store
        self._silo = silo
        # The last entry written per key: usually still current (this silo is the only writer
        # while it owns the job), which saves a read per update.
        self._known: dict[str, Entry] = {}

    metadata_keys = (NAMED_MARK,)

    def interested(self, job: ScheduledJob) -> bool:
        return NAMED_MARK in job.metadata

    async def admit(self, event: AttemptEvent) -> bool:
        """Record the attempt as running; refuse it if a newer generation owns the name.

        A stray copy of an older generation (a schedule call retried after its silo died with
        the write made, say) is not reachable by the cancel of a later ``put``; this check at
        the start of every attempt is what keeps it from running after that ``put`` returned.
        """
        key = event.job.metadata.get(NAMED_MARK)
        if key is None:
            return True
        owner = self._silo.owner
        job_id = triggered_from(event.job)
        if await self._update(key, job_id, lambda e: replace(e, status=started(e.status, event, owner))):
            return True
        if job_id != event.job.id:
            return False  # a triggered run of a generation that was replaced or deleted since
        entry = await read_entry(self._store, key)
        # No entry yet, or an older one: the put that scheduled this job has not pointed the
        # name at it yet. Same generation with another id: a put that lost the race for it.
        return entry is None or entry.generation < event.job.generation

    async def attempt_ended(self, event: AttemptEvent, end: AttemptEnd) -> None:
        key = event.job.metadata.get(NAMED_MARK)
        if key is not None:
            owner, size = self._silo.owner, self._silo.options.history_size
            await self._update(key, triggered_from(event.job),
                               lambda e: replace(e, status=ended(e.status, event, end, owner, size)))

    async def attempt_staged(self, event: AttemptEvent, target: str, since: datetime) -> None:
        key = event.job.metadata.get(NAMED_MARK)
        if key is not None:
            await self._update(key, triggered_from(event.job),
                               lambda e: _with_status(e, staged(e.status, target, since)))

    async def shard_loaded(self, jobs: Sequence[tuple[ScheduledJob, int, int]], adopted: bool) -> None:
        if not adopted:
            return
        owner, size = self._silo.owner, self._silo.options.history_size
        for job, _, _ in jobs:
            key = job.metadata.get(NAMED_MARK)
            if key is not None:
                kind = TRIGGERED_FROM in job.metadata
                await self._update(key, triggered_from(job),
                                   lambda e, kind=kind: _with_status(e, interrupted(e.status, owner, size, kind)))

    async def _update(self, key: str, job_id: str, change: Any) -> Entry | None:
        entry = await update_entry(self._store, key, job_id, change, self._known.pop(key, None))
        if entry is not None:
            if len(self._known) >= _CACHE_LIMIT:
                self._known.clear()
            self._known[key] = entry
        return entry


def _with_status(entry: Entry, status: JobStatus | None) -> Entry | None:
    return None if status is None else replace(entry, status=status)
