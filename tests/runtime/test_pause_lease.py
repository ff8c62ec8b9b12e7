"""A pause or resume answered by a silo whose lease has lapsed (paused by SIGSTOP, cut off from the
store): what a client was told by the shard's real owner holds (simulation, seed 349)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from cluster.model.jobs import ScheduledJob
from cluster.runtime.lease import LEASE_FRACTION
from cluster.runtime.membership import SILENT, Membership
from cluster.runtime.roles import Roles
from storage import MemoryStore
from tests.runtime.harness import (
    OPTIONS,
    Blocking,
    GatedStore,
    ManualClock,
    Recorder,
    add,
    fire_due,
    job,
    make_parts,
    until_idle,
)

LEASE_S = LEASE_FRACTION * OPTIONS.suspicion_timeout.total_seconds()


def lapse(parts: Roles) -> None:
    """Let ``parts``'s lease run out with no heartbeat: the silo was frozen meanwhile."""
    parts.clock.advance(LEASE_S + 0.5)  # type: ignore[attr-defined]
    assert not parts.lease.valid


async def _attempt_under_way_at_x() -> tuple[GatedStore, ManualClock, tuple[Roles, Roles, Roles], Blocking,
                                             ScheduledJob, str, asyncio.Future[None]]:
    """Three silos on one store and clock; X runs an attempt of a job recurring every 2 s (its
    next occurrence, +11 s, in the next shard), held in its handler: the store, the clock, the
    silos, the handler, the job, its shard and X's firing."""
    store, clock = GatedStore(), ManualClock()
    x, y, z = [await make_parts(store, name, clock=clock) for name in ("x", "y", "z")]
    slow = Blocking()
    x.transport.handlers["h"] = slow
    j = job(due=timedelta(seconds=9), schedule="@every 2s")
    (source,) = await add(x, j)
    clock.advance(9)
    x.lease.renew(clock.monotonic())
    firing = asyncio.ensure_future(fire_due(x))
    await slow.started.wait()
    return store, clock, (x, y, z), slow, j, source, firing


async def _x_frozen_z_takes_the_target_y_the_source(store: GatedStore, clock: ManualClock,
                                                     silos: tuple[Roles, Roles, Roles], first: str, source: str) -> None:
    """X is frozen past its lease and declared dead; Z claims the move's target ``first``, Y the
    ``source``, where it decides the move again (Z's target lacks the occurrence)."""
    x, y, z = silos
    lapse(x)  # SIGSTOP
    assert await Membership(store).declare_dead(x.me.row, SILENT)
    for peer in (y, z):
        peer.lease.renew(clock.monotonic())
    assert await z.adoption.claim_for_cancel(first) is not None
    assert await y.adoption.claim_for_cancel(source) is not None


async def test_a_silo_frozen_past_its_lease_sends_a_resume_to_the_owner_that_holds_the_pause() -> None:
    store = MemoryStore()
    frozen = await make_parts(store, "f")
    j = job(due=timedelta(seconds=2))
    (name,) = await add(frozen, j)
    lapse(frozen)  # SIGSTOP: no heartbeat, and the row stays unchanged until a peer declares it dead
    assert await Membership(store).declare_dead(frozen.me.row, SILENT)
    owner = await make_parts(store, "o")
    owner.transport.handlers["h"] = recorder = Recorder()
    assert await owner.adoption.adopt_orphans() == 1
    paused, record = await owner.pausing.pause(name, j.id, "INC-42", "ops")
    assert paused == "paused"

    # SIGCONT: a resume reaches the frozen silo before its heartbeat learns it was declared dead.
    # Its memory still shows the job unpaused; answering "not_paused" from it left the job
    # paused for good, though the client was told its pause took.
    answer = await frozen.pausing.resume(name, j.id)
    assert answer == ("not_owner", owner.me.owner)
    assert frozen.shards.get(name) is None and frozen.queue.get(j.id) is None  # lost: dropped, fires nothing
    assert await frozen.pausing.pause(name, j.id, None, "ops") == ("not_owner", owner.me.owner)

    assert await owner.pausing.pause(name, j.id, None, "ops") == ("already_paused", record)  # the pause held
    assert await owner.pausing.resume(name, j.id) == ("resumed", None)
    owner.clock.advance(2)  # type: ignore[attr-defined]
    owner.lease.renew(owner.clock.monotonic())
    await fire_due(owner)
    assert [ctx.job.id for ctx in recorder.ran] == [j.id]


async def test_a_silo_past_its_lease_that_still_owns_the_shard_answers_from_memory() -> None:
    # Cut off for a while, but not declared dead: nobody else may have written the shard, so
    # what memory says is still the truth, and the very copy held stays held and queued (not
    # claimed afresh, which would fence the outcomes of its runs in flight: run again).
    parts = await make_parts()
    j = job(due=timedelta(seconds=8))  # loaded: its window has begun
    (name,) = await add(parts, j)
    held = parts.shards.get(name)
    assert await parts.pausing.pause(name, j.id, None, "ops") == ("paused", [None, "ops", parts.clock.now_us()])
    lapse(parts)
    assert (await parts.pausing.pause(name, j.id, "again", "ops"))[0] == "already_paused"
    assert await parts.pausing.resume(name, j.id) == ("resumed", None)
    assert await parts.pausing.resume(name, j.id) == ("not_paused", None)
    assert parts.shards.get(name) is held and parts.queue.get(j.id) is not None


async def test_under_a_valid_lease_a_pause_or_resume_reads_nothing_to_answer() -> None:
    # The common case costs no store call: the lease is the proof that memory is the truth.
    store = GatedStore()
    parts = await make_parts(store)  # type: ignore[arg-type]
    j = job(due=timedelta(seconds=8))  # loaded: its window has begun
    (name,) = await add(parts, j)
    await parts.pausing.pause(name, j.id, None, "ops")
    store.fail_next("list", 1_000)
    store.fail_next("fetch", 1_000)
    assert (await parts.pausing.pause(name, j.id, None, "ops"))[0] == "already_paused"
    assert await parts.pausing.resume(name, j.id) == ("resumed", None)
    assert await parts.pausing.resume(name, j.id) == ("not_paused", None)


async def test_a_resume_that_waited_for_a_move_past_its_lease_is_sent_to_the_shard_s_new_owner() -> None:
    # Found by the simulation, seed 92363. A resume reached X while X held the shard, then waited
    # for the job's move to land (X's attempt outcome, adding the next occurrence into X's new
    # shard); X was frozen meanwhile and declared dead, Z took that target, Y took the source and,
    # finding the target without the occurrence, decided the move again into a shard of its own.
    # X's resume then answered "moved" from its lost copy of the source, to the first target:
    # there the client heard "absent", and the job stayed paused for good.
    store, clock, (x, y, z), slow, j, source, firing = await _attempt_under_way_at_x()
    release = store.gate("append_block", "shards/20300101T000010.000000Z-x")  # the ADD into X's target waits
    pausing = asyncio.ensure_future(x.pausing.pause(source, j.id, None, "ops"))
    await until_idle()
    slow.finish.set()
    assert (await pausing)[0] == "paused"
    await store.reached("append_block", "shards/20300101T000010.000000Z-x").wait()
    held = x.shards.get(source)
    assert held is not None and held.state is not None
    first = held.state.moved[j.id]
    resuming = asyncio.ensure_future(x.pausing.resume(source, j.id))  # waits for the move to land
    await until_idle()
    assert not resuming.done()

    await _x_frozen_z_takes_the_target_y_the_source(store, clock, (x, y, z), first, source)
    moved = await y.pausing.resume(source, j.id)
    assert moved[0] == "moved" and moved[1] != first

    release.set()  # SIGCONT: X's ADD is fenced, and so is its new decision in the source ...
    # ... once its heartbeat finds it declared dead: deciding again needs a fresh shard, which
    # it creates only under a valid lease (the rejoin's).
    await x.heartbeat.beat()
    assert await asyncio.wait_for(resuming, 5) == ("not_owner", y.me.owner)
    await asyncio.wait_for(firing, 5)
    assert await z.pausing.resume(first, j.id) == ("absent", None)
    assert await y.pausing.resume(moved[1], j.id) == ("resumed", None)


async def test_a_resume_that_found_a_move_decided_while_it_waited_sends_the_client_where_the_job_is() -> None:
    # Found by the simulation, seed 997178. A resume reached X while the job's attempt ran there:
    # nothing was moving yet, so it went straight for the shard's gate. The attempt ended meanwhile
    # and its outcome decided the move to the next occurrence; the resume got the gate while that
    # move's ADD was still on its way, and answered "moved" to its target from memory. X was then
    # declared dead, Z took the target before the ADD landed, and Y took the source and decided the
    # move again into a shard of its own: the client, sent to the first target, heard "absent" (a
    # JobNotFound from resume_job), and the job stayed paused for good where Y put it.
    store, clock, (x, y, z), slow, j, source, firing = await _attempt_under_way_at_x()
    silos = {parts.me.owner: parts for parts in (x, y, z)}
    pausing = asyncio.ensure_future(x.pausing.pause(source, j.id, None, "ops"))  # answers once the call ends
    await until_idle()
    held = x.shards.get(source)
    assert held is not None and held.state is not None and j.id in held.state.paused

    release = store.gate("append_block", "shards/20300101T000010.000000Z-x")  # the move's ADD waits
    holding, done = asyncio.Event(), asyncio.Event()

    async def busy_gate() -> None:  # a write of the source under way: the resume waits for the gate
        async with held.gate.shared():
            holding.set()
            await done.wait()

    busy = asyncio.ensure_future(busy_gate())
    await holding.wait()
    resuming = asyncio.ensure_future(x.pausing.resume(source, j.id))
    await until_idle()
    slow.finish.set()  # the attempt ends: its outcome decides the move, whose ADD waits at the store
    assert (await pausing)[0] == "paused"  # the move carries the pause
    await store.reached("append_block", "shards/20300101T000010.000000Z-x").wait()
    first = held.state.moved[j.id]
    done.set()
    await until_idle()

    await _x_frozen_z_takes_the_target_y_the_source(store, clock, (x, y, z), first, source)
    release.set()  # SIGCONT
    await x.heartbeat.beat()
    answer = await asyncio.wait_for(resuming, 5)
    await asyncio.wait_for(firing, 5)
    await busy

    # Followed as a client follows it (moves asked of the shard's creator, X; "not the owner" of
    # the owner named), the answer leads to the job, and resumes it.
    shard, silo = source, x
    for _ in range(6):
        if answer[0] == "moved":
            shard, silo = answer[1], x
        elif answer[0] == "not_owner":
            silo = silos[answer[1]]
        else:
            break
        answer = await silo.pausing.resume(shard, j.id)
    assert answer == ("resumed", None)
