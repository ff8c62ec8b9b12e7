"""Attempts in flight: the ``Run`` of one attempt, and the table of what a silo is running.

The run table bounds work in flight (``max_concurrency``) and is the one place a run ends:
``release`` takes it out of the table, wakes whoever waits on its end and frees its slot.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import uuid
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from cluster.model.attempt import Attempt, JobContext
from cluster.model.jobs import JobHead, ScheduledJob, Target
from cluster.model.wire import unpack, us_to_datetime
from cluster.runtime.hooks import AttemptEvent, SiloHooks
from cluster.runtime.metrics import SiloMetrics
from cluster.runtime.shard import Shard
from cluster.runtime.shardlog import JOB, OCCURRENCE, OWNER

log = logging.getLogger("timeshard.silo")


def log_if_failed(task: asyncio.Task[Any]) -> None:
    """Log a background task that ended with an exception: nobody awaits it, so nobody else would."""
    if not task.cancelled() and task.exception() is not None:
        log.error("background task failed", extra={"task": task.get_name()}, exc_info=task.exception())


MEMO_LIMIT = 10_000  # decoded schedules, policies and targets kept per silo
T = TypeVar("T")


class UnreadableJob(ValueError):
    """A packed job this silo cannot decode: damaged bytes, or a newer wire version."""


class JobDecoder:
    """Decodes packed jobs, sharing one decoded schedule, policy and target among jobs that repeat them."""

    def __init__(self, metrics: SiloMetrics | None = None) -> None:
        self._memo: dict[Any, Any] = {}
        self._metrics = metrics

    def __call__(self, packed: bytes) -> ScheduledJob:
        """The job ``packed`` holds; ``UnreadableJob`` (saying why) if it cannot be decoded."""
        return self._decode(ScheduledJob.from_wire, packed)

    def head(self, packed: bytes) -> JobHead:
        """What firing needs of the job ``packed`` holds; ``UnreadableJob`` exactly when ``__call__`` would."""
        return self._decode(ScheduledJob.head_from_wire, packed)

    def _decode(self, read: Callable[[Any, dict[Any, Any]], T], packed: bytes) -> T:
        if len(self._memo) > MEMO_LIMIT:
            self._memo.clear()  # bounded: a job per distinct schedule must not grow it forever
        try:
            return read(unpack(packed), self._memo)
        except Exception as exc:  # garbage raises msgpack's, the model's or Python's own errors
            raise UnreadableJob(f"{type(exc).__name__}: {str(exc)[:200]}") from exc

    def job_of(self, job_id: str, entry: list[Any]) -> ScheduledJob | None:
        """The job of a live ``entry``, or None if it cannot be decoded (it is then set aside).

        A job that cannot be decoded stays in its shard (and log) untouched, is never queued or
        run again by this silo, and is counted, logged at ERROR and shown in ``status``; the
        rest of the shard runs. A job of a newer wire version is refused the same way.
        """
        return self._read(self, job_id, entry)

    def head_of(self, job_id: str, entry: list[Any]) -> JobHead | None:
        """The head of a live ``entry``'s job, or None if the job cannot be decoded (set aside as
        ``job_of`` sets it aside: the same jobs, counted and logged the same way)."""
        # Once per fired job: the common case inline, anything unusual through _read.
        memo = self._memo
        if len(memo) <= MEMO_LIMIT and job_id not in getattr(entry[OWNER], "unreadable", ()):
            try:
                return ScheduledJob.head_from_wire(unpack(entry[JOB]), memo)
            except Exception:  # decoded again below: set aside, counted and logged there
                pass
        return self._read(self.head, job_id, entry)

    def _read(self, read: Callable[[bytes], T], job_id: str, entry: list[Any]) -> T | None:
        shard = entry[OWNER]
        unreadable = getattr(shard, "unreadable", None)
        if unreadable is not None and job_id in unreadable:
            return None
        try:
            return read(entry[JOB])
        except UnreadableJob as exc:
            if unreadable is not None:
                unreadable[job_id] = str(exc)
            if self._metrics is not None:
                self._metrics.unreadable.inc()
            log.error("job unreadable: kept in its shard, not run", extra={
                "shard": getattr(shard, "base", None), "job": job_id, "reason": str(exc)})
            return None


@dataclass(slots=True)
class Run:
    """One attempt in flight: the job, where it lives, and what its handler must be told.

    Firing reads only the job's ``head``; the whole job is decoded on first use of ``job`` (a
    hook, a failure, the next occurrence), from the entry's packed bytes.
    """

    job_id: str
    entry: list[Any]  # the shard's live entry (see cluster.runtime.shardlog)
    head: JobHead
    decode: Callable[[bytes], ScheduledJob]
    run_id: str
    due_us: int
    attempts_before: int
    staged_since: int = 0
    started_us: int = 0
    cancelled: bool = False
    hooks: tuple[SiloHooks, ...] = ()  # the hooks interested in this job
    admitted_until: float | None = None  # monotonic: when its hooks' admission lapses (``SiloHooks.admit_holds_s``)
    isolated: bool = False  # sent in its shard's isolated lane, the firing mark naming it (see quarantine)
    _done: asyncio.Event | None = None  # made only when a cancel waits for the run to end
    finished: bool = False
    sent_ahead: tuple[Any, float] | None = None  # (handle, lease end) once sent to wait for its due time
    delivering: bool = False  # its handler's call is out, not answered: it may start at any moment, or has
    _answered: asyncio.Event | None = None  # made only when a pause waits for that answer
    stop_us: int = 0  # overlap cancel_other: its handler stops it at this time (the next occurrence's)
    _job: ScheduledJob | None = None
    _cancels_writing: int = 0  # cancels that marked it and have not yet written its removal, or failed to
    _cancels_decided: asyncio.Event | None = None
    # The pause a cancel's removal took out of its shard's state while this attempt may still
    # move the job on (its outcome already under way): that move carries it (see Outcomes.end_occurrence).
    pause_removed: list[Any] | None = None

    @property
    def job(self) -> ScheduledJob:
        """The whole job, decoded once (its head read, so it decodes: see ``JobDecoder.head``)."""
        if self._job is None:
            self._job = self.decode(self.entry[JOB])
        return self._job

    @property
    def target(self) -> Target:
        return self.head.target

    def finish(self) -> None:
        self.finished = True
        if self._done is not None:
            self._done.set()

    def answered(self) -> None:
        """Its handler's call returned: the attempt will not start from now on, if it has not."""
        self.delivering = False
        if self._answered is not None:
            self._answered.set()

    async def wait_answered(self) -> None:
        if self.delivering:
            if self._answered is None:
                self._answered = asyncio.Event()
            await self._answered.wait()

    async def wait_finished(self) -> None:
        if not self.finished:
            if self._done is None:
                self._done = asyncio.Event()
            await self._done.wait()

    def hold_outcome(self) -> None:
        """A cancel marked this run and is writing its removal: its outcome waits for that write."""
        self._cancels_writing += 1
        if self._cancels_decided is None:
            self._cancels_decided = asyncio.Event()
        self._cancels_decided.clear()

    def release_outcome(self) -> None:
        """That cancel's removal is durable, or it failed and the run was marked not cancelled again."""
        self._cancels_writing -= 1
        if not self._cancels_writing and self._cancels_decided is not None:
            self._cancels_decided.set()

    async def stays_cancelled(self) -> bool:
        """Whether the run is cancelled for good, once every cancel that marked it knows its removal's fate.

        A cancel marks the run before it writes, so that the attempt writes nothing meanwhile;
        should the removal fail, the cancel marks it not cancelled again, and what the attempt
        did must then count. Its outcome read as "cancelled" and dropped, the job was queued
        again and its occurrence ran a second time (found by the simulation, seed 122).
        """
        while self._cancels_writing:
            assert self._cancels_decided is not None
            await self._cancels_decided.wait()
        return self.cancelled

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
                            us_to_datetime(self.started_us), self.shard.base)


def queues_next_of(run: Run, shard: Shard, job_id: str) -> bool:
    """Whether ``run``'s outcome queues what ``shard`` holds of ``job_id``: a run of ``shard``'s
    own copy, or of the shard that moved the job on into ``shard``."""
    if run.shard.base == shard.base:
        return True
    state = run.shard.state
    return state is not None and state.moved.get(job_id) == shard.base


class RunTable:
    """The runs a silo has in flight or staged, its capacity, and its background tasks."""

    def __init__(self, max_concurrency: int) -> None:
        self.max_concurrency = max_concurrency
        self.inflight: dict[str, Run] = {}
        self.staged: dict[str, Run] = {}  # due, waiting for their target actor to exist
        # Runs of older copies of a shard (dropped, or taken back from its log) whose job was
        # queued anew and started again from a fresher copy: still in flight, out of ``inflight``.
        # Every one of them, oldest first: a shard taken back twice in a row leaves two per job.
        # Also a run of another shard holding the same id (a flow step taken again): see ``of_copy``.
        self.displaced: dict[str, list[Run]] = {}
        self.closing = False  # the silo is stopping: no new work, give up on retries at the end
        self._capacity = asyncio.Event()
        self._background: set[asyncio.Task[Any]] = set()
        # Run ids: unique per attempt without a urandom call per job (uuid4 costs more than firing).
        self._run_prefix = uuid.uuid4().hex[:10]
        self._run_seq = itertools.count(1)

    def new_run_id(self, owner: str) -> str:
        return f"{self._run_prefix}{next(self._run_seq):x}@{owner}"

    @property
    def room(self) -> int:
        """How many more attempts may start now."""
        return self.max_concurrency - len(self.inflight)

    async def wait_for_room(self) -> None:
        self._capacity.clear()
        await self._capacity.wait()

    def start(self, run: Run) -> None:
        inflight = self.inflight
        old = inflight.get(run.job_id)
        inflight[run.job_id] = run
        if old is not None and old is not run and not old.finished:
            # A cancel or pause must still reach it (see Cancelling), and any it displaced before
            # (found by the simulation, seed 66001: only the last was kept, and the first started).
            self.displaced.setdefault(run.job_id, []).append(old)

    def notify_room(self) -> None:
        """Slots were freed: wake the fire loop if it waits for room."""
        self._capacity.set()

    def release(self, run: Run) -> None:
        """``run`` ended (or will never start): out of the table, its waiters woken, its slot free."""
        self.release_all((run,))

    def release_all(self, runs: Iterable[Run]) -> None:
        displaced = self.displaced
        for run in runs:
            if self.inflight.get(run.job_id) is run:
                del self.inflight[run.job_id]
            elif displaced and run.job_id in displaced:
                # By identity: runs are dataclasses, and == would compare every field.
                left = [old for old in displaced[run.job_id] if old is not run]
                if left:
                    displaced[run.job_id] = left
                else:
                    del displaced[run.job_id]
            run.finish()
        self._capacity.set()

    def of_shard(self, shard: Shard) -> bool:
        """Whether any attempt of ``shard``'s log is in flight: of this copy, or of an older one
        (dropped, or taken back from its log), displaced or not.

        An older copy's attempt may yet start in its handler, under this silo's lease, while the
        fresh copy looks idle: its shard deleted as drained meanwhile, or handed over to a peer
        that runs the job beside it (found by the simulation, seed 121748: a delivery delayed
        past a take-back started after the drained shard was deleted).
        """
        base = shard.base
        return (any(r.shard.base == base for r in self.inflight.values())
                or any(r.shard.base == base for runs in self.displaced.values() for r in runs))

    def find(self, job_id: str) -> Run | None:
        return self.inflight.get(job_id) or self.staged.get(job_id)

    def of_copy(self, job_id: str, shard: Shard) -> Run | None:
        """The run of ``job_id`` from this very copy of ``shard``, in flight or staged: the table's
        own entry, or one displaced by a run of another shard's copy of the same id (a flow step
        taken again puts its fixed id into a second shard of this silo)."""
        run = self.find(job_id)
        if run is not None and run.shard is shard:
            return run
        return next((old for old in reversed(self.displaced.get(job_id, ())) if old.shard is shard), None)

    def queueing_next(self, job_id: str, shard: Shard, holds: Callable[[Shard], bool]) -> bool:
        """Whether a run in flight or staged here queues ``shard``'s copy of ``job_id`` next: one of
        a shard it ``holds`` whose outcome does (see ``queues_next_of``)."""
        return any(run is not None and holds(run.shard) and queues_next_of(run, shard, job_id)
                   for run in (self.find(job_id), *self.displaced.get(job_id, ())))

    def displaced_of(self, job_id: str) -> list[Run]:
        """The runs of ``job_id`` from older copies of its shard still in flight (a copy of the list)."""
        return list(self.displaced.get(job_id, ()))

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run ``coro`` in the background, keeping a reference so it is not collected mid-way."""
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        task.add_done_callback(log_if_failed)
