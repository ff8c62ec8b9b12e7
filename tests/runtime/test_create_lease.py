"""A silo creates a fresh shard only under a valid lease (simulator seed 1489 with flows).

Past its lease a silo may be declared dead and a peer may search its shards and take its work
over; a shard created after that search escapes it, and what the silo adds there runs beside
the taker's copy. Appends to a shard it already holds are safe (a peer's claim fences them);
a create is not fenced by anything, so the lease itself must cover it.
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta

import pytest

from cluster.model.errors import LeaseLapsed, SiloStopping
from cluster.runtime.lease import LEASE_FRACTION
from cluster.runtime.membership import SILENT, Membership
from cluster.runtime.roles import Roles
from cluster.runtime.shardlog import SHARD_PREFIX, ShardState
from cluster.runtime.shardmeta import ShardMeta
from storage import Store, list_logs, read_log
from tests.runtime.harness import OPTIONS, GatedStore, ManualClock, add, item, job, make_parts, until_idle

LEASE_S = LEASE_FRACTION * OPTIONS.suspicion_timeout.total_seconds()


async def live_jobs(store: Store, name: str) -> set[str]:
    """The jobs live in shard log ``name``."""
    return set(ShardState().replay((await read_log(store, name)).records()).live)


async def shard_owners(parts: Roles) -> dict[str, str]:
    """Every shard log in the store, by name, with the owner its metadata names."""
    return {h.base: ShardMeta.from_metadata(h.metadata).owner for h in await list_logs(parts.store, SHARD_PREFIX)}


async def test_a_silo_whose_lease_lapsed_creates_no_shard_until_a_heartbeat_renews_it() -> None:
    parts = await make_parts(clock=ManualClock())
    parts.clock.advance(LEASE_S + 0.5)  # type: ignore[attr-defined]  # frozen past its lease, no heartbeat
    j = job(due=timedelta(seconds=8))
    adding = asyncio.ensure_future(add(parts, j))
    await until_idle()
    assert not adding.done()
    assert await shard_owners(parts) == {}  # nothing a peer's search could miss
    await parts.heartbeat.beat()  # not declared dead meanwhile: the same incarnation goes on
    (name,) = await asyncio.wait_for(adding, 5)
    assert await shard_owners(parts) == {name: parts.me.owner} and parts.shards.get(name) is not None
    assert await live_jobs(parts.store, name) == {j.id}


async def test_a_create_that_lands_past_the_lease_is_held_only_after_a_renewal() -> None:
    store = GatedStore()
    parts = await make_parts(store, clock=ManualClock())  # type: ignore[arg-type]
    release = store.gate("create", SHARD_PREFIX)
    adding = asyncio.ensure_future(add(parts, job(due=timedelta(seconds=8))))
    await store.reached("create", SHARD_PREFIX).wait()  # begun under a valid lease ...
    parts.clock.advance(LEASE_S + 0.5)  # type: ignore[attr-defined]
    release.set()  # ... landed past it: maybe after a peer's search
    await until_idle()
    (name,) = await shard_owners(parts)
    assert not adding.done() and parts.shards.get(name) is None  # nothing added there yet
    assert await live_jobs(store, name) == set()  # type: ignore[arg-type]
    await parts.heartbeat.beat()  # no peer had declared us dead: the create came before any search
    assert await asyncio.wait_for(adding, 5) == [name]
    assert parts.shards.get(name) is not None


async def test_a_create_past_the_lease_of_a_silo_declared_dead_adds_nothing_there() -> None:
    store = GatedStore()
    parts = await make_parts(store, clock=ManualClock())  # type: ignore[arg-type]
    dead = parts.me.owner
    release = store.gate("create", SHARD_PREFIX)
    j = job(due=timedelta(seconds=8))
    scheduling = asyncio.ensure_future(parts.scheduling.schedule([item(j)]))
    await store.reached("create", SHARD_PREFIX).wait()
    parts.clock.advance(LEASE_S + 0.5)  # type: ignore[attr-defined]
    release.set()
    await until_idle()
    assert await Membership(store).declare_dead(parts.me.row, SILENT)  # type: ignore[arg-type]
    await parts.heartbeat.beat()  # rejoins as a new incarnation
    with pytest.raises(SiloStopping):  # nothing written: the client asks another silo
        await asyncio.wait_for(scheduling, 5)
    owners = await shard_owners(parts)
    assert dead in owners.values()  # the dead incarnation's shard, left for the taker: empty
    for name in owners:
        assert await live_jobs(store, name) == set()  # type: ignore[arg-type]


async def test_a_schedule_call_waits_for_a_lapsed_lease_a_suspicion_timeout_then_is_refused() -> None:
    options = dataclasses.replace(OPTIONS, heartbeat_interval=timedelta(milliseconds=100),
                                  suspicion_timeout=timedelta(milliseconds=300))
    parts = await make_parts(clock=ManualClock(), options=options)
    parts.clock.advance(1)  # type: ignore[attr-defined]  # past its lease, and no heartbeat comes
    loop = asyncio.get_running_loop()
    began = loop.time()
    with pytest.raises(LeaseLapsed):  # a SiloStopping: the client tries another silo
        await asyncio.wait_for(parts.scheduling.schedule([item(job(due=timedelta(seconds=8)))]), 5)
    assert loop.time() - began >= 0.3
    assert await shard_owners(parts) == {}
