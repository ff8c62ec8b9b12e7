"""Firing: the timer loop that takes due jobs off the queue and delivers them to their handlers.

Due jobs leave in batches, grouped by target: one call per target per batch, and at most
``CALLS_PER_TARGET`` calls in flight to one handler. Every attempt is fenced twice before it
goes: its shard must still be ours, and our lease must hold (a paused silo fires nothing).
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from typing import Any

from cluster.model.attempt import Outcome
from cluster.model.clock import Clock
from cluster.model.options import ClusterOptions
from cluster.model.wire import datetime_to_us
from cluster.runtime.hooks import SiloHooks, admits, call_hooks
from cluster.runtime.lease import Lease
from cluster.runtime.membership import Identity
from cluster.runtime.metrics import SiloMetrics
from cluster.runtime.outcomes import Outcomes
from cluster.runtime.queue import JobQueue
from cluster.runtime.runs import JobDecoder, Run, RunTable
from cluster.runtime.shard import Shard
from cluster.runtime.shardlog import ATTEMPTS, CANCELLED, JOB, OCCURRENCE, OWNER, remove_op
from cluster.runtime.staging import Staging
from cluster.runtime.transport import TargetAbsent, Transport
from storage import StorageError

log = logging.getLogger("timeshard.silo")

# Ray calls in flight to one handler actor at once; more due jobs wait and go as one batch.
CALLS_PER_TARGET = 4


class Firing:
    """Takes due runs off the queue and delivers them, within the silo's concurrency limit."""

    def __init__(self, options: ClusterOptions, clock: Clock, me: Identity, queue: JobQueue[list[Any]], runs: RunTable,
                 lease: Lease, hooks: list[SiloHooks], transport: Transport, staging: Staging, outcomes: Outcomes,
                 decode: JobDecoder, metrics: SiloMetrics) -> None:
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
        self._metrics = metrics
        self._decode = decode
        self._calls: dict[str, int] = {}  # calls in flight per target
        self._waiting: dict[str, list[Run]] = {}  # due runs waiting for a target's call slot

    async def run(self) -> None:
        """The fire loop: wake at the next due time, take a batch, dispatch it; forever."""
        while True:
            await self._queue.wait_due()
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
            batch = self._queue.pop_due(limit=min(room, self._options.max_batch))
            if batch:
                self.dispatch(batch)
                await asyncio.sleep(0)

    def dispatch(self, batch: list[tuple[int, str, list[Any]]]) -> None:
        """Start runs for ``(due, id, entry)`` items just taken off the queue."""
        groups: dict[str, list[Run]] = defaultdict(list)
        now = self._clock.now_us()
        for due_us, job_id, entry in batch:
            shard: Shard = entry[OWNER]
            if shard.lost:
                continue
            job = self._decode(entry[JOB])
            run = Run(job_id, entry, job, self._runs.new_run_id(self._me.owner), due_us, entry[ATTEMPTS],
                      hooks=tuple(h for h in self._hooks if h.interested(job)) if self._hooks else ())
            if job.ttl is not None and now > datetime_to_us(job.ttl):
                self._runs.spawn(self._outcomes.expire(run))
                continue
            self._runs.start(run)
            groups[job.target.routing_key].append(run)
        for key, runs in groups.items():
            self.send(key, runs)

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

    def retry_staged(self) -> None:
        """Send staged runs whose target appeared; fail those that waited too long."""
        ready, expired = self._staging.take_due()
        for runs in ready:
            self.send(runs[0].job.target.routing_key, runs)
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
        target = runs[0].job.target
        try:
            handle = self._transport.resolve(target)
        except TargetAbsent as exc:
            self._staging.stage(runs, str(exc))
            return
        if any(run.hooks for run in runs):
            now = self._clock.now_us()
            for run in runs:
                run.started_us = now  # hooks record "running since" before the call goes out
            runs = await self._admitted(runs)
            for run in runs:
                if run.hooks:
                    await call_hooks(run.hooks, "attempt_started", run.event())
        runs = await self._still_owned(runs)
        if not runs:
            return
        # No await between the lease check above and the call below: a silo paused here cannot
        # send stale work later. The handler also refuses work past the lease's wall-clock end,
        # which covers a pause that lands after the check.
        timeout = self._options.handler_timeout.total_seconds()
        lease_end = self._lease.wall_end()
        started = self._clock.now_us()
        for run in runs:
            run.started_us = started
            self._metrics.lateness.observe(max(0, started - run.due_us) / 1e6)
        self._metrics.fired.inc(len(runs))
        outcomes = await self._transport.deliver(target, handle, [r.attempt() for r in runs], timeout, lease_end)
        await self._outcomes.complete_batch(runs, outcomes)

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

    async def _admitted(self, runs: list[Run]) -> list[Run]:
        """The runs every hook admits; the others are cancelled, durably, without starting."""
        admitted = []
        for run in runs:
            if not run.hooks or await admits(run.hooks, run.event()):
                admitted.append(run)
                continue
            log.info("attempt refused: superseded definition", extra={"job": run.job_id})
            try:
                await run.shard.write([remove_op(run.job_id, run.entry[OCCURRENCE], CANCELLED)])
            except StorageError as exc:
                log.warning("could not cancel a refused attempt", extra={"job": run.job_id, "error": repr(exc)})
            self._runs.release(run)
        self._runs.notify_room()
        return admitted
