"""A move's target is read as proof only once its old writer is fenced: a claim of the target in
doubt (failed in the store, or ours still under way) is no proof, and the move's settle waits.

Simulator seed 256531 (every kind): s1 fired a recurring job, decided its move into a fresh
shard of its own and paused with the ADD there on its way. s2 adopted the source, and its
claim of the target failed in the store; it read the target anyway, found no ADD, and decided
the move again into a shard of its own. s1 resumed, its ADD landed (nobody had fenced it), and
the next occurrence ran from both shards.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta

from cluster.model.attempt import JobContext
from cluster.runtime.membership import SILENT, Membership
from cluster.runtime.roles import Roles
from cluster.runtime.shardlog import SHARD_PREFIX, format_window
from tests.runtime.harness import T0_US, GatedStore, ManualClock, add, fire_due, job, live_copies, make_parts, until_idle

NEXT_WINDOW = f"{SHARD_PREFIX}{format_window(T0_US + 10_000_000)}"  # the shards the second occurrence moves into


class Occurrences:
    """Notes each occurrence that starts: what a handler sees, one entry per start."""

    def __init__(self) -> None:
        self.ran: list[int] = []

    async def __call__(self, ctx: JobContext) -> None:
        self.ran.append(ctx.occurrence)


async def fire(parts: Roles) -> None:
    parts.lease.renew(parts.clock.monotonic())
    await fire_due(parts)


@dataclass
class Stalled:
    """X stalled with a move's ADD on its way, declared dead; Y about to take over."""

    clock: ManualClock
    y: Roles
    ran: Occurrences  # Y's handler
    job_id: str
    source: str
    target: str
    add_held: asyncio.Event  # set: X's ADD goes on
    firing: asyncio.Future[None]  # X's firing, which waits on that ADD


async def x_moves_and_stalls(store: GatedStore) -> Stalled:
    """X runs a recurring job's first occurrence, decides its move into a fresh shard of the next
    window and stalls with the ADD there on its way; X is declared dead meanwhile."""
    clock = ManualClock()
    x, y = await make_parts(store, "x", clock=clock), await make_parts(store, "y", clock=clock)
    x.transport.handlers["h"] = Occurrences()
    y.transport.handlers["h"] = ran = Occurrences()
    j = job(due=timedelta(seconds=1), schedule="@every 12s")  # the next occurrence, at 13 s, is beyond the lookahead
    (source,) = await add(x, j)
    clock.advance(1)
    held = store.gate("append_block", NEXT_WINDOW)
    firing = asyncio.ensure_future(fire(x))
    await store.reached("append_block", NEXT_WINDOW).wait()  # X paused, its ADD on the way
    (target,) = [s.base for s in x.shards if s.base.startswith(NEXT_WINDOW)]
    await Membership(store).declare_dead(x.me.row, SILENT)
    await y.heartbeat.beat()  # a fresh shard is created only under a valid lease
    return Stalled(clock, y, ran, j.id, source, target, held, firing)


async def runs_of_the_next_occurrence(store: GatedStore, at: Stalled) -> list[int]:
    """One copy of the next occurrence in the store; and what Y's handler starts of it from every
    shard that holds it: first what Y holds once it is due, then what Y adopts after (a shard the
    settle left to X, an orphan). Y's queue holds one entry per job, so each is fired apart."""
    clock, y = at.clock, at.y
    assert [occurrence for _, occurrence in await live_copies(store, at.job_id)] == [2]  # one chain in the store
    clock.advance(12)
    await y.heartbeat.beat()
    await y.loading.load_due()
    await fire(y)
    await y.adoption.adopt_orphans()
    await fire(y)
    return at.ran.ran


async def test_a_move_target_whose_claim_failed_in_the_store_is_not_read_as_proof() -> None:
    store = GatedStore()
    at = await x_moves_and_stalls(store)
    store.fail_next("set_metadata", 1, at.target)  # Y's claim of the target fails: X is not fenced
    adopting = asyncio.ensure_future(at.y.adoption.adopt_orphans())  # Y takes the source, settles its move
    await until_idle()
    at.add_held.set()  # X resumes: its ADD lands in the target, unless a claim fenced it
    await asyncio.wait_for(at.firing, 10)
    assert await asyncio.wait_for(adopting, 10) == 1
    assert await runs_of_the_next_occurrence(store, at) == [2]  # once, from one chain


async def test_a_move_target_our_own_claim_is_taking_is_not_read_as_proof() -> None:
    """The same race where the claim in doubt is Y's own, under way for another reason (a cancel
    of one of the target's jobs, an adoption round) while Y's claim of the source settles the move."""
    store = GatedStore()
    at = await x_moves_and_stalls(store)
    claim_held = store.gate("set_metadata", at.target)
    claiming = asyncio.ensure_future(at.y.adoption.claim_for_cancel(at.target))
    await store.reached("set_metadata", at.target).wait()  # Y's claim of the target is under way
    adopting = asyncio.ensure_future(at.y.adoption.claim_for_cancel(at.source))  # Y takes the source, settles its move
    await until_idle()
    at.add_held.set()  # X's ADD lands before Y's claim of the target
    await asyncio.wait_for(at.firing, 10)
    claim_held.set()
    await asyncio.wait_for(claiming, 10)  # beaten by that ADD (the log changed since it looked): None
    assert await asyncio.wait_for(adopting, 10) is not None
    assert await runs_of_the_next_occurrence(store, at) == [2]
