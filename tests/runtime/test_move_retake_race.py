"""A recurring job's move carried out twice — by its outcome and by a take-back of its source
shard — queues its next occurrence once: each occurrence runs once."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from cluster.model.attempt import JobContext
from cluster.runtime.roles import Roles
from storage import StorageError
from tests.runtime.harness import Blocking, GatedStore, ManualClock, Recorder, add, job, make_parts, until_idle


class Occurrences:
    """Notes each occurrence it starts; occurrence ``n`` runs until ``finish[n]`` is set."""

    def __init__(self, *held: int) -> None:
        self.ran: list[int] = []
        self.finish = {n: asyncio.Event() for n in held}

    async def __call__(self, ctx: JobContext) -> None:
        self.ran.append(ctx.occurrence)
        if ctx.occurrence in self.finish:
            await self.finish[ctx.occurrence].wait()


async def fire(parts: Roles) -> None:
    """Start what is due, and let everything that can happen meanwhile happen."""
    parts.lease.renew(parts.clock.monotonic())
    parts.firing.dispatch(parts.queue.pop_due(limit=parts.runs.room))
    await until_idle()


async def test_a_move_a_take_back_carried_out_while_its_outcome_wrote_it_runs_the_next_occurrence_once() -> None:
    """Simulator seed 1259. The outcome of a recurring job's first occurrence decides its move
    into the next window's shard and writes the ADD there (in memory at once, durable later).
    Meanwhile the source shard is taken back from its log: the take-back carries out the same
    move, finds the target holding it, and queues that entry, which comes due and starts. Once
    its ADD is durable the outcome must leave that running occurrence to its run: queued again,
    it ran twice from one shard, its silo alive."""
    store, clock = GatedStore(), ManualClock()
    y = await make_parts(store, "y", clock=clock)
    y.transport.handlers["h"] = ran = Occurrences(1, 2)
    y.transport.handlers["k"] = other = Blocking()
    y.transport.handlers["z"] = Recorder()
    j = job(due=timedelta(seconds=6), schedule="@every 12s")  # its next occurrence, at 18 s, is in the next window
    k = job("k", due=timedelta(seconds=10))  # in that window too
    source_base, target_base = await add(y, j, k)
    clock.advance(10)
    await y.heartbeat.beat()
    await y.loading.load_due()  # k's shard, the next window's, is loaded
    # k runs on: the target stays marked as firing, so the next occurrence leaves without a mark
    # of its own, which would wait behind the ADD below (one writer per shard).
    await fire(y)
    assert other.ran == [1] and ran.ran == [1]
    source = y.shards.get(source_base)
    assert source is not None
    landing = store.gate("append_block", target_base)  # the outcome's ADD into the target is not durable yet
    ran.finish[1].set()
    await until_idle()
    assert store.reached("append_block", target_base).is_set()
    # A schedule call into the source lands, its answer is lost and the log cannot be read back:
    # its writer stops, and the maintenance round takes the source back from its log, whose
    # decision the take-back carries out into the target, queueing the target's entry.
    store.lose_answer("append_block", 1)
    store.fail_next("fetch", 1, source_base)
    with pytest.raises(StorageError):
        await add(y, job("z", due=timedelta(seconds=8)))
    y.shards.settle_writers()
    await until_idle()
    assert y.shards.get(source_base) is not source
    clock.advance(8)  # the next occurrence is due
    await fire(y)
    assert ran.ran == [1, 2]
    landing.set()  # the outcome's ADD is durable: the outcome goes on, the next occurrence still running
    await until_idle()
    await fire(y)
    assert ran.ran == [1, 2]  # each occurrence once
    ran.finish[2].set()
    other.finish.set()
    await until_idle()
    await fire(y)
    assert ran.ran == [1, 2]
