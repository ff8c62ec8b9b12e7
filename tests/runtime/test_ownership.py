"""The shard table: one open shard per window per silo, dormant beyond the lookahead, dropped when fenced."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from cluster.runtime.membership import Membership
from cluster.runtime.shardlog import SHARD_PREFIX, ShardState
from cluster.runtime.shardmeta import ShardMeta
from storage import StorageError, list_logs, read_log
from tests.runtime.harness import GatedStore, add, job, make_parts, until_idle


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


async def test_a_shard_created_while_the_silo_rejoined_is_not_held_under_the_dead_incarnation() -> None:
    """Issue 12, point 2: the create finishes after a rejoin and carries the old owner tag."""
    store = GatedStore()
    parts = await make_parts(store, "s")  # type: ignore[arg-type]
    release = store.gate("create", "shards/")
    write = asyncio.ensure_future(add(parts, job()))
    await store.reached("create", "shards/").wait()
    await Membership(store).declare_dead(parts.me.row)  # type: ignore[arg-type]
    await parts.heartbeat.beat()  # finds itself declared dead: drops everything, rejoins as s#2
    assert parts.me.owner == "s#2"
    release.set()
    (name,) = await write
    held = {s.base: s.meta.owner for s in parts.shards}
    assert held == {name: "s#2"}  # the job went to a shard of the live incarnation
    owners = {h.base: h.metadata["owner"] for h in await list_logs(store, SHARD_PREFIX)}  # type: ignore[arg-type]
    assert owners[name] == "s#2" and sorted(owners.values()) == ["s#1", "s#2"]  # the stray one is an orphan


async def test_a_shard_created_while_the_rejoin_is_under_way_is_not_held_under_the_dead_incarnation() -> None:
    """Issue 12, point 2, the gap the simulation found: the create lands after the silo learnt it
    was declared dead but before its new join landed, while it still carried the dead owner tag."""
    store = GatedStore()
    parts = await make_parts(store, "s")  # type: ignore[arg-type]
    release_create = store.gate("create", "shards/")
    write = asyncio.ensure_future(add(parts, job()))
    await store.reached("create", "shards/").wait()
    await Membership(store).declare_dead(parts.me.row)  # type: ignore[arg-type]
    release_update = store.gate("stat", "members/")  # the heartbeat's look at its row, after the fenced update
    beat = asyncio.ensure_future(parts.heartbeat.beat())
    await store.reached("stat", "members/").wait()
    release_join = store.gate("stat", "members/")  # the join's read of the row: the rejoin is under way
    release_update.set()
    await store.reached("stat", "members/").wait()
    release_create.set()
    await until_idle()  # let the create land and the write go on as far as it can
    assert [s.meta.owner for s in parts.shards if s.meta.owner == "s#1"] == []  # nothing held under the dead tag
    release_join.set()
    await beat
    (name,) = await write
    assert parts.me.owner == "s#2"
    assert {s.base: s.meta.owner for s in parts.shards} == {name: "s#2"}
    owners = {h.base: h.metadata["owner"] for h in await list_logs(store, SHARD_PREFIX)}  # type: ignore[arg-type]
    assert owners[name] == "s#2" and sorted(owners.values()) == ["s#1", "s#2"]  # the stray one is an orphan


async def test_a_schedule_whose_write_fails_leaves_no_phantom_for_the_next_compaction() -> None:
    """Issue 12, point 5: the caller was told it failed, so it must never fire."""
    store = GatedStore()
    parts = await make_parts(store)  # type: ignore[arg-type]
    kept, failed = job(), job()
    (name,) = await add(parts, kept)
    store.fail_next("append_block", 3)  # the writer tries three times
    with pytest.raises(StorageError):
        await add(parts, failed)
    shard = parts.shards.get(name)
    assert shard is not None and shard.state is not None
    assert set(shard.state.live) == {kept.id} and failed.id not in parts.queue
    await shard.writer.rotate()  # compaction writes the live state as a snapshot
    replayed = ShardState().replay((await read_log(store, name)).records())  # type: ignore[arg-type]
    assert set(replayed.live) == {kept.id}
