"""A shard whose live jobs outgrow one block still compacts at the block limit, and keeps firing."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.model.pause import MAX_BY_CHARS, MAX_NOTE_CHARS
from cluster.runtime import shardlog
from cluster.runtime.shardlog import ADD, PAUSE, SNAPSHOT, SNAPSHOT_BYTES, ShardState, add_op
from storage import MemoryStore, read_log
from storage.base import MAX_BLOCK_BYTES
from storage.records import pack
from tests.runtime.harness import ManualClock, Recorder, add, job, make_parts, until_idle
from tests.runtime.test_replay_fuzz import valid_op

BIG = "x" * (250 * 1024)  # a job's data near its limit (256 KiB)
JOBS = 20  # 5 MiB of live jobs: more than one block (4 MiB) holds


async def test_a_shard_holding_more_than_a_block_of_live_jobs_rotates_and_fires_every_one() -> None:
    store, clock = MemoryStore(max_blocks=JOBS), ManualClock()
    parts = await make_parts(store, clock=clock)
    parts.transport.handlers["h"] = recorder = Recorder()
    jobs = [job(due=timedelta(seconds=1 + i / 4), data=BIG) for i in range(JOBS)]  # one window (10 s)
    names = await add(parts, *jobs)  # one block each: the generation is full
    [name] = set(names)
    paused = jobs[-1]  # late in the shard: its pause goes after the snapshot record, with its ADD
    assert (await parts.pausing.pause(name, paused.id, "migration", "ops"))[0] == "paused"  # the block limit: rotates
    shard = parts.shards.get(name)
    assert shard is not None and shard.writer.rotations == 1 and shard.writer.stopped is None
    records = list((await read_log(store, name)).records())
    assert records[0][0] == SNAPSHOT and {r[0] for r in records[1:]} == {ADD, PAUSE}
    replayed = ShardState().replay(records)
    assert set(replayed.live) == {j.id for j in jobs} and set(replayed.paused) == {paused.id}

    for _ in range(JOBS + 4):  # each outcome is an append to the compacted generation
        clock.advance(0.25)
        parts.lease.renew(clock.monotonic())
        parts.firing.dispatch(parts.queue.pop_due(limit=parts.runs.room))
        await until_idle()
    assert sorted(ctx.job.id for ctx in recorder.ran) == sorted(j.id for j in jobs[:-1])
    assert shard.writer.stopped is None
    after = ShardState().replay((await read_log(store, name)).records())
    assert set(after.live) == {paused.id}  # the rest ran, and their removals are durable


def state_of(state: ShardState) -> tuple[Any, ...]:
    return ({job_id: entry[:5] for job_id, entry in state.live.items()}, state.paused, state.moved, state.pending,
            state.sources)


@settings(max_examples=300, derandomize=True, deadline=None)
@given(st.lists(valid_op, max_size=40), st.integers(0, 200))
def test_a_snapshot_split_at_any_size_replays_to_the_state_it_was_taken_from(ops: list[list[Any]], budget: int) -> None:
    """Whatever part of the state the SNAPSHOT record holds and what follows it as ADD and PAUSE
    records, replay gives back every live job, pause, forward and source as they were."""
    state = ShardState().replay(ops)
    with mock.patch.object(shardlog, "SNAPSHOT_BYTES", budget):
        records = state.snapshot()
    replayed = ShardState().replay(records)  # consumes the records: ADDs become its entries
    assert not replayed.unreadable
    assert state_of(replayed) == state_of(state)


def test_a_snapshot_record_of_many_paused_jobs_stays_within_its_budget() -> None:
    """The pauses a SNAPSHOT record carries, and ids of many-byte characters, count against its budget."""
    state = ShardState()
    ops = []
    for i in range(12_000):
        job_id = f"job-{i:06}"
        ops.append(add_op(job_id, 10**15, b"d" * 40))
        ops.append([PAUSE, job_id, "é" * MAX_NOTE_CHARS, "o" * MAX_BY_CHARS, 10**15])  # the longest allowed
    state.replay(ops)
    first = pack(state.snapshot()[0])
    assert len(first) <= MAX_BLOCK_BYTES, f"SNAPSHOT record of {len(first)} B: no block holds it"
    assert len(first) <= 2 * SNAPSHOT_BYTES
