"""The silo side of named jobs: the generation fence, and each name's status as attempts start and end.

Every silo runs ``NamedJobHooks``. For a job that is not named it returns at once (one dict
lookup). A named job's attempt starts only once the job is *cleared* — its registry entry seen
pointing at it, read ahead of its due time (``cluster.named.fence``, where the argument is) — so
the firing path makes no registry write and, in the common case, no read. Its status changes
are queued and group-committed per name in the background (``cluster.named.recorder``), each
applied only while the entry still points at that job: an older generation never touches the
status of a newer one.

With names kept in registry buckets (``named_registry="buckets"``, the default; issue 25
point 5) the clearance is asked of the bucket's owner and the status changes are sent to it
(``cluster.named.owned``); this silo also owns its share of the buckets and answers for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from cluster.model.jobs import ScheduledJob
from cluster.model.trigger import TRIGGERED_FROM, triggered_from
from cluster.model.waiting import wait_bounded
from cluster.model.wire import datetime_to_us, timedelta_to_us, unpack
from cluster.named.attempts import (
    StatusSender,
    ended,
    ended_change,
    interrupted,
    interrupted_change,
    retiring,
    staged,
    staged_change,
    started,
    started_change,
)
from cluster.named.bucket import BUCKETS
from cluster.named.buckets import Buckets
from cluster.named.fence import ADMIT_WAIT_S, Clearance
from cluster.named.owned import Cancels, OwnerCalls
from cluster.named.recorder import StatusRecorder
from cluster.named.registry import NAMED_MARK, REPLACES_MARK, Entry, JobStatus, Retired, update_entry
from cluster.named.routed import Routed
from cluster.runtime.hooks import AttemptEnd, AttemptEvent, SiloHooks, SiloView
from cluster.runtime.shardlog import creator_of, window_of
from storage import Store

log = logging.getLogger("timeshard.silo")

__all__ = ["NamedJobHooks", "started", "ended", "interrupted", "staged"]

_CACHE_LIMIT = 10_000
CLOSE_FLUSH_S = 5.0  # a stopping silo's wait for its status changes to reach their owners
_MARK = NAMED_MARK.encode()


class NamedJobHooks(SiloHooks):
    """The generation fence (``cluster.named.fence``) and the status of named jobs (``cluster.named.recorder``)."""

    def __init__(self, store: Store, silo: SiloView) -> None:
        self._store = store
        self._silo = silo
        # The last entry written per key: usually still current (this silo is the only writer
        # while it owns the job), which saves a read per update.
        self._known: dict[str, Entry] = {}
        self.recorder = StatusRecorder(store, self._known)
        # The registry buckets this silo owns, when names are kept in them (the default, issue 25 point 5).
        self.buckets: Buckets | None = None
        self.owned: OwnerCalls | None = None
        self.sender: StatusSender | None = None
        if silo.options.named_buckets:
            self.buckets = Buckets(store, silo.log_owner, silo.lease, BUCKETS, self._schedule,
                                   interval_s=silo.options.adoption_interval.total_seconds(), notify=self._ask_to_take)
            self.owned = OwnerCalls(self.buckets, Cancels(self._cancel_here, self._cancel_route, self._cancel_there))
            self.routed = Routed(store, _Peers(silo), BUCKETS)
            self.sender = StatusSender(lambda items: self.routed.ask_many("named_status", items))
            self.clearance = Clearance(store, ask=self._ask_owner)
        else:
            self.clearance = Clearance(store)
        self._handing: asyncio.Task[int] | None = None  # the hand-over under way: one at a time (``maintain``)
        self._asking: set[asyncio.Task[Any]] = set()  # peers asked to take buckets now

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
            return await (self._admit_triggered(event, key) if self.buckets is None
                          else self._admit_triggered_at_owner(event, key))
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
                                                                  retire=retiring(e.retire, run))) is not None

    async def _admit_triggered_at_owner(self, event: AttemptEvent, key: str) -> bool | None:
        """``_admit_triggered`` with the names in buckets: the owner of ``key``'s bucket records
        the run as running and lists it among the jobs the entry retires, in one append, while
        the entry names the generation it ran from (``OwnerCalls.triggers``); None: no answer now."""
        assert self.sender is not None
        with contextlib.suppress(asyncio.TimeoutError):  # this run's own earlier changes first, if they go soon
            await wait_bounded(self.sender.flush(), ADMIT_WAIT_S)
        run = Retired(event.job.id, event.shard, datetime_to_us(event.job.due)).row() if event.shard else None
        asked = (key, triggered_from(event.job), run, started_change(event, self._silo.owner))
        try:
            answer = await wait_bounded(self.routed.ask("named_trigger", key, asked), ADMIT_WAIT_S)
        except asyncio.TimeoutError:
            return None
        return True if answer[0] == "ok" else False if answer[0] == "refused" else None

    async def attempt_started(self, event: AttemptEvent) -> None:
        key = event.job.metadata.get(NAMED_MARK)
        if key is not None and TRIGGERED_FROM not in event.job.metadata:
            owner = self._silo.owner
            if self.sender is not None:
                self.sender.add(key, event.job.id, started_change(event, owner))
                return
            self.recorder.add(key, event.job.id, lambda e: replace(e, status=started(e.status, event, owner)),
                              start=True)

    async def attempt_ended(self, event: AttemptEvent, end: AttemptEnd) -> None:
        key = event.job.metadata.get(NAMED_MARK)
        if key is not None:
            owner, size = self._silo.owner, self._silo.options.history_size
            # A triggered run over for good has nothing left for a put or delete to cancel.
            done = event.job.id if end.finished and TRIGGERED_FROM in event.job.metadata else None
            if self.sender is not None:
                self.sender.add(key, triggered_from(event.job), ended_change(event, end, owner, size))
            else:
                self.recorder.add(key, triggered_from(event.job),
                                  lambda e: replace(e, status=ended(e.status, event, end, owner, size),
                                                    retire=tuple(r for r in e.retire if r.job_id != done)))
            if end.finished:
                self.clearance.forget(event.job.id)

    async def attempt_staged(self, event: AttemptEvent, target: str, since: datetime) -> None:
        key = event.job.metadata.get(NAMED_MARK)
        if key is not None and self.sender is not None:
            self.sender.add(key, triggered_from(event.job), staged_change(target, since))
        elif key is not None:
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
            if adopted and self.sender is not None:
                self.sender.add(key, triggered_from(job), interrupted_change(owner, size, kind))
            elif adopted:
                self.recorder.add(key, triggered_from(job), _interrupting(owner, size, kind))

    async def close(self) -> None:
        if self.sender is not None:  # this silo's last status changes, while their owners may still answer
            with contextlib.suppress(Exception):
                await wait_bounded(self.sender.flush(), CLOSE_FLUSH_S)
        if self._handing is not None:  # what it waits for ends below, or it gives up: released all the same
            await asyncio.gather(self._handing, return_exceptions=True)
        if self.buckets is not None:
            await self.buckets.release_all()  # peers take them at once
        await self.clearance.close()
        await self.recorder.close()
        if self.sender is not None:
            await self.sender.close()

    async def maintain(self) -> None:
        if self.buckets is not None:
            await self.buckets.take()
            if self.buckets.excess and (self._handing is None or self._handing.done()):
                # In the background: it waits for the puts and appends under way on its buckets.
                self._handing = asyncio.get_running_loop().create_task(self._hand_over())

    async def _hand_over(self) -> int:
        assert self.buckets is not None
        try:
            return await self.buckets.hand_over()
        except Exception as exc:  # a store fault: the next round tries again
            log.warning("registry buckets not handed over", extra={"error": repr(exc)})
            return 0

    async def _take_now(self, asked_by: str) -> int:
        """Peer ``asked_by`` handed buckets over: take this silo's share of them now, not at its next round."""
        assert self.buckets is not None
        took = await self.buckets.take()
        log.info("registry buckets taken when asked", extra={"by": asked_by, "took": took})
        return took

    def _ask_to_take(self, silo_ids: list[str]) -> None:
        """Ask ``silo_ids`` to take buckets now (``named_take``), without waiting; a call that
        fails leaves them to the peers' next maintenance round."""
        for silo_id in silo_ids:
            task = asyncio.get_running_loop().create_task(self._silo.call_peer(silo_id, "feature_call", "named_take",
                                                                             self._silo.owner))
            self._asking.add(task)
            task.add_done_callback(_quietly(self._asking))

    def service(self, method: str) -> Callable[..., Awaitable[Any]] | None:
        if method == "named_take" and self.buckets is not None:
            return self._take_now
        return None if self.owned is None else self.owned.service(method)

    async def flush_status(self) -> None:
        """Return once every status change queued here so far was written (or sent to its owner)."""
        if self.sender is not None:
            await self.sender.flush()
        else:
            await self.recorder.flush()

    async def _ask_owner(self, key: str, job_id: str) -> str | bool | None:
        """The verdict of ``key``'s bucket owner on ``job_id`` (``OwnerCalls.verdicts``); None: no answer now."""
        try:
            # Bounded: an attempt waits in its batch, and an owner that is gone and not yet
            # replaced (its lease running out) would hold every due named job up until then.
            answer = await wait_bounded(self.routed.ask("named_verdicts", key, (key, job_id)), ADMIT_WAIT_S)
        except asyncio.TimeoutError:
            return None
        if answer[0] == "ok":
            return str(answer[1])
        return False if answer[0] == "refused" else None

    async def _cancel_here(self, shard: str, job_id: str) -> tuple[str, Any]:
        return await self._silo.cancel(shard, job_id)

    def _cancel_route(self, shard: str) -> str | None:
        """The peer that created ``shard`` if this silo does not hold it; else None (here)."""
        if self._silo.holds_shard(shard):
            return None
        creator = creator_of(shard)
        return None if creator is None or creator[0] == self._silo.owner.rpartition("#")[0] else creator[0]

    async def _cancel_there(self, silo_id: str, items: list[tuple[str, str]]) -> list[Any]:
        return list(await self._silo.call_peer(silo_id, "feature_call", "named_cancels", items))

    async def _schedule(self, items: Sequence[tuple[str, int, bytes]]) -> list[str]:
        return await self._silo.schedule(items)

    async def _update(self, key: str, job_id: str, change: Any) -> Entry | None:
        entry = await update_entry(self._store, key, job_id, change, self._known.pop(key, None))
        if entry is not None:
            if len(self._known) >= _CACHE_LIMIT:
                self._known.clear()
            self._known[key] = entry
        return entry


class _Peers:
    """Calls to peer silos (and to this one) as ``Routed`` makes them, through the silo."""

    def __init__(self, silo: SiloView) -> None:
        self._silo = silo

    async def _at_silo(self, silo_id: str, method: str, *args: Any) -> Any:
        return await self._silo.call_peer(silo_id, method, *args)


def _quietly(tasks: set[asyncio.Task[Any]]) -> Callable[[asyncio.Task[Any]], None]:
    """A done callback that forgets a task and its outcome (a failed notice costs only a wait)."""
    def done(task: asyncio.Task[Any]) -> None:
        tasks.discard(task)
        if not task.cancelled():
            task.exception()
    return done


def _interrupting(owner: str, size: int, triggered: bool) -> Callable[[Entry], Entry | None]:
    return lambda e: _with_status(e, interrupted(e.status, owner, size, triggered))


def _with_status(entry: Entry, status: JobStatus | None) -> Entry | None:
    return None if status is None else replace(entry, status=status)
