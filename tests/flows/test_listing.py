"""Pages of flows (``FlowIndex`` / ``Flows.page``): filtered and paged in name order, reading
only the flow logs a page needs, and again only those that changed (memory store)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cluster import Flow, Step, Target
from cluster.flows.api import FlowIndex, Flows
from cluster.flows.log import create_log, read_flow, update
from cluster.flows.model import compile_flow
from cluster.model.errors import ValidationError
from storage import MemoryStore, Store, encode, open_store

T = Target.actor("worker")


class CountingStore(MemoryStore):
    """Counts every flow log fetched, by flow name."""

    def __init__(self) -> None:
        super().__init__()
        self.fetched: list[str] = []

    async def fetch(self, name: str, offset: int = 0) -> Any:
        self.fetched.append(name.removeprefix("flows/").rpartition("~")[0])
        return await super().fetch(name, offset)


async def add(store: Store, name: str) -> None:
    flow = Flow(name, [Step("a", T), Step("b", T, depends_on=["a"])])
    await create_log(store, compile_flow(flow, flow_id=name, created_us=0))


async def record(store: Store, name: str, *records: list[Any]) -> None:
    await update(store, name, lambda s: [r for r in records if s.apply(r)])


@pytest.fixture
async def store() -> CountingStore:
    store = CountingStore()
    for i in range(7):
        await add(store, f"etl-{i}")
    await add(store, "report")
    await record(store, "etl-1", ["run", "a", 1, 5], ["fail", "a", 1, "boom", 6])  # halted
    await record(store, "etl-4", ["cancel", 9])
    store.fetched.clear()
    return store


async def test_a_page_reads_only_its_own_flows_in_name_order(store: CountingStore) -> None:
    page = await FlowIndex().page(store, "etl-", offset=2, limit=3)
    assert [f.name for f in page.flows] == ["etl-2", "etl-3", "etl-4"] and page.total == 7
    assert sorted(store.fetched) == ["etl-2", "etl-3", "etl-4"]
    last = await FlowIndex().page(store, "etl-", offset=6, limit=3)
    assert [f.name for f in last.flows] == ["etl-6"]


async def test_a_state_filter_counts_every_match(store: CountingStore) -> None:
    index = FlowIndex()
    running = await index.page(store, state="running", offset=0, limit=2)
    assert [f.name for f in running.flows] == ["etl-0", "etl-2"] and running.total == 6
    halted = await index.page(store, state="halted")
    assert [(f.name, f.halted_by) for f in halted.flows] == [("etl-1", "a")] and halted.total == 1
    assert [f.name for f in (await index.page(store, "etl", state="cancelled")).flows] == ["etl-4"]


async def test_polling_again_reads_only_the_flows_that_changed(store: CountingStore) -> None:
    index = FlowIndex()
    await index.page(store, state="running")
    assert len(store.fetched) == 8
    store.fetched.clear()
    await record(store, "etl-3", ["run", "a", 1, 7])
    store.fetched.clear()
    again = await index.page(store, state="running")
    assert store.fetched == ["etl-3"], "unchanged logs are not fetched again"
    assert {f.name: f.steps["a"].state for f in again.flows}["etl-3"] == "running"
    await record(store, "etl-3", ["cancel", 8])
    cancelled = await index.page(store, state="cancelled")
    assert [f.name for f in cancelled.flows] == ["etl-3", "etl-4"], "a changed log is read again, not served stale"


async def test_a_flow_deleted_from_the_store_leaves_the_pages(store: CountingStore) -> None:
    index = FlowIndex()
    await index.page(store)
    info = next(i for i in await store.list("flows/report"))
    await store.delete(info.name, None)
    page = await index.page(store)
    assert "report" not in [f.name for f in page.flows] and page.total == 7


async def test_a_damaged_flow_log_is_named_and_hides_no_other_flow(store: CountingStore) -> None:
    info = next(i for i in await store.list("flows/etl-2"))
    state = await read_flow(store, "etl-2")
    assert state is not None
    # Bytes changed in the middle of the log (bit rot): a whole frame follows the bad ones.
    appended = await store.append_block(info.name, b"\xff\xfe not a frame", info.etag)
    await store.append_block(info.name, encode(state.last_seq + 2, [["cancelled", [], 0]]), appended.etag)
    page = await FlowIndex().page(store, "etl-", offset=0, limit=4)
    assert [f.name for f in page.flows] == ["etl-0", "etl-1", "etl-3"] and page.total == 7
    assert [d.name for d in page.damaged] == ["etl-2"] and page.damaged[0].reason
    running = await FlowIndex().page(store, state="running")  # a state filter cannot place it
    assert "etl-2" not in [f.name for f in running.flows] and not running.damaged


async def test_a_torn_tail_is_not_damage_the_flow_is_listed_as_it_stands(store: CountingStore) -> None:
    info = next(i for i in await store.list("flows/etl-2"))
    await store.append_block(info.name, encode(9, [["cancel", 1, "t"]])[:-3], info.etag)  # an append cut short
    page = await FlowIndex().page(store, "etl-", offset=0, limit=4)
    assert [f.name for f in page.flows] == ["etl-0", "etl-1", "etl-2", "etl-3"] and not page.damaged
    assert page.flows[2].state == "running", "the torn cancel was never acknowledged: it is not there"


@pytest.mark.parametrize(("args", "field"), [
    ({"state": "done"}, "state"), ({"offset": -1}, "offset"), ({"limit": 0}, "limit"), ({"limit": True}, "limit"),
])
async def test_bad_page_arguments_are_refused_naming_the_argument(store: CountingStore, args: dict[str, Any],
                                                                  field: str) -> None:
    with pytest.raises(ValidationError) as info:
        await FlowIndex().page(store, **args)
    assert info.value.field == field and store.fetched == []


class Submitter:
    """Just enough of a client for ``Flows`` to find its store."""

    def __init__(self, url: str) -> None:
        self.url = url

    async def describe(self) -> dict[str, Any]:
        return {"store_url": self.url}


async def test_flows_page_reads_the_clusters_store(tmp_path: Path) -> None:
    url = f"file://{tmp_path}"
    async with open_store(url) as store:
        for name in ("b-flow", "a-flow", "c-flow"):
            await add(store, name)
    flows = Flows(Submitter(url))  # type: ignore[arg-type]
    page = await flows.page(limit=2)
    assert [f.name for f in page.flows] == ["a-flow", "b-flow"] and page.total == 3
    assert [f.name for f in (await flows.page("c")).flows] == ["c-flow"]
