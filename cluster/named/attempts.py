"""How an attempt changes a named job's status: pure functions of the status, and their wire form.

The silo running an attempt computes nothing of the entry: with names kept in entries
(``cluster.named.recorder``) it applies these to the entry it reads; with names kept in registry
buckets (``named_registry="buckets"``) it sends the change as plain values
(``change_to_wire``) to the bucket's owner, which applies it to the entry in its memory
(``apply_change``) and group-commits the result as a ``STATUS`` record.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any

from cluster.model.evolve import evolve
from cluster.model.jobs import ScheduledJob, Target
from cluster.model.pause import PauseRecord
from cluster.model.trigger import TRIGGERED_FROM
from cluster.model.wire import datetime_to_us, us_to_datetime
from cluster.named.registry import AttemptRecord, JobStatus, Retired, clip_error, with_history
from cluster.runtime.hooks import AttemptEnd, AttemptEvent

__all__ = ["LINGER_S", "StatusSender", "WireChange", "apply_change", "apply_changes", "ended", "ended_change",
           "interrupted",
           "interrupted_change", "paused", "paused_change", "retiring", "staged", "staged_change", "started", "started_change"]

#: A status change as sent to a bucket's owner: (kind, ...plain values).
WireChange = tuple[Any, ...]

log = logging.getLogger("timeshard.named")

#: How long a silo's status changes gather before they go to the owners: ``get`` shows an
#: attempt's start or end this plus one call and one append after it (well under 1 s).
LINGER_S = 0.05
#: Changes a linger that make a burst: the changes gather on, up to ``MAX_LINGER_S`` since the
#: first, so that the owners' work on them waits until the burst's attempts are out, and an
#: attempt's start goes in one send with its end (one step at the owner: ``apply_changes``).
BURST_CHANGES = 256
MAX_LINGER_S = 0.4
SEND_CHUNK = 1_000  # changes a call: an owner answers a call at once, its event loop held meanwhile
SEND_TRIES = 20


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
    # One copy each way, by ``evolve`` (``dataclasses.replace`` of a status cost ~15 µs): a
    # bucket's owner applies every attempt's start and end (issue 25).
    if triggered:
        if status.current_attempt is not None:
            return evolve(status, staged_target=None, staged_since=None)
        return evolve(status, staged_target=None, staged_since=None, current_attempt=record)
    return evolve(status, staged_target=None, staged_since=None, current_attempt=record, attempts=event.attempt,
                   last_attempted=event.scheduled_for, next_fire=None)


def ended(status: JobStatus, event: AttemptEvent, end: AttemptEnd, owner: str, history_size: int = 10) -> JobStatus:
    """Return ``status`` after the attempt ``event`` ended as ``end`` says, kept in its history."""
    triggered = TRIGGERED_FROM in event.job.metadata
    current = status.current_attempt
    record = current if current is not None and current.run_id == event.run_id else AttemptRecord(
        event.run_id, event.attempt, event.occurrence, event.scheduled_for, event.started_at, owner,
        triggered=triggered)
    last = AttemptRecord(record.run_id, record.attempt, record.occurrence, record.scheduled_for, record.started_at,
                         record.owner, "succeeded" if end.succeeded else "failed", clip_error(end.error), end.ended_at,
                         record.triggered)
    changes: dict[str, Any] = {  # one copy, as in ``started``
        "successful": status.successful + end.succeeded,
        "failed": status.failed + (not end.succeeded),
        "consecutive_failures": 0 if end.succeeded else status.consecutive_failures + 1,
        "current_attempt": None if current is None or current.run_id == event.run_id else current,
        "last_attempt": last,
        "history": with_history(status.history, last, history_size),
        "staged_target": None,
        "staged_since": None,
    }
    if not triggered:  # the schedule's own fields are the schedule's: an extra run moves none of them
        occurrence_over = end.retry_at is None
        changes.update(
            # Dapr's counters belong to one occurrence: a new one starts at 0 / None.
            attempts=0 if occurrence_over else event.attempt,
            last_attempted=None if occurrence_over else event.scheduled_for,
            next_fire=end.retry_at or end.next_occurrence,
            finished=end.finished,
            excluded=status.excluded + end.excluded,
            overlap_skipped=status.overlap_skipped + end.skipped,
        )
    return evolve(status, **changes)


def interrupted(status: JobStatus, owner: str, history_size: int = 10, triggered: bool = False) -> JobStatus | None:
    """Return ``status`` with its running attempt counted as interrupted, or None if there is none
    that another silo incarnation (``owner`` is this one) was running. ``triggered``: whether the
    job found (in an adopted shard) is a triggered run; only a running attempt of its kind is its own."""
    current = status.current_attempt
    if current is None or current.owner == owner or current.triggered != triggered:
        return None
    last = evolve(current, outcome="interrupted", error="the silo running it stopped without an answer")
    return evolve(
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
    return evolve(status, staged_target=target, staged_since=since)


def paused(status: JobStatus, record: PauseRecord | None) -> JobStatus | None:
    """Return ``status`` showing the pause ``record`` of its shard's log (None: not paused); None if it shows that already."""
    if record is None:
        new = evolve(status, paused=False, paused_note=None, paused_by=None, paused_since=None)
    else:
        new = evolve(status, paused=True, paused_note=record.note, paused_by=record.by, paused_since=record.since)
    return None if new == status else new


def retiring(retire: tuple[Retired, ...], run: Retired | None) -> tuple[Retired, ...]:
    """``retire`` with ``run`` on it, once (a retry of the run is admitted again)."""
    if run is None or any(r.job_id == run.job_id for r in retire):
        return retire
    return (*retire, run)


# -- over the wire: a change sent to the bucket's owner -------------------------------------------

def paused_change(record: PauseRecord | None) -> WireChange:
    return ("p",) if record is None else ("p", record.note, record.by, datetime_to_us(record.since))


def started_change(event: AttemptEvent, owner: str) -> WireChange:
    return ("s", owner, _event_row(event))


def ended_change(event: AttemptEvent, end: AttemptEnd, owner: str, history_size: int) -> WireChange:
    row = [end.succeeded, end.error, datetime_to_us(end.ended_at), _us(end.retry_at), _us(end.next_occurrence),
           end.finished, end.excluded, end.skipped]
    return ("e", owner, history_size, _event_row(event), row)


def staged_change(target: str, since: datetime) -> WireChange:
    return ("t", target, datetime_to_us(since))


def interrupted_change(owner: str, history_size: int, triggered: bool) -> WireChange:
    return ("i", owner, history_size, triggered)


def apply_change(status: JobStatus, change: WireChange) -> JobStatus | None:
    """``status`` after ``change`` (None: it changes nothing), as the silo that sent it would have written it."""
    kind = change[0]
    if kind == "s":
        return started(status, _event(change[2]), change[1])
    if kind == "e":
        r = change[4]
        end = AttemptEnd(r[0], r[1], us_to_datetime(r[2]), _dt(r[3]), _dt(r[4]), r[5], r[6], r[7])
        return ended(status, _event(change[3]), end, change[1], change[2])
    if kind == "t":
        return staged(status, change[1], us_to_datetime(change[2]))
    if kind == "i":
        return interrupted(status, change[1], change[2], change[3])
    if kind == "p":
        return paused(status, None if len(change) == 1 else PauseRecord(change[1], change[2], us_to_datetime(change[3])))
    raise ValueError(f"not a status change: {kind!r}")


def apply_changes(status: JobStatus, changes: Sequence[WireChange]) -> JobStatus | None:
    """``status`` after ``changes`` in order (None: they change nothing), as ``apply_change``
    one by one leaves it. An attempt's start followed by its own end, while no attempt runs,
    is applied as that end alone, recorded as starting when the start says: the same status
    for half the work (both are sent together in a burst: half an owner's CPU while a burst
    fires, issue 25). With an attempt running, the start may count it interrupted, or replace
    it as current: both are applied."""
    out = status
    i = 0
    while i < len(changes):
        change = changes[i]
        if i + 1 < len(changes) and out.current_attempt is None and _start_then_end(change, changes[i + 1]):
            end = changes[i + 1]
            change = (end[0], end[1], end[2], change[2], end[4])  # the end, of the attempt the start describes
            i += 1
        out = apply_change(out, change) or out
        i += 1
    return None if out is status else out


def _start_then_end(start: WireChange, end: WireChange) -> bool:
    """Whether ``end`` is the end of the attempt ``start`` started, told by the same silo."""
    return (start[0] == "s" and end[0] == "e" and start[1] == end[1]
            and start[2][:4] == end[3][:4] and start[2][5] == end[3][5])


def _event_row(event: AttemptEvent) -> list[Any]:
    return [event.run_id, event.attempt, event.occurrence, datetime_to_us(event.scheduled_for),
            datetime_to_us(event.started_at), TRIGGERED_FROM in event.job.metadata]


def _stand_in(metadata: dict[str, str]) -> ScheduledJob:
    at = us_to_datetime(0)
    return ScheduledJob("-", None, Target("actor", "-"), at, None, metadata, None, None, None, None, at)


#: The job of an attempt a status change describes: a stand-in holding only what the status
#: reads of it (whether it is a triggered run). Made once: one a change was ~40% of its cost.
_PLAIN, _TRIGGERED = _stand_in({}), _stand_in({TRIGGERED_FROM: "-"})


def _event(row: list[Any]) -> AttemptEvent:
    """The attempt a row describes (its job a stand-in: ``_PLAIN`` or ``_TRIGGERED``)."""
    return AttemptEvent(_TRIGGERED if row[5] else _PLAIN, row[0], row[1], row[2], us_to_datetime(row[3]),
                        us_to_datetime(row[4]))


def _us(moment: datetime | None) -> int | None:
    return None if moment is None else datetime_to_us(moment)


def _dt(us: int | None) -> datetime | None:
    return None if us is None else us_to_datetime(us)


class StatusSender:
    """A silo's status changes on their way to the buckets' owners (``cluster.named.owned``):
    gathered for ``LINGER_S`` (longer in a burst, up to ``MAX_LINGER_S``), then sent in the
    order they came, one send at a time (so a start never overtakes its end), one call per
    owner and ``SEND_CHUNK`` changes. A change whose call was lost may have been applied: it
    is not sent again (an end counted twice would be worse than one missing, as a silo's death
    loses its queued changes too); one no owner took is sent again."""

    def __init__(self, send: Callable[[list[tuple[str, Any]]], Awaitable[list[Any]]]) -> None:
        self._send = send
        self._queue: list[tuple[str, Any]] = []
        self._open: set[str] = set()  # jobs whose start is queued and its end not yet
        self._task: asyncio.Task[None] | None = None

    def add(self, key: str, job_id: str, change: WireChange) -> None:
        self._queue.append((key, (key, job_id, change)))
        if change[0] == "s":
            self._open.add(job_id)
        elif change[0] == "e":
            self._open.discard(job_id)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def flush(self) -> None:
        """Return once every change queued so far was sent."""
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _run(self) -> None:
        tries: dict[int, int] = {}
        loop = asyncio.get_running_loop()
        while self._queue:
            await self._linger(loop)
            batch, self._queue = self._queue, []
            self._open.clear()
            if len(batch) > SEND_CHUNK:
                # A name's changes kept together in one call, where they can (in order: stable).
                batch.sort(key=lambda item: item[0])
            try:
                answers = []
                for first in range(0, len(batch), SEND_CHUNK):
                    answers += await self._send(batch[first:first + SEND_CHUNK])
            except Exception as exc:  # never: the router answers every item
                log.warning("status changes not sent", extra={"changes": len(batch), "error": repr(exc)})
                continue
            again = []
            for item, answer in zip(batch, answers, strict=True):
                if answer[0] == "unavailable" and tries.get(id(item), 0) < SEND_TRIES:
                    tries[id(item)] = tries.get(id(item), 0) + 1
                    again.append(item)
                elif answer[0] not in ("ok", "unavailable"):
                    log.debug("status change may be lost", extra={"key": item[0], "answer": answer[0]})
            self._queue[:0] = again

    async def _linger(self, loop: asyncio.AbstractEventLoop) -> None:
        """Wait ``LINGER_S``, and on, up to ``MAX_LINGER_S``, while each linger brings a burst's
        ``BURST_CHANGES`` or a burst's attempts queued as started have not all ended.

        A burst's starts come in the first tens of ms, their ends once the handlers answer: sent
        between them, the starts made the owners record a thousand changes a call (~115 ms of
        their event loop, measured on Azurite) while they were still firing their own burst."""
        since, queued = loop.time(), 0
        while True:
            await asyncio.sleep(LINGER_S)
            grew, queued = len(self._queue) - queued, len(self._queue)
            if loop.time() - since + LINGER_S > MAX_LINGER_S:
                return
            if grew < BURST_CHANGES and not (queued >= BURST_CHANGES and self._open):
                return
