"""Loading without Ray: a dormant shard loads once its window nears; drained shards are deleted."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from cluster.runtime.shardlog import SHARD_PREFIX
from storage import list_logs
from tests.runtime.harness import Recorder, add, fire_due, job, make_parts


async def test_a_dormant_shard_loads_and_queues_its_jobs_once_its_window_is_within_the_lookahead() -> None:
    parts = await make_parts()
    j = job(due=timedelta(seconds=32))  # window T0+30 s, lookahead 5 s
    (name,) = await add(parts, j)
    await parts.loading.load_due()
    shard = parts.shards.get(name)
    assert shard is not None and not shard.loaded
    parts.clock.advance(26)
    await parts.loading.load_due()
    assert shard.loaded and parts.queue.get(j.id) is not None


async def test_a_recurring_job_that_missed_occurrences_while_dormant_skips_to_the_next_when_told_to() -> None:
    parts = await make_parts()
    j = job(due=timedelta(seconds=21), schedule="@every 1s", misfire="skip")
    (name,) = await add(parts, j)
    parts.clock.advance(25)  # four occurrences passed while the shard was dormant
    await parts.loading.load_due()
    for _ in range(10):
        await asyncio.sleep(0)
    shard = parts.shards.get(name)
    assert shard is not None and shard.state is not None
    due = shard.state.live[j.id][0]
    assert due > parts.clock.now_us() - 1_000_000  # not the missed T0+21 s


async def test_a_drained_shard_past_its_window_is_deleted() -> None:
    parts = await make_parts()
    parts.transport.handlers["h"] = Recorder()
    (name,) = await add(parts, job())
    parts.lease.renew(parts.clock.monotonic())
    parts.clock.advance(1)
    await fire_due(parts)
    await parts.loading.delete_drained()
    assert [h.base for h in await list_logs(parts.store, SHARD_PREFIX)] == [name]  # its window is not over yet
    parts.clock.advance(10)
    await parts.loading.delete_drained()
    assert await list_logs(parts.store, SHARD_PREFIX) == []
    assert parts.shards.get(name) is None
