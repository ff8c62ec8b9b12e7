"""``list_logs_between``: the logs of a name range, paged through that range alone, on every store."""

from __future__ import annotations

from typing import Any

import storage
from storage import LogPage, generation_name, list_logs
from storage.generations import NEXT_KEY, PENDING_KEY, list_logs_between

# Logs named by a fixed-width "window" first, as shard names are: w10 .. w59, two of them rotated.
BASES = [f"s/w{w}-x" for w in range(10, 60)]


async def fill(store: storage.Store) -> None:
    for base in BASES:
        await store.create(generation_name(base, 0), {"b": base[2:].replace("-", "_")})
    for base in ("s/w12-x", "s/w30-x"):  # rotated: generation 1 is current, 0 points at it
        await store.create(generation_name(base, 1), {PENDING_KEY: "1"})
        info = await store.stat(generation_name(base, 0))
        await store.set_metadata(generation_name(base, 0), {**info.metadata, NEXT_KEY: "1"}, info.etag)
    await store.create(generation_name("s/w31-y", 0), {PENDING_KEY: "1"})  # a create under way: not current


class Counting:
    """A store's ``list_page`` calls, counted (every other call goes through untouched)."""

    def __init__(self, store: storage.Store) -> None:
        self._store = store
        self.pages = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def list_page(self, prefix: str = "", *, after: str | None = None, limit: int) -> LogPage:
        self.pages += 1
        return await self._store.list_page(prefix, after=after, limit=limit)


async def test_a_range_lists_as_the_whole_listing_filtered_would(store: storage.Store) -> None:
    await fill(store)
    whole = await list_logs(store, "s/")
    for start, end in ((None, None), (None, "s/w30"), ("s/w12", "s/w31"), ("s/w30", None), ("s/w13", "s/w13")):
        for first_page in (1, 3, 5000):
            got = await list_logs_between(store, "s/", start=start, end=end, first_page=first_page)
            wanted = [h for h in whole if (start is None or h.base >= start) and (end is None or h.base < end)]
            assert got == wanted, (start, end, first_page)
    assert [h.generation for h in await list_logs_between(store, "s/", start="s/w12", end="s/w13")] == [1]


async def test_paging_stops_at_the_end_of_the_range(store: storage.Store) -> None:
    """The calls grow with the logs in the range, not with those after it."""
    await fill(store)
    counting = Counting(store)
    heads = await list_logs_between(counting, "s/", end="s/w15", first_page=8)  # type: ignore[arg-type]
    assert [h.base for h in heads] == BASES[:5]
    assert counting.pages == 1  # 6 logs (one rotated) fit the first page: the 47 after it are never asked for
    counting.pages = 0
    await list_logs_between(counting, "s/", end="s/w15", first_page=2)  # type: ignore[arg-type]
    assert counting.pages == 2  # then the rest a page of 5,000, cut at the end
