"""A retried schedule call finds the job its earlier try ran to its end, while the drained shard is
kept for ``retry_window`` (simulation, seed 1490: a client's retry, refused while the first silo was
not yet proven dead, came 18 s after its earlier try; seven recurring jobs had run every occurrence
from shards deleted once drained, and the retry added all seven again: each occurrence ran twice)."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta

import pytest

from cluster.model.errors import ValidationError
from cluster.model.jobs import ScheduledJob
from cluster.model.options import ClusterOptions
from cluster.runtime.shardlog import SHARD_PREFIX
from storage import MemoryStore, list_logs
from storage.generations import SEPARATOR
from tests.runtime.harness import (
    OPTIONS,
    GatedStore,
    LocalTransport,
    ManualClock,
    Recorder,
    fire_due,
    item,
    job,
    live_copies,
    make_parts,
)

KEPT = dataclasses.replace(OPTIONS, retry_window=timedelta(seconds=30))


async def _ran_and_drained(store: MemoryStore, clock: ManualClock, options: ClusterOptions,
                           silo: str = "a") -> tuple[ScheduledJob, str, Recorder]:
    """Silo ``silo`` lands a one-shot job (its client never heard), runs it, and is past its window."""
    first = await make_parts(store, silo, clock=clock, options=options)
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


async def test_a_retry_whose_search_listed_a_shard_deleted_before_its_read_answers_as_the_next_listing_would() -> None:
    """A drained shard is deleted once its retry window is over, maybe between a retry's listing
    of its window and its read of that shard's log. Gone, the shard holds nothing an earlier try
    can still add to or be found in, as the next listing says; the search raised ``NotFound``
    instead, the retry failed, and a flow step taken over from a client's intent waited a whole
    reconcile round more: an acknowledged flow's first step ran 128 s after it was due, past
    the end of the run (simulator seed 285077, every kind)."""
    gated, clock = GatedStore(), ManualClock()
    store = gated.inner
    j, earlier, ran = await _ran_and_drained(store, clock, KEPT)
    again = await make_parts(store, "a", clock=clock, options=KEPT, transport=LocalTransport(predecessors_exited=True))
    held = await again.adoption.claim_for_cancel(earlier)  # held by a's next incarnation: no earlier try reaches it
    assert held is not None
    second = await make_parts(gated, "b", clock=clock, options=KEPT)  # type: ignore[arg-type]
    read = gated.gate("list", earlier + SEPARATOR)  # the search's read of the listed shard waits here
    retry = asyncio.ensure_future(second.scheduling.schedule([item(j)], suspects=["a"]))
    await gated.reached("list", earlier + SEPARATOR).wait()
    clock.advance(KEPT.retry_window.total_seconds() + 1)
    again.lease.renew(clock.monotonic())
    second.lease.renew(clock.monotonic())
    await again.loading.delete_drained()  # its holder deletes it: drained, its retry window over
    assert [head.base for head in await list_logs(store, SHARD_PREFIX)] == []
    read.set()
    (name,) = await retry  # before the fix: NotFound
    # Added again, once: its earlier try's shard is gone (the one more run the retry window bounds).
    assert name != earlier and [shard for shard, _ in await live_copies(store, j.id)] == [name]
    assert len(ran.ran) == 1


async def test_a_retry_of_a_recurring_job_whose_search_listed_a_later_shard_deleted_before_its_read_adds_it_once() -> None:
    """The same race where a retry looks for a recurring job's earlier try moved on: every shard
    of its window or later is read, whoever created it, and one deleted after the listing raised
    ``NotFound`` in the same way."""
    gated, clock = GatedStore(), ManualClock()
    store = gated.inner
    _, drained, _ = await _ran_and_drained(store, clock, KEPT, silo="c")  # no suspect's: read for moves alone
    again = await make_parts(store, "c", clock=clock, options=KEPT, transport=LocalTransport(predecessors_exited=True))
    held = await again.adoption.claim_for_cancel(drained)
    assert held is not None
    second = await make_parts(gated, "b", clock=clock, options=KEPT)  # type: ignore[arg-type]
    j = job(due=timedelta(seconds=1), schedule="@every 20s")  # its earlier try, sent to a, never landed
    read = gated.gate("list", drained + SEPARATOR)
    retry = asyncio.ensure_future(second.scheduling.schedule([item(j)], suspects=["a"]))
    await gated.reached("list", drained + SEPARATOR).wait()
    clock.advance(KEPT.retry_window.total_seconds() + 1)
    again.lease.renew(clock.monotonic())
    second.lease.renew(clock.monotonic())
    await again.loading.delete_drained()
    assert [head.base for head in await list_logs(store, SHARD_PREFIX)] == []
    read.set()
    (name,) = await retry  # before the fix: NotFound
    assert [shard for shard, _ in await live_copies(store, j.id)] == [name]


def test_a_negative_retry_window_is_refused_by_name() -> None:
    with pytest.raises(ValidationError) as info:
        ClusterOptions(retry_window="-1s")
    assert info.value.field == "retry_window"
    assert ClusterOptions(retry_window="0s").retry_window == timedelta(0)  # 0: deleted once drained
