"""Moving a flow on: schedule the steps an event made ready, and recover what a crash left half done.

See ``cluster.flows.log`` for the records and the crash cases this module handles.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from cluster.flows.log import FlowState, Intent, Schedule, StepState, applied, read_flow, update
from cluster.flows.model import PENDING, RETRYING, RUNNING, TERMINAL_STEP_STATES
from cluster.model.clock import wall_clock_us
from cluster.model.errors import EarlierTryUnsettled
from cluster.model.wire import us_to_datetime
from cluster.runtime.membership import Member, parse_owner
from cluster.runtime.shardlog import ADD, CANCELLED, EXHAUSTED, REMOVE, SNAPSHOT, SUCCEEDED
from storage import NotFound, StorageError, Store, read_log

log = logging.getLogger("timeshard.flows")


# -- moving a flow on -----------------------------------------------------------------------------


Now = Callable[[], int]
"""The wall clock (µs) a writer times its records and its steps' due times by: a silo's is the
store's time as it reads it (``SiloView.clock``), so a step is due when its silo says "now"."""


async def advance(store: Store, flow: str, owner: str, schedule: Schedule,
                  events: Sequence[list[Any]] = (), *, retake: dict[str, str | None] | None = None,
                  now_us: Now = wall_clock_us, silos: Collection[str] = (), lost: Collection[str] = (),
                  launching: set[str] | None = None) -> FlowState | None:
    """Record ``events``, then schedule every step they made ready, and the steps in ``retake``.

    ``retake`` maps steps to the intent token they had when a crash was diagnosed; each is
    scheduled again only if that is still so on the state read under the CAS, and that intent
    is still unconfirmed — unless the step is in ``lost``: its job, confirmed, was found gone
    (a diagnosis read before a slow writer confirmed would otherwise schedule it twice). Only the writer
    whose frame lands schedules: its intent carries a fresh token. A step taken over from
    intents never confirmed may have been scheduled by any of them: its job goes out as the
    first of them sent it (due at that intent's time, so into the same window), naming each
    writer's silo as a suspect — every one of ``silos`` for a client's intent — so that a copy
    one of them added is found, not added again.
    ``launching`` holds the tokens of this writer's intents whose launch is under way.
    """
    token = uuid.uuid4().hex[:16]
    retake = retake or {}

    def decide(state: FlowState) -> list[list[Any]]:
        out = applied(state, events)
        if state.finished:
            return out
        steps = [s for s, seen in retake.items()
                 if state.steps[s].token == seen and state.steps[s].state not in TERMINAL_STEP_STATES
                 and (s in lost or seen not in state.confirmed)]
        steps += [s for s in state.ready() if s not in steps]
        if steps:
            out += applied(state, [["intent", token, owner, steps, now_us()]])
        return out

    launching = set() if launching is None else launching
    launching.add(token)
    try:
        state = await update(store, flow, decide)
        if state is None or token not in state.intents:
            return state
        try:
            return await launch(store, state, state.intents[token], schedule, now_us=now_us, silos=silos)
        except EarlierTryUnsettled as exc:
            await hand_over(store, flow, state.intents[token], owner, exc.holders, now_us=now_us)
            raise
    finally:
        launching.discard(token)


async def hand_over(store: Store, flow: str, intent: Intent, owner: str, holders: Sequence[str], *,
                    now_us: Now = wall_clock_us) -> None:
    """Give ``intent``'s steps, whose launch could not settle an earlier try, to the one silo
    that can: the live incarnation holding every shard the earlier try may still reach.

    Only a shard's holder knows whether a call of the earlier try is still under way in it; any
    other silo waits until the shard leaves it, which need not happen (a shard holding a paused
    job lives on). Taking the step over again by itself each round, the taker kept its intent
    young, so the holder, seeing a live writer's fresh intent, never took it (simulator seeds
    90830 and 90973 with flows: a client's steps never ran). The new intent names the holder as
    its writer: the holder takes it over at its next reconcile, as its own whose launch is not
    under way, and every other silo waits for it as for any live writer. Two holders or more:
    no silo can settle it alone, and the step waits for their shards to leave them. The new
    intent names the refused one: that call wrote nothing, so its writer is no suspect of the
    holder's (``FlowState.earlier_tries``)."""
    me, holder = parse_owner(owner), parse_owner(holders[0]) if len(holders) == 1 else None
    if me is None or holder is None or holder[0] == me[0]:
        return  # a client's; its own (settled for it) or an earlier incarnation's, which adoption settles

    def decide(state: FlowState) -> list[list[Any]]:
        steps = [s for s in intent.steps if state.steps[s].token == intent.token
                 and intent.token not in state.confirmed and state.steps[s].state not in TERMINAL_STEP_STATES]
        if state.finished or not steps:
            return []
        # Names the refused intent: its call wrote nothing, so its writer is no suspect of the holder's.
        return applied(state, [["intent", uuid.uuid4().hex[:16], holders[0], steps, now_us(), intent.token]])

    try:
        await update(store, flow, decide)
    except StorageError as exc:
        log.warning("could not hand a flow step to the silo that can settle it", extra={"error": repr(exc)})


async def launch(store: Store, state: FlowState, intent: Intent, schedule: Schedule, *,
                 now_us: Now = wall_clock_us, silos: Collection[str] = ()) -> FlowState | None:
    """Schedule the jobs of ``intent``'s steps, then confirm them (with their shards) in the log.

    Each job is due at its intent's time, as the log says (at its first earlier try's, when
    taken over): every writer of a step sends the same job, into the same window, where a
    taker's suspects are searched."""
    # Read from the log, not carried from the decision: a decision made again (its append's
    # answer lost, the append landed) sees its own intent there, and must send the same jobs.
    earlier = {step: [i for i in state.earlier_tries(step) if i.token != intent.token] for step in intent.steps}
    due = {step: earlier[step][0].at_us if earlier[step] else intent.at_us for step in intent.steps}
    jobs = [state.plan.job(step, us_to_datetime(due[step])) for step in intent.steps]
    suspects = sorted({silo for tries in earlier.values() for i in tries for silo in _silos_of(i.owner, silos)})
    shards = await (schedule(jobs, suspects) if suspects else schedule(jobs))
    placed = [[step, shard, due[step]] for step, shard in zip(intent.steps, shards, strict=True)]
    sched = ["sched", intent.token, placed, now_us()]
    try:
        return await update(store, state.plan.name, lambda s: applied(s, [sched]))
    except StorageError as exc:
        raise Unconfirmed(state.plan.name, sched, exc) from exc


class Unconfirmed(StorageError):
    """An intent's jobs are durable, but its ``sched`` could not be written yet.

    Its writer writes it until it lands, holding the intent as its own launch meanwhile: taken
    over, the step is searched for where the jobs landed, and a job that ran meanwhile and left
    with its drained shard is added again (simulator seed 93052 with flows: the silo, resumed
    from a SIGSTOP, failed to confirm, took its own intent over at once, and ran the step that
    had just succeeded a second time)."""

    def __init__(self, flow: str, record: list[Any], cause: BaseException) -> None:
        super().__init__(f"flow {flow!r}: jobs scheduled, their confirmation not written: {cause!r}")
        self.flow, self.record, self.token = flow, record, str(record[1])


def _silos_of(owner: str, silos: Collection[str]) -> Collection[str]:
    """The suspects a writer's schedule call may have reached: a silo writer's own incarnation
    ("s0#2": its next one, holding an old shard of the window, sends no earlier try), or every
    silo, any incarnation, for a client."""
    return silos if parse_owner(owner) is None else (owner,)


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


def _silent(step: StepState, limits: Limits, now_us: int) -> bool:
    """Whether a scheduled step has been quiet for longer than its job can legitimately take."""
    if step.state == RUNNING and step.started_us is not None:
        return now_us - step.started_us > limits.attempt_us
    if step.state == RETRYING and step.next_retry_us is not None:
        # From its retry time or, later, from when the attempt before it ended: a policy counts
        # the retry from the occurrence's due time, so an overdue job's is due at once, maybe
        # minutes back. Measured from that, a step was "silent" while its next attempts ran and
        # their records waited on a full flow log, its shard was read with its removal compacted
        # away, and it ran again beside its live silo (simulator seed 201061 with every kind).
        return now_us - max(step.next_retry_us, step.retried_us or 0) > limits.staging_us + limits.attempt_us
    if step.state == PENDING and step.due_us is not None:
        # From its due time or, later, from when it was scheduled: a step taken over goes out due
        # at its first try's time, maybe minutes back. Measured from that, it was "silent" at
        # once, its shard read while its start and end were still on their way to the flow log,
        # and a job that had run with its shard drained and deleted was run again (simulator
        # with flows and torn_logs, seed 94).
        return now_us - max(step.due_us, step.scheduled_us or 0) > limits.staging_us + limits.attempt_us
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
                    members: dict[str, Member], *, now_us: Now = wall_clock_us,
                    launching: set[str] | None = None) -> FlowState | None:
    """Finish what crashed writers left half done in ``flow`` (see the module docstring).

    ``launching``: the tokens of ``owner``'s intents whose launch is under way (``advance``).
    Given, an intent of ``owner``'s own that is unconfirmed and not among them is one whose
    launch failed (its schedule call refused): taken over like a dead writer's, without waiting
    out the grace period.
    """
    state = await read_flow(store, flow)
    if state is None or state.finished:
        return state
    now = now_us()
    retake: dict[str, str | None] = {
        s: i.token for i in state.unconfirmed()
        if (launching is not None and i.owner == owner and i.token not in launching)
        or _writer_gone(i.owner, i.at_us, members, limits, now)
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
    lost = [s for s, token in retake.items() if token in state.confirmed]
    return await advance(store, flow, owner, schedule, events, retake=retake, now_us=now_us, silos=members, lost=lost,
                         launching=launching)
