"""Staging without Ray: due jobs wait for an absent target, then go, or fail after the timeout."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from cluster.model.policies import FailurePolicy
from tests.runtime.harness import Recorder, add, fire_due, job, make_parts, until_idle


async def test_a_staged_job_holds_no_concurrency_slot_and_fails_after_the_undeliverable_timeout() -> None:
    parts = await make_parts()
    j = job("nobody", failure_policy=FailurePolicy.drop())
    (name,) = await add(parts, j)
    parts.lease.renew(parts.clock.monotonic())
    parts.clock.advance(1)
    await fire_due(parts)
    assert list(parts.runs.staged) == [j.id] and parts.runs.room == parts.runs.max_concurrency
    parts.clock.advance(29)
    assert await parts.staging.take_due() == ([], [])  # 29 s < the 30 s undeliverable_timeout
    parts.clock.advance(2)
    ready, expired = await parts.staging.take_due()
    assert ready == [] and [run.job_id for run, _ in expired] == [j.id]
    assert "undeliverable" in expired[0][1]


async def test_staged_jobs_go_to_their_target_together_once_it_appears() -> None:
    parts = await make_parts()
    jobs = [job("later", due=timedelta(seconds=1)) for _ in range(3)]
    await add(parts, *jobs)
    parts.lease.renew(parts.clock.monotonic())
    parts.clock.advance(1)
    await fire_due(parts)
    assert len(parts.runs.staged) == 3
    parts.transport.handlers["later"] = recorder = Recorder()
    await parts.firing.retry_staged()
    await until_idle()
    assert len(parts.transport.calls) == 1 and len(recorder.ran) == 3


async def test_cancelling_a_staged_job_answers_at_once_and_it_never_starts() -> None:
    # A staged run was never sent, so nothing will ever finish it: the cancel waited for its end
    # forever (the flows example's `client.flows.cancel`, whose steps' actor did not exist, hung).
    parts = await make_parts()
    j = job("nobody", failure_policy=FailurePolicy.drop())
    (name,) = await add(parts, j)
    parts.lease.renew(parts.clock.monotonic())
    parts.clock.advance(1)
    await fire_due(parts)
    assert list(parts.runs.staged) == [j.id]
    assert await asyncio.wait_for(parts.cancelling.cancel(name, j.id), 5) == ("cancelled", None)
    assert not parts.runs.staged and j.id not in parts.runs.inflight
    parts.transport.handlers["nobody"] = recorder = Recorder()  # the target appears: still nothing runs
    await parts.firing.retry_staged()
    await until_idle()
    assert recorder.ran == [] and parts.transport.calls == []
