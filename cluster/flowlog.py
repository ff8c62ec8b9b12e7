"""Durable progress of flows: the flow log in the store, its fold, and the silo hook that moves it.

Every flow has one log, ``flows/<name>`` (generation 0 of ``storage``'s naming, never rotated: a
flow writes a handful of small records per step). Any process may append to it — the client at
submit and cancel, and every silo's ``FlowHooks`` as steps start and end — so each write is
optimistic: read the log, fold it, decide, append one frame under the ETag just read; a
``Fenced`` answer means someone else wrote first, so read again and decide again. Records are
facts that fold idempotently, so a frame that landed although its append reported a failure
is harmless: the next read sees it.

Records (msgpack lists, first item the kind):

- ``["flow", plan]`` — the validated definition (``FlowPlan.to_wire``), always first;
- ``["run", step, attempt, at_us]`` — an attempt was handed to its handler;
- ``["retry", step, attempt, error, retry_at_us, at_us]`` — the attempt ended, the step's policy
  runs it again at ``retry_at_us`` (error is None when ``always`` re-runs a success);
- ``["ok", step, attempt, at_us]`` / ``["fail", step, attempt, error, at_us]`` — the step
  succeeded / exhausted its retries (the first ``fail`` halts the flow);
- ``["intent", token, owner, [step, ...], at_us]`` — ``owner`` is about to schedule these steps;
- ``["sched", token, [[step, shard, due_us], ...], at_us]`` — ... and did: their jobs are durable;
- ``["cancel", at_us]`` then ``["cancelled", [step, ...], at_us]`` — a user cancelled the flow.

**Moving on.** When a step's job finishes, the silo's hook appends ``ok`` (or ``fail``) and, in
the same frame, an ``intent`` for every step whose dependencies have now all succeeded; only the
writer whose frame lands schedules them, so two silos finishing two parents of one step at once
start it once. The dependants' jobs carry deterministic ids (``<flow id>-<step index>``): a step
rescheduled after a crash is recognisable in the shard logs and in the flow log.

**Crashes.** Each silo reconciles every unfinished flow when it starts (Ray restarts a killed
silo), when it adopts a shard holding flow jobs, and every ``10 x adoption_interval``:

- an ``intent`` without its ``sched`` whose writer is dead, replaced, or silent for longer than
  the grace period is taken over by a new intent and scheduled again;
- a step silent for longer than an attempt can last (``handler_timeout`` after its start, or
  after its retry time / due time plus ``undeliverable_timeout``) has its shard log read: the
  job's ``remove`` there tells its outcome, which is recorded as the lost hook would have done;
  a job that is gone without a trace (its drained shard was deleted) is run again — at least
  once, like every job.

The remaining window is a silo killed after a step's ``remove`` is durable and before its hook
wrote ``ok``, with the shard deleted before any reconcile looked: the step then runs twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from cluster.hooks import AttemptEnd, AttemptEvent, SiloHooks
from cluster.jobs import ScheduledJob, Target
from cluster.membership import Member, Membership, parse_owner
from cluster.policies import FailurePolicy
from cluster.queue import wall_clock_us
from cluster.shardlog import ADD, CANCELLED, EXHAUSTED, REMOVE, SNAPSHOT, SUCCEEDED
from cluster.wire import datetime_to_us, pack, us_to_datetime
from storage import Fenced, NotFound, StorageError, Store, Unavailable, generation_name, read_log
from storage.records import decode, encode

log = logging.getLogger("timeshard.flows")

FLOW_PREFIX = "flows/"
FLOW_META = "timeshard.flow"  # job metadata: the flow's name
FLOW_ID_META = "timeshard.flow_id"  # ... its id (a resubmitted name gets a new one)
STEP_META = "timeshard.step"  # ... and the step's name

PENDING, RUNNING, RETRYING, SUCCEEDED_STEP, FAILED, CANCELLED_STEP = (
    "pending", "running", "retrying", "succeeded", "failed", "cancelled",
)
FLOW_RUNNING, FLOW_SUCCEEDED, FLOW_HALTED, FLOW_CANCELLED = "running", "succeeded", "halted", "cancelled"
TERMINAL_STEP_STATES = (SUCCEEDED_STEP, FAILED, CANCELLED_STEP)
_CAS_ATTEMPTS = 50

Schedule = Callable[[Sequence[ScheduledJob]], Awaitable[Sequence[str | None]]]
"""Durably add jobs and return the shard each went to: through the client, or a silo directly."""


class FlowLogDamaged(StorageError):
    """A flow log has a torn or corrupt tail; appending after it would hide the new records."""


# -- the definition -------------------------------------------------------------------------


@dataclass(frozen=True)
class StepPlan:
    """One validated step: what its job calls and how its job retries."""

    name: str
    target: Target
    data: Any
    depends_on: tuple[str, ...]
    policy: FailurePolicy


@dataclass(frozen=True)
class FlowPlan:
    """A validated flow as stored in its log: steps in a topological order, with the flow's id."""

    name: str
    id: str
    steps: tuple[StepPlan, ...]
    created_us: int

    def index(self, step: str) -> int:
        return next(i for i, s in enumerate(self.steps) if s.name == step)

    def job_id(self, step: str) -> str:
        """The job id every (re)scheduling of ``step`` uses, so duplicates are recognisable."""
        return f"{self.id}-{self.index(step)}"

    def job(self, step: str, due: datetime) -> ScheduledJob:
        """The job that runs ``step`` at ``due``; validates target and data like any job."""
        plan = self.steps[self.index(step)]
        return ScheduledJob.create(
            plan.target, plan.name, due=due, data=plan.data, now=due, job_id=self.job_id(step),
            metadata={FLOW_META: self.name, FLOW_ID_META: self.id, STEP_META: plan.name},
            failure_policy=plan.policy,
        )

    def to_wire(self) -> list[Any]:
        steps = [[s.name, s.target.to_wire(), s.data, list(s.depends_on), s.policy.to_wire()] for s in self.steps]
        return [self.name, self.id, steps, self.created_us]

    @classmethod
    def from_wire(cls, obj: Any) -> FlowPlan:
        name, flow_id, steps, created = obj
        return cls(name, flow_id, tuple(
            StepPlan(n, Target.from_wire(t), d, tuple(deps), FailurePolicy.from_wire(p)) for n, t, d, deps, p in steps
        ), created)


# -- what get() shows ------------------------------------------------------------------------


@dataclass(frozen=True)
class StepStatus:
    """One step: ``state`` is pending, running, retrying, succeeded, failed or cancelled.

    ``attempts`` counts attempts started so far; ``next_retry`` is when a retrying step runs
    again; ``error`` is the last failure; ``job_id`` names the step's job in the shard logs.
    """

    name: str
    state: str
    attempts: int
    next_retry: datetime | None
    started_at: datetime | None
    ended_at: datetime | None
    error: str | None
    depends_on: tuple[str, ...]
    job_id: str


@dataclass(frozen=True)
class FlowStatus:
    """A flow: ``state`` is running, succeeded, halted or cancelled; ``halted_by`` names the step
    that exhausted its retries; ``steps`` maps each step's name to its ``StepStatus``."""

    name: str
    id: str
    state: str
    halted_by: str | None
    steps: dict[str, StepStatus]
    created_at: datetime
    ended_at: datetime | None


# -- the fold ---------------------------------------------------------------------------------


@dataclass
class _Step:
    state: str = PENDING
    attempts: int = 0
    phase: tuple[int, int] = (0, -1)  # (attempt, 0 run | 1 retry): later facts win, late ones are ignored
    next_retry_us: int | None = None
    started_us: int | None = None
    ended_us: int | None = None
    error: str | None = None
    token: str | None = None  # the intent that scheduled (or is scheduling) it
    shard: str | None = None
    due_us: int | None = None


@dataclass(frozen=True)
class Intent:
    token: str
    owner: str
    steps: tuple[str, ...]
    at_us: int


@dataclass
class FlowState:
    """The fold of one flow log, plus the ETag and sequence number to append after it."""

    plan: FlowPlan
    etag: str
    last_seq: int
    steps: dict[str, _Step] = field(default_factory=dict)
    intents: dict[str, Intent] = field(default_factory=dict)
    confirmed: set[str] = field(default_factory=set)
    halted_by: str | None = None
    cancelled_us: int | None = None
    ended_us: int | None = None

    @classmethod
    def fold(cls, records: Iterable[Any], etag: str, last_seq: int) -> FlowState:
        it = iter(records)
        first = next(it)
        if first[0] != "flow":
            raise FlowLogDamaged(f"a flow log must start with its definition, not {first[0]!r}")
        state = cls(FlowPlan.from_wire(first[1]), etag, last_seq)
        state.steps = {s.name: _Step() for s in state.plan.steps}
        for record in it:
            state.apply(record)
        return state

    @property
    def state(self) -> str:
        if self.cancelled_us is not None:
            return FLOW_CANCELLED
        if self.halted_by is not None:
            return FLOW_HALTED
        if all(s.state == SUCCEEDED_STEP for s in self.steps.values()):
            return FLOW_SUCCEEDED
        return FLOW_RUNNING

    @property
    def finished(self) -> bool:
        return self.state != FLOW_RUNNING

    def apply(self, record: list[Any]) -> bool:
        """Fold one record; False when it changes nothing (a duplicate or a late fact)."""
        kind = record[0]
        if kind in ("run", "retry", "ok", "fail"):
            step = self.steps.get(record[1])
            return step is not None and self._step_event(record[1], step, record)
        if kind == "intent":
            _, token, owner, steps, at = record
            if token in self.intents:
                return False
            self.intents[token] = Intent(token, owner, tuple(steps), at)
            for name in steps:
                self.steps[name].token = token
                self.steps[name].phase = (0, -1)  # a (re)scheduled job counts its attempts afresh
            return True
        if kind == "sched":
            _, token, placed, _ = record
            if token in self.confirmed:
                return False
            self.confirmed.add(token)
            for name, shard, due_us in placed:
                if self.steps[name].token == token:
                    self.steps[name].shard, self.steps[name].due_us = shard, due_us
            return True
        if kind == "cancel":
            if self.finished:
                return False
            self.cancelled_us = self.ended_us = record[1]
            return True
        if kind == "cancelled":
            changed = False
            for name in record[1]:
                if self.steps[name].state not in TERMINAL_STEP_STATES:
                    self.steps[name].state, self.steps[name].ended_us = CANCELLED_STEP, record[2]
                    changed = True
                    if self.cancelled_us is None and self.halted_by is None:
                        # Cancelled on its own (try_cancel_job on its job): it will never succeed.
                        self.halted_by, self.ended_us = name, record[2]
            return changed
        raise FlowLogDamaged(f"unknown flow record {kind!r}")

    def _step_event(self, name: str, step: _Step, record: list[Any]) -> bool:
        kind, attempt = record[0], record[2]
        if step.state in TERMINAL_STEP_STATES:
            return False  # the first outcome stands; a duplicate run of the step changes nothing
        phase = (attempt, 0 if kind == "run" else 1)
        if phase < step.phase:
            return False  # a start written after its own end (starts are recorded in the background)
        step.phase, step.attempts = phase, max(step.attempts, attempt)
        at = record[-1]
        if kind == "run":
            step.state, step.started_us, step.next_retry_us = RUNNING, at, None
        elif kind == "retry":
            step.state, step.error, step.next_retry_us = RETRYING, record[3], record[4]
        elif kind == "ok":
            step.state, step.ended_us, step.next_retry_us = SUCCEEDED_STEP, at, None
            if self.state == FLOW_SUCCEEDED:
                self.ended_us = at
        else:
            step.state, step.error, step.ended_us, step.next_retry_us = FAILED, record[3], at, None
            if self.halted_by is None and self.cancelled_us is None:
                self.halted_by, self.ended_us = name, at
        return True

    def ready(self) -> list[str]:
        """Steps to schedule now: never scheduled, and every dependency succeeded."""
        if self.finished:
            return []
        return [
            s.name for s in self.plan.steps
            if self.steps[s.name].token is None
            and all(self.steps[d].state == SUCCEEDED_STEP for d in s.depends_on)
        ]

    def unconfirmed(self) -> list[Intent]:
        """Intents still current for some step whose ``sched`` never came."""
        return [
            i for i in self.intents.values()
            if i.token not in self.confirmed and any(self.steps[s].token == i.token for s in i.steps)
        ]

    def status(self) -> FlowStatus:
        def at(us: int | None) -> datetime | None:
            return None if us is None else us_to_datetime(us)

        steps = {
            s.name: StepStatus(
                s.name, st.state, st.attempts, at(st.next_retry_us), at(st.started_us), at(st.ended_us),
                st.error, s.depends_on, self.plan.job_id(s.name),
            )
            for s in self.plan.steps
            for st in (self.steps[s.name],)
        }
        return FlowStatus(self.plan.name, self.plan.id, self.state, self.halted_by, steps,
                          us_to_datetime(self.plan.created_us), at(self.ended_us))


# -- reading and writing a flow log -------------------------------------------------------------


def log_name(flow: str) -> str:
    return generation_name(FLOW_PREFIX + flow, 0)


async def create_log(store: Store, plan: FlowPlan) -> None:
    """Create ``plan``'s log holding its definition; ``AlreadyExists`` if the name is taken."""
    name = log_name(plan.name)
    etag = await store.create(name, {"flow_id": plan.id})
    await store.append_block(name, encode(0, [["flow", plan.to_wire()]]), etag)


async def read_flow(store: Store, flow: str) -> FlowState | None:
    """The flow's current state, None if there is no such flow (or its definition is not written yet)."""
    try:
        fetched = await store.fetch(log_name(flow))
    except NotFound:
        return None
    decoded = decode(fetched.data)
    if decoded.torn is not None:
        raise FlowLogDamaged(f"flow log {flow!r}: {decoded.torn.reason} at {decoded.torn.offset}")
    records = list(decoded.records())
    if not records:
        return None
    return FlowState.fold(records, fetched.etag, decoded.last_seq)


Decide = Callable[[FlowState], list[list[Any]]]


async def update(store: Store, flow: str, decide: Decide) -> FlowState | None:
    """Append what ``decide`` asks for on the state just read; on a race, read and decide again.

    ``decide`` returns the records to append and has applied them to the state it was given
    (which is thrown away if the append loses). Returns the state after the write.
    """
    for _ in range(_CAS_ATTEMPTS):
        state = await read_flow(store, flow)
        if state is None:
            return None
        records = decide(state)
        if not records:
            return state
        try:
            appended = await store.append_block(log_name(flow), encode(state.last_seq + 1, records), state.etag)
        except Fenced:
            continue
        state.etag, state.last_seq = appended.etag, state.last_seq + len(records)
        return state
    raise Unavailable(f"flow log {flow!r}: lost {_CAS_ATTEMPTS} races in a row")


def _applied(state: FlowState, records: Sequence[list[Any]]) -> list[list[Any]]:
    return [r for r in records if state.apply(r)]


# -- moving a flow on -----------------------------------------------------------------------------


async def advance(store: Store, flow: str, owner: str, schedule: Schedule,
                  events: Sequence[list[Any]] = (), *, retake: dict[str, str | None] | None = None) -> FlowState | None:
    """Record ``events``, then schedule every step they made ready, and the steps in ``retake``.

    ``retake`` maps steps to the intent token they had when a crash was diagnosed; each is
    scheduled again only if that is still so on the state read under the CAS. Only the writer
    whose frame lands schedules: its intent carries a fresh token.
    """
    token = uuid.uuid4().hex[:16]
    retake = retake or {}

    def decide(state: FlowState) -> list[list[Any]]:
        out = _applied(state, events)
        if state.finished:
            return out
        steps = [s for s, seen in retake.items() if state.steps[s].token == seen and state.steps[s].state not in TERMINAL_STEP_STATES]
        steps += [s for s in state.ready() if s not in steps]
        if steps:
            out += _applied(state, [["intent", token, owner, steps, wall_clock_us()]])
        return out

    state = await update(store, flow, decide)
    if state is None or token not in state.intents:
        return state
    return await launch(store, state, state.intents[token], schedule)


async def launch(store: Store, state: FlowState, intent: Intent, schedule: Schedule) -> FlowState | None:
    """Schedule the jobs of ``intent``'s steps, then confirm them (with their shards) in the log."""
    now = us_to_datetime(wall_clock_us())
    jobs = [state.plan.job(step, now) for step in intent.steps]
    shards = await schedule(jobs)
    placed = [[step, shard, datetime_to_us(now)] for step, shard in zip(intent.steps, shards)]
    sched = ["sched", intent.token, placed, wall_clock_us()]
    return await update(store, state.plan.name, lambda s: _applied(s, [sched]))


# -- recovering what a crash lost ------------------------------------------------------------------


@dataclass(frozen=True)
class Limits:
    """How long silence may last before reconcile looks into it (from the cluster options)."""

    grace_us: int  # an intent of a live writer older than this is taken over
    attempt_us: int  # the longest an attempt runs (handler_timeout), plus slack
    staging_us: int  # the longest a due job may wait for its target (undeliverable_timeout)
    suspicion_us: int


def _writer_gone(owner: str, at_us: int, members: dict[str, Member], limits: Limits, now_us: int) -> bool:
    parsed = parse_owner(owner)
    if parsed is not None:
        member = members.get(parsed[0])
        if member is None or member.incarnation != parsed[1] or not member.alive(now_us, limits.suspicion_us):
            return True
    return now_us - at_us > limits.grace_us


def _silent(step: _Step, limits: Limits, now_us: int) -> bool:
    """Whether a scheduled step has been quiet for longer than its job can legitimately take."""
    if step.state == RUNNING and step.started_us is not None:
        return now_us - step.started_us > limits.attempt_us
    if step.state == RETRYING and step.next_retry_us is not None:
        return now_us - step.next_retry_us > limits.staging_us + limits.attempt_us
    if step.state == PENDING and step.due_us is not None:
        return now_us - step.due_us > limits.staging_us + limits.attempt_us
    return False


async def job_outcome(store: Store, shard: str, job_id: str) -> str | None:
    """What the shard log says of ``job_id``: "live", an outcome (succeeded, exhausted, cancelled),
    or None when neither the shard nor the job is there any more."""
    try:
        records = (await read_log(store, shard)).records()
    except NotFound:
        return None
    outcome: str | None = None
    for op in records:
        if op[0] == SNAPSHOT:
            outcome = "live" if any(entry[0] == job_id for entry in op[1]) else outcome
        elif op[1] == job_id:
            outcome = "live" if op[0] == ADD else op[3] if op[0] == REMOVE else outcome
    return outcome


async def reconcile(store: Store, flow: str, owner: str, schedule: Schedule, limits: Limits,
                    members: dict[str, Member]) -> FlowState | None:
    """Finish what crashed writers left half done in ``flow`` (see the module docstring)."""
    state = await read_flow(store, flow)
    if state is None or state.finished:
        return state
    now = wall_clock_us()
    retake: dict[str, str | None] = {
        s: i.token for i in state.unconfirmed() if _writer_gone(i.owner, i.at_us, members, limits, now)
        for s in i.steps if state.steps[s].token == i.token
    }
    events: list[list[Any]] = []
    for plan in state.plan.steps:
        step = state.steps[plan.name]
        if step.shard is None or not _silent(step, limits, now):
            continue
        outcome = await job_outcome(store, step.shard, state.plan.job_id(plan.name))
        attempt = max(step.attempts, 1)
        if outcome == SUCCEEDED:
            events.append(["ok", plan.name, attempt, now])
        elif outcome == EXHAUSTED:
            events.append(["fail", plan.name, attempt, "retries exhausted (outcome recovered from its shard)", now])
        elif outcome == CANCELLED:
            events.append(["cancelled", [plan.name], now])
        elif outcome is None:
            log.warning("flow step lost its job; running it again", extra={"flow": flow, "step": plan.name})
            retake[plan.name] = step.token
    if not retake and not events:
        return state
    return await advance(store, flow, owner, schedule, events, retake=retake)


# -- the silo hook --------------------------------------------------------------------------------


def _step_of(job: ScheduledJob) -> tuple[str, str] | None:
    flow, step = job.metadata.get(FLOW_META), job.metadata.get(STEP_META)
    return None if flow is None or step is None else (flow, step)


class FlowHooks(SiloHooks):
    """Records step attempts in flow logs and schedules dependants; reconciles after crashes.

    Built by ``default_hooks`` inside the silo's event loop; it starts its reconcile loop there.
    """

    def interested(self, job: ScheduledJob) -> bool:
        return FLOW_META in job.metadata

    def __init__(self, store: Store, silo: Any) -> None:
        self._store = store
        self._silo = silo
        options = silo.options
        self._interval = (options.adoption_interval * 10).total_seconds()
        attempt = options.handler_timeout + timedelta(seconds=10)
        self._limits = Limits(
            grace_us=max(options.suspicion_timeout * 3, timedelta(minutes=1)) // timedelta(microseconds=1),
            attempt_us=attempt // timedelta(microseconds=1),
            staging_us=options.undeliverable_timeout // timedelta(microseconds=1),
            suspicion_us=options.suspicion_timeout // timedelta(microseconds=1),
        )
        self._finished: set[str] = set()  # flows that can never change again: not read twice
        self._wake = asyncio.Event()
        self._background: set[asyncio.Task[Any]] = set()
        self._loop = asyncio.get_running_loop().create_task(self._reconcile_loop(), name="flow-reconcile")

    async def attempt_started(self, event: AttemptEvent) -> None:
        found = _step_of(event.job)
        if found is None:
            return
        # Delivery waits for this hook: write the start in the background (the fold orders it).
        record = ["run", found[1], event.attempt, datetime_to_us(event.started_at)]
        self._spawn(self._record(found[0], [record]))

    async def attempt_ended(self, event: AttemptEvent, end: AttemptEnd) -> None:
        found = _step_of(event.job)
        if found is None:
            return
        flow, step = found
        at = datetime_to_us(end.ended_at)
        if end.retry_at is not None:
            record = ["retry", step, event.attempt, end.error, datetime_to_us(end.retry_at), at]
        elif end.succeeded:
            record = ["ok", step, event.attempt, at]
        else:
            record = ["fail", step, event.attempt, end.error, at]
        await self._record(flow, [record])

    async def shard_loaded(self, jobs: Sequence[tuple[ScheduledJob, int, int]], adopted: bool) -> None:
        if adopted and any(_step_of(job) for job, _, _ in jobs):
            self._wake.set()

    async def close(self) -> None:
        self._loop.cancel()
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(self._loop, *self._background, return_exceptions=True)

    async def _schedule(self, jobs: Sequence[ScheduledJob]) -> list[str]:
        # Straight into this silo's own shards: the same call a client makes, without Ray.
        return await self._silo.schedule([(job.id, datetime_to_us(job.due), pack(job.to_wire())) for job in jobs])

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _record(self, flow: str, events: list[list[Any]]) -> None:
        try:
            await advance(self._store, flow, self._silo.owner, self._schedule, events)
        except Exception as exc:  # storage, or no silo took the dependants: never stop the silo
            # The step's outcome is durable in its shard: reconcile recovers it from there.
            log.warning("could not record a flow step", extra={"flow": flow, "error": repr(exc)})
            self._wake.set()

    async def _reconcile_loop(self) -> None:
        while True:
            try:
                await self.reconcile_all()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("flow reconcile round failed")
            self._wake.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._interval)

    async def reconcile_all(self) -> None:
        """One reconcile pass over every flow not known to be finished."""
        members = await Membership(self._store).members()
        for info in await self._store.list(FLOW_PREFIX):
            flow = info.name[len(FLOW_PREFIX):].rpartition("~")[0]
            if flow in self._finished:
                continue
            state = await reconcile(self._store, flow, self._silo.owner, self._schedule, self._limits, members)
            if state is not None and state.finished:
                self._finished.add(flow)
