"""What one attempt of a job knows about itself, and how it travels to a handler actor.

The silo sends a batch of attempts to a handler actor in one Ray call. Each attempt travels as a
msgpack-friendly tuple (``Attempt``) holding the job's packed shard-log record, so a batch costs
one serialisation and the handler decodes only what it runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from cluster.model.jobs import ScheduledJob
from cluster.model.wire import unpack, us_to_datetime

# The handler actor method a silo calls with a batch of attempts (``JobHandler`` defines it).
DELIVER = "timeshard_deliver"
# The error type of an attempt its handler stopped because the job's next occurrence came due
# (``overlap="cancel_other"``): recorded as superseded, never retried.
OVERLAP_CANCELLED = "OverlapCancelled"


@dataclass(frozen=True)
class JobContext:
    """One attempt of a job, as its handler sees it.

    ``run_id`` is new for every attempt; ``dequeue_count`` is 1 on the first attempt of an
    occurrence and counts up on each retry; ``scheduled_for`` is the virtual time the attempt
    was due (not the wall clock it started at); ``occurrence`` numbers a recurring job's fires
    from 1. Handlers must be idempotent: at-least-once delivery can repeat an attempt after a
    crash, and ``(job.id, occurrence)`` names the unit of work. ``started`` is when the attempt
    actually started, by the handler host's wall clock (None where nobody noted it); kept as
    µs and turned into a datetime only when read.
    """

    job: ScheduledJob
    run_id: str
    dequeue_count: int
    scheduled_for: datetime
    occurrence: int
    started_us: int | None = None

    @property
    def started(self) -> datetime | None:
        """When this attempt started (the handler host's wall clock), or None if not noted."""
        return None if self.started_us is None else us_to_datetime(self.started_us)


class Attempt(NamedTuple):
    """The wire form of a ``JobContext``: cheap to pickle across Ray, decoded by the handler."""

    job: bytes  # msgpack of ScheduledJob.to_wire()
    run_id: str
    dequeue_count: int
    scheduled_for_us: int
    occurrence: int

    def context(self, memo: dict[Any, Any] | None = None, started_us: int | None = None) -> JobContext:
        return JobContext(
            job=ScheduledJob.from_wire(unpack(self.job), memo),
            run_id=self.run_id,
            dequeue_count=self.dequeue_count,
            scheduled_for=us_to_datetime(self.scheduled_for_us),
            occurrence=self.occurrence,
            started_us=started_us,
        )


class Outcome(NamedTuple):
    """What a handler reports for one attempt: ``error`` is None on success."""

    run_id: str
    error: str | None = None
    error_type: str | None = None
    timed_out: bool = False
    refused: bool = False  # not started: the silo's lease had run out (it may be a zombie)

    @property
    def succeeded(self) -> bool:
        return self.error is None and not self.refused


class JobFailed(Exception):
    """A handler's failure as the silo sees it: the exception's type name and message.

    A callable failure policy receives this as ``exc``; the original exception stayed in the
    handler's process, since arbitrary exceptions do not always survive pickling.
    """

    def __init__(self, error_type: str, message: str, *, timed_out: bool = False) -> None:
        super().__init__(f"{error_type}: {message}")
        self.error_type = error_type
        self.message = message
        self.timed_out = timed_out
