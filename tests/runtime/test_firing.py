"""Firing without Ray: due jobs leave in one call per target, only under a valid lease, never early."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from tests.runtime.harness import T0, Recorder, add, fire_due, job, make_parts, until_idle


async def test_due_jobs_go_to_their_target_in_one_batch_and_nothing_early() -> None:
    parts = await make_parts()
    parts.transport.handlers.update(h=Recorder(), other=Recorder())
    early, late = job(due=timedelta(seconds=1)), job(due=timedelta(seconds=2))
    elsewhere = job("other", due=timedelta(seconds=1))
    await add(parts, early, late, elsewhere)
    parts.lease.renew(parts.clock.monotonic())
    await fire_due(parts)
    assert parts.transport.calls == []  # nothing is due at T0
    parts.clock.advance(1.5)
    await fire_due(parts)
    assert sorted(name for name, _ in parts.transport.calls) == ["h", "other"]
    assert sorted(parts.transport.delivered()) == sorted([early.id, elsewhere.id])
    assert late.id in parts.queue


async def test_a_silo_whose_lease_lapsed_fires_nothing_until_a_heartbeat_renews_it() -> None:
    parts = await make_parts()
    parts.transport.handlers["h"] = Recorder()
    await add(parts, job(due=timedelta(seconds=1)))
    parts.clock.advance(10)  # joined long ago, no heartbeat since: the lease has lapsed
    assert not parts.lease.valid
    loop = asyncio.ensure_future(parts.firing.run())
    try:
        await until_idle()
        assert parts.transport.calls == []
        parts.lease.renew(parts.clock.monotonic())
        await until_idle()
        assert len(parts.transport.calls) == 1
    finally:
        loop.cancel()


async def test_a_job_for_an_absent_target_is_staged_and_sent_once_the_target_exists() -> None:
    parts = await make_parts()
    j = job("late-actor")
    await add(parts, j)
    parts.lease.renew(parts.clock.monotonic())
    parts.clock.advance(1)
    await fire_due(parts)
    assert j.id in parts.runs.staged and not parts.runs.inflight
    parts.transport.handlers["late-actor"] = recorder = Recorder()
    await parts.firing.retry_staged()
    await fire_due(parts)
    assert [ctx.job.id for ctx in recorder.ran] == [j.id]
    assert not parts.runs.staged


async def test_a_job_whose_ttl_passed_is_removed_without_running() -> None:
    parts = await make_parts()
    parts.transport.handlers["h"] = recorder = Recorder()
    j = job(due=timedelta(seconds=1), schedule="@every 1s", ttl=T0 + timedelta(seconds=2))
    await add(parts, j)
    parts.lease.renew(parts.clock.monotonic())
    parts.clock.advance(3)
    await fire_due(parts)
    assert recorder.ran == []
    shard = next(iter(parts.shards))
    assert shard.state is not None and j.id not in shard.state.live
