"""Named jobs on registry buckets fire, and the generation fence holds (issue 25 point 5), without Ray.

``named_registry="buckets"`` (the default). What a caller relies on, judged by what it
was told: a job ``put`` acknowledged fires; once an overwrite or a delete returned, no attempt
of an older generation starts — the one replaced, nor a stray copy that no put named — also
after the owner of the name's bucket died and the next owner took the bucket from its log.
Each on the memory store and the file store.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from cluster.model.errors import PutInDoubt
from cluster.named.fence import ADMIT_WAIT_S
from cluster.named.registry import entry_key
from cluster.runtime.shardlog import REMOVE
from cluster.runtime.shardmeta import ShardMeta
from storage import MemoryStore, StorageError, decode
from tests.named.bucket_cluster import TARGET, Cluster
from tests.runtime.harness import Blocking, item, job

STORES = ["memory", "file"]


@pytest.mark.parametrize("kind", STORES)
async def test_a_put_job_fires_its_verdicts_asked_in_one_call_and_a_stray_copy_never_starts(kind: str,
                                                                                        tmp_path: Path) -> None:
    c = await Cluster.start(kind, tmp_path)
    jobs = c.jobs()
    put = await jobs.put_many([{"name": f"n{i}", "target": TARGET, "schedule": "@every 1s"} for i in range(30)])
    stray = await c.stray_of(jobs, "n0", 2)  # a put that died once its job landed: nothing names it
    await asyncio.sleep(0.05)  # the prefetcher's first poll, 5 ms after a landing
    await c.fire(3)
    fired = set(c.starts.log)
    assert {p.job.id for p in put} <= fired
    assert stray.id not in fired
    verdicts = [sent for _, _, method, sent in c.calls if method == "named_verdicts"]
    asked = Counter(job_id for sent in verdicts for _, job_id in sent)
    # Cleared ahead of their due time, each once, in one call per landing (a batch per owner
    # and tick); the stray one refused when it landed, and again when due (a refusal is not
    # remembered: it removes the occurrence).
    assert asked == {**{p.job.id: 1 for p in put}, stray.id: 2}, asked
    assert len(verdicts) <= len({p.job.shard for p in put}) + 2, [len(sent) for sent in verdicts]


@pytest.mark.parametrize("kind", STORES)
async def test_an_overwrite_racing_a_firing_leaves_no_older_attempt_once_put_returns(kind: str, tmp_path: Path) -> None:
    c = await Cluster.start(kind, tmp_path)
    jobs = c.jobs()
    first = await jobs.put("tick", target=TARGET, schedule="@every 1s")
    same = await c.stray_of(jobs, "tick", 2)  # lost the race: the overwrite below takes generation 2
    parts = c.parts["a"]
    parts.transport.handlers["h"] = blocking = Blocking()
    firing = asyncio.ensure_future(c.fire(1))
    await asyncio.wait_for(blocking.started.wait(), 10)  # generation 1 is running as the overwrite comes in
    put = asyncio.ensure_future(jobs.put("tick", target=TARGET, schedule="@every 1s", overwrite=True))
    await asyncio.sleep(0.05)
    blocking.finish.set()
    second = await put
    c.starts.log.append("put returned")
    await firing
    parts.transport.handlers["h"] = c.starts
    await c.fire(4)
    after = c.starts.after("put returned")
    assert second.generation == 2 and first.job.id not in after and same.id not in after
    assert after.count(second.job.id) >= 3  # the new generation runs on
    assert parts.shards.get(first.job.shard).state.live.get(first.job.id) is None  # type: ignore[union-attr]


@pytest.mark.parametrize("kind", STORES)
async def test_nothing_of_a_deleted_name_starts_once_delete_returns(kind: str, tmp_path: Path) -> None:
    c = await Cluster.start(kind, tmp_path)
    jobs = c.jobs()
    first = await jobs.put("nightly", target=TARGET, schedule="@every 1s")
    await c.fire(1)
    assert c.starts.log == [first.job.id]
    stray = await c.stray_of(jobs, "nightly", 2)
    assert await jobs.delete("nightly")
    c.starts.log.append("delete returned")
    assert await jobs.get("nightly") is None
    assert not await jobs.delete("nightly")
    await c.fire(4)
    assert c.starts.after("delete returned") == [], [first.job.id, stray.id]
    again = await jobs.put("nightly", target=TARGET, schedule="@every 1s")  # the name is free again
    assert again.generation == 1
    await c.fire(2)
    assert c.starts.after("delete returned") == [again.job.id] * 2


async def test_a_deleted_job_whose_cancel_a_damaged_frame_lost_before_the_delete_wrote_does_not_start(
        tmp_path: Path) -> None:
    """Simulator seed 328446 (every fault, buckets): delete cancelled the name's job; its shard was
    loaded again before the owner wrote the delete, from a log whose frame with that REMOVE had
    been damaged (the README lets damage cost a frame's records): the job live in it, the entry
    still naming it, the silo cleared it, and it started after delete returned True."""
    c = await Cluster.start("memory", tmp_path)
    jobs = c.jobs()
    due = datetime.now(timezone.utc) + timedelta(seconds=4)  # within the lookahead: cleared as it lands
    put = await jobs.put("n", target=TARGET, due_time=due)
    await asyncio.sleep(0.05)  # the prefetcher's first poll
    base, parts = put.job.shard, c.parts["a"]
    assert base is not None and c.hooks["a"].clearance.shard_of(put.job.id) == base
    gate, reached = asyncio.Event(), asyncio.Event()
    call = c.call

    async def held_delete(silo_id: str, method: str, args: tuple[Any, ...], caller: str = "client") -> Any:
        if method == "feature_call" and args[0] == "named_delete":
            reached.set()
            await gate.wait()  # the owner writes the delete only once the shard was loaded again
        return await call(silo_id, method, args, caller)

    c.call = held_delete  # type: ignore[method-assign]
    jobs = c.jobs()
    deleting = asyncio.ensure_future(jobs.delete("n"))
    await asyncio.wait_for(reached.wait(), 10)  # cancelled: its REMOVE is in the shard's log
    other = await jobs.put("o", target=TARGET, due_time=due)  # a frame after the REMOVE's
    assert other.job.shard == base
    store = c.store
    assert isinstance(store, MemoryStore)
    log = store._logs[f"{base}~00000000"]
    frames = decode(bytes(log.body)).frames
    (cancel,) = [i for i, f in enumerate(frames[:-1]) if any(op[0] == REMOVE and op[1] == put.job.id
                                                              for op in f.records)]
    log.body[frames[cancel].offset + 25] ^= 0x5A  # bit rot: the frame with the delete's REMOVE
    shard = parts.shards.get(base)
    assert shard is not None and await parts.balance.release(shard)
    back = await parts.adoption.claim(base, ShardMeta.from_metadata(log.metadata), judged_by=parts.me.owner)
    assert back is not None and back.state is not None and put.job.id in back.state.live
    await asyncio.sleep(0.05)  # the loaded shard's verdicts: the entry still names the job
    assert c.hooks["a"].clearance.shard_of(put.job.id) == base
    gate.set()
    assert await deleting
    c.starts.log.append("delete returned")
    await c.fire(6)
    assert put.job.id not in c.starts.after("delete returned")
    assert other.job.id in c.starts.after("delete returned")


@pytest.mark.parametrize("kind", STORES)
async def test_the_next_owner_of_a_bucket_replays_it_and_the_fence_still_holds(kind: str, tmp_path: Path) -> None:
    c = await Cluster.start(kind, tmp_path, silos=("a",))
    jobs = c.jobs()
    x1 = await jobs.put("x", target=TARGET, schedule="@every 1s")
    y = await jobs.put("y", target=TARGET, schedule="@every 1s")
    await c.fire(1)
    await c.flush_status()
    b = await c.add("b")
    await c.kill("a")  # a's buckets and shards are b's once its lease ran out
    await c.maintain()
    jobs = c.jobs()  # a client that knows b (Ray's list of silos, read again)
    hooks = c.hooks["b"]
    assert hooks.buckets is not None and len(hooks.buckets.held) == hooks.buckets.count
    got = await jobs.get("x")
    assert got is not None and got.job.id == x1.job.id and got.status.successful == 1  # the log had it all
    stray = await c.stray_of(jobs, "y", 2)
    x2 = await jobs.put("x", target=TARGET, schedule="@every 1s", overwrite=True)  # cancels x1 where b holds it now
    c.starts.log.append("put returned")
    await c.fire(3)
    after = c.starts.after("put returned")
    assert x1.job.id not in after and stray.id not in after
    assert after.count(x2.job.id) >= 2 and after.count(y.job.id) >= 2  # y was cleared by b from the replayed log
    assert b.shards.get(x1.job.shard) is not None  # type: ignore[arg-type]  # adopted, the cancel went there
    key = entry_key("default", "default", "x")
    assert hooks.buckets.bucket_for(key) in hooks.buckets.held


@pytest.mark.parametrize("kind", STORES)
async def test_a_job_whose_shard_and_bucket_have_different_owners_asks_the_bucket_owner_and_fires(
        kind: str, tmp_path: Path) -> None:
    c = await Cluster.start(kind, tmp_path, silos=("a",))
    jobs = c.jobs()
    put = await jobs.put_many([{"name": f"n{i}", "target": TARGET, "schedule": "@every 1s"} for i in range(12)])
    await c.add("b")
    await c.add("c")
    c.calls.clear()
    await c.kill("a")  # before a fired anything
    await c.maintain()  # b adopts a's shards first and takes its share of buckets; c takes the rest
    held = {s: set(c.hooks[s].buckets.held) for s in ("b", "c")}  # type: ignore[union-attr]
    assert held["b"] and held["c"] and not held["b"] & held["c"]
    stray = await c.stray_of(c.jobs(), "n1", 2)
    await asyncio.sleep(0.05)  # the prefetcher's polls
    await c.fire(3)
    assert {p.job.id for p in put} <= set(c.starts.log) and stray.id not in c.starts.log
    asked = {(caller, silo) for caller, silo, method, _ in c.calls if method == "named_verdicts"}
    assert any(caller != silo for caller, silo in asked), asked  # across silos, through call_peer


@pytest.mark.parametrize("kind", STORES)
async def test_an_overwrite_whose_bucket_append_failed_leaves_the_old_generation_and_its_job_never_starts(
        kind: str, tmp_path: Path) -> None:
    c = await Cluster.start(kind, tmp_path)
    jobs = c.jobs()
    first = await jobs.put("tick", target=TARGET, schedule="@every 1s")
    real = c.store.append_block
    failing, fail = [True], asyncio.Event()

    async def fails_once(name: str, payload: bytes, if_match: str) -> Any:
        if name.startswith("registry/") and failing:
            failing.clear()
            await fail.wait()  # the job's clearance is asked meanwhile: it must wait for the append's outcome
            raise StorageError("the registry append failed")  # and did not land
        return await real(name, payload, if_match)

    c.store.append_block = fails_once  # type: ignore[method-assign]
    put = asyncio.ensure_future(jobs.put("tick", target=TARGET, schedule="@every 1s", overwrite=True))
    await asyncio.sleep(0.1)  # the job landed, the prefetcher asked the owner about it
    fail.set()
    with pytest.raises(PutInDoubt):
        await put
    hooks = c.hooks["a"]
    landed = [job_id for shard in c.parts["a"].shards for job_id in shard.state.live
              if job_id != first.job.id]
    assert len(landed) == 1  # the overwrite's job: durable before its PUT record was appended
    await c.fire(3)
    got = await jobs.get("tick")  # the bucket, taken again from its log at once, answers as the log says
    assert got is not None and got.job.id == first.job.id and got.generation == 1
    assert set(c.starts.log) == {first.job.id}  # the overwrite's job landed, but nothing named it: never started
    assert not any(landed[0] in shard.state.live for shard in c.parts["a"].shards)  # refused: removed
    assert hooks.buckets is not None and len(hooks.buckets.held) == hooks.buckets.count
    second = await jobs.put("tick", target=TARGET, schedule="@every 1s", overwrite=True)  # tried again: made
    assert second.generation == 2


@pytest.mark.parametrize("kind", STORES)
async def test_a_bucket_owner_that_never_answers_defers_its_named_jobs_and_holds_up_nothing_else(
        kind: str, tmp_path: Path) -> None:
    c = await Cluster.start(kind, tmp_path, silos=("a",))
    jobs = c.jobs()
    named = await jobs.put("report", target=TARGET, schedule="@every 1s")
    b = await c.add("b")
    await c.maintain()
    assert not c.hooks["b"].buckets.held  # type: ignore[union-attr]  # a kept every bucket
    # A copy of the named job in b's shard (as a retried schedule call leaves one), and a plain
    # job due with it there; b must ask a, which takes the call and never answers.
    c.hanging.add("a")  # paused: fires nothing, answers nothing
    (copy,) = await b.scheduling.schedule([item(replace(named.job, shard=None))])
    plain = job("h", due=named.job.due, now=datetime.now(timezone.utc))
    await b.scheduling.schedule([item(plain)])
    started = time.monotonic()
    await asyncio.wait_for(c.fire(1), 30)
    assert time.monotonic() - started < 2 * ADMIT_WAIT_S + 1  # the named admit gave up waiting
    assert c.starts.log == [plain.id]  # the plain job was not held up; the named copy deferred, not started
    shard = b.shards.get(copy)
    assert shard is not None and named.job.id in shard.state.live  # deferred (asked again later), not refused
