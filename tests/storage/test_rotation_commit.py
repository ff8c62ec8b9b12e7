"""A rotation is done once the old generation points at the new one: the records its snapshot
covers are durable from then on, whatever fails in the steps after (found by the simulation,
torn_logs, seed 1829). Reporting them failed made their callers take back from memory what the
log holds; a move decided again that way was carried out twice."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import storage
from storage import LogOptions, LogWriter, MemoryStore, read_log
from storage.generations import NEXT_KEY, PENDING_KEY, generation_name

FINISH = generation_name("r", 1)  # the generation the rotation writes; its pending mark is cleared last


class FinishFails(MemoryStore):
    """A memory store where the CAS clearing generation 1's pending mark runs ``before`` first
    (which may raise), or lands and loses its answer, the stat that would tell failing too."""

    def __init__(self) -> None:
        super().__init__()
        self.before: Callable[[], Awaitable[None]] | None = None
        self.lose_answer = False
        self.stat_down = False

    async def set_metadata(self, name: str, metadata: Any, if_match: str | None) -> str:
        if name == FINISH and PENDING_KEY not in metadata and self.before is not None:
            before, self.before = self.before, None
            await before()
        etag = await super().set_metadata(name, metadata, if_match)
        if name == FINISH and self.lose_answer:
            self.lose_answer, self.stat_down = False, True
            raise storage.Unavailable("injected: the CAS landed, its answer was lost")
        return etag

    async def stat(self, name: str) -> storage.LogStat:
        if self.stat_down:
            self.stat_down = False
            raise storage.Unavailable("injected: stat failed")
        return await super().stat(name)


async def unavailable() -> None:
    raise storage.Unavailable("injected: set_metadata failed")


class Ids:
    """A caller's live state, applied when an append is submitted (as a shard does)."""

    def __init__(self) -> None:
        self.ids: list[int] = []

    async def add(self, writer: LogWriter, i: int) -> None:
        self.ids.append(i)
        await writer.append(i)

    def snapshot(self) -> list[int]:
        return list(self.ids)


async def rotating_writer(store: MemoryStore) -> tuple[LogWriter, Ids]:
    """A writer whose next append rotates its log."""
    ids = Ids()
    writer = await LogWriter.create(store, "r", {"owner": "a"}, snapshot=ids.snapshot,
                                    options=LogOptions(rotate_blocks=2))
    for i in (1, 2):
        await ids.add(writer, i)
    return writer, ids


async def test_a_rotation_whose_last_step_fails_acknowledges_what_it_wrote_and_finishes_later() -> None:
    store = FinishFails()
    writer, ids = await rotating_writer(store)
    store.before = unavailable
    await ids.add(writer, 3)  # before the fix: Unavailable, though generation 1 holds it
    assert writer.rotations == 1
    assert list((await read_log(store, "r")).records()) == [1, 2, 3]
    await ids.add(writer, 4)  # finishes the rotation first, then appends to generation 1
    assert [i.name for i in await store.list("r~")] == [FINISH]
    assert PENDING_KEY not in (await store.stat(FINISH)).metadata
    assert list((await read_log(store, "r")).records()) == [1, 2, 3, 4]


async def test_a_rotation_whose_last_step_landed_unseen_goes_on_writing() -> None:
    store = FinishFails()
    writer, ids = await rotating_writer(store)
    store.lose_answer = True
    await ids.add(writer, 3)
    await ids.add(writer, 4)  # the same CAS again finds itself landed: not fenced
    await ids.add(writer, 5)
    assert list((await read_log(store, "r")).records()) == [1, 2, 3, 4, 5]


async def test_a_rotation_claimed_before_its_last_step_acknowledges_what_the_claimer_read() -> None:
    store = FinishFails()
    writer, ids = await rotating_writer(store)
    seen: list[Any] = []
    done = asyncio.Event()

    async def claimed() -> None:
        state = await read_log(store, "r")
        seen.extend(state.records())
        await LogWriter.claim(store, state, {"owner": "b"})
        done.set()

    store.before = claimed
    await ids.add(writer, 3)  # before the fix: Fenced, though the claimer read it and carries it on
    await asyncio.wait_for(done.wait(), 5)
    assert seen == [1, 2, 3]
    with pytest.raises(storage.Fenced):
        await ids.add(writer, 4)
    assert list((await read_log(store, "r")).records()) == [1, 2, 3]


class MarkFails(MemoryStore):
    """A memory store of two blocks per generation, where a metadata change carrying ``mark`` fails."""

    def __init__(self) -> None:
        super().__init__(max_blocks=2)
        self.marks_fail = False

    async def set_metadata(self, name: str, metadata: Any, if_match: str | None) -> str:
        if self.marks_fail and "mark" in metadata:
            raise storage.Unavailable("injected: set_metadata failed")
        return await super().set_metadata(name, metadata, if_match)


@pytest.mark.parametrize("mark_fails", [True, False])
async def test_a_rotation_covers_the_records_queued_behind_a_metadata_change(mark_fails: bool) -> None:
    """Simulator seed 263574: the snapshot holds every record submitted, also those behind a
    metadata change in the queue; only those ahead of it were acknowledged. When the change
    failed, the record behind it failed with it, though durable: its caller (a cancel) took it
    back from memory, and the job it removed ran. When the change landed, the record was
    appended again after the snapshot that held it."""
    store = MarkFails()
    ids = Ids()
    writer = await LogWriter.create(store, "r", {"owner": "a"}, snapshot=ids.snapshot, options=LogOptions())
    for i in (1, 2):
        await ids.add(writer, i)
    store.marks_fail = mark_fails
    # Queued together: 3 meets the store's block limit, the writer rotates, the change and 4 wait behind.
    three, mark, four = await asyncio.gather(ids.add(writer, 3), writer.set_metadata({"owner": "a", "mark": "1"}),
                                            ids.add(writer, 4), return_exceptions=True)
    assert writer.rotations == 1
    assert three is None and four is None  # before the fix, with the change failing: 4 Unavailable
    assert isinstance(mark, storage.Unavailable) if mark_fails else isinstance(mark, str)
    assert list((await read_log(store, "r")).records()) == [1, 2, 3, 4]  # before the fix, the change landing: 4 twice


async def test_a_snapshot_record_bigger_than_a_block_is_refused_not_written_as_empty_blocks() -> None:
    """A record no block can hold made the rotation append empty frames until the store's block
    limit (50,000 requests on Azure, then LogFull): a shard's snapshot is one record, so a shard
    holding more than a block of live jobs at rotation did that. It fails at once now, and the
    log is as it was."""
    store = MemoryStore()
    big = ["x" * 3000]
    options = LogOptions(max_block_bytes=2048, rotate_blocks=2)
    writer = await LogWriter.create(store, "r", {"owner": "a"}, snapshot=lambda: big, options=options)
    await writer.append(1)
    await writer.append(2)
    with pytest.raises(storage.LogFull, match="exceeds one block"):
        await asyncio.wait_for(writer.append(3), 5)
    assert [i.name for i in await store.list("r")] == ["r~00000000"]  # no generation left half-written
    assert list((await read_log(store, "r")).records()) == [1, 2]


COMMIT = generation_name("r", 0)  # the rotation's commit point: the CAS pointing it at generation 1


class CommitAnswerLost(MemoryStore):
    """A memory store where the rotation's commit lands and its answer is lost, and the stat that
    would tell fails ``stats_down`` times (the store is still not answering)."""

    def __init__(self, stats_down: int) -> None:
        super().__init__()
        self.lose_answer = False
        self.stats_down = stats_down

    async def set_metadata(self, name: str, metadata: Any, if_match: str | None) -> str:
        etag = await super().set_metadata(name, metadata, if_match)
        if name == COMMIT and NEXT_KEY in metadata and self.lose_answer:
            self.lose_answer = False
            raise storage.Unavailable("injected: the commit landed, its answer was lost")
        return etag

    async def stat(self, name: str) -> storage.LogStat:
        if name == COMMIT and self.stats_down:
            self.stats_down -= 1
            raise storage.Unavailable("injected: stat failed")
        return await super().stat(name)


@pytest.mark.parametrize("stats_down", [1, 3])
async def test_a_rotation_whose_commit_landed_unseen_acknowledges_what_it_covers_and_keeps_its_log(
        stats_down: int) -> None:
    """Simulator seed 344458 with every kind: a shard's rotation covered a flow step's success; its
    commit landed, the answer was lost and the store did not answer the stat either. The success
    was reported not durable, and the next rotation, finding its own commit there, took it for
    another writer's: the silo dropped the shard it still owned as fenced. The step's success
    lived only as an absence from the new generation's snapshot, which its silo could not read
    back, so the step's flow never heard it and ran the step again from a new shard. The writer
    now asks the store again until it says whether the commit landed."""
    store = CommitAnswerLost(stats_down)
    writer, ids = await rotating_writer(store)
    store.lose_answer = True
    await asyncio.wait_for(ids.add(writer, 3), 30)  # before the fix: Unavailable, though generation 1 holds it
    assert writer.rotations == 1 and writer.generation == 1
    await ids.add(writer, 4)  # before the fix: Fenced by its own commit
    assert writer.stopped is None
    assert list((await read_log(store, "r")).records()) == [1, 2, 3, 4]


class CommitFailsUnseen(CommitAnswerLost):
    """... and where the commit fails without landing, the store silent after it just the same."""

    async def set_metadata(self, name: str, metadata: Any, if_match: str | None) -> str:
        if name == COMMIT and NEXT_KEY in metadata and self.lose_answer:
            self.lose_answer = False
            raise storage.Unavailable("injected: the commit failed")
        return await super().set_metadata(name, metadata, if_match)


async def test_a_rotation_whose_commit_failed_unseen_reports_it_and_rotates_again() -> None:
    """The store, asked again, says the commit did not land: the rotation failed as any write
    does, nothing it covers is durable, and the writer goes on (no wait for good, no fence)."""
    store = CommitFailsUnseen(stats_down=2)
    writer, ids = await rotating_writer(store)
    store.lose_answer = True
    with pytest.raises(storage.Unavailable):
        await asyncio.wait_for(ids.add(writer, 3), 30)
    assert writer.generation == 0 and list((await read_log(store, "r")).records()) == [1, 2]
    await ids.add(writer, 4)  # the snapshot still holds 3: a caller that kept it in memory
    assert writer.stopped is None and writer.rotations == 1
    assert list((await read_log(store, "r")).records()) == [1, 2, 3, 4]
