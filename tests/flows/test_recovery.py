"""Flows through failures, without Ray: a submit that failed half way, a step's record the store
refused, an outcome write in doubt, intents taken over from writers that may have scheduled
(memory store). Each case was found by the simulator's flows (``tests/sim/flows.py``)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest

from cluster import Flow, Step, Target
from cluster.flows import api as flow_api
from cluster.flows import hooks as flow_hooks
from cluster.flows.api import Flows
from cluster.flows.hooks import FlowHooks
from cluster.flows.log import Schedule, applied, create_log, read_flow, update
from cluster.flows.model import FLOW_PREFIX, compile_flow
from cluster.flows.progress import Limits, advance, reconcile
from cluster.model.clock import SYSTEM_CLOCK, Clock
from cluster.model.errors import EarlierTryUnsettled
from cluster.model.jobs import ScheduledJob
from cluster.model.options import ClusterOptions
from cluster.model.wire import datetime_to_us, pack, us_to_datetime
from cluster.runtime.hooks import AttemptEnd, AttemptEvent
from cluster.runtime.membership import ACTIVE, Member, Membership
from cluster.runtime.roles import Roles
from cluster.runtime.shardlog import SHARD_PREFIX, SNAPSHOT, SUCCEEDED, ShardState, add_op, remove_op
from storage import Fenced, LogWriter, MemoryStore, Store, Unavailable, generation_name, list_logs, read_log
from storage.records import encode
from tests.runtime.harness import OPTIONS, T0, LocalTransport, item, job, make_parts

T = Target.actor("worker", namespace="test")


def two_steps(name: str = "etl") -> Flow:
    return Flow(name, [Step("a", T), Step("b", T, depends_on=["a"])])


class FailingStore(MemoryStore):
    """Fails the ``n``-th call of a method (counted from 1) once, before it reaches the store."""

    def __init__(self, **fail_at: int) -> None:
        super().__init__()
        self.fail_at = dict(fail_at)
        self.calls: dict[str, int] = {}

    def _maybe_fail(self, method: str, name: str) -> None:
        if not name.startswith(FLOW_PREFIX):
            return
        self.calls[method] = self.calls.get(method, 0) + 1
        if self.fail_at.get(method) == self.calls[method]:
            raise Unavailable(f"injected: {method} {name}")

    async def fetch(self, name: str, offset: int = 0) -> Any:
        self._maybe_fail("fetch", name)
        return await super().fetch(name, offset)

    async def append_block(self, name: str, payload: bytes, if_match: str) -> Any:
        self._maybe_fail("append_block", name)
        return await super().append_block(name, payload, if_match)


class Submitter:
    """A ``JobSubmitter`` that adds jobs to no silo: it records them, each in ``shards/s0``."""

    def __init__(self) -> None:
        self.jobs: list[str] = []
        self.cancelled: list[str] = []

    async def try_cancel_job(self, job: ScheduledJob) -> bool:
        self.cancelled.append(job.metadata["timeshard.step"])
        return True

    async def submit_jobs(self, jobs: Sequence[ScheduledJob]) -> list[ScheduledJob]:
        self.jobs += [j.metadata["timeshard.step"] for j in jobs]
        return [dataclasses.replace(j, shard="shards/s0") for j in jobs]

    def resolve_target(self, target: Target) -> Target:
        return target

    async def describe(self) -> dict[str, Any]:
        raise AssertionError("the store is given")


class StoreFlows(Flows):
    def __init__(self, client: Any, store: Store) -> None:
        super().__init__(client)
        self._given = store

    async def _open(self) -> Store:
        return self._given


@pytest.mark.parametrize("fail", [
    {"fetch": 1},  # the definition written, the read before the root steps' intent failed
    {"append_block": 1},  # the log created, its definition never written
], ids=["after-the-definition", "before-the-definition"])
async def test_a_flow_submitted_again_after_a_failed_submit_runs(fail: dict[str, int]) -> None:
    store, submitter = FailingStore(**fail), Submitter()
    flows = StoreFlows(submitter, store)
    with pytest.raises(Unavailable):
        await flows.submit(two_steps())
    assert submitter.jobs == []
    status = await flows.submit(two_steps())  # the same definition: "returns the existing flow"
    assert submitter.jobs == ["a"], "its root step is scheduled: nothing else would ever schedule it"
    assert status.state == "running"
    state = await read_flow(store, "etl")
    assert state is not None and state.steps["a"].shard == "shards/s0" and state.unconfirmed() == []


class LostAnswerStore(MemoryStore):
    """The ``n``-th append to a flow log lands, then answers ``Fenced`` (as Azure's retry does)."""

    def __init__(self, lose: int) -> None:
        super().__init__()
        self.lose, self.appends = lose, 0

    async def append_block(self, name: str, payload: bytes, if_match: str) -> Any:
        appended = await super().append_block(name, payload, if_match)
        self.appends += name.startswith(FLOW_PREFIX)
        if self.appends == self.lose:
            raise Fenced("injected: landed, its answer lost")
        return appended


async def test_a_cancel_whose_write_landed_with_its_answer_lost_returns_true_and_cancels_the_steps() -> None:
    """Read again, the flow is cancelled by this very call: answering False ("finished") would
    leave its steps' jobs running in a flow that never completes."""
    store, submitter = LostAnswerStore(lose=4), Submitter()  # definition, intent, sched; then the cancel
    flows = StoreFlows(submitter, store)
    await flows.submit(two_steps())
    assert await flows.cancel("etl") is True
    assert submitter.cancelled == ["a"], "the scheduled step's job is cancelled"
    status = await flows.get("etl")
    assert status is not None and status.state == "cancelled"


class View:
    """The ``SiloView`` a hook sees: one silo whose schedule calls are recorded."""

    owner = "s0#1"
    options: ClusterOptions = dataclasses.replace(OPTIONS, adoption_interval=timedelta(hours=1))
    clock: Clock = SYSTEM_CLOCK

    def __init__(self) -> None:
        self.scheduled: list[str] = []

    async def schedule(self, jobs: Sequence[tuple[str, int, bytes]], suspects: Sequence[str] = ()) -> list[str]:
        self.scheduled += [job_id for job_id, _, _ in jobs]
        return ["shards/s0"] * len(jobs)


async def started(store: Store, view: View) -> tuple[FlowHooks, Any]:
    plan = compile_flow(two_steps(), flow_id="f1", created_us=0)
    await create_log(store, plan)
    await advance(store, "etl", "client-1", Recorded())
    hooks = FlowHooks(store, view)
    event = AttemptEvent(plan.job("a", us_to_datetime(0)), "run-1", 1, 1, us_to_datetime(0), us_to_datetime(1),
                         "shards/20300101T000000.000000Z-s0.1-000001")
    return hooks, event


async def a_recorded(store: Store, tries: int = 100) -> Any:
    """The flow's state once its log says step a succeeded (polled every 10 ms), or as it last read."""
    for _ in range(tries):
        state = await read_flow(store, "etl")
        if state is not None and state.steps["a"].state == "succeeded":
            break
        await asyncio.sleep(0.01)
    return state


async def test_a_step_outcome_the_store_refused_is_recorded_once_it_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Given up on, the success is known only to its shard, which a drain deletes before
    reconcile reads it: the step would run again, and its dependants wait for that."""
    monkeypatch.setattr(flow_hooks, "RECORD_RETRY_S", 0.01)
    store, view = FailingStore(), View()
    hooks, event = await started(store, view)
    try:
        store.calls.clear()
        store.fail_at = {"append_block": 1}  # the first try's write of "a succeeded"
        await hooks.attempt_ended(event, AttemptEnd(True, None, us_to_datetime(2), None, None, True))
        state = await a_recorded(store)
        assert state is not None and state.steps["a"].state == "succeeded"
        assert view.scheduled == [f"{state.plan.id}-1"], "its dependant is scheduled, once"
    finally:
        await hooks.close()


async def test_an_outcome_write_in_doubt_is_read_from_the_shard_log() -> None:
    """The silo's write of the step's success answered an error but landed, and the shard was
    taken back from its log: no ``attempt_ended`` comes. The log says it succeeded."""
    store, view = MemoryStore(), View()
    hooks, event = await started(store, view)
    try:
        job = event.job
        name = generation_name(event.shard, 0)
        etag = await store.create(name, {})
        await store.append_block(name, encode(0, [add_op(job.id, 0, pack(job.to_wire())),
                                                  remove_op(job.id, 1, SUCCEEDED)]), etag)
        await hooks.attempt_unsure(event)
        state = await a_recorded(store)
        assert state is not None and state.steps["a"].state == "succeeded"
        assert view.scheduled == [f"{state.plan.id}-1"]
    finally:
        await hooks.close()


async def test_a_success_in_doubt_whose_removal_a_rotation_folded_away_is_recorded() -> None:
    """As above, but the shard's log was rotated before the hook read it: its snapshot keeps
    only live jobs, so the log says the job ended, not how. The silo knows its attempt
    succeeded: read as a lost job instead, the step ran again from another shard, its success
    durable and its silo alive (simulator seed 335398, every kind)."""
    store, view = MemoryStore(), View()
    hooks, event = await started(store, view)
    try:
        job = event.job
        writer = await LogWriter.create(store, event.shard, {}, snapshot=ShardState().snapshot)
        await writer.append_many([add_op(job.id, 0, pack(job.to_wire())), remove_op(job.id, 1, SUCCEEDED)])
        await writer.rotate()
        await writer.close()
        assert [op[0] for op in (await read_log(store, event.shard)).records()] == [SNAPSHOT], "the removal folded away"
        await hooks.attempt_unsure(event, AttemptEnd(True, None, us_to_datetime(2), None, None, True))
        state = await a_recorded(store)
        assert state is not None and state.steps["a"].state == "succeeded", "recorded as it ended, not left to reconcile"
        assert view.scheduled == [f"{state.plan.id}-1"], "its dependant is scheduled, once"
    finally:
        await hooks.close()


class Recorded:
    """A silo's schedule call: what it was asked to add, with its due times and suspects."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], list[int], list[str]]] = []
        self.settled: list[list[str]] = []  # per call: the holders it searches without waiting on them

    async def __call__(self, jobs: Sequence[ScheduledJob], suspects: Sequence[str] = (),
                       settled: Sequence[str] = ()) -> list[str]:
        self.calls.append(([j.metadata["timeshard.step"] for j in jobs], [datetime_to_us(j.due) for j in jobs],
                           list(suspects)))
        self.settled.append(list(settled))
        return ["shards/s9"] * len(jobs)


LIMITS = Limits(grace_us=60_000_000, attempt_us=10_000_000, staging_us=10_000_000, suspicion_us=2_000_000)
NOW = 6_000_000  # every step quiet for less than an attempt: only intents are looked into
LIVE = {"5": Member("5", 1, ACTIVE, NOW)}  # silo 5's first incarnation, heard from just now


def now() -> int:
    return NOW


async def flow_with(*records: list[Any]) -> MemoryStore:
    store = MemoryStore()
    await create_log(store, compile_flow(two_steps(), flow_id="f1", created_us=0))
    await update(store, "etl", lambda s: [r for r in records if s.apply(r)])
    return store


async def test_a_step_taken_over_twice_searches_every_earlier_writer_in_the_first_ones_window() -> None:
    """Writer 3 may have added a's job, then stopped; writer 4 took over and stopped too. A third
    taker sends the job as writer 3 did (due at its intent's time: the same window) and names
    both writers' incarnations, so that the copy either added is found rather than added again."""
    store = await flow_with(["intent", "t0", "3#1", ["a"], 100], ["intent", "t1", "4#1", ["a"], 5_000_000])
    schedule = Recorded()
    await reconcile(store, "etl", "5#1", schedule, LIMITS, members=LIVE, now_us=now)
    assert schedule.calls == [(["a"], [100], ["3#1", "4#1"])]


async def test_a_writer_that_confirms_after_being_taken_over_keeps_the_step() -> None:
    """Writer 3's jobs landed while a taker's intent was pending: the step is scheduled (by 3),
    not waiting for a taker, which would otherwise be taken over in turn and add it again."""
    store = await flow_with(["intent", "t0", "3#1", ["a"], 100], ["intent", "t1", "4#1", ["a"], 200],
                            ["sched", "t0", [["a", "shards/s3", 100]], 300])
    state = await read_flow(store, "etl")
    assert state is not None and state.steps["a"].shard == "shards/s3" and state.unconfirmed() == []
    schedule = Recorded()
    await reconcile(store, "etl", "5#1", schedule, LIMITS, members=LIVE, now_us=now)
    assert schedule.calls == []


async def test_a_takeover_decided_on_a_stale_read_schedules_nothing_once_confirmed() -> None:
    """Reconcile saw t0 unconfirmed; its writer confirmed before the takeover's write: nothing to take."""
    store = await flow_with(["intent", "t0", "3#1", ["a"], 100], ["sched", "t0", [["a", "shards/s3", 100]], 300])
    schedule = Recorded()
    await advance(store, "etl", "5#1", schedule, retake={"a": "t0"}, now_us=now)
    assert schedule.calls == []


async def test_a_silo_takes_over_its_own_intent_once_its_launch_is_over() -> None:
    store = await flow_with(["intent", "t0", "5#1", ["a"], 100])
    schedule = Recorded()
    await reconcile(store, "etl", "5#1", schedule, LIMITS, members=LIVE, now_us=now, launching={"t0"})
    assert schedule.calls == [], "its launch is under way"
    await reconcile(store, "etl", "5#1", schedule, LIMITS, members=LIVE, now_us=now, launching=set())
    assert schedule.calls == [(["a"], [100], ["5#1"])], "its launch failed: taken over, its own shards searched"


class Unsettled:
    """A silo's schedule call refused: an earlier try may still land in shards ``holders`` hold."""

    def __init__(self, *holders: str) -> None:
        self.holders = holders

    async def __call__(self, jobs: Sequence[ScheduledJob], suspects: Sequence[str] = (),
                       settled: Sequence[str] = ()) -> list[str]:
        raise EarlierTryUnsettled("shards may still take an earlier try", self.holders)


LATER = 70_000_000  # past the grace period of an intent written at 100
BOTH = {silo: Member(silo, 1, ACTIVE, LATER) for silo in ("5", "6", "7")}


def later() -> int:
    return LATER


async def test_a_takeover_the_taker_cannot_settle_is_handed_to_the_silo_holding_the_shard() -> None:
    """A client's intent is taken over after the grace period; the taker's schedule call cannot
    settle it, as silo 6 holds a shard of the window the client's call may still reach. The step
    goes to silo 6, which takes it over at once (its own intent, not being launched) and
    schedules it as the client sent it; silo 7 leaves it to 6, a live writer. Before: silo 5
    took it over again itself each round, keeping the intent young, and the steps never ran
    (simulator seeds 90830 and 90973 with flows)."""
    store = await flow_with(["intent", "t0", "client-1", ["a"], 100])
    with pytest.raises(EarlierTryUnsettled):
        await reconcile(store, "etl", "5#1", Unsettled("6#1"), LIMITS, members=BOTH, now_us=later, launching=set())
    state = await read_flow(store, "etl")
    assert state is not None and state.intents[state.steps["a"].token or ""].owner == "6#1"
    other = Recorded()
    await reconcile(store, "etl", "7#1", other, LIMITS, members=BOTH, now_us=later, launching=set())
    assert other.calls == []
    holder = Recorded()
    await reconcile(store, "etl", "6#1", holder, LIMITS, members=BOTH, now_us=later, launching=set())
    assert holder.calls == [(["a"], [100], ["5", "5#1", "6", "6#1", "7"])]


def silo_schedule(parts: Roles) -> Schedule:
    """A silo's own schedule call, as ``FlowHooks`` makes it (without the job checks)."""

    async def schedule(jobs: Sequence[ScheduledJob], suspects: Sequence[str] = (),
                       settled: Sequence[str] = ()) -> list[str]:
        return await parts.scheduling.schedule([item(j) for j in jobs], suspects, settled)

    return schedule


async def test_the_silo_a_refused_taker_handed_a_step_to_does_not_wait_on_that_taker() -> None:
    """A client's intent, taken over by a#2, which holds a#1's shard of the window (adopted): its
    schedule call is refused, as b#1 holds a shard there the client's call may still reach, and
    it hands the step to b#1, naming itself settled: its refusal came after it found no call of
    the earlier try under way in its shards, so b#1 searches them without waiting on a#2.
    Before: a#2's adopted shard held b#1 up, b#1's own held any other taker up,
    and no single silo could settle the step: the acknowledged flow never ran (simulator seed
    25 with every kind)."""
    store = MemoryStore()
    due = T0 + timedelta(hours=1)
    first = await make_parts(store, "a")
    (old,) = await first.scheduling.schedule([item(job(due=due))])
    taker = await make_parts(store, "a", transport=LocalTransport(predecessors_exited=True))
    assert await taker.adoption.claim_for_cancel(old) is not None  # a#2 holds a#1's shard of the window
    holder = await make_parts(store, "b")
    (own,) = await holder.scheduling.schedule([item(job(due=due))])  # b#1's, open to the client's try
    await create_log(store, compile_flow(two_steps(), flow_id="f1", created_us=0))
    await update(store, "etl", lambda s: applied(s, [["intent", "t0", "client-1", ["a"], datetime_to_us(due)]]))
    members = {"a": Member("a", 2, ACTIVE, LATER), "b": Member("b", 1, ACTIVE, LATER)}
    at = datetime_to_us(due) + LATER  # the client's intent is past its grace period

    with pytest.raises(EarlierTryUnsettled) as refused:
        await reconcile(store, "etl", "a#2", silo_schedule(taker), LIMITS, members=members, now_us=lambda: at,
                        launching=set())
    assert refused.value.holders == ("b#1",)
    state = await reconcile(store, "etl", "b#1", silo_schedule(holder), LIMITS, members=members,
                            now_us=lambda: at, launching=set())
    assert state is not None and state.steps["a"].shard == own
    assert [h.base for h in await list_logs(store, SHARD_PREFIX)
            if state.plan.job_id("a") in ShardState().replay((await read_log(store, h.base)).records()).live] == [own]


async def writer(store: Store, step: str = "a") -> tuple[str, tuple[str, ...]]:
    """Who is to schedule ``step`` now, and the holders its intent names as settled."""
    state = await read_flow(store, "etl")
    assert state is not None
    intent = state.intents[state.steps[step].token or ""]
    return intent.owner, intent.settled


async def test_a_takeover_two_live_holders_refuse_goes_from_holder_to_holder() -> None:
    """Silos 6 and 7 each hold a shard of the window the client's call may still reach: each
    refuses the takeover, and neither can settle the other's shard. The step goes to 6, then
    from 6 to 7, each intent naming the holders that refused with no call of the earlier try
    under way in them; 7 searches their shards without waiting on them, and schedules it.
    Before: nobody was handed the step, and it waited as long as both held their shards (to
    the end of the run in simulator seed 220668 with every kind: the flow never halted)."""
    store = await flow_with(["intent", "t0", "client-1", ["a"], 100])
    with pytest.raises(EarlierTryUnsettled):
        await reconcile(store, "etl", "5#1", Unsettled("6#1", "7#1"), LIMITS, members=BOTH, now_us=later,
                        launching=set())
    assert await writer(store) == ("6#1", ("5#1",))
    with pytest.raises(EarlierTryUnsettled):  # 5's shards settled now: 6 waits on 7's alone
        await reconcile(store, "etl", "6#1", Unsettled("6#1", "7#1"), LIMITS, members=BOTH, now_us=later,
                        launching=set())
    assert await writer(store) == ("7#1", ("5#1", "6#1"))
    holder = Recorded()
    await reconcile(store, "etl", "7#1", holder, LIMITS, members=BOTH, now_us=later, launching=set())
    assert holder.calls == [(["a"], [100], ["5", "5#1", "6", "6#1", "7", "7#1"])], "sent as the client sent it"
    assert holder.settled == [["5#1", "6#1"]]


@pytest.mark.parametrize("holders", [("5#1",), ()], ids=["its-own", "none"])
async def test_a_takeover_no_other_single_silo_can_settle_stays_with_its_taker(holders: tuple[str, ...]) -> None:
    store = await flow_with(["intent", "t0", "client-1", ["a"], 100])
    with pytest.raises(EarlierTryUnsettled):
        await reconcile(store, "etl", "5#1", Unsettled(*holders), LIMITS, members=BOTH, now_us=later, launching=set())
    state = await read_flow(store, "etl")
    assert state is not None and state.intents[state.steps["a"].token or ""].owner == "5#1"


async def test_a_step_its_writer_adds_after_the_cancel_returned_does_not_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """Silo 3 wrote its intent to schedule a, then paused before its schedule call: the cancel
    knows no shard of a's job, waits a while for 3 to confirm, and returns True. Resumed, 3
    adds the job; its start is refused. Before: it started after "cancelled" (simulator seed
    92583 with flows)."""
    monkeypatch.setattr(flow_api, "_CONFIRM_POLL_S", 0.001)
    store, view = FailingStore(), View()
    hooks, event = await started(store, view)  # a's job, confirmed: its flow runs, it may start
    try:
        assert await hooks.admit(event) is True
        store.fail_at = {"fetch": store.calls.get("fetch", 0) + 1}
        assert await hooks.admit(event) is None, "the flow cannot be read: asked again, never let through"
        plan = compile_flow(two_steps("other"), flow_id="f2", created_us=0)
        await create_log(store, plan)
        await update(store, "other", lambda s: applied(s, [["intent", "t0", "3#1", ["a"], 100]]))
        submitter = Submitter()
        assert await StoreFlows(submitter, store).cancel("other") is True
        assert submitter.cancelled == [], "no shard of a's job is known to the cancel"
        late = dataclasses.replace(event, job=plan.job("a", us_to_datetime(100)))  # added by 3, resumed
        assert await hooks.admit(late) is False
        assert await hooks.admit(event) is True, "only the cancelled flow's steps are refused"
    finally:
        await hooks.close()


async def test_a_silo_whose_confirmation_failed_writes_it_again_and_does_not_take_its_step_over(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Silo s0 scheduled b's job, then its write of the confirmation failed. Taken over (its own
    launch, over), b would be searched for where it landed, and a job that had run meanwhile
    and left with its drained shard would be added again (simulator seed 93052 with flows: the
    step ran twice). It is written again until it lands; reconcile leaves the step to it."""
    monkeypatch.setattr(flow_hooks, "RECORD_RETRY_S", 0.01)
    store, view = FailingStore(), View()
    await Membership(store).join("s0", SYSTEM_CLOCK.now_us())  # s0#1, alive
    hooks, event = await started(store, view)
    try:
        store.calls.clear()
        store.fail_at = {"append_block": 2}  # 1: a's success with b's intent; 2: b's confirmation
        await hooks.attempt_ended(event, AttemptEnd(True, None, us_to_datetime(2), None, None, True))
        await hooks.reconcile_all()
        for _ in range(100):
            state = await read_flow(store, "etl")
            if state is not None and state.steps["b"].shard is not None:
                break
            await asyncio.sleep(0.01)
        assert state is not None and state.steps["b"].shard == "shards/s0" and state.unconfirmed() == []
        await hooks.reconcile_all()
        assert view.scheduled == [f"{state.plan.id}-1"], "b's job is added once"
    finally:
        await hooks.close()


async def test_a_silo_does_not_take_over_a_step_whose_success_it_is_still_recording(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Silo s0 ran a, then its write of "a succeeded" failed and waits to be written again. a's
    intent, handed to s0 while it was paused, is its own and unconfirmed: read without the
    success, a looks unfinished, and the takeover adds its job again where a compaction dropped
    its removal, so it runs twice (simulator seed 472003 with every kind). Reconcile leaves the
    flow alone until the record lands; then only b is scheduled."""
    monkeypatch.setattr(flow_hooks, "RECORD_RETRY_S", 0.2)
    store, view = FailingStore(), View()
    await Membership(store).join("s0", SYSTEM_CLOCK.now_us())  # s0#1, alive
    hooks, event = await started(store, view)
    try:
        await update(store, "etl", lambda s: applied(s, [["intent", "t1", "s0#1", ["a"], 100]]))
        store.calls.clear()
        store.fail_at = {"append_block": 1}  # the first try's write of "a succeeded"
        await hooks.attempt_ended(event, AttemptEnd(True, None, us_to_datetime(2), None, None, True))
        await hooks.reconcile_all()
        assert view.scheduled == [], "a's job is not added again while its success is on its way"
        state = await a_recorded(store, 200)
        assert state is not None and state.steps["a"].state == "succeeded"
        await hooks.reconcile_all()
        assert view.scheduled == [f"{state.plan.id}-1"], "only b's job is added, once"
    finally:
        await hooks.close()


async def test_a_step_taken_over_is_silent_only_counting_from_when_it_was_scheduled() -> None:
    """Taken over at 70 s, a's job went out due at the client's first try (100 µs). At 75 s it
    may well have run, its shard drained and deleted, while its start and end are still on
    their way to the flow log: not silent yet, so not run again. Before: silent from its due
    time, at once (simulator with flows and torn_logs, seed 94: a step ran twice, no kill)."""
    store = await flow_with(["intent", "t0", "client-1", ["a"], 100], ["intent", "t1", "5#1", ["a"], 70_000_000],
                            ["sched", "t1", [["a", "shards/gone", 100]], 70_000_100])
    members = {"5": Member("5", 1, ACTIVE, 75_000_000)}
    schedule = Recorded()
    await reconcile(store, "etl", "6#1", schedule, LIMITS, members=members, now_us=lambda: 75_000_000)
    assert schedule.calls == []
    quiet = 70_000_100 + LIMITS.staging_us + LIMITS.attempt_us + 1  # silent that long: its job is looked for
    await reconcile(store, "etl", "6#1", schedule, LIMITS, members=members, now_us=lambda: quiet)
    assert schedule.calls == [(["a"], [quiet], [])], "gone without a trace: run again"


async def test_a_retrying_step_is_silent_only_counting_from_when_its_retry_was_recorded() -> None:
    """Due at 100 µs, a's job ran late (at 70 s) and failed; its policy counts the retry from
    the due time, so it was due again at once (1.1 s). At 72 s its later attempts may well have
    ended, their records on their way to the flow log (a full log being moved on), and its
    shard compacted past its removal: not silent yet, so not run again. Before: silent from
    its retry time, at once (simulator seed 201061 with every kind: a step ran from two shards,
    its silo alive and writing how it ended)."""
    store = await flow_with(["intent", "t0", "client-1", ["a"], 100], ["sched", "t0", [["a", "shards/gone", 100]], 200],
                            ["run", "a", 1, 70_000_000], ["retry", "a", 1, "boom", 1_100_000, 70_100_000])
    members = {"5": Member("5", 1, ACTIVE, 72_000_000)}
    schedule = Recorded()
    await reconcile(store, "etl", "6#1", schedule, LIMITS, members=members, now_us=lambda: 72_000_000)
    assert schedule.calls == []
    quiet = 70_100_000 + LIMITS.staging_us + LIMITS.attempt_us + 1  # silent that long: its job is looked for
    await reconcile(store, "etl", "6#1", schedule, LIMITS, members=members, now_us=lambda: quiet)
    assert schedule.calls == [(["a"], [quiet], [])], "gone without a trace: run again"


async def test_a_step_its_paused_writer_adds_after_a_taker_ran_it_does_not_start() -> None:
    """Silo 1 wrote its intent to schedule a, then paused before its schedule call; a taker
    searched silo 1's shards, found nothing, and ran a. Resumed, silo 1 adds a's job to a
    shard it creates then; its start is refused. Before: a ran twice, from two shards
    (simulator seed 1489 with flows)."""
    store, view = FailingStore(), View()
    hooks, event = await started(store, view)
    try:
        retry = ["retry", "a", 1, "boom", 5, 2]
        await update(store, "etl", lambda s: applied(s, [["run", "a", 1, 1], retry]))
        second = dataclasses.replace(event, attempt=2)
        assert await hooks.admit(second) is True, "a step's retry still starts"
        await hooks.attempt_ended(second, AttemptEnd(True, None, us_to_datetime(6), None, None, True))
        state = await read_flow(store, "etl")
        assert state is not None and state.steps["a"].state == "succeeded"
        late = dataclasses.replace(event, run_id="run-3", shard="shards/20300101T000000.000000Z-s1.1-000002")
        assert await hooks.admit(late) is False
    finally:
        await hooks.close()


class Ticking:
    """A clock the test moves."""

    def __init__(self, now_us: int) -> None:
        self.now = now_us

    def now_us(self) -> int:
        return self.now


async def test_a_second_copy_of_a_step_waits_while_the_first_may_run_and_never_starts_after_it() -> None:
    """Silo s0#1 wrote its intent for a and added a's job to its shard, then died before its
    confirmation landed. Its next incarnation adopted the shard and started the job; the job's
    end on its way to the flow log, s0#2 took the dead writer's intent over, and its search found
    no trace of the job (the shard compacted past its removal): it added a second copy. That
    copy waits while the first may run, and is refused once the first's end lands; the first
    copy run again from its own shard (its silo killed, the shard adopted) starts at once; a
    first copy silent for longer than an attempt can last (lost with a killed silo) lets the
    second start. Before: the second copy started, and the step ran twice from two shards, its
    silo alive (simulator seeds 205777 and 205632, every kind)."""
    start = 1_000_000_000
    store = await flow_with(["intent", "t0", "s0#1", ["a"], start])
    view, clock = View(), Ticking(start)
    view.owner, view.clock = "s0#2", clock
    hooks = FlowHooks(store, view)
    plan = compile_flow(two_steps(), flow_id="f1", created_us=0)
    first = AttemptEvent(plan.job("a", us_to_datetime(start)), "run-1", 1, 1, us_to_datetime(start),
                         us_to_datetime(start), "shards/20300101T000000.000000Z-s0.1-000002")
    try:
        assert await hooks.admit(first) is True
        members = {"s0": Member("s0", 2, ACTIVE, start)}
        taker = Recorded()  # finds nothing of the first copy: it adds the job to shards/s9
        await reconcile(store, "etl", "s0#2", taker, LIMITS, members=members, now_us=lambda: start, launching=set())
        assert taker.calls == [(["a"], [start], ["s0#1"])]
        second = dataclasses.replace(first, run_id="run-2", shard="shards/s9")
        assert await hooks.admit(second) is None, "the first copy may be running: asked again later"
        rerun = dataclasses.replace(first, run_id="run-3")
        assert await hooks.admit(rerun) is True, "the first copy, run again from its shard, starts"
        await hooks.attempt_ended(first, AttemptEnd(True, None, us_to_datetime(start + 1), None, None, True))
        assert await hooks.admit(second) is False, "the step succeeded: its second copy never starts"

        other = compile_flow(two_steps("lost"), flow_id="f2", created_us=0)
        await create_log(store, other)
        lost = dataclasses.replace(second, job=other.job("a", us_to_datetime(start)))
        await update(store, "lost", lambda s: applied(s, [["intent", "t0", "s0#1", ["a"], start]]))
        assert await hooks.admit(dataclasses.replace(lost, shard=first.shard)) is True
        assert await hooks.admit(lost) is None
        clock.now = start + (view.options.handler_timeout + timedelta(seconds=10)) // timedelta(microseconds=1) + 1
        assert await hooks.admit(lost) is True, "the first copy silent for longer than an attempt: the second runs"
    finally:
        await hooks.close()
