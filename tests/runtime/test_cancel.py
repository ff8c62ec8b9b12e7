"""Cancel without Ray: a queued job never runs; a dormant shard is folded to look; others answer who owns."""

from __future__ import annotations

from datetime import timedelta

from cluster.runtime.shardlog import CANCELLED, REMOVE
from storage import MemoryStore, read_log
from tests.runtime.harness import Recorder, add, fire_due, job, make_parts


async def test_a_cancelled_job_is_removed_durably_and_never_fires() -> None:
    parts = await make_parts()
    parts.transport.handlers["h"] = recorder = Recorder()
    j = job()
    (name,) = await add(parts, j)
    assert await parts.cancelling.cancel(name, j.id) == ("cancelled", None)
    assert [REMOVE, j.id, 1, CANCELLED] in [op[:4] for op in (await read_log(parts.store, name)).records()]
    parts.lease.renew(parts.clock.monotonic())
    parts.clock.advance(2)
    await fire_due(parts)
    assert recorder.ran == []
    assert await parts.cancelling.cancel(name, j.id) == ("absent", None)


async def test_a_job_in_a_dormant_shard_is_cancelled_without_loading_it() -> None:
    parts = await make_parts()
    j = job(due=timedelta(hours=1))
    (name,) = await add(parts, j)
    assert await parts.cancelling.cancel(name, j.id) == ("cancelled", None)
    shard = parts.shards.get(name)
    assert shard is not None and not shard.loaded


async def test_a_shard_owned_by_a_live_peer_is_answered_with_its_owner() -> None:
    store = MemoryStore()
    owner = await make_parts(store, "o")
    j = job()
    (name,) = await add(owner, j)
    other = await make_parts(store, "x")
    assert await other.cancelling.cancel(name, j.id) == ("not_owner", "o#1")
