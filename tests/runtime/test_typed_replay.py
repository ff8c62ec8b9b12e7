"""Loading a shard reads frames of plain ADDs typed, in one call each (issue 29): the state it
folds, the records it sets aside and the damage it finds are those of reading every frame as lists."""

from __future__ import annotations

import zlib
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cluster.runtime.shard import read_shard
from cluster.runtime.shardlog import ADD, MAX_US, MIN_US, SHARD_FRAMES, ShardState, add_op, pause_op, remove_op
from storage import LogWriter, MemoryStore, records


def as_lists(data: bytes) -> ShardState:
    """The state every frame read as msgpack lists folds into (the way every log was read before)."""
    return ShardState().replay_log(records.decode(data))


def typed(data: bytes) -> tuple[records.Decoded, ShardState]:
    """What loading a shard does: plain-ADD frames typed, each frame folded as it is found."""
    state = ShardState()
    return records.decode(data, reader=SHARD_FRAMES, fold=state.fold_frame), state


def same_state(a: ShardState, b: ShardState) -> None:
    assert list(a.live) == list(b.live)  # the queue is built in this order
    assert {k: v[:5] for k, v in a.live.items()} == {k: v[:5] for k, v in b.live.items()}
    assert (a.moved, a.pending, a.sources, a.paused, a.orphan_pauses, a.unreadable) == \
        (b.moved, b.pending, b.sources, b.paused, b.orphan_pauses, b.unreadable)


def test_a_frame_of_plain_adds_is_read_typed_and_folds_into_the_same_jobs() -> None:
    adds = [add_op(f"j{i}", 1_000 + i, b"JOB", occurrence=1 + i % 2, attempts=i % 3, scheduled_us=1_000 + i - i % 2)
            for i in range(50)]
    data = records.encode(0, adds) + records.encode(50, [remove_op("j3", 2, "succeeded"), add_op("j3", 9, b"J", 3)])
    [first, second] = records.decode(data, reader=SHARD_FRAMES).frames
    assert first.typed is not None and first.count == 50  # the fast path is taken, not just allowed
    assert second.typed is None  # a REMOVE in the frame: read as lists, record by record
    assert first.records == adds  # asked for as lists, it gives what was written
    decoded, state = typed(data)
    assert decoded.frames == [] and decoded.last_seq == 51 and decoded.end == len(data)
    same_state(state, as_lists(data))
    assert state.live["j4"][4] is state.live["j4"][0]  # equal times share one int, as replay always did


def test_a_block_written_twice_is_folded_once_when_read_typed() -> None:
    block = records.encode(0, [add_op("a", 5, b"A"), add_op("b", 6, b"B")])
    data = block + block + records.encode(2, [add_op("a", 7, b"A2")])
    decoded, state = typed(data)
    assert decoded.skipped == 2 and decoded.last_seq == 2
    same_state(state, as_lists(data))
    assert state.live["a"][:2] == [7, b"A2"]


# Values a plain ADD's field may not hold, or holds only at one place: every kind but ADD, the
# times just past what a datetime holds, ints where text or bytes belong, bool and float for ints.
ODD_VALUES = [None, False, True, 0.0, 1.5, "", "a", b"", b"x", [], [1], {}, 1, 2, 3, 4, 5, 6, -1,
              MIN_US - 1, MIN_US, MAX_US, MAX_US + 1, 2**63, -(2**63), 2**64 - 1]


def test_each_field_of_a_plain_add_is_checked_as_replay_checks_it() -> None:
    for at in range(7):
        for value in ODD_VALUES:
            op = add_op("a", 10, b"JOB", scheduled_us=5)
            op[at] = value
            check_against_lists([add_op("b", 1, b"B"), op])
    for op in ([*add_op("a", 10, b"JOB")[:6]], [*add_op("a", 10, b"JOB"), "shards/source"], []):
        check_against_lists([add_op("b", 1, b"B"), op])


def check_against_lists(written: list[Any]) -> None:
    data = records.encode(0, written)
    frame = records.decode(data, reader=SHARD_FRAMES).frames[0]
    plain = ShardState()
    plain.replay(records.decode(data).records())
    # The list path's own verdict: every record a plain ADD it folded into an entry, none set aside.
    folded_as_adds = not plain.unreadable and all(type(op[0]) is int and op[0] == ADD and len(op) == 7 for op in written)
    assert (frame.typed is not None) == folded_as_adds, written
    same_state(typed(data)[1], as_lists(data))


def test_a_frame_of_adds_whose_header_miscounts_them_is_damage_as_it_was() -> None:
    good = records.encode(0, [add_op("a", 1, b"A")])
    bad = bytearray(records.encode(1, [add_op("b", 2, b"B"), add_op("c", 3, b"C")]))
    bad[16:20] = (3).to_bytes(4, "little")  # the count; the checksum made again: the writer's own frame
    bad[4:8] = zlib.crc32(bytes(bad[8:])).to_bytes(4, "little")
    data = good + bytes(bad) + records.encode(4, [add_op("d", 4, b"D")])
    decoded, state = typed(data)
    listed = records.decode(data)
    assert decoded.damaged == listed.damaged and len(decoded.damaged) == 1 and decoded.damaged[0].lost == 3
    assert (decoded.last_seq, decoded.end, decoded.torn) == (listed.last_seq, listed.end, listed.torn)
    same_state(state, as_lists(data))
    assert sorted(state.live) == ["a", "d"]


def test_a_pause_read_before_its_jobs_add_pauses_the_add_in_a_typed_frame() -> None:
    """A PAUSE whose job is not live (its ADD lost to damage) pauses the ADD that follows (seed 222064),
    also when that ADD comes in a frame of plain ADDs."""
    data = records.encode(0, [pause_op("a", "hold", "ops", 5)]) + records.encode(1, [add_op("a", 9, b"A"), add_op("b", 9, b"B")])
    assert records.decode(data, reader=SHARD_FRAMES).frames[1].typed is not None
    decoded, state = typed(data)
    same_state(state, as_lists(data))
    assert state.paused == {"a": ["hold", "ops", 5]}


in_range = st.one_of(st.sampled_from([MIN_US, 0, MAX_US]), st.integers(-(2**40), 2**40))
anything = st.one_of(st.none(), st.booleans(), st.floats(allow_nan=False), st.text(max_size=3), st.binary(max_size=3),
                     st.lists(st.integers(0, 3), max_size=2),
                     st.sampled_from([MIN_US - 1, MIN_US, MAX_US, MAX_US + 1, 2**63, -(2**63), 2**64 - 1, 0, 1, -1]))


def near_add(job_id: str, due: int, job: bytes, occurrence: int, attempts: int, scheduled: int,
             change: tuple[str, int, Any] | None) -> list[Any]:
    op = [ADD, job_id, due, job, occurrence, attempts, scheduled]
    if change is not None:
        how, at, value = change
        if how == "set":
            op[at] = value
        elif how == "cut":
            del op[at:]
        else:
            op.append(value)
    return op


# A plain ADD, or one with one thing wrong or unusual: a field of another type or out of range
# (False for the kind, a time no datetime holds, ...), fields missing, or fields more (a moved-in ADD).
near_adds = st.builds(
    near_add, st.sampled_from(["a", "b"]), in_range, st.binary(min_size=1, max_size=4), st.integers(1, 3),
    st.integers(0, 2), in_range,
    st.one_of(st.none(), st.tuples(st.just("set"), st.integers(0, 6), anything),
              st.tuples(st.just("cut"), st.integers(0, 6), st.none()),
              st.tuples(st.just("append"), st.just(7), st.one_of(st.just("shards/source"), anything))),
)


@settings(max_examples=400, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(near_adds, min_size=1, max_size=3), st.booleans())
def test_a_record_is_taken_typed_exactly_when_replay_would_fold_it_as_a_plain_add(
        ops: list[list[Any]], valid_first: bool) -> None:
    check_against_lists(([add_op("a", 1, b"A")] if valid_first else []) + ops)


async def test_a_shard_loads_through_the_typed_path_as_it_did_through_lists() -> None:
    store = MemoryStore()
    writer = await LogWriter.create(store, "shards/x", {})
    await writer.append_many([add_op(f"j{i}", 100 + i, b"JOB") for i in range(300)])
    await writer.append_many([remove_op("j7", 1, "succeeded"), add_op("j7", 500, b"JOB", occurrence=2)])
    await writer.append_many([add_op(f"k{i}", 200 + i, b"JOB") for i in range(10)])
    log, state = await read_shard(store, "shards/x")
    assert log.decoded.frames == [] and log.decoded.last_seq == 311
    same_state(state, as_lists(bytes(store._logs["shards/x~00000000"].body)))
