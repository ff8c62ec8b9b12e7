"""Pause and resume without Ray (issue 16, point 1): a pause is a shard-log record that firing,
replay, adoption and moves honour; resume settles what was missed per the job's misfire policy."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from cluster.model.jobs import ScheduledJob
from cluster.model.wire import pack
from cluster.runtime.hooks import AttemptEvent, SiloHooks
from cluster.runtime.membership import EXITED, Membership
from cluster.runtime.roles import Roles
from cluster.runtime.shardlog import PAUSE, RESUME, ShardState, add_op, pause_op, remove_op, resume_op, why_unusable
from storage import MemoryStore, StorageError, read_log
from tests.runtime.harness import Blocking, GatedStore, Recorder, add, fire_due, job, make_parts, until_idle


async def fire_for(parts: Roles, seconds: int) -> None:
    """Let ``seconds`` pass one at a time, firing whatever comes due."""
    for _ in range(seconds):
        parts.clock.advance(1)
        parts.lease.renew(parts.clock.monotonic())
        await fire_due(parts)


async def records(parts: Roles, name: str) -> list[list]:
    return [op for op in (await read_log(parts.store, name)).records()]


async def test_a_paused_job_does_not_fire_and_an_overdue_one_shot_fires_at_once_on_resume() -> None:
    parts = await make_parts()
    parts.transport.handlers["h"] = recorder = Recorder()
    j = job(due=timedelta(seconds=2))
    (name,) = await add(parts, j)
    answer, record = await parts.pausing.pause(name, j.id, "db migration", "ops@host")
    assert answer == "paused" and record[:2] == ["db migration", "ops@host"]
    assert [PAUSE, j.id, "db migration", "ops@host"] in [op[:4] for op in await records(parts, name)]
    await fire_for(parts, 5)
    assert recorder.ran == []
    assert await parts.pausing.pause(name, j.id, "again", "x") == ("already_paused", record)  # the first pause holds
    assert await parts.pausing.resume(name, j.id) == ("resumed", None)
    assert parts.metrics.paused_occurrences.value == 1
    parts.lease.renew(parts.clock.monotonic())
    await fire_due(parts)  # no time passes: overdue, it fires at once
    assert [ctx.job.id for ctx in recorder.ran] == [j.id]
    assert await parts.pausing.resume(name, j.id) == ("absent", None)


async def test_a_pause_holds_when_another_silo_adopts_the_shard_and_resume_there_fires_it() -> None:
    store = MemoryStore()
    victim = await make_parts(store, "v")
    j = job(due=timedelta(seconds=2))
    (name,) = await add(victim, j)
    assert (await victim.pausing.pause(name, j.id, None, "ops"))[0] == "paused"
    await Membership(store).declare_dead(victim.me.row, EXITED)
    peer = await make_parts(store, "p")
    peer.transport.handlers["h"] = recorder = Recorder()
    assert await peer.adoption.adopt_orphans() == 1
    assert peer.queue.get(j.id) is None  # replayed, paused: not queued
    await fire_for(peer, 5)
    assert recorder.ran == []
    third = await make_parts(store, "t")  # a silo that does not hold it names its owner now
    assert await third.pausing.resume(name, j.id) == ("not_owner", "p#1")
    assert await peer.pausing.resume(name, j.id) == ("resumed", None)
    peer.lease.renew(peer.clock.monotonic())
    await fire_due(peer)
    assert [ctx.job.id for ctx in recorder.ran] == [j.id]


def test_replay_and_snapshot_keep_a_pause_and_a_removal_or_resume_ends_it() -> None:
    ops = [add_op("a", 10, b"A"), add_op("b", 10, b"B"), pause_op("a", "n", "by", 5), pause_op("b", None, "by", 6),
           pause_op("gone", None, "by", 7)]
    state = ShardState().replay([list(op) for op in ops])
    assert state.paused == {"a": ["n", "by", 5], "b": [None, "by", 6]}  # a pause of a job not here: nothing
    again = ShardState().replay(state.snapshot())
    assert again.paused == state.paused and set(again.live) == {"a", "b"}
    again.replay([add_op("a", 20, b"A", 2), remove_op("b", 1, "cancelled")])  # the next occurrence stays paused
    assert again.paused == {"a": ["n", "by", 5]}
    again.replay([resume_op("a")])
    assert again.paused == {} and len(again.snapshot()[0]) == 5  # no pause: the snapshot reads as before
    for bad in ([PAUSE, "a", 3, "by", 5], [PAUSE, "a", None, None, 5], [RESUME], [PAUSE, "a", None, "by"]):
        assert why_unusable(bad) is not None


def test_a_failed_pause_write_is_taken_back_in_memory() -> None:
    state = ShardState().replay([add_op("a", 10, b"A"), pause_op("b", None, "x", 1)])
    touched, before = state.apply_undoably([pause_op("a", None, "x", 1)])
    assert "a" in state.paused
    state.undo(before, touched)
    assert state.paused == {}
    state.replay([pause_op("a", "first", "x", 1)])
    touched, before = state.apply_undoably([resume_op("a")])
    state.undo(before, touched)
    assert state.paused == {"a": ["first", "x", 1]}


@pytest.mark.parametrize(("misfire", "fired_at_resume"), [("skip", 0), ("fire_once", 1), ("fire_all", 6)])
async def test_resume_settles_the_occurrences_missed_while_paused_per_misfire_policy(misfire: str,
                                                                                   fired_at_resume: int) -> None:
    parts = await make_parts()
    parts.transport.handlers["h"] = recorder = Recorder()
    j = job(due=timedelta(seconds=2), schedule="@every 1s", misfire=misfire)
    (name,) = await add(parts, j)
    await parts.pausing.pause(name, j.id, None, "ops")
    await fire_for(parts, 7)  # due at +2 .. +7 while paused: six occurrences
    assert recorder.ran == []
    assert await parts.pausing.resume(name, j.id) == ("resumed", None)
    assert parts.metrics.paused_occurrences.value == 6
    for _ in range(10):  # catch-up fires back to back, without time passing
        parts.lease.renew(parts.clock.monotonic())
        before = len(recorder.ran)
        await fire_due(parts)
        if len(recorder.ran) == before:
            break
    assert len(recorder.ran) == fired_at_resume
    await fire_for(parts, 1)  # then the grid: the occurrence at +8
    assert recorder.ran[-1].scheduled_for == j.due + timedelta(seconds=6)
    assert len(recorder.ran) == fired_at_resume + 1


async def test_a_paused_job_can_be_cancelled_and_resume_then_finds_nothing() -> None:
    parts = await make_parts()
    parts.transport.handlers["h"] = recorder = Recorder()
    j = job(due=timedelta(seconds=2))
    (name,) = await add(parts, j)
    await parts.pausing.pause(name, j.id, None, "ops")
    assert await parts.cancelling.cancel(name, j.id) == ("cancelled", None)
    assert await parts.pausing.resume(name, j.id) == ("absent", None)
    await fire_for(parts, 3)
    assert recorder.ran == []
    assert parts.shards.get(name).state.paused == {}  # type: ignore[union-attr]


class Starts(SiloHooks):
    """Records every attempt the silo starts (a named job's status shows these as running)."""

    def __init__(self) -> None:
        self.started: list[int] = []

    async def attempt_started(self, event: AttemptEvent) -> None:
        self.started.append(event.occurrence)


async def paused_while_running(parts: Roles) -> tuple[ScheduledJob, str, list[int]]:
    """A recurring job paused while its first attempt runs, that attempt then finished: the job,
    its shard, and the occurrences its handler ran (appended as it goes on). The handler cannot
    be asked whether the attempt started (an actor that is not a ``JobHandler``), so the pause
    answers once it has ended: answered before, a call still on its way could start after it."""
    slow = Blocking()
    started, finish, ran = slow.started, slow.finish, slow.ran
    parts.transport.handlers["h"] = slow
    j = job(due=timedelta(seconds=9), schedule="@every 2s")  # the next occurrence, +11 s, is in the next shard
    (name,) = await add(parts, j)
    parts.clock.advance(9)
    parts.lease.renew(parts.clock.monotonic())
    firing = asyncio.ensure_future(fire_due(parts))
    await started.wait()
    pause = asyncio.ensure_future(parts.pausing.pause(name, j.id, "hold", "ops"))
    await until_idle()
    assert not pause.done()  # it waits for the attempt it cannot withdraw
    finish.set()
    assert (await pause)[0] == "paused"
    await firing
    return j, name, ran


async def test_a_pause_during_an_attempt_lets_it_finish_and_its_next_occurrence_moves_paused() -> None:
    starts = Starts()
    parts = await make_parts(hooks=[starts])
    j, name, ran = await paused_while_running(parts)
    assert ran == [1]  # the running attempt finished
    source = parts.shards.get(name)
    assert source is not None and source.state is not None
    target_name = source.state.moved[j.id]
    assert target_name != name
    target = parts.shards.get(target_name)
    assert target is not None and target.state is not None and target.state.paused[j.id][0] == "hold"
    await fire_for(parts, 6)
    assert ran == [1] and starts.started == [1]  # nothing new starts while paused, nor shows as running
    assert await parts.pausing.pause(name, j.id, None, "x") == ("moved", target_name)
    assert await parts.pausing.resume(target_name, j.id) == ("resumed", None)
    await fire_due(parts)
    assert ran[-1] == 2


async def test_a_pause_whose_write_fails_leaves_the_job_to_fire() -> None:
    store = GatedStore()
    parts = await make_parts(store)  # type: ignore[arg-type]
    parts.transport.handlers["h"] = recorder = Recorder()
    j = job(due=timedelta(seconds=2))
    (name,) = await add(parts, j)
    store.fail_next("append_block", 3)  # the writer tries three times
    with pytest.raises(StorageError):
        await parts.pausing.pause(name, j.id, None, "ops")
    assert [op for op in await records(parts, name) if op[0] == PAUSE] == []
    await fire_for(parts, 3)
    assert [ctx.job.id for ctx in recorder.ran] == [j.id]


async def test_a_pause_of_a_job_in_a_dormant_shard_holds_when_the_shard_loads() -> None:
    parts = await make_parts()
    parts.transport.handlers["h"] = recorder = Recorder()
    j = job(due=timedelta(hours=1))
    (name,) = await add(parts, j)
    assert (await parts.pausing.pause(name, j.id, None, "ops"))[0] == "paused"
    shard = parts.shards.get(name)
    assert shard is not None and not shard.loaded
    parts.clock.advance(3600)
    await parts.loading.load_due()
    assert shard.loaded and j.id in shard.state.paused  # type: ignore[union-attr]
    parts.lease.renew(parts.clock.monotonic())
    await fire_due(parts)
    assert recorder.ran == []
    assert pack(pause_op(j.id, None, "ops", 0))  # packs


async def test_a_pause_survives_a_compaction_and_the_adoption_that_replays_the_new_generation() -> None:
    store = MemoryStore()
    victim = await make_parts(store, "v")
    paused, other = job(due=timedelta(seconds=2)), job(due=timedelta(seconds=2))
    (name, _) = await add(victim, paused, other)
    await victim.pausing.pause(name, paused.id, "kept", "ops")
    shard = victim.shards.get(name)
    assert shard is not None
    await shard.writer.rotate()  # compaction: the new generation starts with a snapshot
    assert [op[0] for op in await records(victim, name)] == [3]  # SNAPSHOT only: the PAUSE record is gone
    await Membership(store).declare_dead(victim.me.row, EXITED)
    peer = await make_parts(store, "p")
    peer.transport.handlers["h"] = recorder = Recorder()
    assert await peer.adoption.adopt_orphans() == 1
    await fire_for(peer, 4)
    assert [ctx.job.id for ctx in recorder.ran] == [other.id]
    assert peer.shards.get(name).state.paused[paused.id][0] == "kept"  # type: ignore[union-attr]


async def test_a_resume_in_flight_starts_nothing_and_the_next_occurrence_of_a_paused_job_runs_once() -> None:
    # Found by the simulation, seed 2128: the outcome of an attempt paused while it ran queued
    # the next occurrence although it was paused; the resume, applied to the shard as its write
    # went out, let that entry start, and once durable queued it again: two runs of one occurrence.
    store = GatedStore()
    parts = await make_parts(store)  # type: ignore[arg-type]
    j, name, ran = await paused_while_running(parts)
    source = parts.shards.get(name)
    assert source is not None and source.state is not None
    target_name = source.state.moved[j.id]
    parts.clock.advance(2)  # the next occurrence (at +11 s) is due, the one after it not yet
    parts.lease.renew(parts.clock.monotonic())
    release = store.gate("append_block", target_name)
    resuming = asyncio.ensure_future(parts.pausing.resume(target_name, j.id))
    await store.reached("append_block", target_name).wait()
    parts.firing.dispatch(parts.queue.pop_due(limit=parts.runs.room))  # the fire loop's turn while the resume is written
    await until_idle()
    assert ran == [1]  # not resumed until durable: nothing starts
    release.set()
    assert await asyncio.wait_for(resuming, 5) == ("resumed", None)
    await asyncio.wait_for(fire_due(parts), 5)
    await asyncio.wait_for(fire_due(parts), 5)
    assert ran == [1, 2]  # the resumed occurrence ran once


async def test_an_entry_cancelled_while_a_claim_settled_its_moves_is_not_queued() -> None:
    # Found by the simulation with operator pauses, seed 2638: a claim settled its shard's moves
    # one after another; the entry handed back for one was cancelled before it was queued, and
    # queued anyway, it ran after its cancel had answered "cancelled".
    parts = await make_parts()
    parts.transport.handlers["h"] = recorder = Recorder()
    j = job(due=timedelta(seconds=2))
    (name,) = await add(parts, j)
    shard = parts.shards.get(name)
    assert shard is not None and shard.state is not None
    entry = shard.state.live[j.id]
    parts.queue.cancel(j.id)
    assert await parts.cancelling.cancel(name, j.id) == ("cancelled", None)
    parts.loading.queue_entry(j.id, entry)
    await fire_for(parts, 4)
    assert recorder.ran == []


async def test_a_paused_job_cancelled_while_its_outcome_moves_it_on_moves_paused() -> None:
    # Found by the simulation, seed 73583: an attempt's outcome was choosing the shard for the
    # next occurrence when an operator paused the job and a cancel removed the occurrence; the
    # removal dropped the pause from memory and the move went out without it. The cancel's
    # follow-up into the new shard did not land there (its silo was declared dead), so the
    # job, told "paused", fired there. The move must carry the pause into the new shard's log,
    # which is what its next owner replays should that follow-up not land.
    store = GatedStore()
    parts = await make_parts(store)  # type: ignore[arg-type]
    slow = Blocking()
    parts.transport.handlers["h"] = slow
    j = job(due=timedelta(seconds=9), schedule="@every 2s")  # the next occurrence, +11 s, is in the next shard
    (name,) = await add(parts, j)
    release = store.gate("create", "shards/")  # the outcome opening the next shard waits here
    parts.clock.advance(9)
    parts.lease.renew(parts.clock.monotonic())
    firing = asyncio.ensure_future(fire_due(parts))
    await slow.started.wait()
    slow.finish.set()
    await store.reached("create", "shards/").wait()
    assert (await parts.pausing.pause(name, j.id, "hold", "ops"))[0] == "paused"
    cancelling = asyncio.ensure_future(parts.cancelling.cancel(name, j.id))
    await until_idle()
    assert [op[3] for op in await records(parts, name) if op[0] == 1] == ["cancelled"]  # durable, the run not ended
    release.set()
    assert await asyncio.wait_for(cancelling, 5) == ("cancelled", None)
    await firing
    source = parts.shards.get(name)
    assert source is not None and source.state is not None
    target_name = source.state.moved[j.id]
    moved_in = [op for op in await records(parts, target_name) if op[0] == 0 and op[1] == j.id]
    assert [op[8][:2] for op in moved_in if len(op) > 8] == [["hold", "ops"]]  # its next owner replays it paused
    await fire_for(parts, 6)
    assert slow.ran == [1]


async def test_a_resume_meeting_a_cancels_removal_in_flight_answers_by_its_outcome() -> None:
    """Found by the simulation, seed 125919: a cancel of a paused job whose run was in flight
    wrote its removal without the shard's gate; a resume meanwhile read memory, where the
    removal was already applied, and answered "absent". The removal then failed (its silo
    declared dead): the job lived on, paused, and a later pause found it "already paused"."""
    store = GatedStore()
    parts = await make_parts(store)  # type: ignore[arg-type]
    running = parts.transport.handlers["b"] = Blocking()
    j = job("b")
    (name,) = await add(parts, j)
    parts.clock.advance(1)
    parts.lease.renew(parts.clock.monotonic())
    parts.firing.dispatch(parts.queue.pop_due(limit=parts.runs.room))
    await running.started.wait()
    # Paused while it runs on: the pause is written, and answers once the handler's call ends
    # (it cannot be withdrawn), so a cancel and a resume meet it in flight.
    pausing = asyncio.ensure_future(parts.pausing.pause(name, j.id, None, "operator"))
    await until_idle()
    assert not pausing.done() and j.id in parts.shards.get(name).state.paused
    release = store.gate("append_block", name)
    cancelling = asyncio.ensure_future(parts.cancelling.cancel(name, j.id))
    await store.reached("append_block", name).wait()  # the removal is on its way
    resuming = asyncio.ensure_future(parts.pausing.resume(name, j.id))
    await until_idle()
    store.fail_next("append_block", 3, prefix=name)  # and fails (the writer tries three times): the job lives on, paused
    release.set()
    with pytest.raises(StorageError):
        await asyncio.wait_for(cancelling, 5)
    assert await asyncio.wait_for(resuming, 5) == ("resumed", None)
    running.finish.set()
    await until_idle()
    assert (await asyncio.wait_for(pausing, 5))[0] == "paused"
