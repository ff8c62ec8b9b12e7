"""``timeshard ui``'s Flows page: its JSON endpoints over a fake ``client.flows`` (no Ray)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from cluster.cli.ui import UiSource, make_app
from cluster.flows.api import FLOW_STATES, DamagedFlow, FlowPage
from cluster.flows.log import FlowLogDamaged
from cluster.flows.model import FlowStatus, StepStatus
from cluster.model.errors import ValidationError
from tests.test_ui import from_the_page

T0 = datetime(2026, 11, 26, 12, 0, tzinfo=timezone.utc)


def flow(name: str, state: str = "running") -> FlowStatus:
    """a -> b -> {c, d}; a succeeded, b retrying after one failure."""
    def step(n: str, st: str, deps: tuple[str, ...], **kw: Any) -> StepStatus:
        fields: dict[str, Any] = {"attempts": 0, "next_retry": None, "started_at": None, "ended_at": None,
                                  "error": None, **kw}
        return StepStatus(n, st, depends_on=deps, job_id=f"{name}-{n}", **fields)

    steps = [step("a", "succeeded", (), attempts=1, started_at=T0, ended_at=T0 + timedelta(seconds=3)),
             step("b", "retrying", ("a",), attempts=1, started_at=T0 + timedelta(seconds=4), error="boom",
                  next_retry=T0 + timedelta(minutes=5), shard=f"shards/w-{name}-b"),
             step("c", "pending", ("b",)), step("d", "pending", ("b",))]
    return FlowStatus(name, f"id-{name}", state, None, {s.name: s for s in steps}, T0, None)


class FakeFlows:
    """``client.flows`` over a dict: records each call so tests see what the UI asked for."""

    def __init__(self, names: list[str]) -> None:
        self.flows = {n: flow(n) for n in names}
        self.damaged: dict[str, str] = {}  # flows whose log cannot be read, and why
        self.calls: list[tuple[Any, ...]] = []

    async def page(self, prefix: str = "", *, state: str | None = None, offset: int = 0, limit: int = 50) -> FlowPage:
        self.calls.append(("page", prefix, state, offset, limit))
        if state is not None and state not in FLOW_STATES:
            raise ValidationError("state", "must be a flow state", state)
        found = [f for n, f in sorted(self.flows.items()) if n.startswith(prefix) and state in (None, f.state)]
        damaged = () if state else tuple(DamagedFlow(n, r) for n, r in sorted(self.damaged.items()) if n.startswith(prefix))
        return FlowPage(tuple(found[offset:offset + limit]), len(found), damaged)

    async def get(self, name: str) -> FlowStatus | None:
        self.calls.append(("get", name))
        if name in self.damaged:
            raise FlowLogDamaged(f"flow log {name!r}: {self.damaged[name]}")
        return self.flows.get(name)

    async def cancel(self, name: str) -> bool:
        self.calls.append(("cancel", name))
        found = self.flows.get(name)
        if found is None or found.state != "running":
            return False
        self.flows[name] = FlowStatus(name, found.id, "cancelled", None, found.steps, found.created_at, T0)
        return True


@pytest.fixture
def fake_flows() -> FakeFlows:
    fake = FakeFlows([f"etl-{i:03d}" for i in range(12)] + ["report"])
    fake.flows["etl-003"] = flow("etl-003", "halted")
    return fake


@pytest.fixture
async def ui(fake_flows: FakeFlows) -> AsyncIterator[TestClient]:
    app = make_app(UiSource(status=lambda: [], jobs=None, flows=fake_flows), page_size=5)
    client = TestClient(TestServer(app))
    await client.start_server()
    yield client
    await client.close()


async def test_flows_are_paged_and_filtered_on_the_server(ui: TestClient, fake_flows: FakeFlows) -> None:
    page3 = await (await ui.get("/api/flows?prefix=etl-&page=3")).json()
    assert (page3["page"], page3["total"], page3["pages"]) == (3, 12, 3)
    assert [f["name"] for f in page3["items"]] == ["etl-010", "etl-011"]
    assert fake_flows.calls[-1] == ("page", "etl-", None, 10, 5), "only the page is asked for"
    row = page3["items"][0]
    assert (row["state"], row["steps_done"], row["steps_total"], row["created_at"], row["ended_at"]) == (
        "running", 1, 4, "2026-11-26T12:00:00+00:00", None)

    halted = await (await ui.get("/api/flows?state=halted")).json()
    assert [f["name"] for f in halted["items"]] == ["etl-003"] and halted["total"] == 1
    assert fake_flows.calls[-1] == ("page", "", "halted", 0, 5)
    assert (await ui.get("/api/flows?state=bogus")).status == 400
    assert (await ui.get("/api/flows?page=0")).status == 400


async def test_a_flow_shows_every_step_with_its_dependencies(ui: TestClient) -> None:
    shown = await (await ui.get("/api/flows/etl-001")).json()
    assert (shown["name"], shown["state"], shown["id"]) == ("etl-001", "running", "id-etl-001")
    steps = {s["name"]: s for s in shown["steps"]}
    assert [s["name"] for s in shown["steps"]] == ["a", "b", "c", "d"]
    assert {n: s["depends_on"] for n, s in steps.items()} == {"a": [], "b": ["a"], "c": ["b"], "d": ["b"]}
    assert steps["b"] == {"name": "b", "state": "retrying", "attempts": 1, "next_retry": "2026-11-26T12:05:00+00:00",
                          "started_at": "2026-11-26T12:00:04+00:00", "ended_at": None, "error": "boom",
                          "depends_on": ["a"], "job_id": "etl-001-b", "shard": "shards/w-etl-001-b"}
    assert steps["c"]["shard"] is None  # not scheduled yet: no shard to link to
    assert steps["a"]["ended_at"] == "2026-11-26T12:00:03+00:00"
    assert (await ui.get("/api/flows/nope")).status == 404


async def test_a_damaged_flow_log_is_listed_apart_and_its_detail_says_why(ui: TestClient,
                                                                            fake_flows: FakeFlows) -> None:
    fake_flows.damaged["etl-zz"] = "bad frame at 120"
    listed = await (await ui.get("/api/flows?prefix=etl-&page=1")).json()
    assert [f["name"] for f in listed["items"]] == ["etl-000", "etl-001", "etl-002", "etl-003", "etl-004"]
    assert listed["damaged"] == [{"name": "etl-zz", "reason": "bad frame at 120"}]
    detail = await ui.get("/api/flows/etl-zz")
    assert detail.status == 409 and "bad frame at 120" in (await detail.json())["error"]


async def test_cancel_calls_the_api_and_says_when_there_was_nothing_to_cancel(ui: TestClient,
                                                                              fake_flows: FakeFlows) -> None:
    page = await from_the_page(ui)
    answer = await ui.post("/api/flows/etl-002/cancel", headers=page)
    assert answer.status == 200 and (await answer.json())["cancelled"] is True
    assert ("cancel", "etl-002") in fake_flows.calls and fake_flows.flows["etl-002"].state == "cancelled"
    again = await ui.post("/api/flows/etl-002/cancel", headers=page)
    assert again.status == 409 and "already cancelled" in (await again.json())["error"]
    assert (await ui.post("/api/flows/nope/cancel", headers=page)).status == 404
    assert (await ui.get("/api/flows/etl-002/cancel")).status == 405, "a GET never cancels"


async def test_without_a_flows_api_the_page_says_so() -> None:
    client = TestClient(TestServer(make_app(UiSource(status=lambda: [], jobs=None))))
    await client.start_server()
    try:
        answer = await client.get("/api/flows")
        assert answer.status == 503 and "client.flows" in await answer.text()
    finally:
        await client.close()
