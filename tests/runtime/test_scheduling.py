"""Scheduling without Ray: a call is all or nothing across windows, and a retried call never makes
a second copy of a job that its earlier try landed (issue 12, point 9)."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from cluster.model.clock import SYSTEM_CLOCK
from cluster.model.errors import EarlierTryUnsettled, ScheduleInDoubt, SiloStopping
from cluster.model.jobs import ScheduledJob
from cluster.model.policies import FailurePolicy
from cluster.model.wire import timedelta_to_us
from cluster.runtime.membership import Membership
from cluster.runtime.shard import Shard
from cluster.runtime.shardlog import (
    MOVED,
    SHARD_PREFIX,
    SNAPSHOT,
    ShardState,
    add_op,
    format_window,
    remove_op,
    window_of,
)
from cluster.runtime.silo import Silo
from storage import MemoryStore, StorageError, Store, list_logs, read_log
from tests.runtime.harness import (
    OPTIONS,
    GatedStore,
    LocalTransport,
    ManualClock,
    Recorder,
    add,
    fire_due,
    item,
    job,
    make_parts,
    until_idle,
)


def restarted() -> LocalTransport:
    """The transport of a silo Ray restarted after a SIGKILL on this node: the old process is seen gone."""
    return LocalTransport(predecessors_exited=True)


async def copies(store: Store, job_id: str) -> list[str]:
    """The shards in which ``job_id`` is live: more than one means it fires more than once."""
    found = []
    for head in await list_logs(store, SHARD_PREFIX):
        if job_id in ShardState().replay((await read_log(store, head.base)).records()).live:
            found.append(head.base)
    return found


def window_prefix(j_due: datetime) -> str:
    due_us = int(j_due.timestamp() * 1_000_000)
    return f"{SHARD_PREFIX}{format_window(window_of(due_us, timedelta_to_us(OPTIONS.shard_duration)))}-"


async def test_a_call_whose_batch_for_one_window_fails_leaves_none_of_its_jobs() -> None:
    """Before: the batch of the other window stayed durable, and fired, though the call failed."""
    store = GatedStore()
    silo = Silo("0", "memory://", OPTIONS, "test", hooks=lambda _store, _view: [], transport=LocalTransport(),
                clock=SYSTEM_CLOCK, store=store)  # type: ignore[arg-type]
    await silo.ready()
    now = datetime.now(timezone.utc)
    first, second = job(due=timedelta(hours=1), now=now), job(due=timedelta(hours=2), now=now)
    store.fail_next("append_block", 3, prefix=window_prefix(second.due))  # the writer tries three times
    with pytest.raises(StorageError):
        await silo.schedule([item(first), item(second)])
    assert await copies(store.inner, first.id) == []
    assert await copies(store.inner, second.id) == []
    await silo.stop()


async def test_a_failed_call_that_cannot_take_back_what_landed_names_the_jobs_that_may_fire() -> None:
    store = GatedStore()
    parts = await make_parts(store)  # type: ignore[arg-type]
    first, second = job(due=timedelta(hours=1)), job(due=timedelta(hours=2))
    held = store.gate("append_block", window_prefix(second.due))
    call = asyncio.ensure_future(parts.scheduling.schedule([item(first), item(second)]))
    await store.reached("append_block", window_prefix(second.due)).wait()
    for _ in range(100):  # the first window's batch lands meanwhile
        if await copies(store.inner, first.id):
            break
        await asyncio.sleep(0)
    (landed_in,) = await copies(store.inner, first.id)
    store.fail_next("append_block", 3, prefix=window_prefix(second.due))
    store.fail_next("append_block", 9, prefix=window_prefix(first.due))  # three take-backs of three tries
    held.set()
    with pytest.raises(ScheduleInDoubt) as raised:
        await call
    assert raised.value.may_fire == {first.id: landed_in}
    assert await copies(store.inner, second.id) == []


async def test_a_landed_batch_that_could_not_be_taken_back_fires_as_the_caller_was_told_it_may() -> None:
    """Before: written unqueued, a batch whose take-back failed stayed live in its shard's log and
    in memory, queued nowhere: the client, told it may fire, saw it neither fire nor go
    (simulator seed 311450 with every kind)."""
    store = GatedStore()
    parts = await make_parts(store)  # type: ignore[arg-type]
    parts.transport.handlers["h"] = Recorder()
    first, second = job(due=timedelta(seconds=1)), job(due=timedelta(hours=2))
    assert window_prefix(first.due) != window_prefix(second.due)
    held = store.gate("append_block", window_prefix(second.due))
    call = asyncio.ensure_future(parts.scheduling.schedule([item(first), item(second)]))
    await store.reached("append_block", window_prefix(second.due)).wait()
    await until_idle()  # the first window's batch lands meanwhile
    assert await copies(store.inner, first.id) != []
    store.fail_next("append_block", 3, prefix=window_prefix(second.due))
    store.fail_next("append_block", 9, prefix=window_prefix(first.due))  # three take-backs of three tries
    held.set()
    with pytest.raises(ScheduleInDoubt) as raised:
        await call
    assert list(raised.value.may_fire) == [first.id]
    parts.lease.renew(parts.clock.monotonic())
    parts.clock.advance(1)
    await fire_due(parts)
    assert parts.transport.delivered() == [first.id]


@pytest.mark.parametrize("ran", ["succeeded", "failed, its retry waiting", "recurring, its next occurrence waiting"])
async def test_a_failed_call_whose_landed_job_ran_meanwhile_is_answered_in_doubt_not_failed(ran: str) -> None:
    """A batch that landed can run before the call's other batch fails: here its dormant shard
    loaded and fired it while the other batch's append waited. Taking it back then removes
    nothing, or a job that already ran. Before: the call raised its plain error, which a client
    reads as "nothing of it will fire", and the job had run (simulator seed 431343 with every
    kind: a paused silo's landed batch was fired by a peer that adopted its shard, and the
    call then failed)."""
    store = GatedStore()
    parts = await make_parts(store)  # type: ignore[arg-type]
    kw: dict[str, Any] = {
        "succeeded": {},
        "failed, its retry waiting": {"failure_policy": FailurePolicy.constant("1s", max_retries=3)},
        "recurring, its next occurrence waiting": {"schedule": "@every 1s", "repeats": 3},
    }[ran]
    first, later = job(due=timedelta(seconds=32), **kw), job(due=timedelta(seconds=38))  # window T0+30 s: dormant
    parts.transport.handlers["h"] = Recorder(fail=[first.id] if "failed" in ran else [])
    second = job(due=timedelta(hours=2))
    (name,) = await add(parts, later)  # keeps the shard from going as drained once ``first`` ran
    held = store.gate("append_block", window_prefix(second.due))
    call = asyncio.ensure_future(parts.scheduling.schedule([item(first), item(second)]))
    await store.reached("append_block", window_prefix(second.due)).wait()
    await until_idle()  # the first window's batch lands meanwhile
    assert await copies(store.inner, first.id) == [name]
    parts.clock.advance(32)
    parts.lease.renew(parts.clock.monotonic())
    await parts.loading.load_due()
    await fire_due(parts)
    assert parts.transport.delivered() == [first.id]
    assert await copies(store.inner, first.id) == ([] if ran == "succeeded" else [name])  # gone, or waiting again
    store.fail_next("append_block", 3, prefix=window_prefix(second.due))
    held.set()
    with pytest.raises(ScheduleInDoubt) as raised:
        await call
    assert raised.value.may_fire == {first.id: name}
    assert await copies(store.inner, second.id) == []


async def test_a_retry_after_the_first_silo_died_having_landed_the_jobs_adds_no_second_copy() -> None:
    """Before: the retry wrote every job again into the second silo's shard: two live copies."""
    store = MemoryStore()
    first = await make_parts(store, "a")
    j, k = job(due=timedelta(hours=1)), job(due=timedelta(hours=1))
    (earlier,) = await first.scheduling.schedule([item(j)])  # landed; the client never heard
    await make_parts(store, "a", transport=restarted())  # Ray restarted the silo: its first incarnation's shards are orphans
    second = await make_parts(store, "b")
    names = await second.scheduling.schedule([item(j), item(k)], suspects=["a"])
    assert names[0] == earlier
    assert second.shards.get(earlier) is not None  # claimed: the dead incarnation can write there no more
    assert await copies(store, j.id) == [earlier]
    assert await copies(store, k.id) == [names[1]]


async def _moved_on(store: MemoryStore) -> tuple[ScheduledJob, Shard, Shard]:
    """A recurring job's schedule call lands in silo a's shard (the client never heard), and the
    job moves on to the next window's shard; then a is restarted: its shards are orphans."""
    first = await make_parts(store, "a")
    j = job(due=timedelta(seconds=1), schedule="@every 20s")
    jid, due_us, packed = item(j)
    (earlier,) = await first.scheduling.schedule([item(j)])
    source = first.shards.get(earlier)
    assert source is not None and source.loaded
    next_due = due_us + 20_000_000
    target = await first.shards.open_shard(window_of(next_due, timedelta_to_us(OPTIONS.shard_duration)))
    await target.write([add_op(jid, next_due, packed, 2, source=earlier)])
    await source.write([remove_op(jid, 1, MOVED, target.base, [next_due, packed, 2, 0, next_due])])
    await first.moves.settle(source, jid)  # carried out, as an outcome does: no longer pending
    return j, source, target


@pytest.mark.parametrize("gone", ["deleted once drained", "compacted"])
async def test_a_retry_finds_an_earlier_try_that_moved_on_to_a_later_window(gone: str) -> None:
    """The earlier try landed and its job moved on to the next window's shard; then its first
    shard was deleted once drained, or compacted (no ADD of the job left there). The retry looked
    in the first window only, took the job for never landed and wrote it again: two live chains
    (simulation with every fault, seeds 42872 and 53763: each occurrence then ran twice)."""
    store = MemoryStore()
    j, source, target = await _moved_on(store)
    if gone == "compacted":
        await source.writer.rotate()
        assert [op[0] for op in (await read_log(store, source.base)).records()] == [SNAPSHOT]
    else:
        await source.writer.delete()
    await make_parts(store, "a", transport=restarted())
    second = await make_parts(store, "b")
    (name,) = await second.scheduling.schedule([item(j)], suspects=["a"])
    assert await copies(store, j.id) == [target.base]  # before the fix: also in b's new shard
    assert name == target.base  # where the job lives on: a cancel sent there reaches it


@pytest.mark.parametrize("gone", ["deleted once drained", "compacted", "compacted before the move landed"])
async def test_a_retry_finds_an_earlier_try_that_an_adopter_moved_on_within_its_window(gone: str) -> None:
    """The earlier try landed in a#1's shard; silo c, no suspect, adopted that shard and moved
    the job's next occurrence into its own shard of the same window; then the first shard was
    deleted once drained, or compacted (its snapshot names the move but holds no ADD). The retry
    looked in the suspects' shards and in later windows only, took the job for never landed and
    wrote it again: two live chains (simulation with every fault, seed 219412). Compacted while
    the move was only decided, the target not yet holding the job, the retry looked everywhere
    and found it nowhere; the move then landed beside its copy. The move pending in the first
    shard's snapshot now counts as the job found there, where a cancel follows the move on."""
    store = MemoryStore()
    first = await make_parts(store, "a")
    j = job(due=timedelta(seconds=1), schedule="@every 2s")
    jid, due_us, packed = item(j)
    duration = timedelta_to_us(OPTIONS.shard_duration)
    (earlier,) = await first.scheduling.schedule([item(j)])  # landed; the client never heard
    await make_parts(store, "a", transport=restarted())  # a#1's shards are orphans
    adopter = await make_parts(store, "c")
    source = await adopter.adoption.claim_for_cancel(earlier)
    assert source is not None
    next_due = due_us + 2_000_000
    assert window_of(next_due, duration) == window_of(due_us, duration)
    target = await adopter.shards.open_shard(window_of(next_due, duration))
    landed_first = gone != "compacted before the move landed"
    if landed_first:
        await target.write([add_op(jid, next_due, packed, 2, source=earlier)])
    await source.write([remove_op(jid, 1, MOVED, target.base, [next_due, packed, 2, 0, next_due])])
    if landed_first:
        await adopter.moves.settle(source, jid)
    if gone.startswith("compacted"):
        await source.writer.rotate()
        assert [op[0] for op in (await read_log(store, source.base)).records()] == [SNAPSHOT]
    else:
        await source.writer.delete()
    second = await make_parts(store, "b")
    (name,) = await second.scheduling.schedule([item(j)], suspects=["a"])
    await adopter.moves.settle(source, jid)  # carried out now, if it was not
    assert await copies(store, j.id) == [target.base]  # before the fix: also in b's new shard
    assert name == (target.base if landed_first else source.base)


async def test_a_retry_that_finds_its_job_where_the_chain_moved_through_writes_nothing_and_leads_a_cancel_on() -> None:
    """The earlier try's recurring job moved from its first shard (a#1's) to a#2's shard of the
    same window, and on to the next window's; then its first shard was deleted once drained. The
    retry finds the job in the shard it moved through and answers that shard: no second copy, and
    a cancel sent there is told where the job moved and cancels it there. The simulator took such
    an answer for a second chain (seed 207672, every fault: j7 answered in the shard of its second
    occurrence while its third was live in the next window's); this is what it now holds to."""
    store = MemoryStore()
    first = await make_parts(store, "a")
    j = job(due=timedelta(seconds=1), schedule="@every 8s", repeats=3)
    jid, due_us, packed = item(j)
    duration = timedelta_to_us(OPTIONS.shard_duration)
    (earlier,) = await first.scheduling.schedule([item(j)])  # landed; the client never heard
    source = first.shards.get(earlier)
    again = await make_parts(store, "a", transport=restarted())  # its next incarnation moves the job on
    second_due, third_due = due_us + 8_000_000, due_us + 16_000_000
    assert window_of(second_due, duration) == window_of(due_us, duration) != window_of(third_due, duration)
    through = await again.shards.open_shard(window_of(second_due, duration))
    target = await again.shards.open_shard(window_of(third_due, duration))
    await through.write([add_op(jid, second_due, packed, 2, source=earlier)])
    assert source is not None
    await source.write([remove_op(jid, 1, MOVED, through.base, [second_due, packed, 2, 0, second_due])])
    await target.write([add_op(jid, third_due, packed, 3, source=through.base)])
    await through.write([remove_op(jid, 2, MOVED, target.base, [third_due, packed, 3, 0, third_due])])
    await source.writer.delete()  # drained
    await make_parts(store, "a", transport=restarted())  # a#2's shards are orphans now
    second = await make_parts(store, "b")
    (name,) = await second.scheduling.schedule([item(j)], suspects=["a"])
    assert await copies(store, j.id) == [target.base]
    second.clock.advance(60)  # past the dead owner's lease, which a cancel of its shards waits out
    heard: list[str] = []
    base: str | None = name
    while base is not None and len(heard) < 5:  # a cancel sent where the caller was told, followed as a client does
        answer, info = await asyncio.wait_for(second.cancelling.cancel(base, j.id), 5)
        heard.append(answer)
        base = info if answer == "moved" else None
    assert heard == ["moved", "cancelled"]
    assert await copies(store, j.id) == []


async def test_a_retry_whose_earlier_try_already_ran_finds_it_and_runs_it_no_more() -> None:
    """A job the earlier try landed that has run since is nothing live, yet found: while its
    shard's log records it, the retry answers that shard and writes nothing. Only a log that no
    longer records it (deleted as drained, or compacted) lets a retry add it again, the one more
    run the README allows; the simulator excuses a second run on that ground alone (seed 56728)."""
    store = MemoryStore()
    first = await make_parts(store, "a")
    first.transport.handlers["h"] = Recorder()
    j = job(due=timedelta(seconds=1))
    (earlier,) = await first.scheduling.schedule([item(j)])  # landed; the client never heard
    first.lease.renew(first.clock.monotonic())
    first.clock.advance(1)
    await fire_due(first)
    assert first.transport.delivered() == [j.id]
    assert await copies(store, j.id) == []  # its success is durable: nothing of it is live
    await make_parts(store, "a", transport=restarted())
    second = await make_parts(store, "b")
    second.transport.handlers["h"] = Recorder()
    assert await second.scheduling.schedule([item(j)], suspects=["a"]) == [earlier]
    assert await copies(store, j.id) == []
    second.lease.renew(second.clock.monotonic())
    second.clock.advance(1)
    await fire_due(second)
    assert second.transport.delivered() == []


async def test_a_retry_while_the_first_silo_is_not_proven_dead_writes_nothing_and_asks_again() -> None:
    store = MemoryStore()
    first = await make_parts(store, "a")
    j = job(due=timedelta(hours=1))
    await first.scheduling.schedule([item(j)])
    second = await make_parts(store, "b")
    with pytest.raises(EarlierTryUnsettled):
        await second.scheduling.schedule([item(j)], suspects=["a"])
    assert len(await copies(store, j.id)) == 1
    assert [h.base for h in await list_logs(store, SHARD_PREFIX) if "-b." in h.base] == []


async def test_a_retry_naming_this_silo_waits_only_for_a_call_here_writing_the_same_jobs() -> None:
    """A call still writing here may be the earlier try (it carries the same job ids): a retry of
    those jobs writes nothing until it ends, then finds its copy. A call writing other jobs is
    none, and holds up nothing. Before: any call under way here refused every retry naming this
    silo; a flow step handed to the one silo that could settle it was refused whenever a step of
    another flow was being scheduled there, and an acknowledged flow never ran (simulator seed
    202493 with every fault)."""
    store = GatedStore()
    parts = await make_parts(store, "a")  # type: ignore[arg-type]
    j, k = job(due=timedelta(hours=1)), job(due=timedelta(hours=2))
    assert window_prefix(j.due) != window_prefix(k.due)
    release = store.gate("create", window_prefix(j.due))
    earlier = asyncio.create_task(parts.scheduling.schedule([item(j)]))
    await store.reached("create", window_prefix(j.due)).wait()
    with pytest.raises(EarlierTryUnsettled):  # not refused, it would wait at the same gate
        await asyncio.wait_for(parts.scheduling.schedule([item(j)], suspects=["a"]), 5)
    (other,) = await asyncio.wait_for(parts.scheduling.schedule([item(k)], suspects=["a"]), 5)
    assert await copies(store.inner, k.id) == [other]
    release.set()
    (landed,) = await earlier
    assert await parts.scheduling.schedule([item(j)], suspects=["a"]) == [landed]
    assert await copies(store.inner, j.id) == [landed]


async def test_a_retry_waits_for_a_live_suspect_holding_its_dead_incarnations_shard() -> None:
    """A silo's next incarnation that claimed its old shard is the suspect itself, alive, and
    may still be sending the earlier try (a flow step's intent names that incarnation: "a#2").
    Before: the shard counted as fenced, the retry found nothing and wrote its copy, and the
    earlier try, resumed, wrote its own into a fresh shard: two copies (simulator seed 154, flows)."""
    store = MemoryStore()
    first = await make_parts(store, "a")
    (old,) = await first.scheduling.schedule([item(job(due=timedelta(hours=1)))])  # "a#1"'s shard of that window
    again = await make_parts(store, "a", transport=restarted())
    assert await again.adoption.claim_for_cancel(old) is not None  # "a#2" holds it now
    second = await make_parts(store, "b")
    j = job(due=timedelta(hours=1))
    with pytest.raises(EarlierTryUnsettled):
        await second.scheduling.schedule([item(j)], suspects=["a#2"])
    await again.scheduling.schedule([item(j)])  # the earlier try goes on
    assert len(await copies(store, j.id)) == 1


async def test_a_retry_waiting_on_a_live_holder_names_it_and_the_holder_settles_it() -> None:
    """Only the silo holding a shard an earlier try may still reach can tell that no call of it
    is under way there: the refusal names it (this silo too, when a shard of its own would hold
    up any other), so that a flow step taken over is handed to it. Before: nothing said who could
    settle it, the taker tried again by itself each round, and a client's flow steps never ran
    while the holder lived on (simulator seeds 90830 and 90973 with flows)."""
    store = MemoryStore()
    first = await make_parts(store, "a")
    j = job(due=timedelta(hours=1))
    (earlier,) = await first.scheduling.schedule([item(j)])  # landed; the client never heard
    second = await make_parts(store, "b")
    with pytest.raises(EarlierTryUnsettled) as refused:
        await second.scheduling.schedule([item(j)], suspects=["a", "b"])
    assert refused.value.holders == ("a#1",)
    assert await first.scheduling.schedule([item(j)], suspects=["a", "b"]) == [earlier]
    assert await copies(store, j.id) == [earlier]
    await second.scheduling.schedule([item(job(due=timedelta(hours=1)))])  # "b#1" holds a shard of the window too
    with pytest.raises(EarlierTryUnsettled) as refused:
        await second.scheduling.schedule([item(job(due=timedelta(hours=1)))], suspects=["a", "b"])
    assert refused.value.holders == ("a#1", "b#1")


async def test_a_retry_searches_a_settled_holders_shard_without_waiting_on_it() -> None:
    """A holder that refused a retry (no call of the earlier try under way in it) is named as
    settled when the retry goes on to the next holder: its shard is searched, not waited on,
    and a copy found there is answered, not added again. Before: with two live holders each
    waited on the other's shard as long as it lived (simulator seed 220668 with every kind)."""
    store = MemoryStore()
    first = await make_parts(store, "a")
    j = job(due=timedelta(hours=1))
    (earlier,) = await first.scheduling.schedule([item(j)])  # landed in "a#1"'s shard; the client never heard
    second = await make_parts(store, "b")
    await second.scheduling.schedule([item(job(due=timedelta(hours=1)))])  # "b#1" holds a shard of the window too
    with pytest.raises(EarlierTryUnsettled):
        await second.scheduling.schedule([item(j)], suspects=["a", "b"])
    assert await second.scheduling.schedule([item(j)], suspects=["a", "b"], settled=["a#1"]) == [earlier]
    assert await copies(store, j.id) == [earlier]


async def test_a_retry_naming_a_silo_is_not_held_up_by_its_next_incarnation_holding_the_old_shard() -> None:
    """Named by silo alone (a client's retry, a reconcile taking over a client's flow intent),
    the suspect's earlier try is fenced once its shard left the incarnation that created it,
    also for the creator's next incarnation: an adopted shard takes no new jobs. Before: the
    retry waited while "a#2" held the shard, which need not end (it held it, drained, to the
    end of the run); the client's flow intent was never taken over and its steps never ran
    (simulator seed 2053 with flows)."""
    store = MemoryStore()
    first = await make_parts(store, "a")
    j = job(due=timedelta(hours=1))
    (earlier,) = await first.scheduling.schedule([item(j)])  # landed; the client never heard
    again = await make_parts(store, "a", transport=restarted())
    assert await again.adoption.claim_for_cancel(earlier) is not None  # "a#2" holds it now
    second = await make_parts(store, "b")
    assert await second.scheduling.schedule([item(j)], suspects=["a"]) == [earlier]
    assert await copies(store, j.id) == [earlier]
    fresh = job(due=timedelta(hours=1))  # an earlier try that never landed is added, once
    (name,) = await second.scheduling.schedule([item(fresh)], suspects=["a"])
    assert "-b.1-" in name and await copies(store, fresh.id) == [name]


async def test_a_call_whose_silo_rejoined_meanwhile_writes_nothing_under_the_next_incarnation() -> None:
    """A retry's search takes a dead incarnation's shards as all its earlier try can have
    written. Before: the call, begun under "a#1", found its new shard refused (the old tag) and
    wrote into a fresh shard of "a#2", beside the retry's copy (simulator seed 2131, flows)."""
    store = GatedStore()
    parts = await make_parts(store, "a")  # type: ignore[arg-type]
    release = store.gate("create", SHARD_PREFIX)
    j = job(due=timedelta(hours=1))
    call = asyncio.create_task(parts.scheduling.schedule([item(j)]))
    await store.reached("create", SHARD_PREFIX).wait()
    await Membership(store.inner).declare_dead(parts.me.row)
    await parts.heartbeat.beat()
    assert parts.me.owner == "a#2"
    release.set()
    with pytest.raises(SiloStopping):
        await call
    assert await copies(store.inner, j.id) == []


async def test_a_retry_whose_earlier_try_never_landed_adds_the_jobs_once() -> None:
    store = MemoryStore()
    first = await make_parts(store, "a")
    await first.scheduling.schedule([item(job(due=timedelta(hours=1)))])  # a shard of "a" in that window
    await make_parts(store, "a", transport=restarted())
    second = await make_parts(store, "b")
    j = job(due=timedelta(hours=1))
    (name,) = await second.scheduling.schedule([item(j)], suspects=["a"])
    assert "-b.1-" in name
    assert await copies(store, j.id) == [name]


async def test_a_retry_that_a_failed_earlier_try_took_back_adds_the_jobs_again() -> None:
    store = GatedStore()
    first = await make_parts(store, "a")  # type: ignore[arg-type]
    j, k = job(due=timedelta(hours=1)), job(due=timedelta(hours=2))
    store.fail_next("append_block", 3, prefix=window_prefix(k.due))
    with pytest.raises(StorageError):
        await first.scheduling.schedule([item(j), item(k)])
    await make_parts(store, "a", transport=restarted())  # type: ignore[arg-type]
    second = await make_parts(store, "b")  # type: ignore[arg-type]
    names = await second.scheduling.schedule([item(j), item(k)], suspects=["a"])
    assert all("-b.1-" in name for name in names)
    assert await copies(store.inner, j.id) == [names[0]]
    assert await copies(store.inner, k.id) == [names[1]]


async def test_a_job_scheduled_again_into_a_loaded_shard_runs_once_and_as_scheduled_last() -> None:
    """A schedule call sent again (no suspects named) adds the same job again. Queued a batch at
    a time, the first entry must not run beside the one that replaced it (found in review)."""
    parts = await make_parts()
    parts.transport.handlers["h"] = Recorder()
    first = job(due=timedelta(seconds=1))
    again = dataclasses.replace(first, due=first.due + timedelta(seconds=1))
    await parts.scheduling.schedule([item(first)])
    await parts.scheduling.schedule([item(again)])
    parts.lease.renew(parts.clock.monotonic())
    for _ in range(3):
        parts.clock.advance(1)
        await fire_due(parts)
    assert parts.transport.delivered() == [first.id]


async def test_schedule_returns_only_once_its_append_is_durable() -> None:
    """The caller's acknowledgement is the promise: while the ADD's append is held in the store,
    the silo's schedule call has not returned and the job is not queued (nothing may start from a
    write that a store failure could still lose); released, the call returns and the job is queued."""
    store = GatedStore()
    silo = Silo("0", "memory://", OPTIONS, "test", hooks=lambda _store, _view: [], transport=LocalTransport(),
                clock=ManualClock(), store=store)  # type: ignore[arg-type]
    await silo.ready()
    opened, held_job = job(due=timedelta(seconds=3)), job(due=timedelta(seconds=4))
    (shard,) = await silo.schedule([item(opened)])  # the window's shard exists: the next append is the ADD alone
    release = store.gate("append_block", shard)
    call = asyncio.ensure_future(silo.schedule([item(held_job)]))
    await asyncio.wait_for(store.reached("append_block", shard).wait(), 5)
    await until_idle()
    assert not call.done(), "schedule returned while its append was still held in the store"
    assert silo._r.queue.get(held_job.id) is None
    release.set()
    assert await asyncio.wait_for(call, 5) == [shard]
    assert silo._r.queue.get(held_job.id) is not None
    assert await copies(store.inner, held_job.id) == [shard]
    await silo.stop()


@pytest.mark.parametrize("due", [timedelta(seconds=1), timedelta(hours=1)], ids=["loaded", "dormant"])
async def test_a_call_whose_shard_was_dropped_while_its_append_was_in_doubt_takes_it_back_from_there(due: timedelta) -> None:
    """Found by the simulation, seed 8846: the silo learned it was declared dead (and dropped its
    shards) while a schedule call's append was in flight; the append landed, its answer was lost
    and reading the log back failed. The take-back looked for the window's open shard, found none,
    and the call raised plain ``Unavailable``: "not scheduled", yet the log held the jobs and the
    silo that adopted it fired them. Taken back from the shard it went into, through that shard's
    writer: a loaded shard's writer stops on learning that an append its callers took back from
    memory landed (in doubt); a dormant shard's writer appends the removal (then truly failed)."""
    store = GatedStore()
    parts = await make_parts(store)  # type: ignore[arg-type]
    opened, j = job(due=due), job(due=due)
    (shard,) = await parts.scheduling.schedule([item(opened)])
    held = store.gate("append_block", shard)
    call = asyncio.ensure_future(parts.scheduling.schedule([item(j)]))
    await store.reached("append_block", shard).wait()
    parts.shards.drop_all("declared dead")  # as the heartbeat does on finding its row taken
    store.lose_answer("append_block")  # the append lands; its answer is lost
    store.fail_next("fetch", 1, prefix=shard)  # and the look at the log's tail fails
    held.set()
    if due < OPTIONS.lookahead:
        with pytest.raises(ScheduleInDoubt) as raised:
            await call
        assert raised.value.may_fire == {j.id: shard}
        assert await copies(store.inner, j.id) == [shard]
    else:
        with pytest.raises(StorageError) as failed:
            await call
        assert not isinstance(failed.value, ScheduleInDoubt)
        assert await copies(store.inner, j.id) == [], "told it failed, yet the job is live in a log"


async def test_a_call_fenced_while_its_append_was_in_doubt_and_unable_to_read_the_log_is_told_in_doubt() -> None:
    """The same with the shard fenced: the append landed (its answer lost), another silo claimed
    the shard before the writer looked, and reading the log to learn whether the append had
    landed failed. The claim replayed the jobs; the caller must not be told they are not there."""
    store = GatedStore()
    first = await make_parts(store, "a")  # type: ignore[arg-type]
    opened, j = job(due=timedelta(hours=1)), job(due=timedelta(hours=1))
    (shard,) = await first.scheduling.schedule([item(opened)])
    looking = store.gate("stat", shard)  # the writer's look after the lost answer
    store.lose_answer("append_block")
    call = asyncio.ensure_future(first.scheduling.schedule([item(j)]))
    await store.reached("stat", shard).wait()
    await make_parts(store, "a", transport=restarted())  # type: ignore[arg-type]  # "a" was paused, declared dead, restarted
    second = await make_parts(store, "b")  # type: ignore[arg-type]
    assert await second.adoption.claim_for_cancel(shard) is not None
    store.fail_next("fetch", 1, prefix=shard)  # reading the log back fails
    looking.set()
    with pytest.raises(ScheduleInDoubt) as raised:
        await call
    assert raised.value.may_fire == {j.id: shard}
    assert await copies(store.inner, j.id) == [shard]


async def test_a_retry_that_adds_again_a_job_still_finishing_here_from_a_compacted_log_queues_its_copy() -> None:
    """The earlier try's job ran here, from the suspect's shard this silo claimed; its success was
    durable and a rotation had compacted it out of the log, but the run was still finishing (the
    rotation not done) when the retry looked: found nowhere, the job was added again, as allowed,
    into this silo's own shard. The new copy was taken for that run (same job id) and never
    queued: live in its log, acknowledged, and neither queued nor running, to the end (simulator
    seed 346763, every fault: a flow step taken over by the silo that had adopted its shard)."""
    store = GatedStore()
    options = dataclasses.replace(OPTIONS, max_blocks=2)  # the outcome's append (the third) rotates the log
    first = await make_parts(store, "a", options=options)  # type: ignore[arg-type]
    j = job(due=timedelta(seconds=1))
    (earlier,) = await first.scheduling.schedule([item(j)])  # landed; the client never heard
    assert await first.scheduling.schedule([item(job(due=timedelta(seconds=5)))]) == [earlier]
    again = await make_parts(store, "a", transport=restarted(), options=options)  # type: ignore[arg-type]
    again.transport.handlers["h"] = Recorder()
    claimed = await again.adoption.claim_for_cancel(earlier)
    assert claimed is not None
    again.loading.queue_loaded(claimed, adopted=True)
    finishing = store.gate("set_metadata", f"{earlier}~00000001")  # the rotation's last step
    again.lease.renew(again.clock.monotonic())
    again.clock.advance(1)
    again.firing.dispatch(again.queue.pop_due(limit=again.runs.room))
    await asyncio.wait_for(store.reached("set_metadata", f"{earlier}~00000001").wait(), 5)
    assert again.runs.find(j.id) is not None, "the run must still be finishing while the retry looks"
    assert await copies(store.inner, j.id) == []  # its success is durable, and compacted away
    (name,) = await asyncio.wait_for(again.scheduling.schedule([item(j)], suspects=["a#1"]), 5)
    assert name != earlier and await copies(store.inner, j.id) == [name]  # added again: one more run
    finishing.set()
    await until_idle()
    assert again.runs.find(j.id) is None
    assert again.queue.get(j.id) is not None, "the copy the retry acknowledged is live but queued nowhere"
    again.clock.advance(1)
    await fire_due(again)
    assert again.transport.delivered() == [j.id, j.id]
    assert await copies(store.inner, j.id) == []
