"""The store contract, identical on memory, file and Azure: CAS, fencing, order, tails."""

from __future__ import annotations

import asyncio

import pytest

import storage
import storage.azure
from storage import records
from tests.storage.conftest import StoreUrl


async def test_create_is_exclusive_and_returns_a_usable_etag(store: storage.Store) -> None:
    etag = await store.create("a", {"owner": "s1"})
    with pytest.raises(storage.AlreadyExists):
        await store.create("a", {"owner": "s2"})
    assert await store.append("a", b"x", etag) != etag
    assert (await store.stat("a")).metadata == {"owner": "s1"}


async def test_list_is_lexical_with_metadata_and_etags_that_cas(store: storage.Store) -> None:
    for name in ["shard/2026-01-02", "shard/2026-01-01", "other", "shard/2025-12-31"]:
        await store.create(name, {"n": name.replace("/", "_").replace("-", "_")})
    listed = await store.list("shard/")
    assert [info.name for info in listed] == ["shard/2025-12-31", "shard/2026-01-01", "shard/2026-01-02"]
    name, metadata, etag = listed[0]
    assert metadata == {"n": "shard_2025_12_31"}
    # The ETag a listing reports is the one a claim must present.
    await store.set_metadata(name, {"owner": "me"}, etag)
    assert [i.name for i in await store.list()] == ["other", *[i.name for i in listed]]
    assert await store.list("nothing") == []


async def test_set_metadata_replaces_everything_and_fences(store: storage.Store) -> None:
    etag = await store.create("log", {"owner": "a", "state": "open"})
    new = await store.set_metadata("log", {"owner": "b"}, etag)
    assert new != etag
    stat = await store.stat("log")
    assert (stat.metadata, stat.etag) == ({"owner": "b"}, new)
    with pytest.raises(storage.Fenced):
        await store.set_metadata("log", {"owner": "c"}, etag)
    with pytest.raises(storage.NotFound):
        await store.set_metadata("missing", {"owner": "c"}, etag)
    with pytest.raises(storage.InvalidMetadata):
        await store.set_metadata("log", {"Owner": "x"}, new)
    with pytest.raises(storage.InvalidMetadata):
        await store.set_metadata("log", {"owner": "é"}, new)


async def test_two_claimers_race_on_one_etag_and_exactly_one_wins(store: storage.Store) -> None:
    etag = await store.create("shard", {"owner": ""})
    results = await asyncio.gather(
        *(store.set_metadata("shard", {"owner": f"silo{i}"}, etag) for i in range(5)), return_exceptions=True
    )
    winners = [r for r in results if isinstance(r, str)]
    assert len(winners) == 1
    assert all(isinstance(r, storage.Fenced) for r in results if not isinstance(r, str))
    stat = await store.stat("shard")
    assert stat.etag == winners[0] and stat.metadata["owner"].startswith("silo")


async def test_a_stale_owner_cannot_append_after_another_claims(store: storage.Store) -> None:
    etag = await store.create("shard", {"owner": "old"})
    etag = await store.append("shard", b"one", etag)
    await store.set_metadata("shard", {"owner": "new"}, etag)
    with pytest.raises(storage.Fenced):
        await store.append("shard", b"two", etag)
    assert (await store.read("shard"))[0] == b"one"


async def test_appends_keep_order_and_reads_start_at_any_offset(store: storage.Store) -> None:
    etag = await store.create("log", {})
    etags = {etag}
    for chunk in (b"alpha", b"beta", b"gamma"):
        result = await store.append_block("log", chunk, etag)
        etag = result.etag
        etags.add(etag)
    assert len(etags) == 4  # every write changed the ETag
    assert (result.size, result.blocks) == (14, 3)
    assert await store.read("log") == (b"alphabetagamma", etag)
    assert await store.read("log", 9) == (b"gamma", etag)
    assert await store.read("log", 14) == (b"", etag)  # the end: Azurite says b"", Azure 416
    with pytest.raises(storage.StorageError):
        await store.read("log", 15)
    with pytest.raises(storage.NotFound):
        await store.read("missing")


async def test_a_log_longer_than_one_read_comes_back_whole_from_any_offset(
        store_url: StoreUrl, monkeypatch: pytest.MonkeyPatch) -> None:
    """Azure reads a log in ranges of ``MAX_READ`` (256 MiB): made small here, a log spans several."""
    monkeypatch.setattr(storage.azure, "MAX_READ", 64 * 1024)
    blocks = [bytes([i]) * 100_000 for i in range(3)]
    async with storage.open_store(store_url()) as store:
        etag = await store.create("log", {"k": "v"})
        for block in blocks:
            etag = (await store.append_block("log", block, etag)).etag
        for offset in (0, 1, 150_000, 299_999):
            fetched = await store.fetch("log", offset)
            assert fetched.data == b"".join(blocks)[offset:]
            assert (fetched.etag, fetched.size, fetched.blocks, fetched.metadata) == (etag, 300_000, 3, {"k": "v"})


async def test_delete_is_conditional(store: storage.Store) -> None:
    etag = await store.create("log", {})
    newer = await store.append("log", b"x", etag)
    with pytest.raises(storage.Fenced):
        await store.delete("log", etag)
    await store.delete("log", newer)
    with pytest.raises(storage.NotFound):
        await store.stat("log")
    with pytest.raises(storage.NotFound):
        await store.delete("log", newer)
    # A re-created log never takes an old ETag back.
    assert await store.create("log", {}) not in (etag, newer)


async def test_reader_stops_at_a_torn_tail_and_reports_where(store: storage.Store) -> None:
    etag = await store.create("log", {})
    good = records.encode(0, ["a", "b"]) + records.encode(2, ["c"])
    etag = await store.append("log", good, etag)
    torn = records.encode(3, ["d" * 100])[:-7]
    await store.append("log", torn, etag)
    decoded = records.decode((await store.read("log"))[0])
    assert list(decoded.records()) == ["a", "b", "c"]
    assert decoded.torn is not None and decoded.torn.offset == len(good)
    assert "truncated" in decoded.torn.reason


async def test_reader_skips_a_corrupt_frame_reports_it_and_reads_on(store: storage.Store) -> None:
    etag = await store.create("log", {})
    first = records.encode(0, [{"op": "add", "id": 1}])
    second = bytearray(records.encode(1, [{"op": "add", "id": 2}]))
    second[-2] ^= 0xFF
    await store.append("log", first + bytes(second) + records.encode(2, ["after"]), etag)
    decoded = records.decode((await store.read("log"))[0])
    assert list(decoded.items()) == [(0, {"op": "add", "id": 1}), (2, "after")]
    assert decoded.torn is None
    assert decoded.damaged == (records.Damage(len(first), len(first) + len(second), "CRC mismatch", 1),)


async def test_oversized_and_empty_payloads_are_refused(store: storage.Store) -> None:
    etag = await store.create("log", {})
    with pytest.raises(storage.RecordTooLarge):
        await store.append("log", b"x" * (storage.MAX_BLOCK_BYTES + 1), etag)
    with pytest.raises(storage.RecordTooLarge):
        await store.append("log", b"", etag)
