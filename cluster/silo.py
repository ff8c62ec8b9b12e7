"""The silo: owns shards, keeps their due jobs in a timer queue, and fires them into handler actors.

A silo is an async Ray actor (see ``cluster.cluster``), but this module is plain asyncio: the
class below only touches Ray to call handler actors. Its life:

1. join the membership table as a new incarnation; heartbeat;
2. write new jobs into its own shard for each due-time window (group-committed appends);
3. load a shard — read, fold, queue — once its window starts within the lookahead;
4. claim orphaned shards (owner dead, stale or gone) by metadata CAS, sealed on adoption;
5. fire due jobs: one Ray call per target per batch, within a concurrency limit;
6. write each outcome: remove, retry per failure policy, or the next occurrence;
7. on stop, finish in-flight work and release its shards.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import random
import time
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import ray

from cluster.context import Attempt, JobContext, JobFailed, Outcome
from cluster.errors import SiloStopping
from cluster.hooks import AttemptEnd, AttemptEvent, SiloHooks, default_hooks
from cluster.delivery import ActorDirectory, TargetAbsent
from cluster.jobs import ScheduledJob
from cluster.membership import DEAD, LEAVING, SILO_PREFIX, HeartbeatWatch, Member, Membership, parse_owner
from cluster.metrics import SiloMetrics
from cluster.occurrences import Misfire, catch_up, next_occurrence
from cluster.options import ClusterOptions
from cluster.queue import JobQueue, wall_clock_us
from cluster.shard import Shard
from cluster.shardlog import (
    ATTEMPTS,
    CANCELLED,
    DUE,
    EXHAUSTED,
    EXPIRED,
    JOB,
    MOVED,
    OCCURRENCE,
    OWNER,
    SCHEDULED,
    SEALED,
    SHARD_PREFIX,
    SUCCEEDED,
    ShardMeta,
    ShardState,
    add_op,
    remove_op,
    retry_op,
    shard_name,
    window_of,
)
from cluster.wire import datetime_to_us, unpack, us_to_datetime
from storage import Fenced, LogFull, LogOptions, NotFound, StorageError, Store, list_logs, open_store, read_log

log = logging.getLogger("timeshard.silo")

RELEASED = "-"  # the owner of a shard released by a graceful stop
# Shards one silo claims per adoption round at first; doubled each round that leaves orphans, so
# a lone survivor of a mass failure takes the load on step by step instead of all at once.
INITIAL_CLAIM_BUDGET = 4
MAX_CLAIM_BUDGET = 4096
# Ray calls in flight to one handler actor at once; more due jobs wait and go as one batch.
CALLS_PER_TARGET = 4
DELIVER = "timeshard_deliver"


def _us(td: timedelta) -> int:
    return td // timedelta(microseconds=1)


def _now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass
class Run:
    """One attempt in flight: the job, where it lives, and what its handler must be told."""

    job_id: str
    entry: list[Any]  # the shard's live entry (see cluster.shardlog)
    job: ScheduledJob
    run_id: str
    due_us: int
    attempts_before: int
    staged_since: int = 0
    started_us: int = 0
    cancelled: bool = False
    hooks: tuple[SiloHooks, ...] = ()  # the hooks interested in this job
    _done: asyncio.Event | None = None  # made only when a cancel waits for the run to end
    finished: bool = False

    def finish(self) -> None:
        self.finished = True
        if self._done is not None:
            self._done.set()

    async def wait_finished(self) -> None:
        if not self.finished:
            if self._done is None:
                self._done = asyncio.Event()
            await self._done.wait()

    @property
    def shard(self) -> Shard:
        return self.entry[OWNER]

    @property
    def number(self) -> int:
        """Which attempt of its occurrence this is (1 = first): fixed when the run starts."""
        return self.attempts_before + 1

    def attempt(self) -> Attempt:
        return Attempt(self.entry[JOB], self.run_id, self.number, self.due_us, self.entry[OCCURRENCE])

    def context(self) -> JobContext:
        return JobContext(self.job, self.run_id, self.number, us_to_datetime(self.due_us), self.entry[OCCURRENCE])

    def event(self) -> AttemptEvent:
        return AttemptEvent(self.job, self.run_id, self.number, self.entry[OCCURRENCE], us_to_datetime(self.due_us),
                            us_to_datetime(self.started_us))


class Silo:
    """One silo's state and loops. Methods named without ``_`` are its Ray-callable API."""

    def __init__(self, silo_id: str, store_url: str, options: ClusterOptions, namespace: str) -> None:
        self.silo_id = silo_id
        self.namespace = namespace
        self.options = options
        self._store_url = store_url
        self._store: Store | None = None
        self._member: Member | None = None
        self._shards: dict[str, Shard] = {}
        self._open: dict[int, Shard] = {}  # window start -> this incarnation's open shard
        self._opening: dict[int, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._counter = 0
        self._queue: JobQueue[list[Any]] = JobQueue()
        self._inflight: dict[str, Run] = {}
        self._staged: dict[str, Run] = {}
        self._capacity = asyncio.Event()
        self._directory = ActorDirectory(namespace)
        self._calls: dict[str, int] = {}  # Ray calls in flight per target
        self._waiting: dict[str, list[Run]] = {}  # due runs waiting for a target's call slot
        self._memo: dict[Any, Any] = {}  # decoded schedules and policies, shared by every job
        # Run ids: unique per attempt without a urandom call per job (uuid4 costs more than firing).
        self._run_prefix = uuid.uuid4().hex[:10]
        self._run_seq = itertools.count(1)
        self._log_options = LogOptions(
            linger=options.group_commit_linger.total_seconds(), rotate_blocks=options.max_blocks
        )
        self._tasks: list[asyncio.Task[None]] = []
        self._background: set[asyncio.Task[Any]] = set()
        self._stopping = False
        self._poisoned: dict[str, str] = {}
        self._watch = HeartbeatWatch()
        self._lease_until = 0.0  # monotonic: fire only while our membership row is fresh
        self._lease = asyncio.Event()
        self._claim_budget = INITIAL_CLAIM_BUDGET
        self._peers: dict[str, Any] = {}
        self._hooks: list[SiloHooks] = []
        self._started_at = wall_clock_us()
        self.metrics = SiloMetrics(silo_id)
        self._ready = asyncio.get_running_loop().create_task(self._start())

    # -- lifecycle -----------------------------------------------------------------------

    async def _start(self) -> None:
        self._store = open_store(self._store_url)
        node = ""
        with contextlib.suppress(Exception):
            node = ray.get_runtime_context().get_node_id()
        began = time.monotonic()
        self._member = await Membership(self._store).join(self.silo_id, wall_clock_us(), node=node, pid=os.getpid())
        self._renew_lease(began)
        self._hooks = default_hooks(self._store, self)
        log.info("silo joined", extra={"silo": self.owner})
        await self._adopt_orphans()
        self._tasks = [
            asyncio.create_task(self._fire_loop(), name="fire"),
            asyncio.create_task(self._heartbeat_loop(), name="heartbeat"),
            asyncio.create_task(self._maintenance_loop(), name="maintenance"),
        ]

    @property
    def owner(self) -> str:
        assert self._member is not None
        return self._member.owner

    async def ready(self) -> dict[str, Any]:
        """Wait until the silo has joined and claimed its orphans; returns who it is."""
        await self._ready
        return {"silo_id": self.silo_id, "owner": self.owner, "pid": os.getpid()}

    async def stop(self, timeout: float = 30.0) -> dict[str, Any]:
        """Stop gracefully: no new work, finish what is in flight, release every shard."""
        await self._ready
        self._stopping = True
        for task in self._tasks:
            task.cancel()
        deadline = time.monotonic() + timeout
        while self._inflight and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        released = 0
        for shard in list(self._shards.values()):
            with contextlib.suppress(StorageError):
                await shard.set_meta(shard.meta.with_owner(RELEASED))
                released += 1
        assert self._store is not None and self._member is not None
        with contextlib.suppress(StorageError):
            await Membership(self._store).update(self._member, status=DEAD)
        for silo_id in list(self._peers):
            with contextlib.suppress(Exception):
                self._peers[silo_id].adopt_now.remote()  # hand the released shards over at once
        await self._call_hooks(self._hooks, "close")
        await self._store.close()
        log.info("silo stopped", extra={"silo": self.owner, "released": released})
        return {"released": released, "unfinished": len(self._inflight)}

    # -- scheduling ------------------------------------------------------------------------

    async def schedule(self, jobs: Sequence[tuple[str, int, bytes]]) -> list[str]:
        """Durably add ``(id, due_us, packed job)`` items; returns each job's shard, in order."""
        await self._ready
        if self._stopping:
            raise SiloStopping(f"silo {self.silo_id} is stopping")
        by_window: dict[int, list[int]] = defaultdict(list)
        duration = _us(self.options.shard_duration)
        for i, (_, due_us, _) in enumerate(jobs):
            by_window[window_of(due_us, duration)].append(i)
        names: list[str] = [""] * len(jobs)

        async def add(window: int, indexes: list[int]) -> None:
            ops = [add_op(jobs[i][0], jobs[i][1], jobs[i][2]) for i in indexes]
            shard = await self._write_to_window(window, ops)
            for i in indexes:
                names[i] = shard.base

        await asyncio.gather(*(add(w, ix) for w, ix in by_window.items()))
        self.metrics.scheduled.inc(len(jobs))
        return names

    async def _write_to_window(self, window: int, ops: list[list[Any]], *, queue: bool = True) -> Shard:
        """Append ADD ops to this silo's open shard for ``window`` and queue them if loaded."""
        while True:
            shard = await self._open_shard(window)
            try:
                async with shard.gate.shared():
                    if shard.lost or self._shards.get(shard.base) is not shard:
                        continue  # drained and deleted (or lost) while we waited: open a fresh one
                    started = time.perf_counter()
                    entries = await shard.write(ops)
                    self.metrics.append_latency.observe(time.perf_counter() - started)
                    for op, entry in zip(ops, entries if queue else ()):
                        self._queue.push(op[1], entry[DUE], entry)
                return shard
            except LogFull:
                self._seal(shard)  # full while dormant: later adds go to a fresh shard
            except Fenced:
                self._drop(shard, "fenced while adding jobs")

    async def _open_shard(self, window: int) -> Shard:
        shard = self._open.get(window)
        if shard is not None:
            return shard
        async with self._opening[window]:
            shard = self._open.get(window)
            if shard is not None:
                return shard
            assert self._store is not None and self._member is not None
            self._counter += 1
            base = shard_name(window, f"{self.silo_id}.{self._member.incarnation}", self._counter)
            meta = ShardMeta(self.owner, window, window + _us(self.options.shard_duration))
            shard = await Shard.create(self._store, base, meta, self._log_options)
            if window - _us(self.options.lookahead) > wall_clock_us():
                shard.state = None  # beyond the lookahead: dormant, nothing held per job
            self._shards[base] = shard
            self._open[window] = shard
            self.metrics.shards_owned.set(len(self._shards))
            return shard

    def _seal(self, shard: Shard) -> None:
        for window, open_shard in list(self._open.items()):
            if open_shard is shard:
                del self._open[window]

    # -- cancelling ------------------------------------------------------------------------

    async def cancel(self, shard_base: str, job_id: str) -> tuple[str, str | None]:
        """Cancel ``job_id`` in ``shard_base``: ("cancelled" | "absent" | "moved" | "not_owner", info)."""
        await self._ready
        shard = self._shards.get(shard_base)
        if shard is None:
            shard = await self._claim_for_cancel(shard_base)
            if shard is None:
                return "not_owner", await self._owner_of(shard_base)
        run = self._inflight.get(job_id) or self._staged.get(job_id)
        if run is not None and run.shard is shard:
            return await self._cancel_run(run)
        async with shard.gate.exclusive():
            state = shard.state
            if state is None:  # dormant: fold the log to look, without loading the shard
                assert self._store is not None
                state = ShardState().replay((await read_log(self._store, shard.base)).records())
            entry = state.live.get(job_id)
            if entry is None:
                moved = state.moved.get(job_id)
                return ("moved", moved) if moved else ("absent", None)
            self._queue.cancel(job_id)
            await shard.write([remove_op(job_id, entry[OCCURRENCE], CANCELLED)])
        await self._call_hooks(self._hooks, "job_cancelled", job_id)
        return "cancelled", None

    async def shards_from(self, window_us: int) -> list[tuple[str, str]]:
        """``(shard, owner)`` of every shard whose window starts at or after ``window_us``."""
        await self._ready
        assert self._store is not None
        return [
            (head.base, head.metadata.get("owner", RELEASED))
            for head in await list_logs(self._store, SHARD_PREFIX)
            if int(head.metadata.get("window_start", "0")) >= window_us
        ]

    async def _cancel_run(self, run: Run) -> tuple[str, str | None]:
        run.cancelled = True
        self._staged.pop(run.job_id, None)
        await run.shard.write([remove_op(run.job_id, run.entry[OCCURRENCE], CANCELLED)])
        # The attempt already started and runs to its end; wait so that nothing it was about to
        # write (a retry, the next occurrence) outlives this cancel.
        await run.wait_finished()
        await self._call_hooks(self._hooks, "job_cancelled", run.job_id)
        return "cancelled", None

    async def _owner_of(self, shard_base: str) -> str | None:
        assert self._store is not None
        for head in await list_logs(self._store, shard_base):
            if head.base == shard_base:
                return head.metadata.get("owner")
        return None

    async def _claim_for_cancel(self, shard_base: str) -> Shard | None:
        """Claim an orphaned shard that a cancel needs, even beyond the lookahead."""
        assert self._store is not None
        members = await Membership(self._store).members()
        for head in await list_logs(self._store, shard_base):
            if head.base == shard_base and self._is_orphan(head.metadata, members):
                return await self._claim(head.base, ShardMeta.from_metadata(head.metadata))
        return None

    # -- firing ----------------------------------------------------------------------------

    async def _fire_loop(self) -> None:
        limit = self.options.max_concurrency
        while True:
            await self._queue.wait_due()
            if time.monotonic() > self._lease_until:
                # Our heartbeat is stale (paused, cut off from the store): peers may have adopted
                # our shards. Fire nothing until a heartbeat proves we still own them.
                await self._lease_renewed()
                continue
            room = limit - len(self._inflight)
            if room <= 0:
                self._capacity.clear()
                await self._capacity.wait()
                continue
            # A batch at a time, so the first due jobs leave before the rest are even decoded.
            batch = self._queue.pop_due(limit=min(room, self.options.max_batch))
            if batch:
                self._dispatch(batch)
                await asyncio.sleep(0)

    def _dispatch(self, batch: list[tuple[int, str, list[Any]]]) -> None:
        groups: dict[str, list[Run]] = defaultdict(list)
        now = wall_clock_us()
        for due_us, job_id, entry in batch:
            shard: Shard = entry[OWNER]
            if shard.lost:
                continue
            if len(self._memo) > 10_000:
                self._memo.clear()  # bounded: a job per distinct schedule must not grow it forever
            job = ScheduledJob.from_wire(unpack(entry[JOB]), self._memo)
            run = Run(job_id, entry, job, f"{self._run_prefix}{next(self._run_seq):x}@{self.owner}", due_us, entry[ATTEMPTS],
                      hooks=tuple(h for h in self._hooks if h.interested(job)) if self._hooks else ())
            if job.ttl is not None and now > datetime_to_us(job.ttl):
                self._spawn(self._expire(run))
                continue
            self._inflight[job_id] = run
            groups[job.target.routing_key].append(run)
        for key, runs in groups.items():
            self._send(key, runs)

    def _send(self, key: str, runs: list[Run]) -> None:
        """Deliver ``runs`` to their target, at most ``CALLS_PER_TARGET`` Ray calls at a time.

        Jobs falling due while a target's calls are in flight wait and leave together when one
        returns (as group commit does for appends): one job per call when the handler keeps
        up, ever larger batches when it does not, so a steady stream of jobs never costs more
        Ray calls than the handler can answer.
        """
        waiting = self._waiting.setdefault(key, [])
        waiting.extend(runs)
        step = self.options.max_batch
        while waiting and self._calls.get(key, 0) < CALLS_PER_TARGET:
            batch, waiting[:] = waiting[:step], waiting[step:]
            self._calls[key] = self._calls.get(key, 0) + 1
            self._spawn(self._deliver_and_release(key, batch))
        if not waiting:
            del self._waiting[key]

    async def _deliver_and_release(self, key: str, runs: list[Run]) -> None:
        try:
            await self._deliver(runs)
        finally:
            self._calls[key] -= 1
            if not self._calls[key]:
                del self._calls[key]
            if key in self._waiting:
                self._send(key, [])

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _deliver(self, runs: list[Run]) -> None:
        target = runs[0].job.target
        try:
            handle = self._directory.resolve(target)
        except TargetAbsent as exc:
            self._stage(runs, str(exc))
            return
        if any(run.hooks for run in runs):
            now = wall_clock_us()
            for run in runs:
                run.started_us = now  # hooks record "running since" before the call goes out
            runs = await self._admitted(runs)
            for run in runs:
                if run.hooks:
                    await self._call_hooks(run.hooks, "attempt_started", run.event())
        runs = await self._still_owned(runs)
        if not runs:
            return
        # No await between the lease check above and the call below: a silo paused here cannot
        # send stale work later. The handler also refuses work past the lease's wall-clock end,
        # which covers a pause that lands after the check.
        timeout = self.options.handler_timeout.total_seconds()
        lease_end = time.time() + (self._lease_until - time.monotonic())
        started = wall_clock_us()
        for run in runs:
            run.started_us = started
            self.metrics.lateness.observe(max(0, started - run.due_us) / 1e6)
        self.metrics.fired.inc(len(runs))
        try:
            ref = getattr(handle, DELIVER).remote([tuple(r.attempt()) for r in runs], timeout, lease_end)
            outcomes = await asyncio.wait_for(ref, timeout + 10)
        except AttributeError:
            outcomes = await self._deliver_one_by_one(handle, runs, timeout)
        except asyncio.TimeoutError:
            outcomes = [Outcome(r.run_id, f"no answer within {timeout} s", "TimeoutError", True) for r in runs]
        except ray.exceptions.RayActorError as exc:
            self._directory.forget(target)
            outcomes = [Outcome(r.run_id, f"handler actor failed: {exc}", type(exc).__name__) for r in runs]
        except Exception as exc:  # a serialization or Ray fault: the attempts failed, not the silo
            outcomes = [Outcome(r.run_id, repr(exc), type(exc).__name__) for r in runs]
        await self._complete_batch(runs, [Outcome(*o) for o in outcomes])

    async def _complete_batch(self, runs: list[Run], outcomes: list[Outcome]) -> None:
        # The common case — a one-shot job that succeeded, nobody hooked — needs only a REMOVE:
        # one write per shard for the whole batch. Everything else goes through _complete.
        simple: dict[Shard, list[Run]] = defaultdict(list)
        rest: list[tuple[Run, Outcome]] = []
        for run, outcome in zip(runs, outcomes):
            if (outcome.succeeded and run.job.schedule is None and not run.hooks and not run.cancelled
                    and run.job.retry_policy.strategy != "always"):
                simple[run.shard].append(run)
            else:
                rest.append((run, outcome))
        succeeded = sum(len(v) for v in simple.values())
        if succeeded:
            self.metrics.succeeded.inc(succeeded)
        await asyncio.gather(*(self._remove_succeeded(shard, rs) for shard, rs in simple.items()),
                             *(self._complete(run, outcome) for run, outcome in rest))

    async def _remove_succeeded(self, shard: Shard, runs: list[Run]) -> None:
        delay = 0.2
        try:
            while live := [r for r in runs if not r.cancelled]:
                try:
                    await shard.write([remove_op(r.job_id, r.entry[OCCURRENCE], SUCCEEDED) for r in live])
                    return
                except Fenced:
                    self._drop(shard, "fenced while writing outcomes")
                    return
                except StorageError as exc:
                    if self._stopping:
                        log.error("outcomes not recorded at stop; the jobs will run again", extra={"jobs": len(live)})
                        return
                    log.warning("outcomes not durable yet, retrying", extra={"jobs": len(live), "error": repr(exc)})
                    await asyncio.sleep(delay)
                    delay = min(2 * delay, 5.0)
        finally:
            for run in runs:
                if self._inflight.get(run.job_id) is run:
                    del self._inflight[run.job_id]
                run.finish()
            self._capacity.set()

    async def _still_owned(self, runs: list[Run]) -> list[Run]:
        """Wait out an expired lease (paused, cut off), then keep the runs whose shard is ours."""
        while time.monotonic() > self._lease_until:
            await self._lease_renewed()
        lost = [r for r in runs if r.shard.lost]
        for run in lost:
            if self._inflight.get(run.job_id) is run:
                del self._inflight[run.job_id]
            run.finish()
        if lost:
            self._capacity.set()
        return [r for r in runs if not r.shard.lost]

    async def _deliver_one_by_one(self, handle: Any, runs: list[Run], timeout: float) -> list[Outcome]:
        """For actors that define ``execute_job`` but do not subclass JobHandler."""

        async def one(run: Run) -> Outcome:
            try:
                await asyncio.wait_for(handle.execute_job.remote(run.context()), timeout)
            except asyncio.TimeoutError:
                return Outcome(run.run_id, f"no answer within {timeout} s", "TimeoutError", True)
            except Exception as exc:
                cause = getattr(exc, "cause", None) or exc
                return Outcome(run.run_id, str(cause) or repr(cause), type(cause).__name__)
            return Outcome(run.run_id)

        return list(await asyncio.gather(*(one(r) for r in runs)))

    # -- staging: targets that do not exist yet -----------------------------------------------

    def _stage(self, runs: list[Run], why: str) -> None:
        now = wall_clock_us()
        for run in runs:
            self._inflight.pop(run.job_id, None)
            run.staged_since = run.staged_since or now
            self._staged[run.job_id] = run
        self._capacity.set()
        log.info("target absent, jobs staged", extra={"jobs": len(runs), "why": why})

    async def _retry_staged(self) -> None:
        if not self._staged:
            return
        now = wall_clock_us()
        limit = _us(self.options.undeliverable_timeout)
        by_target: dict[str, list[Run]] = defaultdict(list)
        for run in list(self._staged.values()):
            by_target[run.job.target.routing_key].append(run)
        for runs in by_target.values():
            target = runs[0].job.target
            try:
                self._directory.resolve(target)
            except TargetAbsent as exc:
                expired = [r for r in runs if now - r.staged_since > limit]
                for run in expired:
                    del self._staged[run.job_id]
                    self._inflight[run.job_id] = run
                    self._spawn(self._complete(run, Outcome(run.run_id, f"undeliverable: {exc}", "TargetAbsent")))
                continue
            for run in runs:
                del self._staged[run.job_id]
                self._inflight[run.job_id] = run
            self._send(target.routing_key, runs)

    # -- outcomes --------------------------------------------------------------------------

    async def _complete(self, run: Run, outcome: Outcome) -> None:
        end: AttemptEnd | None = None
        delay = 0.2
        try:
            if outcome.refused:
                # The handler saw our lease had run out and did not start it: no attempt was
                # made. Queue it again; if the shard was taken meanwhile, the write fences us.
                if not run.shard.lost and not run.cancelled:
                    self._queue.push(run.job_id, run.due_us, run.entry)
                return
            (self.metrics.succeeded if outcome.succeeded else self.metrics.failed).inc()
            while not run.cancelled:
                try:
                    end = await self._record_outcome(run, outcome)
                    break
                except Fenced:
                    self._drop(run.shard, "fenced while writing an outcome")
                    break
                except StorageError as exc:
                    # Not durable yet (the store is down): keep the outcome and write it again,
                    # rather than run the job again. In flight, it holds back new work meanwhile.
                    if self._stopping:
                        log.error("outcome not recorded at stop; the job will run again", extra={"job": run.job_id})
                        break
                    log.warning("outcome not durable yet, retrying", extra={"job": run.job_id, "error": repr(exc)})
                    await asyncio.sleep(delay)
                    delay = min(2 * delay, 5.0)
        finally:
            if self._inflight.get(run.job_id) is run:
                del self._inflight[run.job_id]
            self._capacity.set()
            run.finish()
        if end is not None and run.hooks:
            await self._call_hooks(run.hooks, "attempt_ended", run.event(), end)

    async def _record_outcome(self, run: Run, outcome: Outcome) -> AttemptEnd:
        """Write what the outcome means — a retry, the next occurrence or the end — durably."""
        policy = run.job.retry_policy
        attempts = run.number
        exc = None if outcome.succeeded else JobFailed(outcome.error_type or "Error", outcome.error or "", timed_out=outcome.timed_out)
        retry_at = policy.decide(
            attempts, us_to_datetime(run.due_us), succeeded=outcome.succeeded,
            ctx=run.context() if exc is not None else None, exc=exc,
        ) if (exc is not None or policy.strategy == "always") else None
        error = None if exc is None else f"{exc.error_type}: {exc.message}"
        if retry_at is not None:
            due_us = datetime_to_us(retry_at)
            (entry,) = await run.shard.write([retry_op(run.job_id, due_us, attempts)])
            if entry is not None and not run.cancelled:
                self._queue.push(run.job_id, due_us, entry)
            self.metrics.retried.inc()
            return AttemptEnd(outcome.succeeded, error, _now(), retry_at, None, False)
        if exc is not None:
            log.warning("job failed, retries exhausted", extra={"job": run.job_id, "attempts": attempts, "error": error})
        nxt = await self._end_occurrence(run, SUCCEEDED if outcome.succeeded else EXHAUSTED)
        return AttemptEnd(outcome.succeeded, error, _now(), None, None if nxt is None else us_to_datetime(nxt), nxt is None)

    async def _end_occurrence(self, run: Run, outcome: str) -> int | None:
        """The occurrence ended: remove it, or move the job to its next occurrence (returned)."""
        entry = run.entry
        nxt = None if outcome == EXPIRED else self._next_time(run)
        if nxt is None:
            await run.shard.write([remove_op(run.job_id, entry[OCCURRENCE], outcome)])
            return None
        add = add_op(run.job_id, nxt, entry[JOB], entry[OCCURRENCE] + 1, 0, nxt)
        window = window_of(nxt, _us(self.options.shard_duration))
        if self._open.get(window) is run.shard:
            (new_entry,) = await run.shard.write([add])  # same shard: the ADD replaces the entry
        else:
            # Queued below, once this occurrence is fully written: the next one must not start
            # while this run still counts as in flight.
            target = await self._write_to_window(window, [add], queue=False)
            new_entry = target.state.live.get(run.job_id) if target.state is not None else None
            await run.shard.write([remove_op(run.job_id, entry[OCCURRENCE], MOVED, target.base)])
        if run.cancelled:
            await self._cancel_next(run.job_id, window)
            return None
        if new_entry is not None:
            self._queue.push(run.job_id, nxt, new_entry)
        return nxt

    async def _admitted(self, runs: list[Run]) -> list[Run]:
        """The runs every hook admits; the others are cancelled, durably, without starting."""
        admitted = []
        for run in runs:
            if not run.hooks:
                admitted.append(run)
                continue
            event = run.event()
            ok = True
            for hook in run.hooks:
                try:
                    ok = ok and await hook.admit(event)
                except Exception:
                    log.exception("silo hook failed", extra={"hook": type(hook).__name__, "method": "admit"})
            if ok:
                admitted.append(run)
                continue
            log.info("attempt refused: superseded definition", extra={"job": run.job_id})
            try:
                await run.shard.write([remove_op(run.job_id, run.entry[OCCURRENCE], CANCELLED)])
            except StorageError as exc:
                log.warning("could not cancel a refused attempt", extra={"job": run.job_id, "error": repr(exc)})
            if self._inflight.get(run.job_id) is run:
                del self._inflight[run.job_id]
            run.finish()
        self._capacity.set()
        return admitted

    async def _call_hooks(self, hooks: Sequence[SiloHooks], method: str, *args: Any) -> None:
        for hook in hooks:
            try:
                await getattr(hook, method)(*args)
            except Exception:
                log.exception("silo hook failed", extra={"hook": type(hook).__name__, "method": method})

    async def _expire(self, run: Run) -> None:
        """Remove a job whose ttl passed before this occurrence could start."""
        try:
            await self._end_occurrence(run, EXPIRED)
        except Fenced:
            self._drop(run.shard, "fenced while expiring a job")
        except StorageError as exc:
            # Not durable: the job stays in its log and is expired again when next loaded.
            log.warning("could not record an expiry", extra={"job": run.job_id, "error": repr(exc)})

    async def _cancel_next(self, job_id: str, window: int) -> None:
        shard = self._open.get(window)
        if shard is not None and shard.state is not None and job_id in shard.state.live:
            self._queue.cancel(job_id)
            await shard.write([remove_op(job_id, shard.state.live[job_id][OCCURRENCE], CANCELLED)])

    def _next_time(self, run: Run) -> int | None:
        job, entry = run.job, run.entry
        scheduled = us_to_datetime(entry[SCHEDULED])
        nxt = next_occurrence(job.schedule, scheduled, entry[OCCURRENCE], job.repeats, job.ttl)
        if nxt is None:
            return None
        now = us_to_datetime(wall_clock_us())
        if nxt < now - self.options.misfire_grace:
            misfire = Misfire.parse(job.misfire)
            # This fire was itself the one catch-up fire_once allows when it ran late.
            late = us_to_datetime(run.due_us) < now - self.options.misfire_grace
            if misfire is Misfire.SKIP or (misfire is Misfire.FIRE_ONCE and late):
                nxt = catch_up(job.schedule, nxt, now, Misfire.SKIP, entry[OCCURRENCE], job.repeats, job.ttl).next_due
        return None if nxt is None else datetime_to_us(nxt)

    # -- shards: loading, adopting, dropping ---------------------------------------------------

    def _queue_loaded(self, shard: Shard, *, adopted: bool = False) -> None:
        assert shard.state is not None
        for job_id, entry in shard.state.live.items():
            if job_id not in self._inflight and job_id not in self._staged:
                self._queue.push(job_id, entry[DUE], entry)
        self.metrics.shards_loaded.set(sum(1 for s in self._shards.values() if s.loaded))
        if self._hooks and shard.state.live:
            jobs = [(ScheduledJob.from_wire(unpack(e[JOB]), self._memo), e[OCCURRENCE], e[ATTEMPTS])
                    for e in shard.state.live.values()]
            self._spawn(self._call_hooks(self._hooks, "shard_loaded", jobs, adopted))

    async def _load_due_shards(self) -> None:
        horizon = wall_clock_us() + _us(self.options.lookahead)
        assert self._store is not None
        for shard in list(self._shards.values()):
            if not shard.loaded and shard.meta.window_start <= horizon:
                async with shard.gate.exclusive():
                    if not shard.loaded:
                        try:
                            await shard.load(self._store)
                        except StorageError as exc:
                            log.warning("could not load shard", extra={"shard": shard.base, "error": repr(exc)})
                            continue
                        self._apply_misfires(shard)
                        self._queue_loaded(shard)

    def _apply_misfires(self, shard: Shard) -> None:
        """Recurring jobs whose occurrence passed while the shard was not loaded: per policy."""
        assert shard.state is not None
        now_us = wall_clock_us()
        grace = _us(self.options.misfire_grace)
        for job_id, entry in list(shard.state.live.items()):
            if entry[DUE] >= now_us - grace or entry[ATTEMPTS]:
                continue
            job = ScheduledJob.from_wire(unpack(entry[JOB]))
            if job.schedule is None or Misfire.parse(job.misfire) is not Misfire.SKIP:
                continue  # fire_once / fire_all fire the missed occurrence now; one-shots always do
            plan = catch_up(job.schedule, us_to_datetime(entry[SCHEDULED]), us_to_datetime(now_us),
                            Misfire.SKIP, entry[OCCURRENCE] - 1, job.repeats, job.ttl)
            if plan.next_due is None:
                self._spawn(shard.write([remove_op(job_id, entry[OCCURRENCE], EXPIRED)]))
            else:
                nxt = datetime_to_us(plan.next_due)
                self._spawn(shard.write([add_op(job_id, nxt, entry[JOB], entry[OCCURRENCE], 0, nxt)]))

    async def _delete_drained(self) -> None:
        now = wall_clock_us()
        for shard in list(self._shards.values()):
            if shard.loaded and shard.live_count == 0 and shard.meta.window_end < now:
                if any(r.shard is shard for r in self._inflight.values()):
                    continue
                async with shard.gate.exclusive():
                    if shard.live_count != 0:
                        continue
                    try:
                        await shard.writer.close()
                        assert self._store is not None
                        await self._store.delete(shard.writer.name, if_match=shard.writer.etag)
                    except (Fenced, NotFound):
                        pass
                    except StorageError as exc:
                        log.warning("could not delete drained shard", extra={"shard": shard.base, "error": repr(exc)})
                        continue
                    self._forget(shard)

    async def _forgive_adoptions(self) -> None:
        """Reset ``adopted_count`` of shards held long enough: their jobs did not kill us.

        Poisoning is for a shard whose jobs crash each silo that loads it; a shard adopted a few
        times because silos died of other causes (a drill, a lost node) must not end up poisoned.
        """
        now = time.monotonic()
        for shard in list(self._shards.values()):
            if shard.meta.adopted_count and now - shard.held_since > self.options.poison_forgiveness.total_seconds():
                try:
                    await shard.set_meta(ShardMeta(**{**shard.meta.__dict__, "adopted_count": 0}))
                except Fenced:
                    self._drop(shard, "fenced while resetting its adoption count")
                except StorageError:
                    pass

    def _forget(self, shard: Shard) -> None:
        self._shards.pop(shard.base, None)
        self._seal(shard)
        self.metrics.shards_owned.set(len(self._shards))

    def _drop(self, shard: Shard, why: str) -> None:
        """Another silo owns ``shard`` now (fencing): fire nothing more from it."""
        if shard.lost:
            return
        shard.lost = True
        self._forget(shard)
        if shard.state is not None:
            for job_id, entry in shard.state.live.items():
                got = self._queue.get(job_id)
                if got is not None and got[1] is entry:
                    self._queue.cancel(job_id)
        for job_id, run in list(self._staged.items()):
            if run.shard is shard:
                del self._staged[job_id]
        log.warning("shard lost to another silo", extra={"shard": shard.base, "why": why})

    def _is_orphan(self, metadata: dict[str, str], members: dict[str, Member]) -> bool:
        owner = metadata.get("owner", RELEASED)
        if owner == RELEASED:
            return True
        parsed = parse_owner(owner)
        if parsed is None:
            return True
        silo_id, incarnation = parsed
        member = members.get(silo_id)
        if member is None or member.incarnation != incarnation:
            return True  # that incarnation was replaced (a Ray restart) or never registered
        # A silent silo is orphaned only once declared dead by CAS (see _detect_failures), so a
        # silo that was merely slow learns it from its own failed heartbeat and stops firing.
        return member.status in (DEAD, LEAVING)

    async def _adopt_orphans(self) -> int:
        """Claim orphaned shards within the lookahead: a fair share per round, budget ramping up."""
        assert self._store is not None
        members = await Membership(self._store).members()
        horizon = wall_clock_us() + _us(self.options.lookahead)
        candidates: list[tuple[str, ShardMeta]] = []
        for head in await list_logs(self._store, SHARD_PREFIX):
            if head.base in self._shards:
                continue
            try:
                meta = ShardMeta.from_metadata(head.metadata)
            except (KeyError, ValueError):
                continue
            if meta.window_start > horizon or not self._is_orphan(head.metadata, members):
                continue
            if meta.adopted_count >= self.options.max_adopted_count:
                if head.base not in self._poisoned:
                    self._poisoned[head.base] = meta.owner
                    log.error("poisoned shard left alone", extra={"shard": head.base, "adopted": meta.adopted_count})
                continue
            candidates.append((head.base, meta))
        if not candidates:
            self._claim_budget = INITIAL_CLAIM_BUDGET
            return 0
        alive = sum(1 for m in members.values() if m.status not in (DEAD, LEAVING)) or 1
        share = -(-len(candidates) // alive)  # fair share, rounded up; leftovers go next round
        random.shuffle(candidates)  # silos racing for the same orphans mostly pick different ones
        claimed = 0
        for base, meta in candidates[: min(share, self._claim_budget)]:
            claimed += await self._claim(base, meta) is not None
        if len(candidates) > self._claim_budget:
            self._claim_budget = min(MAX_CLAIM_BUDGET, self._claim_budget * 2)
        return claimed

    async def adopt_now(self) -> int:
        """Look for orphans at once (a peer released its shards or was found dead)."""
        await self._ready
        return await self._adopt_orphans()

    async def _claim(self, base: str, meta: ShardMeta) -> Shard | None:
        assert self._store is not None
        failed = meta.owner != RELEASED
        new_meta = meta.with_owner(self.owner, state=SEALED, adopted_count=meta.adopted_count + failed)
        try:
            shard = await Shard.claim(self._store, base, new_meta, meta.owner, self._log_options)
        except (Fenced, NotFound):
            return None  # another silo was faster
        except StorageError as exc:
            log.warning("could not claim shard", extra={"shard": base, "error": repr(exc)})
            return None
        self._shards[base] = shard
        self.metrics.shards_owned.set(len(self._shards))
        self.metrics.adopted.inc()
        log.info("shard adopted", extra={"shard": base, "from": meta.owner, "jobs": shard.live_count})
        async with shard.gate.exclusive():
            self._apply_misfires(shard)
            self._queue_loaded(shard, adopted=meta.owner != RELEASED)
        return shard

    # -- background ---------------------------------------------------------------------------

    async def _maintenance_loop(self) -> None:
        tick = self.options.staging_interval.total_seconds()
        last_adoption = time.monotonic()
        while True:
            await asyncio.sleep(tick)
            try:
                await self._retry_staged()
                await self._load_due_shards()
                if time.monotonic() - last_adoption >= self.options.adoption_interval.total_seconds():
                    last_adoption = time.monotonic()
                    await self._adopt_orphans()
                    await self._delete_drained()
                    await self._forgive_adoptions()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("maintenance round failed")

    async def _heartbeat_loop(self) -> None:
        interval = self.options.heartbeat_interval.total_seconds()
        while True:
            await asyncio.sleep(interval)
            try:
                self.metrics.flush()
                await self._heartbeat()
                await self._detect_failures()
            except asyncio.CancelledError:
                raise
            except StorageError as exc:
                log.warning("heartbeat failed", extra={"silo": self.owner, "error": repr(exc)})
            except Exception:
                log.exception("heartbeat round failed")

    async def _lease_renewed(self) -> None:
        self._lease.clear()
        await self._lease.wait()

    def _renew_lease(self, written_from: float) -> None:
        # Peers declare us dead after watching our row unchanged for suspicion_timeout, counted
        # from when they first saw it — at the earliest when our write began, ``written_from``.
        # Stop firing a margin before that could happen, however slow the write was.
        now = time.monotonic()
        if now > self._lease_until:
            self._watch.forget_silence(now)  # we were blind too: give every peer a fresh timeout
        self._lease_until = written_from + 0.8 * self.options.suspicion_timeout.total_seconds()
        self._lease.set()

    async def _heartbeat(self) -> None:
        assert self._store is not None and self._member is not None
        membership = Membership(self._store)
        began = time.monotonic()
        try:
            self._member = await membership.update(self._member, heartbeat_us=wall_clock_us())
        except (Fenced, NotFound):
            # Declared dead by a peer (we were paused or cut off): our shards are being adopted
            # and our writes are fenced. Drop them all and join again as a new incarnation.
            log.error("silo was declared dead; rejoining", extra={"silo": self.owner})
            for shard in list(self._shards.values()):
                self._drop(shard, "declared dead")
            self._member = await membership.join(self.silo_id, wall_clock_us(), pid=os.getpid())
        self._renew_lease(began)

    async def _detect_failures(self) -> None:
        """Declare dead, by CAS, peers that Ray reports dead or that stayed silent too long."""
        assert self._store is not None
        membership = Membership(self._store)
        members = await membership.members()
        now = time.monotonic()
        self._watch.observe(members, now)
        dead = {m.silo_id: m for m in self._watch.suspects(members, now, self.options.suspicion_timeout.total_seconds(), me=self.silo_id)}
        alive = [m for m in members.values() if m.silo_id != self.silo_id and m.status not in (DEAD, LEAVING)]
        answers = await asyncio.gather(*(self._ping(m.silo_id) for m in alive))
        dead.update({m.silo_id: m for m, answer in zip(alive, answers) if answer is False})
        declared = [m for m in dead.values() if await membership.declare_dead(m)]
        if declared:
            log.warning("peers declared dead", extra={"silos": [m.owner for m in declared], "by": self.owner})
            await self._adopt_orphans()

    async def _ping(self, silo_id: str) -> bool | None:
        """False if Ray says the peer's actor is dead or restarting; None if it just did not answer."""
        handle = self._peers.get(silo_id)
        try:
            if handle is None:
                handle = self._peers[silo_id] = ray.get_actor(SILO_PREFIX + silo_id, namespace=self.namespace)
            await asyncio.wait_for(handle.ping.remote(), self.options.heartbeat_interval.total_seconds())
            return True
        except ValueError:
            return False  # no such actor: removed for good
        except ray.exceptions.ActorUnavailableError:
            return None  # unreachable for now, maybe restarting: the heartbeat watch decides
        except ray.exceptions.RayActorError:
            self._peers.pop(silo_id, None)
            return False
        except asyncio.TimeoutError:
            return None  # busy or paused: the heartbeat watch decides

    # -- observing ----------------------------------------------------------------------------

    async def status(self) -> dict[str, Any]:
        """What this silo holds: shards (owner, state, window, jobs), queue, in flight, staged."""
        await self._ready
        return {
            "silo_id": self.silo_id,
            "owner": self.owner,
            "pid": os.getpid(),
            "queued": len(self._queue),
            "inflight": len(self._inflight),
            "staged": len(self._staged),
            "shards": [
                {
                    "name": s.base,
                    "state": s.meta.state,
                    "loaded": s.loaded,
                    "jobs": s.live_count,
                    "window_start": s.meta.window_start,
                    "window_end": s.meta.window_end,
                    "adopted_count": s.meta.adopted_count,
                }
                for s in self._shards.values()
            ],
            "poisoned": dict(self._poisoned),
            "counters": self.metrics.snapshot(),
        }

    async def ping(self) -> str:
        return self.silo_id

    async def describe(self) -> dict[str, Any]:
        """What a client needs to connect: the store URL and the cluster options."""
        return {"silo_id": self.silo_id, "store_url": self._store_url, "options": self.options, "namespace": self.namespace}

    async def declare_peer_dead(self, silo_id: str) -> bool:
        """Fast path of failure detection: mark a peer dead now, then adopt its shards."""
        await self._ready
        assert self._store is not None
        membership = Membership(self._store)
        member = (await membership.members()).get(silo_id)
        if member is None or member.status in (DEAD, LEAVING):
            return False
        dead = await membership.declare_dead(member)
        if dead:
            await self._adopt_orphans()
        return dead


__all__ = ["Silo", "RELEASED"]
