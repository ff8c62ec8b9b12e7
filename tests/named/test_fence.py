"""The generation fence without a registry write per attempt (issue 25, point 1), without Ray.

A client's ``put`` / ``delete`` run against an in-process silo with the named-jobs hooks. What is
checked is what a caller was told: once ``put`` (overwrite) or ``delete`` returned, no attempt
of an older generation starts — the one it replaced, a stray copy from a put that died after
its job landed, or a second copy of a job in a shard the registry does not name — and a job
whose put has not pointed its name at it yet waits for it rather than being thrown away.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from cluster.client import Client
from cluster.model.attempt import JobContext
from cluster.model.clock import Clock
from cluster.model.jobs import ScheduledJob, Target, new_job_id
from cluster.model.options import ENTRIES_REGISTRY, ClusterOptions
from cluster.model.routing import Router
from cluster.model.trigger import TRIGGERED_FROM
from cluster.model.wire import datetime_to_us, pack
from cluster.named import fence
from cluster.named.api import NamedJobs
from cluster.named.hooks import NamedJobHooks
from cluster.named.registry import Entry, JobStatus, entry_key, read_entry
from cluster.runtime.hooks import AttemptEvent, SiloHooks
from cluster.runtime.roles import Roles
from cluster.runtime.shardlog import REMOVE
from cluster.runtime.shardmeta import ShardMeta
from storage import MemoryStore, Store, decode
from tests.runtime.harness import OPTIONS, Blocking, ManualClock, fire_due, make_parts

TARGET = Target.actor("h", "test")
# The fence of names kept in per-name entries, which these tests read and write themselves
# (``read_entry``, ``Entry``); the buckets' fence is ``test_bucket_fence``.
ENTRIES = replace(OPTIONS, named_registry=ENTRIES_REGISTRY)


@dataclass
class View:
    """What ``NamedJobHooks`` sees of its silo."""

    parts: Roles
    options: ClusterOptions = ENTRIES

    @property
    def owner(self) -> str:
        return self.parts.me.owner

    @property
    def clock(self) -> Clock:
        return self.parts.skew.clock

    async def schedule(self, jobs: object) -> list[str]:
        raise AssertionError("not used")


class Starts:
    """A handler noting every start, in order with the marks a test makes (``"put returned"``)."""

    def __init__(self) -> None:
        self.log: list[str] = []

    async def __call__(self, ctx: JobContext) -> None:
        self.log.append(ctx.job.id)

    def after(self, mark: str) -> list[str]:
        return self.log[self.log.index(mark) + 1:]


async def start() -> tuple[Roles, NamedJobs, Starts]:
    clock = ManualClock(datetime_to_us(datetime.now(timezone.utc)))  # put reads the wall clock
    parts = await make_parts(clock=clock)
    parts.hooks.append(NamedJobHooks(parts.store, View(parts)))
    parts.transport.handlers["h"] = starts = Starts()
    methods = {"schedule": parts.scheduling.schedule, "cancel": parts.cancelling.cancel,
               "shards_from": parts.cancelling.shards_from}

    async def call(silo_id: str, method: str, args: tuple[Any, ...]) -> Any:
        return await methods[method](*args)

    client = Client("test", ["0"], ENTRIES)
    client._router = Router(["0"], call)
    jobs = NamedJobs(client, store_url="memory://")
    jobs._stores[id(asyncio.get_running_loop())] = parts.store  # the silo's own store
    return parts, jobs, starts


async def fire_for(parts: Roles, seconds: int) -> None:
    for _ in range(seconds):
        parts.clock.advance(1)  # type: ignore[attr-defined]
        parts.lease.renew(parts.clock.monotonic())
        await fire_due(parts)


async def stray_of(jobs: NamedJobs, name: str, generation: int) -> ScheduledJob:
    """The job of a put of ``name`` that died once its job had landed: never pointed at."""
    current = await jobs.get(name)
    assert current is not None
    (stray,) = await jobs.client.submit_jobs([replace(current.job, id=new_job_id(), generation=generation, shard=None)])
    return stray


async def test_an_overwrite_racing_a_firing_leaves_no_older_attempt_once_put_returns() -> None:
    parts, jobs, starts = await start()
    parts.transport.handlers["h"] = blocking = Blocking()
    first = await jobs.put("tick", target=TARGET, schedule="@every 1s")
    parts.clock.advance(1.5)  # type: ignore[attr-defined]  # put read the wall clock a moment later
    parts.lease.renew(parts.clock.monotonic())
    firing = asyncio.ensure_future(fire_due(parts))
    await asyncio.wait_for(blocking.started.wait(), 10)  # generation 1 is running as the overwrite comes in
    put = asyncio.ensure_future(jobs.put("tick", target=TARGET, schedule="@every 1s", overwrite=True))
    await asyncio.sleep(0.05)
    blocking.finish.set()
    second = await put
    starts.log.append("put returned")
    await firing
    parts.transport.handlers["h"] = starts
    await fire_for(parts, 4)
    assert first.job.id not in starts.after("put returned")
    assert starts.after("put returned").count(second.job.id) >= 3  # the new generation runs on


async def test_a_stray_copy_of_an_older_generation_never_starts_after_an_overwrite() -> None:
    parts, jobs, starts = await start()
    first = await jobs.put("report", target=TARGET, schedule="@every 1s")
    same = await stray_of(jobs, "report", 2)  # lost the race: the overwrite below takes generation 2
    ahead = await stray_of(jobs, "report", 3)  # a later generation never pointed at
    second = await jobs.put("report", target=TARGET, schedule="@every 1s", overwrite=True)
    assert second.generation == 2
    starts.log.append("put returned")
    await fire_for(parts, 4)
    started = set(starts.after("put returned"))
    assert started == {second.job.id}, [first.job.id in started, same.id in started, ahead.id in started]


async def test_a_second_copy_in_a_shard_the_registry_does_not_name_never_starts() -> None:
    parts, jobs, starts = await start()
    first = await jobs.put("sync", target=TARGET, schedule="@every 1s")
    # The copy a retried schedule call would leave: the same job, live in another silo's shard.
    other = await make_parts(parts.store, "1", clock=parts.clock)  # type: ignore[arg-type]
    other.hooks.append(NamedJobHooks(other.store, View(other)))
    other.transport.handlers["h"] = copy_starts = Starts()
    (elsewhere,) = await other.scheduling.schedule([(first.job.id, datetime_to_us(first.job.due),
                                                     pack(replace(first.job, shard=None).to_wire()))])
    assert elsewhere != first.job.shard
    for silo in (parts, other):
        await fire_for(silo, 2)
    assert starts.log, "the copy the registry names runs"
    second = await jobs.put("sync", target=TARGET, schedule="@every 1s", overwrite=True)
    starts.log.append("put returned")
    for silo in (parts, other):
        await fire_for(silo, 3)
    assert first.job.id not in starts.after("put returned")
    assert second.job.id in starts.after("put returned")
    assert copy_starts.log == []  # out of reach of a put's cancel, so never started at all


async def test_nothing_of_a_deleted_name_starts_once_delete_returns_stray_copies_included() -> None:
    parts, jobs, starts = await start()
    first = await jobs.put("nightly", target=TARGET, schedule="@every 1s")
    stray = await stray_of(jobs, "nightly", 2)
    await fire_for(parts, 1)
    assert await jobs.delete("nightly")
    starts.log.append("delete returned")
    await fire_for(parts, 4)
    assert starts.after("delete returned") == [], [first.job.id, stray.id]


async def test_a_job_whose_put_has_not_named_it_yet_waits_for_it_and_then_runs() -> None:
    parts, jobs, starts = await start()
    key = entry_key("default", "default", "late")
    job = ScheduledJob.create(TARGET, "late", due=timedelta(seconds=1), metadata={"timeshard.named": key},
                              now=datetime.now(timezone.utc))
    (job,) = await jobs.client.submit_jobs([replace(job, generation=1)])
    await fire_for(parts, 2)  # due, but the name does not point at it yet: not started, not thrown away
    assert starts.log == []
    assert parts.shards.get(job.shard).state.live.get(job.id) is not None  # type: ignore[union-attr]
    # Its put points the name at it now, as put's compare-and-swap does once the job is durable.
    entry = Entry(key, "", 1, job.id, job.shard or "", datetime_to_us(job.due), 0, JobStatus(next_fire=job.due))
    await parts.store.create(key, entry.metadata())
    await fire_for(parts, 2)
    assert starts.log == [job.id]
    assert (await read_entry(parts.store, key)) is not None


class HeldBeforeSend(SiloHooks):
    """A hook holding each triggered attempt between its admission and its call going out (the
    silo's own awaits there, stretched: a write, a pause of the process, a slow event loop)."""

    def __init__(self) -> None:
        self.admitted, self.release = asyncio.Event(), asyncio.Event()

    async def attempt_started(self, event: AttemptEvent) -> None:
        if TRIGGERED_FROM in event.job.metadata:
            self.admitted.set()
            await self.release.wait()


async def test_a_triggered_run_admitted_before_an_overwrite_does_not_start_after_it_returns() -> None:
    """Simulator seed 147: a triggered run's attempt was admitted (the entry still pointed at its
    generation), an overwrite returned, and then the attempt went out and started."""
    parts, jobs, starts = await start()
    parts.hooks.append(held := HeldBeforeSend())
    first = await jobs.put("tick", target=TARGET, schedule="@every 1h")
    run = await jobs.trigger("tick")
    firing = asyncio.ensure_future(fire_for(parts, 1))
    await asyncio.wait_for(held.admitted.wait(), 10)
    put = asyncio.ensure_future(jobs.put("tick", target=TARGET, schedule="@every 1h", overwrite=True))
    await asyncio.sleep(0.05)
    held.release.set()
    second = await put
    starts.log.append("put returned")
    await firing
    await fire_for(parts, 2)
    assert run.id not in starts.after("put returned"), (first.job.id, run.id, second.job.id)
    assert (await jobs.get("tick")).job.id == second.job.id  # type: ignore[union-attr]


async def test_a_triggered_run_admitted_before_a_delete_does_not_start_after_it_returns() -> None:
    parts, jobs, starts = await start()
    parts.hooks.append(held := HeldBeforeSend())
    await jobs.put("tick", target=TARGET, schedule="@every 1h")
    run = await jobs.trigger("tick")
    firing = asyncio.ensure_future(fire_for(parts, 1))
    await asyncio.wait_for(held.admitted.wait(), 10)
    delete = asyncio.ensure_future(jobs.delete("tick"))
    await asyncio.sleep(0.05)
    held.release.set()
    assert await delete
    starts.log.append("delete returned")
    await firing
    await fire_for(parts, 2)
    assert run.id not in starts.after("delete returned")


async def test_a_triggered_run_that_ended_leaves_nothing_for_the_next_put_to_cancel() -> None:
    parts, jobs, starts = await start()
    await jobs.put("tick", target=TARGET, schedule="@every 1h")
    run = await jobs.trigger("tick")
    await fire_for(parts, 1)
    assert starts.log == [run.id]
    for hook in parts.hooks:
        if isinstance(hook, NamedJobHooks):
            await hook.recorder.flush()
    entry = await read_entry(parts.store, entry_key("default", "default", "tick"))
    assert entry is not None and entry.retire == ()


async def test_a_job_put_beyond_the_lookahead_costs_its_silo_no_registry_read_until_its_shard_loads(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A put's job landing in a dormant window was polled for at once, one to four registry reads
    per put while the put was still pointing its name (issue 25: the silos' share of a put's
    cost), for a clearance held days for nothing. It is cleared when its shard loads instead."""
    reads: list[str] = []
    real = fence.read_entry

    async def counted(store: Store, key: str) -> Entry | None:
        reads.append(key)
        return await real(store, key)

    monkeypatch.setattr(fence, "read_entry", counted)
    parts, jobs, starts = await start()
    hook = next(h for h in parts.hooks if isinstance(h, NamedJobHooks))
    now = datetime.now(timezone.utc)
    later = await jobs.put("later", target=TARGET, due_time=now + timedelta(seconds=60))  # its window: dormant
    soon = await jobs.put("soon", target=TARGET, due_time=now + timedelta(seconds=3))  # within the lookahead
    await asyncio.sleep(0.2)  # the prefetcher's polls (5 ms, then doubling)
    assert entry_key("default", "default", "soon") in reads and hook.clearance.shard_of(soon.job.id) == soon.job.shard
    assert entry_key("default", "default", "later") not in reads and hook.clearance.shard_of(later.job.id) is None
    cleared_before_due = False
    for _ in range(70):
        parts.clock.advance(1)  # type: ignore[attr-defined]
        parts.lease.renew(parts.clock.monotonic())
        await parts.loading.load_due()
        await asyncio.sleep(0.02)  # shard_loaded's clearance reads
        if parts.clock.now_us() < datetime_to_us(later.job.due):
            cleared_before_due = cleared_before_due or hook.clearance.shard_of(later.job.id) == later.job.shard
        await fire_due(parts)
    assert cleared_before_due  # by its shard's load, off the firing path
    assert starts.log == [soon.job.id, later.job.id]


async def test_an_older_generation_whose_cancel_a_damaged_frame_lost_does_not_start_where_it_was_cleared() -> None:
    """Simulator seed 206727 (every fault): silo 0 cleared generation 1 as it landed; another
    silo held the shard when the overwrite cancelled it there; a damaged frame then cost that
    REMOVE (the README lets damage cost a frame's records), and silo 0, claiming the shard back,
    started generation 1 from the clearance it still remembered, 6 s after the overwrite returned."""
    store = MemoryStore()
    clock = ManualClock(datetime_to_us(datetime.now(timezone.utc)))  # put reads the wall clock
    silos = {sid: await make_parts(store, sid, clock=clock) for sid in ("0", "1")}  # type: ignore[arg-type]
    hooks, starts = {}, Starts()
    for sid, parts in silos.items():
        parts.hooks.append(hook := NamedJobHooks(store, View(parts)))
        parts.transport.handlers["h"] = starts
        hooks[sid] = hook

    async def call(silo_id: str, method: str, args: tuple[Any, ...]) -> Any:
        parts = silos["0" if method == "schedule" else silo_id]  # every put's job lands at silo 0
        return await {"schedule": parts.scheduling.schedule, "cancel": parts.cancelling.cancel,
                      "shards_from": parts.cancelling.shards_from}[method](*args)

    client = Client("test", ["0", "1"], ENTRIES)
    client._router = Router(["0", "1"], call)  # a cancel follows the shard's owner
    jobs = NamedJobs(client, store_url="memory://")
    jobs._stores[id(asyncio.get_running_loop())] = store
    due = datetime.now(timezone.utc) + timedelta(seconds=4)  # within the lookahead: cleared as it lands
    first = await jobs.put("c", target=TARGET, due_time=due)
    other = await jobs.put("d", target=TARGET, due_time=due)  # its delete writes a frame after the cancel's
    await asyncio.sleep(0.2)  # the prefetcher's polls
    base = first.job.shard
    assert base is not None and other.job.shard == base and hooks["0"].clearance.shard_of(first.job.id) == base

    shard = silos["0"].shards.get(base)
    assert shard is not None and await silos["0"].balance.release(shard)
    await silos["1"].adoption.adopt_orphans()  # silo 1 holds the shard as the overwrite comes in
    assert silos["1"].shards.get(base) is not None
    second = await jobs.put("c", target=TARGET, due_time=due, overwrite=True)
    starts.log.append("put returned")
    assert await jobs.delete("d")

    log = store._logs[f"{base}~00000000"]
    frames = decode(bytes(log.body)).frames
    (cancel,) = [i for i, f in enumerate(frames[:-1]) if any(op[0] == REMOVE and op[1] == first.job.id
                                                              for op in f.records)]
    log.body[frames[cancel].offset + 25] ^= 0x5A  # bit rot: the frame with generation 1's REMOVE

    shard = silos["1"].shards.get(base)
    assert shard is not None and await silos["1"].balance.release(shard)
    meta = ShardMeta.from_metadata(log.metadata)  # silo 0 takes it back: generation 1 is live in it again
    back = await silos["0"].adoption.claim(base, meta, judged_by=silos["0"].me.owner)
    assert back is not None and back.state is not None and first.job.id in back.state.live
    await asyncio.sleep(0.2)  # the clearance reads of the loaded shard
    for _ in range(6):
        clock.advance(1)
        for parts in silos.values():
            parts.lease.renew(clock.monotonic())
            await fire_due(parts)
    assert first.job.id not in starts.after("put returned")
    assert second.job.id in starts.after("put returned")


async def test_a_clearance_read_under_way_as_its_job_is_forgotten_is_not_remembered(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A read that saw the entry point at a job before a put cancelled it, answering after the
    cancel (or a reload) made the silo forget the job, must not clear it again for good."""
    key, shard = entry_key("default", "default", "slow"), "shards/x"
    asked, answer = asyncio.Event(), asyncio.Event()

    async def slow_read(store: Store, read_key: str) -> Entry | None:
        asked.set()
        await answer.wait()
        return Entry(read_key, "", 1, "j1", shard, 0, 0, JobStatus())

    monkeypatch.setattr(fence, "read_entry", slow_read)
    clearance = fence.Clearance(MemoryStore())
    verdict = asyncio.ensure_future(clearance.verdict(key, "j1", 1))
    await asyncio.wait_for(asked.wait(), 5)
    clearance.forget("j1")  # its cancel returned here meanwhile
    answer.set()
    assert await verdict == shard  # what the entry said when it was read
    assert clearance.shard_of("j1") is None
