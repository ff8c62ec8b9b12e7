"""Flows without Ray: validation at submit, retry policies as job failure policies, the flow log's
fold, and concurrent writers on one flow log (memory store, the same ETag rules as Azure)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from cluster import Backoff, Flow, RetryPolicy, Step, Target
from cluster.flows.log import FlowState, create_log, read_flow, update
from cluster.flows.model import InvalidFlow, compile_flow, failure_policy
from cluster.flows.progress import Limits, advance, reconcile
from cluster.model.errors import InvalidPolicy
from cluster.model.policies import BackoffPolicy, DropPolicy
from cluster.model.wire import datetime_to_us, us_to_datetime
from storage import AlreadyExists, MemoryStore

T = Target.actor("worker")
S = timedelta(seconds=1)


def example(retry: RetryPolicy | None = None, **step_retry: RetryPolicy) -> Flow:
    """The reference's flow: a -> b -> {c, d} -> e."""
    deps = {"a": [], "b": ["a"], "c": ["b"], "d": ["b"], "e": ["c", "d"]}
    return Flow("example-flow", [Step(n, T, depends_on=d, retry=step_retry.get(n)) for n, d in deps.items()], retry=retry)


def plan_of(flow: Flow):
    return compile_flow(flow, flow_id="f1", created_us=0)


# -- validation -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flow", "field", "words"),
    [
        (Flow("f", [Step("a", T, depends_on=["c"]), Step("b", T, depends_on=["a"]), Step("c", T, depends_on=["b"])]),
         "steps", "cycle (a -> c -> b -> a)"),
        (Flow("f", [Step("a", T, depends_on=["zz"])]), "steps[0].depends_on", "unknown step"),
        (Flow("f", [Step("a", T), Step("a", T)]), "steps[1].name", "unique"),
        (Flow("f", [Step("a", T, depends_on=["a"])]), "steps[0].depends_on", "itself"),
        (Flow("f", []), "steps", "non-empty"),
        (Flow("bad name", [Step("a", T)]), "name", "letters, digits"),
        (Flow("f", [Step("a", 42)]), "steps[0].target", "Target"),
        (Flow("f", [Step("a", T, data=object())]), "steps[0].data", "msgpack"),
    ],
)
def test_a_malformed_flow_is_rejected_naming_the_field(flow, field, words):
    with pytest.raises(InvalidFlow) as info:
        flow.validate()
    assert info.value.field == field and words in str(info.value)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("retry", "field"),
    [
        (RetryPolicy(max_retries=-1), "max_retries"),
        (RetryPolicy(max_retries=True), "max_retries"),
        (RetryPolicy(policy="sometimes"), "policy"),
        (RetryPolicy(backoff=Backoff(type="linear")), "backoff.type"),
        (RetryPolicy(backoff=Backoff(base_delay="10m", max_delay="1m")), "backoff.max_delay"),
        (RetryPolicy(backoff=Backoff(base_delay="0s")), "backoff.base_delay"),
        (RetryPolicy(backoff=Backoff(base_delay="soon")), "backoff.base_delay"),
    ],
)
def test_a_bad_retry_policy_is_rejected_for_the_flow_and_for_a_step(retry, field):
    with pytest.raises(InvalidPolicy) as on_flow:
        Flow("f", [Step("a", T)], retry=retry).validate()
    assert on_flow.value.field == f"retry.{field}"
    with pytest.raises(InvalidPolicy) as on_step:
        Flow("f", [Step("a", T), Step("b", T, retry=retry)]).validate()
    assert on_step.value.field == f"steps[1].retry.{field}"


def test_steps_are_stored_dependencies_first():
    flow = Flow("f", [Step("e", T, depends_on=["c", "d"]), Step("c", T, depends_on=["b"]), Step("d", T, depends_on=["b"]),
                      Step("b", T, depends_on=["a"]), Step("a", T)])
    order = [s.name for s in plan_of(flow).steps]
    assert all(order.index(dep) < order.index(s.name) for s in flow.steps for dep in s.depends_on)


# -- retry policies as job failure policies --------------------------------------------------------


def test_defaults_follow_the_reference_no_retries_then_30s_doubling_to_5m():
    assert RetryPolicy() == RetryPolicy(max_retries=0, policy="on_failure", backoff=None)
    assert Backoff() == Backoff(type="exponential", base_delay="30s", max_delay="5m")
    policy = failure_policy(None)
    assert policy.max_retries == 0 and not policy.should_retry(False, 1)
    assert failure_policy(RetryPolicy(max_retries=9)).wait(5) == timedelta(minutes=5)


def test_exponential_backoff_doubles_up_to_max_delay_and_constant_does_not_grow():
    expo = failure_policy(RetryPolicy(3, backoff=Backoff(base_delay="5m", max_delay="60m")))
    assert isinstance(expo, BackoffPolicy) and expo.factor == 2.0 and expo.max_retries == 3
    assert [expo.wait(k) for k in (1, 2, 3, 4, 5)] == [timedelta(minutes=m) for m in (5, 10, 20, 40, 60)]
    # Volcano's own example: a constant 360 min base under the default 5 min cap is valid.
    const = failure_policy(RetryPolicy(1, backoff=Backoff(type="Constant", base_delay="360m")))
    assert const.factor == 1.0 and [const.wait(k) for k in (1, 2)] == [timedelta(minutes=360)] * 2


def test_strategies_on_failure_always_never():
    on_failure = failure_policy(RetryPolicy(2, "on_failure"))
    assert on_failure.should_retry(False, 1) and not on_failure.should_retry(True, 1)
    always = failure_policy(RetryPolicy(2, "Always"))  # Volcano's spelling works too
    assert always.should_retry(True, 2) and not always.should_retry(True, 3)
    assert isinstance(failure_policy(RetryPolicy(5, "never")), DropPolicy)


def test_a_step_policy_overrides_the_flow_policy_and_the_rest_inherit_it():
    plan = plan_of(example(RetryPolicy(1, backoff=Backoff(base_delay="1s")), b=RetryPolicy(3)))
    policies = {s.name: s.policy for s in plan.steps}
    assert policies["b"].max_retries == 3 and policies["b"].base_delay == timedelta(seconds=30)
    assert {policies[n].max_retries for n in "acde"} == {1} and policies["a"].base_delay == S


def test_a_step_job_carries_its_flow_in_metadata_and_a_deterministic_id():
    plan = plan_of(example())
    job = plan.job("c", us_to_datetime(0))
    assert job.id == plan.job_id("c") == f"f1-{plan.index('c')}"
    assert job.metadata == {"timeshard.flow": "example-flow", "timeshard.flow_id": "f1", "timeshard.step": "c"}
    assert job.name == "c" and job.target == T


# -- the fold ------------------------------------------------------------------------------------


def fold(*records):
    return FlowState.fold([["flow", plan_of(example()).to_wire()], *records], "etag", len(records))


def test_a_start_recorded_after_its_end_does_not_undo_it():
    state = fold(["run", "a", 1, 10], ["retry", "a", 1, "boom", 50, 20], ["run", "a", 1, 15])
    a = state.status().steps["a"]
    assert (a.state, a.attempts, a.error) == ("retrying", 1, "boom")
    assert datetime_to_us(a.next_retry) == 50
    state = fold(["run", "a", 1, 10], ["ok", "a", 1, 20], ["run", "a", 1, 15], ["fail", "a", 2, "late", 30])
    assert state.status().steps["a"].state == "succeeded", "the first outcome stands"


def test_a_start_recorded_after_its_end_still_tells_when_the_attempt_started():
    # A fast step: its hook's "ok" lands before the start, which is written in the background.
    state = fold(["ok", "a", 1, 20], ["run", "a", 1, 15])
    a = state.status().steps["a"]
    assert (a.state, a.attempts, datetime_to_us(a.started_at), datetime_to_us(a.ended_at)) == ("succeeded", 1, 15, 20)
    assert not state.apply(["run", "a", 1, 15]), "a duplicate start changes nothing"
    state = fold(["run", "a", 1, 10], ["retry", "a", 1, "boom", 50, 20], ["ok", "a", 2, 60], ["run", "a", 2, 55])
    a = state.status().steps["a"]
    assert (a.state, a.attempts, datetime_to_us(a.started_at)) == ("succeeded", 2, 55), "the last attempt's start"


def test_the_first_exhausted_step_halts_the_flow_and_is_named():
    state = fold(["ok", "a", 1, 1], ["fail", "c", 2, "x", 5], ["fail", "d", 1, "y", 6])
    status = state.status()
    assert (status.state, status.halted_by) == ("halted", "c")
    assert state.ready() == [], "nothing starts in a halted flow"


def test_dependants_are_ready_only_once_every_dependency_succeeded():
    state = fold(["intent", "t0", "x", ["a"], 0], ["ok", "a", 1, 1], ["intent", "t1", "x", ["b"], 1],
                 ["ok", "b", 1, 2], ["intent", "t2", "x", ["c", "d"], 2], ["ok", "c", 1, 3])
    assert state.ready() == []
    state.apply(["ok", "d", 1, 4])
    assert state.ready() == ["e"]


# -- concurrent writers on one flow log -------------------------------------------------------------


class Recorded:
    """A stand-in for a silo's schedule call: remembers what was scheduled, answers a shard name."""

    def __init__(self) -> None:
        self.jobs: list[str] = []
        self.suspects: list[str] = []

    async def __call__(self, jobs, suspects=()):
        await asyncio.sleep(0)  # let the other writer interleave
        self.jobs += [j.metadata["timeshard.step"] for j in jobs]
        self.suspects += suspects
        return ["shards/s0"] * len(jobs)


class InterleavingStore(MemoryStore):
    """Yields after every read, so concurrent writers all read before any of them appends."""

    async def fetch(self, name, offset=0):
        fetched = await super().fetch(name, offset)
        await asyncio.sleep(0.01)
        return fetched


async def test_two_parents_finishing_at_once_start_their_child_once():
    store = InterleavingStore()
    plan = plan_of(example())
    await create_log(store, plan)
    schedule = Recorded()
    await advance(store, "example-flow", "silo0#1", schedule)
    for step in "ab":
        await advance(store, "example-flow", "silo0#1", schedule, [["ok", step, 1, 1]])
    await asyncio.gather(
        advance(store, "example-flow", "silo0#1", schedule, [["ok", "c", 1, 2]]),
        advance(store, "example-flow", "silo1#1", schedule, [["ok", "d", 1, 2]]),
    )
    assert sorted(schedule.jobs) == ["a", "b", "c", "d", "e"], "every step scheduled exactly once"
    state = await read_flow(store, "example-flow")
    assert state is not None and state.unconfirmed() == [] and state.steps["e"].shard == "shards/s0"
    assert state.status().steps["e"].shard == "shards/s0", "the status names the shard the dashboard links to"


async def test_an_intent_left_by_a_dead_writer_is_taken_over_once():
    store = InterleavingStore()
    await create_log(store, plan_of(example()))
    # A silo wrote its intent for "a" and died before scheduling it.
    await update(store, "example-flow", lambda s: [r for r in [["intent", "t0", "3#1", ["a"], 0]] if s.apply(r)])
    schedule = Recorded()
    limits = Limits(grace_us=60_000_000, attempt_us=10_000_000, staging_us=10_000_000, suspicion_us=2_000_000)
    await asyncio.gather(*(reconcile(store, "example-flow", f"{i}#1", schedule, limits, members={}) for i in range(3)))
    assert schedule.jobs == ["a"]
    assert schedule.suspects == ["3#1"], "the dead writer may have scheduled it: its incarnation is searched for"
    state = await read_flow(store, "example-flow")
    assert state is not None and state.unconfirmed() == []


async def test_resubmitting_a_name_is_refused_by_the_store():
    store = MemoryStore()
    await create_log(store, plan_of(example()))

    with pytest.raises(AlreadyExists):
        await create_log(store, plan_of(example()))
