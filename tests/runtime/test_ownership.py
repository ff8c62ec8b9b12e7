"""The shard table: one open shard per window per silo, dormant beyond the lookahead, dropped when fenced."""

from __future__ import annotations

from datetime import timedelta

from cluster.runtime.shardlog import SHARD_PREFIX, ShardMeta
from storage import list_logs
from tests.runtime.harness import add, job, make_parts


async def test_jobs_of_one_window_share_this_silos_open_shard_tagged_with_its_incarnation() -> None:
    parts = await make_parts()
    a, b = job(due=timedelta(seconds=1)), job(due=timedelta(seconds=2))
    later = job(due=timedelta(seconds=12))  # the next 10 s window
    names = await add(parts, a, b, later)
    assert names[0] == names[1] != names[2]
    heads = {h.base: ShardMeta.from_metadata(h.metadata) for h in await list_logs(parts.store, SHARD_PREFIX)}
    assert set(heads) == set(names)
    assert {m.owner for m in heads.values()} == {parts.me.owner} == {"0#1"}
    assert [key for _, key, _ in parts.queue] and len(parts.queue) == 2  # the later window is dormant


async def test_a_shard_beyond_the_lookahead_is_dormant_and_holds_nothing_per_job() -> None:
    parts = await make_parts()
    (name,) = await add(parts, job(due=timedelta(minutes=5)))
    shard = parts.shards.get(name)
    assert shard is not None and not shard.loaded
    assert len(parts.queue) == 0


async def test_a_dropped_shard_fires_nothing_and_new_jobs_go_to_a_fresh_shard() -> None:
    parts = await make_parts()
    first = job(due=timedelta(seconds=1))
    (name,) = await add(parts, first)
    shard = parts.shards.get(name)
    assert shard is not None
    parts.shards.drop(shard, "a test took it")
    assert shard.lost and parts.shards.get(name) is None
    assert first.id not in parts.queue
    (fresh,) = await add(parts, job(due=timedelta(seconds=2)))
    assert fresh != name


async def test_release_clears_the_owner_so_peers_adopt_at_once() -> None:
    parts = await make_parts()
    await add(parts, job(), job(due=timedelta(seconds=15)))
    assert await parts.shards.release_all() == 2
    owners = {h.metadata["owner"] for h in await list_logs(parts.store, SHARD_PREFIX)}
    assert owners == {"-"}
