"""Cancel without Ray: a queued job never runs; a dormant shard is folded to look; others answer who owns."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from cluster.runtime.shardlog import CANCELLED, REMOVE
from storage import MemoryStore, StorageError, read_log
from tests.runtime.harness import Blocking, GatedStore, Recorder, add, fire_due, job, make_parts, until_idle


async def test_a_cancelled_job_is_removed_durably_and_never_fires() -> None:
    parts = await make_parts()
    parts.transport.handlers["h"] = recorder = Recorder()
    j = job()
    (name,) = await add(parts, j)
    assert await parts.cancelling.cancel(name, j.id) == ("cancelled", None)
    assert [REMOVE, j.id, 1, CANCELLED] in [op[:4] for op in (await read_log(parts.store, name)).records()]
    parts.lease.renew(parts.clock.monotonic())
    parts.clock.advance(2)
    await fire_due(parts)
    assert recorder.ran == []
    assert await parts.cancelling.cancel(name, j.id) == ("absent", None)


async def test_a_job_in_a_dormant_shard_is_cancelled_without_loading_it() -> None:
    parts = await make_parts()
    j = job(due=timedelta(hours=1))
    (name,) = await add(parts, j)
    assert await parts.cancelling.cancel(name, j.id) == ("cancelled", None)
    shard = parts.shards.get(name)
    assert shard is not None and not shard.loaded


async def test_a_shard_owned_by_a_live_peer_is_answered_with_its_owner() -> None:
    store = MemoryStore()
    owner = await make_parts(store, "o")
    j = job()
    (name,) = await add(owner, j)
    other = await make_parts(store, "x")
    assert await other.cancelling.cancel(name, j.id) == ("not_owner", "o#1")


async def test_a_cancel_whose_write_fails_leaves_the_job_to_fire() -> None:
    """Issue 12, point 5: the failed removal used to be applied in memory, so the job never fired."""
    store = GatedStore()
    parts = await make_parts(store)  # type: ignore[arg-type]
    parts.transport.handlers["h"] = recorder = Recorder()
    j = job()
    (name,) = await add(parts, j)
    store.fail_next("append_block", 3)  # the writer tries three times
    with pytest.raises(StorageError):
        await parts.cancelling.cancel(name, j.id)
    parts.lease.renew(parts.clock.monotonic())
    parts.clock.advance(2)
    await fire_due(parts)
    assert [ctx.job.id for ctx in recorder.ran] == [j.id]


async def test_a_cancel_of_a_running_job_whose_write_fails_lets_the_attempt_record_its_outcome() -> None:
    store = GatedStore()
    parts = await make_parts(store)  # type: ignore[arg-type]
    slow = Blocking()
    started, finish = slow.started, slow.finish
    parts.transport.handlers["h"] = slow
    j = job()
    (name,) = await add(parts, j)
    parts.lease.renew(parts.clock.monotonic())
    parts.clock.advance(2)
    firing = asyncio.ensure_future(fire_due(parts))
    await started.wait()
    store.fail_next("append_block", 3)  # the writer tries three times
    with pytest.raises(StorageError):
        await parts.cancelling.cancel(name, j.id)
    finish.set()
    await firing
    assert [REMOVE, j.id, 1, "succeeded"] in [op[:4] for op in (await read_log(store, name)).records()]  # type: ignore[arg-type]


async def test_a_cancel_that_waited_for_the_shard_while_the_job_started_stops_its_next_occurrence() -> None:
    """Found by the simulation: cancel looked for a run in flight, then waited for the shard's
    gate; the job started meanwhile, so the cancel removed it from the log while the run went
    on to add the next occurrence (or, refused, queued itself again): True did not hold."""
    parts = await make_parts()
    slow = Blocking()
    started, finish, ran = slow.started, slow.finish, slow.ran
    parts.transport.handlers["h"] = slow
    j = job(schedule="@every 1s", repeats=3)
    (name,) = await add(parts, j)
    shard = parts.shards.get(name)
    assert shard is not None
    held, free = asyncio.Event(), asyncio.Event()

    async def writer_in_progress() -> None:  # a write holding the shard, as a schedule call does
        async with shard.gate.shared():
            held.set()
            await free.wait()

    holder = asyncio.ensure_future(writer_in_progress())
    await held.wait()
    cancelling = asyncio.ensure_future(parts.cancelling.cancel(name, j.id))
    await until_idle()  # the cancel looked (no run) and now waits for the gate
    parts.lease.renew(parts.clock.monotonic())
    parts.clock.advance(2)
    parts.firing.dispatch(parts.queue.pop_due(limit=10))
    await started.wait()  # the job started while the cancel waited
    free.set()
    await holder
    finish.set()
    assert await cancelling == ("cancelled", None)
    while parts.runs.inflight:  # noqa: ASYNC110  the run's outcome ends on its own
        await asyncio.sleep(0.001)
    parts.clock.advance(5)
    parts.lease.renew(parts.clock.monotonic())
    await fire_due(parts)
    assert ran == [1]
    assert j.id not in parts.queue
