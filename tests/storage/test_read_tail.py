"""``read_tail`` on every store: the rest of a log read before, in one ranged read, or None when
that read cannot be continued (the generation rotated away, deleted, or shorter than it was)."""

from __future__ import annotations

import storage
from storage import LogOptions, LogWriter, read_log, read_tail
from storage.records import encode


def _snapshot() -> list[str]:
    return ["snapshot"]


async def test_a_tail_read_returns_what_was_appended_since_and_nothing_at_the_end(store: storage.Store) -> None:
    writer = await LogWriter.create(store, "t", {}, snapshot=_snapshot)
    await writer.append_many(["a", "b"])
    seen = await read_log(store, "t")
    await writer.append_many(["c"])
    await writer.append_many(["d", "e"])
    tail = await read_tail(store, seen.head.name, offset=seen.decoded.end, after=seen.decoded.last_seq)
    assert tail is not None and list(tail.records()) == ["c", "d", "e"]
    assert tail.etag == writer.etag and tail.decoded.end == tail.size == writer.size
    again = await read_tail(store, seen.head.name, offset=tail.decoded.end, after=tail.decoded.last_seq)
    assert again is not None and list(again.records()) == []  # at the very end: nothing, not an error


async def test_a_torn_tail_is_read_again_and_folded_once_whole_frames_follow_it(store: storage.Store) -> None:
    etag = await store.create(storage.generation_name("t", 0), {})
    etag = await store.append(storage.generation_name("t", 0), encode(0, ["a"]), etag)
    junk = encode(1, ["lost"])[:-3]
    etag = await store.append(storage.generation_name("t", 0), junk, etag)
    seen = await read_log(store, "t")
    assert seen.decoded.torn is not None and seen.decoded.end == seen.decoded.torn.offset
    await store.append(storage.generation_name("t", 0), encode(1, ["b"]), etag)
    tail = await read_tail(store, seen.head.name, offset=seen.decoded.end, after=seen.decoded.last_seq)
    whole = await read_log(store, "t")
    assert tail is not None and list(tail.records()) == ["b"] == list(whole.records())[1:]
    assert tail.decoded.damaged and tail.decoded.damaged[0].offset == whole.decoded.damaged[0].offset


async def test_a_generation_rotated_away_or_cut_short_is_not_continued(store: storage.Store) -> None:
    writer = await LogWriter.create(store, "t", {}, snapshot=_snapshot, options=LogOptions())
    await writer.append_many(["a", "b"])
    seen = await read_log(store, "t")
    assert await read_tail(store, seen.head.name, offset=seen.size + 1, after=seen.decoded.last_seq) is None
    await writer.rotate()
    assert await read_tail(store, seen.head.name, offset=seen.decoded.end, after=seen.decoded.last_seq) is None


async def test_a_block_written_twice_across_two_reads_is_folded_once(store: storage.Store) -> None:
    name = storage.generation_name("t", 0)
    etag = await store.create(name, {})
    block = encode(0, ["a", "b"])
    etag = await store.append(name, block, etag)
    seen = await read_log(store, "t")
    await store.append(name, block, etag)  # a retried append whose first try had landed
    tail = await read_tail(store, name, offset=seen.decoded.end, after=seen.decoded.last_seq)
    assert tail is not None and list(tail.records()) == [] and tail.decoded.skipped == 2
    assert list((await read_log(store, "t")).records()) == ["a", "b"]
