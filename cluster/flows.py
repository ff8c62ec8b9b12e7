"""Flows (Volcano JobFlow): a DAG of steps, each run as a job, with flow-wide and per-step retries.

    flow = Flow("example-flow", steps=[
        Step("a", Target.actor("etl")),
        Step("b", Target.actor("etl"), depends_on=["a"],
             retry=RetryPolicy(3, backoff=Backoff(base_delay="5m", max_delay="60m"))),
        Step("c", Target.actor("etl"), depends_on=["b"]),
        Step("d", Target.actor("etl"), depends_on=["b"]),
        Step("e", Target.actor("gpu"), depends_on=["c", "d"]),
    ], retry=RetryPolicy(max_retries=1, backoff=Backoff(base_delay="1m")))
    await client.flows.submit(flow)
    status = await client.flows.get("example-flow")   # FlowStatus: state, halted_by, steps

**Semantics.** A step starts once every step it depends on succeeded. Its job retries by the
step's ``RetryPolicy``, else the flow's, else ``RetryPolicy()`` (no retries): ``on_failure``
retries failures only, ``always`` re-runs a succeeded step until it has run ``max_retries + 1``
times (for idempotent checks; the step succeeds if its last run does), ``never`` does not retry.
The wait before retry k is ``base_delay`` (``constant``) or ``min(max_delay, base_delay *
2**(k-1))`` (``exponential``); no ``backoff`` means ``Backoff()``'s defaults, 30 s doubling to
5 min (the reference's). A step that exhausts its retries **halts** the flow: no step that
depends on it (or on anything not yet started) starts, steps already scheduled finish, and
``FlowStatus.halted_by`` names it.

**Mapping onto jobs.** Each step is one job (``ScheduledJob``) whose target and data are the
step's, whose metadata carries ``timeshard.flow`` / ``timeshard.flow_id`` / ``timeshard.step``,
whose name is the step's name, and whose failure policy is the step's ``RetryPolicy`` as
``FailurePolicy.backoff(base, max, factor 2 | 1, max_retries, strategy=policy)``
(``FailurePolicy.drop()`` for ``never``). Progress and durability live in ``cluster.flowlog``.

**Validation** happens in ``submit`` (and ``Flow.validate()``), before anything is written:
every problem raises ``InvalidFlow`` or ``InvalidPolicy`` (both ``ValueError``) naming the field,
e.g. ``steps[2].depends_on``, ``retry.max_retries``, ``steps[1].retry.backoff.max_delay``.
Constant back-off ignores ``max_delay`` (Volcano's own example gives a constant 360 min base
under the 5 min default cap); for exponential back-off ``max_delay`` may not be below
``base_delay``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from cluster.errors import InvalidPolicy, ValidationError
from cluster.flowlog import (
    FLOW_PREFIX,
    TERMINAL_STEP_STATES,
    FlowPlan,
    FlowState,
    FlowStatus,
    StepPlan,
    StepStatus,
    advance,
    create_log,
    read_flow,
    update,
)
from cluster.jobs import ScheduledJob, Target
from cluster.policies import FailurePolicy
from cluster.queue import wall_clock_us
from cluster.times import ACCEPTED_DURATIONS, parse_duration
from cluster.wire import us_to_datetime
from storage import AlreadyExists, Store, open_store

if TYPE_CHECKING:
    from cluster.client import Client

__all__ = [
    "Backoff", "Flow", "FlowExists", "FlowStatus", "Flows", "InvalidFlow", "RetryPolicy", "Step", "StepStatus",
]

# Our names and Volcano's (OnFailure, Always, Never), compared without case and underscores.
RETRY_STRATEGIES = {"onfailure": "on_failure", "always": "always", "never": "never"}
BACKOFF_FACTORS = {"exponential": 2.0, "constant": 1.0}
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,199}")
_NAME_RULE = "must be 1-200 characters: letters, digits and . _ : - (starting with a letter or digit)"


class InvalidFlow(ValidationError):
    """A flow whose shape breaks a rule: a cycle, an unknown dependency, a duplicate step name ..."""


class FlowExists(InvalidFlow):
    """A different flow already has this name (submitting the same definition again is fine)."""


@dataclass(frozen=True)
class Backoff:
    """How long to wait before each retry: ``constant`` waits ``base_delay`` every time,
    ``exponential`` doubles it from ``base_delay`` up to ``max_delay``. Durations accept
    timedelta or text (``"30s"``, ``"5m"``, ``"PT1H"``)."""

    type: str = "exponential"
    base_delay: timedelta | str = "30s"
    max_delay: timedelta | str = "5m"


@dataclass(frozen=True)
class RetryPolicy:
    """When a step's job runs again: at most ``max_retries`` times after its first run, on
    ``policy`` ``on_failure`` (default), ``always`` or ``never``, waiting per ``backoff``."""

    max_retries: int = 0
    policy: str = "on_failure"
    backoff: Backoff | None = None


@dataclass(frozen=True)
class Step:
    """One step: call ``target`` (a ``Target`` or a named actor's name) with ``data`` once every
    step named in ``depends_on`` succeeded; ``retry`` overrides the flow's policy."""

    name: str
    target: Target | str
    data: Any = None
    depends_on: Sequence[str] = field(default=())
    retry: RetryPolicy | None = None

    def __post_init__(self) -> None:
        # A tuple, so the frozen step stays immutable and hashable-looking like its siblings.
        if isinstance(self.depends_on, (list, tuple)):
            object.__setattr__(self, "depends_on", tuple(self.depends_on))


@dataclass(frozen=True)
class Flow:
    """A named DAG of steps with a flow-wide ``retry`` policy each step may override."""

    name: str
    steps: Sequence[Step]
    retry: RetryPolicy | None = None

    def __post_init__(self) -> None:
        if isinstance(self.steps, list):
            object.__setattr__(self, "steps", tuple(self.steps))

    def validate(self) -> None:
        """Raise ``InvalidFlow`` / ``InvalidPolicy`` naming the first broken rule; else nothing."""
        compile_flow(self, flow_id="0", created_us=0)


# -- validation ----------------------------------------------------------------------------------


def failure_policy(retry: RetryPolicy | None, where: str = "retry") -> FailurePolicy:
    """The job failure policy that implements ``retry`` (None: ``RetryPolicy()``)."""
    retry = RetryPolicy() if retry is None else retry
    if not isinstance(retry, RetryPolicy):
        raise InvalidPolicy(where, "must be a RetryPolicy or None", retry)
    retries = retry.max_retries
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise InvalidPolicy(f"{where}.max_retries", "must be an int >= 0 (retries after the first run)", retries)
    key = retry.policy.replace("_", "").lower() if isinstance(retry.policy, str) else ""
    strategy = RETRY_STRATEGIES.get(key)
    if strategy is None:
        raise InvalidPolicy(f"{where}.policy", "must be one of on_failure, always, never", retry.policy)
    backoff = Backoff() if retry.backoff is None else retry.backoff
    if not isinstance(backoff, Backoff):
        raise InvalidPolicy(f"{where}.backoff", "must be a Backoff or None", backoff)
    factor = BACKOFF_FACTORS.get(backoff.type.lower() if isinstance(backoff.type, str) else "")
    if factor is None:
        raise InvalidPolicy(f"{where}.backoff.type", "must be exponential or constant", backoff.type)
    base = _duration(backoff.base_delay, f"{where}.backoff.base_delay")
    if base <= timedelta(0):
        raise InvalidPolicy(f"{where}.backoff.base_delay", "must be positive (a zero wait retries in a tight loop)", base)
    cap = _duration(backoff.max_delay, f"{where}.backoff.max_delay")
    if factor == 1.0:
        cap = base  # constant: the cap plays no part
    elif cap < base:
        raise InvalidPolicy(f"{where}.backoff.max_delay", f"must be at least base_delay ({base})", cap)
    if strategy == "never":
        return FailurePolicy.drop()
    return FailurePolicy.backoff(base, cap, factor, retries, strategy=strategy)


def _duration(value: Any, where: str) -> timedelta:
    if not isinstance(value, (timedelta, str)):
        raise InvalidPolicy(where, "must be a duration", value, accepted=ACCEPTED_DURATIONS)
    try:
        return parse_duration(value, field=where)
    except ValidationError as exc:
        raise InvalidPolicy(where, exc.rule, value, accepted=ACCEPTED_DURATIONS) from None


def _label(value: Any, where: str) -> str:
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise InvalidFlow(where, _NAME_RULE, value)
    return value


def _target(value: Any, where: str) -> Target:
    if isinstance(value, str):
        return Target.actor(value)
    if not isinstance(value, Target):
        raise InvalidFlow(where, "must be a Target (Target.actor(...) / Target.grain(...)) or an actor name", value)
    return value


def _topological(steps: Sequence[Step]) -> list[Step]:
    """Steps in an order where each comes after its dependencies; ``InvalidFlow`` on a cycle."""
    by_name = {s.name: s for s in steps}
    order: list[Step] = []
    marks: dict[str, int] = {}  # 1 visiting, 2 done

    def visit(step: Step, path: list[str]) -> None:
        mark = marks.get(step.name)
        if mark == 2:
            return
        if mark == 1:
            cycle = path[path.index(step.name):] + [step.name]
            raise InvalidFlow("steps", f"depends_on must not form a cycle ({' -> '.join(cycle)})")
        marks[step.name] = 1
        for dep in step.depends_on:
            visit(by_name[dep], path + [step.name])
        marks[step.name] = 2
        order.append(step)

    for step in steps:
        visit(step, [])
    return order


def compile_flow(flow: Flow, *, flow_id: str, created_us: int,
                 resolve: Callable[[Target], Target] = lambda t: t) -> FlowPlan:
    """Validate ``flow`` and return what its log stores; raises naming the field on bad input.

    ``resolve`` places a bare actor name in a namespace (the client's: where the caller's
    actors live), as ``schedule_job`` does.
    """
    if not isinstance(flow, Flow):
        raise InvalidFlow("flow", "must be a Flow", flow)
    _label(flow.name, "name")
    if not isinstance(flow.steps, (list, tuple)) or not flow.steps:
        raise InvalidFlow("steps", "must be a non-empty list of Step", flow.steps)
    flow_policy = failure_policy(flow.retry, "retry")
    seen: set[str] = set()
    for i, step in enumerate(flow.steps):
        if not isinstance(step, Step):
            raise InvalidFlow(f"steps[{i}]", "must be a Step", step)
        name = _label(step.name, f"steps[{i}].name")
        if name in seen:
            raise InvalidFlow(f"steps[{i}].name", "must be unique within the flow", name)
        seen.add(name)
    names = {s.name for s in flow.steps}
    plans: dict[str, StepPlan] = {}
    for i, step in enumerate(flow.steps):
        deps = step.depends_on
        if isinstance(deps, str) or not isinstance(deps, (list, tuple)):
            raise InvalidFlow(f"steps[{i}].depends_on", "must be a list of step names", deps)
        for dep in deps:
            if dep not in names:
                raise InvalidFlow(f"steps[{i}].depends_on", f"names an unknown step (steps: {', '.join(sorted(names))})", dep)
            if dep == step.name:
                raise InvalidFlow(f"steps[{i}].depends_on", "a step cannot depend on itself", dep)
        if len(set(deps)) != len(deps):
            raise InvalidFlow(f"steps[{i}].depends_on", "must not name a step twice", list(deps))
        policy = flow_policy if step.retry is None else failure_policy(step.retry, f"steps[{i}].retry")
        target = resolve(_target(step.target, f"steps[{i}].target"))
        plans[step.name] = StepPlan(step.name, target, step.data, tuple(deps), policy)
    ordered = tuple(plans[s.name] for s in _topological(flow.steps))
    plan = FlowPlan(flow.name, flow_id, ordered, created_us)
    now = us_to_datetime(created_us)
    for i, step in enumerate(flow.steps):
        try:
            plan.job(step.name, now)  # target and data get the same checks as any job
        except ValidationError as exc:
            raise InvalidFlow(f"steps[{i}].{exc.field}", exc.rule, exc.value) from None
    return plan


# -- the client's API -------------------------------------------------------------------------------


class Flows:
    """``client.flows``: submit, inspect, cancel and list flows. Reads and writes flow logs in the
    cluster's store (its URL comes from a silo) and schedules root steps through the silos."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self._owner = f"client-{uuid.uuid4().hex[:8]}"
        self._store_url: str | None = None

    async def _open(self) -> Store:
        if self._store_url is None:
            self._store_url = (await self._client.describe())["store_url"]
        return open_store(self._store_url)

    async def _schedule(self, jobs: Sequence[ScheduledJob]) -> list[str | None]:
        return [job.shard for job in await self._client.submit_jobs(jobs)]

    async def submit(self, flow: Flow) -> FlowStatus:
        """Validate ``flow``, store it and start its root steps; returns its status.

        Submitting the same definition under the same name again returns the existing flow;
        a different definition under a taken name raises ``FlowExists``.
        """
        plan = compile_flow(flow, flow_id=uuid.uuid4().hex[:16], created_us=wall_clock_us(),
                            resolve=self._client.resolve_target)
        async with await self._open() as store:
            try:
                await create_log(store, plan)
            except AlreadyExists:
                existing = await read_flow(store, flow.name)
                if existing is None or _definition(existing.plan) != _definition(plan):
                    raise FlowExists("name", "a different flow already has this name", flow.name) from None
                return existing.status()
            state = await advance(store, plan.name, self._owner, self._schedule)
        assert state is not None
        return state.status()

    async def get(self, name: str) -> FlowStatus | None:
        """The flow's state and every step's, or None if there is no flow of that name."""
        async with await self._open() as store:
            state = await read_flow(store, name)
        return None if state is None else state.status()

    async def list(self) -> list[FlowStatus]:
        """Every flow's status, in name order."""
        async with await self._open() as store:
            infos = await store.list(FLOW_PREFIX)
            states = [await read_flow(store, info.name[len(FLOW_PREFIX):].rpartition("~")[0]) for info in infos]
        return [s.status() for s in states if s is not None]

    async def cancel(self, name: str) -> bool:
        """Cancel a running flow: no step starts any more, scheduled ones are cancelled (a running
        attempt finishes first). True if it was running; False if finished or unknown."""
        async with await self._open() as store:
            wrote: list[list[Any]] = []

            def decide(s: FlowState) -> list[list[Any]]:
                wrote[:] = [r for r in [["cancel", wall_clock_us()]] if s.apply(r)]
                return wrote

            state = await update(store, name, decide)
            if state is None or not wrote:
                return False
            # An intent written just before the cancel is being scheduled: let its writer confirm.
            for _ in range(100):
                if not state.unconfirmed():
                    break
                await asyncio.sleep(0.05)
                state = await read_flow(store, name)
                assert state is not None
            cancelled = []
            for plan in state.plan.steps:
                step = state.steps[plan.name]
                if step.state in TERMINAL_STEP_STATES:
                    continue
                if step.shard is not None:
                    job = state.plan.job(plan.name, us_to_datetime(step.due_us or state.plan.created_us))
                    await self._client.try_cancel_job(dataclasses.replace(job, shard=step.shard))
                cancelled.append(plan.name)
            if cancelled:
                record = ["cancelled", cancelled, wall_clock_us()]
                await update(store, name, lambda s: [record] if s.apply(record) else [])
        return True


def _definition(plan: FlowPlan) -> list[Any]:
    return plan.to_wire()[2]

