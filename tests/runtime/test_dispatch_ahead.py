"""Dispatch ahead (issue 15, point 2), without Ray: jobs leave the silo before they are due, and
the handler starts each at its due time — never earlier, never after a cancel took it back, never
past its sender's lease."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from cluster.model.attempt import JobContext
from cluster.model.errors import ValidationError
from cluster.model.options import ClusterOptions
from cluster.model.policies import FailurePolicy
from cluster.model.wire import datetime_to_us, timedelta_to_us
from cluster.runtime.hooks import SiloHooks
from cluster.runtime.roles import Roles
from cluster.runtime.shardlog import ATTEMPTS, CANCELLED, REMOVE
from cluster.runtime.transport import Ping
from storage import MemoryStore, Unavailable, read_log
from tests.runtime.harness import OPTIONS, T0_US, LocalTransport, ManualClock, add, job, make_parts, until_idle

AHEAD_US = timedelta_to_us(OPTIONS.dispatch_ahead)
SECOND = 1_000_000


class Starts:
    """A handler that notes, per start, the job and the store's time then; ``hold`` keeps jobs running."""

    def __init__(self, store_clock: ManualClock) -> None:
        self.store_clock = store_clock
        self.started: list[tuple[str, int]] = []
        self.hold: asyncio.Event | None = None
        self.fail = False

    async def __call__(self, ctx: JobContext) -> None:
        self.started.append((ctx.job.id, self.store_clock.now_us()))
        if self.hold is not None:
            await self.hold.wait()
        if self.fail:
            raise RuntimeError("failed on purpose")


async def settle() -> None:
    await until_idle()


async def send_ahead(parts: Roles) -> None:
    """One turn of the fire loop: everything due within the ahead window leaves now."""
    parts.firing.dispatch(parts.firing.take_due(parts.runs.room))
    await settle()


async def one_silo(store: Any = None, **transport: Any) -> tuple[ManualClock, Starts, LocalTransport, Roles]:
    """A silo whose handler waits for due times on the silo's own clock (one host)."""
    clock = ManualClock()
    starts = Starts(clock)
    lt = LocalTransport(handlers={"h": starts}, clock=clock, **transport)
    parts = await make_parts(store, clock=clock, transport=lt)
    parts.lease.renew(clock.monotonic())
    return clock, starts, lt, parts


def due_us(j: Any) -> int:
    return datetime_to_us(j.due)


async def test_a_job_leaves_ahead_of_its_due_time_and_starts_exactly_then() -> None:
    clock, starts, transport, parts = await one_silo()
    j = job(due=timedelta(seconds=1))
    await add(parts, j)
    clock.advance(1 - AHEAD_US / 2 / SECOND)  # half the window before it is due
    await send_ahead(parts)
    assert transport.delivered() == [j.id] and starts.started == []
    clock.advance(AHEAD_US / 2 / SECOND - 0.000_01)
    await settle()
    assert starts.started == []  # 10 µs before: still waiting
    clock.advance(0.000_02)
    await settle()
    assert starts.started == [(j.id, due_us(j) + 10)]
    await settle()
    assert not parts.runs.inflight and j.id not in parts.queue


async def test_nothing_starts_early_when_the_silo_runs_ahead_of_the_store_and_the_handler_is_elsewhere() -> None:
    """Due times are the store's: the silo's clock 3 s ahead, the handler's wall clock 2 s behind,
    its host another (it waits relative to the batch's arrival, measured on its own clock)."""
    store_clock, silo_clock, handler_clock = ManualClock(), ManualClock(T0_US + 3 * SECOND), ManualClock(T0_US - 2 * SECOND)
    starts = Starts(store_clock)
    transport = LocalTransport(handlers={"h": starts}, clock=handler_clock, domain="another host")
    parts = await make_parts(MemoryStore(clock=store_clock.now_us), clock=silo_clock, transport=transport)
    parts.lease.renew(silo_clock.monotonic())
    jobs = [job(due=timedelta(seconds=1, milliseconds=k)) for k in range(8)]
    await add(parts, *jobs)
    for clock in (store_clock, silo_clock, handler_clock):
        clock.advance(0.995)
    await parts.skew.sample()
    await send_ahead(parts)
    assert set(transport.delivered()) == {j.id for j in jobs if due_us(j) <= T0_US + 995_000 + AHEAD_US}
    for _ in range(40):  # 0.5 ms steps through every due time
        for clock in (store_clock, silo_clock, handler_clock):
            clock.advance(0.0005)
        await settle()
    due_of = {j.id: due_us(j) for j in jobs}
    assert starts.started, "nothing started"
    assert all(at >= due_of[job_id] for job_id, at in starts.started)  # never early, by the store's time
    assert all(at - due_of[job_id] <= 1_000 for job_id, at in starts.started)  # and within a step or two


async def test_jobs_due_within_the_window_travel_together() -> None:
    """At 1,000 jobs/s the loop wakes half a window before the first and takes the whole window."""
    clock, starts, transport, parts = await one_silo()
    jobs = [job(due=timedelta(seconds=1, milliseconds=k)) for k in range(30)]
    await add(parts, *jobs)
    clock.advance(1 - AHEAD_US / 2 / SECOND)
    loop = asyncio.create_task(parts.firing.run())
    try:
        await settle()
        assert len(transport.calls) == 1
        assert len(transport.calls[0][1]) == AHEAD_US // 2 // 1000 + 1  # every job due within the window, in one call
    finally:
        loop.cancel()


async def test_a_cancel_withdraws_a_job_sent_ahead_and_it_never_starts() -> None:
    clock, starts, transport, parts = await one_silo()
    j = job(due=timedelta(seconds=1))
    (name,) = await add(parts, j)
    clock.advance(1 - AHEAD_US / 2 / SECOND)
    await send_ahead(parts)
    assert transport.delivered() == [j.id]
    assert await parts.cancelling.cancel(name, j.id) == ("cancelled", None)  # returns before the due time
    assert len(transport.withdraws) == 1
    assert [REMOVE, j.id, 1, CANCELLED] in [op[:4] for op in (await read_log(parts.store, name)).records()]
    clock.advance(1)
    await settle()
    assert starts.started == []
    assert not parts.runs.inflight and j.id not in parts.queue


async def test_a_job_cancelled_while_it_waits_to_be_sent_is_never_sent() -> None:
    clock, starts, transport, parts = await one_silo(resolving={"h": asyncio.Event()})
    j = job(due=timedelta(seconds=1))
    (name,) = await add(parts, j)
    clock.advance(1 - AHEAD_US / 2 / SECOND)
    await send_ahead(parts)  # its lookup is held: in flight, not sent
    cancel = asyncio.create_task(parts.cancelling.cancel(name, j.id))
    await settle()
    transport.resolving["h"].set()
    assert await cancel == ("cancelled", None)
    clock.advance(1)
    await settle()
    assert transport.calls == [] and starts.started == []


async def test_a_cancel_racing_the_start_waits_for_the_run_and_nothing_follows_it() -> None:
    """At the due time the job starts; a cancel then cannot withdraw it: it waits for the run's
    end and writes the cancel, and the failed attempt's retry never comes."""
    clock, starts, transport, parts = await one_silo()
    starts.hold, starts.fail = asyncio.Event(), True
    j = job(due=timedelta(seconds=1), failure_policy=FailurePolicy.constant("1s", max_retries=3))
    (name,) = await add(parts, j)
    clock.advance(1 - AHEAD_US / 2 / SECOND)
    await send_ahead(parts)
    clock.advance(AHEAD_US / 2 / SECOND + 0.001)
    await settle()
    assert [job_id for job_id, _ in starts.started] == [j.id]  # running, held
    cancel = asyncio.create_task(parts.cancelling.cancel(name, j.id))
    await settle()
    assert not cancel.done()  # waits for the run to end
    starts.hold.set()
    assert await cancel == ("cancelled", None)
    clock.advance(5)
    await send_ahead(parts)
    assert len(starts.started) == 1 and j.id not in parts.queue and not parts.runs.inflight


async def test_a_lost_withdraw_counts_as_started_the_cancel_waits_for_the_run() -> None:
    clock, starts, transport, parts = await one_silo(lose_withdraws=True)
    starts.fail = True
    j = job(due=timedelta(seconds=1), failure_policy=FailurePolicy.constant("1s", max_retries=3))
    (name,) = await add(parts, j)
    clock.advance(1 - AHEAD_US / 2 / SECOND)
    await send_ahead(parts)
    cancel = asyncio.create_task(parts.cancelling.cancel(name, j.id))
    await settle()
    assert not cancel.done()  # it cannot know the job will not start: it waits for the run
    clock.advance(AHEAD_US / 2 / SECOND + 0.001)
    assert await cancel == ("cancelled", None)
    assert [job_id for job_id, _ in starts.started] == [j.id]  # started: the withdraw never reached it
    clock.advance(5)
    await send_ahead(parts)
    assert len(starts.started) == 1 and j.id not in parts.queue  # but no retry after the cancel


async def test_a_lease_that_ends_during_the_wait_refuses_the_start_and_the_owner_fires_it_later() -> None:
    """The handler's wall clock is 10 s behind: on the silo's host the lease's exact monotonic end fences."""
    clock = ManualClock()
    handler_clock = ManualClock(T0_US - 10 * SECOND)
    starts = Starts(clock)
    transport = LocalTransport(handlers={"h": starts}, clock=handler_clock)
    parts = await make_parts(clock=clock, transport=transport)
    parts.lease.renew(clock.monotonic())
    j = job(due=timedelta(seconds=1))
    (name,) = await add(parts, j)
    clock.advance(1 - AHEAD_US / 2 / SECOND)
    handler_clock.advance(1 - AHEAD_US / 2 / SECOND)
    await send_ahead(parts)
    assert transport.delivered() == [j.id]
    for c in (clock, handler_clock):
        c.advance(OPTIONS.firing_lease.total_seconds())  # paused past its lease before the job was due
    await settle()
    assert starts.started == []  # refused at its start
    assert j.id in parts.queue and not parts.runs.inflight  # its owner queued it again, no attempt counted
    assert parts.shards.get(name).state.live[j.id][ATTEMPTS] == 0  # type: ignore[union-attr]
    parts.lease.renew(clock.monotonic())
    await send_ahead(parts)
    assert [job_id for job_id, _ in starts.started] == [j.id]


async def test_a_handler_whose_clock_runs_behind_starts_nothing_of_a_silo_whose_shard_a_peer_took() -> None:
    """Simulator seed 10861: silo 0 sent a job ahead, then went silent; silo 1, told by Ray that
    silo 0 was gone, took its shard once silo 0's lease was over. The handler, its wall clock
    ``max_clock_skew`` behind the store's (the most the options allow), must not start silo 0's
    copy after that: one live owner per shard, whatever the handler's clock within the bound."""
    options = OPTIONS.with_(dispatch_ahead="1.9s")  # sent long before due, so the lease ends during the wait
    lease = options.firing_lease.total_seconds()
    skew = options.max_clock_skew.total_seconds()
    clock = ManualClock()  # the store's and both silos': skew is not what this is about
    handler_clock = ManualClock(T0_US - int(skew * SECOND))
    owners: list[tuple[str, int]] = []  # (sender of each start, store time then)

    async def run(ctx: JobContext) -> None:
        owners.append((ctx.run_id.rpartition("@")[2], clock.now_us()))

    store = MemoryStore(clock=clock.now_us)
    silo0_transport = LocalTransport(handlers={"h": run}, clock=handler_clock, domain="the handler's host")
    silo0 = await make_parts(store, "0", clock=clock, transport=silo0_transport, options=options)
    silo1_transport = LocalTransport(handlers={"h": run}, clock=handler_clock, domain="the handler's host",
                                     alive={"0": Ping.GONE})
    silo1 = await make_parts(store, "1", clock=clock, transport=silo1_transport, options=options)
    j = job(due=timedelta(seconds=lease + 0.2))  # due after silo 0's lease, which began at T0
    await add(silo0, j)
    assert await silo1.heartbeat.declare_peer_dead("0")  # seen dead at once: the shard is silo 1's at T0 + lease

    def advance(seconds: float) -> None:
        clock.advance(seconds)
        handler_clock.advance(seconds)

    advance(lease - 0.5)
    await send_ahead(silo0)  # its lease holds: the job leaves, due 0.7 s later
    assert silo0_transport.delivered() == [j.id]
    advance(0.5)
    silo1.lease.renew(clock.monotonic())  # silo 1's heartbeat
    assert await silo1.adoption.adopt_orphans() == 1
    taken_at = clock.now_us()
    advance(0.2 + 0.001)  # the job is due: on the handler's clock silo 0's lease has not ended yet
    await settle()
    await send_ahead(silo1)
    advance(0.001)
    await settle()
    assert [sender for sender, at in owners if at >= taken_at] == [silo1.me.owner]


async def test_a_slow_lookup_of_one_target_does_not_hold_back_another_targets_jobs() -> None:
    clock, starts, transport, parts = await one_silo(resolving={"slow": asyncio.Event()})
    transport.handlers["slow"] = Starts(clock)
    slow, quick = job("slow", due=timedelta(seconds=1)), job(due=timedelta(seconds=1))
    await add(parts, slow, quick)
    clock.advance(1)
    await send_ahead(parts)
    assert [job_id for job_id, _ in starts.started] == [quick.id]
    transport.resolving["slow"].set()
    await settle()
    assert not parts.runs.inflight


def test_dispatch_ahead_is_validated_naming_the_field() -> None:
    with pytest.raises(ValidationError, match="dispatch_ahead"):
        ClusterOptions(dispatch_ahead="-1ms")
    with pytest.raises(ValidationError, match="dispatch_ahead"):
        ClusterOptions(dispatch_ahead="1s")  # not shorter than half of the 1.6 s default lease
    assert ClusterOptions(dispatch_ahead="0s").dispatch_ahead == timedelta(0)


async def test_with_dispatch_ahead_off_jobs_leave_at_their_due_time() -> None:
    clock = ManualClock()
    starts = Starts(clock)
    transport = LocalTransport(handlers={"h": starts}, clock=clock)
    parts = await make_parts(clock=clock, transport=transport, options=OPTIONS.with_(dispatch_ahead="0s"))
    parts.lease.renew(clock.monotonic())
    j = job(due=timedelta(seconds=1))
    await add(parts, j)
    clock.advance(0.999)
    await send_ahead(parts)
    assert transport.calls == []
    clock.advance(0.001)
    await send_ahead(parts)
    assert starts.started == [(j.id, due_us(j))]


async def test_a_handler_that_cannot_wait_is_sent_each_job_at_its_due_time() -> None:
    """An actor that does not subclass JobHandler starts what it gets: the silo waits for it."""
    clock = ManualClock()
    ran = asyncio.Event()
    at: list[int] = []

    async def plain(ctx: JobContext) -> None:
        at.append(clock.now_us())
        ran.set()

    transport = LocalTransport(handlers={"h": plain})  # no clock: it cannot wait
    parts = await make_parts(clock=clock, transport=transport)
    parts.lease.renew(clock.monotonic())
    j = job(due=timedelta(seconds=1))
    await add(parts, j)
    clock.advance(1 - AHEAD_US / 2 / SECOND)
    await send_ahead(parts)
    assert transport.calls == []  # taken off the queue, held in the silo
    clock.advance(AHEAD_US / 2 / SECOND)
    await asyncio.wait_for(ran.wait(), 5)
    assert at == [due_us(j)]


async def test_a_cancel_whose_write_fails_after_the_withdraw_leaves_the_job_to_fire() -> None:
    """Withdrawn from its handler, but the removal not durable: not cancelled after all, it runs."""
    from storage import StorageError
    from tests.runtime.harness import GatedStore

    store = GatedStore()
    clock, starts, transport, parts = await one_silo(store)
    j = job(due=timedelta(seconds=1))
    (name,) = await add(parts, j)
    clock.advance(1 - AHEAD_US / 2 / SECOND)
    await send_ahead(parts)
    store.fail_next("append_block", 3)  # the writer tries three times
    with pytest.raises(StorageError):
        await parts.cancelling.cancel(name, j.id)
    assert transport.withdraws and starts.started == []
    clock.advance(AHEAD_US / SECOND)
    await settle()
    assert starts.started == []  # the withdrawn attempt never starts...
    await send_ahead(parts)
    clock.advance(AHEAD_US / SECOND)
    await settle()
    assert [job_id for job_id, _ in starts.started] == [j.id]  # ...the job does, queued again




async def test_a_cancel_whose_write_fails_does_not_queue_again_a_job_another_cancel_removed() -> None:
    """The run ended while the first cancel waited for its withdraw; a second cancel found the job
    queued no more, removed it and returned "cancelled". The first's write then failed, and it
    queued the job again, to run after that "cancelled" (found by the simulation, seed 161).
    Now the ended run's outcome waits for the first cancel's removal, so the run stays in flight
    and the second cancel shares the first one's answer: both fail, the run's success counts."""
    from storage import StorageError
    from tests.runtime.harness import GatedStore

    store = GatedStore()
    clock, starts, transport, parts = await one_silo(store, lose_withdraws=True)
    j = job(due=timedelta(seconds=1))
    (name,) = await add(parts, j)
    clock.advance(1 - AHEAD_US / 2 / SECOND)
    await send_ahead(parts)
    held = asyncio.Event()
    transport.hold_withdraws.append(held)
    first = asyncio.create_task(parts.cancelling.cancel(name, j.id))
    await settle()
    clock.advance(AHEAD_US / SECOND)  # the run starts (its withdraw is slow) and ends
    await settle()
    assert [job_id for job_id, _ in starts.started] == [j.id]
    second = asyncio.create_task(parts.cancelling.cancel(name, j.id))
    await settle()
    assert not second.done()  # the run is still in flight, its outcome held: it shares the first's answer
    store.fail_next("append_block", 3)  # the first cancel's write fails
    held.set()
    with pytest.raises(StorageError):
        await first
    with pytest.raises(StorageError):
        await second
    for _ in range(5):
        clock.advance(1)
        await send_ahead(parts)
    assert len(starts.started) == 1 and j.id not in parts.queue and not parts.runs.inflight  # never again
    assert j.id not in parts.shards.get(name).state.live  # its success recorded


async def test_a_second_cancel_of_a_run_shares_the_first_ones_answer() -> None:
    """Two cancels of one run sent ahead, the first's withdraw slow. The second withdrew the run
    and failed to write: not cancelled after all, its refused attempt was queued again, and ran
    after the first cancel, whose removal landed, had returned "cancelled"."""
    from tests.runtime.harness import GatedStore

    store = GatedStore()
    clock, starts, transport, parts = await one_silo(store)
    j = job(due=timedelta(seconds=1))
    (name,) = await add(parts, j)
    clock.advance(1 - AHEAD_US / 2 / SECOND)
    await send_ahead(parts)
    held = asyncio.Event()
    transport.hold_withdraws.append(held)
    first = asyncio.create_task(parts.cancelling.cancel(name, j.id))
    await settle()
    store.fail_next("append_block", 3)  # what the second cancel would write fails
    second = asyncio.create_task(parts.cancelling.cancel(name, j.id))
    await settle()
    store.fail_next("append_block", 0)
    held.set()
    await settle()
    clock.advance(AHEAD_US / SECOND)
    await settle()
    assert await first == ("cancelled", None)
    assert await second == ("cancelled", None)
    for _ in range(5):
        clock.advance(1)
        await send_ahead(parts)
    assert starts.started == [] and j.id not in parts.queue and not parts.runs.inflight


async def test_a_run_that_ends_while_its_cancel_fails_to_write_is_recorded_not_run_again() -> None:
    """A cancel found the job sent ahead and already started (the withdraw came too late); the run
    succeeded while the removal was being written, and that write failed. Not cancelled after
    all, so the run's success must be recorded: it was dropped for the cancel and the job queued
    again, and the same occurrence ran a second time, no fault in between (found by the
    simulation, seed 122)."""
    from storage import StorageError
    from tests.runtime.harness import GatedStore

    store = GatedStore()
    clock, starts, transport, parts = await one_silo(store)
    starts.hold = asyncio.Event()
    j = job(due=timedelta(seconds=1))
    (name,) = await add(parts, j)
    clock.advance(1 - AHEAD_US / 2 / SECOND)
    await send_ahead(parts)
    clock.advance(AHEAD_US / 2 / SECOND + 0.001)
    await settle()
    assert [job_id for job_id, _ in starts.started] == [j.id]  # started, held
    release = store.gate("append_block", name)
    cancel = asyncio.create_task(parts.cancelling.cancel(name, j.id))
    await store.reached("append_block", name).wait()  # the removal is being written
    starts.hold.set()  # the run succeeds meanwhile
    await settle()
    store.fail_next("append_block", 3, name)  # and the removal does not land
    release.set()
    with pytest.raises(StorageError):
        await cancel
    for _ in range(5):
        clock.advance(1)
        await send_ahead(parts)
    assert len(starts.started) == 1  # one run of the occurrence
    assert j.id not in parts.queue and not parts.runs.inflight
    records = [op[:4] for op in (await read_log(parts.store, name)).records() if op[0] == REMOVE]
    assert [op[1] for op in records] == [j.id] and records[0][3] != CANCELLED  # its success, recorded


async def test_a_run_that_ends_while_its_withdraw_is_on_its_way_runs_once_when_the_cancel_fails() -> None:
    """A cancel timed for the job's wait in its handler: the job started before the withdraw got
    there (dropped nothing) and succeeded; the removal then failed. The success was dropped for
    the cancel and the job queued again: its occurrence ran twice (found by the simulation,
    seed 7724)."""
    from storage import StorageError
    from tests.runtime.harness import GatedStore

    store = GatedStore()
    clock, starts, transport, parts = await one_silo(store)
    j = job(due=timedelta(seconds=1))
    (name,) = await add(parts, j)
    clock.advance(1 - AHEAD_US / 2 / SECOND)
    await send_ahead(parts)
    slow = asyncio.Event()
    transport.hold_withdraws.append(slow)
    cancel = asyncio.create_task(parts.cancelling.cancel(name, j.id))
    await settle()
    clock.advance(AHEAD_US / SECOND)  # due: it starts and succeeds while the withdraw is on its way
    await settle()
    assert [job_id for job_id, _ in starts.started] == [j.id]
    store.fail_next("append_block", 3, name)  # the removal does not land
    slow.set()
    with pytest.raises(StorageError):
        await cancel
    assert transport.withdraws == [[transport.calls[0][1][0].run_id]]  # it reached the handler too late
    for _ in range(5):
        clock.advance(1)
        await send_ahead(parts)
    assert len(starts.started) == 1  # one run of the occurrence
    assert j.id not in parts.queue and not parts.runs.inflight
    records = [op[:4] for op in (await read_log(parts.store, name)).records() if op[0] == REMOVE]
    assert [op[1] for op in records] == [j.id] and records[0][3] != CANCELLED  # its success, recorded


async def test_a_success_whose_write_is_retried_when_a_cancel_comes_is_recorded_if_the_cancel_fails() -> None:
    """The run succeeded and its removal failed; while it waited to be written again, a cancel
    marked the run, so the retry left it out. The cancel's own removal then failed: the success
    must still be written, not the job queued again to run a second time."""
    from storage import StorageError
    from tests.runtime.harness import GatedStore

    store = GatedStore()
    clock, starts, transport, parts = await one_silo(store)
    j = job(due=timedelta(seconds=1))
    (name,) = await add(parts, j)
    clock.advance(1 - AHEAD_US / 2 / SECOND)
    await send_ahead(parts)
    store.fail_next("append_block", 3, name)  # the success's removal fails: written again in 0.2 s
    clock.advance(AHEAD_US / 2 / SECOND + 0.001)
    await settle()
    assert [job_id for job_id, _ in starts.started] == [j.id] and parts.runs.inflight
    release = store.gate("append_block", name)
    cancel = asyncio.create_task(parts.cancelling.cancel(name, j.id))
    await store.reached("append_block", name).wait()  # the cancel's removal, on its way
    await asyncio.sleep(0.3)  # the outcome's retry comes, and leaves the marked run out
    store.fail_next("append_block", 3, name)  # the cancel's removal does not land
    release.set()
    with pytest.raises(StorageError):
        await cancel
    for _ in range(5):
        clock.advance(1)
        await send_ahead(parts)
    assert len(starts.started) == 1  # one run of the occurrence
    assert j.id not in parts.queue and not parts.runs.inflight
    records = [op[:4] for op in (await read_log(parts.store, name)).records() if op[0] == REMOVE]
    assert [op[1] for op in records] == [j.id] and records[0][3] != CANCELLED  # its success, recorded


@pytest.mark.parametrize("stop", ["cancel", "pause"])
async def test_a_job_sent_ahead_by_every_copy_of_a_shard_taken_back_twice_never_starts_once_stopped(
        stop: str) -> None:
    """Found by the simulation (seed 66001): the shard was taken back from its log twice while
    the job waited in its handler, so three copies of the shard each sent it ahead. The run
    table kept only the run of the copy displaced last, so a cancel (or a pause) withdrew that
    one and the fresh copy's, and the first copy's started the job at its due time."""
    clock, starts, transport, parts = await one_silo()
    j = job(due=timedelta(seconds=1))
    (name,) = await add(parts, j)
    clock.advance(1 - AHEAD_US / 2 / SECOND)
    for copy in range(3):
        await send_ahead(parts)
        assert transport.delivered() == [j.id] * (copy + 1)  # this copy sent it too
        if copy < 2:
            # Its writer stopped (an append landed behind a lost answer): the silo takes the
            # shard back from its log, which queues the job anew.
            shard = parts.shards.get(name)
            assert shard is not None and await parts.shards.taken_back(shard)
    if stop == "cancel":
        assert await parts.cancelling.cancel(name, j.id) == ("cancelled", None)
    else:
        assert (await parts.pausing.pause(name, j.id, None, "op"))[0] == "paused"
    await settle()
    clock.advance(1)
    await settle()
    assert starts.started == []


class UndecidedOnce(SiloHooks):
    """A hook that cannot decide the first time it is asked (its registry read failed)."""

    def __init__(self) -> None:
        self.asked = 0

    async def admit(self, event: Any) -> bool | None:
        self.asked += 1
        return None if self.asked == 1 else True


async def test_a_run_sent_ahead_and_deferred_by_a_hook_never_starts_before_its_due_time() -> None:
    """Simulator seed 823 (named jobs, 1.9 s ahead): a named job's clearance read failed as its
    run was sent ahead, so the run was deferred, queued again a second later; that was still
    before its due time, and the run went out with the retry's time as its own: 0.4 s early."""
    clock = ManualClock()
    starts = Starts(clock)
    lt = LocalTransport(handlers={"h": starts}, clock=clock)
    ahead = replace(OPTIONS, dispatch_ahead=timedelta(seconds=1.9))  # wider than the retry's second
    parts = await make_parts(clock=clock, transport=lt, options=ahead)
    parts.lease.renew(clock.monotonic())
    parts.hooks.append(hook := UndecidedOnce())
    j = job(due=timedelta(seconds=3))
    await add(parts, j)
    clock.advance(1.1)  # the window opens: the run is sent ahead, and deferred
    await send_ahead(parts)
    assert hook.asked == 1 and starts.started == []
    for _ in range(40):
        clock.advance(0.1)
        parts.lease.renew(clock.monotonic())
        await send_ahead(parts)
    assert [job_id for job_id, _ in starts.started] == [j.id]
    assert starts.started[0][1] >= due_us(j), (starts.started[0][1] - due_us(j)) / SECOND


async def test_a_run_whose_success_landed_unanswered_is_not_run_again_by_a_failed_cancel() -> None:
    """Simulator seed 154 (named jobs): a recurring job's run succeeded and its outcome landed with
    the answer lost, and the log could not be read back, so the writer took it back and it was
    retried; a cancel came, and the retry, seeing the run cancelled, stopped. The cancel's own
    removal then found that write in the log (``LandedAfterFailure``) and, not cancelling after
    all, queued the ended run again from the shard's memory, which still held it live; the shard
    could not be taken back from its log at once, and the same owner ran the occurrence twice."""
    from storage import StorageError
    from tests.runtime.harness import GatedStore

    class LandsUnanswered(GatedStore):
        unanswered = 0

        async def append_block(self, name: str, payload: bytes, if_match: str) -> Any:
            if self.unanswered:
                self.unanswered -= 1
                await self.inner.append_block(name, payload, if_match)
                raise Unavailable("injected: append_block landed, its answer was lost")
            return await self.__getattr__("append_block")(name, payload, if_match)

    store = LandsUnanswered()
    clock, starts, transport, parts = await one_silo(store)
    starts.hold = asyncio.Event()
    j = job(due=timedelta(seconds=1), schedule="@every 5s", repeats=2)  # its outcome queues the next
    (name,) = await add(parts, j)
    clock.advance(1 - AHEAD_US / 2 / SECOND)
    await send_ahead(parts)
    clock.advance(AHEAD_US / 2 / SECOND + 0.001)
    await settle()
    assert [job_id for job_id, _ in starts.started] == [j.id]  # started, held
    store.unanswered = 1  # its success's removal lands unanswered
    store.fail_next("fetch", 1, name)  # and is not read back: taken back, retried
    starts.hold.set()
    await settle()
    withdraw = asyncio.Event()
    transport.hold_withdraws.append(withdraw)
    cancel = asyncio.create_task(parts.cancelling.cancel(name, j.id))
    await settle()
    await asyncio.sleep(1)  # the outcome's retry sees the run cancelled, and stops
    store.fail_next("list", 50, "shards/")  # the shard cannot be taken back from its log for now
    withdraw.set()
    with pytest.raises(StorageError):
        await asyncio.wait_for(cancel, 10)
    for _ in range(3):
        clock.advance(1)
        parts.lease.renew(clock.monotonic())
        await send_ahead(parts)
    assert len(starts.started) == 1, starts.started  # one run of the occurrence


async def test_a_pause_whose_withdraw_gets_no_answer_waits_for_the_run_and_nothing_follows_it() -> None:
    """A pause that cannot tell whether a job sent ahead has started answers "paused" only once
    that run has ended, as a cancel does: answered before, the job would start at its due time
    after the caller was told it was paused (docs/operations.md: nothing new starts)."""
    clock, starts, transport, parts = await one_silo(lose_withdraws=True)
    starts.fail = True
    j = job(due=timedelta(seconds=1), failure_policy=FailurePolicy.constant("1s", max_retries=3))
    (name,) = await add(parts, j)
    clock.advance(1 - AHEAD_US / 2 / SECOND)
    await send_ahead(parts)
    pause = asyncio.create_task(parts.pausing.pause(name, j.id, None, "op"))
    await settle()
    assert not pause.done()  # it cannot know the job will not start: it waits for the run
    clock.advance(AHEAD_US / 2 / SECOND + 0.001)
    assert (await pause)[0] == "paused"
    assert [job_id for job_id, _ in starts.started] == [j.id]  # started: the withdraw never reached it
    clock.advance(5)
    await send_ahead(parts)
    assert len(starts.started) == 1 and j.id not in parts.queue  # its retry waits for the resume
