"""A shard adopted while its dead owner's lease may still run: what that owner sent ahead may still
start at a handler until its lease ends, whichever copy of the shard this silo holds. A cancel's
"cancelled" and a pause's "paused" promise that nothing of the job starts after the client was
told, so a copy taken back from its own log (its writer stopped), or claimed as this silo's own
after a claim whose answer was lost, waits that lease out as the first adopted copy does."""

from __future__ import annotations

import asyncio

from cluster.model.jobs import ScheduledJob
from cluster.runtime.lease import LEASE_FRACTION
from cluster.runtime.roles import Roles
from storage import MemoryStore, Store, Unavailable
from tests.runtime.harness import OPTIONS, GatedStore, LocalTransport, add, job, make_parts, until_idle

LEASE_S = LEASE_FRACTION * OPTIONS.suspicion_timeout.total_seconds()


async def _restarted(store: Store) -> tuple[Roles, str, ScheduledJob]:
    """Silo a's first incarnation adds a job and its process exits; its second incarnation, on
    ``store``, is ready to adopt. Returns that incarnation, the shard and the job."""
    first = await make_parts(store, "a")
    j = job()
    (base,) = await add(first, j)
    parts = await make_parts(store, "a", transport=LocalTransport(predecessors_exited=True))
    parts.adoption._budget = 64
    parts.adoption.sleep = parts.clock.sleep
    return parts, base, j


async def _adopted_then_taken_back() -> tuple[Roles, str, str, float]:
    """Silo a's first incarnation adds a job; its process exits (Ray's word), so its second
    incarnation adopts the shard at once, while what the first sent ahead may wait at a handler
    until its lease ends. Then the adopted shard's writer stops (a write landed behind a lost
    answer, or a torn log: see test_damage) and the silo takes it back from its log. Returns the
    silo, the shard, the job and how long the first incarnation's lease may still run."""
    parts, base, j = await _restarted(MemoryStore())
    assert await parts.adoption.adopt_orphans() == 1
    adopted = parts.shards.get(base)
    assert adopted is not None
    left = adopted.sent_before_until - parts.clock.monotonic()
    assert left > 0
    assert await parts.shards.taken_back(adopted)
    fresh = parts.shards.get(base)
    assert fresh is not None and fresh is not adopted and fresh.state is not None and j.id in fresh.state.live
    return parts, base, j.id, left


async def test_a_cancel_in_a_shard_taken_back_waits_out_the_lease_of_the_owner_it_was_adopted_from() -> None:
    parts, base, job_id, left = await _adopted_then_taken_back()
    cancelling = asyncio.ensure_future(parts.cancelling.cancel(base, job_id))
    await until_idle()
    assert not cancelling.done(), "answered 'cancelled' while the dead owner's sends may still start"
    parts.clock.advance(left)
    assert await asyncio.wait_for(cancelling, 5) == ("cancelled", None)


async def test_a_pause_in_a_shard_taken_back_waits_out_the_lease_of_the_owner_it_was_adopted_from() -> None:
    parts, base, job_id, left = await _adopted_then_taken_back()
    pausing = asyncio.ensure_future(parts.pausing.pause(base, job_id, None, "ops"))
    await until_idle()
    assert not pausing.done(), "answered 'paused' while the dead owner's sends may still start"
    parts.clock.advance(left)
    answer, _ = await asyncio.wait_for(pausing, 5)
    assert answer == "paused"


async def test_a_shard_taken_back_is_not_handed_over_while_the_dead_owners_sends_may_start() -> None:
    """Handed over, its taker would answer a cancel at once: the taker knows nothing of that lease."""
    parts, base, _, left = await _adopted_then_taken_back()
    fresh = parts.shards.get(base)
    assert fresh is not None
    fresh.held_since = float("-inf")  # held long enough to count as settled: only the lease holds it back
    assert fresh not in parts.balance.movable()
    parts.clock.advance(left)
    assert fresh in parts.balance.movable()


async def test_a_claim_whose_answer_was_lost_waits_out_the_lease_once_the_next_round_takes_its_shard() -> None:
    """The adopting claim landed but its answer was lost and the look that would tell could not
    be made: the next round finds the log naming this very incarnation and takes it as its own.
    Taken so, the shard's log no longer names the dead owner, whose sends may still start."""
    store = GatedStore()
    parts, base, j = await _restarted(store)
    store.lose_answer("set_metadata", 1, Unavailable)
    store.fail_next("stat", 1, base)
    assert await parts.adoption.adopt_orphans() == 0
    assert parts.shards.get(base) is None
    assert await parts.adoption.adopt_orphans() == 1  # its own now: taken at once
    cancelling = asyncio.ensure_future(parts.cancelling.cancel(base, j.id))
    await until_idle()
    assert not cancelling.done(), "answered 'cancelled' while the dead owner's sends may still start"
    parts.clock.advance(LEASE_S)
    assert await asyncio.wait_for(cancelling, 5) == ("cancelled", None)
