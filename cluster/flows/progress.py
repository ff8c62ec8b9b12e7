"""Moving a flow on: schedule the steps an event made ready, and recover what a crash left half done.

See ``cluster.flows.log`` for the records and the crash cases this module handles.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cluster.flows.log import FlowState, Intent, Schedule, StepState, applied, read_flow, update
from cluster.flows.model import PENDING, RETRYING, RUNNING, TERMINAL_STEP_STATES
from cluster.model.clock import wall_clock_us
from cluster.model.wire import datetime_to_us, us_to_datetime
from cluster.runtime.membership import Member, parse_owner
from cluster.runtime.shardlog import ADD, CANCELLED, EXHAUSTED, REMOVE, SNAPSHOT, SUCCEEDED
from storage import NotFound, Store, read_log

log = logging.getLogger("timeshard.flows")


# -- moving a flow on -----------------------------------------------------------------------------


Now = Callable[[], int]
"""The wall clock (µs) a writer times its records and its steps' due times by: a silo's is the
store's time as it reads it (``SiloView.clock``), so a step is due when its silo says "now"."""


async def advance(store: Store, flow: str, owner: str, schedule: Schedule,
                  events: Sequence[list[Any]] = (), *, retake: dict[str, str | None] | None = None,
                  now_us: Now = wall_clock_us) -> FlowState | None:
    """Record ``events``, then schedule every step they made ready, and the steps in ``retake``.

    ``retake`` maps steps to the intent token they had when a crash was diagnosed; each is
    scheduled again only if that is still so on the state read under the CAS. Only the writer
    whose frame lands schedules: its intent carries a fresh token.
    """
    token = uuid.uuid4().hex[:16]
    retake = retake or {}

    def decide(state: FlowState) -> list[list[Any]]:
        out = applied(state, events)
        if state.finished:
            return out
        steps = [s for s, seen in retake.items() if state.steps[s].token == seen and state.steps[s].state not in TERMINAL_STEP_STATES]
        steps += [s for s in state.ready() if s not in steps]
        if steps:
            out += applied(state, [["intent", token, owner, steps, now_us()]])
        return out

    state = await update(store, flow, decide)
    if state is None or token not in state.intents:
        return state
    return await launch(store, state, state.intents[token], schedule, now_us=now_us)


async def launch(store: Store, state: FlowState, intent: Intent, schedule: Schedule, *,
                 now_us: Now = wall_clock_us) -> FlowState | None:
    """Schedule the jobs of ``intent``'s steps, then confirm them (with their shards) in the log."""
    now = us_to_datetime(now_us())
    jobs = [state.plan.job(step, now) for step in intent.steps]
    shards = await schedule(jobs)
    placed = [[step, shard, datetime_to_us(now)] for step, shard in zip(intent.steps, shards, strict=True)]
    sched = ["sched", intent.token, placed, now_us()]
    return await update(store, state.plan.name, lambda s: applied(s, [sched]))


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
                    members: dict[str, Member], *, now_us: Now = wall_clock_us) -> FlowState | None:
    """Finish what crashed writers left half done in ``flow`` (see the module docstring)."""
    state = await read_flow(store, flow)
    if state is None or state.finished:
        return state
    now = now_us()
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
    return await advance(store, flow, owner, schedule, events, retake=retake, now_us=now_us)
