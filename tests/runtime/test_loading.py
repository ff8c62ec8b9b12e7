"""Loading without Ray: a dormant shard loads once its window nears; drained shards are deleted."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from cluster.model.attempt import JobContext
from cluster.model.wire import datetime_to_us
from cluster.runtime.roles import Roles
from cluster.runtime.shardlog import RELEASED, SHARD_PREFIX, SUCCEEDED, ShardState, add_op, remove_op
from storage import Unavailable, list_logs, read_log
from tests.runtime.harness import Blocking, GatedStore, Recorder, add, fire_due, item, job, make_parts, until_idle


async def test_a_dormant_shard_loads_and_queues_its_jobs_once_its_window_is_within_the_lookahead() -> None:
    parts = await make_parts()
    j = job(due=timedelta(seconds=32))  # window T0+30 s, lookahead 5 s
    (name,) = await add(parts, j)
    await parts.loading.load_due()
    shard = parts.shards.get(name)
    assert shard is not None and not shard.loaded
    parts.clock.advance(26)
    await parts.loading.load_due()
    assert shard.loaded and parts.queue.get(j.id) is not None


async def test_a_recurring_job_that_missed_occurrences_while_dormant_skips_to_the_next_when_told_to() -> None:
    parts = await make_parts()
    j = job(due=timedelta(seconds=21), schedule="@every 1s", misfire="skip")
    (name,) = await add(parts, j)
    parts.clock.advance(25)  # four occurrences passed while the shard was dormant
    await parts.loading.load_due()
    await until_idle()
    shard = parts.shards.get(name)
    assert shard is not None and shard.state is not None
    due = shard.state.live[j.id][0]
    assert due > parts.clock.now_us() - 1_000_000  # not the missed T0+21 s


async def test_a_drained_shard_past_its_window_is_deleted() -> None:
    parts = await make_parts()
    parts.transport.handlers["h"] = Recorder()
    (name,) = await add(parts, job())
    parts.lease.renew(parts.clock.monotonic())
    parts.clock.advance(1)
    await fire_due(parts)
    await parts.loading.delete_drained()
    assert [h.base for h in await list_logs(parts.store, SHARD_PREFIX)] == [name]  # its window is not over yet
    parts.clock.advance(10)
    await parts.loading.delete_drained()
    assert await list_logs(parts.store, SHARD_PREFIX) == []
    assert parts.shards.get(name) is None


async def test_a_drained_shard_whose_delete_failed_takes_no_more_jobs_and_is_deleted_later() -> None:
    """Found by the simulation (seed 72, pauses): the writer was closed for the delete, the delete
    failed, and the shard stayed its window's open shard. A recurring job moving its next
    (overdue) occurrence into that window then retried against the closed writer for good:
    its occurrences were lost. (Seed 1926: also when a move had named it as its target: the
    shard must not stay held with a closed writer at all.)"""
    store = GatedStore()
    parts = await make_parts(store)  # type: ignore[arg-type]
    parts.transport.handlers["h"] = Recorder()
    (name,) = await add(parts, job())
    parts.lease.renew(parts.clock.monotonic())
    parts.clock.advance(1)
    await fire_due(parts)
    parts.clock.advance(10)
    store.fail_next("delete", 1)
    await parts.loading.delete_drained()
    assert [h.base for h in await list_logs(store, SHARD_PREFIX)] == [name]  # type: ignore[arg-type]
    late = job(due=timedelta(seconds=5), job_id="late")  # same window as the drained shard
    await parts.heartbeat.beat()  # a fresh shard is created only under a valid lease
    (into,) = await add(parts, late)
    assert into != name and parts.queue.get("late") is not None
    # Its writer is closed, so it is not held any more; the log is still ours, and an adoption
    # round takes it back, to be deleted once settled.
    assert parts.shards.get(name) is None
    await parts.adoption.adopt_orphans()
    assert parts.shards.get(name) is not None
    parts.clock.advance(3)
    await parts.loading.delete_drained()
    assert name not in {h.base for h in await list_logs(store, SHARD_PREFIX)}  # type: ignore[arg-type]
    assert parts.shards.get(name) is None


async def test_a_drained_shards_delete_that_races_its_take_back_leaves_the_fresh_copy_held() -> None:
    """Found by the simulation (seed 57302, two owners): a schedule's append landed though it was
    reported failed, so the shard's memory looked drained while its log held the job. Its delete
    was under way when the silo took the shard back from its log; the delete, fenced, forgot the
    shard by name, which unheld the fresh copy. That copy went on running the job, unlisted: an
    adoption round claimed the log again, the claim was handed over at once (no runs of it), and
    the next owner could run the job while this silo still ran it."""
    store = GatedStore()
    parts = await make_parts(store)  # type: ignore[arg-type]
    parts.transport.handlers["h"] = Recorder()
    running = parts.transport.handlers["b"] = Blocking()
    parts.lease.renew(parts.clock.monotonic())
    (name,) = await add(parts, job())
    parts.clock.advance(1)
    await fire_due(parts)
    old = parts.shards.get(name)
    assert old is not None and old.live_count == 0
    hidden = job("b", due=timedelta(seconds=5))  # same window
    store.lose_answer("append_block")  # it lands, its answer is lost ...
    store.fail_next("stat", 1, prefix=SHARD_PREFIX)  # ... and the log cannot be read back: in doubt
    with pytest.raises(Unavailable):
        await add(parts, hidden)
    assert old.live_count == 0 and hidden.id in ShardState().replay((await read_log(store, name)).records()).live
    parts.clock.advance(10)  # past the window, settled: drained as far as memory knows
    parts.lease.renew(parts.clock.monotonic())
    opened = store.gate("delete", SHARD_PREFIX)
    deleting = asyncio.ensure_future(parts.loading.delete_drained())
    await store.reached("delete", SHARD_PREFIX).wait()
    assert await parts.shards.taken_back(old)  # as a write that met the stopped writer does
    fresh = parts.shards.get(name)
    assert fresh is not None and fresh is not old and hidden.id in parts.queue
    opened.set()
    await deleting  # fenced by the take-back: the log stays
    assert parts.shards.get(name) is fresh

    parts.firing.dispatch(parts.queue.pop_due(limit=parts.runs.room))
    await until_idle()
    assert running.ran == [1]
    assert await parts.adoption.adopt_orphans() == 0  # the log is held here: nothing to claim
    parts.clock.advance(4)  # held long enough to be handed over
    parts.lease.renew(parts.clock.monotonic())
    # Handed over: the release waits for the run, so no next owner starts the job beside it.
    handing = asyncio.ensure_future(parts.balance.hand_over(1))
    await until_idle()
    assert not handing.done() and (await read_log(store, name)).metadata["owner"] == parts.me.owner
    running.finish.set()
    assert await asyncio.wait_for(handing, 5) == 1
    after = await read_log(store, name)
    assert after.metadata["owner"] == RELEASED and hidden.id not in ShardState().replay(after.records()).live
    assert running.ran == [1]


async def test_a_shard_handed_over_while_drained_shards_are_deleted_keeps_its_moves_proof() -> None:
    """Found by the simulation with torn logs (seed 107341, a duplicate): a recurring job's next
    occurrence moved from a peer's shard into one of ours and succeeded there. Our drained shards
    were being deleted when we handed that target over; the delete went on to it all the same,
    judging its source gone from a listing bounded by the sources of the shards we still held.
    The source's log still named the move pending, so its next owner, finding no target, decided
    the move again and ran the occurrence a second time. A shard handed over is its next owner's."""
    store = GatedStore()
    parts = await make_parts(store)  # type: ignore[arg-type]
    peer = await make_parts(store, "1")  # type: ignore[arg-type]
    parts.transport.handlers["h"] = Recorder()
    parts.lease.renew(parts.clock.monotonic())
    (first,) = await add(parts, job(job_id="d"))  # drained first: its delete is held up
    (earlier,) = await add(parts, job(job_id="e", due=timedelta(seconds=11)))
    (target,) = await add(parts, job(job_id="b", due=timedelta(seconds=21)))
    (source,) = await add(peer, job(job_id="a", due=timedelta(seconds=22)))  # the peer's, it lives on
    assert first < earlier < target < source
    for base, came_from in ((earlier, first), (target, source)):  # an occurrence moved in, then succeeded
        shard = parts.shards.get(base)
        assert shard is not None
        jid, due_us, packed = item(job(job_id=f"moved-{base}", due=timedelta(seconds=21)))
        async with shard.gate.shared():
            await shard.write([add_op(jid, due_us, packed, 2, source=came_from)])
            await shard.write([remove_op(jid, 2, SUCCEEDED)])
    parts.clock.advance(25)
    parts.lease.renew(parts.clock.monotonic())
    await parts.loading.load_due()
    await fire_due(parts)
    parts.clock.advance(10)  # every shard of ours drained and past its window
    parts.lease.renew(parts.clock.monotonic())
    opened = store.gate("delete", first)
    deleting = asyncio.ensure_future(parts.loading.delete_drained())
    await store.reached("delete", first).wait()
    for base in (earlier, target):
        shard = parts.shards.get(base)
        assert shard is not None and shard.live_count == 0 and await parts.balance.release(shard)
    opened.set()
    await deleting
    kept = await read_log(store, target)  # type: ignore[arg-type]
    assert kept.metadata["owner"] == RELEASED
    assert ShardState().replay(kept.records()).holds_move(f"moved-{target}", 2)  # what the source's next owner reads


async def test_a_skip_job_that_missed_occurrences_while_dormant_runs_none_of_them_and_goes_on() -> None:
    """Found in review: the missed occurrence was queued at load while its settling was written,
    so it ran anyway (against SKIP), and the next occurrence the settling wrote was not queued."""
    parts = await make_parts()
    recorder = parts.transport.handlers["h"] = Recorder()
    j = job(due=timedelta(seconds=21), schedule="@every 1s", misfire="skip")
    await add(parts, j)
    parts.clock.advance(25)  # four occurrences passed while the shard was dormant
    parts.lease.renew(parts.clock.monotonic())
    await parts.loading.load_due()
    loaded_at = parts.clock.now_us()
    for _ in range(3):
        await until_idle()
        await fire_due(parts)
        parts.clock.advance(1)
        parts.lease.renew(parts.clock.monotonic())
    assert recorder.ran, "the next occurrence after the missed ones never ran"
    grace = 1_000_000  # OPTIONS.misfire_grace
    assert all(datetime_to_us(ctx.scheduled_for) >= loaded_at - grace for ctx in recorder.ran)


class FirstWaits:
    """A handler whose first attempt runs until ``finish`` is set; the later ones end at once."""

    def __init__(self) -> None:
        self.started, self.finish = asyncio.Event(), asyncio.Event()
        self.ran: list[str] = []

    async def __call__(self, ctx: JobContext) -> None:
        self.ran.append(ctx.run_id)
        if len(self.ran) == 1:
            self.started.set()
            await self.finish.wait()


async def an_older_copys_attempt_in_flight() -> tuple[Roles, FirstWaits, str]:
    """A silo whose shard was taken back from its log while the attempt of its job sent from the
    older copy waits in the handler; the fresh copy ran the job again, to its end. The parts, the
    handler (``finish`` ends the older attempt) and the shard's name."""
    parts = await make_parts()
    handler = parts.transport.handlers["h"] = FirstWaits()
    j = job()
    (name,) = await add(parts, j)
    parts.clock.advance(1)
    parts.lease.renew(parts.clock.monotonic())
    parts.firing.dispatch(parts.queue.pop_due(limit=parts.runs.room))
    await handler.started.wait()
    old = parts.shards.get(name)
    assert old is not None and await parts.shards.taken_back(old)
    fresh = parts.shards.get(name)
    assert fresh is not None and fresh is not old and j.id in parts.queue
    parts.firing.dispatch(parts.queue.pop_due(limit=parts.runs.room))
    await until_idle()
    assert len(handler.ran) == 2 and fresh.state is not None and not fresh.state.live
    return parts, handler, name


async def test_a_drained_shard_stays_while_an_attempt_of_its_older_copy_is_in_flight() -> None:
    """Found by the simulation, seed 121748: a shard taken back from its log ran its job again
    from the fresh copy, which then drained and was deleted while the older copy's attempt was
    still on its way to the handler (a delayed delivery): it started from a shard that no longer
    existed."""
    parts, handler, name = await an_older_copys_attempt_in_flight()
    fresh = parts.shards.get(name)
    parts.clock.advance(10)
    parts.lease.renew(parts.clock.monotonic())
    await parts.loading.delete_drained()
    assert [h.base for h in await list_logs(parts.store, SHARD_PREFIX)] == [name]  # the older attempt runs on
    assert parts.shards.get(name) is fresh

    handler.finish.set()
    while parts.runs.inflight or parts.runs.displaced:  # noqa: ASYNC110  the attempt ends on its own
        await asyncio.sleep(0.001)
    await parts.loading.delete_drained()
    assert await list_logs(parts.store, SHARD_PREFIX) == []


async def test_a_shard_handed_over_waits_for_an_attempt_of_its_older_copy() -> None:
    """The same attempt, the shard handed over instead (balance): released at once, its next
    owner could run the job beside the attempt still on its way from this silo."""
    parts, handler, name = await an_older_copys_attempt_in_flight()
    parts.clock.advance(4)  # held long enough to be handed over
    parts.lease.renew(parts.clock.monotonic())
    handing = asyncio.ensure_future(parts.balance.hand_over(1))
    await until_idle()
    assert not handing.done() and (await read_log(parts.store, name)).metadata["owner"] == parts.me.owner
    handler.finish.set()
    assert await asyncio.wait_for(handing, 5) == 1
    assert (await read_log(parts.store, name)).metadata["owner"] == RELEASED
