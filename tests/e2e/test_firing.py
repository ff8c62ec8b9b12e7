"""End to end on Ray: jobs are durable, fire on time (never early), retry, recur, and survive."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from datetime import datetime, timedelta, timezone
from itertools import pairwise

import pytest
import ray

from cluster import FailurePolicy, Target
from tests.e2e.conftest import RecorderActor, executions, silo_pid, wait_for

pytestmark = pytest.mark.ray


async def test_one_shot_jobs_fire_once_at_or_after_their_due_time(make_cluster, recorder):
    name, handle = recorder
    cluster = make_cluster(silos=2)
    client = cluster.client()
    now = datetime.now(timezone.utc)
    # Spread over several 2 s windows: some shards start dormant and are loaded as they near.
    specs = [{"target": Target.actor(name), "name": f"j{i}", "due": now + timedelta(seconds=0.3 + i * 0.15)} for i in range(30)]
    jobs = await client.schedule_jobs(specs)
    assert len({j.id for j in jobs}) == 30 and all(j.shard for j in jobs)

    runs = await wait_for(lambda: (r := executions(handle)) and len(r) >= 30 and r, timeout=30)
    by_id = {j.id: j for j in jobs}
    assert sorted(r["job_id"] for r in runs) == sorted(by_id), "every job fired exactly once"
    for r in runs:
        assert r["started"] >= by_id[r["job_id"]].due.timestamp(), "a job fired before its due time"
        assert r["dequeue_count"] == 1 and r["occurrence"] == 1
    await asyncio.sleep(1.0)
    assert len(executions(handle)) == 30, "nothing fired twice"


@pytest.mark.file_only
async def test_single_call_schedule_returns_a_job_that_fires(make_cluster, recorder):
    name, handle = recorder
    client = make_cluster(silos=1).client()
    job = await client.schedule_job(Target.actor(name), "single", due="300ms", data={"k": [1, 2]}, metadata={"m": "v"})
    assert job.name == "single" and job.data == {"k": [1, 2]} and job.metadata == {"m": "v"}
    (run,) = await wait_for(lambda: executions(handle))
    assert run["job_id"] == job.id and run["name"] == "single"


async def test_a_cancel_before_due_holds_also_after_a_silo_restart(make_cluster, recorder):
    name, handle = recorder
    cluster = make_cluster(silos=2)
    client = cluster.client()
    keep = await client.schedule_job(Target.actor(name), "keep", due="2500ms")
    drop = await client.schedule_job(Target.actor(name), "drop", due="2500ms")
    assert await client.try_cancel_job(drop) is True
    assert await client.try_cancel_job(drop) is False, "a second cancel finds nothing to cancel"
    for silo_id in cluster.silo_ids:  # crash every silo; Ray restarts them and they replay
        os.kill(silo_pid(cluster, silo_id), signal.SIGKILL)
    cluster.wait_ready()
    runs = await wait_for(lambda: executions(handle), timeout=30)
    await asyncio.sleep(1.0)
    runs = executions(handle)
    assert [r["job_id"] for r in runs] == [keep.id]


async def test_retries_follow_the_policy_with_dequeue_count_1_2_3(make_cluster, recorder):
    name, handle = recorder
    client = make_cluster(silos=1).client()
    job = await client.schedule_job(
        Target.actor(name), "flaky", due="200ms", data={"fail_attempts": 2},
        failure_policy=FailurePolicy.constant("400ms", max_retries=5),
    )
    runs = await wait_for(lambda: (r := executions(handle)) and len(r) >= 3 and r, timeout=20)
    assert [r["dequeue_count"] for r in runs] == [1, 2, 3]
    assert [r["outcome"] for r in runs] == ["failed", "failed", "succeeded"]
    # Virtual time: each retry is due 400 ms after the previous attempt's due time.
    assert [round(r["scheduled_for"] - job.due.timestamp(), 3) for r in runs] == [0.0, 0.4, 0.8]
    for r in runs:
        assert r["started"] >= r["scheduled_for"]
    await asyncio.sleep(0.8)
    assert len(executions(handle)) == 3


@pytest.mark.file_only
async def test_exhausted_retries_give_up(make_cluster, recorder):
    name, handle = recorder
    client = make_cluster(silos=1).client()
    await client.schedule_job(Target.actor(name), "hopeless", due="100ms", data={"fail_attempts": 99},
                              failure_policy=FailurePolicy.constant("100ms", max_retries=2))
    await wait_for(lambda: len(executions(handle)) >= 3)
    await asyncio.sleep(0.8)
    assert [r["dequeue_count"] for r in executions(handle)] == [1, 2, 3]


async def test_repeats_stop_a_recurring_job(make_cluster, recorder):
    name, handle = recorder
    client = make_cluster(silos=1, min_period="100ms").client()
    job = await client.schedule_job(Target.actor(name), "thrice", schedule="@every 300ms", repeats=3)
    runs = await wait_for(lambda: (r := executions(handle)) and len(r) >= 3 and r, timeout=20)
    await asyncio.sleep(1.0)
    runs = executions(handle)
    assert [r["occurrence"] for r in runs] == [1, 2, 3]
    assert len({r["job_id"] for r in runs}) == 1 and runs[0]["job_id"] == job.id
    gaps = [round(b["scheduled_for"] - a["scheduled_for"], 3) for a, b in pairwise(runs)]
    assert gaps == [0.3, 0.3], "occurrences follow the virtual-time grid"


@pytest.mark.file_only
async def test_ttl_stops_a_recurring_job(make_cluster, recorder):
    name, handle = recorder
    client = make_cluster(silos=1, min_period="100ms").client()
    now = datetime.now(timezone.utc)
    await client.schedule_job(Target.actor(name), "bounded", due=now + timedelta(milliseconds=200),
                              schedule="@every 250ms", ttl=now + timedelta(milliseconds=1000))
    await wait_for(lambda: len(executions(handle)) >= 3)
    await asyncio.sleep(1.2)
    runs = executions(handle)
    assert [r["occurrence"] for r in runs] == [1, 2, 3, 4]  # 0.2, 0.45, 0.7, 0.95 s; 1.2 s is past ttl
    assert all(r["scheduled_for"] <= (now + timedelta(seconds=1)).timestamp() for r in runs)


async def test_recurring_job_crosses_shard_windows_and_cancel_follows_it(make_cluster, recorder):
    name, handle = recorder
    client = make_cluster(silos=2, min_period="100ms").client()
    job = await client.schedule_job(Target.actor(name), "tick", schedule="@every 700ms")
    await wait_for(lambda: len(executions(handle)) >= 4, timeout=20)  # > one 2 s window
    assert await client.try_cancel_job(job) is True
    seen = len(executions(handle))
    await asyncio.sleep(1.5)
    assert len(executions(handle)) == seen, "a cancelled recurring job fired again"


@pytest.mark.file_only
async def test_a_grain_is_activated_on_demand(make_cluster):
    client = make_cluster(silos=1).client()
    key = uuid.uuid4().hex[:8]
    target = Target.grain("handlers.builtin:Recorder", key)
    await client.schedule_job(target, "wake", due="100ms")
    grain = await wait_for(lambda: _actor_or_none(target.name), timeout=20)
    runs = await wait_for(lambda: executions(grain), timeout=20)
    assert runs[0]["name"] == "wake"
    ray.kill(grain)


def _actor_or_none(name: str):
    try:
        return ray.get_actor(name, namespace=ray.get_runtime_context().namespace)
    except ValueError:
        for ns_actor in ray.util.list_named_actors(all_namespaces=True):
            if ns_actor["name"] == name:
                return ray.get_actor(name, namespace=ns_actor["namespace"])
        return None


@pytest.mark.file_only
async def test_an_absent_target_is_staged_then_delivered_when_it_appears(make_cluster):
    client = make_cluster(silos=1, undeliverable_timeout="30s").client()
    name = f"late-{uuid.uuid4().hex[:8]}"
    job = await client.schedule_job(Target.actor(name), "waits", due="100ms",
                                    failure_policy=FailurePolicy.drop())
    await asyncio.sleep(1.0)  # due and staged: with a drop policy, burning an attempt would lose it
    handle = RecorderActor.options(name=name, num_cpus=0).remote()
    runs = await wait_for(lambda: executions(handle), timeout=20)
    assert runs[0]["job_id"] == job.id and runs[0]["dequeue_count"] == 1
    ray.kill(handle)


async def test_a_silo_killed_and_restarted_by_ray_fires_everything_pending(make_cluster, recorder):
    name, handle = recorder
    cluster = make_cluster(silos=1)
    client = cluster.client()
    now = datetime.now(timezone.utc)
    jobs = await client.schedule_jobs(
        [{"target": Target.actor(name), "due": now + timedelta(seconds=1.5 + i * 0.05)} for i in range(40)]
    )
    os.kill(silo_pid(cluster, "0"), signal.SIGKILL)
    cluster.wait_ready()
    runs = await wait_for(lambda: (r := executions(handle)) and len({x["job_id"] for x in r}) >= 40 and r, timeout=40)
    assert {r["job_id"] for r in runs} == {j.id for j in jobs}, "nothing lost"
    due = {j.id: j.due.timestamp() for j in jobs}
    assert all(r["started"] >= due[r["job_id"]] for r in runs), "nothing early"


async def test_a_cancel_of_a_job_already_sent_ahead_keeps_it_from_starting(make_cluster, recorder):
    """Issue 15, point 2: sent to its handler well before it is due, a job is withdrawn by a cancel."""
    name, handle = recorder
    # A long window, so the cancel lands between the send and the due time even on a loaded
    # machine; its bound (half the firing lease) asks for a longer suspicion timeout.
    cluster = make_cluster(silos=1, dispatch_ahead="1500ms", suspicion_timeout="5s")
    client = cluster.client()
    # One job first: the silo's first send to an actor looks the actor up, which can take longer
    # than the window on a loaded machine.
    warm = await client.schedule_job(Target.actor(name), "warm", due=datetime.now(timezone.utc))
    await wait_for(lambda: executions(handle), timeout=10)
    due = datetime.now(timezone.utc) + timedelta(seconds=4)
    keep = await client.schedule_job(Target.actor(name), "keep", due=due)
    drop = await client.schedule_job(Target.actor(name), "drop", due=due)

    async def fired() -> float:
        status = await cluster.silos[0].status.remote()
        return status["counters"]["fired"]

    async def both_sent() -> bool:
        return await fired() >= 3

    await wait_for(both_sent, timeout=10, interval=0.01)  # both sent, neither due yet
    assert datetime.now(timezone.utc) < due - timedelta(milliseconds=300), "too slow to cancel before the due time"
    assert await client.try_cancel_job(drop) is True
    await wait_for(lambda: len(executions(handle)) >= 2, timeout=10)
    await asyncio.sleep(1.0)
    runs = executions(handle)
    assert [r["job_id"] for r in runs] == [warm.id, keep.id], "a cancelled job started"
    assert runs[1]["started"] >= due.timestamp(), "a job started before its due time"
    assert await fired() == 3  # both had been sent ahead: the cancel withdrew one
