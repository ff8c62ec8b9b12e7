"""A log writer in doubt — an append whose answer was lost and whose tail could not be read —
never stays stuck: once the store answers it learns whether it still owns its log and resumes,
or every caller is told ``Fenced`` / ``LogCorrupted``, never an endless outage."""

from __future__ import annotations

from typing import Any

import pytest

import storage
from storage import LogWriter, MemoryStore, read_log


class DoubtStore(storage.Store):
    """A memory store whose next append lands but loses its answer, and whose reads can be down."""

    def __init__(self) -> None:
        self.inner = MemoryStore()
        self.lose_next_answer = False
        self.fetch_down = False  # the body cannot be read; stat still answers
        self.drop_next_append = False  # the next append never reaches the log, and its answer is lost
        self.stat_down = False

    async def append_block(self, name: str, payload: bytes, if_match: str) -> storage.Appended:
        if self.drop_next_append:
            self.drop_next_append = False
            raise storage.Unavailable("request lost before it reached the store")
        result = await self.inner.append_block(name, payload, if_match)
        if self.lose_next_answer:
            self.lose_next_answer = False
            raise storage.Unavailable("response lost after the block landed")
        return result

    async def fetch(self, name: str, offset: int = 0) -> storage.Fetched:
        if self.fetch_down:
            raise storage.Unavailable("injected: the body cannot be read")
        return await self.inner.fetch(name, offset)

    async def create(self, *a: Any) -> str:
        return await self.inner.create(*a)

    async def list(self, *a: Any) -> list[storage.LogInfo]:
        return await self.inner.list(*a)

    async def stat(self, *a: Any) -> storage.LogStat:
        if self.stat_down:
            raise storage.Unavailable("injected: stat failed")
        return await self.inner.stat(*a)

    async def set_metadata(self, *a: Any) -> str:
        return await self.inner.set_metadata(*a)

    async def server_time(self) -> storage.ServerTime | None:
        return await self.inner.server_time()

    async def delete(self, *a: Any) -> None:
        await self.inner.delete(*a)


async def writer_in_doubt(store: DoubtStore) -> LogWriter:
    """A writer whose append of "landed" landed, its answer lost, its tail unreadable."""
    writer = await LogWriter.create(store, "w", {"owner": "a"})
    await writer.append("first")
    store.lose_next_answer = store.fetch_down = True
    with pytest.raises(storage.Unavailable):
        await writer.append("landed")
    return writer


async def test_a_writer_in_doubt_learns_it_was_claimed_though_its_log_still_cannot_be_read() -> None:
    store = DoubtStore()
    writer = await writer_in_doubt(store)
    state = await read_log(store.inner, "w")
    await LogWriter.claim(store.inner, state, {"owner": "b"})  # adopted while the old writer was in doubt
    # Before the fix: Unavailable for as long as the body could not be read, however long that was.
    with pytest.raises(storage.Fenced):
        await writer.append("after")
    with pytest.raises(storage.Fenced):
        await writer.append("later")
    assert list((await read_log(store.inner, "w")).records()) == ["first", "landed"]


async def test_a_writer_in_doubt_whose_log_was_cut_reports_corruption_not_an_outage() -> None:
    store = DoubtStore()
    writer = await writer_in_doubt(store)
    store.fetch_down = False
    del store.inner._logs[writer.name].body[3:]  # the log lost what the writer had acknowledged
    # Before the fix: a StorageError ("outside the body") at every write, for good.
    with pytest.raises(storage.LogCorrupted):
        await writer.append("after")
    with pytest.raises(storage.LogCorrupted):
        await writer.append("later")


async def test_a_writer_in_doubt_that_still_owns_its_log_resumes_once_the_store_answers() -> None:
    store = DoubtStore()
    writer = await writer_in_doubt(store)
    with pytest.raises(storage.Unavailable):
        await writer.append("while down")  # still in doubt: nothing acknowledged
    store.fetch_down = False
    await writer.append("after")
    assert list((await read_log(store.inner, "w")).records()) == ["first", "landed", "after"]


async def test_an_append_in_doubt_whose_callers_took_it_back_stops_the_writer_once_it_proves_landed() -> None:
    """A caller that mirrors the log in memory undoes a failed append; if it landed after all,
    going on would leave the log holding what memory does not (found by the simulation, seed 3507)."""
    store = DoubtStore()
    writer = await LogWriter.create(store, "w", {"owner": "a"})
    await writer.append("first")
    store.lose_next_answer = store.fetch_down = True
    try:
        await writer.append("landed")
    except storage.Unavailable:
        writer.disown_doubt()  # the caller took "landed" back from its memory
    store.fetch_down = False
    with pytest.raises(storage.LandedAfterFailure):
        await writer.append("after")
    with pytest.raises(storage.LogCorrupted):  # for good: the owner reloads from the log
        await writer.append("later")
    assert list((await read_log(store.inner, "w")).records()) == ["first", "landed"]


async def test_an_append_in_doubt_that_never_landed_leaves_a_disowning_writer_going() -> None:
    store = DoubtStore()
    writer = await LogWriter.create(store, "w", {"owner": "a"})
    await writer.append("first")
    store.stat_down = store.drop_next_append = True
    try:
        await writer.append("lost")
    except storage.Unavailable:
        writer.disown_doubt()
    store.stat_down = False
    await writer.append("after")
    assert list((await read_log(store.inner, "w")).records()) == ["first", "after"]
