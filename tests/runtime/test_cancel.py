"""Cancel without Ray: a queued job never runs; a dormant shard is folded to look; others answer who owns."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from cluster.model.attempt import JobContext
from cluster.model.jobs import ScheduledJob
from cluster.runtime.roles import Roles
from cluster.runtime.shardlog import ADD, CANCELLED, OCCURRENCE, REMOVE, ShardState
from storage import Appended, LandedAfterFailure, MemoryStore, StorageError, Unavailable, decode, read_log
from tests.runtime.harness import Blocking, GatedStore, Recorder, add, fire_due, job, make_parts, until_idle


async def test_a_cancelled_job_is_removed_durably_and_never_fires() -> None:
    parts = await make_parts()
    parts.transport.handlers["h"] = recorder = Recorder()
    j = job()
    (name,) = await add(parts, j)
    assert await parts.cancelling.cancel(name, j.id) == ("cancelled", None)
    assert [REMOVE, j.id, 1, CANCELLED] in [op[:4] for op in (await read_log(parts.store, name)).records()]
    parts.lease.renew(parts.clock.monotonic())
    parts.clock.advance(2)
    await fire_due(parts)
    assert recorder.ran == []
    assert await parts.cancelling.cancel(name, j.id) == ("absent", None)


async def test_a_cancel_of_a_running_recurring_job_records_the_cancel_in_its_log() -> None:
    """What a user reads back (history, the dashboard) and what a replay by the shard's next
    owner folds: the occurrence in flight ended by the cancel, not by its run's success, and no
    next occurrence after it."""
    parts = await make_parts()
    slow = Blocking()
    parts.transport.handlers["h"] = slow
    j = job(schedule="@every 1s", repeats=5)
    (name,) = await add(parts, j)
    parts.lease.renew(parts.clock.monotonic())
    parts.clock.advance(2)
    firing = asyncio.ensure_future(fire_due(parts))
    await slow.started.wait()
    cancelling = asyncio.ensure_future(parts.cancelling.cancel(name, j.id))
    await until_idle()
    slow.finish.set()
    assert await asyncio.wait_for(cancelling, 5) == ("cancelled", None)
    await firing
    records = (await read_log(parts.store, name)).records()
    assert [REMOVE, j.id, 1, CANCELLED] in [op[:4] for op in records]
    assert j.id not in ShardState().replay(records).live


async def test_a_job_in_a_dormant_shard_is_cancelled_without_loading_it() -> None:
    parts = await make_parts()
    j = job(due=timedelta(hours=1))
    (name,) = await add(parts, j)
    assert await parts.cancelling.cancel(name, j.id) == ("cancelled", None)
    shard = parts.shards.get(name)
    assert shard is not None and not shard.loaded


async def test_a_shard_owned_by_a_live_peer_is_answered_with_its_owner() -> None:
    store = MemoryStore()
    owner = await make_parts(store, "o")
    j = job()
    (name,) = await add(owner, j)
    other = await make_parts(store, "x")
    assert await other.cancelling.cancel(name, j.id) == ("not_owner", "o#1")


async def test_a_cancel_whose_write_fails_leaves_the_job_to_fire() -> None:
    """Issue 12, point 5: the failed removal used to be applied in memory, so the job never fired."""
    store = GatedStore()
    parts = await make_parts(store)  # type: ignore[arg-type]
    parts.transport.handlers["h"] = recorder = Recorder()
    j = job()
    (name,) = await add(parts, j)
    store.fail_next("append_block", 3)  # the writer tries three times
    with pytest.raises(StorageError):
        await parts.cancelling.cancel(name, j.id)
    parts.lease.renew(parts.clock.monotonic())
    parts.clock.advance(2)
    await fire_due(parts)
    assert [ctx.job.id for ctx in recorder.ran] == [j.id]


async def test_a_cancel_of_a_running_job_whose_write_fails_lets_the_attempt_record_its_outcome() -> None:
    store = GatedStore()
    parts = await make_parts(store)  # type: ignore[arg-type]
    slow = Blocking()
    started, finish = slow.started, slow.finish
    parts.transport.handlers["h"] = slow
    j = job()
    (name,) = await add(parts, j)
    parts.lease.renew(parts.clock.monotonic())
    parts.clock.advance(2)
    firing = asyncio.ensure_future(fire_due(parts))
    await started.wait()
    store.fail_next("append_block", 3)  # the writer tries three times
    with pytest.raises(StorageError):
        # Bounded: a cancel that writes nothing waits for the run's end, which waits for this test.
        await asyncio.wait_for(parts.cancelling.cancel(name, j.id), timeout=10)
    finish.set()
    await firing
    assert [REMOVE, j.id, 1, "succeeded"] in [op[:4] for op in (await read_log(store, name)).records()]  # type: ignore[arg-type]


async def test_a_cancel_that_waited_for_the_shard_while_the_job_started_stops_its_next_occurrence() -> None:
    """Found by the simulation: cancel looked for a run in flight, then waited for the shard's
    gate; the job started meanwhile, so the cancel removed it from the log while the run went
    on to add the next occurrence (or, refused, queued itself again): True did not hold."""
    parts = await make_parts()
    slow = Blocking()
    started, finish, ran = slow.started, slow.finish, slow.ran
    parts.transport.handlers["h"] = slow
    j = job(schedule="@every 1s", repeats=3)
    (name,) = await add(parts, j)
    shard = parts.shards.get(name)
    assert shard is not None
    held, free = asyncio.Event(), asyncio.Event()

    async def writer_in_progress() -> None:  # a write holding the shard, as a schedule call does
        async with shard.gate.shared():
            held.set()
            await free.wait()

    holder = asyncio.ensure_future(writer_in_progress())
    await held.wait()
    cancelling = asyncio.ensure_future(parts.cancelling.cancel(name, j.id))
    await until_idle()  # the cancel looked (no run) and now waits for the gate
    parts.lease.renew(parts.clock.monotonic())
    parts.clock.advance(2)
    parts.firing.dispatch(parts.queue.pop_due(limit=10))
    await started.wait()  # the job started while the cancel waited
    free.set()
    await holder
    finish.set()
    assert await cancelling == ("cancelled", None)
    while parts.runs.inflight:  # noqa: ASYNC110  the run's outcome ends on its own
        await asyncio.sleep(0.001)
    parts.clock.advance(5)
    parts.lease.renew(parts.clock.monotonic())
    await fire_due(parts)
    assert ran == [1]
    assert j.id not in parts.queue


class OnItsWay:
    """A handler whose first call is held on its way (a Ray call delayed in transit) until
    ``arrive`` is set; ``events`` notes each attempt as it starts, and whatever else a test adds."""

    def __init__(self, events: list[str]) -> None:
        self.events = events
        self.calls = 0
        self.arrive = asyncio.Event()

    async def __call__(self, ctx: JobContext) -> None:
        self.calls += 1
        if self.calls == 1:
            await self.arrive.wait()
        self.events.append(f"started #{ctx.occurrence}")


async def _until(done: Callable[[], bool]) -> None:
    for _ in range(5000):
        if done():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("never happened")


@pytest.mark.parametrize(("period", "answers"), [("1s", ["cancelled"]), ("10s", ["moved", "cancelled"])],
                         ids=["next-occurrence-in-the-shard", "next-occurrence-moved-on"])
async def test_a_cancel_returns_only_once_a_run_of_an_older_copy_of_the_shard_can_no_longer_start(
        period: str, answers: list[str]) -> None:
    """Found by the simulation (seed 9159): a job's call was on its way to its handler when the
    silo took the shard back from its log; the job ran again from the fresh copy, and that run
    ended and queued the next occurrence (or moved the job on) while the first call still
    travelled. A cancel then found the job queued, removed it, and answered "cancelled"; the
    delayed call started the job after that. The caller, told "cancelled" (following a move if
    told "moved"), must see no start of the job after it was told."""
    events: list[str] = []
    parts = await make_parts()
    parts.transport.handlers["h"] = handler = OnItsWay(events)
    j = job(schedule=f"@every {period}", repeats=3)
    (name,) = await add(parts, j)
    old = parts.shards.get(name)
    parts.lease.renew(parts.clock.monotonic())
    parts.clock.advance(2)
    parts.firing.dispatch(parts.queue.pop_due(limit=10))
    await _until(lambda: handler.calls == 1)  # sent; the call has not reached the handler yet
    # Its writer stopped (an append landed behind a lost answer, or the log was torn: see
    # test_damage), so the silo takes the shard back from its log, which queues the job anew.
    assert old is not None and await parts.shards.taken_back(old)
    assert parts.shards.get(name) is not old
    parts.firing.dispatch(parts.queue.pop_due(limit=10))
    await _until(lambda: events == ["started #1"] and j.id not in parts.runs.inflight)  # ran again, and ended

    heard: list[str] = []

    async def cancel_as_a_client_does() -> str:
        base: str | None = name
        while True:
            assert base is not None
            answer, base = await parts.cancelling.cancel(base, j.id)
            heard.append(answer)
            if answer != "moved":
                return answer

    cancelling = asyncio.ensure_future(cancel_as_a_client_does())
    cancelling.add_done_callback(lambda _: events.append("cancel returned"))
    await until_idle()  # the cancel answered here, however many turns it took, had it nothing to wait for
    assert not cancelling.done()
    handler.arrive.set()  # the first call reaches the handler
    assert await asyncio.wait_for(cancelling, 5) == "cancelled"
    assert heard == answers  # the path this case is about: the job queued here, or moved on
    parts.clock.advance(30)
    parts.lease.renew(parts.clock.monotonic())
    await fire_due(parts)
    assert events == ["started #1", "started #1", "cancel returned"]


async def test_a_cancel_that_finds_the_job_gone_returns_only_once_a_run_of_an_older_copy_can_no_longer_start(
        ) -> None:
    """Found by the simulation (seed 202823): a named job's triggered run was on its way to its
    handler when the silo took the shard back from its log; from the fresh copy the run was
    removed (refused: the put replacing its generation was under way), so the put's cancel heard
    "absent" at once and the put returned; the delayed call started the run 2 s later. "absent"
    promises as much as "cancelled": nothing of the job starts after the caller was told. Here
    the fresh copy's run ends the one-shot job instead of a refusal: the same answer, the same
    older call on its way."""
    events: list[str] = []
    parts = await make_parts()
    parts.transport.handlers["h"] = handler = OnItsWay(events)
    j = job()
    (name,) = await add(parts, j)
    old = parts.shards.get(name)
    parts.lease.renew(parts.clock.monotonic())
    parts.clock.advance(2)
    parts.firing.dispatch(parts.queue.pop_due(limit=10))
    await _until(lambda: handler.calls == 1)  # sent; the call has not reached the handler yet
    assert old is not None and await parts.shards.taken_back(old)  # its writer stopped: queued anew
    parts.firing.dispatch(parts.queue.pop_due(limit=10))
    await _until(lambda: events == ["started #1"] and j.id not in parts.runs.inflight)  # ran again: done

    cancelling = asyncio.ensure_future(parts.cancelling.cancel(name, j.id))
    cancelling.add_done_callback(lambda _: events.append("cancel returned"))
    await until_idle()  # the cancel answered here, however many turns it took, had it nothing to wait for
    assert not cancelling.done()
    handler.arrive.set()  # the first call reaches the handler
    assert await asyncio.wait_for(cancelling, 5) == ("absent", None)
    assert events == ["started #1", "started #1", "cancel returned"]


async def _outcome_landed_unseen(store: GatedStore, parts: Roles, recorder: Recorder, j: ScheduledJob, name: str) -> None:
    """Fire ``j``; its outcome lands behind a lost answer its writer cannot read back, so memory
    took it back (occurrence 1 looks live again) while the log holds it."""
    parts.lease.renew(parts.clock.monotonic())
    parts.clock.advance(2)
    store.lose_answer("append_block", 1)  # the outcome lands; its answer is lost ...
    store.fail_next("fetch", 1, name)  # ... and its writer cannot read back that it landed
    parts.firing.dispatch(parts.queue.pop_due(limit=parts.runs.room))
    while parts.runs.find(j.id) is None or not recorder.ran:  # noqa: ASYNC110
        await asyncio.sleep(0)
    await asyncio.sleep(0.05)  # the outcome write failed; it is tried again in 0.2 s


async def test_a_cancel_that_learns_its_log_holds_more_than_memory_does_not_run_the_job_again() -> None:
    """A run's outcome (its next occurrence) lands in the log behind a lost answer that cannot be
    read back: memory takes it back, occurrence 1 looks live again. A cancel marks the run, which
    then gives up its outcome and ends; the cancel's write learns the outcome had landed
    (``LandedAfterFailure``). The log says occurrence 1 is done; queued again from memory, it ran
    a second time before the shard was taken back (simulation with every fault, seed 53490: the
    same owner ran one occurrence twice, its outcome durable 2.5 s before)."""
    store = GatedStore()
    parts = await make_parts(store)  # type: ignore[arg-type]
    parts.transport.handlers["h"] = recorder = Recorder()
    j = job(due=timedelta(seconds=1), schedule="@every 12s")
    (name,) = await add(parts, j)
    await _outcome_landed_unseen(store, parts, recorder, j, name)
    look = store.gate("stat", name)  # the cancel's writer, about to learn the outcome landed, waits ...
    cancelling = asyncio.ensure_future(parts.cancelling.cancel(name, j.id))
    await store.reached("stat", name).wait()
    await asyncio.sleep(0.3)  # ... while the run, marked cancelled, gives up its outcome and ends
    claim = store.gate("set_metadata", name)  # the take-back's claim waits: the fire loop turns meanwhile
    look.set()
    await store.reached("set_metadata", name).wait()
    parts.firing.dispatch(parts.queue.pop_due(limit=parts.runs.room))
    await until_idle()
    claim.set()
    with pytest.raises(LandedAfterFailure):
        await cancelling
    await until_idle()
    assert [ctx.occurrence for ctx in recorder.ran] == [1]  # before the fix: [1, 1]
    # The log's word stands: occurrence 1 moved on, and occurrence 2 waits in the next window.
    here = ShardState().replay((await read_log(store.inner, name)).records())
    assert j.id not in here.live
    there = ShardState().replay((await read_log(store.inner, here.moved[j.id])).records())
    assert there.live[j.id][OCCURRENCE] == 2


async def test_a_shard_whose_take_back_found_the_store_down_is_taken_back_by_the_next_round() -> None:
    """Nothing is queued from the memory of a shard whose writer stopped on a corrupted log; only
    its take-back queues its jobs. When the store fails that take-back, the maintenance round
    tries again, or the job waited for good in a shard nothing would write to again."""
    store = GatedStore()
    parts = await make_parts(store)  # type: ignore[arg-type]
    parts.transport.handlers["h"] = recorder = Recorder()
    j = job(due=timedelta(seconds=1), schedule="@every 12s")
    (name,) = await add(parts, j)
    old = parts.shards.get(name)
    await _outcome_landed_unseen(store, parts, recorder, j, name)
    store.fail_next("set_metadata", 1, name)  # the take-back's claim does not land
    with pytest.raises(LandedAfterFailure):
        await parts.cancelling.cancel(name, j.id)
    assert parts.shards.get(name) is old
    parts.shards.settle_writers()  # what the maintenance round does
    await until_idle()
    new = parts.shards.get(name)
    assert new is not None and new is not old and new.writer.stopped is None
class HeldOnTheirWay:
    """A handler whose calls are each held on their way (Ray calls delayed in transit) until
    ``arrive[n]`` is set, n counting calls from 0; ``events`` notes each attempt as it starts."""

    def __init__(self, events: list[str], calls: int) -> None:
        self.events = events
        self.arrive = [asyncio.Event() for _ in range(calls)]
        self.calls = 0

    async def __call__(self, ctx: JobContext) -> None:
        n = self.calls
        self.calls += 1
        await self.arrive[n].wait()
        self.events.append(f"call {n} started")


async def test_a_cancel_stops_the_runs_of_every_older_copy_of_the_shard() -> None:
    """Found by the simulation (seed 66001): a shard was taken back from its log twice in a row
    while a job's call was on its way, so three copies of the shard each sent the job. The run
    table kept only the run of the copy displaced last: the cancel stopped that one and the
    fresh copy's, answered "cancelled", and the first copy's call started the job after it."""
    events: list[str] = []
    parts = await make_parts()
    parts.transport.handlers["h"] = handler = HeldOnTheirWay(events, 3)
    j = job()
    (name,) = await add(parts, j)
    parts.lease.renew(parts.clock.monotonic())
    parts.clock.advance(2)
    for n in range(3):
        parts.firing.dispatch(parts.queue.pop_due(limit=10))
        await _until(lambda n=n: handler.calls == n + 1)  # type: ignore[misc]  # sent, on its way
        if n < 2:
            # Its writer stopped (an append landed behind a lost answer): the silo takes the
            # shard back from its log, which queues the job anew.
            copy = parts.shards.get(name)
            assert copy is not None and await parts.shards.taken_back(copy)
    cancelling = asyncio.ensure_future(parts.cancelling.cancel(name, j.id))
    cancelling.add_done_callback(lambda _: events.append("cancel returned"))
    await until_idle()
    handler.arrive[2].set()
    handler.arrive[1].set()
    await _until(lambda: len(events) >= 2)
    await until_idle()  # time for the cancel to answer, had it nothing more to wait for
    handler.arrive[0].set()  # the first copy's call reaches the handler
    assert await asyncio.wait_for(cancelling, 5) == ("cancelled", None)
    assert events == ["call 2 started", "call 1 started", "call 0 started", "cancel returned"]


PEER = "x#1"


class NextOccurrenceKept(GatedStore):
    """Keeps a job's next occurrence from being removed while ``armed()``: an append removing
    occurrence 2 of ``job_id`` as cancelled fails, or, with ``claim``, finds the shard claimed
    by a peer (``PEER``) just before it, and is fenced."""

    def __init__(self, job_id: str, claim: bool) -> None:
        super().__init__()
        self.job_id = job_id
        self.claim = claim
        self.armed: Callable[[], bool] = lambda: False
        self.kept = 0  # appends kept from removing it

    async def append_block(self, name: str, payload: bytes, if_match: str) -> Appended:
        ops = [op[:4] for op in decode(payload).records()]
        if self.armed() and [REMOVE, self.job_id, 2, CANCELLED] in ops:
            self.kept += 1
            if not self.claim:
                raise Unavailable("injected: the removal of the next occurrence failed")
            head = await self.inner.stat(name)
            await self.inner.set_metadata(name, {**head.metadata, "owner": PEER}, head.etag)
        appended: Appended = await self.__getattr__("append_block")(name, payload, if_match)
        return appended


async def _cancel_as_the_next_occurrence_is_written(claim: bool, kept_for_good: bool) -> tuple[
        Any, NextOccurrenceKept, Blocking, Any, str, Any]:
    """A recurring job runs; its outcome writes the next occurrence into the same shard, and a
    cancel marks the run while that write is on its way. Then the outcome's own removal of the
    next occurrence is kept from landing (and, ``kept_for_good``, every later one too).
    ``(cancel's task, store, handler, silo's roles, shard, job)``."""
    j = job(schedule="@every 1s", repeats=3)
    store = NextOccurrenceKept(j.id, claim)
    parts = await make_parts(store)  # type: ignore[arg-type]
    slow = Blocking()
    parts.transport.handlers["h"] = slow
    (name,) = await add(parts, j)
    parts.lease.renew(parts.clock.monotonic())
    parts.clock.advance(2)
    parts.firing.dispatch(parts.queue.pop_due(limit=10))
    await slow.started.wait()
    writing = store.gate("append_block", name)
    slow.finish.set()
    await store.reached("append_block", name).wait()  # the outcome writes the next occurrence
    # The outcome's removal of it (while the run is in flight), not the cancel's own, unless for good.
    store.armed = (lambda: True) if kept_for_good else (lambda: j.id in parts.runs.inflight)
    cancelling = asyncio.ensure_future(parts.cancelling.cancel(name, j.id))
    await until_idle()  # the cancel marked the run; its removal waits behind the outcome's write
    writing.set()
    return cancelling, store, slow, parts, name, j


async def _log_of(store: GatedStore, name: str, job_id: str) -> dict[str, Any]:
    """The live jobs of ``name``'s log, once checked that it holds the interleaving these tests
    are about: the next occurrence landed before the first one's removal by the cancel."""
    records = list((await read_log(store, name)).records())  # type: ignore[arg-type]
    ops = [op[:5] if op[0] == ADD and op[1] == job_id else op[:4] for op in records]
    added = next(i for i, op in enumerate(ops) if op[0] == ADD and op[1] == job_id and op[4] == 2)
    assert added < ops.index([REMOVE, job_id, 1, CANCELLED])
    return ShardState().replay(records).live


@pytest.mark.parametrize(("claim", "answer"), [(False, ("cancelled", None)), (True, ("not_owner", PEER))],
                         ids=["its-removal-failed", "a-peer-claimed-the-shard"])
async def test_a_cancel_that_came_as_the_run_wrote_its_next_occurrence_answers_what_the_log_holds(
        claim: bool, answer: tuple[str, str | None]) -> None:
    """Found by the simulation (seed 65829): a silo SIGSTOPped with a cancel of a running
    recurring job pending went on at SIGCONT; the run's outcome wrote the next occurrence into
    the same shard as the cancel marked the run, so the cancel's removal named the occurrence
    that had just ended and removed nothing. The outcome's own removal of the next occurrence
    was fenced (the silo had been declared dead, a peer claimed the shard) and the cancel
    answered "cancelled" all the same: the peer ran the job. The caller must hear "cancelled"
    only once the shard's log, which its next owner reads, no longer holds the job; else where
    to find it."""
    cancelling, store, slow, parts, name, j = await _cancel_as_the_next_occurrence_is_written(claim, False)
    assert await asyncio.wait_for(cancelling, 5) == answer
    assert store.kept  # the outcome's removal of the next occurrence was kept from landing
    live = await _log_of(store, name, j.id)
    if answer[0] == "cancelled":
        assert j.id not in live
        parts.clock.advance(5)
        parts.lease.renew(parts.clock.monotonic())
        await fire_due(parts)
        assert slow.ran == [1]
    else:  # the shard's new owner holds it: the caller, following, cancels it there
        assert live[j.id][OCCURRENCE] == 2


async def test_a_cancel_that_cannot_remove_the_next_occurrence_fails_and_the_job_fires() -> None:
    """The same, the cancel's own removal of the next occurrence failing too: not cancelled, so
    the next occurrence fires as the log says, rather than stay live and never queued."""
    cancelling, store, slow, parts, name, j = await _cancel_as_the_next_occurrence_is_written(False, True)
    with pytest.raises(StorageError):
        await asyncio.wait_for(cancelling, 5)
    assert (await _log_of(store, name, j.id))[j.id][OCCURRENCE] == 2
    parts.clock.advance(1)
    parts.lease.renew(parts.clock.monotonic())
    await fire_due(parts)
    assert slow.ran == [1, 2]
