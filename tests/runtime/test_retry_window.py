"""A retried schedule call finds the job its earlier try ran to its end, while the drained shard is
kept for ``retry_window`` (simulation, seed 1490: a client's retry, refused while the first silo was
not yet proven dead, came 18 s after its earlier try; seven recurring jobs had run every occurrence
from shards deleted once drained, and the retry added all seven again: each occurrence ran twice)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from cluster.model.errors import ValidationError
from cluster.model.jobs import ScheduledJob
from cluster.model.options import ClusterOptions
from cluster.runtime.shardlog import SHARD_PREFIX
from storage import MemoryStore, list_logs
from tests.runtime.harness import OPTIONS, LocalTransport, ManualClock, Recorder, fire_due, item, job, make_parts

KEPT = dataclasses.replace(OPTIONS, retry_window=timedelta(seconds=30))


async def _ran_and_drained(store: MemoryStore, clock: ManualClock,
                           options: ClusterOptions) -> tuple[ScheduledJob, str, Recorder]:
    """Silo ``a`` lands a one-shot job (its client never heard), runs it, and is past its window."""
    first = await make_parts(store, "a", clock=clock, options=options)
    first.transport.handlers["h"] = ran = Recorder()
    j = job(due=timedelta(seconds=1))
    (earlier,) = await first.scheduling.schedule([item(j)])
    clock.advance(1)
    first.lease.renew(clock.monotonic())
    await fire_due(first)
    assert [ctx.job.id for ctx in ran.ran] == [j.id]
    clock.advance(OPTIONS.shard_duration.total_seconds() + OPTIONS.adoption_interval.total_seconds())
    first.lease.renew(clock.monotonic())
    await first.loading.delete_drained()  # drained and past its window
    return j, earlier, ran


async def test_a_retry_within_the_window_finds_the_job_its_earlier_try_ran_and_adds_nothing() -> None:
    store, clock = MemoryStore(), ManualClock()
    j, earlier, ran = await _ran_and_drained(store, clock, KEPT)
    assert [head.base for head in await list_logs(store, SHARD_PREFIX)] == [earlier]  # kept for retries
    await make_parts(store, "a", clock=clock, options=KEPT, transport=LocalTransport(predecessors_exited=True))
    second = await make_parts(store, "b", clock=clock, options=KEPT)
    second.transport.handlers["h"] = again = Recorder()
    assert await second.scheduling.schedule([item(j)], suspects=["a"]) == [earlier]
    for _ in range(3):
        clock.advance(1)
        second.lease.renew(clock.monotonic())
        await fire_due(second)
    assert again.ran == [] and len(ran.ran) == 1  # before: added again into b's shard, and run twice


async def test_a_drained_shard_is_deleted_once_its_retry_window_is_over() -> None:
    store, clock = MemoryStore(), ManualClock()
    parts = await make_parts(store, "a", clock=clock, options=KEPT)
    parts.transport.handlers["h"] = Recorder()
    (name,) = await parts.scheduling.schedule([item(job(due=timedelta(seconds=1)))])
    clock.advance(1)
    parts.lease.renew(clock.monotonic())
    await fire_due(parts)
    clock.advance(KEPT.shard_duration.total_seconds())
    parts.lease.renew(clock.monotonic())
    await parts.loading.delete_drained()
    assert [head.base for head in await list_logs(store, SHARD_PREFIX)] == [name]  # 11 s after its write: kept
    clock.advance(KEPT.retry_window.total_seconds() - 11 + 0.5)
    parts.lease.renew(clock.monotonic())
    await parts.loading.delete_drained()
    assert await list_logs(store, SHARD_PREFIX) == [] and parts.shards.get(name) is None


def test_a_negative_retry_window_is_refused_by_name() -> None:
    with pytest.raises(ValidationError) as info:
        ClusterOptions(retry_window="-1s")
    assert info.value.field == "retry_window"
    assert ClusterOptions(retry_window="0s").retry_window == timedelta(0)  # 0: deleted once drained
