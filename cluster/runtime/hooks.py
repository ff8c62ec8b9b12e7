"""Extension points of the silo: features built on jobs (named jobs, flows) watch attempts here.

A hook sees every attempt a silo starts and ends, and every shard it loads or adopts. Hooks run
inside the silo's event loop, so they must be quick for jobs that are not theirs (check
``event.job`` first and return) and must not raise: an exception is logged and ignored, because
a feature's bookkeeping must never stop jobs from firing.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from cluster.model.clock import Clock
from cluster.model.jobs import ScheduledJob
from cluster.model.options import ClusterOptions
from storage import Transient, Unavailable

if TYPE_CHECKING:
    from cluster.runtime.lease import Lease
    from cluster.runtime.logowner import Owner
    from storage import Store

log = logging.getLogger("timeshard.silo")


@dataclass(frozen=True)
class AttemptEvent:
    """One attempt of one job occurrence, as a hook sees it."""

    job: ScheduledJob
    run_id: str
    attempt: int  # 1 on the first attempt of an occurrence
    occurrence: int
    scheduled_for: datetime  # virtual time of this attempt
    started_at: datetime  # wall clock
    shard: str = ""  # the shard whose copy of the job this attempt runs ("" where no shard is known)


@dataclass(frozen=True)
class AttemptEnd:
    """How an attempt ended and what happens next."""

    succeeded: bool
    error: str | None
    ended_at: datetime
    retry_at: datetime | None  # the failure policy's next attempt, None if it gave up
    next_occurrence: datetime | None  # set when the occurrence ended and the job recurs
    finished: bool  # the job has nothing left: removed from its shard
    excluded: int = 0  # occurrences its exclusions skipped on the way to the next one
    skipped: int = 0  # occurrences its overlap policy skipped as this one ended (they came due meanwhile)


class SiloHooks:
    """Base class: override what you need. Every method is awaited by the silo."""

    #: When set, the silo offers ``interested`` only jobs whose metadata holds one of these keys,
    #: and skips decoding the rest of every other job (the common case on the hot path).
    metadata_keys: tuple[str, ...] | None = None

    #: How long an ``admit`` that said True holds, in seconds (None: for as long as the attempt
    #: waits). Counted on the silo's monotonic clock from before ``admit`` was asked; an attempt
    #: not sent by then is put back unstarted and asked again. What makes ``admit`` refuse (a
    #: flow's cancel record) then holds for every attempt sent once that long has passed since it
    #: landed, however long the silo stalled between an admission and its send.
    admit_holds_s: float | None = None

    def interested(self, job: ScheduledJob) -> bool:
        """Whether this hook wants to hear about ``job`` at all; the silo skips it otherwise.

        Checked on the hot path for every attempt: answer from the job's metadata, no I/O.
        """
        return True

    async def admit(self, event: AttemptEvent) -> bool | None:
        """Whether this attempt may start at all; False cancels the job's occurrence instead,
        None defers it (not started, asked again a little later).

        For definitions that a newer one replaced (a named job's older generation): a stray
        copy must not run once the replacing call has returned. Called on the firing path for
        every attempt of a job the hook is interested in: answer from memory when it can.
        """
        return True

    def jobs_landed(self, shard: str, items: Sequence[Sequence[Any]]) -> None:
        """A schedule call's jobs are durable in ``shard``: ``(job id, due µs, packed job, ...)``.

        Called for every job a client adds, plain ones too, so it must be quick (no I/O, no
        decoding of a job that is not the hook's); work it wants done goes to a task of its own.
        """

    async def attempt_started(self, event: AttemptEvent) -> None:
        """An attempt is about to be delivered to its handler."""

    async def attempt_ended(self, event: AttemptEvent, end: AttemptEnd) -> None:
        """An attempt's outcome is durable in its shard."""

    async def attempt_unsure(self, event: AttemptEvent, end: AttemptEnd | None = None) -> None:
        """An attempt ended, but whether its outcome is durable is unknown: the write's answer
        was lost and the shard was dropped or taken back from its log. The shard's log tells: a
        job still there runs again (and is told of again); a job gone from it ended as its
        ``remove`` there says, and ``attempt_ended`` will not come for this attempt.

        A compaction folds that ``remove`` into a snapshot, which holds only live jobs: the log
        then says the job ended, not how. ``end`` is how the attempt ended whatever the write
        did, where the silo knows it (a one-shot job's success: its only write is its removal);
        None where the write was to decide it (a retry or the end, by the failure policy)."""

    async def attempt_staged(self, event: AttemptEvent, target: str, since: datetime) -> None:
        """An attempt is due but its target (``target``, e.g. ``actor mailer@app``) does not exist
        yet: it waits, staged, since ``since`` (see ``cluster.runtime.staging``). Told once per run."""

    async def job_cancelled(self, job_id: str) -> None:
        """A job was cancelled through ``try_cancel_job``."""

    async def shard_loaded(self, jobs: Sequence[tuple[ScheduledJob, int, int]], adopted: bool) -> None:
        """A shard was loaded (``adopted``: taken from a failed silo); ``(job, occurrence, attempts)``."""

    async def close(self) -> None:
        """The silo stops."""

    async def maintain(self) -> None:
        """The silo's adoption round ran: take over what the feature owns (its registry buckets)."""

    def service(self, method: str) -> Callable[..., Awaitable[Any]] | None:
        """The call ``method`` this feature answers through ``Silo.feature_call``; None: not its own."""
        return None


async def call_hooks(hooks: Sequence[SiloHooks], method: str, *args: Any) -> None:
    """Call ``method`` on each hook; a hook that raises is logged, never allowed to stop firing.

    A store fault is the weather, not a bug: logged as a warning (the hook's next call, or the
    next maintenance round, tries again), as the silo's own rounds log theirs.
    """
    for hook in hooks:
        try:
            await getattr(hook, method)(*args)
        except (Unavailable, Transient) as exc:
            log.warning("silo hook met a store fault", extra={"hook": type(hook).__name__, "method": method,
                                                              "error": repr(exc)})
        except Exception:
            log.exception("silo hook failed", extra={"hook": type(hook).__name__, "method": method})


async def admits(hooks: Sequence[SiloHooks], event: AttemptEvent) -> bool | None:
    """Whether every hook admits ``event``: True, False, or None when one raised or deferred it
    (undecided).

    Undecided fails closed: an ``admit`` is the fence that keeps a superseded definition (a
    named job overwritten meanwhile) from running, so a hook that cannot tell must not let it.
    """
    for hook in hooks:
        try:
            verdict = await hook.admit(event)
        except (Unavailable, Transient) as exc:
            log.warning("silo hook met a store fault", extra={"hook": type(hook).__name__, "method": "admit",
                                                              "error": repr(exc)})
            return None
        except Exception:
            log.exception("silo hook failed", extra={"hook": type(hook).__name__, "method": "admit"})
            return None
        if verdict is None:
            return None
        if not verdict:
            return False
    return True


def tell_landed(hooks: Sequence[SiloHooks], shard: str, items: Sequence[Sequence[Any]]) -> None:
    """Tell each hook that ``items`` landed in ``shard``; a hook that raises is logged, never fails the call."""
    for hook in hooks:
        try:
            hook.jobs_landed(shard, items)
        except Exception:
            log.exception("silo hook failed", extra={"hook": type(hook).__name__, "method": "jobs_landed"})


class SiloView(Protocol):
    """What a hook may see of the silo it runs in: who it is now, its options, its own shards."""

    @property
    def owner(self) -> str:
        """This incarnation's owner tag (``<silo id>#<incarnation>``); changes on a rejoin."""
        ...

    @property
    def options(self) -> ClusterOptions: ...

    @property
    def clock(self) -> Clock:
        """The store's time as this silo reads it: what its due times and attempt times are on."""
        ...

    @property
    def log_owner(self) -> Owner:
        """This silo as the owner and judge of logs (``cluster.runtime.logowner``), as its shards use it."""
        ...

    @property
    def lease(self) -> Lease:
        """This silo's firing lease: memory of what it owns answers while it holds."""
        ...

    async def schedule(self, jobs: Sequence[tuple[str, int, bytes]], suspects: Sequence[str] = (),
                       settled: Sequence[str] = ()) -> list[str]:
        """Durably add ``(id, due_us, packed job)`` items to this silo's shards; their shards.
        ``suspects``: silos that may hold an earlier try of these jobs, ``settled`` holders that
        need no wait (see ``Silo.schedule``)."""
        ...

    async def cancel(self, shard_base: str, job_id: str) -> tuple[str, Any]:
        """Cancel ``job_id`` of ``shard_base`` as a client's cancel sent to this silo does
        (``Silo.cancel``): ("cancelled" | "absent" | "moved" | "not_owner", info)."""
        ...

    def holds_shard(self, shard_base: str) -> bool:
        """Whether this silo holds shard ``shard_base`` now (a cancel there is made here, no claim needed)."""
        ...

    async def call_peer(self, silo_id: str, method: str, *args: Any) -> Any:
        """One call to silo ``silo_id`` (this one too), never tried elsewhere: a feature asking
        the owner of its log (``feature_call``). ``SiloRefused``: nothing done; ``SiloLost``: unknown."""
        ...


HooksFactory = Callable[["Store", SiloView], Sequence[SiloHooks]]
"""Builds a silo's hooks inside its event loop, once the silo has joined. Passed to ``Silo`` by
the code that wires the cluster (features register there), never looked up by the runtime."""
