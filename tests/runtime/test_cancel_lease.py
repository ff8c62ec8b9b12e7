"""A cancel answered by a silo whose lease lapsed while it worked: it answers from its memory of
a shard only while that shard is still provably its own, as a pause or resume does
(``ShardTable.answers_for``); otherwise the client is sent to the shard's real owner."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from cluster.model.wire import timedelta_to_us
from cluster.runtime.lease import LEASE_FRACTION
from cluster.runtime.membership import SILENT, Membership
from cluster.runtime.shardlog import JOB, MOVED, remove_op, window_of
from storage import MemoryStore
from tests.runtime.harness import OPTIONS, T0_US, ManualClock, add, job, live_copies, make_parts, until_idle

LEASE_S = LEASE_FRACTION * OPTIONS.suspicion_timeout.total_seconds()



async def test_a_cancel_past_the_lease_does_not_answer_moved_from_a_lost_shards_memory() -> None:
    # Y decided a recurring job's move into X's shard FIRST (the ADD not yet written), then froze
    # past its lease and was declared dead. Z took the source over, found FIRST without the
    # occurrence and decided the move again into a shard of its own. A cancel reaching Y at
    # SIGCONT settled the move from Y's memory (its writes fenced) and answered "moved" to where
    # that memory said: the client followed it, heard no job there, and the job ran on from Z's.
    store, clock = MemoryStore(), ManualClock()
    x, y, z = [await make_parts(store, name, clock=clock) for name in ("x", "y", "z")]
    j = job(due=timedelta(seconds=1), schedule="@every 12s")
    (source,) = await add(y, j)
    held = y.shards.get(source)
    assert held is not None and held.state is not None
    nxt_due = T0_US + 13_000_000
    first = await x.shards.open_shard(window_of(nxt_due, timedelta_to_us(OPTIONS.shard_duration)))
    await held.write([remove_op(j.id, 1, MOVED, first.base, [nxt_due, held.state.live[j.id][JOB], 2, 0, nxt_due])])

    clock.advance(LEASE_S + 0.5)  # Y is frozen (SIGSTOP): no heartbeat; its peers beat on
    for peer in (x, z):
        await peer.heartbeat.beat()
    assert await Membership(store).declare_dead(y.me.row, SILENT)
    assert await z.adoption.claim_for_cancel(source) is not None  # settles the move: FIRST lacks it
    ((there, occurrence),) = await live_copies(store, j.id)
    assert there not in (first.base, source) and occurrence == 2

    cancelling = asyncio.ensure_future(y.cancelling.cancel(source, j.id))  # SIGCONT: the cancel comes first ...
    await until_idle()
    await y.heartbeat.beat()  # ... then the heartbeat, which finds Y declared dead
    answer = await asyncio.wait_for(cancelling, 5)
    assert answer == ("not_owner", z.me.owner)
    # The client asks the owner named, and follows it to the job.
    assert await z.cancelling.cancel(source, j.id) == ("moved", there)
    assert await z.cancelling.cancel(there, j.id) == ("cancelled", None)
    assert await live_copies(store, j.id) == []
