"""Extension points of the silo: features built on jobs (named jobs, flows) watch attempts here.

A hook sees every attempt a silo starts and ends, and every shard it loads or adopts. Hooks run
inside the silo's event loop, so they must be quick for jobs that are not theirs (check
``event.job`` first and return) and must not raise: an exception is logged and ignored, because
a feature's bookkeeping must never stop jobs from firing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from cluster.jobs import ScheduledJob

if TYPE_CHECKING:
    from storage import Store


@dataclass(frozen=True)
class AttemptEvent:
    """One attempt of one job occurrence, as a hook sees it."""

    job: ScheduledJob
    run_id: str
    attempt: int  # 1 on the first attempt of an occurrence
    occurrence: int
    scheduled_for: datetime  # virtual time of this attempt
    started_at: datetime  # wall clock


@dataclass(frozen=True)
class AttemptEnd:
    """How an attempt ended and what happens next."""

    succeeded: bool
    error: str | None
    ended_at: datetime
    retry_at: datetime | None  # the failure policy's next attempt, None if it gave up
    next_occurrence: datetime | None  # set when the occurrence ended and the job recurs
    finished: bool  # the job has nothing left: removed from its shard


class SiloHooks:
    """Base class: override what you need. Every method is awaited by the silo."""

    def interested(self, job: ScheduledJob) -> bool:
        """Whether this hook wants to hear about ``job`` at all; the silo skips it otherwise.

        Checked on the hot path for every attempt: answer from the job's metadata, no I/O.
        """
        return True

    async def admit(self, event: AttemptEvent) -> bool:
        """Whether this attempt may start at all; False cancels the job's occurrence instead.

        For definitions that a newer one replaced (a named job's older generation): a stray
        copy must not run once the replacing call has returned.
        """
        return True

    async def attempt_started(self, event: AttemptEvent) -> None:
        """An attempt is about to be delivered to its handler."""

    async def attempt_ended(self, event: AttemptEvent, end: AttemptEnd) -> None:
        """An attempt's outcome is durable in its shard."""

    async def job_cancelled(self, job_id: str) -> None:
        """A job was cancelled through ``try_cancel_job``."""

    async def shard_loaded(self, jobs: Sequence[tuple[ScheduledJob, int, int]], adopted: bool) -> None:
        """A shard was loaded (``adopted``: taken from a failed silo); ``(job, occurrence, attempts)``."""

    async def close(self) -> None:
        """The silo stops."""


def default_hooks(store: Store, silo: Any) -> list[SiloHooks]:
    """The hooks every silo runs; features register theirs here."""
    from cluster.named_hooks import NamedJobHooks  # imports this module: import at call time
    from cluster.flowlog import FlowHooks

    return [NamedJobHooks(store, silo), FlowHooks(store, silo)]
