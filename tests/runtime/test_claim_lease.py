"""A claim never waits for the lease (simulator seed 216088, every kind).

Claims run in the heartbeat's rounds, and in the start's first round before the heartbeat runs;
only the heartbeat renews the lease. A claimed shard's pending move whose target proves not to
hold it is decided again into a fresh shard, created under a valid lease only
(``ShardTable.open_shard``): waited for inside the claim, that renewal never came, and the silo
froze for good. Here the claimed move is carried out once the next heartbeat renews the lease.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from random import Random

from cluster.model.wire import timedelta_to_us
from cluster.runtime.lease import LEASE_FRACTION
from cluster.runtime.membership import SILENT, Membership
from cluster.runtime.roles import Roles
from cluster.runtime.shardlog import JOB, MOVED, SHARD_PREFIX, remove_op, window_of
from cluster.runtime.silo import Silo
from storage import Store, list_logs
from tests.runtime.harness import (
    OPTIONS,
    T0_US,
    GatedStore,
    LocalTransport,
    ManualClock,
    Recorder,
    add,
    job,
    live_copies,
    make_parts,
    until_idle,
)
from tests.sim.loop import SimClock, VirtualLoop

LEASE_S = LEASE_FRACTION * OPTIONS.suspicion_timeout.total_seconds()
NEXT_DUE_US = T0_US + 13_000_000  # the moved occurrence: in the next window (10 s shards)



async def shard_names(store: Store) -> set[str]:
    return {h.base for h in await list_logs(store, SHARD_PREFIX)}


async def move_pending_into_a_live_peers_shard(w: Roles, x: Roles) -> tuple[str, str]:
    """W's shard SOURCE holds the decision to move a recurring job into TARGET, X's shard (handed
    over, say), which lacks it: X being alive, a claimant of SOURCE reads TARGET rather than
    claiming it, and decides the move again into a fresh shard. The job's id and SOURCE."""
    j = job(due=timedelta(seconds=1), schedule="@every 12s")
    (source,) = await add(w, j)
    target = await x.shards.open_shard(window_of(NEXT_DUE_US, timedelta_to_us(OPTIONS.shard_duration)))
    await decide_move(w, source, j.id, target.base)
    return j.id, source


async def decide_move(w: Roles, source: str, job_id: str, target: str) -> None:
    """Write into W's ``source`` the decision to move ``job_id`` (occurrence 1) into ``target``."""
    held = w.shards.get(source)
    assert held is not None and held.state is not None
    nxt = [NEXT_DUE_US, held.state.live[job_id][JOB], 2, 0, NEXT_DUE_US]
    await held.write([remove_op(job_id, 1, MOVED, target, nxt)])


async def test_a_heartbeat_round_claiming_a_move_that_needs_a_fresh_shard_returns_with_the_lease_lapsed() -> None:
    store, clock = GatedStore(), ManualClock()
    w, x, y = [await make_parts(store, name, clock=clock) for name in "wxy"]  # type: ignore[arg-type]
    job_id, source = await move_pending_into_a_live_peers_shard(w, x)
    y.transport.exited_nodes.add(w.transport.node)  # W's process is gone: Y's round declares it dead
    clock.advance(LEASE_S + 0.5)  # Y's heartbeat was held up (a slow store, a pause) past its lease
    before = await shard_names(store)  # type: ignore[arg-type]
    round_ = asyncio.ensure_future(y.heartbeat.detect_failures())
    await until_idle()
    assert round_.done(), "the heartbeat waits in its own round for the lease only its next beat renews"
    await round_
    assert y.shards.get(source) is not None  # claimed, and no shard created past the lease:
    assert await shard_names(store) == before  # type: ignore[arg-type]
    await y.heartbeat.beat()  # the heartbeat goes on: the lease holds again, and the move lands
    await until_idle()
    ((there, occurrence),) = await live_copies(store, job_id)
    assert occurrence == 2 and y.shards.get(there) is not None
    clock.advance(6)  # its window comes within the lookahead: loaded, the occurrence is queued
    await y.loading.load_due()
    queued = y.queue.get(job_id)
    assert queued is not None and queued[0] == NEXT_DUE_US


async def test_a_heartbeat_round_does_not_wait_for_a_cancel_settling_the_same_move_under_a_lapsed_lease() -> None:
    """One settle of a move at a time (``Moves.settle``): a claim's settle that waits for another
    one of the same move waits for what that one waits for. A cancel reaching the shard just
    claimed settles its job's move, which needs a fresh shard; its lease lapsed, it waits for the
    next beat, and the heartbeat's claim, reaching that move, waited behind it."""
    store, clock = GatedStore(), ManualClock()
    w, x, y = [await make_parts(store, name, clock=clock) for name in "wxy"]  # type: ignore[arg-type]
    first, second = (job(due=timedelta(seconds=1), schedule="@every 12s") for _ in range(2))
    source, _ = await add(w, first, second)
    window = window_of(NEXT_DUE_US, timedelta_to_us(OPTIONS.shard_duration))
    target = await x.shards.open_shard(window)  # X's (handed over, say): read, not claimed
    for j in (first, second):
        await decide_move(w, source, j.id, target.base)
    y.transport.exited_nodes.add(w.transport.node)
    y.adoption.sleep = clock.sleep
    clock.advance(LEASE_S + 0.5)
    reading = store.gate("list", target.base)  # the claim's settle of FIRST reads the target ...
    round_ = asyncio.ensure_future(y.heartbeat.detect_failures())
    await store.reached("list", target.base).wait()
    assert y.shards.get(source) is not None
    reading.set()
    cancelling = asyncio.ensure_future(y.cancelling.cancel(source, second.id))  # ... meanwhile a cancel settles SECOND
    await until_idle()
    assert round_.done(), "the heartbeat waits behind a cancel's settle, which waits for the lease"
    await round_
    assert not cancelling.done()  # it waits for the lease, as a caller that answers a client may
    await y.heartbeat.beat()
    await until_idle()
    for j in (first, second):
        ((there, occurrence),) = await live_copies(store, j.id)
        assert occurrence == 2 and there not in (source, target.base) and y.shards.get(there) is not None
    clock.advance(LEASE_S)  # what W may have sent ahead is over: the cancel answers
    assert await asyncio.wait_for(cancelling, 5) == ("moved", there)  # where SECOND lives


def test_a_silo_resumed_past_its_lease_in_its_first_adoption_round_starts_and_runs_the_move() -> None:
    """The seed's case: a silo SIGSTOPped in its start's first adoption round, before its
    heartbeat runs, and resumed past its lease. Its claim waited for a renewal only that
    heartbeat brings: it never became ready, fired or answered again."""
    loop = VirtualLoop()

    async def main() -> list[int]:
        store = GatedStore()
        w, x = [await make_parts(store, name, clock=SimClock(loop)) for name in "wx"]  # type: ignore[arg-type]
        job_id, source = await move_pending_into_a_live_peers_shard(w, x)
        assert await Membership(store).declare_dead(w.me.row, SILENT)  # type: ignore[arg-type]
        listing = store.gate("list_page", SHARD_PREFIX)
        transport = LocalTransport()
        transport.handlers["h"] = ran = Recorder()
        silo = Silo("y", "memory://", OPTIONS, "test", hooks=lambda _store, _view: [], transport=transport,
                    clock=SimClock(loop), store=store, rng=Random(1))  # type: ignore[arg-type]
        await store.reached("list_page", SHARD_PREFIX).wait()  # joined: its first adoption round lists
        await asyncio.sleep(LEASE_S + 1)  # SIGSTOP until past its lease
        listing.set()  # SIGCONT
        await asyncio.wait_for(silo.ready(), 30)
        await asyncio.sleep((NEXT_DUE_US - T0_US) / 1e6 + 2 - loop.time())
        copies = await live_copies(store, job_id)
        assert len(copies) == 1 and copies[0][0] != source, copies
        await silo.stop()
        return [ctx.occurrence for ctx in ran.ran if ctx.job.id == job_id]

    try:
        assert loop.run_until_complete(main()) == [2]  # the moved occurrence ran, on time, once
    finally:
        loop.close()
