"""Registry buckets owned by silos (issue 25 point 5; ``named_registry="buckets"``, the default), without Ray.

What a caller relies on: a put its bucket's owner acknowledged is there for the next owner, and
its job is durable; a bucket is taken over only once its owner is proven gone, on the shard's own
rule (released, or ended and its lease run out); an owner fenced meanwhile acknowledges nothing;
two puts of one free name never both win.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from cluster.model.errors import AlreadyExists, LeaseLapsed, PutInDoubt
from cluster.model.jobs import ScheduledJob
from cluster.model.options import ClusterOptions
from cluster.model.policies import FailurePolicy
from cluster.model.routing import SiloLost, SiloRefused
from cluster.model.wire import datetime_to_us
from cluster.named.bucket import BUCKET_PREFIX, BUCKETS, BucketState
from cluster.named.buckets import Buckets
from cluster.named.hooks import NamedJobHooks
from cluster.named.owned import OwnerCalls
from cluster.named.putwire import NotOwner, PutOutcome, outcome_from_wire, outcome_to_wire, put_from_wire, put_to_wire, resent_put
from cluster.named.registry import NAMED_MARK, REPLACES_MARK, Entry, entry_key
from cluster.named.routed import RoutedPuts
from cluster.named.writes import PutRequest
from cluster.runtime.membership import REPORTED, Membership
from cluster.runtime.roles import Roles
from cluster.runtime.shardlog import ADD, landed_ids
from storage import MemoryStore, Store, list_logs, read_log
from tests.runtime.harness import OPTIONS, T0, job, make_parts

COUNT = 4


def buckets_of(parts: Roles) -> Buckets:
    async def schedule(items: Sequence[tuple[str, int, bytes]]) -> list[str]:
        return await parts.scheduling.schedule(items)

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
    await a.heartbeat.leave()  # as a graceful stop does next
    b = await make_parts(store, "b")
    theirs = buckets_of(b)
    assert await theirs.take() == COUNT
    assert any(entry_key("ns", "app", "nightly") in bucket.state.entries for bucket in theirs.held.values())


class Silos:
    """Stands in for Ray: each silo's buckets answer ``feature_call("named_put", ...)`` as the silo does."""

    def __init__(self, **buckets: Buckets) -> None:
        self.buckets = buckets
        self.calls: list[str] = []
        self.fail_next: dict[str, Exception] = {}
        self.lose_next: set[str] = set()  # silos whose next answer is lost once computed
        self.answers: list[Any] = []

    async def _at_silo(self, silo_id: str, method: str, *args: Any) -> Any:
        assert method == "feature_call" and args[0] == "named_put"
        self.calls.append(silo_id)
        failure = self.fail_next.pop(silo_id, None)
        if failure is not None:
            raise failure
        outcomes = await self.buckets[silo_id].put_many([put_from_wire(one) for one in args[1]])
        answers = [outcome_to_wire(o) for o in outcomes]
        self.answers.append(answers)
        if silo_id in self.lose_next:
            self.lose_next.discard(silo_id)
            raise SiloLost("the answer was lost on its way back")
        return answers


async def test_a_put_follows_its_bucket_to_the_new_owner_and_one_lost_with_it_is_sent_again() -> None:
    store = MemoryStore()
    a = await make_parts(store, "a")
    mine = buckets_of(a)
    await mine.take()
    silos = Silos(a=mine)
    client = RoutedPuts(store, silos, COUNT)
    names = ["n1", "n2", "n3", "n4", "n5"]
    put = [ok(o) for o in await client.put_many([ask(n) for n in names])]
    assert silos.calls == ["a"] and {e.generation for e, _ in put} == {1}  # one call for the tick

    await mine.release_all()
    await a.heartbeat.leave()
    b = await make_parts(store, "b")
    silos.buckets["b"] = theirs = buckets_of(b)
    await theirs.take()
    moved = ok((await client.put_many([ask("n1")]))[0])  # the client still thinks a owns it
    assert silos.calls[1:] == ["a", "b"] and moved[0].generation == 2
    assert any(moved[0].key in bucket.state.entries for bucket in theirs.held.values())

    silos.fail_next["b"] = SiloRefused("starting")  # nothing done: sent again
    assert ok((await client.put_many([ask("n6")]))[0])[0].generation == 1
    silos.fail_next["b"] = SiloLost("cut off before it acted")  # done or not: sent again, marked
    made = ok((await client.put_many([ask("n7")]))[0])
    assert silos.calls[-2:] == ["b", "b"] and made[0].generation == 1

    for overwrite in (True, False):  # made, its answer lost: the resend answers that put, not another
        silos.lose_next.add("b")
        name = f"n8-{overwrite}"
        again = ok((await client.put_many([ask(name, overwrite=overwrite)]))[0])
        first = Entry.from_metadata(again[0].key, silos.answers[-2][0][1], "")  # what the lost answer said
        assert again[0].job_id == again[1].id == first.job_id and again[0].generation == 1
        assert (await theirs.put_many([ask(name, overwrite=True)]))[0][0].generation == 2  # type: ignore[index]


class View:
    """The silo as a hook sees it (``SiloView``), on ``parts``."""

    def __init__(self, parts: Roles, options: ClusterOptions) -> None:
        self.parts, self.options = parts, options
        self.owner, self.clock = parts.me.owner, parts.clock
        self.log_owner, self.lease = parts.adoption.owner, parts.lease

    async def schedule(self, jobs: Sequence[tuple[str, int, bytes]], suspects: Sequence[str] = ()) -> list[str]:
        return await self.parts.scheduling.schedule(jobs, suspects)

    async def cancel(self, shard_base: str, job_id: str) -> Any:
        return await self.parts.cancelling.cancel(shard_base, job_id)


async def test_only_a_cluster_on_entries_keeps_no_buckets() -> None:
    store = MemoryStore()
    a = await make_parts(store, "a")
    entries = NamedJobHooks(store, View(a, ClusterOptions(named_registry="entries")))
    await entries.maintain()
    assert await list_logs(store, BUCKET_PREFIX) == [] and entries.service("named_put") is None

    a.lease.renew(a.clock.monotonic())
    opted = NamedJobHooks(store, View(a, ClusterOptions()))  # the default
    await opted.maintain()
    assert len(await list_logs(store, BUCKET_PREFIX)) == BUCKETS
    serve = opted.service("named_put")
    assert serve is not None
    (answer,) = await serve([put_to_wire(ask("nightly"))])
    assert answer[0] == "made"


@pytest.mark.parametrize("seed", range(3))
async def test_concurrent_puts_and_deletes_naming_the_same_names_in_any_order_all_end(seed: int) -> None:
    """Two calls naming the same two names in opposite orders: each held the first while it
    waited for the second (a put of it in progress), and neither ever ended."""
    rng = random.Random(f"bucket-order/{seed}")
    store = MemoryStore()
    a = await make_parts(store, "a")
    mine = buckets_of(a)
    real = mine._schedule

    async def slow(jobs: Sequence[ScheduledJob]) -> list[str]:  # a round stays in progress a while
        await asyncio.sleep(rng.random() * 0.003)
        return await real(jobs)

    mine._schedule = slow
    await mine.take()
    owner = OwnerCalls(mine)
    names = [f"k{i}" for i in range(5)]

    async def one() -> None:
        await asyncio.sleep(rng.random() * 0.003)
        keys = rng.sample(names, 3)
        if rng.random() < 0.7:
            await mine.put_many([ask(k) for k in keys])
            return
        sent = []
        for key in (entry_key("ns", "app", k) for k in keys):
            current = mine.held[mine.bucket_for(key)].state.entries.get(key)
            sent.append((key, "-" if current is None else current.job_id))
        await owner.deletes(sent)

    await asyncio.wait_for(asyncio.gather(*(one() for _ in range(60))), 30)


async def test_a_silo_declared_dead_takes_back_its_earlier_incarnation_s_buckets_once_it_is_proven_gone() -> None:
    """Found by the simulator (seed 9 of ``--faults default,+buckets``): buckets held in memory
    under an earlier incarnation counted toward the fair share of the rejoined one, so every
    silo was "full" and a bucket named for the old incarnation was never taken: every call for
    its names answered "not the owner" for good."""
    store = MemoryStore()
    a = await make_parts(store, "a")
    mine = buckets_of(a)
    assert await mine.take() == COUNT
    await Membership(store).declare_dead(a.me.row, REPORTED)  # a peer's verdict while a was cut off
    await a.heartbeat.beat()  # a learns it and joins again as a new incarnation
    assert a.me.owner == "a#2"
    assert await mine.take() == 0  # the first incarnation may still write until its lease runs out
    a.clock.advance(OPTIONS.firing_lease.total_seconds())
    a.lease.renew(a.clock.monotonic())
    assert await mine.take() == COUNT
    assert {head.metadata["owner"] for head in await list_logs(store, BUCKET_PREFIX)} == {"a#2"}
    ok((await mine.put_many([ask("nightly")]))[0])


async def test_a_bucket_whose_log_names_this_very_silo_is_taken_back_whatever_its_share() -> None:
    """Found by the simulator (seed 525 of ``--faults default,+buckets``): a bucket dropped from
    memory (an append failed) while its log still named this silo was not taken back once the
    silo held its fair share; no peer takes a live owner's bucket, so the names in it had no
    answer for good, and a due occurrence of a named job waited for its verdict forever."""
    store = MemoryStore()
    a = await make_parts(store, "a")
    mine = buckets_of(a)
    assert await mine.take() == COUNT
    b = await make_parts(store, "b")  # alive: a's fair share is now half the buckets
    assert await buckets_of(b).take() == 0
    dropped = mine.held[3]
    mine.drop(dropped, "an append failed")  # its log still names a
    assert len(mine.held) > 2
    assert await mine.take() == 1
    assert 3 in mine.held and await mine.answering(3) is not None


async def test_a_delete_is_refused_while_the_entry_lists_a_run_its_caller_did_not_cancel() -> None:
    """Found by the simulator (seed 1181 of ``--faults default,+buckets``): a triggered run
    admitted between a delete's read of the entry and its delete at the owner was listed to
    retire, but the delete, which had not cancelled it, was carried out, and the run started
    after ``delete`` returned."""
    store = MemoryStore()
    a = await make_parts(store, "a")
    mine = buckets_of(a)
    await mine.take()
    owner = OwnerCalls(mine)
    entry, generation = ok((await mine.put_many([ask("nightly")]))[0])
    read = entry.retire  # what the delete read and cancelled: nothing to retire yet
    run = [generation.id + ".t1", entry.shard, entry.due_us]
    assert await owner.triggers([(entry.key, generation.id, run, ("p",))]) == [("ok",)]  # admitted meanwhile
    (answer,) = await owner.deletes([(entry.key, generation.id, [r.job_id for r in read])])
    assert answer[0] == "changed" and run[0] in answer[1]["retire"]
    (answer,) = await owner.deletes([(entry.key, generation.id, [run[0]])])  # the run cancelled too
    assert answer == ("deleted",)


async def test_what_an_owner_holds_and_answers_after_its_puts_is_what_its_log_replays_to() -> None:
    """Memory takes a put's entry as built, not parsed back from the record it appends, and the
    answer reuses that record's metadata and the job as packed: each must be what a reader of
    the log (the next owner) and of the answer (the caller) gets."""
    store = MemoryStore()
    a = await make_parts(store, "a")
    mine = buckets_of(a)
    await mine.take()
    owner = OwnerCalls(mine)
    names = [f"n{i}" for i in range(12)]
    # As a sender of an earlier release puts (no ``brief``): each answer in full.
    first = await owner.puts([put_to_wire(ask(name))[:8] for name in names])
    again = await owner.puts([put_to_wire(ask(name))[:8] for name in names[:5]])  # overwrites: retire lists
    held = {key: e for bucket in mine.held.values() for key, e in bucket.state.entries.items()}
    replayed = {}
    for bucket in mine.held.values():
        replayed.update(BucketState().replay((await read_log(store, bucket.base)).records()).entries)
    assert len(held) == len(names) and held == replayed
    for answer, name in zip([*again, *first[5:]], [*names[:5], *names[5:]], strict=True):
        entry, made = ok(outcome_from_wire(answer, ask(name)))
        assert entry == held[entry.key]
        (added,) = [op[3] for op in (await read_log(store, entry.shard)).records() if op[0] == ADD and op[1] == made.id]
        assert answer == ("ok", held[entry.key].metadata(), added)  # the job as its shard holds it


async def test_no_name_points_at_a_job_before_the_job_is_durable_whatever_puts_run_beside_it() -> None:
    """The order a put's two writes keep (its record written beside its job's ADD, an owner
    dying in between leaves a name pointing at a job that never landed, or one that landed,
    ran and was compacted, which the next owner adds again: simulator seed 361249)."""
    store = MemoryStore()
    a = await make_parts(store, "a")
    a.lease.renew(a.clock.monotonic())
    named_early: set[str] = set()  # jobs a PUT record named (in memory, or on its way) before their ADD
    release, scheduling = asyncio.Event(), asyncio.Event()
    mine: Buckets

    async def schedule(items: Sequence[tuple[str, int, bytes]]) -> list[str]:
        ids = {job_id for job_id, _, _ in items}
        named_early.update({e.job_id for b in mine.held.values() for e in b.state.entries.values()} & ids)
        scheduling.set()
        await release.wait()
        named_early.update({e.job_id for b in mine.held.values() for e in b.state.entries.values()} & ids)
        return await a.scheduling.schedule(items)

    mine = Buckets(store, a.adoption.owner, a.lease, COUNT, schedule)
    await mine.take()
    puts = [asyncio.ensure_future(mine.put_many([ask(name), ask(f"{name}-too")])) for name in ("one", "two", "three")]
    await scheduling.wait()
    for _ in range(10):
        await asyncio.sleep(0)
    release.set()
    answers = [ok(o) for t in puts for o in await t]
    assert not named_early
    for entry, made in answers:
        assert await durable(store, entry.shard, made.id)


async def test_a_round_of_puts_does_not_wait_out_its_shards_linger() -> None:
    """The owner's round is a batch already (its callers gathered per tick): lingering for more
    before writing its jobs only delayed every put of it by the shard's linger."""
    options = dataclasses.replace(OPTIONS, group_commit_linger="5s")  # far past the wait allowed below
    a = await make_parts(MemoryStore(), "a", options=options)
    mine = buckets_of(a)
    await mine.take()
    answers = await asyncio.wait_for(mine.put_many([ask("nightly"), ask("hourly")]), 1.0)
    for entry, made in map(ok, answers):
        assert await durable(a.store, entry.shard, made.id)


def shaped(name: str, shape: int) -> PutRequest:
    """A put of ``name`` whose job has one of a few shapes: plain, recurring with data, bounded and jittered."""
    key = entry_key("ns", "app", name)
    extra: list[dict[str, Any]] = [
        {},
        {"schedule": "@every 1h", "data": {"n": [1, 2.5, "x"], "b": b"raw"}, "ttl": timedelta(days=3)},
        {"schedule": "@every 2h", "jitter": timedelta(seconds=30), "not_after": T0 + timedelta(days=9), "overlap": "skip",
         "failure_policy": FailurePolicy.constant(timedelta(seconds=5), 3)},
    ]
    j = job(due=timedelta(days=1), metadata={NAMED_MARK: key, "team": "ops"}, **extra[shape % len(extra)])
    return PutRequest(key, name, "app", "ns", j, True, datetime_to_us(T0))


async def test_a_brief_answer_reads_as_the_full_one_whatever_the_job() -> None:
    """A client reads a made put's brief answer by rebuilding its entry and job from what it
    sent: they must be what the full answer (the owner's record and the job its shard holds) says."""
    store = MemoryStore()
    a = await make_parts(store, "a")
    mine = buckets_of(a)
    await mine.take()
    owner = OwnerCalls(mine)
    asks = [shaped(f"n{i}", i) for i in range(6)]
    for round_ in range(2):  # the second overwrites: a replaced job and a retire list
        sent = [put_to_wire(replace(one, try_id=f"{round_}-{one.try_id}")) for one in asks]
        sent[-1] = resent_put(sent[-1])  # a resend finding no trace of its first send: made under a fresh id
        brief = await owner.puts(sent)
        assert [answer[0] for answer in brief] == ["made"] * len(asks)
        for answer, one, wire in zip(brief, asks, sent, strict=True):
            sender = put_from_wire(wire)
            entry, made = ok(outcome_from_wire(answer, replace(one, job=sender.job, try_id=sender.try_id)))
            held = mine.held[mine.bucket_for(one.key)].state.entries[one.key]
            assert entry == replace(held, definition=None)
            (added,) = [op[3] for op in (await read_log(store, entry.shard)).records() if op[0] == ADD and op[1] == made.id]
            full_entry, full_job = ok(outcome_from_wire(("ok", held.metadata(), added), one))
            assert made == full_job and entry == replace(full_entry, definition=None)
            assert (made.generation, bool(entry.retire)) == (round_ + 1, round_ == 1)
        assert made.id == entry.job_id != sender.try_id  # the last one: the resend


async def test_a_put_its_owner_refused_for_a_lapsed_lease_is_sent_again_and_made_once() -> None:
    """A starved owner's lease lapsed as it scheduled a round: nothing of the round was written,
    so the put is asked again (once the lease is renewed) instead of failing the caller with
    ClusterUnavailable (seen in tests/e2e/test_named.py on two busy cores)."""
    store = MemoryStore()
    a = await make_parts(store, "a")
    mine = buckets_of(a)
    real = mine._schedule
    refused: list[int] = []

    async def lapsing(items: Sequence[tuple[str, int, bytes]]) -> list[str]:
        if not refused:
            refused.append(len(items))
            raise LeaseLapsed("a#1's lease lapsed and was not renewed in time to create a shard")
        return await real(items)

    mine._schedule = lapsing
    await mine.take()
    silos = Silos(a=mine)
    client = RoutedPuts(store, silos, COUNT)
    entry, made = ok((await client.put_many([ask("nightly")]))[0])
    assert refused == [1] and silos.calls == ["a", "a"]  # refused, then made on the next try
    assert entry.generation == 1 and await durable(store, entry.shard, made.id)
    assert [op[1] for op in (await read_log(store, entry.shard)).records() if op[0] == ADD] == [made.id]
