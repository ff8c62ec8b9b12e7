"""One job id in two shards of one silo: a flow step taken again after its intent's writer died
puts its fixed job id into the silo's fresh shard while the old copy lives on in a shard the silo
adopted (its log lost the job's ADD to damage, so the retry's search found no earlier try). The
run table and the timer queue are keyed by job id alone; a cancel or pause of one copy, or the
outcome of its cancelled run, must hold for that copy and leave the other to fire; and the copy the
step's caller was told of, which the log holds, is the one queued."""

from __future__ import annotations

import asyncio

from cluster.model.jobs import ScheduledJob
from cluster.runtime.roles import Roles
from cluster.runtime.shardlog import CANCELLED, MOVED, REMOVE, SUCCEEDED
from storage import MemoryStore, Store, read_log
from tests.runtime.harness import (
    Blocking,
    GatedStore,
    LocalTransport,
    Recorder,
    add,
    fire_due,
    item,
    job,
    live_copies,
    make_parts,
    until_idle,
)
from tests.runtime.test_cancel import HeldOnTheirWay, _until
from tests.runtime.test_damage import corrupt


async def _adopted_and_fresh(handler: object, store: Store | None = None,
                             j: ScheduledJob | None = None) -> tuple[Roles, ScheduledJob, str]:
    """Silo a's first incarnation adds a job (``j``, or a one-shot one), and a is restarted (Ray
    after a SIGKILL): its second incarnation adopts the first one's shard, job loaded and queued.
    Returns the silo, the job and that adopted shard; the job's second copy is the caller's to add."""
    store = MemoryStore() if store is None else store
    first = await make_parts(store, "a")
    j = job() if j is None else j
    (old,) = await add(first, j)
    parts = await make_parts(store, "a", transport=LocalTransport(predecessors_exited=True))
    parts.transport.handlers["h"] = handler  # type: ignore[assignment]
    parts.adoption._budget = 64
    assert await parts.adoption.adopt_orphans() == 1
    adopted = parts.shards.get(old)
    assert adopted is not None and adopted.state is not None and j.id in adopted.state.live
    # Past what the first incarnation's lease may still have sent: a cancel would wait it out.
    parts.clock.advance(max(0.0, adopted.sent_before_until - parts.clock.monotonic()))
    parts.lease.renew(parts.clock.monotonic())
    return parts, j, old


async def _ops(parts: Roles, name: str, job_id: str) -> list[list[object]]:
    return [op[:4] for op in (await read_log(parts.store, name)).records() if op[1] == job_id]


async def _cancelled_between_the_calls(parts: Roles, handler: HeldOnTheirWay, cancelling: asyncio.Future[object],
                                       events: list[str]) -> None:
    """Let the adopted copy's call reach its handler, then the fresh copy's: "cancelled" must come
    between them (nothing of the adopted copy starts after it; the fresh copy still runs)."""
    handler.arrive[0].set()  # the adopted copy's call reaches the handler
    assert await asyncio.wait_for(cancelling, 5) == ("cancelled", None)
    handler.arrive[1].set()
    await _until(lambda: not parts.runs.inflight and not parts.runs.displaced)
    await until_idle()
    assert events == ["call 0 started", "cancel returned", "call 1 started"]


async def test_a_cancel_of_the_adopted_copy_stops_its_run_displaced_by_the_fresh_copys() -> None:
    """The adopted copy's call is on its way to the handler when the fresh copy's run starts and
    displaces it in the run table. "cancelled" for the adopted shard promises that nothing of the
    job starts from it after the caller was told; the fresh copy runs as scheduled."""
    events: list[str] = []
    parts, j, old = await _adopted_and_fresh(handler := HeldOnTheirWay(events, 2))
    parts.clock.advance(2)
    parts.firing.dispatch(parts.queue.pop_due(limit=10))
    await _until(lambda: handler.calls == 1)  # the adopted copy's call, on its way
    displaced = parts.runs.inflight[j.id]
    (new,) = await add(parts, j)  # the step taken again: its copy in the silo's fresh shard
    assert new != old
    parts.firing.dispatch(parts.queue.pop_due(limit=10))
    await _until(lambda: handler.calls == 2)  # the fresh copy's call, on its way
    assert parts.runs.displaced_of(j.id) == [displaced] and displaced.shard.base == old

    cancelling = asyncio.ensure_future(parts.cancelling.cancel(old, j.id))
    cancelling.add_done_callback(lambda _: events.append("cancel returned"))
    await until_idle()  # the cancel answered here, had it nothing to wait for
    await _cancelled_between_the_calls(parts, handler, cancelling, events)
    assert [REMOVE, j.id, 1, CANCELLED] in await _ops(parts, old, j.id)
    assert [REMOVE, j.id, 1, SUCCEEDED] in await _ops(parts, new, j.id)


async def test_a_cancel_of_the_adopted_copy_leaves_the_fresh_copy_queued_to_fire() -> None:
    """The fresh copy's push took the job's one place in the queue; a cancel of the adopted copy
    took that place away with it, and the fresh copy, live in its shard's log, was queued nowhere:
    it neither fired nor went."""
    parts, j, old = await _adopted_and_fresh(recorder := Recorder())
    (new,) = await add(parts, j)  # the step taken again: its copy in the silo's fresh shard
    assert new != old
    assert await parts.cancelling.cancel(old, j.id) == ("cancelled", None)
    parts.clock.advance(2)
    await fire_due(parts)
    assert [ctx.job.id for ctx in recorder.ran] == [j.id]
    assert [REMOVE, j.id, 1, CANCELLED] in await _ops(parts, old, j.id)
    assert [REMOVE, j.id, 1, SUCCEEDED] in await _ops(parts, new, j.id)


async def test_a_cancel_that_waited_for_the_adopted_shard_stops_the_run_displaced_meanwhile() -> None:
    """The same, the runs starting while the cancel waits for the adopted shard: it looks again
    under the shard's gate, where the fresh copy's run is the one the table names."""
    events: list[str] = []
    parts, j, old = await _adopted_and_fresh(handler := HeldOnTheirWay(events, 2))
    adopted = parts.shards.get(old)
    assert adopted is not None
    held, free = asyncio.Event(), asyncio.Event()

    async def writer_in_progress() -> None:  # a write holding the shard, as an outcome does
        async with adopted.gate.shared():
            held.set()
            await free.wait()

    holder = asyncio.ensure_future(writer_in_progress())
    await held.wait()
    cancelling = asyncio.ensure_future(parts.cancelling.cancel(old, j.id))
    cancelling.add_done_callback(lambda _: events.append("cancel returned"))
    await until_idle()  # the cancel looked (nothing in flight) and now waits for the gate
    parts.clock.advance(2)
    parts.firing.dispatch(parts.queue.pop_due(limit=10))
    await _until(lambda: handler.calls == 1)  # the adopted copy's call, on its way
    (new,) = await add(parts, j)
    parts.firing.dispatch(parts.queue.pop_due(limit=10))
    await _until(lambda: handler.calls == 2)  # the fresh copy's, displacing it
    assert [run.shard.base for run in parts.runs.displaced_of(j.id)] == [old]
    free.set()
    await holder
    await until_idle()
    await _cancelled_between_the_calls(parts, handler, cancelling, events)
    assert [REMOVE, j.id, 1, SUCCEEDED] in await _ops(parts, new, j.id)


async def test_a_cancel_of_the_adopted_copys_run_leaves_the_fresh_copys_staged_run_to_be_sent() -> None:
    """The fresh copy's run waits staged (its target gone for a moment) when the adopted copy's
    run, displaced, is cancelled: the staged run is the fresh copy's, not the cancel's to drop."""
    events: list[str] = []
    parts, j, old = await _adopted_and_fresh(handler := HeldOnTheirWay(events, 2))
    parts.clock.advance(2)
    parts.firing.dispatch(parts.queue.pop_due(limit=10))
    await _until(lambda: handler.calls == 1)  # the adopted copy's call, on its way
    (new,) = await add(parts, j)
    target = parts.transport.handlers.pop("h")  # the actor is gone for a moment
    parts.firing.dispatch(parts.queue.pop_due(limit=10))
    await _until(lambda: j.id in parts.runs.staged)
    assert parts.runs.staged[j.id].shard.base == new

    cancelling = asyncio.ensure_future(parts.cancelling.cancel(old, j.id))
    cancelling.add_done_callback(lambda _: events.append("cancel returned"))
    await until_idle()
    handler.arrive[0].set()
    assert await asyncio.wait_for(cancelling, 5) == ("cancelled", None)
    parts.transport.handlers["h"] = target  # back
    handler.arrive[1].set()
    await parts.firing.retry_staged()
    await _until(lambda: not parts.runs.inflight and not parts.runs.displaced and not parts.runs.staged)
    await until_idle()
    assert events == ["call 0 started", "cancel returned", "call 1 started"]
    assert [REMOVE, j.id, 1, SUCCEEDED] in await _ops(parts, new, j.id)


async def test_a_pause_of_the_adopted_copy_leaves_the_fresh_copy_queued_to_fire() -> None:
    """The fresh copy's push took the job's one place in the queue; a pause of the adopted copy
    took that place away with it, and the fresh copy, live and not paused in its shard's log, was
    queued nowhere: it neither fired nor went. The pause holds for its own copy only."""
    parts, j, old = await _adopted_and_fresh(recorder := Recorder())
    (new,) = await add(parts, j)  # the step taken again: its copy in the silo's fresh shard
    assert new != old
    answer, _ = await parts.pausing.pause(old, j.id, None, "ops")
    assert answer == "paused"
    parts.clock.advance(2)
    await fire_due(parts)
    assert [ctx.job.id for ctx in recorder.ran] == [j.id]
    assert [REMOVE, j.id, 1, SUCCEEDED] in await _ops(parts, new, j.id)
    assert await parts.pausing.pause(new, j.id, None, "ops") == ("absent", None)


async def test_a_cancel_marking_the_adopted_copys_run_as_its_outcome_moves_it_on_leaves_the_fresh_copy_to_fire(
        ) -> None:
    """The adopted copy's recurring job runs while the fresh copy waits in the queue. A cancel of
    the adopted copy marks its run while the run's outcome writes the next occurrence, so the
    outcome removes that occurrence itself (``Outcomes._cancel_next``), and it took the job's one
    place in the queue with it: the fresh copy's. Live in its shard's log, it neither fired nor went."""
    store = GatedStore()
    # Its next occurrence, at 13 s, is in the next window: the outcome moves it on.
    parts, j, old = await _adopted_and_fresh(handler := Blocking(), store, job(schedule="@every 12s"))
    parts.clock.advance(2)
    parts.lease.renew(parts.clock.monotonic())
    parts.firing.dispatch(parts.queue.pop_due(limit=10))
    await asyncio.wait_for(handler.started.wait(), 5)  # the adopted copy's run
    (new,) = await add(parts, j)  # the step taken again, due at once, not fired yet
    assert new != old and parts.queue.get(j.id) is not None
    release = store.gate("append_block", old)
    handler.finish.set()
    await asyncio.wait_for(store.reached("append_block", old).wait(), 5)  # the outcome's move, on its way
    cancelling = asyncio.ensure_future(parts.cancelling.cancel(old, j.id))
    await until_idle()
    release.set()
    # The move landed and the outcome removed the occurrence it carried: nothing of the adopted
    # copy lives on, only the fresh one.
    assert await asyncio.wait_for(cancelling, 5) == ("cancelled", None)
    assert [REMOVE, j.id, 1, MOVED] in await _ops(parts, old, j.id)
    assert [shard for shard, _ in await live_copies(store, j.id)] == [new]
    handler.ran.clear()
    await fire_due(parts)
    assert handler.ran == [1]  # the fresh copy's first occurrence


async def test_a_step_taken_again_beside_a_copy_its_log_lost_fires_from_the_copy_the_flow_was_told_of() -> None:
    """How one id gets into two shards of one silo (simulator seed 395846, every kind): the adopted
    shard's log lost the job's ADD to damage at rest after the silo had loaded it, so the retry of
    the step's schedule call found no earlier try there and added the job again into the silo's
    fresh shard, the shard the flow was told. The memory-only copy kept the job's one place in
    the queue and ran; the copy the flow was told of stayed live in its log, queued nowhere, to
    run again after the next failover, and its shard never drained. The acknowledged copy, the
    one the log holds, is the one that fires: the other is a trace of a record the log lost."""
    store = MemoryStore()
    first = await make_parts(store, "a")
    j, k = job(), job()
    (old,) = await first.scheduling.schedule([item(j)])  # landed; its caller (a flow's writer) died
    await first.scheduling.schedule([item(k)])  # a later frame: j's is mid-log
    parts = await make_parts(store, "a", transport=LocalTransport(predecessors_exited=True))
    parts.transport.handlers["h"] = recorder = Recorder()
    parts.adoption._budget = 64
    assert await parts.adoption.adopt_orphans() == 1
    adopted = parts.shards.get(old)
    assert adopted is not None and adopted.state is not None and j.id in adopted.state.live
    corrupt(store, old, 0)  # bit rot in j's frame: the log no longer holds j
    (new,) = await parts.scheduling.schedule([item(j)], suspects=[first.me.owner])  # the step taken again
    assert new != old
    parts.clock.advance(max(0.0, adopted.sent_before_until - parts.clock.monotonic()) + 2)
    parts.lease.renew(parts.clock.monotonic())
    await fire_due(parts)
    assert sorted(ctx.job.id for ctx in recorder.ran) == sorted([j.id, k.id])
    assert [REMOVE, j.id, 1, SUCCEEDED] in await _ops(parts, new, j.id)
    assert await live_copies(store, j.id) == []  # nothing left for a failover to run again


async def test_a_copy_adopted_while_the_other_copy_runs_fires_once_that_run_ends() -> None:
    """The other order (simulator seed 995762, every kind): the silo runs its fresh shard's copy
    of a flow step when it adopts a shard holding the step's other copy, the one a retry of the
    flow's schedule call was told of. A load leaves a job alone whose run is in flight here, as
    that run's outcome queues what comes next; but an outcome queues nothing of another shard's
    copy, so the adopted copy stayed live in its log, queued nowhere, and never fired while the
    silo lived."""
    store = MemoryStore()
    first = await make_parts(store, "a")
    j = job()
    (old,) = await add(first, j)  # the flow's first try landed here; its writer died
    parts = await make_parts(store, "a", transport=LocalTransport(predecessors_exited=True))
    parts.transport.handlers["h"] = handler = Blocking()
    (new,) = await add(parts, j)  # the step taken again, in the new incarnation's fresh shard
    assert new != old
    parts.clock.advance(2)
    parts.lease.renew(parts.clock.monotonic())
    parts.firing.dispatch(parts.queue.pop_due(limit=10))
    await asyncio.wait_for(handler.started.wait(), 5)  # the fresh copy runs
    parts.adoption._budget = 64
    assert await parts.adoption.adopt_orphans() == 1  # the first try's shard, adopted meanwhile
    adopted = parts.shards.get(old)
    assert adopted is not None and adopted.state is not None and j.id in adopted.state.live
    handler.finish.set()
    await _until(lambda: not parts.runs.inflight)
    await until_idle()
    parts.clock.advance(max(0.0, adopted.sent_before_until - parts.clock.monotonic()) + 2)
    parts.lease.renew(parts.clock.monotonic())
    await fire_due(parts)
    assert handler.ran == [1, 1]  # each copy's occurrence, once
    assert [REMOVE, j.id, 1, SUCCEEDED] in await _ops(parts, old, j.id)
    assert [REMOVE, j.id, 1, SUCCEEDED] in await _ops(parts, new, j.id)
    assert await live_copies(store, j.id) == []  # nothing left for a failover to run again
