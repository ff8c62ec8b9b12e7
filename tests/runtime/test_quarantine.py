"""Quarantine without Ray (issue 12, deliverable 2): restarts unrelated to a shard never hold its
jobs back; a shard whose owners die while it fires runs its jobs in named batches, nearly as fast
as ever, and still fires every job; the job that keeps killing its owners is found by halving its
batch, parked, shown, and released by an operator."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from cluster.cli.jobs import _status_text
from cluster.model.wire import datetime_to_us
from cluster.runtime.firing import ADMIT_RETRY_US
from cluster.runtime.hooks import SiloHooks
from cluster.runtime.membership import EXITED, Membership
from cluster.runtime.quarantine import ALONE, BATCH, FIRING_MANY, MAX_SUSPECTS, batch_size, claimed_meta, digest
from cluster.runtime.roles import Roles
from cluster.runtime.shardlog import SHARD_PREFIX, ShardState
from cluster.runtime.shardmeta import ShardMeta
from cluster.runtime.silo import Silo
from storage import MemoryStore, list_logs, read_log
from storage.base import check_metadata
from tests.runtime.harness import (
    OPTIONS,
    LocalTransport,
    ManualClock,
    Recorder,
    add,
    fire_due,
    job,
    make_parts,
    until_idle,
)

LIMIT = OPTIONS.max_adopted_count  # owner deaths in a row that quarantine a shard, or park a job
PARKED = ALONE + LIMIT  # a suspicion that parks: LIMIT owners died while the job was alone in flight


class Holder:
    """A handler that records the jobs it ran and holds those in ``hold`` (all if None) until released."""

    def __init__(self, hold: set[str] | None = None) -> None:
        self.hold = hold
        self.ran: list[str] = []
        self.holding, self.release = asyncio.Event(), asyncio.Event()
        self.active = self.most_at_once = 0

    async def __call__(self, ctx) -> None:  # type: ignore[no-untyped-def]
        self.ran.append(ctx.job.id)
        self.active += 1
        self.most_at_once = max(self.most_at_once, self.active)
        try:
            if self.hold is None or ctx.job.id in self.hold:
                self.holding.set()
                await self.release.wait()
        finally:
            self.active -= 1


class Storm:
    """Silos on one store and one clock, each killed in turn and replaced by one that adopts."""

    def __init__(self, store: MemoryStore, clock: ManualClock, owner: Roles) -> None:
        self.store, self.clock, self.owner = store, clock, owner
        self.kills = 0

    @classmethod
    async def begin(cls) -> Storm:
        store, clock = MemoryStore(), ManualClock()
        return cls(store, clock, await make_parts(store, "s0", clock=clock))

    async def kill(self) -> Roles:
        """The owner dies (Ray restarts it elsewhere); a fresh silo adopts what it held."""
        await Membership(self.store).declare_dead(self.owner.me.row, EXITED)  # a SIGKILL Ray saw: proven gone
        self.kills += 1
        self.owner = await make_parts(self.store, f"s{self.kills}", clock=self.clock)
        assert await self.owner.adoption.adopt_orphans() == 1
        return self.owner

    async def fire(self, handler: object) -> None:
        """The owner fires what is due with ``handler``, to the end."""
        self.owner.transport.handlers["h"] = handler  # type: ignore[assignment]
        self.owner.lease.renew(self.clock.monotonic())
        await fire_due(self.owner)

    async def kill_while_firing(self, handler: Holder) -> None:
        """The owner fires what is due; it dies while ``handler`` holds an attempt; the next adopts."""
        owner = self.owner
        owner.transport.handlers["h"] = handler
        owner.lease.renew(self.clock.monotonic())
        firing = asyncio.ensure_future(fire_due(owner))
        await asyncio.wait_for(handler.holding.wait(), 5)
        await self.kill()
        handler.release.set()  # the dead owner's attempt ends; its outcome write is fenced
        await asyncio.wait_for(firing, 5)

    async def meta(self, name: str) -> ShardMeta:
        (head,) = [h for h in await list_logs(self.store, SHARD_PREFIX) if h.base == name]
        return ShardMeta.from_metadata(head.metadata)


async def test_owners_killed_one_after_another_while_idle_leave_every_job_to_fire() -> None:
    """The issue's loss: every adoption counted, so unrelated restarts poisoned a shard for good."""
    storm = await Storm.begin()
    jobs = [job(due=timedelta(seconds=3)) for _ in range(5)]
    (name, *_) = await add(storm.owner, *jobs)
    for _ in range(2 * LIMIT):  # a restart storm; nothing was firing at any of its kills
        await storm.kill()
    storm.clock.advance(3)
    await storm.fire(recorder := Recorder())
    assert sorted(ctx.job.id for ctx in recorder.ran) == sorted(j.id for j in jobs)
    meta = await storm.meta(name)
    assert meta.deaths == 0 and meta.adopted_count == 2 * LIMIT


async def test_an_owner_that_fired_and_went_idle_before_it_died_counts_for_nothing() -> None:
    storm = await Storm.begin()
    first, later = job(due=timedelta(seconds=1)), job(due=timedelta(seconds=4))
    (name, _) = await add(storm.owner, first, later)
    storm.clock.advance(1)
    await storm.fire(Recorder())
    assert (await storm.meta(name)).firing == FIRING_MANY  # marked before the batch left
    await storm.owner.quarantine.clear_idle()  # it fired during this round: the mark stays
    await storm.owner.quarantine.clear_idle()  # a whole round idle: cleared
    assert (await storm.meta(name)).firing == ""
    await storm.kill()
    assert (await storm.meta(name)).deaths == 0


async def test_a_shard_whose_owners_die_while_it_fires_is_quarantined_and_fires_every_job_in_a_named_batch() -> None:
    storm = await Storm.begin()
    jobs = [job(due=timedelta(seconds=1)) for _ in range(4)]
    (name, *_) = await add(storm.owner, *jobs)
    storm.clock.advance(1)
    for deaths in range(1, LIMIT + 1):
        await storm.kill_while_firing(Holder())  # each owner dies with the whole batch in flight
        assert (await storm.meta(name)).deaths == deaths
    owner = storm.owner
    shard = owner.shards.get(name)
    assert shard is not None and owner.quarantine.quarantined(shard)
    assert owner.metrics.shards_quarantined.value == 1
    handler = Holder(hold={jobs[-1].id})
    owner.transport.handlers["h"] = handler
    owner.lease.renew(storm.clock.monotonic())
    firing = asyncio.ensure_future(fire_due(owner))
    await asyncio.wait_for(handler.holding.wait(), 5)
    assert (await storm.meta(name)).firing == ",".join(sorted(digest(j.id) for j in jobs))  # the mark names the batch
    handler.release.set()
    await firing
    assert sorted(handler.ran) == sorted(j.id for j in jobs)  # every job still fires ...
    assert [len(batch) for _, batch in owner.transport.calls] == [len(jobs)]  # ... together, in one call
    assert (await storm.meta(name)).firing == ""  # the lane ran dry: nothing in flight to blame


class Calls:
    """Counts a store's metadata writes (each one a round trip; slow on Azure)."""

    def __init__(self, store: MemoryStore) -> None:
        self.writes = 0
        set_metadata = store.set_metadata

        async def counted(*args, **kw):  # type: ignore[no-untyped-def]
            self.writes += 1
            return await set_metadata(*args, **kw)

        store.set_metadata = counted  # type: ignore[method-assign]


async def quarantined(storm: Storm, name: str) -> None:
    """``LIMIT`` owners in a row die while the shard fires everything due (held): it is quarantined."""
    for _ in range(LIMIT):
        await storm.kill_while_firing(Holder())
    assert (await storm.meta(name)).deaths == LIMIT


def live_jobs(records: object) -> list[str]:
    return sorted(ShardState().replay(records).live)  # type: ignore[arg-type]


async def test_a_quarantined_shard_fires_its_due_jobs_in_batches_with_one_mark_write_each() -> None:
    """The drill's backlog: one handler call and one metadata write per job drained ~100 jobs/s on
    Azurite, below the load; a batch per call and a mark per batch keeps up."""
    storm = await Storm.begin()
    jobs = [job(due=timedelta(seconds=1, milliseconds=i)) for i in range(500)]
    (name, *_) = await add(storm.owner, *jobs)
    storm.clock.advance(2)
    await quarantined(storm, name)
    owner = storm.owner
    calls = Calls(storm.store)
    await storm.fire(recorder := Recorder())
    assert sorted(ctx.job.id for ctx in recorder.ran) == sorted(j.id for j in jobs)  # each once
    batches = [len(batch) for _, batch in owner.transport.calls]
    assert max(batches) <= BATCH and len(batches) <= -(-len(jobs) // BATCH) + 1
    assert calls.writes <= len(batches) + 1  # a mark per batch, and one clear when the lane ran dry
    assert live_jobs((await read_log(storm.store, name)).records()) == []
    meta = await storm.meta(name)
    assert (meta.firing, meta.suspects) == ("", ())


async def test_the_job_that_keeps_killing_its_owners_is_parked_and_every_other_job_fires() -> None:
    storm = await Storm.begin()
    jobs = [job(due=timedelta(seconds=1, milliseconds=i)) for i in range(200)]
    killer = jobs[137]
    (name, *_) = await add(storm.owner, *jobs)
    storm.clock.advance(2)
    deaths = 0
    fired: set[str] = set()
    while True:  # the owner dies whenever the killer is in flight
        handler = Holder(hold={killer.id})
        owner = storm.owner
        owner.transport.handlers["h"] = handler
        owner.lease.renew(storm.clock.monotonic())
        firing = asyncio.ensure_future(fire_due(owner))
        holding = asyncio.ensure_future(handler.holding.wait())
        await asyncio.wait([firing, holding], timeout=5, return_when=asyncio.FIRST_COMPLETED)
        holding.cancel()
        if not handler.holding.is_set():
            await firing
            fired |= set(handler.ran)
            break
        deaths += 1
        # The killer is found by halving its batch, then it kills LIMIT owners while alone.
        assert deaths <= LIMIT + ALONE + LIMIT, "the killer was never isolated"
        await storm.kill()
        handler.release.set()
        await asyncio.wait_for(firing, 5)
        fired |= set(handler.ran) - {killer.id}
        storm.clock.advance(600)  # past the back-off of a job that killed an owner while alone
    assert deaths > LIMIT
    assert fired == {j.id for j in jobs} - {killer.id}  # every other job fired ...
    owner = storm.owner
    shard = owner.shards.get(name)
    assert shard is not None and owner.quarantine.parked_jobs(shard) == [killer.id]  # ... no innocent is parked
    assert killer.id not in owner.queue and owner.metrics.jobs_parked.value == 1
    assert (await storm.meta(name)).suspects == ((digest(killer.id), PARKED),)  # the others were cleared
    storm.clock.advance(600)
    await storm.fire(recorder := Recorder())
    assert recorder.ran == []  # parked: not fired ...
    assert live_jobs((await read_log(storm.store, name)).records()) == [killer.id]  # ... and not dropped

    released = await owner.quarantine.release(name)
    assert released == {"shard": name, "was_quarantined": True, "released_jobs": [killer.id]}
    assert owner.metrics.jobs_parked.value == 0 and owner.metrics.shards_quarantined.value == 0
    await storm.fire(recorder)
    assert [ctx.job.id for ctx in recorder.ran] == [killer.id]  # released: it fires (it behaves now)
    assert live_jobs((await read_log(storm.store, name)).records()) == []
    meta = await storm.meta(name)
    assert meta.deaths == 0 and meta.suspects == ()


async def test_owners_killed_while_batches_without_a_killer_fly_park_nobody_and_lose_nothing() -> None:
    """A restart storm: busy shards' owners die mid-batch for reasons of their own, again and again."""
    storm = await Storm.begin()
    jobs = [job(due=timedelta(seconds=1, milliseconds=i)) for i in range(200)]
    (name, *_) = await add(storm.owner, *jobs)
    storm.clock.advance(2)
    await quarantined(storm, name)
    for _ in range(2 * PARKED):  # more unrelated deaths than it takes to park a killer
        await storm.kill_while_firing(Holder())  # dies while the lane's first batch is in flight
    meta = await storm.meta(name)
    assert meta.deaths == LIMIT + 2 * PARKED and meta.suspects  # blamed on batches, but ...
    assert max(count for _, count in meta.suspects) < ALONE  # ... nobody was ever alone at a death
    owner = storm.owner
    shard = owner.shards.get(name)
    assert shard is not None and owner.quarantine.parked_jobs(shard) == []
    await storm.fire(recorder := Recorder())
    assert sorted(ctx.job.id for ctx in recorder.ran) == sorted(j.id for j in jobs)  # nothing lost
    assert live_jobs((await read_log(storm.store, name)).records()) == []
    assert (await storm.meta(name)).suspects == ()  # each suspect's batch ended with its owner alive


class Inflow:
    """A handler during whose attempts time passes, so the shard's later jobs keep falling due."""

    def __init__(self, owner: Roles, clock: ManualClock, step_s: float) -> None:
        self.owner, self.clock, self.step_s = owner, clock, step_s
        self.ran: list[tuple[str, int]] = []  # (job, jobs still waiting in the queue when it ran)

    async def __call__(self, ctx) -> None:  # type: ignore[no-untyped-def]
        self.ran.append((ctx.job.id, len(self.owner.queue)))
        self.clock.advance(self.step_s)
        self.owner.firing.dispatch(self.owner.queue.pop_due(limit=self.owner.runs.room))  # the fire loop's turn


async def test_suspects_fire_while_new_jobs_keep_falling_due_in_their_shard() -> None:
    """The first Azurite storm with batches: 13 suspects waited 25 s, until the load stopped,
    because every batch went to the jobs under no suspicion, of which there always were more."""
    storm = await Storm.begin()
    early = [job(due=timedelta(seconds=1, milliseconds=i)) for i in range(10)]
    later = [job(due=timedelta(seconds=1, milliseconds=500 + 10 * i)) for i in range(200)]  # one per 10 ms
    (name, *_) = await add(storm.owner, *early, *later)
    storm.clock.advance(1.2)
    await quarantined(storm, name)
    await storm.kill_while_firing(Holder())  # the first named batch, the 10 early jobs, was in flight
    assert {d for d, _ in (await storm.meta(name)).suspects} == {digest(j.id) for j in early}
    storm.clock.advance(0.5)
    await storm.fire(inflow := Inflow(storm.owner, storm.clock, 0.01))
    waiting = dict(inflow.ran)
    assert sorted(waiting) == sorted(j.id for j in early + later)
    assert all(waiting[j.id] > 0 for j in early)  # the suspects ran while later jobs were still to fall due
    assert (await storm.meta(name)).suspects == ()
    assert live_jobs((await read_log(storm.store, name)).records()) == []


async def test_status_shows_a_quarantined_shard_and_its_parked_job_and_the_silo_releases_it() -> None:
    storm = await Storm.begin()
    killer, other = job(due=timedelta(seconds=1)), job(due=timedelta(seconds=1, milliseconds=500))
    (name, _) = await add(storm.owner, killer, other)
    shard = storm.owner.shards.get(name)
    assert shard is not None
    # Written as owners dying during the killer's attempts would have left it (see the test above).
    await shard.set_meta(ShardMeta(**{**shard.meta.__dict__, "deaths": LIMIT, "suspects": ((digest(killer.id), PARKED),)}))
    await Membership(storm.store).declare_dead(storm.owner.me.row, EXITED)
    transport = LocalTransport(handlers={"h": Recorder()})
    silo = Silo("s9", "memory://", OPTIONS, "test", hooks=lambda _store, _view: [], transport=transport,
                clock=storm.clock, store=storm.store)
    try:
        await silo.ready()  # adopts the shard on joining
        status = await silo.status()
        assert status["quarantined"] == [name] and status["parked"] == {name: [killer.id]}
        (described,) = status["shards"]
        assert described["quarantined"] and described["owner_deaths"] == LIMIT and described["parked"] == [killer.id]
        assert status["counters"]["shards_quarantined"] == 1 and status["counters"]["jobs_parked"] == 1
        text = _status_text({"namespace": "test", "store": "memory://", "silos": [status]})
        assert f"QUARANTINED shard {name}" in text and f"PARKED job {killer.id}" in text
        assert await silo.release_quarantine("shards/none") is None  # not held here
        released = await silo.release_quarantine(name)
        assert released is not None and released["released_jobs"] == [killer.id]
        status = await silo.status()
        assert status["quarantined"] == [] and status["parked"] == {}
    finally:
        # s0's process was seen gone, so its shard was taken at once, while what it sent ahead
        # may start until its lease ends: the stop releases the shard only then.
        storm.clock.advance(OPTIONS.suspicion_timeout.total_seconds())
        await silo.stop()


def test_a_claim_counts_a_death_only_if_the_owner_was_firing_and_blames_the_job_it_named() -> None:
    seen = ShardMeta("a#1", 0, 10)
    assert claimed_meta(seen, "b#1").deaths == 0  # idle
    assert claimed_meta(ShardMeta("-", 0, 10, firing=FIRING_MANY), "b#1").deaths == 0  # released on a graceful stop
    many = claimed_meta(ShardMeta("a#1", 0, 10, firing=FIRING_MANY, deaths=1), "b#1")
    assert (many.deaths, many.suspects, many.firing, many.owner) == (2, (), "", "b#1")
    alone = claimed_meta(ShardMeta("a#1", 0, 10, firing="abc", suspects=(("abc", 1),)), "b#1")
    assert (alone.deaths, alone.suspects) == (1, (("abc", ALONE + 1),))  # one death while alone in flight
    assert ShardMeta.from_metadata(alone.to_metadata()) == alone  # survives the round trip through metadata
    named = [digest(str(i)) for i in range(BATCH)]
    full = claimed_meta(ShardMeta("a#1", 0, 10, firing=",".join(named), suspects=((named[0], 2),)), "b#1")
    counts = dict(full.suspects)
    assert counts[named[0]] == 3 and {counts[d] for d in named[1:]} == {1}  # every job in the batch is suspect
    assert batch_size(1) == BATCH // 2 and batch_size(ALONE) == 1  # its next batch is half as large
    quarter = claimed_meta(ShardMeta("a#1", 0, 10, firing=",".join(named[:BATCH // 4])), "b#1")
    assert {batch_size(count) for _, count in quarter.suspects} == {BATCH // 8}


def test_the_largest_mark_and_suspect_list_fit_the_metadata_limit() -> None:
    """Azure keeps at most 8 KiB of metadata per blob: a full batch mark plus the most suspects fit."""
    worst = ShardMeta("silo-with-a-long-name-0123456789#123456", 10**15, 10**15, adopted_count=10**6,
                      generation=10**6, firing=",".join(digest(str(i)) for i in range(BATCH)), deaths=10**6,
                      suspects=tuple((digest(f"s{i}"), 99) for i in range(MAX_SUSPECTS)))
    check_metadata(worst.to_metadata())


class Undecided(SiloHooks):
    """A hook that cannot decide (a named job whose put is in doubt: its entry may yet name it);
    notes the virtual time of each attempt it is asked about."""

    def __init__(self) -> None:
        self.asked: list[int] = []

    async def admit(self, event: Any) -> bool | None:
        self.asked.append(datetime_to_us(event.scheduled_for))
        return None


@pytest.mark.parametrize("quarantined", [False, True])
async def test_an_attempt_a_hook_deferred_is_due_when_asked_again_in_quarantine_as_outside_it(quarantined: bool) -> None:
    """Simulator seed 366044 (every kind, 1.9 s ahead): a named job whose put was in doubt is
    deferred by its hook, asked again a second later, for good. In a quarantined shard its runs
    were due at the job's own time, 29 s before the end, and one was always in flight: the silo
    held an attempt that late, time and again, where outside quarantine it waits for its retry."""
    clock = ManualClock()
    ahead = replace(OPTIONS, dispatch_ahead=timedelta(seconds=1.9))  # wider than the retry's second
    parts = await make_parts(clock=clock, transport=LocalTransport(handlers={"h": Recorder()}, clock=clock),
                             options=ahead)
    parts.hooks.append(hook := Undecided())
    j = job(due=timedelta(seconds=1))
    (name,) = await add(parts, j)
    shard = parts.shards.get(name)
    assert shard is not None
    if quarantined:  # as owners dying while it fired leave it
        await shard.set_meta(replace(shard.meta, deaths=LIMIT))
    clock.advance(1.5)
    for _ in range(3):  # the fire loop takes it again at once: its retry is within the ahead window
        parts.lease.renew(clock.monotonic())
        parts.firing.dispatch(parts.firing.take_due(parts.runs.room))
        await until_idle()
        while parts.firing.busy:  # noqa: ASYNC110
            await asyncio.sleep(0.001)
    first, *again = hook.asked
    assert first == datetime_to_us(j.due)
    assert len(again) == 2 and all(due >= first + ADMIT_RETRY_US for due in again), [d - first for d in again]
