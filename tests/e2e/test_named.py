"""Named jobs end to end: put/get/list/delete, generations that never fire stale, and status."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from datetime import timedelta

import pytest

from cluster import FailurePolicy, Target
from cluster.model.errors import AlreadyExists
from tests.e2e.conftest import executions, silo_pid, wait_for

pytestmark = pytest.mark.ray


@pytest.mark.file_only
async def test_put_get_list_delete_by_name_scoped_per_app(make_cluster, recorder):
    name, _ = recorder
    jobs = make_cluster(silos=1).client().jobs
    put = await jobs.put("db-backup", target=Target.actor(name), schedule="@daily", data={"db": "prod"},
                         metadata={"team": "ops"})
    await jobs.put("db-vacuum", target=Target.actor(name), due_time="1h")
    await jobs.put("db-backup", target=Target.actor(name), due_time="1h", app_id="billing")

    got = await jobs.get("db-backup")
    assert got is not None and got.job.id == put.job.id and got.generation == 1
    assert got.job.data == {"db": "prod"} and got.metadata == {"team": "ops"} and got.job.schedule.text == "@daily"
    assert got.status.next_fire == put.job.due and got.status.successful == 0
    assert [j.name for j in await jobs.list("db-")] == ["db-backup", "db-vacuum"]
    assert [j.name for j in await jobs.list(app_id="billing")] == ["db-backup"]

    with pytest.raises(AlreadyExists):
        await jobs.put("db-backup", target=Target.actor(name), due_time="2h")
    assert (await jobs.get("db-backup")).job.id == put.job.id, "a refused put changed nothing"

    assert await jobs.delete("db-backup") is True
    assert await jobs.get("db-backup") is None and await jobs.delete("db-backup") is False
    assert (await jobs.get("db-backup", app_id="billing")) is not None, "other app_id untouched"
    assert await jobs.delete_prefix("db-") == 1 and await jobs.list() == []


async def test_overwrite_makes_a_new_generation_and_the_old_one_never_fires(make_cluster, recorder):
    name, handle = recorder
    jobs = make_cluster(silos=2).client().jobs
    first = await jobs.put("tick", target=Target.actor(name), schedule="@every 1s")
    await wait_for(lambda: executions(handle), timeout=20)
    second = await jobs.put("tick", target=Target.actor(name), schedule="@every 1s", overwrite=True)
    replaced_at = time.time()
    assert second.generation == 2 and second.job.id != first.job.id
    await wait_for(lambda: any(r["job_id"] == second.job.id for r in executions(handle)), timeout=20)
    assert await jobs.delete("tick") is True
    deleted_at = time.time()
    await asyncio.sleep(1.5)
    for r in executions(handle):
        if r["job_id"] == first.job.id:
            assert r["started"] < replaced_at, "generation 1 started after the overwrite returned"
        else:
            assert r["job_id"] == second.job.id and r["started"] < deleted_at, "started after delete returned"


async def test_no_older_generation_starts_after_put_returns_even_when_a_silo_is_killed(make_cluster, recorder):
    name, handle = recorder
    cluster = make_cluster(silos=2)
    jobs = cluster.client().jobs
    returned: list[tuple[str, float]] = []  # (job id, when the put that replaced it returned)
    current = await jobs.put("gen", target=Target.actor(name), schedule="@every 1s")
    for _ in range(4):
        victim = random.choice(cluster.silo_ids)
        pid = silo_pid(cluster, victim)

        async def kill_soon(pid: int) -> None:
            await asyncio.sleep(random.uniform(0.0, 0.03))
            os.kill(pid, signal.SIGKILL)

        killer = asyncio.ensure_future(kill_soon(pid))
        new = await jobs.put("gen", target=Target.actor(name), schedule="@every 1s", overwrite=True)
        returned.append((current.job.id, time.time()))
        current = new
        await killer
        cluster.wait_ready()
    await wait_for(lambda: any(r["job_id"] == current.job.id for r in executions(handle)), timeout=30)
    await asyncio.sleep(2.0)
    runs = executions(handle)
    for job_id, at in returned:
        late = [r for r in runs if r["job_id"] == job_id and r["started"] >= at]
        assert not late, f"an older generation started {late[0]['started'] - at:.3f} s after put returned"
    got = await jobs.get("gen")
    assert got.job.id == current.job.id and got.generation == 5


@pytest.mark.file_only
async def test_status_counts_successes_failures_and_shows_the_last_attempt(make_cluster, recorder):
    name, _ = recorder
    jobs = make_cluster(silos=1).client().jobs
    await jobs.put("flaky", target=Target.actor(name), schedule="@every 2s", repeats=2,
                   data={"fail_attempts": 1}, failure_policy=FailurePolicy.constant("1s", max_retries=3))
    # Each occurrence fails once, then succeeds on the retry.
    status = (await wait_for(lambda: _status_when(jobs, "flaky", lambda s: s.finished), timeout=30)).status
    assert (status.successful, status.failed, status.interrupted) == (2, 2, 0)
    assert status.consecutive_failures == 0 and status.current_attempt is None and status.next_fire is None
    assert status.last_attempt.outcome == "succeeded" and status.last_attempt.attempt == 2
    assert status.attempts == 0 and status.last_attempted is None, "Dapr counters reset when an occurrence ends"


@pytest.mark.file_only
async def test_failed_attempt_shows_error_retry_time_and_virtual_attempt_counters(make_cluster, recorder):
    name, _ = recorder
    jobs = make_cluster(silos=1).client().jobs
    put = await jobs.put("doomed", target=Target.actor(name), due_time="200ms", data={"fail_attempts": 99},
                         failure_policy=FailurePolicy.constant("30s"))
    status = (await wait_for(lambda: _status_when(jobs, "doomed", lambda s: s.failed >= 1), timeout=20)).status
    assert status.consecutive_failures == 1 and "failing attempt 1" in status.last_attempt.error
    assert status.attempts == 1 and status.last_attempted == put.job.due, "virtual time, not the wall clock"
    assert status.next_fire == put.job.due + timedelta(seconds=30)


async def test_an_attempt_cut_short_by_a_silo_crash_counts_as_interrupted(make_cluster, recorder):
    name, handle = recorder
    cluster = make_cluster(silos=1)
    jobs = cluster.client().jobs
    await jobs.put("slow", target=Target.actor(name), due_time="200ms", data={"sleep": 3})
    running = await wait_for(lambda: _status_when(jobs, "slow", lambda s: s.current_attempt is not None), timeout=20)
    assert running.status.current_attempt.outcome == "running"
    os.kill(silo_pid(cluster, "0"), signal.SIGKILL)  # Ray restarts it; it adopts its own shard
    cluster.wait_ready()
    named = await wait_for(lambda: _status_when(jobs, "slow", lambda s: s.interrupted == 1 and s.successful == 1), timeout=30)
    assert named.status.consecutive_failures == 0
    assert len(executions(handle)) == 2, "the interrupted attempt ran again (at least once)"


async def _status_when(jobs, name, predicate):
    got = await jobs.get(name)
    return got if got is not None and predicate(got.status) else None
