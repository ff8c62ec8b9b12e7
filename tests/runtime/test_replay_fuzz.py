"""Replay of damaged shard logs, fuzzed (issue 13, point 7).

Random shard logs — valid ops, records that are no ops, whole frames whose body is nonsense —
then flipped bits, inserted garbage and a cut tail. Whatever comes out: decoding and replay never
raise, nothing is yielded that was not written, every record missing before the last one read is
counted as lost, and any change to the bytes is reported as damage or a torn tail.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cluster.model.wire import pack
from cluster.runtime.shardlog import ADD, PAUSE, REMOVE, RESUME, RETRY, SHARD_FRAMES, SNAPSHOT, ShardState
from storage import records

IDS = ["a", "b", "c", "d"]
times = st.integers(0, 2**40)
ids = st.sampled_from(IDS)

add = st.builds(lambda i, due, job, occ, att: [ADD, i, due, job, occ, att, due], ids, times,
                st.binary(min_size=1, max_size=8), st.integers(1, 5), st.integers(0, 3))
moved_in = add.map(lambda op: [*op, "shards/source"])  # a recurring job's next occurrence, moved in
remove = st.builds(lambda i, occ, to: [REMOVE, i, occ, "succeeded", to], ids, st.integers(1, 5), st.none() | st.just("s/x"))
move = st.builds(lambda i, occ, due, job: [REMOVE, i, occ, "moved", "s/next", [due, job, occ + 1, 0, due]],
                 ids, st.integers(1, 5), times, st.binary(min_size=1, max_size=8))
retry = st.builds(lambda i, due, att: [RETRY, i, due, att], ids, times, st.integers(0, 3))
snapshot = st.builds(lambda entries, new: [SNAPSHOT, [[i, d, j, 1, 0, d] for i, d, j in entries], {}, *new],
                     st.lists(st.tuples(ids, times, st.binary(min_size=1, max_size=8)), max_size=3),
                     st.sampled_from([(), ({"z": ["s/next", [5, b"j", 2, 0, 5]]}, ["shards/source"])]))
pause = st.builds(lambda i, note, since: [PAUSE, i, note, "ops", since], ids, st.none() | st.text(max_size=4), times)
resume = st.builds(lambda i: [RESUME, i], ids)
moved_in_paused = moved_in.map(lambda op: [*op, ["note", "ops", 5]])  # a paused job's next occurrence
valid_op = st.one_of(add, add, moved_in, remove, move, retry, snapshot, pause, resume, moved_in_paused)

scalars = st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=6) | st.binary(max_size=6)
# Records that are no ops, by construction: no list, an unknown kind, the wrong length or types.
nonsense_op = st.one_of(
    scalars,
    st.dictionaries(st.text(max_size=3), scalars, max_size=3),
    st.lists(scalars, max_size=3).map(lambda rest: ["add", *rest]),
    st.lists(scalars, max_size=6).map(lambda rest: [6 + len(rest), *rest]),
    st.lists(scalars, max_size=5).map(lambda rest: [ADD, *rest[:5]] if len(rest) != 6 else [ADD, *rest, 0]),
    add.map(lambda op: [*op[:2], str(op[2]), *op[3:]]),  # due as text
    add.map(lambda op: [*op[:3], "not bytes", *op[4:]]),
    remove.map(lambda op: [op[0], 7, *op[2:]]),  # id as int
    retry.map(lambda op: [*op, "extra"]),
    st.just([SNAPSHOT, "no list", {}]),
    move.map(lambda op: [*op[:5], ["not", "an", "occurrence"]]),
    moved_in.map(lambda op: [*op[:7], 42]),  # source not a str
    st.just([RETRY, "a", 2**63 - 1, 1]),  # a due time no datetime holds
    pause.map(lambda op: [*op[:3], None, op[4]]),  # no one paused it
    pause.map(lambda op: op[:4]),
    st.just([RESUME]),
    moved_in_paused.map(lambda op: [*op[:8], ["note", "ops"]]),
)


@dataclass(frozen=True)
class Written:
    """A frame as the test wrote it: its records, or None for a frame whose body is nonsense."""

    records: list[Any] | None
    count: int


def nonsense_frame(first: int, count: int, undecodable: bool) -> bytes:
    """A frame whose checksum holds but whose body is not ``count`` records."""
    body = b"\x91\xc1" if undecodable else bytes([0x90 | (count + 1)]) + b"\xc0" * (count + 1)
    tail = struct.pack("<QI", first, count) + body
    return struct.pack("<II", len(body), zlib.crc32(tail)) + tail


frame_strategy = st.one_of(
    st.lists(st.one_of(valid_op, valid_op, nonsense_op), min_size=1, max_size=4).map(lambda r: Written(r, len(r))),
    st.tuples(st.integers(1, 3), st.booleans()).map(lambda c: Written(None, c[0] * 2 + c[1])),
)
mutation = st.one_of(
    st.tuples(st.just("flip"), st.floats(0, 1, exclude_max=True), st.integers(0, 7)),
    st.tuples(st.just("insert"), st.floats(0, 1), st.binary(min_size=1, max_size=40)),
)


def is_nonsense(record: Any) -> bool:
    """Whether the test made ``record`` as one of ``nonsense_op``'s (by shape, not by replay's code)."""
    if type(record) is not list or not record or type(record[0]) is not int or not 0 <= record[0] <= 5:
        return True
    kind = record[0]
    if kind == ADD:
        return (len(record) not in (7, 8, 9) or type(record[2]) is not int or type(record[3]) is not bytes
                or (len(record) >= 8 and type(record[7]) is not str) or (len(record) == 9 and len(record[8]) != 3))
    if kind == PAUSE:
        return len(record) != 5 or type(record[3]) is not str
    if kind == RESUME:
        return len(record) != 2
    if kind == REMOVE:
        return type(record[1]) is not str or (len(record) == 6 and len(record[5]) != 5)
    if kind == RETRY:
        return len(record) != 4 or record[2] > 2**62
    return type(record[1]) is not list


@settings(max_examples=300, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(frame_strategy, min_size=1, max_size=8), st.lists(mutation, max_size=3),
       st.none() | st.floats(0, 1))
def test_replay_of_a_damaged_log_never_raises_never_invents_and_reports_every_loss(
        frames: list[Written], mutations: list[tuple[str, float, Any]], cut: float | None) -> None:
    data = b""
    written: dict[int, Any] = {}
    seq = 0
    nonsense_end = None  # where the first frame with a nonsense body ends
    for frame in frames:
        if frame.records is None:
            data += nonsense_frame(seq, frame.count, frame.count % 2 == 1)
            nonsense_end = len(data) if nonsense_end is None else nonsense_end
        else:
            data += records.encode(seq, frame.records)
            written.update(enumerate(frame.records, seq))
        seq += frame.count
    buf = bytearray(data)
    for kind, where, what in mutations:
        at = int(where * len(buf))
        if kind == "flip" and at < len(buf):
            buf[at] ^= 1 << what
        elif kind == "insert":
            buf[at:at] = what
    if cut is not None:
        del buf[int(cut * len(buf)):]

    decoded = records.decode(bytes(buf))

    read = list(decoded.items())
    for s, record in read:  # nothing that was not written, and each under its own number
        assert s in written and pack(record) == pack(written[s])
    got = {s for s, _ in read}
    last = max(got, default=-1)
    # Every loss before the last record read is counted; nothing is counted that was read.
    assert sum(1 for s in range(last + 1) if s not in got) <= decoded.lost <= seq - len(got)
    changed = not data.startswith(bytes(buf))  # what is left is not just the log cut short
    if changed or (nonsense_end is not None and not mutations and nonsense_end <= len(buf)):
        assert decoded.damaged or decoded.torn is not None  # every change, every nonsense frame is reported
    if not mutations and cut is None and nonsense_end is None:
        assert len(got) == seq and not decoded.damaged and decoded.torn is None

    nonsense = {s for s, record in read if is_nonsense(record)}
    adds = {(op[1], op[3]) for op in written.values() if not is_nonsense(op) and op[0] == ADD}
    adds |= {(e[0], e[2]) for op in written.values() if not is_nonsense(op) and op[0] == SNAPSHOT for e in op[1]}
    state = ShardState().replay_log(decoded, "fuzz")
    assert {q.seq for q in state.unreadable} == nonsense
    for job_id, entry in state.live.items():  # every live job is one that was written, as written
        assert (job_id, entry[1]) in adds

    # Loading a shard reads frames of plain ADDs typed and folds each frame as it is found (issue
    # 29): the same damage found, the same state folded.
    loaded = ShardState()
    fast = records.decode(bytes(buf), reader=SHARD_FRAMES, fold=loaded.fold_frame)
    assert (fast.end, fast.last_seq, fast.torn, fast.skipped, fast.damaged) == \
        (decoded.end, decoded.last_seq, decoded.torn, decoded.skipped, decoded.damaged)
    assert list(loaded.live.items()) == list(state.live.items())
    assert (loaded.moved, loaded.pending, loaded.sources, loaded.paused, loaded.unreadable) == \
        (state.moved, state.pending, state.sources, state.paused, state.unreadable)
