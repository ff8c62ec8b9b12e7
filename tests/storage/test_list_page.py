"""Paged listings (``Store.list_page``), identical on memory, file and Azure: order, cursor, edges."""

from __future__ import annotations

from typing import Any

import pytest

import storage
from storage import LogPage
from storage import azure as azure_store

NAMES = ["a/0", "b/1", "b/2", "b/3", "b/4", "b/5", "b/6", "b/7", "b~x", "c"]


async def fill(store: storage.Store, names: list[str] = NAMES) -> None:
    for name in names:
        await store.create(name, {"n": name.replace("/", "_").replace("~", "_")})


async def walk(store: storage.Store, prefix: str, limit: int) -> list[LogPage]:
    pages = [await store.list_page(prefix, limit=limit)]
    while pages[-1].next is not None:
        assert len(pages) < 50, "the cursor does not move"
        pages.append(await store.list_page(prefix, after=pages[-1].next, limit=limit))
    return pages


async def test_pages_walk_a_prefix_in_lexical_order_and_end_with_no_cursor(store: storage.Store) -> None:
    await fill(store)
    for limit in (1, 2, 3, 7, 100):
        pages = await walk(store, "b/", limit)
        names = [info.name for page in pages for info in page.infos]
        assert names == [f"b/{i}" for i in range(1, 8)], limit
        assert all(len(page.infos) == limit for page in pages[:-1])
        assert [page.next for page in pages[:-1]] == [page.infos[-1].name for page in pages[:-1]]
    # A page that ends exactly at the prefix's last name says so: no empty page follows.
    exact = await store.list_page("b/", after="b/4", limit=3)
    assert ([i.name for i in exact.infos], exact.next) == (["b/5", "b/6", "b/7"], None)
    everything = await walk(store, "", 4)
    assert [i for page in everything for i in page.infos] == await store.list()


async def test_after_is_strict_and_may_name_no_log(store: storage.Store) -> None:
    await fill(store)

    async def names(prefix: str, after: str | None, limit: int = 3) -> tuple[list[str], str | None]:
        page = await store.list_page(prefix, after=after, limit=limit)
        return [i.name for i in page.infos], page.next

    assert await names("b/", "b/2") == (["b/3", "b/4", "b/5"], "b/5")
    assert await names("b/", "b/25") == (["b/3", "b/4", "b/5"], "b/5")  # between two names
    assert await names("b/", "a") == (["b/1", "b/2", "b/3"], "b/3")  # before the prefix: no bound
    assert await names("b/", "b/") == (["b/1", "b/2", "b/3"], "b/3")
    assert await names("b/", "b/7") == ([], None)
    assert await names("b/", "b~") == ([], None)  # after every name of the prefix
    assert await names("b/", "zzz") == ([], None)
    assert await names("nothing/", None) == ([], None)
    assert await names("", "b/7", 2) == (["b~x", "c"], None)


async def test_a_page_carries_metadata_and_etags_that_cas(store: storage.Store) -> None:
    await fill(store)
    page = await store.list_page("b/", after="b/1", limit=1)
    (info,) = page.infos
    assert (info.name, info.metadata) == ("b/2", {"n": "b_2"})
    assert info.etag == (await store.stat("b/2")).etag
    await store.set_metadata("b/2", {"owner": "me"}, info.etag)


async def test_deleted_logs_leave_no_hole_and_a_deleted_cursor_still_moves_on(store: storage.Store) -> None:
    await fill(store)
    first = await store.list_page("b/", limit=3)
    await store.delete("b/3", None)  # the cursor's own log
    await store.delete("b/5", None)  # one the next page would have held
    second = await store.list_page("b/", after=first.next, limit=3)
    assert ([i.name for i in second.infos], second.next) == (["b/4", "b/6", "b/7"], None)
    for name in ("b/4", "b/6", "b/7"):
        await store.delete(name, None)
    assert await store.list_page("b/", after=first.next, limit=3) == LogPage((), None)


async def test_a_new_log_after_the_cursor_shows_on_the_next_page(store: storage.Store) -> None:
    await fill(store)
    first = await store.list_page("b/", limit=3)
    await store.create("b/35", {})
    await store.create("b/0", {})  # before the cursor: this walk has passed it
    second = await store.list_page("b/", after=first.next, limit=3)
    assert [i.name for i in second.infos] == ["b/35", "b/4", "b/5"]


@pytest.mark.parametrize("limit", [0, -1, True, "3", 2.0])
async def test_a_bad_limit_is_refused_naming_it(store: storage.Store, limit: Any) -> None:
    with pytest.raises(ValueError, match="limit"):
        await store.list_page("", limit=limit)


async def test_the_default_list_page_of_a_store_without_its_own_agrees(store: storage.Store) -> None:
    class Plain(storage.MemoryStore):
        list_page = storage.Store.list_page

    plain = Plain()
    await fill(plain)
    await fill(store)
    for prefix, after, limit in [("b/", None, 3), ("b/", "b/3", 2), ("", "b/7", 5), ("b/", "zzz", 1), ("b/", "a", 9)]:
        mine = await store.list_page(prefix, after=after, limit=limit)
        theirs = await plain.list_page(prefix, after=after, limit=limit)
        assert [(i.name, i.metadata) for i in mine.infos] == [(i.name, i.metadata) for i in theirs.infos]
        assert mine.next == theirs.next


async def test_the_file_store_reads_only_the_pages_metas(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    store = storage.FileStore(tmp_path / "store")
    await fill(store, [f"job/{i:03d}" for i in range(60)])
    read: list[str] = []
    original = storage.FileStore._read_meta

    def counted(self: storage.FileStore, name: str) -> dict[str, Any]:
        read.append(name)
        return original(self, name)

    monkeypatch.setattr(storage.FileStore, "_read_meta", counted)
    page = await store.list_page("job/", after="job/010", limit=5)
    assert [i.name for i in page.infos] == [f"job/{i:03d}" for i in range(11, 16)]
    assert read == [i.name for i in page.infos]


@pytest.mark.azurite
async def test_azure_pages_cost_one_call_each_and_a_foreign_cursor_gives_the_same_page(
        azure_store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    names = [f"job/{i:03d}" for i in range(23)]
    async with storage.open_store(azure_store_url) as store:
        await fill(store, names)
        assert isinstance(store, azure_store.AzureStore)
        calls: list[dict[str, Any]] = []
        original = store._container.list_blobs

        def counted(*args: Any, **kwargs: Any) -> Any:
            calls.append(kwargs)
            return original(*args, **kwargs)

        monkeypatch.setattr(store._container, "list_blobs", counted)
        pages = await walk(store, "job/", 5)
        assert [i.name for p in pages for i in p.infos] == names
        assert len(calls) == len(pages) == 5  # one List Blobs call a page, each asking for the page alone
        assert all(c["results_per_page"] == 5 and c.get("start_from") is None for c in calls)

    # A cursor another process handed out: this store never saw it, and scans (batches of 4
    # here, so pages end inside a batch and resume from a marker that is not exact).
    monkeypatch.setattr(azure_store, "_SCAN_BATCH", 4)
    async with storage.open_store(azure_store_url) as fresh:
        for after in [None, "job/004", "job/0095", "job/017", "job/021", "job/022"]:
            page = await fresh.list_page("job/", after=after, limit=5)
            expected = [n for n in names if after is None or n > after]
            assert [i.name for i in page.infos] == expected[:5], after
            assert page.next == (expected[4] if len(expected) > 5 else None), after
        cold = await walk(fresh, "job/", 3)
        assert [i.name for p in cold for i in p.infos] == names

    async with storage.open_store(azure_store_url) as fresh:
        assert isinstance(fresh, azure_store.AzureStore)
        calls.clear()
        monkeypatch.setattr(azure_store, "_SCAN_BATCH", 5000)  # the whole prefix is one batch
        listing = fresh._container.list_blobs

        def counted_fresh(*args: Any, **kwargs: Any) -> Any:
            calls.append(kwargs)
            return listing(*args, **kwargs)

        monkeypatch.setattr(fresh._container, "list_blobs", counted_fresh)
        page = await fresh.list_page("job/", after="job/005", limit=3)  # cold: a scan, then the marker
        warm = await fresh.list_page("job/", after=page.next, limit=3)
        assert [i.name for i in warm.infos] == ["job/009", "job/010", "job/011"]
        assert len(calls) == 3  # cold: 2 calls (page + exact marker); paging on from it: 1


async def test_names_are_the_listing_without_metadata(store: storage.Store) -> None:
    await fill(store)
    await store.delete("b/4", None)
    for prefix in ("", "b/", "b", "nothing"):
        assert await store.names(prefix) == tuple(i.name for i in await store.list(prefix)), prefix


async def test_count_is_how_many_names_a_prefix_has_and_follows_creates_and_deletes(store: storage.Store) -> None:
    await fill(store)
    await store.create("b/sub/x", {})
    for prefix in ("", "a/", "b/", "b/2", "b", "b/sub/", "c", "nothing/"):
        assert await store.count(prefix) == len(await store.names(prefix)), prefix
    assert await store.count("b/") == 8
    assert await store.count("b/", nested=False) == 7  # not b/sub/x: it is in a directory below
    assert await store.count("b/s", nested=False) == 0
    assert await store.count("", nested=False) == 2  # b~x and c
    await store.delete("b/3", None)
    await store.delete("b/sub/x", None)
    assert (await store.count("b/"), await store.count("b/", nested=False), await store.count()) == (6, 6, 9)
