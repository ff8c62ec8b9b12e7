"""Adoption without Ray: who counts as an orphan, the claim budget, and one winner per claim."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from cluster.model.policies import FailurePolicy
from cluster.runtime.adoption import INITIAL_CLAIM_BUDGET, MAX_CLAIM_BUDGET, claims_this_round, is_orphan, next_budget
from cluster.runtime.membership import ACTIVE, DEAD, LEAVING, Member, Membership
from cluster.runtime.shardlog import SEALED, SHARD_PREFIX, ShardMeta
from storage import MemoryStore, list_logs
from tests.runtime.harness import GatedStore, add, fire_due, job, make_parts

ALIVE = {"a": Member("a", 2, ACTIVE, 0)}


@pytest.mark.parametrize(
    ("owner", "members", "orphan"),
    [
        ("-", ALIVE, True),  # released by a graceful stop
        ("garbage", ALIVE, True),  # no incarnation in the tag
        ("a#1", ALIVE, True),  # that incarnation was replaced by a restart
        ("b#1", ALIVE, True),  # never registered
        ("a#2", ALIVE, False),
        ("a#3", ALIVE, False),  # newer than our snapshot: it restarted and claimed meanwhile (issue 12, point 1)
        ("a#2", {"a": Member("a", 2, DEAD, 0)}, True),
        ("a#2", {"a": Member("a", 2, LEAVING, 0)}, True),
    ],
)
def test_only_a_shard_whose_owner_is_gone_is_an_orphan(owner: str, members: dict[str, Member], orphan: bool) -> None:
    assert is_orphan({"owner": owner}, members) is orphan


def test_a_lone_survivor_ramps_its_claims_up_instead_of_taking_everything_at_once() -> None:
    assert claims_this_round(orphans=100, alive=4, budget=INITIAL_CLAIM_BUDGET) == INITIAL_CLAIM_BUDGET
    assert claims_this_round(orphans=10, alive=4, budget=64) == 3  # a fair share, rounded up
    budget, rounds = INITIAL_CLAIM_BUDGET, 0
    while budget < MAX_CLAIM_BUDGET:
        budget, rounds = next_budget(10_000, budget), rounds + 1
    assert rounds == 10 and next_budget(10_000, budget) == MAX_CLAIM_BUDGET
    assert next_budget(0, 512) == INITIAL_CLAIM_BUDGET  # nothing left: start small next time


async def test_a_dead_silos_shard_is_claimed_by_exactly_one_of_two_racing_peers() -> None:
    store = MemoryStore()
    victim = await make_parts(store, "v")
    j = job(due=timedelta(seconds=2))
    (name,) = await add(victim, j)
    await Membership(store).declare_dead(victim.me.row)
    a, b = await make_parts(store, "a"), await make_parts(store, "b")
    for parts in (a, b):
        parts.adoption._budget = 64  # both try everything at once
    claimed = [await a.adoption.adopt_orphans(), await b.adoption.adopt_orphans()]
    assert sorted(claimed) == [0, 1]
    winner = a if claimed[0] else b
    assert winner.queue.get(j.id) is not None  # loaded and queued on the spot
    (head,) = await list_logs(store, SHARD_PREFIX)
    meta = ShardMeta.from_metadata(head.metadata)
    assert head.base == name and meta.owner == winner.me.owner and meta.state == SEALED and meta.adopted_count == 1


async def test_a_shard_beyond_the_lookahead_waits_dormant_even_when_orphaned() -> None:
    store = MemoryStore()
    victim = await make_parts(store, "v")
    await add(victim, job(due=timedelta(minutes=10)))
    await Membership(store).declare_dead(victim.me.row)
    peer = await make_parts(store, "p")
    assert await peer.adoption.adopt_orphans() == 0


async def test_a_shard_adopted_too_often_is_left_alone_as_poisoned() -> None:
    store = MemoryStore()
    victim = await make_parts(store, "v")
    (name,) = await add(victim, job())
    shard = victim.shards.get(name)
    assert shard is not None
    await shard.set_meta(ShardMeta(**{**shard.meta.__dict__, "adopted_count": 3}))
    await Membership(store).declare_dead(victim.me.row)
    peer = await make_parts(store, "p")
    assert await peer.adoption.adopt_orphans() == 0
    assert name in peer.adoption.poisoned


async def test_a_silo_that_takes_its_own_shard_back_reruns_a_job_whose_attempt_was_in_flight() -> None:
    """Issue 12, point 4: the old attempt's outcome goes to a fenced log, so the job must be queued anew."""
    store = MemoryStore()
    parts = await make_parts(store, "s")
    started, finish = asyncio.Event(), asyncio.Event()
    ran: list[int] = []

    async def slow_then_fail(ctx):  # type: ignore[no-untyped-def]
        ran.append(ctx.dequeue_count)
        started.set()
        await finish.wait()
        raise RuntimeError("the first attempt fails")

    parts.transport.handlers["h"] = slow_then_fail
    j = job(failure_policy=FailurePolicy.constant("1s", max_retries=3))
    await add(parts, j)
    parts.lease.renew(parts.clock.monotonic())
    parts.clock.advance(1)
    firing = asyncio.ensure_future(fire_due(parts))
    await started.wait()
    await Membership(store).declare_dead(parts.me.row)  # paused too long: declared dead
    await parts.heartbeat.beat()  # rejoins as s#2 and drops the shard
    assert await parts.adoption.adopt_orphans() == 1  # ... and takes it back from s#1
    finish.set()
    await firing  # the first attempt's retry is fenced: written to the dropped shard's log
    assert parts.queue.get(j.id) is not None
    parts.clock.advance(1)
    parts.lease.renew(parts.clock.monotonic())
    finish.clear()
    firing = asyncio.ensure_future(fire_due(parts))
    await asyncio.sleep(0.05)
    finish.set()
    await firing
    assert len(ran) == 2


async def test_a_claim_that_landed_although_it_failed_is_taken_again_by_the_same_incarnation() -> None:
    """Found by the simulation: the CAS landed, its answer was lost and the look that would have
    told failed too. The store named a live owner (us), so no peer took the shard, and we did
    not hold it: its jobs never fired."""
    store = GatedStore()
    victim = await make_parts(store, "v")  # type: ignore[arg-type]
    j = job(due=timedelta(seconds=2))
    (name,) = await add(victim, j)
    await Membership(store).declare_dead(victim.me.row)  # type: ignore[arg-type]
    peer = await make_parts(store, "p")  # type: ignore[arg-type]
    store.lose_answer("set_metadata", 1)  # the claim lands; its caller hears Fenced
    store.fail_next("stat", 1)  # and cannot look whether it was its own write
    assert await peer.adoption.adopt_orphans() == 0
    (head,) = await list_logs(store, SHARD_PREFIX)  # type: ignore[arg-type]
    assert head.metadata["owner"] == "p#1" and peer.shards.get(name) is None
    assert await peer.adoption.adopt_orphans() == 1
    assert peer.shards.get(name) is not None and peer.queue.get(j.id) is not None


async def test_a_claim_whose_cleanup_of_old_generations_fails_still_holds_the_shard() -> None:
    """Found by the simulation: removing superseded generations is best effort, yet a failed
    listing there failed the claim whose CAS had landed."""
    store = GatedStore()
    victim = await make_parts(store, "v")  # type: ignore[arg-type]
    j = job(due=timedelta(seconds=2))
    (name,) = await add(victim, j)
    await Membership(store).declare_dead(victim.me.row)  # type: ignore[arg-type]
    peer = await make_parts(store, "p")  # type: ignore[arg-type]
    release = store.gate("set_metadata", "shards/")
    adopting = asyncio.ensure_future(peer.adoption.adopt_orphans())
    await store.reached("set_metadata", "shards/").wait()
    store.fail_next("list", 1)  # the claim's listing of other generations, right after its CAS
    release.set()
    assert await adopting == 1
    assert peer.shards.get(name) is not None and peer.queue.get(j.id) is not None
