"""The file store's layout (issue 25 point 4): logs in directories by kind and hash bucket, listed
and counted from an ordered index, so that a page and a count cost the same at any size; and a
store written flat by an earlier version opens and keeps working, even after a crash while it
was being moved in.

The costs are counted, not timed: directory entries read (``os.scandir`` and ``os.listdir``),
``.meta`` files read, and index rows handed out.
"""

from __future__ import annotations

import os
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import storage.file
import storage.file_layout
from storage import FileStore, MetadataWrite
from storage.file_layout import INDEX_FILE, Index, log_dir

FLAT = Path(__file__).parent / "fixtures" / "flat-store-at-9844743"
# What make_flat_store.py wrote there, as every later version must read it.
FLAT_LOGS = {
    "flows/ü x": ({}, b"step"),
    "members/0": ({"status": "active", "beat": "2"}, b""),
    "names/default/default/job": ({"gen": "1"}, b""),
    "shards/w~00000000": ({"owner": "s#1"}, b"onetwothree"),
}


class Costs:
    """What the store read while a test watched: directory entries, .meta files, index rows."""

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()

    def reset(self) -> None:
        self.seen.clear()


@pytest.fixture
def costs(monkeypatch: pytest.MonkeyPatch) -> Iterator[Costs]:
    counted = Costs()
    real_scandir, real_listdir = os.scandir, os.listdir
    real_page, real_read_meta = Index.page, FileStore._read_meta

    def scandir(path: Any = ".") -> Any:
        entries = list(real_scandir(path))
        counted.seen["directory entries"] += len(entries)
        return iter(entries)

    def listdir(path: Any = ".") -> list[str]:
        names = real_listdir(path)
        counted.seen["directory entries"] += len(names)
        return names

    def page(self: Index, *args: Any) -> list[str]:
        rows = real_page(self, *args)
        counted.seen["index rows"] += len(rows)
        return rows

    def read_meta(self: FileStore, name: str) -> dict[str, Any]:
        counted.seen[".meta files"] += 1
        return real_read_meta(self, name)

    monkeypatch.setattr(os, "scandir", scandir)
    monkeypatch.setattr(os, "listdir", listdir)
    monkeypatch.setattr(Index, "page", page)
    monkeypatch.setattr(FileStore, "_read_meta", read_meta)
    yield counted


async def fill(store: FileStore, prefix: str, start: int, stop: int) -> None:
    await store.write_metadata_many([MetadataWrite(f"{prefix}{i:05d}", {"n": str(i)}, create=True)
                                     for i in range(start, stop)])


async def test_a_page_and_a_count_cost_the_same_with_three_times_the_logs(tmp_path: Path, costs: Costs) -> None:
    store = FileStore(tmp_path)
    await fill(store, "shards/", 0, 100)  # another kind, listed apart
    seen: list[dict[str, int]] = []
    for stop in (300, 900):
        await fill(store, "names/a/", stop // 3 if stop > 300 else 0, stop)
        costs.reset()
        page = await store.list_page("names/a/", after="names/a/00150", limit=10)
        assert [i.name for i in page.infos] == [f"names/a/{i:05d}" for i in range(151, 161)]
        assert page.next == "names/a/00160"
        assert await store.count("names/a/") == stop
        assert await store.count("names/a/001") == 100  # a prefix that is no directory: a range of the index
        seen.append(dict(costs.seen))
    # Ten .meta files and the rows to find them (one more: the next page exists); no directory read.
    assert seen == [{".meta files": 10, "index rows": 11}] * 2
    await store.close()


async def test_no_directory_holds_more_than_its_share_of_one_kind(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    await fill(store, "names/a/", 0, 3000)
    await fill(store, "shards/", 0, 50)
    await store.create("plain", {})
    assert kinds(tmp_path) == ["%", "names", "shards"]  # a directory per kind ('%': names without '/')
    widest = max(len(os.listdir(d)) for d, _, _ in os.walk(tmp_path) if d != str(tmp_path))
    assert widest <= 256  # the kind directories: 256 buckets; no bucket near 3,000 logs' files
    buckets = [d for d in (tmp_path / "names").iterdir()]
    assert max(len(os.listdir(b)) for b in buckets) < 3 * 2 * 3000 / 256  # .meta and .lock per log
    assert all(p.parent == log_dir(tmp_path, f"names/a/{p.name[len('names%2Fa%2F'):-5]}")
               for p in (tmp_path / "names").rglob("*.meta"))
    await store.close()


def kinds(root: Path) -> list[str]:
    """What ``root`` holds besides the store's dot-files."""
    return sorted(p.name for p in root.iterdir() if not p.name.startswith("."))


def expected_flat(root: Path) -> None:
    """Nothing flat is left in ``root``: only the kinds' directories and the store's dot-files."""
    assert kinds(root) == ["flows", "members", "names", "shards"]


async def reads_as_written(store: FileStore) -> None:
    for name, (metadata, body) in FLAT_LOGS.items():
        fetched = await store.fetch(name)
        assert (fetched.metadata, fetched.data) == (metadata, body), name
    assert [i.name for i in await store.list()] == sorted(FLAT_LOGS)
    assert await store.count() == len(FLAT_LOGS) and await store.count("shards/") == 1
    page = await store.list_page("", limit=2)
    assert [i.name for i in page.infos] == sorted(FLAT_LOGS)[:2]


async def test_a_flat_store_written_at_9844743_opens_and_keeps_working(tmp_path: Path) -> None:
    root = tmp_path / "store"
    shutil.copytree(FLAT, root)
    store = FileStore(root)
    await reads_as_written(store)
    expected_flat(root)
    etag = (await store.stat("shards/w~00000000")).etag
    await store.append_block("shards/w~00000000", b"four", etag)
    await store.delete("flows/ü x", None)
    await store.create("shards/new~00000000", {})
    assert [i.name for i in await store.list("shards/")] == ["shards/new~00000000", "shards/w~00000000"]
    assert (await store.fetch("shards/w~00000000")).data == b"onetwothreefour"
    assert await store.count() == len(FLAT_LOGS)
    await store.close()
    again = FileStore(root)  # and it opens again as it was left
    assert [i.name for i in await again.list()] == sorted({*FLAT_LOGS, "shards/new~00000000"} - {"flows/ü x"})
    await again.close()


class Crash(Exception):
    """The process died here."""


def crash_after(monkeypatch: pytest.MonkeyPatch, renames: int) -> None:
    real = os.rename
    left = [renames]

    def rename(src: Any, dst: Any) -> None:
        if left[0] == 0:
            raise Crash(f"killed before renaming {src}")
        left[0] -= 1
        real(src, dst)

    monkeypatch.setattr(storage.file_layout.os, "rename", rename)


async def test_a_crash_at_any_point_of_moving_in_leaves_a_store_that_opens(tmp_path: Path) -> None:
    renames = sum(1 for p in FLAT.iterdir() if p.suffix in (".meta", ".log"))  # what moving in renames
    for k in range(renames + 1):
        root = tmp_path / f"store-{k}"
        shutil.copytree(FLAT, root)
        with pytest.MonkeyPatch.context() as patch:
            crash_after(patch, k)
            if k < renames:
                with pytest.raises(Crash):
                    await FileStore(root).count()
            else:  # every file moved: it dies while reconciling the index instead
                patch.setattr(storage.file_layout, "reconcile", lambda *_: (_ for _ in ()).throw(Crash("killed")))
                with pytest.raises(Crash):
                    await FileStore(root).count()
        store = FileStore(root)
        await reads_as_written(store)
        expected_flat(root)
        await store.close()


async def test_a_row_a_crash_left_behind_is_skipped_and_pruned_by_the_next_listing(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    await fill(store, "names/a/", 0, 5)
    store._ready().add(["names/a/00002x"])  # the row of a create killed before its .meta was renamed in
    assert await store.count("names/a/") == 6  # counted until a listing passes it
    page = await store.list_page("names/a/", after="names/a/00001", limit=2)
    assert [i.name for i in page.infos] == ["names/a/00002", "names/a/00003"]
    assert await store.count("names/a/") == 5
    assert "names/a/00002x" not in await store.names("names/a/")
    await store.close()


def lose_index(root: Path) -> None:
    for file in root.glob(INDEX_FILE + "*"):  # the database, its WAL and shared memory
        file.unlink()


async def test_a_lost_index_is_made_again_from_the_files(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    await fill(store, "names/a/", 0, 20)
    await store.close()
    lose_index(tmp_path)
    store = FileStore(tmp_path)
    assert await store.count("names/a/") == 20
    assert [i.name for i in (await store.list_page("names/a/", limit=3)).infos] == [f"names/a/{i:05d}" for i in range(3)]
    await store.close()
