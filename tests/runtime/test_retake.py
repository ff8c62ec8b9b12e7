"""Taking a shard back from its own log (its writer stopped on a corrupted log) settles the moves
its log decided, and those may lead into another shard whose writer stopped too: that one is
taken back as well, and the job's next occurrence still runs."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from cluster.model.wire import timedelta_to_us
from cluster.runtime.roles import Roles
from cluster.runtime.shardlog import window_of
from storage import StorageError
from tests.runtime.harness import OPTIONS, T0_US, GatedStore, ManualClock, Recorder, add, fire_due, job, live_copies, make_parts


async def test_a_take_back_whose_move_leads_into_a_shard_that_must_be_taken_back_too_runs_the_next_occurrence() -> None:
    """Found by the simulation, seed 43587. A recurring job's outcome decides its move into the
    next window's shard; the decision lands, its answer is lost and its log cannot be read back,
    so it is taken back from memory and written again, which stops the source's writer: the
    silo takes the source back from its log and settles the move the log holds. The target's
    writer had stopped the same way (a schedule call into it in doubt), so the move's ADD must
    take the target back too. Both take-backs waited on one lock, the first holding it: the run
    stayed in flight for good and the acknowledged job never ran again."""
    store, clock = GatedStore(), ManualClock()
    y = await make_parts(store, "y", clock=clock)
    y.transport.handlers["h"] = ran = Recorder()
    j = job(due=timedelta(seconds=6), schedule="@every 12s")  # its next occurrence, at 18 s, is in the next window
    (source,) = await add(y, j)
    clock.advance(6)  # j is due, and the next window is within the lookahead: its shard is loaded
    await y.heartbeat.beat()  # a fresh shard is created only under a valid lease
    target = await y.shards.open_shard(window_of(T0_US + 18_000_000, timedelta_to_us(OPTIONS.shard_duration)))
    assert target.state is not None
    # A schedule call into the target: it lands, its answer is lost and the log cannot be read
    # back, so the call fails (in doubt), and the target's writer stops at its next write.
    store.lose_answer("append_block", 1)
    store.fail_next("fetch", 1, target.base)
    with pytest.raises(StorageError):
        await add(y, job(due=timedelta(seconds=15)))
    # The same befalls the decision of j's move into the target, written into the source.
    store.lose_answer("append_block", 1)
    store.fail_next("fetch", 1, source)
    await asyncio.wait_for(fire(y), 5)  # before the fix: it waited for good on the second take-back
    assert [ctx.occurrence for ctx in ran.ran] == [1]
    assert not y.runs.inflight
    assert await live_copies(store, j.id) == [(target.base, 2)]
    clock.advance(12)  # the next occurrence is due
    await asyncio.wait_for(fire(y), 5)
    assert [(ctx.job.id, ctx.occurrence) for ctx in ran.ran if ctx.job.id == j.id] == [(j.id, 1), (j.id, 2)]


async def fire(parts: Roles) -> None:
    parts.lease.renew(parts.clock.monotonic())
    await fire_due(parts)
