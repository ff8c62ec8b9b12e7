"""A flow's cancel against a step its silo admitted before the cancel and sends after it: the
admission is only good for ``ADMISSION_HOLDS_S``, which the cancel waits out (no Ray)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest

from cluster import Flow, Step, Target
from cluster.flows import api as flow_api
from cluster.flows.api import Flows
from cluster.flows.hooks import FlowHooks
from cluster.flows.log import applied, create_log, read_flow, update
from cluster.flows.model import ADMISSION_HOLDS_S, compile_flow
from cluster.model.clock import Clock
from cluster.model.jobs import ScheduledJob
from cluster.model.options import ClusterOptions
from cluster.model.wire import datetime_to_us
from storage import MemoryStore, Store
from tests.runtime.harness import OPTIONS, T0, ManualClock, Recorder, add, make_parts, until_idle

T = Target.actor("worker", namespace="test")


class SlowAnswers(MemoryStore):
    """A memory store whose next append to a flow log, once ``hold`` is set, is answered late:
    written at once, the answer handed back only when ``release`` is set (a slow network, a
    paused VM). An admission claims its step's start in the flow log (a CAS append), so a late
    *read* would only make that append fail after the cancel and read the cancel: the stall
    that matters is after the claim landed."""

    def __init__(self) -> None:
        super().__init__()
        self.hold = False
        self.reached, self.release = asyncio.Event(), asyncio.Event()

    async def append_block(self, name: str, payload: bytes, if_match: str) -> Any:
        answer = await super().append_block(name, payload, if_match)
        if self.hold and name.startswith("flows/"):
            self.hold = False
            self.reached.set()
            await self.release.wait()
        return answer


@dataclasses.dataclass
class View:
    """The ``SiloView`` the flow hook sees: silo "0", on the test's manual clock."""

    clock: Clock
    owner: str = "0#1"
    options: ClusterOptions = dataclasses.replace(OPTIONS, adoption_interval=timedelta(hours=1))

    async def schedule(self, jobs: Sequence[tuple[str, int, bytes]], suspects: Sequence[str] = ()) -> list[str]:
        raise AssertionError("nothing is scheduled here")


class NoSilo:
    """The cancel's client: no shard of the step is known to the cancel, so it is never asked."""

    async def try_cancel_job(self, job: ScheduledJob) -> bool:
        raise AssertionError("the step's shard is unknown to the cancel")


class StoreFlows(Flows):
    def __init__(self, store: Store) -> None:
        super().__init__(NoSilo())  # type: ignore[arg-type]
        self._given = store

    async def _open(self) -> Store:
        return self._given


@pytest.mark.parametrize("cancel", [True, False], ids=["cancelled", "running"])
async def test_a_step_admitted_before_the_cancel_and_stalled_past_it_does_not_start(
        monkeypatch: pytest.MonkeyPatch, cancel: bool) -> None:
    """Silo 0 wrote its intent for a, added a's job and stalled before confirming it; a came
    due and was admitted (its start claimed in the flow log before the cancel), then its silo
    stalled 6 s before sending it. The cancel, knowing no shard of a, waited for a confirmation that did
    not come and returned True. Before: a was sent to its handler after that (the known gap
    left open in notes/closing4.md). Now the admission, older than ``ADMISSION_HOLDS_S`` when
    the send comes, is asked again: it refuses, and a flow not cancelled has its step sent, once."""
    monkeypatch.setattr(flow_api, "_CONFIRM_POLL_S", 0.001)
    monkeypatch.setattr(flow_api, "ADMISSION_HOLDS_S", 0.001)  # the cancel's wait, in real time here
    store, clock = SlowAnswers(), ManualClock()
    hooks = FlowHooks(store, View(clock))
    parts = await make_parts(store, "0", clock=clock, hooks=[hooks])
    handler = Recorder()
    parts.transport.handlers["worker"] = handler
    plan = compile_flow(Flow("etl", [Step("a", T)]), flow_id="f1", created_us=datetime_to_us(T0))
    await create_log(store, plan)
    due = T0 + timedelta(seconds=1)
    await update(store, "etl", lambda s: applied(s, [["intent", "t1", "0#1", ["a"], datetime_to_us(due)]]))
    await add(parts, plan.job("a", due))  # its writer's confirmation never came
    try:
        parts.lease.renew(clock.monotonic())
        clock.advance(1)
        store.hold = True
        parts.firing.dispatch(parts.queue.pop_due(limit=parts.runs.room))
        await asyncio.wait_for(store.reached.wait(), 5)  # the admission's claim landed: not cancelled
        if cancel:
            assert await StoreFlows(store).cancel("etl") is True
        clock.advance(ADMISSION_HOLDS_S + 4)  # the stall: longer than the cancel's wait
        parts.lease.renew(clock.monotonic())
        store.release.set()
        await until_idle()
        for _ in range(3):  # asked again a little later, never before it is due
            clock.advance(1)
            parts.lease.renew(clock.monotonic())
            parts.firing.dispatch(parts.queue.pop_due(limit=parts.runs.room))
            await until_idle()
        while parts.firing.busy:  # noqa: ASYNC110
            await asyncio.sleep(0.001)
        state = await read_flow(store, "etl")
        if cancel:
            assert parts.transport.delivered() == [], "a step of a flow whose cancel returned True was sent"
            assert state is not None and state.state == "cancelled"
        else:
            assert parts.transport.delivered() == [plan.job_id("a")]
            assert state is not None and state.state == "succeeded"
    finally:
        await hooks.close()


async def test_a_cancel_returns_only_once_an_admission_made_before_it_no_longer_holds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The other half of the promise: with a step that may be on its way to a silo's send, the
    cancel returns no sooner than ``ADMISSION_HOLDS_S`` after its record landed (a flow with
    nothing scheduled has nothing to wait for)."""
    monkeypatch.setattr(flow_api, "_CONFIRM_POLL_S", 0.001)
    monkeypatch.setattr(flow_api, "ADMISSION_HOLDS_S", 0.2)  # how long the silos' admissions hold, made short
    store = MemoryStore()
    loop = asyncio.get_running_loop()
    for name, records in (("idle", []), ("busy", [["intent", "t1", "0#1", ["a"], 5],
                                                   ["sched", "t1", [["a", "shards/gone", 5]], 6]])):
        plan = compile_flow(Flow(name, [Step("a", T)]), flow_id=name, created_us=0)
        await create_log(store, plan)
        await update(store, name, lambda s, records=records: applied(s, records))
    cancelled: list[str] = []

    class Answers:
        async def try_cancel_job(self, job: ScheduledJob) -> bool:
            cancelled.append(job.id)
            return True

    flows = StoreFlows(store)
    flows._client = Answers()  # type: ignore[assignment]
    began = loop.time()
    assert await flows.cancel("idle") is True
    assert loop.time() - began < 0.1
    began = loop.time()
    assert await flows.cancel("busy") is True
    assert loop.time() - began >= 0.2
    assert len(cancelled) == 1
