"""Actor reminders are named jobs of their actor: register, fire on the period, replace, unregister."""

from __future__ import annotations

import asyncio

import pytest

from cluster import Target
from tests.e2e.conftest import executions, wait_for

pytestmark = pytest.mark.ray


@pytest.mark.file_only
async def test_register_fires_per_period_then_list_and_unregister(make_cluster, recorder):
    name, handle = recorder
    client = make_cluster(silos=1).client()
    actor = Target.actor(name)
    reminder = await client.reminders.register(actor, "ping", due_time="200ms", period="R2/PT1S", data={"n": 1})
    assert reminder.job.repeats == 2 and reminder.job.schedule.text == "@every 1s"
    await client.reminders.register(actor, "later", due_time="1h", period="5m")
    assert [r.name for r in await client.reminders.list(actor)] == ["later", "ping"]
    assert await client.jobs.list() == [], "reminders do not mix with the app's named jobs"

    runs = await wait_for(lambda: (r := executions(handle)) and len(r) >= 2 and r, timeout=20)
    assert [r["occurrence"] for r in runs] == [1, 2] and all(r["name"] == "ping" for r in runs)
    assert round(runs[1]["scheduled_for"] - runs[0]["scheduled_for"], 3) == 1.0

    again = await client.reminders.register(actor, "later", due_time="2h")  # replaces: last write wins
    assert again.generation == 2 and again.job.schedule is None
    assert await client.reminders.unregister(actor, "later") is True
    assert await client.reminders.unregister(actor, "later") is False
    assert [r.name for r in await client.reminders.list(actor)] == ["ping"]
    ping = await client.reminders.get(actor, "ping")
    assert ping.status.successful == 2 and ping.status.finished
    await asyncio.sleep(0.5)
    assert len(executions(handle)) == 2
