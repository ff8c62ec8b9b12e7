"""Issue 16 on Ray: a named job's history survives the kill of the silo running it and keeps
growing after, and a triggered run fires now and counts in the status like any attempt."""

from __future__ import annotations

import os
import signal

import pytest

from cluster import JobNotFound, Target
from tests.e2e.conftest import executions, silo_pid, wait_for

pytestmark = [pytest.mark.ray, pytest.mark.file_only]


async def _history_when(jobs, predicate):
    got = await jobs.get("beat")
    return got.status if got is not None and predicate(got.status) else None


async def test_history_survives_a_failover_and_a_trigger_counts(make_cluster, recorder):
    name, handle = recorder
    cluster = make_cluster(silos=2, history_size=20)
    client = cluster.client()
    jobs = client.jobs
    await jobs.put("beat", target=Target.actor(name), schedule="@every 1s")
    before = await wait_for(lambda: _history_when(jobs, lambda s: len(s.history) >= 2), timeout=20)

    # Trigger now: a run of its own, at once, counted in the status; the schedule does not move.
    run = await jobs.trigger("beat")
    counted = await wait_for(lambda: _history_when(jobs, lambda s: any(h.triggered for h in s.history)), timeout=10)
    (triggered,) = [h for h in counted.history if h.triggered]
    ran = [r for r in executions(handle) if r["job_id"] == run.id]
    assert len(ran) == 1 and triggered.run_id == ran[0]["run_id"] and triggered.outcome == "succeeded"
    assert abs(ran[0]["scheduled_for"] - run.due.timestamp()) < 1e-3 and ran[0]["ctx_started"] >= ran[0]["scheduled_for"]
    # The schedule goes on: a next fire, or (read while it runs, which clears it) an occurrence running.
    running = counted.current_attempt is not None and not counted.current_attempt.triggered
    assert counted.successful == len(counted.history) and (counted.next_fire is not None or running), counted
    assert not counted.finished

    # Kill the silo that ran the latest occurrence: the one that holds the job's chain now.
    latest = next(h for h in counted.history if not h.triggered)
    victim = latest.owner.rpartition("#")[0]
    earlier = {h.run_id for h in counted.history}
    os.kill(silo_pid(cluster, victim), signal.SIGKILL)  # Ray restarts it as a new incarnation
    after = await wait_for(lambda: _history_when(
        jobs, lambda s: sum(h.owner != latest.owner and not h.triggered and h.started > latest.started
                            for h in s.history) >= 2), timeout=30)

    kept = [h.run_id for h in after.history]
    assert earlier <= set(kept), "attempts recorded before the failover are still in the history"
    assert [h.started for h in after.history] == sorted((h.started for h in after.history), reverse=True)
    assert all(h.scheduled_for <= h.started and h.lateness.total_seconds() >= 0 for h in after.history)
    assert after.successful + after.failed + after.interrupted >= len(after.history) > len(before.history)
    assert len(before.history) >= 2


async def test_trigger_job_runs_a_plain_job_now_and_leaves_it_scheduled(make_cluster, recorder):
    name, handle = recorder
    client = make_cluster(silos=1).client()
    job = await client.schedule_job(Target.actor(name), "later", due="1h", data={"x": 1})
    run = await client.trigger_job(job)
    await wait_for(lambda: any(r["job_id"] == run.id for r in executions(handle)), timeout=10)
    assert [r["name"] for r in executions(handle)] == ["later"] and run.data == {"x": 1}
    assert await client.try_cancel_job(job), "the job itself is still scheduled for its time"
    with pytest.raises(LookupError):
        await client.trigger_job(job)
    with pytest.raises(JobNotFound):
        await client.jobs.trigger("no-such-job")
