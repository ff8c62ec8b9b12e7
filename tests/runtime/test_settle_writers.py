"""A job that only a shard's log holds runs although nothing writes into the shard again: the
silo's maintenance round settles a writer left in doubt, and takes back a shard whose writer
stopped, also when the take-back failed first because the store did not answer (issue 24)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from cluster.model.wire import timedelta_to_us
from cluster.runtime.roles import Roles
from cluster.runtime.shard import Shard
from cluster.runtime.shardlog import window_of
from storage import LogCorrupted, StorageError
from tests.runtime.harness import OPTIONS, T0_US, GatedStore, ManualClock, Recorder, add, fire_due, job, make_parts, until_idle

TICK_S = OPTIONS.staging_interval.total_seconds()  # one maintenance round
# What ``ShardTable.settle_writers`` promises once the store answers again: the longest wait
# between two tries, plus the round that makes the try.
BOUND_S = OPTIONS.adoption_interval.total_seconds() + TICK_S


async def schedule_in_doubt(parts: Roles, store: GatedStore, shard: Shard, due_s: float) -> str:
    """A schedule call into ``shard`` that lands, loses its answer and cannot read the log back:
    it fails, its job undone from memory, while the log holds it. The job's id."""
    j = job(due=timedelta(seconds=due_s))
    store.lose_answer("append_block", 1)
    store.fail_next("fetch", 1, shard.base)
    with pytest.raises(StorageError):
        await add(parts, j)
    assert shard.writer.in_doubt and not parts.queue
    return j.id


async def maintenance_round(parts: Roles, clock: ManualClock) -> None:
    """One round of the silo's maintenance loop as far as writers go, then what fires."""
    clock.advance(TICK_S)
    parts.shards.settle_writers()
    await until_idle()
    parts.lease.renew(clock.monotonic())
    await fire_due(parts)


async def test_a_shard_whose_take_back_failed_while_the_store_was_down_is_taken_back_once_it_answers() -> None:
    """The write that stopped the writer tried to take the shard back, and the store did not
    answer; nothing wrote into the shard again, so nothing tried again, and the job only its
    log held never ran."""
    store, clock = GatedStore(), ManualClock()
    y = await make_parts(store, "y", clock=clock)
    y.transport.handlers["h"] = ran = Recorder()
    shard = await y.shards.open_shard(window_of(T0_US, timedelta_to_us(OPTIONS.shard_duration)))
    landed = await schedule_in_doubt(y, store, shard, due_s=2)
    # The next schedule call into the shard finds that landed: the writer stops, and the store
    # does not answer the take-back (its log cannot be listed) until told otherwise.
    store.fail_next("list", 1_000_000, shard.base)
    with pytest.raises(LogCorrupted):
        await add(y, job(due=timedelta(seconds=3)))
    assert y.shards.get(shard.base) is shard and shard.writer.stopped is not None
    for _ in range(4):  # the store stays down past the job's due time
        await maintenance_round(y, clock)
    assert not ran.ran and y.shards.get(shard.base) is shard
    store.fail_next("list", 0, shard.base)  # it answers again; nothing writes into the shard
    answered = clock.monotonic()
    while not ran.ran and clock.monotonic() < answered + BOUND_S:
        await maintenance_round(y, clock)
    assert [(ctx.job.id, ctx.occurrence) for ctx in ran.ran] == [(landed, 1)]
    taken_back = y.shards.get(shard.base)
    assert taken_back is not None and taken_back is not shard and taken_back.writer.stopped is None


async def test_a_writer_left_in_doubt_is_settled_without_a_write_and_the_job_it_hid_runs_on_time() -> None:
    """Only a write settles a doubt, and none came: the job the log took behind the lost answer
    (undone from memory) never ran. The round settles it, the writer stops on what it finds,
    and the shard is taken back from its log before the job is due."""
    store, clock = GatedStore(), ManualClock()
    y = await make_parts(store, "y", clock=clock)
    y.transport.handlers["h"] = ran = Recorder()
    shard = await y.shards.open_shard(window_of(T0_US, timedelta_to_us(OPTIONS.shard_duration)))
    landed = await schedule_in_doubt(y, store, shard, due_s=3)
    for _ in range(2):
        await maintenance_round(y, clock)
    assert y.shards.get(shard.base) is not shard and not ran.ran  # taken back, the job queued
    await maintenance_round(y, clock)  # at 3 s: due
    assert [(ctx.job.id, ctx.occurrence) for ctx in ran.ran] == [(landed, 1)]
