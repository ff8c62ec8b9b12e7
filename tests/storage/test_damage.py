"""Damage in a log (issue 13): read past it, say what was lost, keep the evidence, stop a writer
whose log is no longer what it wrote."""

from __future__ import annotations

import pytest

import storage
from storage import DAMAGED_PREFIX, LogCorrupted, LogWriter, MemoryStore, StorageError, Unavailable, read_log, records

A, B, C = records.encode(0, ["a0", "a1"]), records.encode(2, ["b"]), records.encode(3, ["c0", "c1"])


def test_a_frame_damaged_anywhere_but_the_tail_costs_only_its_records() -> None:
    for i in range(len(B)):
        bad = bytearray(B)
        bad[i] ^= 0x41
        decoded = records.decode(A + bytes(bad) + C)
        assert list(decoded.items()) == [(0, "a0"), (1, "a1"), (3, "c0"), (4, "c1")]
        assert decoded.torn is None and decoded.lost == 1
        assert [(d.offset, d.end) for d in decoded.damaged] == [(len(A), len(A) + len(B))]


def test_garbage_between_frames_is_reported_and_loses_nothing() -> None:
    decoded = records.decode(A + b"\x00\xff" * 37 + B, offset=100)
    assert list(decoded.records()) == ["a0", "a1", "b"]
    assert decoded.damaged == (records.Damage(100 + len(A), 100 + len(A) + 74, "bad length 4278255360", 0),)


def test_a_damaged_first_frame_counts_from_the_start() -> None:
    decoded = records.decode(b"\x07" * len(A) + B + C)
    assert list(decoded.records()) == ["b", "c0", "c1"] and decoded.lost == 2


def test_a_whole_frame_that_holds_no_records_is_damage_even_at_the_end() -> None:
    nonsense = records.encode_frame(5, [b"\xc1"])  # the checksum holds, the body is not msgpack
    decoded = records.decode(A + B + nonsense)
    assert decoded.torn is None and list(decoded.records()) == ["a0", "a1", "b"]
    assert decoded.damaged[0].reason.startswith("checksum holds") and decoded.damaged[0].lost == 1
    decoded = records.decode(A + records.encode_frame(2, [b"\xc1"]) + C)
    assert list(decoded.records()) == ["a0", "a1", "c0", "c1"] and decoded.lost == 1


def test_a_cut_tail_is_still_a_torn_tail_not_damage() -> None:
    decoded = records.decode(A + B + C[:-3])
    assert decoded.damaged == () and decoded.torn == records.Torn(len(A) + len(B), decoded.torn.reason)  # type: ignore[union-attr]


async def test_a_writer_whose_log_was_cut_behind_its_back_acknowledges_nothing_more() -> None:
    store = MemoryStore()
    writer = await LogWriter.create(store, "w", {})
    await writer.append("first")
    await writer.append("second")
    body = store._logs[writer.name].body
    del body[len(body) // 2 :]  # the log lost its tail after "second" was acknowledged
    with pytest.raises(LogCorrupted):
        await writer.append("third")  # before the fix: acknowledged, and never replayable past the cut
    with pytest.raises(LogCorrupted):
        await writer.append("fourth")


async def test_claiming_a_damaged_log_keeps_a_copy_before_anything_can_delete_it() -> None:
    store = MemoryStore()
    writer = await LogWriter.create(store, "d", {"owner": "a"})
    for r in ("x", "y", "z"):
        await writer.append(r)
    log = store._logs[writer.name]
    second = records.decode(bytes(log.body)).frames[1].offset
    log.body[second + 22] ^= 0xFF
    state = await read_log(store, "d")
    assert list(state.records()) == ["x", "z"] and state.decoded.lost == 1
    live = list(state.records())
    claimed = await LogWriter.claim(store, state, {"owner": "b"}, snapshot=lambda: live)
    live.append("after")  # the writer's contract: the snapshot covers every record submitted
    await claimed.append("after")  # the claim compacts first: generation 1, generation 0 deleted
    assert claimed.generation == 1 and await store.list("d~00000000") == []
    kept = await read_log(store, DAMAGED_PREFIX + "d")
    assert kept.decoded.lost == 1 and list(kept.records()) == ["x", "z"]
    assert kept.metadata["owner"] == "a" and "1 records lost" in kept.metadata["damage"]
    assert list((await read_log(store, "d")).records()) == ["x", "z", "after"]


class NoCopies(MemoryStore):
    async def create(self, name: str, metadata: dict[str, str]) -> str:  # type: ignore[override]
        if name.startswith(DAMAGED_PREFIX):
            raise Unavailable("injected: cannot keep the copy")
        return await super().create(name, metadata)


async def test_a_damaged_log_whose_copy_cannot_be_kept_is_not_claimed() -> None:
    store = NoCopies()
    writer = await LogWriter.create(store, "d", {"owner": "a"})
    for r in ("x", "y", "z"):
        await writer.append(r)
    store._logs[writer.name].body[len(records.encode(0, ["x"])) + 22] ^= 0xFF
    state = await read_log(store, "d")
    with pytest.raises(StorageError):
        await LogWriter.claim(store, state, {"owner": "b"}, snapshot=lambda: [])
    assert (await read_log(store, "d")).metadata == {"owner": "a"}  # untouched: try again later


def test_the_damage_names_are_exported() -> None:
    assert storage.damaged_name("shards/x~00000001") == "damaged/shards/x~00000001"


async def test_a_copy_left_half_done_by_a_copier_that_died_is_completed_by_the_next() -> None:
    store = MemoryStore()
    writer = await LogWriter.create(store, "h", {"owner": "a"})
    for r in ("x", "y", "z"):
        await writer.append(r)
    store._logs[writer.name].body[len(records.encode(0, ["x"])) + 22] ^= 0xFF
    state = await read_log(store, "h")
    copy = storage.damaged_name(writer.name)
    etag = await store.create(copy, {"damage": "being kept"})
    await store.append(copy, state.data[:10], etag)  # the first copier died here
    assert await storage.keep_damaged(store, state, "again") == copy
    assert (await store.fetch(copy)).data == state.data
