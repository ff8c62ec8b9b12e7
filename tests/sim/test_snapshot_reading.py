"""How the simulator reads a rotated shard log: a job absent from the new generation's snapshot
ended there only if it ran there (issue 24, seed 283659).

Built by hand in the world's store, as the silos' writes land there, and judged by the world's
own duplicate check: no silo runs, so each test is exact and fast.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cluster.runtime.shardlog import ADD, CANCELLED, SUCCEEDED, ShardState, add_op, remove_op, shard_name
from cluster.runtime.shardmeta import ShardMeta
from storage.generations import NEXT_KEY, generation_name
from storage.records import decode, encode
from tests.sim.loop import EPOCH_US, VirtualLoop, true_now_us
from tests.sim.world import Delivery, Faults, World

WINDOW_US = EPOCH_US
SHARD_A = shard_name(WINDOW_US, "s1", 1)  # where a schedule call's first try wrote the job
SHARD_B = shard_name(WINDOW_US, "s2", 1)  # where its retry wrote it, and it ran


def _world() -> World:
    return World(0, Faults.parse("none"), VirtualLoop())


def _at(world: World, seconds: float) -> int:
    """Move the world's clock to ``seconds`` past its start; the true µs then."""
    world.loop.advance(seconds - world.loop.time())
    return true_now_us(world.loop)


def _land(world: World, method: str, name: str, **call: Any) -> None:
    """A write of s1's reaching the store and the world, as ``SimStore`` lands one."""
    store = world.store
    run = world.loop.run_until_complete
    if method == "create":
        run(store.create(name, call["metadata"]))
    elif method == "set_metadata":
        run(store.set_metadata(name, call["metadata"], store._logs[name].etag))
    else:
        run(store.append_block(name, call["payload"], store._logs[name].etag))
    world.landed(method, name, world.procs["s1"], call.get("payload", b""))


def _rotate_with(world: World, base: str, queued: Sequence[list[Any]]) -> None:
    """Rotate ``base`` with ``queued`` records folded into the next generation's snapshot, never
    appended: as ``LogWriter`` does with what it holds when it rotates (``storage.log``)."""
    old = generation_name(base, 0)
    state = ShardState().replay(decode(bytes(world.store._logs[old].body)).records())
    for op in queued:
        state.apply(op)
    new = generation_name(base, 1)
    _land(world, "create", new, metadata=dict(world.store._logs[old].metadata))
    _land(world, "append_block", new, payload=encode(10, state.snapshot()))
    _land(world, "set_metadata", old, metadata={**world.store._logs[old].metadata, NEXT_KEY: "1"})


def _shard_with_job(world: World, base: str, job_id: str) -> None:
    meta = ShardMeta(owner="s1#1", window_start=WINDOW_US, window_end=WINDOW_US + 10_000_000).to_metadata()
    _land(world, "create", generation_name(base, 0), metadata=meta)
    _land(world, "append_block", generation_name(base, 0), payload=encode(0, [add_op(job_id, EPOCH_US, b"job")]))


def _success(world: World, job_id: str, shard: str, sender: str, sent_s: float, run_id: str) -> None:
    sent_us = EPOCH_US + int(sent_s * 1e6)
    world.deliveries.append(Delivery(job_id, 1, 1, sent_us, sent_us + 30_000, sender, shard, True, run_id))


def test_a_schedule_try_taken_back_in_a_rotation_is_no_outcome_of_its_retrys_run() -> None:
    """Seed 283659: s1#1's try of a schedule call wrote j38 into its shard, then took it back as
    the call failed; the log rotated with the REMOVE(CANCELLED) queued, so it landed only as
    j38's absence from the snapshot. The client's retry wrote j38 into s2's shard, where it ran;
    s2#3 lost that shard (claimed) before its outcome landed, and the claimer ran j38 again: the
    at-least-once the README allows. Read as the outcome of j38#1, the take-back made the second
    run a duplicate "after its outcome was durable" (at 9.74 s, before the first run began)."""
    world = _world()
    _shard_with_job(world, SHARD_A, "j38")
    _at(world, 0.5)
    _rotate_with(world, SHARD_A, [remove_op("j38", 1, CANCELLED)])
    assert ADD not in {op[0] for op in decode(bytes(world.store._logs[generation_name(SHARD_A, 1)].body)).records()}
    _success(world, "j38", SHARD_B, "s2#3", 1.0, "r1")
    world.owners[SHARD_B].append((EPOCH_US + 2_000_000, "s1#2"))  # its claim, between the two runs
    _success(world, "j38", SHARD_B, "s1#2", 3.0, "r2")

    world.check_duplicates()

    assert ("j38", 1) not in world.outcome_landed
    assert world.violations == []
    assert world.stats["succeeded twice: claimed or taken back"] == 1


def test_an_outcome_folded_into_a_snapshot_still_ends_the_occurrence_that_ran_there() -> None:
    """The other side: j1#1 ran from its shard, and its REMOVE(SUCCEEDED) was folded into a
    rotation's snapshot. Its log said it was done from then on, so a run sent after is a
    duplicate, even though the shard was claimed in between (the claimer read that log)."""
    world = _world()
    _shard_with_job(world, SHARD_A, "j1")
    _success(world, "j1", SHARD_A, "s1#1", 0.2, "r1")
    folded_us = _at(world, 0.5)
    _rotate_with(world, SHARD_A, [remove_op("j1", 1, SUCCEEDED)])
    world.owners[SHARD_A].append((EPOCH_US + 1_000_000, "s2#1"))
    _success(world, "j1", SHARD_A, "s2#1", 2.0, "r2")

    world.check_duplicates()

    assert world.outcome_landed[("j1", 1)] == folded_us
    assert len(world.violations) == 1 and "duplicate: j1#1" in world.violations[0], world.violations
