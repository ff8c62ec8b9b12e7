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
(``FailurePolicy.drop()`` for ``never``). Progress and durability live in ``cluster.flows.log``.

**Validation** happens in ``submit`` (and ``Flow.validate()``), before anything is written:
every problem raises ``InvalidFlow`` or ``InvalidPolicy`` (both ``ValueError``) naming the field,
e.g. ``steps[2].depends_on``, ``retry.max_retries``, ``steps[1].retry.backoff.max_delay``.
Constant back-off ignores ``max_delay`` (Volcano's own example gives a constant 360 min base
under the 5 min default cap); for exponential back-off ``max_delay`` may not be below
``base_delay``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from cluster.model.errors import InvalidPolicy, ValidationError
from cluster.model.jobs import ScheduledJob, Target
from cluster.model.policies import FailurePolicy
from cluster.model.times import ACCEPTED_DURATIONS, parse_duration
from cluster.model.wire import us_to_datetime

FLOW_PREFIX = "flows/"
FLOW_META = "timeshard.flow"  # job metadata: the flow's name
FLOW_ID_META = "timeshard.flow_id"  # ... its id (a resubmitted name gets a new one)
STEP_META = "timeshard.step"  # ... and the step's name
# How long a silo's admission of a step's attempt holds (``FlowHooks.admit``): an attempt not sent
# within this many seconds of the read that admitted it is asked again. A cancel that returns no
# sooner than this after its record landed knows no step admitted before it starts after it.
ADMISSION_HOLDS_S = 2.0

PENDING, RUNNING, RETRYING, SUCCEEDED_STEP, FAILED, CANCELLED_STEP = (
    "pending", "running", "retrying", "succeeded", "failed", "cancelled",
)
FLOW_RUNNING, FLOW_SUCCEEDED, FLOW_HALTED, FLOW_CANCELLED = "running", "succeeded", "halted", "cancelled"
TERMINAL_STEP_STATES = (SUCCEEDED_STEP, FAILED, CANCELLED_STEP)

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
    again; ``error`` is the last failure; ``job_id`` names the step's job in the shard logs, and
    ``shard`` the shard its latest scheduling went to (None before the step was first scheduled).
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
    shard: str | None = None


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
