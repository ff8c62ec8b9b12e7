"""A bucket owner killed between a put round's two appends (issue 25 point 5), without Ray.

The owner appends a round's ``PUT`` records to the bucket log while it adds the round's jobs to
its shards, and answers once both are durable. What a caller relies on, judged by what it was
told: a put acknowledged fires, from one copy, under the next owner too; a put never answered
either fires or is not there at all, never a name pointing at a job that does not fire. Each on
the memory store and the file store.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from cluster.model.errors import ClusterUnavailable
from cluster.model.jobs import ScheduledJob
from cluster.named.bucket import LANDED, PUT
from cluster.named.buckets import Buckets
from cluster.named.registry import entry_key
from cluster.runtime.shardlog import SHARD_PREFIX, landed_ids
from storage import LogWriter, StorageError, Store, list_logs, read_log
from tests.named.bucket_cluster import TARGET, Cluster

STORES = ["memory", "file"]


def owned(c: Cluster, silo: str) -> Buckets:
    buckets = c.hooks[silo].buckets
    assert buckets is not None
    return buckets


def writer_of(c: Cluster, silo: str, name: str) -> LogWriter:
    buckets = owned(c, silo)
    writer = buckets.held[buckets.bucket_for(entry_key("default", "default", name))].writer
    assert writer is not None
    return writer


def stall_appends(writer: LogWriter, kind: str) -> asyncio.Event:
    """Appends of records of ``kind`` to ``writer`` never end (the owner dies before they do);
    the event is set once one has begun."""
    real = writer.append_many
    stalled = asyncio.Event()

    async def append_many(records: Sequence[Any]) -> None:
        if any(r[0] == kind for r in records):
            stalled.set()
            await asyncio.Event().wait()
        await real(records)

    writer.append_many = append_many  # type: ignore[method-assign]
    return stalled


def after_landing(writer: LogWriter, kind: str) -> asyncio.Event:
    """Set once an append carrying records of ``kind`` is durable."""
    real = writer.append_many
    landed = asyncio.Event()

    async def append_many(records: Sequence[Any]) -> None:
        await real(records)
        if any(r[0] == kind for r in records):
            landed.set()

    writer.append_many = append_many  # type: ignore[method-assign]
    return landed


def schedule_then(buckets: Buckets, then: Callable[[], Awaitable[None]]) -> asyncio.Event:
    """The owner's job adds run ``then`` once durable (``then`` may never end: the owner dies)."""
    real = buckets._schedule
    added = asyncio.Event()

    async def schedule(jobs: Sequence[ScheduledJob], suspects: Sequence[str]) -> list[str]:
        if not jobs:
            return await real(jobs, suspects)
        shards = await real(jobs, suspects)
        added.set()
        await then()
        return shards

    buckets._schedule = schedule
    return added


def never_add(buckets: Buckets) -> asyncio.Event:
    """The owner's job adds never start writing (it dies first)."""
    asked = asyncio.Event()

    async def schedule(jobs: Sequence[ScheduledJob], suspects: Sequence[str]) -> list[str]:
        asked.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    buckets._schedule = schedule
    return asked


async def copies(store: Store, job_id: str) -> list[str]:
    """The shards whose logs hold job ``job_id``."""
    return [head.base for head in await list_logs(store, SHARD_PREFIX)
            if landed_ids((await read_log(store, head.base)).records(), {job_id})]


async def take_over(c: Cluster) -> None:
    """a dies; b takes its shards and buckets once a's lease has run out."""
    await c.add("b")
    await c.kill("a")
    await c.maintain()
    for bucket in owned(c, "b").held.values():  # answering once its unconfirmed puts are settled
        if bucket.settling is not None:
            await bucket.settling


@pytest.mark.parametrize("kind", STORES)
async def test_a_put_whose_record_landed_but_not_its_job_fires_under_the_next_owner(kind: str, tmp_path: Path) -> None:
    c = await Cluster.start(kind, tmp_path)
    landed = after_landing(writer_of(c, "a", "n"), PUT)
    never_add(owned(c, "a"))
    putting = asyncio.ensure_future(c.jobs().put("n", target=TARGET, schedule="@every 1s"))
    await asyncio.wait_for(landed.wait(), 10)  # the PUT is durable, the job was never written
    await asyncio.sleep(0.01)
    assert not putting.done()  # no answer before the job is durable
    await take_over(c)
    got = await c.jobs().get("n")
    # Never answered, so it may have landed; it did (its record is in the log), so it fires.
    assert got is not None and got.job.shard
    assert await copies(c.store, got.job.id) == [got.job.shard]
    await c.fire(2)
    assert got.job.id in c.starts.log
    putting.cancel()


@pytest.mark.parametrize("kind", STORES)
async def test_a_job_whose_put_record_never_landed_never_starts(kind: str, tmp_path: Path) -> None:
    c = await Cluster.start(kind, tmp_path)
    stalled = stall_appends(writer_of(c, "a", "n"), PUT)
    added = schedule_then(owned(c, "a"), lambda: asyncio.sleep(0))
    putting = asyncio.ensure_future(c.jobs().put("n", target=TARGET, schedule="@every 1s"))
    await asyncio.wait_for(asyncio.gather(stalled.wait(), added.wait()), 10)  # the job is durable, its PUT never ends
    await asyncio.sleep(0.01)
    assert not putting.done()  # no answer before the PUT is durable
    await take_over(c)
    assert await c.jobs().get("n") is None
    await c.fire(3)
    assert c.starts.log == []  # the job landed, and no name points at it: refused
    putting.cancel()


@pytest.mark.parametrize("kind", STORES)
async def test_an_acknowledged_put_whose_landing_was_not_recorded_fires_from_its_one_copy(kind: str,
                                                                                        tmp_path: Path) -> None:
    c = await Cluster.start(kind, tmp_path)
    stall_appends(writer_of(c, "a", "n"), LANDED)
    put = await c.jobs().put("n", target=TARGET, schedule="@every 1s")  # both durable: answered
    await take_over(c)
    got = await c.jobs().get("n")
    assert got is not None and got.job.id == put.job.id and got.job.shard == put.job.shard  # found, not added again
    assert await copies(c.store, put.job.id) == [put.job.shard]
    await c.fire(3)
    assert c.starts.log.count(put.job.id) >= 2


@pytest.mark.parametrize("kind", STORES)
async def test_a_put_whose_job_failed_to_land_is_taken_back_for_the_next_owner_too(kind: str, tmp_path: Path) -> None:
    c = await Cluster.start(kind, tmp_path)
    landed = after_landing(writer_of(c, "a", "n"), PUT)

    async def fail_once_put(jobs: Sequence[ScheduledJob], suspects: Sequence[str]) -> list[str]:
        await landed.wait()  # the PUT is durable by now
        raise StorageError("injected: the shard append failed")

    owned(c, "a")._schedule = fail_once_put
    with pytest.raises(ClusterUnavailable):  # told: not put
        await c.jobs().put("n", target=TARGET, schedule="@every 1s")
    assert await c.jobs().get("n") is None
    await take_over(c)
    assert await c.jobs().get("n") is None  # the log took it back too
    await c.fire(2)
    assert c.starts.log == []
