"""Durable progress of flows: the flow log in the store, its records and their fold.

Every flow has one log, ``flows/<name>`` (generation 0 of ``storage``'s naming, never rotated: a
flow writes a handful of small records per step). Any process may append to it — the client at
submit and cancel, and every silo's ``FlowHooks`` as steps start and end — so each write is
optimistic: read the log, fold it, decide, append one frame under the ETag just read; a
``Fenced`` answer means someone else wrote first, so read again and decide again. Records are
facts that fold idempotently, so a frame that landed although its append reported a failure
is harmless: the next read sees it.

Records (msgpack lists, first item the kind):

- ``["flow", plan]`` — the validated definition (``FlowPlan.to_wire``), always first;
- ``["run", step, attempt, shard, at_us]`` — an attempt of the step's job in ``shard`` may start
  (written by its admission, before the handler hears of it; logs written before hold no shard);
- ``["retry", step, attempt, error, retry_at_us, at_us]`` — the attempt ended, the step's policy
  runs it again at ``retry_at_us`` (error is None when ``always`` re-runs a success);
- ``["ok", step, attempt, at_us]`` / ``["fail", step, attempt, error, at_us]`` — the step
  succeeded / exhausted its retries (the first ``fail`` halts the flow);
- ``["intent", token, owner, [step, ...], at_us, settled]`` — ``owner`` is about to schedule these
  steps; ``settled`` (absent in logs written before it) names the holders that already refused
  their takeover with no call of the earlier try under way in them (``progress.hand_over``);
- ``["sched", token, [[step, shard, due_us], ...], at_us]`` — ... and did: their jobs are durable;
- ``["cancel", at_us, token]`` then ``["cancelled", [step, ...], at_us]`` — a user cancelled the
  flow; ``token`` (absent in logs written before it) tells the cancelling call its own record
  when the append's answer was lost.

**Moving on.** When a step's job finishes, the silo's hook appends ``ok`` (or ``fail``) and, in
the same frame, an ``intent`` for every step whose dependencies have now all succeeded; only the
writer whose frame lands schedules them, so two silos finishing two parents of one step at once
start it once. The dependants' jobs carry deterministic ids (``<flow id>-<step index>``): a step
rescheduled after a crash is recognisable in the shard logs and in the flow log.

**Crashes.** Each silo reconciles every unfinished flow when it starts (Ray restarts a killed
silo), when it adopts a shard holding flow jobs, and every ``10 x adoption_interval``:

- an ``intent`` without its ``sched`` whose writer is dead, replaced, or silent for longer than
  the grace period (or the reconciling silo's own, once its launch failed) is taken over by a new
  intent and scheduled again: as its first writer sent the job (due at that intent's time), naming
  every earlier writer's silo as a suspect, so that a copy one of them added is found, not added
  again; a ``sched`` that lands after the takeover's intent still schedules the step;
- a step silent for longer than an attempt can last (``handler_timeout`` after its start, or
  after its retry time / due time plus ``undeliverable_timeout``) has its shard log read: the
  job's ``remove`` there tells its outcome, which is recorded as the lost hook would have done;
  a job that is gone without a trace (its drained shard was deleted) is run again — at least
  once, like every job.

A takeover whose schedule call cannot settle an earlier try (a live silo holds a shard it may
still reach) is handed to that holder: a new intent names it as writer, and it takes the steps
over at its next reconcile (``progress.hand_over``).

A silo that runs on writes a step's record until it lands (reconciling no flow whose record is
still on its way), and its intent's ``sched`` too (holding the intent as its own launch
meanwhile), and reads an outcome whose write was in doubt from the shard log at once
(``SiloHooks.attempt_unsure``); a success whose removal a compaction folded away (the log then
says only that the job ended) is recorded as its silo saw it. Once a flow's ``cancel`` is in its
log no step's attempt starts (``FlowHooks.admit``): a job its paused writer adds after the cancel
returned is refused at its start, as is a job of a step whose outcome the log holds (its paused
writer added it after a taker had searched its silo and run the step). Each start is claimed in
the log before it is made (a ``run`` naming its copy's shard): a copy of the step's job in another
shard waits while the one that started may run, for a taker's search misses a job that ran before
its shard was compacted, and adds it again. The remaining window is a silo killed after a step's
``remove`` is durable and before its hook wrote ``ok``, with the shard deleted before any
reconcile looked: the step then runs twice (the simulator sees it in about one step start of a
hundred with kills every few seconds).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from cluster.flows.model import (
    CANCELLED_STEP,
    FAILED,
    FLOW_CANCELLED,
    FLOW_HALTED,
    FLOW_PREFIX,
    FLOW_RUNNING,
    FLOW_SUCCEEDED,
    PENDING,
    RETRYING,
    RUNNING,
    SUCCEEDED_STEP,
    TERMINAL_STEP_STATES,
    FlowPlan,
    FlowStatus,
    StepStatus,
)
from cluster.model.jobs import ScheduledJob
from cluster.model.wire import us_to_datetime
from storage import (
    AlreadyExists,
    Fenced,
    LogFull,
    LogWriter,
    NotFound,
    StorageError,
    Store,
    Unavailable,
    describe_damage,
    generation_name,
    read_log,
)
from storage.generations import NEXT_KEY, current_head
from storage.records import decode, encode

_CAS_ATTEMPTS = 50
_REPAIR_BACKOFF_S, _REPAIR_BACKOFF_MAX_S = 0.05, 2.0  # the most a writer waits, at random, after a repair lost a race
logger = logging.getLogger("timeshard.flows")

class Schedule(Protocol):
    """Durably add jobs and return the shard each went to: through the client, or a silo directly.

    ``suspects``: silos that may hold an earlier try of these very jobs (an intent taken over from
    a writer that may have scheduled them): jobs found there are answered with their shard and
    not added again (``cluster.runtime.scheduling``); ``settled``: holders searched without a wait."""

    def __call__(self, jobs: Sequence[ScheduledJob], suspects: Sequence[str] = ..., settled: Sequence[str] = ...,
                 /) -> Awaitable[Sequence[str | None]]:
        ...


class FlowLogDamaged(StorageError):
    """A flow log that cannot be folded: its definition or a record in it is not one a flow
    writes (a torn tail or a damaged frame is not this: see ``read_flow`` and ``repair``)."""


# -- the fold ---------------------------------------------------------------------------------


@dataclass
class StepState:
    state: str = PENDING
    attempts: int = 0
    phase: tuple[int, int] = (0, -1)  # (attempt, 0 run | 1 retry): later facts win, late ones are ignored
    next_retry_us: int | None = None
    started_us: int | None = None
    started_attempt: int = 0  # the attempt whose start ``started_us`` is
    started_shard: str | None = None  # the shard whose copy of the job made that start (None: not recorded)
    ended_us: int | None = None
    error: str | None = None
    token: str | None = None  # the intent that scheduled (or is scheduling) it
    shard: str | None = None
    due_us: int | None = None
    scheduled_us: int | None = None  # when the ``sched`` placing it was written: a takeover's job is due long before
    retried_us: int | None = None  # when its last attempt ended in a retry: an overdue job's retry is due before


@dataclass(frozen=True)
class Intent:
    token: str
    owner: str
    steps: tuple[str, ...]
    at_us: int
    settled: tuple[str, ...] = ()  # holders that refused the steps' takeover, nothing of it under way in them


@dataclass
class FlowState:
    """The fold of one flow log, plus the ETag and sequence number to append after it."""

    plan: FlowPlan
    etag: str
    last_seq: int
    steps: dict[str, StepState] = field(default_factory=dict)
    intents: dict[str, Intent] = field(default_factory=dict)
    confirmed: set[str] = field(default_factory=set)
    halted_by: str | None = None
    cancelled_us: int | None = None
    cancel_token: str | None = None  # the cancel record's, to tell the call that wrote it
    ended_us: int | None = None
    name: str = ""  # the generation read, where the next record goes (see ``update``)
    # The log read has a torn tail, or damaged frames (``damage`` says where, and the records
    # lost): the state is the fold of its whole records, and the next writer repairs it first.
    torn: bool = False
    damage: str | None = None

    @classmethod
    def fold(cls, records: Iterable[Any], etag: str, last_seq: int, *, name: str = "", torn: bool = False,
             damage: str | None = None) -> FlowState:
        it = iter(records)
        first = next(it)
        if first[0] != "flow":
            raise FlowLogDamaged(f"a flow log must start with its definition, not {first[0]!r}")
        state = cls(FlowPlan.from_wire(first[1]), etag, last_seq, name=name, torn=torn, damage=damage)
        state.steps = {s.name: StepState() for s in state.plan.steps}
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
            _, token, owner, steps, at = record[:5]
            if token in self.intents:
                return False
            self.intents[token] = Intent(token, owner, tuple(steps), at, tuple(record[5]) if len(record) > 5 else ())
            for name in steps:
                self.steps[name].token = token
                self.steps[name].phase = (0, -1)  # a (re)scheduled job counts its attempts afresh
                self.steps[name].started_attempt = 0
            return True
        if kind == "sched":
            _, token, placed, _ = record
            if token in self.confirmed:
                return False
            self.confirmed.add(token)
            for name, shard, due_us in placed:
                step = self.steps[name]
                if step.token != token and step.token in self.confirmed:
                    continue  # a taker scheduled it first, finding this one's job or proving it never landed
                # Its own; or a taker's intent is still unconfirmed: this writer's job is durable, so
                # the step is scheduled, and the taker, searching this writer's silo, finds it.
                step.token, step.shard, step.due_us, step.scheduled_us = token, shard, due_us, record[3]
            return True
        if kind == "cancel":
            if self.finished:
                return False
            self.cancelled_us = self.ended_us = record[1]
            self.cancel_token = record[2] if len(record) > 2 else None
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

    def _step_event(self, name: str, step: StepState, record: list[Any]) -> bool:
        kind, attempt = record[0], record[2]
        phase = (attempt, 0 if kind == "run" else 1)
        if kind == "run" and phase < step.phase and attempt == step.phase[0] and step.started_attempt != attempt:
            # The start of the attempt that just ended, written after its end (starts are recorded
            # in the background): it tells when the attempt started, and changes nothing else.
            step.started_us, step.started_attempt = record[-1], attempt
            return True
        if step.state in TERMINAL_STEP_STATES:
            return False  # the first outcome stands; a duplicate run of the step changes nothing
        if phase < step.phase:
            return False  # a start written after its own end, already known (or of an older attempt)
        step.phase, step.attempts = phase, max(step.attempts, attempt)
        at = record[-1]
        if kind == "run":
            step.state, step.started_us, step.started_attempt, step.next_retry_us = RUNNING, at, attempt, None
            step.started_shard = record[3] if len(record) > 4 else None
        elif kind == "retry":
            step.state, step.error, step.next_retry_us, step.retried_us = RETRYING, record[3], record[4], at
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

    def earlier_tries(self, step: str) -> list[Intent]:
        """The unconfirmed intents naming ``step`` since its last confirmed one, oldest first:
        each writer may have scheduled its job before it stopped."""
        tries: list[Intent] = []
        for intent in self.intents.values():  # in log order
            if step in intent.steps:
                tries = [] if intent.token in self.confirmed else [*tries, intent]
        return tries

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
                st.error, s.depends_on, self.plan.job_id(s.name), st.shard,
            )
            for s in self.plan.steps
            for st in (self.steps[s.name],)
        }
        return FlowStatus(self.plan.name, self.plan.id, self.state, self.halted_by, steps,
                          us_to_datetime(self.plan.created_us), at(self.ended_us))


# -- reading and writing a flow log -------------------------------------------------------------
#
# A flow log is a log of ``storage`` (``flows/<name>~<generation>``) that every writer appends to
# by compare-and-swap on its ETag. An append torn by a writer's crash leaves a tail no frame can
# follow; a frame whose bytes changed in the store costs its own records. Either way the log is
# read for its whole records, as a shard log is replayed, and its next writer first repairs it as
# a shard log's next owner does: ``LogWriter.claim`` (a damaged generation copied aside with
# ``keep_damaged``) and a rotation into a new generation holding the whole records. Nothing lost
# was acknowledged to anyone in a torn tail; what a damaged frame held is lost, as in a shard.


def log_base(flow: str) -> str:
    return FLOW_PREFIX + flow


def log_name(flow: str) -> str:
    """The first generation of ``flow``'s log: where it is created, and read while never repaired."""
    return generation_name(log_base(flow), 0)


async def create_log(store: Store, plan: FlowPlan) -> None:
    """Create ``plan``'s log holding its definition; ``AlreadyExists`` if the name is taken."""
    name = log_name(plan.name)
    etag = await store.create(name, {"flow_id": plan.id})
    await _first_only(store, plan.name, name, etag)
    await store.append_block(name, encode(0, [["flow", plan.to_wire()]]), etag)


async def _first_only(store: Store, flow: str, name: str, etag: str) -> None:
    """``AlreadyExists`` (the generation just created deleted again) if the flow's log was
    repaired into a later generation: its first one is gone, so creating it succeeded."""
    infos = [info for info in await store.list(log_base(flow) + "~") if info.name != name]
    if current_head(log_base(flow), infos) is not None:
        with contextlib.suppress(StorageError):
            await store.delete(name, etag)
        raise AlreadyExists(f"flow log {flow!r} already exists")


async def write_definition(store: Store, plan: FlowPlan) -> None:
    """Write ``plan`` into its flow's log, created but still empty (the call that created it
    failed before writing the definition); ``Fenced`` if anything is there by now."""
    log = await read_log(store, log_base(plan.name))
    if any(True for _ in log.records()):
        raise Fenced(f"flow log {plan.name!r} is no longer empty")
    if log.decoded.torn is not None or log.decoded.damaged:
        await repair(store, plan.name)  # its definition's own append, torn
        raise Fenced(f"flow log {plan.name!r} was repaired: read it again")
    await store.append_block(log.head.name, encode(0, [["flow", plan.to_wire()]]), log.etag)


async def read_flow(store: Store, flow: str) -> FlowState | None:
    """The flow's current state, None if there is no such flow (or its definition is not written
    yet). A torn tail or damaged frames leave out only their own records (``FlowState.torn``,
    ``FlowState.damage``); ``FlowLogDamaged`` if what is left cannot be a flow's."""
    try:
        fetched = await store.fetch(log_name(flow))
        name, data, etag = log_name(flow), fetched.data, fetched.etag
        # Empty, it is a flow being created, or the first generation created anew by a submit
        # of it (``create_log``) after a repair moved the log on: only the generations tell.
        # Taken for "no flow", a silo's record of a step's end was dropped as recorded and the
        # step ran again (simulator seed 202614 with every kind).
        repaired = NEXT_KEY in fetched.metadata or not data
    except NotFound:
        repaired = True  # no flow, or its first generation deleted by a repair
    if repaired:
        try:
            log = await read_log(store, log_base(flow))
        except NotFound:
            return None
        name, decoded, etag = log.head.name, log.decoded, log.etag
    else:
        decoded = decode(data)
    records = list(decoded.records())
    if not records:
        return None
    damage = describe_damage(decoded) if decoded.damaged else None
    return FlowState.fold(records, etag, decoded.last_seq, name=name, torn=decoded.torn is not None, damage=damage)


async def repair(store: Store, flow: str, *, full: bool = False) -> None:
    """Move ``flow``'s log, torn or damaged (or ``full``: its generation took the store's most
    blocks), into a new generation holding its whole records, as a shard log's claim and
    rotation do (``LogWriter``); a damaged generation is copied aside first.

    Another writer's append or repair meanwhile fences this one (``Fenced`` from the claim or
    the rotation's commit): the caller reads again, and repairs again if it must."""
    log = await read_log(store, log_base(flow))
    if log.decoded.torn is None and not log.decoded.damaged and not full:
        return
    records = list(log.records())
    writer = await LogWriter.claim(store, log, log.metadata, snapshot=lambda: records)
    try:
        await writer.rotate()
    finally:
        with contextlib.suppress(StorageError):
            await writer.close()
    logger.warning("flow log repaired", extra={"flow": flow, "damage": describe_damage(log.decoded),
                                                "generation": writer.generation})


Decide = Callable[[FlowState], list[list[Any]]]


async def update(store: Store, flow: str, decide: Decide) -> FlowState | None:
    """Append what ``decide`` asks for on the state just read; on a race, read and decide again.

    ``decide`` returns the records to append and has applied them to the state it was given
    (which is thrown away if the append loses). Returns the state after the write. A log torn or
    damaged is repaired first (``repair``): appended to, a torn tail would be taken for damage;
    one full goes on in a new generation the same way.
    """
    backoff = _REPAIR_BACKOFF_S
    for _ in range(_CAS_ATTEMPTS):
        state = await read_flow(store, flow)
        if state is None:
            return None
        records = decide(state)
        if not records:
            return state
        full = False
        if not state.torn and state.damage is None:
            try:
                appended = await store.append_block(state.name, encode(state.last_seq + 1, records), state.etag)
            except Fenced:
                continue
            except LogFull:  # the generation holds the store's most blocks: on in a new one
                full = True
            else:
                state.etag, state.last_seq = appended.etag, state.last_seq + len(records)
                return state
        try:
            await repair(store, flow, full=full)
        except (Fenced, AlreadyExists):
            # Another writer repairs it too, or appended: each claim fences the repair before it,
            # so writers that all repair at once would go on fencing each other; wait apart.
            # Drawn from a fresh id: ids are what a simulation makes replay (``uuid4``).
            await asyncio.sleep(random.Random(uuid.uuid4().int).uniform(0, backoff))
            backoff = min(2 * backoff, _REPAIR_BACKOFF_MAX_S)
    raise Unavailable(f"flow log {flow!r}: lost {_CAS_ATTEMPTS} races in a row")


def applied(state: FlowState, records: Sequence[list[Any]]) -> list[list[Any]]:
    """The ``records`` that change ``state``, applied to it: what a writer appends."""
    return [r for r in records if state.apply(r)]
