"""The blocking client on a real cluster, where users call it: a plain script, a notebook cell (a
running event loop) and Ray workers it was handed to (issue 27, point 2)."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import ray

from cluster import SyncClient, Target
from storage import StorageError
from tests.e2e.conftest import executions
from tests.e2e.full_disk import assert_one_plain_line, fill_disk

pytestmark = [pytest.mark.ray, pytest.mark.file_only]


def fired(handle: Any, job_ids: set[str], timeout: float = 30.0) -> set[str]:
    """The ids among ``job_ids`` the recorder ran, once all of them ran (polled without a loop)."""
    deadline = time.monotonic() + timeout
    while True:
        ran = {r["job_id"] for r in executions(handle)} & job_ids
        if ran == job_ids or time.monotonic() > deadline:
            return ran
        time.sleep(0.1)


def test_a_script_schedules_cancels_and_names_jobs_without_await(make_cluster, recorder) -> None:
    name, handle = recorder
    with make_cluster(silos=2).client(sync=True) as client:
        job = client.schedule_job(Target.actor(name), "ping", due="300ms", data={"n": 1})
        later = client.schedule_job(Target.actor(name), "later", due="1h")
        assert job.shard and later.shard, "returned once durable, with the shard that holds it"
        assert client.try_cancel_job(later) is True and client.try_cancel_job(later) is False
        put = client.jobs.put("nightly", target=Target.actor(name), schedule="@daily")
        got = client.jobs.get("nightly")
        assert got is not None and got.job.id == put.job.id
        assert client.jobs.delete("nightly") is True and client.jobs.get("nightly") is None
        assert fired(handle, {job.id}) == {job.id}
        assert later.id not in {r["job_id"] for r in executions(handle)}
        with pytest.raises(ValueError):  # bad input: the same typed error as the async client's
            client.schedule_job(Target.actor(name), due="not a time")


async def test_a_notebook_cell_calls_it_while_its_event_loop_runs(make_cluster, recorder) -> None:
    """A notebook runs cells inside an event loop, where ``asyncio.run`` fails and a call that needs
    that loop to answer would hang it; the blocking client answers from a loop of its own."""
    name, handle = recorder
    client = make_cluster(silos=1).client(sync=True)
    asyncio.get_running_loop()  # as in a cell: a loop runs in this thread
    job = client.schedule_job(Target.actor(name), "from-a-cell", due="300ms")
    assert client.describe()["namespace"] == client.namespace
    assert await client.client.try_cancel_job(job) in (True, False), "the cell's loop still serves awaits"
    again = client.schedule_job(Target.actor(name), "second-cell", due="300ms")
    assert fired(handle, {again.id}) == {again.id}
    client.close()


@ray.remote
def schedule_in_a_task(client: SyncClient, target: str) -> str:
    return client.schedule_job(Target.actor(target), "from-a-task", due="300ms").id


@ray.remote
class AsyncCaller:
    """An async actor: its methods run inside the actor's event loop, like a notebook's cells."""

    async def schedule(self, client: SyncClient, target: str) -> str:
        return client.schedule_job(Target.actor(target), "from-an-actor", due="300ms").id


def test_ray_workers_call_it_handed_over_pickled(make_cluster, recorder) -> None:
    name, handle = recorder
    client = make_cluster(silos=1).client(sync=True)
    caller: Any = AsyncCaller.options(num_cpus=0).remote()  # type: ignore[attr-defined]
    ids = set(ray.get([schedule_in_a_task.remote(client, name), caller.schedule.remote(client, name)], timeout=60))
    assert fired(handle, ids) == ids and len(ids) == 2
    ray.kill(caller)


def test_a_silo_error_through_the_blocking_client_is_the_same_typed_error(make_cluster, store_url) -> None:
    """The disk-full case of ``test_errors``, through the blocking client."""
    client = make_cluster(silos=1).client(sync=True)
    due = datetime.now(timezone.utc) + timedelta(hours=1)
    fill_disk(store_url, due)
    with pytest.raises(StorageError) as caught:
        client.schedule_job(Target.actor("mailer"), due=due)
    assert type(caught.value) is StorageError
    assert_one_plain_line(caught.value)
