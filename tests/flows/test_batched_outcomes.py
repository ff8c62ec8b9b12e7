"""Steps of several flows that succeed in one delivered batch: each step's success reaches its
flow log, however long another step's hook takes (a whole silo in-process, memory store, no Ray).

Found by the simulator (seed 31 with buckets, every default kind): the silo told the hooks of a
batch's successes one after another; recording one step's success scheduled its dependant, and
that call waited for a rejoin that never came. The other steps' successes never reached their
flow logs, their drained shard was deleted, and reconcile ran them again."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone

from cluster import Flow, Step, Target
from cluster.flows.hooks import FlowHooks
from cluster.flows.log import create_log, read_flow
from cluster.flows.model import compile_flow
from cluster.flows.progress import advance
from cluster.model.clock import SYSTEM_CLOCK
from cluster.model.errors import SiloStopping
from cluster.model.jobs import ScheduledJob
from cluster.model.wire import datetime_to_us, pack
from cluster.runtime.silo import Silo
from storage import MemoryStore, Store
from tests.runtime.harness import OPTIONS, LocalTransport, Recorder

T = Target.actor("worker", namespace="test")


class HeldLaunches(FlowHooks):
    """Flow hooks whose schedule calls (a step's dependants) wait until ``release`` is set, as a
    silo's own call waits while it rejoins, then fail."""

    release = asyncio.Event()

    async def _schedule(self, jobs: Sequence[ScheduledJob], suspects: Sequence[str] = (),
                        settled: Sequence[str] = (), /) -> list[str]:
        await self.release.wait()
        raise SiloStopping("the silo stops")


async def test_each_success_of_a_batch_reaches_its_flow_log_while_another_steps_dependants_wait() -> None:
    store, transport = MemoryStore(), LocalTransport()
    transport.handlers["worker"] = Recorder()
    HeldLaunches.release = asyncio.Event()
    silo = Silo("0", "memory://", OPTIONS.with_(heartbeat_interval="100ms", suspicion_timeout="1s"), "test",
                hooks=lambda s, view: [HeldLaunches(s, view)], transport=transport, clock=SYSTEM_CLOCK, store=store)
    await silo.ready()
    due_us = datetime_to_us(datetime.now(timezone.utc) + timedelta(milliseconds=300))

    async def schedule(jobs: Sequence[ScheduledJob], suspects: Sequence[str] = (), /) -> list[str]:
        return await silo.schedule([(j.id, datetime_to_us(j.due), pack(j.to_wire())) for j in jobs])

    names = ["etl", "report", "backup"]
    try:
        for n, name in enumerate(names):  # each "a" then "b": recording a's success launches b
            await create_log(store, compile_flow(Flow(name, [Step("a", T), Step("b", T, depends_on=["a"])]),
                                                 flow_id=f"f{n}", created_us=0))
            await advance(store, name, "client-1", schedule, now_us=lambda: due_us)
        assert await _succeeded(store, names), "every step that succeeded is recorded in its flow"
        assert len(transport.calls) == 1 and len(transport.calls[0][1]) == 3, "the three steps ran in one batch"
    finally:
        HeldLaunches.release.set()
        await silo.stop()


async def _succeeded(store: Store, names: list[str]) -> bool:
    """Whether every flow's step "a" succeeded in its log, waited for up to 3 s."""
    for _ in range(60):
        states = [await read_flow(store, name) for name in names]
        if all(s is not None and s.steps["a"].state == "succeeded" for s in states):
            return True
        await asyncio.sleep(0.05)
    return False
