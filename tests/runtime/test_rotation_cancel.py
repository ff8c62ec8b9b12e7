"""A cancel whose removal a rotation's snapshot made durable holds: it answers "cancelled" and the
job never starts, even though a metadata change queued ahead of the removal failed."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import timedelta

from cluster.runtime.roles import Roles
from cluster.runtime.shardlog import ShardState
from storage import MemoryStore, Unavailable, read_log
from tests.runtime.harness import Blocking, GatedStore, ManualClock, Recorder, add, job, make_parts, until_idle


class MarksFail(GatedStore):
    """A gated memory store on which, while ``marks_fail``, a shard's firing mark fails."""

    marks_fail = False

    async def set_metadata(self, name: str, metadata: Mapping[str, str], if_match: str | None) -> str:
        if self.marks_fail and metadata.get("firing"):
            raise Unavailable("injected: the firing mark failed")
        return str(await self.inner.set_metadata(name, metadata, if_match))


async def fire(parts: Roles, clock: ManualClock, seconds: float) -> None:
    """Move the clock on, start what is due, and let everything that can happen meanwhile happen."""
    clock.advance(seconds)
    parts.lease.renew(clock.monotonic())
    parts.firing.dispatch(parts.queue.pop_due(limit=parts.runs.room))
    await until_idle()


async def test_a_removal_a_rotation_made_durable_behind_a_failed_mark_is_a_cancel() -> None:
    """Simulator seed 263574. The writer rotated its log (the store's block limit) with, queued,
    a firing mark and behind it a cancel's removal; the snapshot, taken from memory, left the
    job out. Only the records ahead of the mark counted as covered: the mark failed, the
    removal failed with it, the cancel put the job back in memory and queue, and it started
    from a silo whose log said it was gone (the client, told the cancel failed, saw it run
    after the store held its cancel)."""
    store, clock = MarksFail(MemoryStore(max_blocks=3)), ManualClock()
    parts = await make_parts(store, clock=clock)  # type: ignore[arg-type]
    parts.transport.handlers["h"] = recorder = Recorder()
    parts.transport.handlers["slow"] = slow = Blocking()
    a, b, j = job("slow", due=timedelta(seconds=1)), job(due=timedelta(seconds=2)), job(due=timedelta(seconds=3))
    (name, *_) = await add(parts, a, b, j)  # three appends: the store takes no more blocks in this generation
    store.marks_fail = True  # a leaves unmarked (fired anyway), so b's batch writes a mark of its own
    await fire(parts, clock, 1)
    assert slow.ran == [1]
    landing = store.gate("append_block", name)
    slow.finish.set()  # a's outcome: its removal waits at the store, the writer busy with it
    await until_idle()
    assert store.reached("append_block", name).is_set()
    await fire(parts, clock, 1)  # b's batch leaves: its mark queues behind a's removal
    cancelling = asyncio.ensure_future(parts.cancelling.cancel(name, j.id))
    await until_idle()  # the cancel's removal queues behind the mark
    landing.set()  # a's removal: LogFull; the writer rotates, its snapshot without j; the mark fails
    await until_idle()
    shard = parts.shards.get(name)
    assert shard is not None and shard.writer.rotations == 1
    assert j.id not in ShardState().replay((await read_log(store, name)).records()).live  # type: ignore[arg-type]
    assert await asyncio.wait_for(cancelling, 5) == ("cancelled", None)  # before the fix: Unavailable
    await fire(parts, clock, 2)  # j is due
    assert [ctx.job.id for ctx in recorder.ran] == [b.id]  # before the fix: b, then j
    assert slow.ran == [1]
