"""Damage containment (issue 13): a bad record, a corrupt log or a hostile schedule call never
stops a silo, never loses acknowledged jobs silently, and leaves the evidence where people find it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from cluster.cli.jobs import _status_text
from cluster.model.errors import InvalidJob, UnsupportedWireVersion
from cluster.model.jobs import WIRE_VERSION
from cluster.model.wire import pack
from cluster.runtime.shardlog import ADD, CANCELLED, MOVED, REMOVE, SHARD_PREFIX, ShardState, add_op, remove_op, shard_name
from cluster.runtime.shardmeta import ShardMeta
from cluster.runtime.silo import Silo
from storage import DAMAGED_PREFIX, LogCorrupted, LogWriter, MemoryStore, decode, list_logs, read_log
from tests.runtime.harness import OPTIONS, T0_US, LocalTransport, ManualClock, Recorder, add, fire_due, item, job, make_parts

WINDOW = T0_US - T0_US % 10_000_000


def newer_version(packed: bytes) -> bytes:
    """A job record as a newer timeshard (wire version + 1, one more field) would write it."""
    from cluster.model.wire import unpack

    wire = unpack(packed)
    return pack([WIRE_VERSION + 1, *wire[1:], "a field this version does not know"])


async def orphan_shard(store: MemoryStore, ops_per_append: list[list[Any]]) -> str:
    """A shard due now whose owner never joined (an orphan), written one append per op list."""
    base = shard_name(WINDOW, "gone.1", 1)
    writer = await LogWriter.create(store, base, ShardMeta("gone#1", WINDOW, WINDOW + 10_000_000).to_metadata())
    for ops in ops_per_append:
        await writer.append_many(ops)
    await writer.close()
    return base


def corrupt(store: MemoryStore, base: str, frame: int) -> None:
    """Flip one byte in the body of ``frame`` (0-based) of ``base``'s current generation."""
    log = store._logs[f"{base}~00000000"]
    frames = decode(bytes(log.body)).frames
    log.body[frames[frame].offset + 25] ^= 0x5A


def silo(store: MemoryStore, transport: LocalTransport | None = None) -> Silo:
    return Silo("s", "memory://", OPTIONS, "test", hooks=lambda _store, _view: [], transport=transport or LocalTransport(),
                clock=ManualClock(), store=store)


# -- one bad record never stops a silo from firing ------------------------------------------------

async def test_a_job_that_cannot_be_decoded_is_kept_unrun_and_the_rest_of_the_shard_fires() -> None:
    transport = LocalTransport()
    transport.handlers["h"] = recorder = Recorder()
    parts = await make_parts(transport=transport)
    before, garbage, newer, after = job(), job(), job(), job()
    [name] = set(await add(parts, before))
    shard = parts.shards.get(name)
    assert shard is not None
    _, due_us, packed = item(garbage)
    await parts.shards.write_to_window(WINDOW, [add_op(garbage.id, due_us, b"\xc1 not msgpack")])
    await parts.shards.write_to_window(WINDOW, [add_op(newer.id, due_us, newer_version(item(newer)[2]))])
    await add(parts, after)
    parts.clock.advance(2)  # type: ignore[attr-defined]
    await fire_due(parts)  # the fire loop's own step: before the fix it raised FormatError here
    assert sorted(ctx.job.id for ctx in recorder.ran) == sorted([before.id, after.id])
    assert set(shard.unreadable) == {garbage.id, newer.id}
    assert "wire version 2" in shard.unreadable[newer.id]
    assert parts.metrics.unreadable.value == 2
    # Kept, not dropped: still live in the shard and in its log, so the shard is never deleted as drained.
    assert {garbage.id, newer.id} <= set(shard.state.live)  # type: ignore[union-attr]
    logged = [op[1] for op in (await read_log(parts.store, name)).records() if op[0] == ADD]
    assert {garbage.id, newer.id} <= set(logged)


# -- a bad record in an orphaned shard does not break startup ------------------------------------

async def test_an_orphaned_shard_with_records_that_are_not_ops_is_adopted_and_its_good_jobs_queued() -> None:
    store = MemoryStore()
    good, other = job(), job()
    bad_records: list[Any] = [
        [ADD, "short"],  # wrong arity: a TypeError/ValueError in replay before
        [9, "x", 1],  # an unknown operation: ValueError
        [REMOVE, 5, "a", None, None],  # wrong types
        "a string, not an op",
        [ADD, "t", "not an int", b"job", 1, 0, 1],
    ]
    base = await orphan_shard(store, [[add_op(good.id, *item(good)[1:])], bad_records, [add_op(other.id, *item(other)[1:])]])
    s = silo(store)
    await s.ready()  # raised before the fix, on every silo in turn
    status = await s.status()
    [row] = status["shards"]
    assert row["name"] == base and row["jobs"] == 2 and row["unreadable"] == len(bad_records)
    assert status["damaged"][base]["unreadable"] == len(bad_records)
    assert status["damaged"][base]["lost"] == 0
    assert status["counters"]["unreadable"] == len(bad_records)
    assert [info.name for info in await store.list(DAMAGED_PREFIX)] == [f"{DAMAGED_PREFIX}{base}~00000000"]
    await s.stop()


# -- corruption in the middle of a log is detected, kept and reported ----------------------------

async def test_a_corrupt_frame_mid_log_loses_only_its_records_is_reported_and_the_log_is_kept() -> None:
    store = MemoryStore()
    transport = LocalTransport()
    transport.handlers["h"] = Recorder()
    jobs = [job() for _ in range(4)]
    base = await orphan_shard(store, [[add_op(j.id, *item(j)[1:])] for j in jobs])
    original = bytes(store._logs[f"{base}~00000000"].body)
    corrupt(store, base, 1)
    damaged_bytes = bytes(store._logs[f"{base}~00000000"].body)
    assert damaged_bytes != original
    s = silo(store, transport)
    await s.ready()
    status = await s.status()
    [row] = status["shards"]
    assert row["jobs"] == 3  # before the fix: 1, and nothing said so
    damage = status["damaged"][base]
    assert damage["lost"] == 1 and len(damage["ranges"]) == 1 and damage["ranges"][0][2] == "CRC mismatch"
    assert status["counters"]["shards_damaged"] == 1 and status["counters"]["records_lost"] == 1
    shown = _status_text({"namespace": "test", "store": "memory://", "silos": [status]})
    assert f"DAMAGED shard {base}: 1 records lost, 0 unreadable; copy kept as {DAMAGED_PREFIX}{base}" in shown
    # The claim moved the shard to a clean generation; the damaged one is kept, byte for byte.
    kept = damage["kept_as"]
    assert kept == f"{DAMAGED_PREFIX}{base}~00000000"
    assert (await store.fetch(kept)).data == damaged_bytes
    assert (await read_log(store, f"{DAMAGED_PREFIX}{base}")).decoded.lost == 1  # readable as a log
    shard = s._r.shards.get(base)
    assert shard is not None
    await shard.writer.rotate()  # what the claim asks for before its next write: compaction
    fresh = await read_log(store, base)
    assert fresh.head.generation == 1 and not fresh.decoded.damaged
    assert (await store.fetch(kept)).data == damaged_bytes  # the compaction deleted generation 0, not the copy
    assert sorted(ShardState().replay_log(fresh.decoded).live) == sorted(j.id for j in (jobs[0], *jobs[2:]))
    assert [h.base for h in await list_logs(store, SHARD_PREFIX)] == [base]  # the copy is no shard
    await s.stop()


async def test_appends_after_damage_under_a_running_writer_are_still_replayed() -> None:
    parts = await make_parts()
    jobs = [job() for _ in range(5)]
    [name] = set(await add(parts, *jobs[:4]))
    corrupt(parts.store, name, 1)  # type: ignore[arg-type]
    await add(parts, jobs[4])  # acknowledged: before the fix no replay ever saw it again
    state = ShardState().replay_log((await read_log(parts.store, name)).decoded)
    assert sorted(state.live) == sorted(j.id for j in (jobs[0], *jobs[2:]))


async def test_a_cancel_written_after_damage_holds_though_the_add_of_the_occurrence_it_removed_was_lost() -> None:
    """A recurring job's next occurrence (an ADD replacing the first) is lost to a damaged frame;
    its owner, unaware, cancels occurrence 2 in a whole frame after it and answers "cancelled".
    The next owner's replay must not bring occurrence 1 back: before the fix it did, and the job
    ran on after its cancel returned (simulation with damaged logs, seeds 50250 and 50316)."""
    store = MemoryStore()
    j = job()
    jid, due_us, packed = item(j)
    base = await orphan_shard(store, [[add_op(jid, due_us, packed)],
                                      [add_op(jid, due_us + 1_000_000, packed, occurrence=2)],
                                      [remove_op(jid, 2, CANCELLED)]])
    corrupt(store, base, 1)
    decoded = (await read_log(store, base)).decoded
    assert decoded.lost == 1 and [op[0] for op in decoded.records()] == [ADD, REMOVE]  # the cancel's frame is whole
    assert jid not in ShardState().replay_log(decoded).live
    s = silo(store)
    await s.ready()
    [row] = (await s.status())["shards"]
    assert row["jobs"] == 0  # adopted with nothing to fire
    await s.stop()


async def test_a_move_written_after_damage_ends_the_older_occurrence_the_lost_add_replaced() -> None:
    """As above, but occurrence 2 moved on to a later window's shard instead of being cancelled.
    The next owner's replay must not bring occurrence 1 back beside the chain the move carried on:
    before the fix it did, and the job was live in two shards, to run twice (simulation with
    damaged logs, seed 475742 with every kind)."""
    store = MemoryStore()
    j = job()
    jid, due_us, packed = item(j)
    target = shard_name(WINDOW + 10_000_000, "gone.1", 1)
    nxt = [due_us + 2_000_000, packed, 3, 0, due_us + 2_000_000]
    base = await orphan_shard(store, [[add_op(jid, due_us, packed)],
                                      [add_op(jid, due_us + 1_000_000, packed, occurrence=2)],
                                      [remove_op(jid, 2, MOVED, target, nxt)]])
    corrupt(store, base, 1)
    decoded = (await read_log(store, base)).decoded
    assert decoded.lost == 1 and [op[0] for op in decoded.records()] == [ADD, REMOVE]  # the move's frame is whole
    state = ShardState().replay_log(decoded)
    assert jid not in state.live and state.moved[jid] == target


# -- Silo.schedule refuses hostile items, naming them, writing nothing ---------------------------

def _hostile() -> list[tuple[str, Any, type[Exception], str]]:
    j = job()
    jid, due_us, packed = item(j)
    return [
        ("not a list", "jobs", InvalidJob, "jobs"),
        ("not a triple", [(jid, due_us)], InvalidJob, "jobs[0]"),
        ("id not a str", [(5, due_us, packed)], InvalidJob, "jobs[0].id"),
        ("due not an int", [(jid, "soon", packed)], InvalidJob, "jobs[0].due_us"),
        ("due beyond year 9999", [(jid, 2**63, packed)], InvalidJob, "jobs[0].due_us"),
        ("job not bytes", [(jid, due_us, "text")], InvalidJob, "jobs[0].job"),
        ("garbage bytes", [(jid, due_us, b"\xc1\xc1")], InvalidJob, "jobs[0].job"),
        ("msgpack that is no job", [(jid, due_us, pack({"a": 1}))], InvalidJob, "jobs[0].job"),
        ("a job list of the wrong length", [(jid, due_us, pack([WIRE_VERSION, jid]))], InvalidJob, "jobs[0].job"),
        ("a bad target", [(jid, due_us, pack([*j.to_wire()[:3], ["nope", 1, 2], *j.to_wire()[4:]]))], InvalidJob,
         "jobs[0].job"),
        ("a due time out of range inside", [(jid, due_us, pack([*j.to_wire()[:4], 2**62, *j.to_wire()[5:]]))],
         InvalidJob, "jobs[0].job"),
        ("a newer wire version", [(jid, due_us, newer_version(packed))], UnsupportedWireVersion, "jobs[0].job"),
        ("another job's id", [("someone-else", due_us, packed)], InvalidJob, "jobs[0].id"),
        ("another due time", [(jid, due_us + 1, packed)], InvalidJob, "jobs[0].due_us"),
        ("one good, one bad", [item(job()), (jid, due_us, b"")], InvalidJob, "jobs[1].job"),
    ]


@pytest.mark.parametrize(("case", "jobs", "error", "field"), _hostile(), ids=[c[0] for c in _hostile()])
async def test_schedule_refuses_a_hostile_item_with_a_typed_error_naming_it_and_writes_nothing(
        case: str, jobs: Any, error: type[Exception], field: str) -> None:
    store = MemoryStore()
    s = silo(store)
    await s.ready()
    with pytest.raises(error) as raised:
        await s.schedule(jobs)
    assert raised.value.field.startswith(field)  # type: ignore[attr-defined]
    assert await list_logs(store, SHARD_PREFIX) == []
    assert s.metrics.scheduled.value == 0
    await s.stop()


# -- a log corrupted under its writer: the silo takes its own shard back --------------------------

def cut_torn(store: MemoryStore, name: str) -> None:
    """Cut the last bytes of ``name``'s log behind its writer's back (its last frame torn)."""
    del store._logs[f"{name}~00000000"].body[-3:]


async def test_outcomes_into_a_log_corrupted_under_its_writer_end_and_the_silo_takes_its_shard_back() -> None:
    store, transport = MemoryStore(), LocalTransport()
    transport.handlers["h"] = recorder = Recorder()
    parts = await make_parts(store, transport=transport)
    first, second = job(), job()
    [name] = set(await add(parts, first, second))
    old = parts.shards.get(name)
    cut_torn(store, name)
    parts.clock.advance(2)  # type: ignore[attr-defined]
    # Before the fix the outcome write failed with LogCorrupted for good: the runs held their
    # slots and this never returned.
    await asyncio.wait_for(fire_due(parts), 5)
    assert sorted(ctx.job.id for ctx in recorder.ran) == sorted([first.id, second.id])
    assert not parts.runs.inflight
    taken_back = parts.shards.get(name)
    assert taken_back is not None and taken_back is not old and old is not None and old.lost
    assert [info.name for info in await store.list(DAMAGED_PREFIX)] == [f"{DAMAGED_PREFIX}{name}~00000000"]
    # Their removals landed past the cut, and the log taken back holds them: done, not run again.
    parts.clock.advance(1)  # type: ignore[attr-defined]
    await asyncio.wait_for(fire_due(parts), 5)
    state = ShardState().replay((await read_log(store, name)).records())
    assert {first.id, second.id}.isdisjoint(state.live) and len(recorder.ran) == 2
    # And the shard takes writes again, its damaged generation rewritten.
    (again,) = await add(parts, third := job())
    assert again == name and third.id in ShardState().replay((await read_log(store, name)).records()).live


async def test_a_schedule_into_a_log_corrupted_under_its_writer_fails_once_then_lands() -> None:
    store = MemoryStore()
    parts = await make_parts(store)
    [name] = await add(parts, job())
    cut_torn(store, name)
    with pytest.raises(LogCorrupted):
        await add(parts, job())  # not acknowledged: the block did not land where it was framed
    # Before the fix every later call failed the same way, for as long as the window was open.
    late = job()
    [again] = await add(parts, late)
    assert again == name and late.id in ShardState().replay((await read_log(store, name)).records()).live
