"""Quarantine without Ray (issue 12, deliverable 2): restarts unrelated to a shard never hold its
jobs back; a shard whose owners die while it fires runs one job at a time and still fires every
job; the job that keeps killing its owners is parked, shown, and released by an operator."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from cluster.cli.jobs import _status_text
from cluster.runtime.membership import EXITED, Membership
from cluster.runtime.quarantine import FIRING_MANY, claimed_meta, digest
from cluster.runtime.roles import Roles
from cluster.runtime.shardlog import SHARD_PREFIX, ShardMeta, ShardState
from cluster.runtime.silo import Silo
from storage import MemoryStore, list_logs, read_log
from tests.runtime.harness import OPTIONS, LocalTransport, ManualClock, Recorder, add, fire_due, job, make_parts

LIMIT = OPTIONS.max_adopted_count  # owner deaths in a row that quarantine a shard, or park a job


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


async def test_a_shard_whose_owners_die_while_it_fires_is_quarantined_and_fires_every_job_one_at_a_time() -> None:
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
    await storm.fire(handler := Holder(hold=set()))
    assert sorted(handler.ran) == sorted(j.id for j in jobs)  # every job still fires ...
    assert handler.most_at_once == 1  # ... one at a time ...
    assert [len(batch) for _, batch in owner.transport.calls] == [1] * len(jobs)  # ... each alone in its call
    assert (await storm.meta(name)).firing == ""  # the lane ran dry: nothing in flight to blame


async def test_the_job_that_keeps_killing_its_owners_is_parked_and_every_other_job_fires() -> None:
    storm = await Storm.begin()
    killer = job(due=timedelta(seconds=1))
    others = [job(due=timedelta(seconds=1, milliseconds=100 * (i + 1))) for i in range(4)]
    (name, *_) = await add(storm.owner, killer, *others)
    storm.clock.advance(2)
    for _ in range(LIMIT):
        await storm.kill_while_firing(Holder())  # into quarantine; nobody knows which job it is
    fired: list[str] = []
    for deaths in range(1, LIMIT + 1):
        # The killer is first due: alone in flight, named in the shard's mark, when its owner dies.
        handler = Holder(hold={killer.id})
        owner = storm.owner
        if deaths > 1:
            await storm.fire(handler)  # the suspect waits out its back-off; the others fire meanwhile
            assert killer.id not in handler.ran
            storm.clock.advance(2 ** (deaths - 1) * 2)
        owner.transport.handlers["h"] = handler
        owner.lease.renew(storm.clock.monotonic())
        firing = asyncio.ensure_future(fire_due(owner))
        await asyncio.wait_for(handler.holding.wait(), 5)
        assert (await storm.meta(name)).firing == digest(killer.id)
        await storm.kill()
        handler.release.set()
        await firing
        fired += [j for j in handler.ran if j != killer.id]
    assert sorted(fired) == sorted(j.id for j in others)  # every other job fired, once
    owner = storm.owner
    shard = owner.shards.get(name)
    assert shard is not None and owner.quarantine.parked_jobs(shard) == [killer.id]
    assert killer.id not in owner.queue and owner.metrics.jobs_parked.value == 1
    storm.clock.advance(600)
    await storm.fire(recorder := Recorder())
    assert recorder.ran == []  # parked: not fired ...
    live = ShardState().replay((await read_log(storm.store, name)).records()).live
    assert list(live) == [killer.id]  # ... and not dropped: still live in its log

    released = await owner.quarantine.release(name)
    assert released == {"shard": name, "was_quarantined": True, "released_jobs": [killer.id]}
    assert owner.metrics.jobs_parked.value == 0 and owner.metrics.shards_quarantined.value == 0
    await storm.fire(recorder)
    assert [ctx.job.id for ctx in recorder.ran] == [killer.id]  # released: it fires (it behaves now)
    meta = await storm.meta(name)
    assert meta.deaths == 0 and meta.suspects == ()


async def test_status_shows_a_quarantined_shard_and_its_parked_job_and_the_silo_releases_it() -> None:
    storm = await Storm.begin()
    killer, other = job(due=timedelta(seconds=1)), job(due=timedelta(seconds=1, milliseconds=500))
    (name, _) = await add(storm.owner, killer, other)
    shard = storm.owner.shards.get(name)
    assert shard is not None
    # Written as owners dying during the killer's attempts would have left it (see the test above).
    await shard.set_meta(ShardMeta(**{**shard.meta.__dict__, "deaths": LIMIT, "suspects": ((digest(killer.id), LIMIT),)}))
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
        await silo.stop()


def test_a_claim_counts_a_death_only_if_the_owner_was_firing_and_blames_the_job_it_named() -> None:
    seen = ShardMeta("a#1", 0, 10)
    assert claimed_meta(seen, "b#1").deaths == 0  # idle
    assert claimed_meta(ShardMeta("-", 0, 10, firing=FIRING_MANY), "b#1").deaths == 0  # released on a graceful stop
    many = claimed_meta(ShardMeta("a#1", 0, 10, firing=FIRING_MANY, deaths=1), "b#1")
    assert (many.deaths, many.suspects, many.firing, many.owner) == (2, (), "", "b#1")
    alone = claimed_meta(ShardMeta("a#1", 0, 10, firing="abc", suspects=(("abc", 1),)), "b#1")
    assert (alone.deaths, alone.suspects) == (1, (("abc", 2),))
    assert ShardMeta.from_metadata(alone.to_metadata()) == alone  # survives the round trip through metadata
