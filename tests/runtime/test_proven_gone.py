"""Issue 12, point 6: a shard is an orphan only once its owner is proven gone — its process exited,
or its lease provably ran out — and work that ends under an ended incarnation is discarded.

A "partition" is modelled as Ray reporting a silo dead (``Ping.GONE``) while its process runs on; a
paused silo (SIGSTOP) as one whose coroutines simply do not run until it resumes.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from cluster.model.attempt import JobContext
from cluster.runtime.membership import DEAD, EXITED, REPORTED, STOPPED, Membership
from cluster.runtime.shardlog import SHARD_PREFIX
from cluster.runtime.silo import Silo
from cluster.runtime.transport import Ping
from storage import MemoryStore, list_logs
from tests.runtime.harness import (
    OPTIONS,
    Blocking,
    LocalTransport,
    ManualClock,
    add,
    fire_due,
    item,
    job,
    make_parts,
    until_idle,
)

LEASE = OPTIONS.firing_lease.total_seconds()


async def test_a_peer_reported_dead_without_proof_is_adopted_once_its_lease_ran_out_and_not_before() -> None:
    store, clock = MemoryStore(), ManualClock()
    victim = await make_parts(store, "v", clock=clock)  # cut off from Ray, still running
    j = job(due=timedelta(seconds=2))
    await add(victim, j)
    watcher = await make_parts(store, "w", clock=clock)
    watcher.adoption._budget = 64
    watcher.transport.alive["v"] = Ping.GONE
    await watcher.heartbeat.detect_failures()
    row = (await Membership(store).members())["v"]
    assert row.status == DEAD and row.cause == REPORTED
    assert watcher.queue.get(j.id) is None  # its lease may still hold: it may still fire
    clock.advance(LEASE - 0.01)
    assert await watcher.adoption.adopt_orphans() == 0
    clock.advance(0.01)
    assert not victim.lease.valid  # by now it fires nothing...
    assert await watcher.adoption.adopt_orphans() == 1  # ... and the shard is taken right then
    assert watcher.queue.get(j.id) is not None


async def test_a_peer_whose_process_ray_saw_exit_is_adopted_at_once() -> None:
    store, clock = MemoryStore(), ManualClock()
    victim = await make_parts(store, "v", clock=clock)
    j = job(due=timedelta(seconds=2))
    await add(victim, j)
    watcher = await make_parts(store, "w", clock=clock)
    watcher.adoption._budget = 64
    watcher.transport.alive["v"] = Ping.EXITED
    await watcher.heartbeat.detect_failures()
    row = (await Membership(store).members())["v"]
    assert row.cause == EXITED and row.ended_through == 1
    assert watcher.queue.get(j.id) is not None  # no wait: the SIGKILL failover stays fast


async def test_a_replaced_incarnation_keeps_its_shards_until_its_lease_ran_out_unless_its_process_is_gone() -> None:
    store, clock = MemoryStore(), ManualClock()
    old = await make_parts(store, "s", clock=clock)
    j = job(due=timedelta(seconds=2))
    await add(old, j)
    # Ray restarted the actor on another node while the old process runs on behind a partition.
    new = await make_parts(store, "s", clock=clock)
    assert new.me.owner == "s#2"
    new.adoption._budget = 64
    assert await new.adoption.adopt_orphans() == 0
    assert old.lease.valid
    clock.advance(LEASE)
    assert not old.lease.valid
    assert await new.adoption.adopt_orphans() == 1

    store, clock = MemoryStore(), ManualClock()
    old = await make_parts(store, "s", clock=clock)
    await add(old, j)
    # Restarted on the same node, where its old process is seen gone: proof, no wait.
    new = await make_parts(store, "s", clock=clock, transport=LocalTransport(predecessors_exited=True))
    new.adoption._budget = 64
    assert (await Membership(store).members())["s"].ended_through == 1
    assert await new.adoption.adopt_orphans() == 1


async def test_a_paused_silo_never_fires_once_a_peer_claimed_its_shard() -> None:
    store, clock = MemoryStore(), ManualClock()
    paused = await make_parts(store, "p", clock=clock)
    j = job(due=timedelta(seconds=1))
    await add(paused, j)
    clock.advance(1)
    await paused.heartbeat.beat()  # its last heartbeat; then SIGSTOP, while Ray reports it gone
    watcher = await make_parts(store, "w", clock=clock)
    watcher.adoption._budget = 64
    watcher.transport.alive["p"] = Ping.GONE

    async def claimed() -> bool:
        return {h.metadata["owner"] for h in await list_logs(store, SHARD_PREFIX)} == {watcher.me.owner}

    await watcher.heartbeat.detect_failures()
    for _ in range(40):  # ten seconds, in steps of a quarter
        if await claimed():
            break
        clock.advance(0.25)
        await watcher.adoption.adopt_orphans()
    assert await claimed()
    assert not paused.lease.valid  # the claim landed after its lease ended
    # SIGCONT: its fire loop takes the due job; its heartbeat learns it was declared dead.
    await asyncio.gather(fire_due(paused), paused.heartbeat.beat())
    assert paused.transport.calls == []
    assert paused.me.owner == "p#2"


async def test_stop_keeps_heartbeating_until_its_runs_end_then_releases_and_marks_itself_stopped() -> None:
    store, clock, transport = MemoryStore(), ManualClock(), LocalTransport()
    slow = Blocking()
    started, finish = slow.started, slow.finish
    transport.handlers["h"] = slow
    silo = Silo("s", "memory://", OPTIONS.with_(heartbeat_interval="50ms", suspicion_timeout="1s"), "test",
                hooks=lambda _store, _view: [], transport=transport, clock=clock, store=store)
    await silo.ready()
    clock.advance(1)
    await silo.schedule([item(job(due=timedelta(seconds=1)))])
    await asyncio.wait_for(started.wait(), 5)
    stopping = asyncio.ensure_future(silo.stop())
    for _ in range(6):  # three leases' worth of time while the run is in flight
        clock.advance(0.5)
        await asyncio.sleep(0.15)
        assert silo._r.lease.valid  # still beating: its in-flight run and its shard stay its own
        assert (await Membership(store).members())["s"].status != DEAD
    finish.set()
    assert await asyncio.wait_for(stopping, 5) == {"released": 1, "unfinished": 0}
    row = (await Membership(store).members())["s"]
    assert row.status == DEAD and row.cause == STOPPED and row.ended_through == row.incarnation
    assert {h.metadata["owner"] for h in await list_logs(store, SHARD_PREFIX)} == {"-"}


async def test_the_next_occurrence_of_a_run_that_ends_after_its_silo_rejoined_is_not_written() -> None:
    """The epoch: a run begun as s#1 that ends after the silo became s#2 writes nothing, so its
    recurring job does not fork into s#2's shards while the peer that took s#1's shard replays it."""
    store, clock = MemoryStore(), ManualClock()
    silo = await make_parts(store, "s", clock=clock)
    slow = Blocking()
    started, finish = slow.started, slow.finish
    silo.transport.handlers["h"] = slow
    j = job(due=timedelta(seconds=9), schedule="@every 5s")  # the next occurrence is in the next window
    (old_shard,) = await add(silo, j)
    clock.advance(9)
    await silo.heartbeat.beat()
    firing = asyncio.ensure_future(fire_due(silo))
    await started.wait()
    clock.advance(LEASE)  # paused too long: its lease ran out, and it was declared dead
    await Membership(store).declare_dead(silo.me.row)
    await silo.heartbeat.beat()  # rejoins as s#2, dropping s#1's shards: proof s#1 fires no more
    peer = await make_parts(store, "p", clock=clock)
    peer.adoption._budget = 64
    assert await peer.adoption.adopt_orphans() == 1  # the peer takes s#1's shard at once
    finish.set()
    await firing
    assert all(s.state is None or j.id not in s.state.live for s in silo.shards)  # no second chain in s#2
    shard = peer.shards.get(old_shard)
    assert shard is not None and shard.state is not None and j.id in shard.state.live  # the peer reruns it


async def test_a_silo_that_rejoins_while_its_lease_holds_leaves_its_shards_until_the_lease_ran_out() -> None:
    """Found by the simulation (partitions with delayed and retried calls): reported dead while cut
    off from Ray, the silo rejoined at its next beat and recorded its old incarnation as over, so
    its shard was taken at once, while a call it had sent before (retried by Ray) still reached
    the handler within its lease: two owners fired the same occurrence."""
    store, clock = MemoryStore(), ManualClock()
    silo = await make_parts(store, "s", clock=clock)
    j = job(due=timedelta(seconds=2))
    (old_shard,) = await add(silo, j)
    await Membership(store).declare_dead(silo.me.row, REPORTED)  # a peer got Ping.GONE
    assert silo.lease.valid
    await silo.heartbeat.beat()  # rejoins as s#2; what s#1 sent may still land until its lease ends
    assert silo.me.owner == "s#2"
    peer = await make_parts(store, "p", clock=clock)
    peer.adoption._budget = 64
    assert await peer.adoption.adopt_orphans() == 0
    clock.advance(LEASE)
    assert await peer.adoption.adopt_orphans() == 1
    assert peer.shards.get(old_shard) is not None and peer.queue.get(j.id) is not None


@pytest.mark.parametrize("ask", ["cancel", "pause"])
async def test_a_cancel_or_pause_of_a_shard_taken_at_once_from_an_exited_silo_holds_for_what_it_sent_ahead(
        ask: str) -> None:
    """Simulator seeds 142958, 141299 (``--faults all,-flows``): a silo sent a job ahead to its
    handler and was killed; Ray's word that its process exited let a peer take its shard at once,
    before the dead silo's lease ended, and the peer answered a cancel "cancelled" (a pause
    "paused") while the job still waited in the handler under that lease, where nobody was left to
    withdraw it: it started after the client had been told. The answer now comes once that lease
    is over, and the failover itself stays immediate."""
    store, clock = MemoryStore(), ManualClock()
    starts: list[int] = []  # store time of each start

    async def run(ctx: JobContext) -> None:
        starts.append(clock.now_us())

    victim = await make_parts(store, "v", clock=clock, transport=LocalTransport(handlers={"h": run}, clock=clock))
    victim.lease.renew(clock.monotonic())
    j = job(due=timedelta(seconds=1))
    (name,) = await add(victim, j)
    clock.advance(1 - OPTIONS.dispatch_ahead.total_seconds() / 2)
    victim.firing.dispatch(victim.firing.take_due(victim.runs.room))
    await until_idle()  # it waits in the handler; then the silo is killed (it runs no more code)
    watcher = await make_parts(store, "w", clock=clock, transport=LocalTransport(
        handlers={"h": run}, clock=clock, alive={"v": Ping.EXITED}))
    watcher.adoption._budget = 64
    watcher.adoption.sleep = clock.sleep
    await watcher.heartbeat.detect_failures()
    assert watcher.shards.get(name) is not None  # taken at once: the fast failover stays
    asked = asyncio.ensure_future(watcher.cancelling.cancel(name, j.id) if ask == "cancel"
                                  else watcher.pausing.pause(name, j.id, None, "op"))
    answered: list[int] = []
    asked.add_done_callback(lambda _: answered.append(clock.now_us()))
    for _ in range(60):  # six seconds in steps of a tenth: past the due time and the lease
        await until_idle()
        clock.advance(0.1)
    await until_idle()
    assert asked.done() and asked.result()[0] == ("cancelled" if ask == "cancel" else "paused")
    assert len(starts) == 1  # the dead silo's copy, under its lease: what is judged is when
    assert starts[0] < answered[0]
