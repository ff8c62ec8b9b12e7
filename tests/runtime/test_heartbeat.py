"""Heartbeat without Ray: a beat renews the lease, a silent peer is declared dead and adopted,
and a silo declared dead drops its shards and rejoins as a new incarnation."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from cluster.model.wire import timedelta_to_us
from cluster.runtime.membership import DEAD, REPORTED, Membership
from cluster.runtime.shard import Shard
from cluster.runtime.shardlog import window_of
from cluster.runtime.transport import Ping
from storage import MemoryStore, StorageError, Unavailable
from tests.runtime.harness import OPTIONS, GatedStore, ManualClock, add, job, make_parts


async def test_a_beat_renews_the_lease_from_when_it_began() -> None:
    parts = await make_parts()
    parts.clock.advance(10)
    assert not parts.lease.valid
    await parts.heartbeat.beat()
    assert parts.lease.valid


async def test_a_peer_silent_for_the_suspicion_timeout_is_declared_dead_and_its_shards_adopted() -> None:
    store = MemoryStore()
    quiet = await make_parts(store, "q")
    j = job(due=timedelta(seconds=2))
    await add(quiet, j)
    watcher = await make_parts(store, "w", clock=quiet.clock)
    watcher.adoption._budget = 64
    await watcher.heartbeat.detect_failures()  # first look: starts watching q's row
    quiet.clock.advance(4)
    await watcher.heartbeat.detect_failures()
    assert (await Membership(store).members())["q"].status != DEAD  # 4 s < the 5 s timeout
    quiet.clock.advance(2)
    await watcher.heartbeat.detect_failures()
    assert (await Membership(store).members())["q"].status == DEAD
    assert watcher.queue.get(j.id) is not None


async def test_a_silent_peer_is_declared_dead_and_adopted_before_any_ping_is_answered() -> None:
    """Silence needs no ping: a lost node's silo, and any peer Ray is restarting, answers a ping
    only when it times out, and waiting for those held failover past its bound (3.9 s against
    3.5 s in a node-loss drill)."""
    store = MemoryStore()
    quiet = await make_parts(store, "q")
    j = job(due=timedelta(seconds=2))
    await add(quiet, j)
    slow = await make_parts(store, "s", clock=quiet.clock)
    watcher = await make_parts(store, "w", clock=quiet.clock)
    watcher.adoption._budget = 64
    await watcher.heartbeat.detect_failures()  # first look: starts watching q's row
    quiet.clock.advance(6)
    await slow.heartbeat.beat()  # s is alive, but its answer to a ping is slow; q's never comes
    held = watcher.transport.pinging = {"q": asyncio.Event(), "s": asyncio.Event()}
    round_ = asyncio.create_task(watcher.heartbeat.detect_failures())
    for _ in range(100):
        if watcher.queue.get(j.id) is not None:
            break
        await asyncio.sleep(0)
    assert (await Membership(store).members())["q"].status == DEAD
    assert watcher.queue.get(j.id) is not None, "q's job was adopted only after the pings"
    assert not round_.done()  # still waiting for s's answer
    held["s"].set()
    await asyncio.wait_for(round_, 1)
    assert (await Membership(store).members())["s"].status != DEAD


async def test_a_peer_that_reads_a_death_another_declared_adopts_its_share_at_once() -> None:
    """Failover waits on no silo's adoption interval: the silo that declares a death adopts at
    once, and every other silo as soon as a beat reads it (the node-replacement drill: the second
    survivor took its orphan up to an interval later, failover 4.0 s against 3.5 s)."""
    store = MemoryStore()
    quiet = [await make_parts(store, silo, clock=ManualClock()) for silo in ("q", "r")]
    jobs = []
    for parts in quiet:
        jobs.append(job(due=timedelta(seconds=2)))
        await add(parts, jobs[-1])
    declarer = await make_parts(store, "w1")
    hearer = await make_parts(store, "w2", clock=declarer.clock)
    await declarer.heartbeat.detect_failures()  # starts watching q and r
    declarer.clock.advance(6)
    await hearer.heartbeat.beat()
    await hearer.heartbeat.detect_failures()  # first look: it suspects nobody yet
    await declarer.heartbeat.detect_failures()  # declares both dead, takes its fair share: one
    assert [m.status for s, m in (await Membership(store).members()).items() if s in ("q", "r")] == [DEAD, DEAD]
    assert sum(declarer.queue.get(j.id) is not None for j in jobs) == 1
    await hearer.heartbeat.detect_failures()  # reads the deaths
    # Its maintenance loop, waiting out a tick far longer than any interval, wakes and runs a round.
    await asyncio.wait_for(hearer.adoption.wait_for_round(3600), 1)
    assert hearer.adoption.round_due()
    assert await hearer.adoption.adopt_orphans() == 1
    assert [hearer.queue.get(j.id) is not None for j in jobs] == [declarer.queue.get(j.id) is None for j in jobs]


async def test_a_peer_the_transport_reports_gone_is_declared_dead_at_once() -> None:
    store = MemoryStore()
    await make_parts(store, "gone")
    watcher = await make_parts(store, "w")
    watcher.transport.alive["gone"] = Ping.GONE
    await watcher.heartbeat.detect_failures()
    row = (await Membership(store).members())["gone"]
    assert row.status == DEAD and row.cause == REPORTED and row.ended_through == 0  # dead, its end not proven


async def test_a_silo_declared_dead_drops_its_shards_and_rejoins_as_a_new_incarnation() -> None:
    store = MemoryStore()
    parts = await make_parts(store, "s")
    j = job()
    (name,) = await add(parts, j)
    await Membership(store).declare_dead(parts.me.row)
    await parts.heartbeat.beat()
    assert parts.me.owner == "s#2"
    assert parts.shards.get(name) is None and j.id not in parts.queue


async def test_a_heartbeat_that_landed_but_lost_its_answer_is_not_taken_for_being_declared_dead() -> None:
    """Issue 12, point 7: a retried CAS sees its own write as a conflict; the silo used to drop everything."""
    store = GatedStore()
    parts = await make_parts(store, "s")  # type: ignore[arg-type]
    (name,) = await add(parts, job())
    store.lose_answer("set_metadata", 1)
    await parts.heartbeat.beat()
    assert parts.me.owner == "s#1" and parts.shards.get(name) is not None
    await parts.heartbeat.beat()  # and the ETag it took from the row is the row's: the next beat lands
    assert parts.me.owner == "s#1"


async def test_a_heartbeat_whose_answer_and_look_after_were_both_lost_is_not_taken_for_being_declared_dead() -> None:
    """Issue 12, point 7, the gap the simulation found: the write landed, its answer was lost and
    the look at the row failed too; the next beat's conflict with that very write made the silo
    drop every shard and rejoin, and peers adopted them while its old lease still held."""
    store = GatedStore()
    parts = await make_parts(store, "s")  # type: ignore[arg-type]
    (name,) = await add(parts, job())
    store.lose_answer("set_metadata", 1)
    store.fail_next("stat", 1)
    with pytest.raises(StorageError):
        await parts.heartbeat.beat()  # unsure: it may have landed (it did)
    await parts.heartbeat.beat()
    assert parts.me.owner == "s#1" and parts.shards.get(name) is not None
    await parts.heartbeat.beat()
    assert parts.me.owner == "s#1"


async def test_a_peer_that_really_declared_us_dead_is_still_seen_as_such() -> None:
    store = GatedStore()
    parts = await make_parts(store, "s")  # type: ignore[arg-type]
    await Membership(store).declare_dead(parts.me.row)  # type: ignore[arg-type]
    store.lose_answer("set_metadata", 1)  # the rejoin's write lands but its answer is lost
    await parts.heartbeat.beat()  # our beat's CAS fails for real: the token in the row is not ours
    assert parts.me.owner == "s#2"  # one new incarnation, not two


async def test_a_rejoin_that_landed_but_timed_out_is_taken_for_our_own_not_for_a_newer_process() -> None:
    """Simulator seed 260256: declared dead, the silo rejoined; the write of s#2 landed, but the
    call timed out. The next beat found s#2 in the row, took it for a newer process of this silo
    (``_replaced``) and ended for good: nothing ran it again, and the registry bucket it had
    owned answered no resume until peers saw its row silent for the whole suspicion timeout."""
    store = GatedStore()
    parts = await make_parts(store, "s")  # type: ignore[arg-type]
    ended: list[bool] = []
    parts.heartbeat.on_superseded = lambda: ended.append(True)
    await Membership(store).declare_dead(parts.me.row)  # type: ignore[arg-type]
    store.lose_answer("set_metadata", 1, Unavailable)  # the rejoin's write lands; its call times out
    with pytest.raises(StorageError):
        await parts.heartbeat.beat()
    assert parts.me.rejoining  # unsure whether it is s#2: it holds nothing meanwhile
    await parts.heartbeat.beat()
    assert not ended and not parts.heartbeat.superseded
    assert not parts.me.rejoining and parts.me.owner == "s#2" and parts.lease.valid
    assert (await Membership(store).members())["s"].incarnation == 2  # one join, one incarnation
    await parts.heartbeat.beat()  # and the row's ETag is the one it holds: the next beat lands
    assert parts.me.owner == "s#2"


async def test_a_rejoin_found_landed_later_holds_the_lease_only_from_when_its_write_began() -> None:
    """Peers count a row's silence from when they first saw it, at the earliest when its write
    began: a lease renewed from the later look would outlast what they wait before taking over."""
    store = GatedStore()
    parts = await make_parts(store, "s")  # type: ignore[arg-type]
    await Membership(store).declare_dead(parts.me.row)  # type: ignore[arg-type]
    store.lose_answer("set_metadata", 1, Unavailable)
    with pytest.raises(StorageError):
        await parts.heartbeat.beat()
    parts.clock.advance(4.5)  # past the lease (0.8 x the 5 s suspicion timeout) from that write
    await parts.heartbeat.beat()
    assert parts.me.owner == "s#2" and not parts.lease.valid
    await parts.heartbeat.beat()  # a beat that lands renews it
    assert parts.me.owner == "s#2" and parts.lease.valid


async def test_a_rejoin_whose_answer_and_look_after_were_both_lost_is_taken_up_by_the_next() -> None:
    store = GatedStore()
    parts = await make_parts(store, "s")  # type: ignore[arg-type]
    await Membership(store).declare_dead(parts.me.row)  # type: ignore[arg-type]
    store.lose_answer("set_metadata", 1)  # the rejoin's write lands; its caller hears Fenced ...
    write = store.inner.set_metadata

    async def then_the_look_fails(*args: Any, **kwargs: Any) -> str:
        etag = await write(*args, **kwargs)
        store.fail_next("stat", 1)  # ... and the look at the row after it fails
        return etag

    store.inner.set_metadata = then_the_look_fails  # type: ignore[method-assign]
    with pytest.raises(StorageError):
        await parts.heartbeat.beat()
    store.inner.set_metadata = write  # type: ignore[method-assign]
    await parts.heartbeat.beat()
    assert not parts.heartbeat.superseded and parts.me.owner == "s#2" and parts.lease.valid


async def test_a_first_join_that_landed_but_timed_out_makes_one_incarnation() -> None:
    store = GatedStore()
    store.lose_answer("create", 1, Unavailable)
    parts = await make_parts(store, "s", join=False)  # type: ignore[arg-type]
    with pytest.raises(StorageError):
        await parts.heartbeat.join()
    await parts.heartbeat.join()  # as Silo._start retries it
    assert parts.me.owner == "s#1" and parts.lease.valid


async def test_an_older_process_of_a_silo_gives_way_to_a_newer_one_instead_of_rejoining() -> None:
    # Ray restarts a silo elsewhere when it thinks its node is gone, while the old process may
    # still run (its raylet died, or a partition cut it off; seen with ray.cluster_utils). If the
    # old one rejoined, it would take the row from the new one, which would rejoin in turn: both
    # dropping every shard on each round, for good.
    store = MemoryStore()
    old = await make_parts(store, "s")
    j = job()
    (name,) = await add(old, j)
    ended: list[bool] = []
    old.heartbeat.on_superseded = lambda: ended.append(True)
    new = await make_parts(store, "s", clock=old.clock)  # the restarted process joins as s#2
    assert new.me.owner == "s#2"
    await old.heartbeat.beat()
    assert ended == [True] and old.heartbeat.superseded
    assert old.shards.get(name) is None and j.id not in old.queue
    await new.heartbeat.beat()  # the new process keeps its row: nobody took it back
    assert new.me.owner == "s#2"
    assert (await Membership(store).members())["s"].incarnation == 2


async def test_a_round_that_needs_the_lease_after_it_lapsed_renews_it_instead_of_waiting_for_itself(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A round that declared a peer dead claims its shards and settles their moves; a move into a
    fresh shard needs the lease, and only this loop renews it. Before: a VM suspension mid-round
    let the lease lapse, the round waited for a renewal that never came, and the silo never beat
    again, holding shards peers had taken, their jobs queued unfired (simulator seed 449, torn_logs)."""
    parts = await make_parts(options=OPTIONS.with_(heartbeat_interval="20ms"))
    window = window_of(parts.clock.now_us() + 1_000_000, timedelta_to_us(OPTIONS.shard_duration))
    opened: list[Shard] = []

    async def round_needing_the_lease() -> None:
        parts.clock.advance(10)  # type: ignore[attr-defined]  # suspended mid-round: the lease lapsed
        opened.append(await parts.shards.open_shard(window))  # as a claimed shard's move settles

    monkeypatch.setattr(parts.heartbeat, "detect_failures", round_needing_the_lease)
    loop = asyncio.create_task(parts.heartbeat.run())
    try:
        for _ in range(300):
            if opened:
                break
            await asyncio.sleep(0.01)
        assert opened and parts.lease.valid, "the round waited for its own renewal"
    finally:
        await parts.heartbeat.halt(loop)
