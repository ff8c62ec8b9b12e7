"""The fenced log writer on every store: group commit, rotation, retries, fencing, claims."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import pytest

import storage
from storage import LogOptions, LogWriter, read_log
from storage.generations import PENDING_KEY, generation_name


class State:
    """A caller's live state: the set of ids, applied when an append is submitted."""

    def __init__(self, ids: Iterable[int] = ()) -> None:
        self.ids: set[int] = set(ids)

    async def add(self, writer: LogWriter, i: int) -> None:
        self.ids.add(i)
        await writer.append(i)

    def snapshot(self) -> list[int]:
        return sorted(self.ids)


async def replayed(store: storage.Store, base: str) -> list[Any]:
    return list((await read_log(store, base)).records())


async def test_records_replay_in_order_with_metadata(store: storage.Store) -> None:
    writer = await LogWriter.create(store, "shard-1", {"owner": "s1", "state": "open"})
    for i in range(5):
        await writer.append({"op": "add", "id": i})
    await writer.append_many([{"op": "remove", "id": 0}, {"op": "remove", "id": 1}])
    state = await read_log(store, "shard-1")
    assert [r["id"] for r in state.records()] == [0, 1, 2, 3, 4, 0, 1]
    assert state.metadata == {"owner": "s1", "state": "open"}
    assert state.decoded.torn is None and state.decoded.last_seq == 6 == writer.last_seq
    with pytest.raises(storage.AlreadyExists):
        await LogWriter.create(store, "shard-1", {})


async def test_concurrent_appends_group_commit_into_few_blocks(store: storage.Store) -> None:
    writer = await LogWriter.create(store, "busy", {})
    await asyncio.gather(*(writer.append(i) for i in range(300)))
    assert writer.blocks_written <= 10  # 300 awaiters, a handful of blocks
    assert (await store.stat(writer.name)).blocks == writer.blocks_written
    assert sorted(await replayed(store, "busy")) == list(range(300))


async def test_a_block_is_never_larger_than_configured(store: storage.Store) -> None:
    writer = await LogWriter.create(store, "big", {}, options=LogOptions(max_block_bytes=4096))
    await asyncio.gather(*(writer.append(b"x" * 1000) for _ in range(20)))
    stat = await store.stat(writer.name)
    assert stat.blocks >= 5 and stat.size <= stat.blocks * 4096
    assert len(await replayed(store, "big")) == 20


async def test_rotation_past_the_limit_loses_and_doubles_nothing(store: storage.Store) -> None:
    state = State()
    writer = await LogWriter.create(store, "rot", {"owner": "s1"}, snapshot=state.snapshot,
                                    options=LogOptions(rotate_blocks=4))
    for i in range(12):
        await state.add(writer, i)
    await asyncio.gather(*(state.add(writer, i) for i in range(12, 60)))
    assert writer.rotations >= 3 and writer.generation >= 3
    records = await replayed(store, "rot")
    assert sorted(records) == list(range(60)) and len(records) == len(set(records))
    # Only the current generation is left, and it carries the caller's metadata.
    assert [i.name for i in await store.list("rot")] == [writer.name]
    assert (await read_log(store, "rot")).metadata == {"owner": "s1"}


# Only where the store's block limit can be set low; Azure's own 50,000-block limit is crossed
# by ``python -m benchmarks.storage`` (too slow for the suite).
@pytest.mark.parametrize("store_kind", ["memory", "file"])
async def test_rotation_when_the_store_refuses_more_blocks(store_kind: str, store_url: Any) -> None:
    async with storage.open_store(store_url(max_blocks=3)) as store:
        etag = await store.create("raw", {})
        for _ in range(3):
            etag = await store.append("raw", b"x", etag)
        with pytest.raises(storage.LogFull):
            await store.append("raw", b"x", etag)
        state = State()
        writer = await LogWriter.create(store, "full", {}, snapshot=state.snapshot)
        for i in range(10):
            await state.add(writer, i)
        assert writer.rotations >= 3
        assert await replayed(store, "full") == list(range(10))


async def test_without_a_snapshot_the_limit_is_a_clear_error(store: storage.Store) -> None:
    writer = await LogWriter.create(store, "nosnap", {}, options=LogOptions(rotate_blocks=2))
    await writer.append(1)
    await writer.append(2)
    with pytest.raises(storage.LogFull):
        await writer.append(3)


class ResendingStore(storage.Store):
    """A real store whose appends land, then are sent again, as an SDK retry after a lost response."""

    def __init__(self, inner: storage.Store, every: int = 2, error: type[Exception] | None = None) -> None:
        self.inner, self.every, self.error = inner, every, error
        self.calls = self.resent = 0

    async def append_block(self, name: str, payload: bytes, if_match: str) -> storage.Appended:
        self.calls += 1
        result = await self.inner.append_block(name, payload, if_match)
        if self.calls % self.every:
            return result
        self.resent += 1
        if self.error is not None:
            raise self.error("response lost after the block landed")
        return await self.inner.append_block(name, payload, if_match)  # the retry: 412 -> Fenced

    async def create(self, *a: Any) -> str:
        return await self.inner.create(*a)

    async def list(self, *a: Any) -> list[storage.LogInfo]:
        return await self.inner.list(*a)

    async def stat(self, *a: Any) -> storage.LogStat:
        return await self.inner.stat(*a)

    async def set_metadata(self, *a: Any) -> str:
        return await self.inner.set_metadata(*a)

    async def fetch(self, *a: Any) -> storage.Fetched:
        return await self.inner.fetch(*a)

    async def server_time(self) -> storage.ServerTime | None:
        return await self.inner.server_time()

    async def delete(self, *a: Any) -> None:
        await self.inner.delete(*a)


@pytest.mark.parametrize("error", [None, storage.Unavailable], ids=["retry-412", "lost-response"])
async def test_ambiguous_retries_do_not_duplicate(store: storage.Store, error: Any) -> None:
    flaky = ResendingStore(store, every=2, error=error)
    state = State()
    writer = await LogWriter.create(flaky, "amb", {}, snapshot=state.snapshot, options=LogOptions(rotate_blocks=5))
    for i in range(8):
        await state.add(writer, i)
    await asyncio.gather(*(state.add(writer, i) for i in range(8, 40)))
    assert flaky.resent >= 3
    records = await replayed(store, "amb")
    assert sorted(records) == list(range(40)) and len(records) == 40


async def test_fenced_writer_fails_every_waiter_and_every_later_append(store: storage.Store) -> None:
    writer = await LogWriter.create(store, "f", {"owner": "a"})
    await writer.append(0)
    state = await read_log(store, "f")
    thief = await LogWriter.claim(store, state, {"owner": "b"})
    results = await asyncio.gather(*(writer.append(i) for i in range(1, 20)), return_exceptions=True)
    assert all(isinstance(r, storage.Fenced) for r in results)
    with pytest.raises(storage.Fenced):
        await writer.append(99)
    await thief.append(100)
    assert await replayed(store, "f") == [0, 100]


async def test_claims_race_on_a_read_state_and_one_wins(store: storage.Store) -> None:
    writer = await LogWriter.create(store, "c", {"owner": "a"})
    await writer.append("x")
    state = await read_log(store, "c")
    results = await asyncio.gather(
        *(LogWriter.claim(store, state, {"owner": f"s{i}"}) for i in range(3)), return_exceptions=True
    )
    winners = [r for r in results if isinstance(r, LogWriter)]
    assert len(winners) == 1 and sum(isinstance(r, storage.Fenced) for r in results) == 2
    await winners[0].append("y")
    after = await read_log(store, "c")
    assert list(after.records()) == ["x", "y"] and after.metadata == {"owner": winners[0].metadata["owner"]}


async def test_metadata_changes_are_fenced_and_ordered_after_appends(store: storage.Store) -> None:
    writer = await LogWriter.create(store, "m", {"state": "open"})
    pending = [asyncio.ensure_future(writer.append(i)) for i in range(10)]
    await asyncio.sleep(0)  # let them queue first
    await writer.set_metadata({"state": "sealed"})
    assert all(p.done() for p in pending)
    assert (await read_log(store, "m")).metadata == {"state": "sealed"}
    with pytest.raises(storage.InvalidMetadata):
        await writer.set_metadata({"log_next": "1"})


async def test_claiming_a_torn_log_moves_to_a_clean_generation(store: storage.Store) -> None:
    writer = await LogWriter.create(store, "t", {})
    for i in range(3):
        await writer.append(i)
    await store.append(writer.name, storage.encode(3, [3])[:-2], writer.etag)  # a torn tail
    state = await read_log(store, "t")
    assert state.decoded.torn is not None and list(state.records()) == [0, 1, 2]
    with pytest.raises(storage.StorageError, match="bad tail"):
        await LogWriter.claim(store, state, {})
    live = State(state.records())
    claimed = await LogWriter.claim(store, state, {"owner": "b"}, snapshot=live.snapshot)
    await live.add(claimed, 4)
    after = await read_log(store, "t")
    assert after.decoded.torn is None and sorted(after.records()) == [0, 1, 2, 4]
    assert after.head.generation == 1


async def test_a_generation_abandoned_mid_rotation_is_ignored_then_removed(store: storage.Store) -> None:
    writer = await LogWriter.create(store, "g", {"owner": "a"})
    await writer.append("kept")
    # What a writer fenced between creating the new generation and committing leaves behind.
    await store.create(generation_name("g", 1), {PENDING_KEY: "1", "owner": "a"})
    state = await read_log(store, "g")
    assert state.head.generation == 0 and list(state.records()) == ["kept"]
    claimed = await LogWriter.claim(store, state, {"owner": "b"})
    assert [i.name for i in await store.list("g~")] == [claimed.name]
    assert [h.base for h in await storage.list_logs(store)] == ["g"]


async def test_a_writer_that_lost_its_log_deletes_none_of_the_new_owners_generations(store: storage.Store) -> None:
    """Found by the simulation, seed 7838: a writer that had lost its log without knowing it (it
    stalled while another claimed the log and rotated it) took the new owner's generation for a
    leftover of its own and deleted it, and the log with it."""
    old = await LogWriter.create(store, "lost", {"owner": "a"})
    await old.append("kept")
    state = await read_log(store, "lost")
    new = await LogWriter.claim(store, state, {"owner": "b"}, snapshot=lambda: list(state.records()))
    await new.rotate()
    with pytest.raises(storage.Fenced):
        await old.delete()  # a drained shard's delete, by the writer that no longer holds it
    await new.append("after")
    assert await replayed(store, "lost") == ["kept", "after"]


class _OldGenerationKept(storage.MemoryStore):
    """Refuses to delete generation 0 while ``keep`` is set: a rotation's best-effort delete of
    the superseded generation that failed."""

    keep = True

    async def delete(self, name: str, if_match: str | None) -> None:
        if self.keep and name == generation_name("rot", 0):
            raise storage.Unavailable("injected: delete failed")
        await super().delete(name, if_match)


async def test_deleting_a_log_deletes_a_superseded_generation_left_behind() -> None:
    """Found by the simulation (torn_logs, seed 39): a drained shard deleted only its current
    generation; the one before, whose delete after the rotation had failed, still pointed at it,
    and the log could neither be read nor claimed again ("kept rotating under 5 reads")."""
    store = _OldGenerationKept()
    state = State()
    writer = await LogWriter.create(store, "rot", {}, snapshot=state.snapshot, options=LogOptions(rotate_blocks=2))
    for i in range(3):
        await state.add(writer, i)
    assert writer.generation == 1 and len(await store.list("rot")) == 2
    with pytest.raises(storage.Unavailable):
        await writer.delete()  # the current generation stays: the log is still whole
    assert sorted(await replayed(store, "rot")) == [0, 1, 2]
    store.keep = False
    await writer.delete()
    assert await store.list("rot") == []


class _PausedAfterClaim(storage.MemoryStore):
    """Holds the next listing of ``base`` until ``go`` is set: a claimer whose process is
    stopped (SIGSTOP, a suspended VM) between its claim landing and its cleanup of old generations."""

    def __init__(self, base: str) -> None:
        super().__init__()
        self.base = base
        self.hold = False
        self.held = asyncio.Event()
        self.go = asyncio.Event()

    async def list(self, prefix: str = "") -> list[storage.LogInfo]:
        if self.hold and prefix.startswith(self.base):
            self.hold = False
            self.held.set()
            await self.go.wait()
        return await super().list(prefix)


async def _taken_over_and_rotated(store: _PausedAfterClaim) -> tuple[LogWriter, State]:
    """The log's next owner, which found the stalled one dead: it claimed the log and rotated it."""
    state = await read_log(store, store.base)
    live = State(state.records())
    owner = await LogWriter.claim(store, state, {"owner": "c"}, snapshot=live.snapshot)
    await owner.rotate()
    await live.add(owner, 2)
    return owner, live


async def test_a_claimer_stalled_after_its_claim_deletes_no_newer_generation() -> None:
    """Found by the simulation (torn_logs, seed 212): a silo stalled between its claim of a shard
    and its cleanup; meanwhile the next owner claimed the shard and rotated it. On waking, the
    stalled claimer deleted every generation but its own, the log's only current one among them,
    and every job of the shard was gone."""
    store = _PausedAfterClaim("s")
    first = await LogWriter.create(store, "s", {"owner": "a"})
    await first.append(1)
    state = await read_log(store, "s")
    store.hold = True
    stalled = asyncio.ensure_future(LogWriter.claim(store, state, {"owner": "b"}))
    await store.held.wait()  # its claim landed; its cleanup waits
    owner, live = await _taken_over_and_rotated(store)
    store.go.set()
    stale = await stalled
    assert sorted(await replayed(store, "s")) == [1, 2]
    with pytest.raises(storage.Fenced):
        await stale.append(3)
    await live.add(owner, 4)
    assert sorted(await replayed(store, "s")) == [1, 2, 4]



class _HeldAppends(storage.MemoryStore):
    """Appends wait for ``release`` once ``hold`` is set: a block kept in flight."""

    def __init__(self) -> None:
        super().__init__()
        self.hold = False
        self.release = asyncio.Event()
        self.appending = asyncio.Event()
        self.appended_at: list[float] = []

    async def append_block(self, name: str, payload: bytes, if_match: str) -> storage.Appended:
        if self.hold:
            self.appending.set()
            await self.release.wait()
        result = await super().append_block(name, payload, if_match)
        self.appended_at.append(asyncio.get_running_loop().time())
        return result


LONG_LINGER = LogOptions(linger=5.0)  # far longer than any wait a test below allows


async def test_a_gathered_batch_is_written_without_lingering_and_takes_what_lingered_along() -> None:
    """A named put's round is the batch already: its caller waits for its shard's append only,
    not also for more records that would never come; records lingering meanwhile go with it."""
    store = storage.MemoryStore()
    writer = await LogWriter.create(store, "gathered", {}, options=LONG_LINGER)
    lingering = asyncio.ensure_future(writer.append("plain"))
    await asyncio.sleep(0.05)
    assert not lingering.done()  # a lone record waits for company
    with storage.gathered():
        await asyncio.wait_for(writer.append_many(["round-1", "round-2"]), 1.0)
    await asyncio.wait_for(lingering, 1.0)  # written in the same block
    assert writer.blocks_written == 1
    assert await replayed(store, "gathered") == ["plain", "round-1", "round-2"]
    later = asyncio.ensure_future(writer.append("alone"))  # outside gathered(): an idle log lingers again
    await asyncio.sleep(0.05)
    assert not later.done()
    later.cancel()


async def test_records_queued_behind_a_block_in_flight_do_not_linger_again() -> None:
    """They waited for that block already: lingering again after it only delays them (a put's two
    appends each paid the linger, one after the other)."""
    store = _HeldAppends()
    writer = await LogWriter.create(store, "busy-log", {}, options=LONG_LINGER)
    store.hold = True
    with storage.gathered():
        first = asyncio.ensure_future(writer.append("first"))
        await asyncio.wait_for(store.appending.wait(), 1.0)  # its block in flight
    behind = asyncio.ensure_future(writer.append("behind"))  # not gathered
    await asyncio.sleep(0)
    store.hold = False
    store.release.set()
    await asyncio.wait_for(asyncio.gather(first, behind), 1.0)
    assert await replayed(store, "busy-log") == ["first", "behind"]
    assert writer.blocks_written == 2
