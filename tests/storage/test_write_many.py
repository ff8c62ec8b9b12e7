"""``write_metadata_many`` and ``stat_many``: a batch of metadata writes (or stats) answered per
log, on every store, as the named-job registry's group commit relies on them."""

from __future__ import annotations

from pathlib import Path

import pytest

import storage
from storage import AlreadyExists, Fenced, FileStore, MetadataWrite, NotFound
from tests.storage.test_file_durability import Disk, disk  # noqa: F401  the fixture, used by name


async def test_each_write_of_a_batch_is_made_or_refused_on_its_own(store: storage.Store) -> None:
    kept = await store.create("names/kept", {"v": "1"})
    gone = await store.create("names/gone", {"v": "1"})
    await store.create("names/taken", {"v": "1"})
    out = await store.write_metadata_many([
        MetadataWrite("names/new", {"v": "new"}, create=True),
        MetadataWrite("names/taken", {"v": "2"}, create=True),
        MetadataWrite("names/kept", {"v": "2"}, kept),
        MetadataWrite("names/stale", {"v": "2"}, "no-such-etag"),
        MetadataWrite("names/gone", None, gone),
    ])
    assert isinstance(out[0], str) and isinstance(out[2], str) and out[4] is None
    assert isinstance(out[1], AlreadyExists) and isinstance(out[3], NotFound)
    stats = await store.stat_many(["names/new", "names/taken", "names/kept", "names/gone"])
    assert [s.metadata if isinstance(s, storage.LogStat) else type(s) for s in stats] == [
        {"v": "new"}, {"v": "1"}, {"v": "2"}, NotFound]
    assert stats[0].etag == out[0] and stats[2].etag == out[2]  # type: ignore[union-attr]
    stale = await store.write_metadata_many([MetadataWrite("names/kept", {"v": "3"}, kept)])
    assert isinstance(stale[0], Fenced)
    with pytest.raises(ValueError, match="twice"):
        await store.write_metadata_many([MetadataWrite("names/a", {}, create=True)] * 2)


async def test_a_log_made_by_a_batch_reads_empty_and_takes_appends(store: storage.Store) -> None:
    (etag,) = await store.write_metadata_many([MetadataWrite("logs/a", {"k": "v"}, create=True)])
    assert isinstance(etag, str)
    assert await store.read("logs/a") == (b"", etag)
    etag = await store.append("logs/a", b"block", etag)
    assert await store.read("logs/a") == (b"block", etag)


async def test_the_file_store_leaves_no_temporary_file_behind(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "s")
    await store.write_metadata_many([MetadataWrite(f"n/{i}", {"i": str(i)}, create=True) for i in range(20)])
    assert not [p for p in (tmp_path / "s").iterdir() if p.name.endswith(".tmp")]
    assert len(await store.names("n/")) == 20
    await store.close()


async def test_a_batch_is_on_disk_when_write_metadata_many_returns(tmp_path: Path, disk: Disk) -> None:  # noqa: F811
    """Each write of an answered batch survives a power cut (the model of test_file_durability)."""
    store = FileStore(tmp_path / "store")
    made = await store.write_metadata_many([MetadataWrite(f"names/{i}", {"v": "1"}, create=True) for i in range(40)])
    disk.acknowledged("a batch of creates")
    changed = await store.write_metadata_many([MetadataWrite(f"names/{i}", {"v": "2"}, made[i])  # type: ignore[arg-type]
                                               for i in range(40)])
    disk.acknowledged("a batch of changes")
    assert disk.violations == [] and all(isinstance(e, str) for e in changed)
    assert (await store.stat("names/7")).metadata == {"v": "2"}
    await store.close()
