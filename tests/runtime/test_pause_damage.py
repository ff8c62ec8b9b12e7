"""A pause holds when the frame with its job's ADD is damaged (simulation with damaged logs, seed 222064).

A PAUSE is written only for a live job, so replay meeting one for a job it does not hold knows
the ADD before it was lost: the next occurrence that the running attempt's outcome adds after
the pause is still paused. Before the fix the adopter replayed that occurrence unpaused and
fired it after the pause had returned "paused".
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from cluster.runtime.membership import EXITED, Membership
from cluster.runtime.shardlog import ADD, PAUSE, ShardState, add_op, pause_op, remove_op, resume_op
from storage import MemoryStore, decode, read_log
from tests.runtime.harness import Blocking, Recorder, add, fire_due, job, make_parts, until_idle


async def test_a_pause_written_after_a_damaged_add_holds_the_next_occurrence_at_adoption() -> None:
    store = MemoryStore()
    victim = await make_parts(store, "v")
    slow = Blocking()
    victim.transport.handlers["h"] = slow
    j = job(due=timedelta(seconds=2), schedule="@every 2s")  # occurrence 2, at +4 s, stays in this shard
    (name,) = await add(victim, j)
    victim.clock.advance(2)
    victim.lease.renew(victim.clock.monotonic())
    firing = asyncio.ensure_future(fire_due(victim))
    await slow.started.wait()
    pause = asyncio.ensure_future(victim.pausing.pause(name, j.id, "hold", "ops"))
    await until_idle()
    slow.finish.set()  # the pause is written first; the outcome adds occurrence 2 after it
    assert (await pause)[0] == "paused"
    await firing
    log = store._logs[f"{name}~00000000"]
    frames = decode(bytes(log.body)).frames
    assert [[(op[0], op[1]) for op in f.records] for f in frames] == [[(ADD, j.id)], [(PAUSE, j.id)], [(ADD, j.id)]]
    log.body[frames[0].offset + 25] ^= 0x5A  # bit rot in the first ADD's frame: its record is lost

    await Membership(store).declare_dead(victim.me.row, EXITED)
    peer = await make_parts(store, "p")
    peer.transport.handlers["h"] = recorder = Recorder()
    assert await peer.adoption.adopt_orphans() == 1
    shard = peer.shards.get(name)
    assert shard is not None and shard.state is not None
    assert shard.state.live[j.id][2] == 2 and shard.state.paused[j.id][0] == "hold"
    for _ in range(6):
        peer.clock.advance(1)
        peer.lease.renew(peer.clock.monotonic())
        await fire_due(peer)
    assert recorder.ran == []  # before the fix: occurrence 2 ran, and every one after it
    assert await peer.pausing.resume(name, j.id) == ("resumed", None)
    peer.lease.renew(peer.clock.monotonic())
    await fire_due(peer)
    assert [ctx.job.id for ctx in recorder.ran] == [j.id]
    assert (await read_log(store, name)).head.generation == 1  # the damaged generation was left behind


def test_a_pause_read_before_its_job_is_added_holds_only_until_a_resume_or_a_removal() -> None:
    paused = pause_op("a", None, "ops", 5)
    state = ShardState().replay([list(paused)])
    assert state.paused == {}  # nothing live to hold yet
    state.replay([add_op("a", 20, b"A", 2)])  # a later read of the tail (a dormant view) adds it
    assert state.paused == {"a": [None, "ops", 5]}
    resumed = ShardState().replay([list(paused), resume_op("a"), add_op("a", 20, b"A", 2)])
    assert resumed.paused == {}
    moved = ShardState().replay([list(paused), remove_op("a", 1, "moved", "elsewhere"), add_op("a", 30, b"A", 3)])
    assert moved.paused == {}  # the move carried it; an ADD after that is not this pause's
    for fold in ("replay", "apply"):  # a new generation: only its snapshot's pauses count
        snap = ShardState().replay([list(paused)])
        [record] = ShardState().snapshot()
        if fold == "replay":
            snap.replay([record])
        else:
            snap.apply(record)
        snap.replay([add_op("a", 20, b"A", 2)])
        assert snap.paused == {}, fold
