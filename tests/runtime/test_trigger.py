"""Trigger now without Ray: a job's current definition is found where it lives (following its
moves), and a triggered run fires at once, counted in a named job's status, while the job's own
schedule stays where it was."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from datetime import timedelta

from cluster.model.clock import Clock
from cluster.model.jobs import ScheduledJob
from cluster.model.options import ENTRIES_REGISTRY, ClusterOptions
from cluster.model.trigger import TRIGGERED_FROM, triggered_run
from cluster.model.wire import datetime_to_us, pack, unpack
from cluster.named.hooks import NamedJobHooks
from cluster.named.registry import Entry, JobStatus, read_entry
from cluster.runtime.lookup import Lookup
from cluster.runtime.roles import Roles
from cluster.runtime.shardlog import SUCCEEDED, add_op, remove_op
from storage import MemoryStore
from tests.runtime.harness import OPTIONS, T0, Recorder, add, fire_due, job, make_parts

KEY = "names/default/default/nightly"


@dataclass
class View:
    """What ``NamedJobHooks`` sees of its silo."""

    parts: Roles
    # Names in per-name entries, which these tests write and read themselves; a triggered run's
    # status in a registry bucket is ``tests/named/test_bucket_trigger``.
    options: ClusterOptions = replace(OPTIONS, named_registry=ENTRIES_REGISTRY)

    @property
    def owner(self) -> str:
        return self.parts.me.owner

    @property
    def clock(self) -> Clock:
        return self.parts.skew.clock

    async def schedule(self, jobs: object) -> list[str]:
        raise AssertionError("not used")


async def named_silo(target: str = "h") -> tuple[Roles, ScheduledJob, str]:
    """A silo with the named-jobs hooks and a named recurring job (every 10 s) whose entry exists."""
    store = MemoryStore()
    parts = await make_parts(store)
    parts.hooks.append(NamedJobHooks(store, View(parts)))
    j = job(target, due=timedelta(seconds=1), schedule="@every 10s", metadata={"timeshard.named": KEY}, generation=1)
    (shard,) = await add(parts, j)
    await store.create(KEY, Entry(KEY, "", 1, j.id, shard, datetime_to_us(j.due), 0, JobStatus(next_fire=j.due)).metadata())
    parts.lease.renew(parts.clock.monotonic())
    return parts, j, shard


async def fire(parts: Roles) -> None:
    parts.lease.renew(parts.clock.monotonic())  # as the heartbeat would: time moves by hand here
    await fire_due(parts)


async def status(parts: Roles) -> JobStatus:
    # Status is written off the firing path (cluster.named.recorder): what is queued is written first.
    for hook in parts.hooks:
        if isinstance(hook, NamedJobHooks):
            await hook.recorder.flush()
    entry = await read_entry(parts.store, KEY)
    assert entry is not None
    return entry.status


async def test_lookup_finds_the_definition_in_memory_in_a_dormant_shard_and_after_a_move() -> None:
    parts = await make_parts()
    parts.transport.handlers["h"] = Recorder()
    lookup = Lookup(parts.store, parts.shards)
    soon = job(due=timedelta(seconds=1), schedule="@every 10s")
    later = job(due=timedelta(hours=2))
    first, far = await add(parts, soon, later)
    assert await lookup.find(first, soon.id) == ("found", pack(soon.to_wire()))
    assert await lookup.find(far, later.id) == ("found", pack(later.to_wire()))  # folded from its log
    assert not parts.shards.get(far).loaded  # type: ignore[union-attr]
    assert await lookup.find(first, "nobody") == ("absent", None)
    assert await lookup.find("shards/20300101T000000.000000Z-9.1-000001", soon.id) == ("gone", None)
    parts.lease.renew(parts.clock.monotonic())
    parts.clock.advance(1)
    await fire_due(parts)  # occurrence 1 ran; occurrence 2 (at +11 s) lives in the next window's shard
    answer, moved_to = await lookup.find(first, soon.id)
    assert answer == "moved" and moved_to != first
    assert (await lookup.find(moved_to, soon.id))[0] == "found"
    await parts.cancelling.cancel(moved_to, soon.id)
    assert await lookup.find(moved_to, soon.id) == ("absent", None)


async def test_a_triggered_run_fires_now_counts_in_status_and_leaves_the_schedule_alone() -> None:
    parts, j, shard = await named_silo()
    parts.transport.handlers["h"] = recorder = Recorder()
    parts.clock.advance(1)
    await fire(parts)  # occurrence 1, due at +1 s
    before = await status(parts)
    assert before.successful == 1 and before.next_fire == T0 + timedelta(seconds=11)

    parts.clock.advance(3)  # +4 s: the operator triggers it, 7 s before its next occurrence
    found, packed = await Lookup(parts.store, parts.shards).find(shard, j.id)
    assert found == "moved" or found == "found"
    if found == "moved":
        found, packed = await Lookup(parts.store, parts.shards).find(packed, j.id)
    run = triggered_run(ScheduledJob.from_wire(unpack(packed)), T0 + timedelta(seconds=4))
    await add(parts, run)
    await fire(parts)

    assert [ctx.job.id for ctx in recorder.ran] == [j.id, run.id]
    assert recorder.ran[1].job.metadata[TRIGGERED_FROM] == j.id
    after = await status(parts)
    assert after.successful == 2 and after.history[0].triggered and after.history[0].run_id == recorder.ran[1].run_id
    assert [h.triggered for h in after.history] == [True, False]
    assert after.next_fire == before.next_fire and not after.finished  # the schedule did not move

    parts.clock.advance(6.9)
    await parts.loading.load_due()
    await fire(parts)
    assert len(recorder.ran) == 2  # +10.9 s: occurrence 2 is not due yet
    parts.clock.advance(0.1)
    await fire(parts)
    ran = [(ctx.occurrence, ctx.scheduled_for) for ctx in recorder.ran if ctx.job.id == j.id]
    assert ran == [(1, T0 + timedelta(seconds=1)), (2, T0 + timedelta(seconds=11))]  # still at its time
    final = await status(parts)
    assert final.successful == 3 and [h.occurrence for h in final.history] == [2, 1, 1]


async def test_a_triggered_run_of_a_replaced_generation_does_not_start() -> None:
    parts, j, _ = await named_silo()
    parts.transport.handlers["h"] = recorder = Recorder()
    entry = await read_entry(parts.store, KEY)
    assert entry is not None
    await parts.store.set_metadata(KEY, Entry(KEY, "", 2, "newer", "shards/x", 0, 0).metadata(), if_match=entry.etag)
    run = triggered_run(j, T0)
    await add(parts, run)
    await fire(parts)
    assert recorder.ran == []  # refused by the name's fence, and removed from its shard
    assert parts.queue.get(run.id) is None and not parts.runs.inflight


async def test_a_job_waiting_for_its_absent_target_shows_as_staged_until_it_starts() -> None:
    parts, j, _ = await named_silo(target="later")
    parts.clock.advance(1)
    await fire(parts)
    waiting = await status(parts)
    assert waiting.staged_target == "actor later@test" and waiting.staged_since == T0 + timedelta(seconds=1)
    assert waiting.successful == 0 and waiting.attempts == 0
    parts.clock.advance(5)
    await parts.firing.retry_staged()  # still absent: staged since the first time
    assert (await status(parts)).staged_since == T0 + timedelta(seconds=1)
    parts.transport.handlers["later"] = Recorder()
    parts.lease.renew(parts.clock.monotonic())
    await parts.firing.retry_staged()
    while parts.runs.inflight:  # noqa: ASYNC110
        await asyncio.sleep(0.001)
    ran = await status(parts)
    assert not ran.staged and ran.successful == 1
    assert ran.history[0].lateness == timedelta(seconds=5)  # started when its target appeared


def test_a_trigger_costs_one_add_and_one_remove_in_the_log() -> None:
    run = triggered_run(job(schedule="@every 10s"), T0)
    packed = pack(run.to_wire())
    add_bytes = len(pack(add_op(run.id, datetime_to_us(run.due), packed)))
    remove_bytes = len(pack(remove_op(run.id, 1, SUCCEEDED)))
    assert add_bytes - len(packed) < 80 and remove_bytes < 80
    assert len(packed) - len(pack(job(schedule="@every 10s").to_wire())) < 80  # the id suffix and the mark
