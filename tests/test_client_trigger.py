"""``trigger_job`` without a Ray cluster: in-process silos behind stand-ins for Ray handles (as in
test_client_retry). A trigger is durable once acknowledged, also when the silo that wrote it dies
before answering, and exactly one run is added."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from cluster.client import Client
from cluster.model.errors import InvalidJob, JobNotFound
from cluster.model.jobs import Target
from cluster.model.trigger import TRIGGERED_FROM
from tests.runtime.harness import OPTIONS
from tests.test_client_retry import Cluster, copies


async def test_a_trigger_lands_once_although_its_silo_died_before_answering(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = Cluster()
    for silo_id in ("a", "b"):
        await cluster.start(silo_id)
    client = Client("test", ["a", "b"], OPTIONS)
    monkeypatch.setattr(client, "_handle", cluster.handle)
    (job,) = await client.schedule_jobs([{"target": Target.actor("h", "test"), "due": timedelta(hours=1),
                                          "data": {"to": "x"}}])
    cluster.killed.clear()  # the next schedule call, the trigger's, lands and its silo dies before answering
    before = datetime.now(timezone.utc)
    run = await client.trigger_job(job)
    assert cluster.killed, "the trigger's first try landed, and its silo died before answering"
    assert await copies(cluster.store, run.id) == [run.shard], "acknowledged: durable, and added once"
    assert run.metadata[TRIGGERED_FROM] == job.id and run.data == {"to": "x"} and run.schedule is None
    assert before <= run.due <= datetime.now(timezone.utc)
    assert await copies(cluster.store, job.id) == [job.shard], "the job itself stays where it was"
    assert await client.try_cancel_job(job)
    with pytest.raises(JobNotFound) as raised:
        await client.trigger_job(job)
    assert isinstance(raised.value, LookupError) and job.id in str(raised.value)
    await cluster.stop()


async def test_a_flow_step_is_not_triggered(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = Cluster()
    await cluster.start("a")
    cluster.killed.append(None)  # type: ignore[arg-type]  # no kill in this test
    client = Client("test", ["a"], OPTIONS)
    monkeypatch.setattr(client, "_handle", cluster.handle)
    (job,) = await client.schedule_jobs([{"target": Target.actor("h", "test"), "due": timedelta(hours=1),
                                          "metadata": {"timeshard.flow": "f", "timeshard.step": "s"}}])
    with pytest.raises(InvalidJob, match="step of a flow"):
        await client.trigger_job(job)
    await cluster.stop()
