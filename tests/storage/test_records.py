"""Framing: whole records only, torn and corrupt tails reported, duplicates never replayed."""

from __future__ import annotations

import gc

import pytest
from hypothesis import given
from hypothesis import strategies as st

from storage import RecordTooLarge, records

values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text() | st.binary(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=10,
)


@given(st.lists(st.lists(values, min_size=1, max_size=5), min_size=1, max_size=5))
def test_frames_round_trip(batches: list[list[object]]) -> None:
    data, seq = b"", 0
    for batch in batches:
        data += records.encode(seq, batch)
        seq += len(batch)
    decoded = records.decode(data)
    assert list(decoded.items()) == list(enumerate(v for b in batches for v in b))
    assert (decoded.torn, decoded.end, decoded.last_seq) == (None, len(data), seq - 1)


def test_every_cut_point_yields_whole_frames_and_reports_the_tail() -> None:
    frames = [records.encode(0, ["a", "b"]), records.encode(2, [{"k": 1}]), records.encode(3, [b"z" * 40])]
    data = b"".join(frames)
    starts = [0, len(frames[0]), len(frames[0]) + len(frames[1])]
    for cut in range(len(data)):
        decoded = records.decode(data[:cut], offset=1000)
        whole = sum(1 for s, f in zip(starts, frames, strict=True) if s + len(f) <= cut)
        assert len(decoded.frames) == whole
        if cut in starts:
            assert decoded.torn is None
        else:
            assert decoded.torn is not None and decoded.torn.offset == 1000 + starts[whole]


def test_any_flipped_byte_stops_the_reader_at_that_frame() -> None:
    first, second = records.encode(0, ["keep"]), records.encode(1, ["lose", "me"])
    for i in range(len(second)):
        bad = bytearray(second)
        bad[i] ^= 0x41
        decoded = records.decode(first + bytes(bad))
        assert list(decoded.records()) == ["keep"]
        assert decoded.torn is not None and decoded.torn.offset == len(first)


def test_a_block_written_twice_replays_once() -> None:
    block = records.encode(5, ["x", "y"])
    decoded = records.decode(block + block + records.encode(7, ["z"]), after=4)
    assert list(decoded.items()) == [(5, "x"), (6, "y"), (7, "z")] and decoded.skipped == 2


def test_a_frame_over_one_block_is_refused() -> None:
    with pytest.raises(RecordTooLarge):
        records.encode(0, [b"x" * (4 * 1024 * 1024)])


def test_a_bulk_build_does_not_unfreeze_what_the_process_froze() -> None:
    """Decoding a big log leaves a host process's own gc.freeze() in place."""
    gc.collect()
    gc.freeze()  # as a Ray Serve replica does at startup (RAY_SERVE_FREEZE_GC_ON_STARTUP, default on)
    try:
        frozen = gc.get_freeze_count()
        assert frozen > 0
        with records.collector_paused():
            kept = [[i] for i in range(200_000)]  # a big shard's entries
        assert gc.get_freeze_count() >= frozen, f"{frozen} frozen objects before, {gc.get_freeze_count()} after"
        del kept
    finally:
        gc.unfreeze()
