"""Issue 12, point 3: a recurring job's move to its next window is one durable decision, so
failover in the middle of it leaves exactly one chain, and a cancel that returned True holds."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta

from cluster.model.jobs import ScheduledJob
from cluster.model.wire import pack, timedelta_to_us
from cluster.runtime.membership import SILENT, Membership
from cluster.runtime.roles import Roles
from cluster.runtime.shardlog import (
    JOB,
    MOVED,
    SHARD_PREFIX,
    SUCCEEDED,
    add_op,
    remove_op,
    window_of,
)
from storage import MemoryStore, list_logs
from storage.generations import generation_name
from tests.runtime.harness import (
    OPTIONS,
    T0_US,
    Blocking,
    GatedStore,
    ManualClock,
    Recorder,
    add,
    fire_due,
    job,
    live_copies,
    make_parts,
    until_idle,
)


async def two_silos() -> tuple[GatedStore, ManualClock, Roles, Roles]:
    store, clock = GatedStore(), ManualClock()
    x = await make_parts(store, "x", clock=clock)
    y = await make_parts(store, "y", clock=clock)
    for parts in (x, y):
        parts.transport.handlers["h"] = Recorder()
    return store, clock, x, y


async def fire(parts: Roles) -> None:
    parts.lease.renew(parts.clock.monotonic())
    await fire_due(parts)


async def adopt_midway(store: GatedStore, x: Roles, y: Roles, name: str) -> asyncio.Future[None]:
    """X's attempt ends and its write into the current shard waits; X is declared dead meanwhile
    and Y adopts that shard. Returns X's firing, still under way."""
    release = store.gate("append_block", name)
    firing = asyncio.ensure_future(fire(x))
    await store.reached("append_block", name).wait()
    await Membership(store).declare_dead(x.me.row, SILENT)
    assert await y.adoption.adopt_orphans() >= 1
    release.set()
    await firing
    return firing


async def test_a_move_interrupted_by_an_adoption_leaves_one_chain() -> None:
    store, clock, x, y = await two_silos()
    j = job(due=timedelta(seconds=9), schedule="@every 5s")
    (name,) = await add(x, j)
    clock.advance(9)
    await adopt_midway(store, x, y, name)
    await fire(y)  # the adopter runs what the log still shows
    assert len(await live_copies(store, j.id)) == 1
    for _ in range(3):  # and it stays one chain, period after period
        clock.advance(5)
        await y.adoption.adopt_orphans()
        await y.loading.load_due()
        await fire(y)
    assert [occ for _, occ in await live_copies(store, j.id)] == [5]


async def test_a_cancel_that_returned_true_holds_after_a_move_was_interrupted() -> None:
    store, clock, x, y = await two_silos()
    j = job(due=timedelta(seconds=9), schedule="@every 5s")
    (name,) = await add(x, j)
    clock.advance(9)
    await adopt_midway(store, x, y, name)
    await fire(y)
    shard, answer = name, ""
    for _ in range(4):  # what Client.try_cancel_job does: follow the forwards
        answer, info = await y.cancelling.cancel(shard, j.id)
        if answer != "moved":
            break
        shard = info
    assert answer == "cancelled"
    assert await live_copies(store, j.id) == []


async def test_a_move_whose_add_landed_but_lost_its_answer_leaves_one_chain() -> None:
    inner, clock = MemoryStore(), ManualClock()
    seen_by_x = GatedStore(inner)  # the faults hit X alone: Y's claim reads the same log unharmed
    store = GatedStore(inner)
    x, y = await make_parts(seen_by_x, "x", clock=clock), await make_parts(store, "y", clock=clock)
    for parts in (x, y):
        parts.transport.handlers["h"] = Recorder()
    j = job(due=timedelta(seconds=9), schedule="@every 20s")  # the next window is dormant: not adopted with this one
    (name,) = await add(x, j)
    clock.advance(9)
    seen_by_x.lose_answer("append_block", 1)  # the first write of the move lands, its answer is lost
    seen_by_x.fail_next("fetch", 9)  # ... and the writer cannot read back whether it landed
    firing = asyncio.ensure_future(fire(x))
    await until_idle()
    await Membership(store).declare_dead(x.me.row, SILENT)  # X stalls while retrying: declared dead
    assert await y.adoption.adopt_orphans() == 1
    await fire(y)
    assert len(await live_copies(store, j.id)) == 1
    # X learns it was fenced at its next retry, though it still cannot read the log back: the
    # shard is dropped and the run's slot freed. Before the fix X retried until the reads came
    # back (half a minute of backoff here; for good if they never do).
    await asyncio.wait_for(firing, 5)
    assert x.shards.get(name) is None and not x.runs.inflight
    assert len(await live_copies(store, j.id)) == 1


async def test_a_move_whose_second_write_failed_in_the_store_leaves_one_chain() -> None:
    store, clock, x, y = await two_silos()
    j = job(due=timedelta(seconds=9), schedule="@every 20s")  # the next window is dormant: not adopted with this one
    (name,) = await add(x, j)
    clock.advance(9)
    release = store.gate("append_block", name)
    firing = asyncio.ensure_future(fire(x))
    await store.reached("append_block", name).wait()
    store.fail_next("append_block", 1)  # the write into the current shard fails: X retries later
    release.set()
    await until_idle()
    await Membership(store).declare_dead(x.me.row, SILENT)
    assert await y.adoption.adopt_orphans() >= 1
    await fire(y)
    await asyncio.wait_for(firing, 10)
    assert len(await live_copies(store, j.id)) == 1


async def test_a_cancel_that_settles_a_move_whose_next_occurrence_runs_starts_no_second_run() -> None:
    """Found by the simulation, seed 30091: a silo adopting a shard settles the moves decided in it;
    a cancel of a moved job reaching that shard meanwhile settled the move too, found the next
    occurrence already in its target (running there) and queued it again: the occurrence
    started a second time while its first run went on, and the cancel was told "moved" all the same."""
    store, clock, x, y = await two_silos()
    slow = Blocking()
    y.transport.handlers["h"] = slow
    j = job(due=timedelta(seconds=9), schedule="@every 5s")
    (source,) = await add(x, j)
    clock.advance(9)
    await fire(x)  # occurrence 1 runs on X and moves to the next window's shard
    ((target, occurrence),) = await live_copies(store, j.id)
    assert occurrence == 2
    await Membership(store).declare_dead(x.me.row, SILENT)
    there = await y.adoption.claim_for_cancel(target)  # Y adopts the target first
    assert there is not None
    clock.advance(5)
    y.lease.renew(clock.monotonic())
    y.firing.dispatch(y.queue.pop_due(limit=10))
    await slow.started.wait()  # occurrence 2 runs on Y
    held, free = asyncio.Event(), asyncio.Event()

    async def writer_in_progress() -> None:  # holding the target, as a cancel of another of its jobs does
        async with there.gate.exclusive():
            held.set()
            await free.wait()

    holder = asyncio.ensure_future(writer_in_progress())
    await held.wait()
    claiming = asyncio.ensure_future(y.adoption.claim_for_cancel(source))  # settles its move: waits for the target
    await until_idle()
    here = y.shards.get(source)
    assert here is not None and here.state is not None and j.id in here.state.pending
    cancelling = asyncio.ensure_future(y.cancelling.cancel(source, j.id))  # a client's cancel, meanwhile
    await until_idle()
    free.set()
    await holder
    assert await claiming is here
    assert await cancelling == ("moved", target)
    y.firing.dispatch(y.queue.pop_due(limit=10))
    await until_idle()
    assert slow.ran == [2]  # one run of the occurrence at a time
    following = asyncio.ensure_future(y.cancelling.cancel(target, j.id))  # the client follows the forward
    await until_idle()
    slow.finish.set()
    assert await following == ("cancelled", None)
    while y.runs.inflight:  # noqa: ASYNC110  the run's outcome ends on its own
        await asyncio.sleep(0.001)
    assert slow.ran == [2]
    assert await live_copies(store, j.id) == []


async def test_a_move_decided_again_in_a_rotation_that_failed_after_its_commit_leaves_one_chain() -> None:
    """Found by the simulation (torn_logs, seed 1829). The source's log rotates with the write
    that decides the move again, away from a target proven not to hold it; the rotation commits,
    then its last step fails. Its write was reported failed and taken back from memory although
    the new generation held it, so the owner carried out the old decision, into the first target
    (its own by then), and whoever took the source over next carried out the new one too."""
    inner, clock = MemoryStore(), ManualClock()
    store = GatedStore(inner)
    options = dataclasses.replace(OPTIONS, max_blocks=2)  # the source's third write rotates its log
    x, y, z = [await make_parts(store, silo, clock=clock, options=options) for silo in "xyz"]
    for parts in (x, y, z):
        parts.transport.handlers["h"] = Recorder()
    j = job(due=timedelta(seconds=1), schedule="@every 12s")
    (name,) = await add(y, j)
    source = y.shards.get(name)
    assert source is not None and source.state is not None
    entry = source.state.live[j.id]
    nxt_due = T0_US + 13_000_000
    first = await x.shards.open_shard(window_of(nxt_due, timedelta_to_us(OPTIONS.shard_duration)))
    nxt = [nxt_due, entry[JOB], 2, 0, nxt_due]
    # What X would have decided had it run the job: the decision stands, its ADD never written.
    await source.write([remove_op(j.id, 1, MOVED, first.base, nxt)])
    clock.advance(6)  # the next window is within the lookahead: adoption takes X's shard there
    for alive in (y, z):  # a fresh shard is created only under a valid lease
        await alive.heartbeat.beat()
    finish = generation_name(name, 1)
    release = store.gate("set_metadata", finish)
    settling = asyncio.ensure_future(y.moves.settle(source, j.id))  # X alive: FIRST is read, not claimed
    await store.reached("set_metadata", finish).wait()  # the rotation committed; its last step waits
    await Membership(store).declare_dead(x.me.row, SILENT)
    assert await y.adoption.adopt_orphans() == 1  # Y takes X's shard, FIRST among it
    store.fail_next("set_metadata", 1, finish)
    release.set()
    await asyncio.wait_for(settling, 10)
    await Membership(store).declare_dead(y.me.row, SILENT)
    assert await z.adoption.adopt_orphans() >= 1  # Z takes the source over and settles what its log says
    copies = await live_copies(store, j.id)
    assert len(copies) == 1 and copies[0][0] != first.base, copies


async def test_a_move_decided_again_in_a_write_in_doubt_never_goes_back_to_the_first_target() -> None:
    """The write deciding the move again lands but loses its answer, and its writer cannot read
    back whether it landed: the decision is taken back from memory, which names the first target
    again though the log names the new one. Going back there (its own by then) made two chains."""
    inner, clock = MemoryStore(), ManualClock()
    store = GatedStore(inner)
    x, y, z = [await make_parts(store, silo, clock=clock) for silo in "xyz"]
    for parts in (x, y, z):
        parts.transport.handlers["h"] = Recorder()
    j = job(due=timedelta(seconds=1), schedule="@every 12s")
    (name,) = await add(y, j)
    source = y.shards.get(name)
    assert source is not None and source.state is not None
    nxt_due = T0_US + 13_000_000
    first = await x.shards.open_shard(window_of(nxt_due, timedelta_to_us(OPTIONS.shard_duration)))
    await source.write([remove_op(j.id, 1, MOVED, first.base, [nxt_due, source.state.live[j.id][JOB], 2, 0, nxt_due])])
    clock.advance(6)
    for alive in (y, z):  # a fresh shard is created only under a valid lease
        await alive.heartbeat.beat()
    release = store.gate("append_block", name)
    settling = asyncio.ensure_future(y.moves.settle(source, j.id))  # X alive: FIRST is read, not claimed
    await store.reached("append_block", name).wait()  # the decision to go elsewhere, on its way
    await Membership(store).declare_dead(x.me.row, SILENT)
    assert await y.adoption.adopt_orphans() == 1  # Y takes X's shard, FIRST among it
    store.lose_answer("append_block", 1)
    store.fail_next("fetch", 1, name)  # ... and its writer cannot read back that it landed
    release.set()
    await asyncio.wait_for(settling, 10)
    assert y.shards.get(name) is not source  # the writer learnt it had landed: Y took the source back
    await Membership(store).declare_dead(y.me.row, SILENT)
    await z.adoption.adopt_orphans()  # whoever holds the source next settles what its log says
    copies = await live_copies(store, j.id)
    assert len(copies) == 1 and copies[0][0] != first.base, copies


async def test_two_settles_of_one_move_at_once_leave_one_chain() -> None:
    """Found by the simulation, seed 9963: a silo claimed a shard and settled the moves decided in
    it; a cancel of a moved job reaching that shard meanwhile settled the same move. One settle
    was claiming the orphaned target; the other, refused the claim (its own silo's claim under
    way), read the target's log, found no ADD yet, took it as proof the move never landed and
    decided it again into a new shard. The first then wrote its ADD into the target: the cancel
    followed the job there and answered "cancelled", and the job ran on from the new shard."""
    store, clock, x, y = await two_silos()
    j = job(due=timedelta(seconds=1), schedule="@every 12s")
    (name,) = await add(y, j)
    source = y.shards.get(name)
    assert source is not None and source.state is not None
    entry = source.state.live[j.id]
    nxt_due = T0_US + 13_000_000
    first = await x.shards.open_shard(window_of(nxt_due, timedelta_to_us(OPTIONS.shard_duration)))
    # What X would have decided had it run the job: the decision stands, its ADD never written.
    await source.write([remove_op(j.id, 1, MOVED, first.base, [nxt_due, entry[JOB], 2, 0, nxt_due])])
    await Membership(store).declare_dead(x.me.row, SILENT)  # FIRST is an orphan: a settle claims it
    release = store.gate("set_metadata", first.base)
    settling = asyncio.ensure_future(y.moves.settle(source, j.id))
    await store.reached("set_metadata", first.base).wait()  # its claim of FIRST is under way
    again = asyncio.ensure_future(y.moves.settle(source, j.id))  # a cancel settles it too, meanwhile
    await until_idle()
    release.set()
    await asyncio.wait_for(asyncio.gather(settling, again), 10)
    assert await live_copies(store, j.id) == [(first.base, 2)]


async def chain_through_three_windows(store: GatedStore, clock: ManualClock, x: Roles) -> tuple[ScheduledJob, list[str]]:
    """A job whose three occurrences run on X from the shards of three windows, in turn: the
    first's shard moved it into the second's, that one into the third's, where it ended. The
    job and the three shards, their windows all past and drained (the last just held long
    enough to be deleted)."""
    j = job(due=timedelta(seconds=9), schedule="@every 10s", repeats=3)
    (first,) = await add(x, j)
    for step in (9, 10, 10):
        clock.advance(step)
        await x.loading.load_due()
        await fire(x)
    clock.advance(3)
    x.lease.renew(clock.monotonic())
    names = [s.base for s in x.shards]
    assert names[0] == first and len(names) == 3 and await live_copies(store, j.id) == []
    return j, names


async def test_a_move_target_lost_while_its_silo_deletes_drained_shards_stays_for_its_sources_next_owner() -> None:
    """Found by the simulation, seeds 101801 and 104021: a silo deleting its drained shards was
    declared dead while one delete was under way, and its table emptied. The next shard, already
    lost, bounded the round's listing by its own sources alone; the one after it, lost too, was
    the target of a move from that shard, which sorts past the bound: read as gone, so the target
    was deleted. The source's next owner found its move's decision in the log, its target gone,
    took it as a move that never landed and made it again: the occurrence, durably ended, ran a
    second time from a second chain."""
    store, clock, x, y = await two_silos()
    j, (first, second, third) = await chain_through_three_windows(store, clock, x)
    release = store.gate("delete", first)
    deleting = asyncio.ensure_future(x.loading.delete_drained())
    await store.reached("delete", first).wait()
    await Membership(store).declare_dead(x.me.row, SILENT)
    x.shards.drop_all("declared dead")  # as its heartbeat does on finding its row taken
    store.fail_next("delete", 1, prefix=first)  # the first shard stays: the second's source exists
    release.set()
    await asyncio.wait_for(deleting, 10)
    assert {h.base for h in await list_logs(store, SHARD_PREFIX)} == {first, second, third}

    await y.adoption.adopt_orphans()  # its claim of the second shard settles the move decided there
    assert y.shards.get(second) is not None
    clock.advance(1)
    await fire(y)
    assert [ctx.job.id for ctx in y.transport.handlers["h"].ran] == []
    assert await live_copies(store, j.id) == []


async def test_a_drained_target_whose_source_sorts_past_the_rounds_listing_is_kept() -> None:
    """A round of deletes lists the shards that exist once, up to the last source its shards named
    when it began. A move that lands in a drained shard while that listing is awaited (its
    occurrence overdue, run and ended at once), from a source sorting past that bound, must make
    the round look further, not read the source as gone: its decision looks for its proof here."""
    store, clock, x, _ = await two_silos()

    async def fire_beside(parts: Roles) -> None:  # fire_due waits for every run: one runs on here
        parts.lease.renew(parts.clock.monotonic())
        parts.firing.dispatch(parts.queue.pop_due(limit=parts.runs.room))
        await until_idle()

    blocked = x.transport.handlers["b"] = Blocking()
    await add(x, job("b", due=timedelta(seconds=5)))  # runs on, so the first shard stays: a source that exists
    j = job(due=timedelta(seconds=9), schedule="@every 10s", repeats=2)
    (first,) = await add(x, j)
    clock.advance(9)
    await fire_beside(x)  # moved into the next window's shard
    ((second, _),) = await live_copies(store, j.id)
    (third,) = await add(x, job(due=timedelta(seconds=25)))  # a shard made after the second
    clock.advance(10)
    await fire_beside(x)  # ends in the second shard, which sorts past the first
    clock.advance(6)
    await x.loading.load_due()
    await fire_beside(x)
    clock.advance(7)  # every window past; all three drained but the first, whose job runs on
    x.lease.renew(clock.monotonic())
    assert blocked.ran == [1] and await live_copies(store, j.id) == []
    target = x.shards.get(third)
    assert target is not None and target.state is not None and not target.state.live and not target.state.sources
    release = store.gate("list_page", SHARD_PREFIX)
    deleting = asyncio.ensure_future(x.loading.delete_drained())
    await asyncio.wait_for(store.reached("list_page", SHARD_PREFIX).wait(), 5)  # the second's source (the first) is looked for
    m = job(due=timedelta(seconds=21), job_id="m", schedule="@every 10s")
    due = T0_US + 21_000_000
    await target.write([add_op(m.id, due, pack(m.to_wire()), 2, 0, due, source=second)])
    await target.write([remove_op(m.id, 2, SUCCEEDED)])
    release.set()
    await asyncio.wait_for(deleting, 10)
    assert {h.base for h in await list_logs(store, SHARD_PREFIX)} >= {second, third}
