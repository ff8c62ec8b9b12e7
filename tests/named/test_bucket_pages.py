"""Paging through names kept in registry buckets (``named_registry="buckets"``, the default), without Ray.

What a caller relies on: following ``next`` from the first page shows every name of the scope
once, in name order, whatever the page size, whichever silos own the buckets (one owner answers
for several buckets in one call and sends at most a page's rows of them all), and a page is full
until the last.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster.named.api import NamedJobs
from tests.named.bucket_cluster import TARGET, Cluster


async def pages(jobs: NamedJobs, limit: int, prefix: str = "") -> list[list[str]]:
    out: list[list[str]] = []
    after = None
    while True:
        page = await jobs.list_page(prefix, after=after, limit=limit)
        out.append([j.name for j in page.items])
        if page.next is None:
            return out
        after = page.next


@pytest.mark.parametrize("silos", [("a",), ("a", "b")])
async def test_following_next_shows_every_name_once_in_order_at_every_page_size(silos: tuple[str, ...],
                                                                               tmp_path: Path) -> None:
    c = await Cluster.start("memory", tmp_path, silos=silos)
    await c.maintain()
    jobs = c.jobs()
    names = sorted(f"n{i:02d}" for i in range(23))
    await jobs.put_many([{"name": n, "target": TARGET, "due_time": "1h"} for n in names])
    await jobs.put("elsewhere", target=TARGET, due_time="1h", app_id="other")  # another scope: never listed here
    for limit in range(1, len(names) + 2):
        shown = await pages(jobs, limit)
        assert [n for page in shown for n in page] == names, limit
        assert all(len(page) == limit for page in shown[:-1]), (limit, [len(p) for p in shown])
    assert [n for page in await pages(jobs, 2, "n1") for n in page] == names[10:20]
