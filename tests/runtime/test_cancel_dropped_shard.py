"""A cancel answered from an adopted shard that its silo dropped while the cancel wrote: the
silo was declared dead meanwhile and rejoined, dropping all its shards. The removal landed, so
"cancelled" stands; it promises that nothing of the job starts after the client was told, and
what the shard's dead previous owner sent ahead may still start until that owner's lease ends."""

from __future__ import annotations

import asyncio

from cluster.runtime.membership import SILENT, Membership
from tests.runtime.harness import GatedStore, LocalTransport, add, job, make_parts, until_idle


async def test_a_cancel_waits_out_the_dead_owners_lease_though_its_silo_dropped_the_shard() -> None:
    store = GatedStore()
    first = await make_parts(store, "a")
    j = job()
    (base,) = await add(first, j)
    # The first incarnation's process exited (Ray's word): its shard is adopted at once, while
    # what it sent ahead may wait at a handler until its lease ends.
    parts = await make_parts(store, "a", transport=LocalTransport(predecessors_exited=True))
    parts.adoption._budget = 64
    parts.adoption.sleep = parts.clock.sleep
    assert await parts.adoption.adopt_orphans() == 1
    adopted = parts.shards.get(base)
    assert adopted is not None
    sent_before = adopted.sent_before_until - parts.clock.monotonic()
    assert sent_before > 0

    release = store.gate("append_block", base)
    cancelling = asyncio.ensure_future(parts.cancelling.cancel(base, j.id))
    await asyncio.wait_for(store.reached("append_block", base).wait(), 5)  # the removal on its way
    # Meanwhile the silo is declared dead, and its heartbeat finds out: it drops every shard.
    assert await Membership(store).declare_dead(parts.me.row, SILENT)
    await parts.heartbeat.beat()
    assert parts.shards.get(base) is None
    release.set()
    await until_idle()
    assert not cancelling.done(), "answered 'cancelled' while the dead owner's sends may still start"
    parts.clock.advance(sent_before)
    assert await asyncio.wait_for(cancelling, 5) == ("cancelled", None)
