"""The shard log's operations fold into exactly the live jobs a silo must queue after a crash."""

from __future__ import annotations

import copy
import gc

from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.model.wire import pack, unpack
from cluster.runtime.shardlog import (
    CANCELLED,
    MOVED,
    SHARD_FRAMES,
    SUCCEEDED,
    ShardState,
    add_op,
    format_window,
    remove_op,
    retry_op,
    shard_name,
    window_of,
)
from cluster.runtime.shardmeta import ShardMeta


def test_a_remove_ends_only_the_occurrence_it_names():
    state = ShardState()
    state.apply(add_op("j", 100, b"job", occurrence=1))
    state.apply(add_op("j", 200, b"job", occurrence=2))  # the next occurrence, same shard
    state.apply(remove_op("j", 1, MOVED))  # the old occurrence's remove must not end occurrence 2
    assert state.live["j"][:5] == [200, b"job", 2, 0, 200]
    state.apply(remove_op("j", 2, SUCCEEDED))
    assert "j" not in state.live


def test_retry_moves_the_due_time_and_counts_attempts_but_keeps_the_scheduled_time():
    state = ShardState()
    state.apply(add_op("j", 100, b"job"))
    state.apply(retry_op("j", 150, 1))
    state.apply(retry_op("j", 250, 2))
    due, _, occurrence, attempts, scheduled, *_ = state.live["j"]
    assert (due, occurrence, attempts, scheduled) == (250, 1, 2, 100)


def test_a_moved_job_leaves_a_forward_for_cancels_to_follow():
    state = ShardState()
    state.apply(add_op("r", 100, b"job"))
    state.apply(remove_op("r", 1, MOVED, "shards/next"))
    assert state.moved == {"r": "shards/next"} and not state.live


def test_a_cancel_of_an_occurrence_that_already_moved_on_keeps_the_forward():
    """A cancel that found the run in flight removes its occurrence after the run's outcome had
    moved the job on; that stale removal must not hide where the job went (simulation, seed 244)."""
    state = ShardState()
    state.apply(add_op("r", 100, b"job", occurrence=2, source="shards/before"))
    state.apply(remove_op("r", 2, MOVED, "shards/next", [300, b"job", 3, 0, 300]))
    state.apply(remove_op("r", 2, CANCELLED))
    assert state.moved == {"r": "shards/next"} and not state.live
    # Ending the live occurrence here still leaves the proof a redo of its move looks for.
    state.apply(add_op("s", 100, b"job", occurrence=2, source="shards/before"))
    state.apply(remove_op("s", 2, CANCELLED))
    assert state.moved["s"] == "" and state.holds_move("s", 2)


def test_a_snapshot_replaces_everything_before_it():
    state = ShardState()
    for i in range(5):
        state.apply(add_op(f"j{i}", i, b"x"))
    state.apply(remove_op("j0", 1, CANCELLED))
    snapshot = state.snapshot()
    fresh = ShardState().replay([add_op("stale", 1, b"x")] + [unpack(pack(r)) for r in snapshot])
    assert {k: v[:5] for k, v in fresh.live.items()} == {k: v[:5] for k, v in state.live.items()}


ops = st.lists(
    st.one_of(
        st.builds(lambda k, d, o: add_op(f"j{k}", d, b"p", occurrence=o), st.integers(0, 5), st.integers(0, 99), st.integers(1, 3)),
        st.builds(lambda k, o: remove_op(f"j{k}", o, SUCCEEDED), st.integers(0, 5), st.integers(1, 3)),
        st.builds(lambda k, d, a: retry_op(f"j{k}", d, a), st.integers(0, 5), st.integers(0, 99), st.integers(1, 4)),
    ),
    max_size=60,
)


@given(ops)
@settings(max_examples=200, deadline=None)
def test_replay_from_the_log_equals_applying_each_write_as_it_was_made(script):
    written = ShardState()
    for op in script:
        written.apply(copy.deepcopy(op))
    replayed = ShardState().replay(unpack(pack(op)) for op in script)  # as decoded from the log
    assert {k: v[:5] for k, v in replayed.live.items()} == {k: v[:5] for k, v in written.live.items()}


def test_replay_leaves_the_garbage_collector_as_it_found_it():
    assert gc.isenabled()
    ShardState().replay([add_op("j", 1, b"x")])
    assert gc.isenabled()


def in_generation(obj: object, generation: int) -> bool:
    return any(o is obj for o in gc.get_objects(generation=generation))


def test_a_big_shard_loaded_sits_in_the_oldest_generation_and_a_small_one_does_not():
    """Young collections do not walk a million jobs just loaded (issue 29): they stalled the loop
    ~0.1 s, twice; a small read leaves what it made to the young collections, as any code does."""
    from storage.records import BULK_BUILD, decode, encode

    data = b"".join(encode(i, [add_op(f"j{k}", k, b"x") for k in range(i, i + 20_000)])
                    for i in range(0, BULK_BUILD, 20_000))
    big = ShardState()
    decode(data, reader=SHARD_FRAMES, fold=big.fold_frame)
    assert gc.isenabled() and in_generation(big.live["j7"], 2)
    small = ShardState()
    decode(encode(0, [add_op("a", 1, b"x")]), reader=SHARD_FRAMES, fold=small.fold_frame)
    assert gc.isenabled() and not in_generation(small.live["a"], 2)


def test_shard_names_sort_like_their_windows_and_metadata_round_trips():
    hour = 3_600_000_000
    starts = [window_of(t, hour) for t in (5 * hour + 7, 23 * hour, 10 * hour + 1, 100 * hour)]
    names = [shard_name(s, "silo.1", 1) for s in starts]
    assert sorted(names) == [shard_name(s, "silo.1", 1) for s in sorted(starts)]
    assert format_window(0) == "19700101T000000.000000Z"
    meta = ShardMeta("0#3", starts[0], starts[0] + hour, "sealed", 2, 1)
    assert ShardMeta.from_metadata(meta.to_metadata()) == meta


# Two frames of a shard log as the code before the layout change (commit 1dd02e6) wrote them:
# ADD a, ADD b | RETRY a, REMOVE b (moved to shards/next), ADD c (occurrence 4, 2 attempts).
OLD_LOG = bytes.fromhex(
    "2f0000009152ef1e010000000000000002000000929700a161ce000f4240c4054a4f422d410100ce000f42409700a162ce001e8480"
    "c4054a4f422d420100ce001e8480390000008b1865f2030000000000000003000000939402a161ce0016e360019501a16201a56d6f76"
    "6564ab7368617264732f6e6578749700a163ce002dc6c0c4054a4f422d430402ce002c4020"
)


def test_a_shard_log_written_before_the_layout_change_still_replays() -> None:
    from storage.records import decode

    decoded = decode(OLD_LOG)
    assert decoded.torn is None
    state = ShardState().replay(decoded.records())
    assert sorted(state.live) == ["a", "c"]
    assert state.live["a"][:5] == [1_500_000, b"JOB-A", 1, 1, 1_000_000]
    assert state.live["c"][:5] == [3_000_000, b"JOB-C", 4, 2, 2_900_000]
    assert state.moved == {"b": "shards/next"}
    # As a silo loads it (issue 29): the first frame, two plain ADDs, read typed; the same state.
    assert decode(OLD_LOG, reader=SHARD_FRAMES).frames[0].typed is not None
    loaded = ShardState()
    decode(OLD_LOG, reader=SHARD_FRAMES, fold=loaded.fold_frame)
    assert {k: v[:5] for k, v in loaded.live.items()} == {k: v[:5] for k, v in state.live.items()}
    assert loaded.moved == state.moved


def test_ops_whose_write_failed_are_taken_back_and_later_ops_win() -> None:
    """Issue 12, point 5: nothing stays applied in memory that the log does not hold."""
    state = ShardState()
    state.apply(add_op("a", 10, b"A"))
    state.apply(add_op("b", 20, b"B"))
    snapshot = copy.deepcopy(state.live)
    ops = [add_op("c", 30, b"C"), remove_op("a", 1, CANCELLED), retry_op("b", 25, 1),
           remove_op("b", 1, MOVED, "shards/next"), add_op("b", 40, b"B", 2)]
    touched, before = state.apply_undoably(ops)
    state.undo(before, touched)
    assert state.live == snapshot and state.moved == {}
    # A later, durable write of the same job is not taken back by an earlier failed one.
    touched, before = state.apply_undoably([add_op("a", 11, b"A2")])
    state.apply(add_op("a", 12, b"A3"))
    state.undo(before, touched)
    assert state.live["a"][0] == 12
