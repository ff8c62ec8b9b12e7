"""Firing: the timer loop that takes due jobs off the queue and delivers them to their handlers.

Due jobs leave in batches, grouped by target: one call per target per batch, and at most
``CALLS_PER_TARGET`` calls in flight to one handler. Every attempt is fenced twice before it
goes: its shard must still be ours, and our lease must hold (a paused silo fires nothing). And
before it goes, its shard's metadata says that it is firing, so that an adopter can tell whether
its owner died mid-firing (see ``cluster.runtime.quarantine``). A shard that runs isolated sends
its due jobs through a lane of its own: one batch at a time, each named in the shard's mark.

Jobs leave up to ``dispatch_ahead`` before they are due (issue 15, point 2): the loop wakes once
the earliest job is due within half the window and takes every job due within all of it, so a
steady stream still travels in batches of half a window's jobs. A ``JobHandler`` waits for each
job's due time and starts it then, never earlier (the argument is in ``cluster.model.ahead``);
an actor that cannot wait is sent each job at its due time, the silo waiting. Until a job
starts, a cancel withdraws it from its handler (``withdraw``); the handler checks the sender's
lease again at the start, so a silo paused after sending gets nothing started on its behalf.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from cluster.model.ahead import Ahead, monotonic_domain
from cluster.model.attempt import Outcome
from cluster.model.clock import Clock
from cluster.model.jobs import Target
from cluster.model.limits import code_allowed
from cluster.model.occurrences import next_occurrence
from cluster.model.options import ClusterOptions
from cluster.model.wire import datetime_to_us, timedelta_to_us, us_to_datetime
from cluster.runtime.hooks import SiloHooks, admits, call_hooks
from cluster.runtime.lease import Lease
from cluster.runtime.membership import Identity
from cluster.runtime.metrics import SiloMetrics
from cluster.runtime.outcomes import Outcomes
from cluster.runtime.quarantine import Quarantine
from cluster.runtime.queue import JobQueue
from cluster.runtime.runs import JobDecoder, Run, RunTable
from cluster.runtime.shard import Shard
from cluster.runtime.shardlog import ATTEMPTS, CANCELLED, DUE, OCCURRENCE, OWNER, SCHEDULED, remove_op
from cluster.runtime.staging import Staging
from cluster.runtime.transport import TargetAbsent, Transport
from storage import StorageError

log = logging.getLogger("timeshard.silo")

# Ray calls in flight to one handler actor at once; more due jobs wait and go as one batch.
CALLS_PER_TARGET = 4
# An isolated batch whose firing mark could not be written waits this long (µs) to try again.
ISOLATED_RETRY_US = 1_000_000


#: How long an attempt whose admission could not be decided (a hook raised) waits to be asked again.
ADMIT_RETRY_US = 1_000_000
#: How long a cancel waits for a handler to answer a withdraw (s) before it waits for the run to end.
WITHDRAW_TIMEOUT = 5.0


def interested_hooks(hooks: Sequence[SiloHooks], run: Run) -> tuple[SiloHooks, ...]:
    """The hooks interested in ``run``'s job; the whole job is decoded only if one may be."""
    metadata = run.head.metadata
    offered = [h for h in hooks if h.metadata_keys is None or any(k in metadata for k in h.metadata_keys)]
    return tuple(h for h in offered if h.interested(run.job)) if offered else ()


def describe_target(target: Target) -> str:
    """``target`` as an operator reads it: ``actor mailer`` or ``actor mailer@app`` (its Ray namespace)."""
    where = f"@{target.namespace}" if target.namespace else ""
    return f"{target.kind} {target.name}{where}"
def _paused(run: Run) -> bool:
    state = run.shard.state
    return state is not None and bool(state.paused) and run.job_id in state.paused


def failed(runs: Sequence[Run], error: str, exc: BaseException) -> list[Outcome]:
    """A failed outcome for each of ``runs``: what a silo records when it could not deliver them."""
    return [Outcome(run.run_id, error, type(exc).__name__) for run in runs]


class Firing:
    """Takes due runs off the queue and delivers them, within the silo's concurrency limit."""

    def __init__(self, options: ClusterOptions, clock: Clock, me: Identity, queue: JobQueue[list[Any]], runs: RunTable,
                 lease: Lease, hooks: list[SiloHooks], transport: Transport, staging: Staging, outcomes: Outcomes,
                 quarantine: Quarantine, decode: JobDecoder, metrics: SiloMetrics) -> None:
        self._options = options
        self._clock = clock
        self._me = me
        self._queue = queue
        self._runs = runs
        self._lease = lease
        self._hooks = hooks  # filled in once the silo has joined; the list object is shared
        self._transport = transport
        self._staging = staging
        self._outcomes = outcomes
        self._quarantine = quarantine
        self._metrics = metrics
        self._decode = decode
        self._calls: dict[str, int] = {}  # calls in flight per target
        self._waiting: dict[str, list[Run]] = {}  # due runs waiting for a target's call slot
        self._lanes: dict[Shard, list[tuple[int, str, list[Any]]]] = {}  # isolated shards' due jobs
        self._ahead_us = timedelta_to_us(options.dispatch_ahead)
        self._domain = monotonic_domain()  # whose monotonic clock our ``Ahead.sent_mono`` is on

    @property
    def busy(self) -> bool:
        """Whether attempts are in flight or due jobs wait in an isolated shard's lane."""
        return bool(self._runs.inflight or self._lanes)

    async def run(self) -> None:
        """The fire loop: wake as the next job comes within half the ahead window, take a batch, dispatch it; forever."""
        while True:
            await self._queue.wait_due(ahead=self._ahead_us // 2)
            if not self._lease.valid:
                # Our heartbeat is stale (paused, cut off from the store): peers may have adopted
                # our shards. Fire nothing until a heartbeat proves we still own them.
                await self._lease.wait_renewed()
                continue
            room = self._runs.room
            if room <= 0:
                await self._runs.wait_for_room()
                continue
            # A batch at a time, so the first due jobs leave before the rest are even decoded.
            batch = self.take_due(min(room, self._options.max_batch))
            if batch:
                self.dispatch(batch)
                await asyncio.sleep(0)

    def take_due(self, limit: int) -> list[tuple[int, str, list[Any]]]:
        """Up to ``limit`` queued ``(due, id, entry)`` due within the ahead window, earliest first."""
        return self._queue.pop_due(self._clock.now_us() + self._ahead_us, limit=limit)

    def dispatch(self, batch: list[tuple[int, str, list[Any]]]) -> None:
        """Start runs for ``(due, id, entry)`` items just taken off the queue."""
        groups: dict[str, list[Run]] = defaultdict(list)
        now = self._clock.now_us()
        owner = self._me.owner  # once per batch: it names every run id of the batch
        # Once per batch: whether a job without metadata interests no hook (the common case).
        keyed = all(h.metadata_keys is not None for h in self._hooks)
        start = self._runs.start
        for item in batch:
            due_us, job_id, entry = item
            shard: Shard = entry[OWNER]
            if shard.lost:
                continue
            if shard.state is not None and shard.state.paused and job_id in shard.state.paused:
                continue  # paused (by an operator) since it was queued: resuming queues it again
            if shard.leaving is not None:  # being handed over: its next owner starts it
                shard.leaving.append(item)
                continue
            if self._quarantine.isolates(shard):
                self._to_lane(shard, item)
                continue
            run = self._new_run(due_us, job_id, entry, owner, keyed)
            if run is None:
                continue  # unreadable: kept in its shard, never run
            ttl_us = run.head.ttl_us
            if ttl_us is not None and now > ttl_us:
                self._runs.spawn(self._outcomes.expire(run))
                continue
            start(run)
            groups[run.head.target.routing_key].append(run)
        for key, runs in groups.items():
            self.send(key, runs)
        # Another copy of an id taken waits aside: queued now if this one did not start.
        self._queue.settle_aside(job_id for _, job_id, _ in batch)

    def _new_run(self, due_us: int, job_id: str, entry: list[Any], owner: str | None = None,
                 keyed: bool = False) -> Run | None:
        """A run of ``entry``'s job, or None if its job cannot be decoded (then it is kept, unrun).

        Only the job's head is decoded here (see ``JobDecoder.head``): the whole job waits
        until a hook, a failure or the next occurrence needs it.
        """
        head = self._decode.head_of(job_id, entry)
        if head is None:
            return None
        run = Run(job_id, entry, head, self._decode, self._runs.new_run_id(owner or self._me.owner), due_us,
                  entry[ATTEMPTS])
        if self._hooks and not (keyed and not head.metadata):
            run.hooks = interested_hooks(self._hooks, run)
        return run

    def _to_lane(self, shard: Shard, item: tuple[int, str, list[Any]]) -> None:
        lane = self._lanes.get(shard)
        if lane is None:
            lane = self._lanes[shard] = []
            self._runs.spawn(self._drain_lane(shard, lane))
        lane.append(item)

    async def _drain_lane(self, shard: Shard, lane: list[tuple[int, str, list[Any]]]) -> None:
        """Fire an isolated shard's due jobs one batch at a time, each batch named in its mark."""
        oldest = False  # the least suspected jobs first, then whatever is due first, in turn
        try:
            while True:
                while lane:
                    await self._fire_isolated(shard, self._quarantine.next_batch(shard, lane, self._runs.room,
                                                                                 oldest=oldest))
                    oldest = not oldest
                await self._quarantine.settle(shard)
                if not lane:
                    return
        finally:
            del self._lanes[shard]
            for due_us, job_id, entry in lane:  # only after a failure: queue what is left again
                self._queue.push(job_id, due_us, entry)

    async def _fire_isolated(self, shard: Shard, batch: list[tuple[int, str, list[Any]]]) -> None:
        runs: list[Run] = []
        for due_us, job_id, entry in batch:
            state = shard.state
            if (shard.lost or state is None or state.live.get(job_id) is not entry or job_id in state.paused
                    or self._quarantine.parked(shard, job_id)):
                continue  # lost, cancelled or replaced while it waited, or paused or parked meanwhile
            # Due when it was queued for, as outside quarantine (never before its job): an attempt
            # a hook deferred is due when it is asked again. Due at its job's time, a run deferred
            # for good (its named put in doubt) was in flight tens of seconds past its due time,
            # time and again (simulator seed 366044, every kind: in a quarantined shard).
            run = self._new_run(max(due_us, entry[DUE]), job_id, entry)
            if run is None:
                continue  # unreadable: kept in its shard, never run
            run.isolated = True
            if run.head.ttl_us is not None and self._clock.now_us() > run.head.ttl_us:
                await self._outcomes.expire(run)
                continue
            self._runs.start(run)
            runs.append(run)
        if not runs:
            return
        try:
            await self._quarantine.isolate(runs)
        except StorageError as exc:
            self._runs.release_all(runs)
            if not shard.lost:
                # Not sent unnamed: a death during them would count against the shard, not the jobs.
                log.warning("could not mark an isolated batch; trying again later",
                            extra={"jobs": len(runs), "error": repr(exc)})
                retry_us = self._clock.now_us() + ISOLATED_RETRY_US
                for run in runs:
                    self._queue.push(run.job_id, retry_us, run.entry)
            return
        cancelled = [run for run in runs if run.cancelled]
        if cancelled:
            self._runs.release_all(cancelled)
            runs = [run for run in runs if not run.cancelled]
        groups: dict[str, list[Run]] = defaultdict(list)
        for run in runs:
            groups[run.head.target.routing_key].append(run)
        await asyncio.gather(*(self._deliver(group) for group in groups.values()))
        for run in runs:
            if run.finished and not shard.lost:
                self._quarantine.survived(run)

    def send(self, key: str, runs: list[Run]) -> None:
        """Deliver ``runs`` to their target, at most ``CALLS_PER_TARGET`` calls at a time.

        Jobs falling due while a target's calls are in flight wait and leave together when one
        returns (as group commit does for appends): one job per call when the handler keeps
        up, ever larger batches when it does not, so a steady stream of jobs never costs more
        calls than the handler can answer.
        """
        waiting = self._waiting.setdefault(key, [])
        waiting.extend(runs)
        step = self._options.max_batch
        while waiting and self._calls.get(key, 0) < CALLS_PER_TARGET:
            batch, waiting[:] = waiting[:step], waiting[step:]
            self._calls[key] = self._calls.get(key, 0) + 1
            self._runs.spawn(self._deliver_and_release(key, batch))
        if not waiting:
            del self._waiting[key]

    async def retry_staged(self) -> None:
        """Send staged runs whose target appeared; fail those that waited too long."""
        ready, expired = await self._staging.take_due()
        for runs in ready:
            alone = [r for r in runs if r.isolated]
            self._runs.release_all(alone)  # back to their lane: sent in named batches
            for run in alone:
                self._to_lane(run.shard, (run.due_us, run.job_id, run.entry))
            if len(alone) < len(runs):
                self.send(runs[0].target.routing_key, [r for r in runs if not r.isolated])
        for run, why in expired:
            self._runs.spawn(self._outcomes.complete(run, Outcome(run.run_id, why, "TargetAbsent")))

    async def _deliver_and_release(self, key: str, runs: list[Run]) -> None:
        try:
            await self._deliver(runs)
        finally:
            self._calls[key] -= 1
            if not self._calls[key]:
                del self._calls[key]
            if key in self._waiting:
                self.send(key, [])

    async def _deliver(self, runs: list[Run]) -> None:
        target = runs[0].target
        try:
            self._check_code(target)
            handle = await self._transport.resolve(target)  # off the event loop unless cached
        except TargetAbsent as exc:
            fresh = [run for run in runs if run.hooks and not run.staged_since]
            self._staging.stage(runs, str(exc))
            for run in fresh:  # told once per run, not on every look for its target
                await call_hooks(run.hooks, "attempt_staged", run.event(), describe_target(target),
                                 us_to_datetime(run.staged_since))
            return
        except Exception as exc:  # a grain class that cannot be activated: a failed attempt, not a stuck run
            log.error("target cannot be activated", extra={"target": target.name, "error": repr(exc)})
            await self._outcomes.complete_batch(runs, failed(runs, f"target cannot be activated: {exc}", exc))
            return
        if self._ahead_us and not self._transport.waits(handle):
            await self._send_when_due(target, handle, runs)
        else:
            await self._send(target, handle, runs)

    async def _send_when_due(self, target: Target, handle: Any, runs: list[Run]) -> None:
        """For a handler that cannot wait: each run sent at its due time, the silo waiting."""
        runs = sorted(runs, key=lambda run: run.due_us)
        sends: list[asyncio.Future[None]] = []
        try:
            while runs:
                await self._until(runs[0].due_us)
                now = self._clock.now_us()
                due = 0
                while due < len(runs) and runs[due].due_us <= now:
                    due += 1
                sends.append(asyncio.ensure_future(self._send(target, handle, runs[:due])))
                runs = runs[due:]
        finally:
            if sends:
                await asyncio.gather(*sends)

    async def _until(self, due_us: int) -> None:
        """Return once the silo's clock reads ``due_us`` or later."""
        # Slept for exactly what is left, read again: a timer may fire early, a clock may be re-measured.
        while (left := due_us - self._clock.now_us()) > 0:  # noqa: ASYNC110
            await asyncio.sleep(left / 1e6)

    async def _send(self, target: Target, handle: Any, runs: list[Run]) -> None:
        if any(run.hooks for run in runs):
            now = self._clock.now_us()
            for run in runs:
                run.started_us = max(now, run.due_us)  # hooks record "running since" before the call goes out
            runs = await self._admitted(runs)
            for run in runs:
                if run.hooks:
                    await call_hooks(run.hooks, "attempt_started", run.event())
        await self._quarantine.cover(runs)
        runs = await self._still_owned(runs)
        cancelled = [run for run in runs if run.cancelled]
        if cancelled:
            # Cancelled while it waited to be sent: it never starts (the cancel waits for this).
            self._runs.release_all(cancelled)
            runs = [run for run in runs if not run.cancelled]
        paused = [run for run in runs if _paused(run)]
        if paused:
            # Paused while it waited to be sent: it does not start; resuming queues it again.
            self._runs.release_all(paused)
            runs = [run for run in runs if not _paused(run)]
        runs = self._admission_held(runs)
        if not runs:
            return
        # No await between the lease check above and the call below: a silo paused here cannot
        # send stale work later. The handler also refuses work past the lease's wall-clock end,
        # which covers a pause that lands after the check, and checks it again at each start;
        # the end it gets allows for its clock running behind the store's (``handler_end``).
        timeout = self._options.handler_timeout.total_seconds()
        lease_end = self._lease.handler_end()
        started = self._clock.now_us()
        latest = started
        stops: dict[str, float] | None = None
        for run in runs:
            due = run.due_us
            run.started_us = started if started > due else due
            if due > latest:
                latest = due
            if run.head.overlap == "cancel_other":
                stops = self._stop_at(run, stops)
        self._metrics.lateness.observe_many([max(0, started - run.due_us) / 1e6 for run in runs])
        self._metrics.fired.inc(len(runs))
        ahead = None
        if latest > started:  # some are not due yet: the handler waits for them, withdrawable till then
            # sent_us read before sent_mono: store time at sent_mono is at least sent_us (see cluster.model.ahead)
            ahead = Ahead(started, self._clock.monotonic(), self._domain, self._lease.until)
            sent = (handle, lease_end)
            for run in runs:
                run.sent_ahead = sent
        for run in runs:
            run.delivering = True  # what a pause waits for when it cannot withdraw the run
        try:
            attempts = [r.attempt() for r in runs]
            if stops:  # only then: transports and handlers of jobs without it are called as before
                outcomes = await self._transport.deliver(target, handle, attempts, timeout, lease_end, ahead, stops)
            else:
                outcomes = await self._transport.deliver(target, handle, attempts, timeout, lease_end, ahead)
        except Exception as exc:  # a transport's own bug must not hold these runs forever
            log.exception("delivery failed", extra={"target": target.name, "jobs": len(runs)})
            outcomes = failed(runs, f"delivery failed: {exc!r}", exc)
        finally:
            for run in runs:
                run.answered()
        await self._outcomes.complete_batch(runs, outcomes)

    @staticmethod
    def _stop_at(run: Run, stops: dict[str, float] | None) -> dict[str, float] | None:
        """Note when ``run`` (overlap cancel_other) is to be stopped: as its job's next occurrence comes due."""
        job, entry = run.job, run.entry
        nxt = next_occurrence(job.schedule, us_to_datetime(entry[SCHEDULED]), entry[OCCURRENCE], job.repeats, job.ttl)
        if nxt is None:
            return stops  # the last occurrence: nothing comes due to replace it
        run.stop_us = datetime_to_us(nxt)
        if stops is None:
            stops = {}
        stops[run.run_id] = run.stop_us / 1e6
        return stops

    async def withdraw(self, run: Run) -> bool:
        """Make sure ``run``, sent to wait for its due time, does not start; True if it had not.

        The handler drops it if it still waits there, and refuses it if its batch has not even
        arrived yet. False when it started already, or when the handler did not answer: the
        caller must then treat it as started (it waits for its outcome).
        """
        return bool(await self.withdraw_answer(run))

    async def withdraw_answer(self, run: Run) -> bool | None:
        """As ``withdraw``, telling a run that started (False) from a withdraw without an answer
        (None): the run may not have started yet, and may still start."""
        sent = run.sent_ahead
        if sent is None:
            return False
        handle, lease_end = sent
        dropped = await self._transport.withdraw(handle, [run.run_id], lease_end, WITHDRAW_TIMEOUT)
        return None if dropped is None else run.run_id in dropped

    def _check_code(self, target: Target) -> None:
        if target.cls_path is not None and not code_allowed(target.cls_path, self._options.allowed_code_prefixes):
            raise PermissionError(f"grain class {target.cls_path!r} is outside allowed_code_prefixes "
                                  f"{list(self._options.allowed_code_prefixes or ())}")

    async def _still_owned(self, runs: list[Run]) -> list[Run]:
        """Wait out a lapsed lease (paused, cut off), then keep the runs whose shard is ours."""
        await self._lease.wait_valid()
        # Held by this incarnation: not lost, not released by a stop, not left from before a rejoin.
        held: list[Run] = []
        gone: list[Run] = []
        for run in runs:
            (held if not run.shard.lost and run.shard.meta.owner == self._me.owner else gone).append(run)
        if gone:
            self._runs.release_all(gone)
        return held

    def _ask_again(self, run: Run) -> None:
        """Put ``run`` back unstarted, to ask its hooks again a little later, never before it is due."""
        self._runs.release(run)
        if not run.shard.lost and not run.cancelled:
            self._queue.push(run.job_id, max(run.due_us, self._clock.now_us() + ADMIT_RETRY_US), run.entry)

    def _admission_held(self, runs: list[Run]) -> list[Run]:
        """The runs whose admission still holds; the others are asked again, unstarted.

        Checked with no await before the send: a silo stalled after admitting a flow's step (a
        slow store answer, a suspended VM) sent it after the flow's cancel returned (the cancel
        knew no shard of the step's job, its writer stalled before confirming it)."""
        now = self._clock.monotonic()
        lapsed = [run for run in runs if run.admitted_until is not None and now > run.admitted_until]
        if not lapsed:
            return runs
        for run in lapsed:
            log.info("attempt's admission lapsed before its send: asked again", extra={"job": run.job_id})
            self._ask_again(run)
        self._runs.notify_room()
        return [run for run in runs if run.admitted_until is None or now <= run.admitted_until]

    async def _admitted(self, runs: list[Run]) -> list[Run]:
        """The runs every hook admits; the others are cancelled, durably, without starting."""
        admitted = []
        for run in runs:
            asked = self._clock.monotonic()  # before the hooks read: their answer is at most this fresh
            verdict = True if not run.hooks else await admits(run.hooks, run.event())
            if verdict:
                holds = [h.admit_holds_s for h in run.hooks if h.admit_holds_s is not None]
                run.admitted_until = asked + min(holds) if holds else None
                admitted.append(run)
                continue
            if verdict is None:
                # Undecided: not started, asked again a little later (fail closed, never stuck),
                # and never before its due time: a run sent ahead is asked before it is due.
                self._ask_again(run)
                continue
            log.info("attempt refused: superseded definition", extra={"job": run.job_id})
            try:
                await run.shard.write([remove_op(run.job_id, run.entry[OCCURRENCE], CANCELLED)])
            except StorageError as exc:
                # Asked again too, so its removal is tried again: only released, it stayed live in
                # the shard and queued nowhere, stuck until the shard was next loaded (simulator
                # seed 1574 with named jobs: an overwritten generation's run, the write refused).
                log.warning("could not cancel a refused attempt", extra={"job": run.job_id, "error": repr(exc)})
                self._ask_again(run)
                continue
            self._runs.release(run)
        self._runs.notify_room()
        return admitted
