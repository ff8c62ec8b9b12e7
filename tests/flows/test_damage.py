"""Flow logs torn by a crash, damaged in the store, or full: read for their whole records and
repaired by their next writer as a shard log is (a claim and a rotation, ``storage.LogWriter``),
losing nothing anyone was told (memory store). Found by the simulator with flows and torn_logs:
a torn append raised ``FlowLogDamaged`` in every reader, the simulator and the silos' included."""

from __future__ import annotations

from typing import Any

import pytest

from cluster import Flow, Step, Target
from cluster.flows.api import Flows
from cluster.flows.log import create_log, read_flow, update
from cluster.flows.model import compile_flow
from storage import DAMAGED_PREFIX, AlreadyExists, MemoryStore, Store, encode, list_logs, read_log

T = Target.actor("worker", namespace="test")
FLOW = Flow("etl", [Step("a", T), Step("b", T, depends_on=["a"])])


async def stored(store: Store, *records: list[Any]) -> None:
    await create_log(store, compile_flow(FLOW, flow_id="f1", created_us=0))
    await update(store, "etl", lambda s: [r for r in records if s.apply(r)])


async def append_raw(store: Store, data: bytes) -> None:
    (info,) = await store.list("flows/etl~")
    await store.append_block(info.name, data, info.etag)


async def record(store: Store, *records: list[Any]) -> None:
    await update(store, "etl", lambda s: [r for r in records if s.apply(r)])


async def test_a_torn_tail_is_left_out_and_the_next_writer_moves_the_log_on_without_it() -> None:
    store = MemoryStore()
    await stored(store, ["intent", "t0", "client-1", ["a"], 1], ["sched", "t0", [["a", "shards/s0", 1]], 2])
    state = await read_flow(store, "etl")
    assert state is not None
    await append_raw(store, encode(state.last_seq + 1, [["ok", "a", 1, 5]])[:-4])  # its writer died mid-append
    torn = await read_flow(store, "etl")
    assert torn is not None and torn.torn and torn.damage is None and torn.steps["a"].state == "pending"
    await record(store, ["run", "a", 1, 3], ["ok", "a", 1, 6])  # the silo that ran it says so again
    state = await read_flow(store, "etl")
    assert state is not None and not state.torn and state.name == "flows/etl~00000001"
    assert state.steps["a"].state == "succeeded" and state.steps["a"].shard == "shards/s0" and "t0" in state.confirmed
    assert [h.name for h in await list_logs(store, "flows/")] == ["flows/etl~00000001"]
    assert await store.list(DAMAGED_PREFIX) == [], "a torn tail is not damage"
    with pytest.raises(AlreadyExists):  # its first generation is gone; the name is still taken
        await create_log(store, compile_flow(FLOW, flow_id="f2", created_us=0))
    assert [h.name for h in await list_logs(store, "flows/")] == ["flows/etl~00000001"]


async def test_a_damaged_frame_costs_its_own_records_and_the_log_is_kept_aside_before_the_repair() -> None:
    store = MemoryStore()
    await stored(store, ["intent", "t0", "client-1", ["a"], 1])
    state = await read_flow(store, "etl")
    assert state is not None
    await append_raw(store, b"\xff\xfe bytes changed in the store")
    await append_raw(store, encode(state.last_seq + 2, [["sched", "t0", [["a", "shards/s0", 1]], 2]]))
    damaged = await read_flow(store, "etl")
    assert damaged is not None and damaged.damage is not None and "t0" in damaged.confirmed
    await record(store, ["run", "a", 1, 3])
    assert [i.name for i in await store.list(DAMAGED_PREFIX)] == ["damaged/flows/etl~00000000"]
    assert (await read_log(store, "damaged/flows/etl")).decoded.damaged, "kept byte for byte"
    state = await read_flow(store, "etl")
    assert state is not None and state.damage is None and state.steps["a"].state == "running"


async def test_a_full_flow_log_goes_on_in_a_new_generation() -> None:
    store = MemoryStore(max_blocks=3)
    await stored(store, ["intent", "t0", "client-1", ["a"], 1])  # two blocks: the definition, the intent
    await record(store, ["sched", "t0", [["a", "shards/s0", 1]], 2])
    await record(store, ["run", "a", 1, 3])  # the generation is full: on in a new one
    await record(store, ["ok", "a", 1, 4])
    state = await read_flow(store, "etl")
    assert state is not None and state.steps["a"].state == "succeeded" and state.name == "flows/etl~00000001"



async def test_a_first_generation_created_again_by_a_submit_hides_no_record() -> None:
    """A submit of the same flow again creates the first generation anew (a repair deleted it)
    and deletes it once it sees the later one; meanwhile that empty generation is no proof that
    the flow is not there yet. Before: read as "no such flow", a silo's record of a step's
    success was taken for recorded and dropped, and reconcile ran the step again (simulator
    seed 202614 with every kind: a success durable at 15 s ran again at 79 s)."""
    store = MemoryStore(max_blocks=3)
    await stored(store, ["intent", "t0", "client-1", ["a"], 1])
    await record(store, ["sched", "t0", [["a", "shards/s0", 1]], 2])
    await record(store, ["run", "a", 1, 3])  # on in generation 1; generation 0 deleted
    first = "flows/etl~00000000"
    etag = await store.create(first, {"flow_id": "f2"})  # the submit's create, its check not made yet
    state = await read_flow(store, "etl")
    assert state is not None and state.plan.id == "f1" and state.steps["a"].state == "running"
    recorded = await update(store, "etl", lambda s: [r for r in [["ok", "a", 1, 4]] if s.apply(r)])
    assert recorded is not None and recorded.name == "flows/etl~00000001"
    await store.delete(first, etag)  # the submit's check: the flow's log lives on in a later generation
    state = await read_flow(store, "etl")
    assert state is not None and state.steps["a"].state == "succeeded"

class StoreFlows(Flows):
    def __init__(self, store: Store) -> None:
        super().__init__(None)  # type: ignore[arg-type]
        self._given = store

    async def _open(self) -> Store:
        return self._given


async def test_a_repaired_flow_is_read_listed_and_cancelled_by_the_client() -> None:
    store = MemoryStore()
    await stored(store)
    state = await read_flow(store, "etl")
    assert state is not None
    await append_raw(store, encode(state.last_seq + 1, [["intent", "t9", "s0#1", ["a"], 1]])[:-1])
    flows = StoreFlows(store)
    assert [f.name for f in await flows.list()] == ["etl"]
    assert await flows.cancel("etl") is True
    status = await flows.get("etl")
    assert status is not None and status.state == "cancelled"
