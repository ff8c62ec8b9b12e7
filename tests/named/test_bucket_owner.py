"""Registry buckets owned by silos (issue 25 point 5; opt-in ``named_registry="buckets"``), without Ray.

What a caller relies on: a put its bucket's owner acknowledged is there for the next owner, and
its job is durable; a bucket is taken over only once its owner is proven gone, on the shard's own
rule (released, or ended and its lease run out); an owner fenced meanwhile acknowledges nothing;
two puts of one free name never both win.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import timedelta

from cluster.model.errors import AlreadyExists, PutInDoubt
from cluster.model.jobs import ScheduledJob
from cluster.model.wire import datetime_to_us
from cluster.named.buckets import Buckets, NotOwner, PutOutcome
from cluster.named.registry import NAMED_MARK, REPLACES_MARK, Entry, entry_key
from cluster.named.writes import PutRequest
from cluster.runtime.membership import REPORTED, Membership
from cluster.runtime.roles import Roles
from cluster.runtime.shardlog import landed_ids
from storage import MemoryStore, Store, read_log
from tests.runtime.harness import OPTIONS, T0, item, job, make_parts

COUNT = 4


def buckets_of(parts: Roles) -> Buckets:
    async def schedule(jobs: Sequence[ScheduledJob]) -> list[str]:
        return await parts.scheduling.schedule([item(j) for j in jobs])

    parts.lease.renew(parts.clock.monotonic())
    return Buckets(parts.store, parts.adoption.owner, parts.lease, COUNT, schedule)


def ask(name: str, *, overwrite: bool = True) -> PutRequest:
    key = entry_key("ns", "app", name)
    j = job(due=timedelta(days=1), metadata={NAMED_MARK: key})
    return PutRequest(key, name, "app", "ns", j, overwrite, datetime_to_us(T0))


def ok(outcome: PutOutcome) -> tuple[Entry, ScheduledJob]:
    assert not isinstance(outcome, BaseException), outcome
    return outcome


async def durable(store: Store, shard: str, job_id: str) -> bool:
    return bool(landed_ids((await read_log(store, shard)).records(), {job_id}))


async def test_a_put_its_owner_acknowledged_is_the_next_owners_once_the_first_is_proven_gone() -> None:
    store = MemoryStore()
    a = await make_parts(store, "a")
    mine = buckets_of(a)
    assert await mine.take() == COUNT  # a new store: every bucket created, owned by a
    b = await make_parts(store, "b")
    theirs = buckets_of(b)
    assert await theirs.take() == 0  # a lives

    first = [ok(o) for o in await mine.put_many([ask("nightly"), ask("hourly"), ask("weekly")])]
    for entry, new in first:
        assert entry.generation == new.generation == 1 and await durable(store, entry.shard, new.id)
    (again,) = await mine.put_many([ask("nightly", overwrite=False)])
    assert isinstance(again, AlreadyExists)
    over = ok((await mine.put_many([ask("nightly")]))[0])
    old_job = first[0][1]
    assert over[0].generation == 2 and over[1].metadata[REPLACES_MARK] == old_job.id
    assert [r.job_id for r in over[0].retire] == [old_job.id]  # to cancel before the overwrite returns
    (elsewhere,) = await theirs.put_many([ask("monthly")])
    assert isinstance(elsewhere, NotOwner)

    await Membership(store).declare_dead(a.me.row, REPORTED)  # not proven gone: it may still write
    assert await theirs.take() == 0
    b.clock.advance(OPTIONS.firing_lease.total_seconds())  # its lease has run out by now
    assert await theirs.take() == COUNT
    held = {key: e for bucket in theirs.held.values() for key, e in bucket.state.entries.items()}
    acknowledged = {e.key: e.job_id for e, _ in (over, *first[1:])}
    assert {key: e.job_id for key, e in held.items()} == acknowledged

    (late,) = await mine.put_many([ask("yearly")])  # a, paused, still believes it owns its buckets
    assert isinstance(late, PutInDoubt)
    assert entry_key("ns", "app", "yearly") not in held
    assert mine.bucket_for(entry_key("ns", "app", "yearly")) not in mine.held  # fenced: it answers nothing more from it


async def test_two_puts_of_one_free_name_never_both_win() -> None:
    store = MemoryStore()
    a = await make_parts(store, "a")
    mine = buckets_of(a)
    await mine.take()
    outcomes = await asyncio.gather(mine.put_many([ask("nightly", overwrite=False)]),
                                    mine.put_many([ask("nightly", overwrite=False)]))
    kinds = sorted(type(o).__name__ for (o,) in outcomes)
    assert kinds == ["AlreadyExists", "tuple"]


async def test_a_released_bucket_is_taken_at_once() -> None:
    store = MemoryStore()
    a = await make_parts(store, "a")
    mine = buckets_of(a)
    await mine.take()
    await mine.put_many([ask("nightly")])
    assert await mine.release_all() == COUNT
    b = await make_parts(store, "b")
    theirs = buckets_of(b)
    assert await theirs.take() == COUNT
    assert any(entry_key("ns", "app", "nightly") in bucket.state.entries for bucket in theirs.held.values())
