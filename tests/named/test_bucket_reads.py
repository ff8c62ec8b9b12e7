"""Reads and status of named jobs on registry buckets (issue 25 point 5), without Ray.

``named_registry="buckets"`` (the default). What a caller relies on: a read after a put
returned sees it (from any client), never a put whose append is still under way (it may yet
be taken back); pages cover a scope in name order across every bucket, and ``count`` agrees;
the status of attempts reaches ``get`` within a second, its records group-committed to the
bucket's log (so the next owner of the bucket has them). Each on the memory and the file store.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from cluster.named.bucket import STATUS, bucket_base
from storage import read_log
from tests.named.bucket_cluster import TARGET, Cluster

STORES = ["memory", "file"]


@pytest.mark.parametrize("kind", STORES)
async def test_a_read_after_a_put_returned_sees_it_and_pages_cover_every_bucket_in_name_order(kind: str,
                                                                                           tmp_path: Path) -> None:
    c = await Cluster.start(kind, tmp_path, silos=("a", "b"))
    await c.maintain()  # b takes its share as a's fair share shrinks... a keeps what it took: both answer
    writer, reader = c.jobs(), c.jobs()  # two clients: what one put, the other reads
    names = [f"job-{i:02d}" for i in range(25)]
    put = await writer.put_many([{"name": n, "target": TARGET, "due_time": "1h"} for n in names])
    for p in put:
        got = await reader.get(p.name)
        assert got is not None and (got.generation, got.job.id) == (1, p.job.id)
    for n in names[:5]:
        new = await writer.put(n, target=TARGET, due_time="2h", overwrite=True)
        got = await reader.get(n)  # at once: no delay between the put's return and the read
        assert got is not None and (got.generation, got.job.id) == (2, new.job.id)
    await writer.put("other", target=TARGET, due_time="1h", app_id="elsewhere")  # another scope: never listed here
    seen: list[str] = []
    after = None
    while True:
        page = await reader.list_page(after=after, limit=7)
        assert len(page.items) == 7 or page.next is None
        seen += [j.name for j in page.items]
        if page.next is None:
            break
        after = page.next
    assert seen == names
    assert [j.name for j in await reader.list("job-1")] == names[10:20]
    assert await reader.count() == 25 and await reader.count("job-1") == 10
    assert await reader.count(app_id="elsewhere") == 1
    assert await writer.delete("job-03")
    assert await reader.get("job-03") is None and await reader.count() == 24


@pytest.mark.parametrize("kind", STORES)
async def test_a_put_whose_append_is_under_way_is_not_read_yet(kind: str, tmp_path: Path) -> None:
    c = await Cluster.start(kind, tmp_path)
    jobs = c.jobs()
    first = await jobs.put("nightly", target=TARGET, due_time="1h")
    gate = hold_registry_appends(c)
    put = asyncio.ensure_future(jobs.put("nightly", target=TARGET, due_time="2h", overwrite=True))
    await asyncio.wait_for(gate.waiting.wait(), 10)  # its PUT record is on its way to the bucket's log
    got = await jobs.get("nightly")
    assert got is not None and got.job.id == first.job.id  # the durable entry, not the one in flight
    assert await jobs.count() == 1
    gate.release.set()
    second = await put
    got = await jobs.get("nightly")
    assert got is not None and got.job.id == second.job.id


@pytest.mark.parametrize("kind", STORES)
async def test_status_reaches_get_within_a_second_and_is_group_committed_to_the_bucket_log(kind: str,
                                                                                         tmp_path: Path) -> None:
    c = await Cluster.start(kind, tmp_path)
    jobs = c.jobs()
    put = await jobs.put_many([{"name": f"n{i}", "target": TARGET, "schedule": "@every 1s"} for i in range(20)])
    await asyncio.sleep(0.05)  # cleared ahead (the prefetcher's first poll)
    before = await status_frames(c)
    await c.fire(1)
    fired = time.monotonic()
    for p in put:
        while True:
            got = await jobs.get(p.name)
            assert got is not None
            if got.status.successful == 1:
                break
            assert time.monotonic() - fired < 1.0, f"{p.name}: status not in get a second after its attempt ended"
            await asyncio.sleep(0.01)
        assert got.status.last_attempt is not None and got.status.history[0].outcome == "succeeded"
    # Twenty starts and twenty ends, sent together: at most a frame for the starts and one for
    # the ends in each bucket's log, not one per name (nor per change).
    frames = {b: n - before.get(b, 0) for b, n in (await status_frames(c)).items()}
    assert all(n <= 2 for n in frames.values()) and sum(frames.values()) >= 1, frames

    await c.add("b")
    await c.kill("a")  # the next owner has the status from the log
    await c.maintain()
    got = await c.jobs().get("n0")
    assert got is not None and got.status.successful == 1 and got.status.history[0].outcome == "succeeded"


async def status_frames(c: Cluster) -> dict[int, int]:
    """How many frames of each bucket's log hold a ``STATUS`` record."""
    out = {}
    for number in range(4):
        state = await read_log(c.store, bucket_base(number))
        out[number] = sum(1 for frame in state.decoded.frames if any(r[0] == STATUS for r in frame.records))
    return out


class Gate:
    def __init__(self) -> None:
        self.waiting, self.release = asyncio.Event(), asyncio.Event()


def hold_registry_appends(c: Cluster) -> Gate:
    """Hold every append to a registry bucket's log until ``release`` is set."""
    gate = Gate()
    real: Callable[..., Awaitable[Any]] = c.store.append_block

    async def held(name: str, payload: bytes, if_match: str) -> Any:
        if name.startswith("registry/"):
            gate.waiting.set()
            await gate.release.wait()
        return await real(name, payload, if_match)

    c.store.append_block = held  # type: ignore[method-assign]
    return gate


