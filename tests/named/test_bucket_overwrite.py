"""An overwrite on registry buckets cancels what it replaced before ``put`` returns, from the
bucket's owner where it can (issue 25 point 3), without Ray.

What a caller relies on, judged by what it was told: once ``put(..., overwrite=True)`` returned,
the replaced generation's job is gone from its shard's log and never starts; the new one fires.
The owner cancels the replaced job in its own shard before it answers the put, so the caller
makes no cancel call of its own; one the owner could not confirm (not its shard, a failure) the
caller still cancels before ``put`` returns. Each on the memory store and the file store.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from cluster.named.bucket import BUCKETS, bucket_of
from cluster.named.registry import entry_key
from cluster.runtime.logowner import SETTLE_ROUNDS
from cluster.runtime.shardlog import ShardState
from storage import Unavailable, read_log
from tests.named.bucket_cluster import BUCKET_OPTIONS, TARGET, Cluster, View

STORES = ["memory", "file"]


def client_calls(c: Cluster) -> list[str]:
    """The methods a client made after this calls on silos, in order (feature calls by their feature method)."""
    made: list[str] = []
    call = c.call

    async def recorded(silo_id: str, method: str, args: tuple[Any, ...], caller: str = "client") -> Any:
        if caller == "client":
            made.append(args[0] if method == "feature_call" else method)
        return await call(silo_id, method, args, caller)

    c.call = recorded  # type: ignore[method-assign]
    return made


async def live(c: Cluster, shard: str) -> set[str]:
    """The jobs live in ``shard`` as its log, read whole, says."""
    return set(ShardState().replay((await read_log(c.store, shard)).records()).live)


@pytest.mark.parametrize("kind", STORES)
async def test_an_overwrite_cancels_the_old_job_at_the_bucket_owner_in_the_put_call_and_it_never_starts(
        kind: str, tmp_path: Path) -> None:
    c = await Cluster.start(kind, tmp_path)
    made = client_calls(c)
    jobs = c.jobs()
    first = await jobs.put("tick", target=TARGET, schedule="@every 1s")
    made.clear()
    second = await jobs.put("tick", target=TARGET, schedule="@every 1s", overwrite=True)
    assert made == ["named_put"]  # the cancel rode in the put's own call
    assert first.job.shard is not None and second.job.shard is not None
    assert first.job.id not in await live(c, first.job.shard)  # removed before put returned
    assert second.job.id in await live(c, second.job.shard)
    owned = c.hooks["a"].owned
    assert owned is not None
    await owned.tidied()
    entry = await (await jobs._buckets()).get_entry(entry_key("default", "default", "tick"))  # type: ignore[union-attr]
    assert entry is not None and entry.job_id == second.job.id and entry.retire == ()  # confirmed: off its list
    await c.fire(3)
    assert second.job.id in c.starts.log and first.job.id not in c.starts.log


@pytest.mark.parametrize("unconfirmed", ["not_owner", "moved", "failed"])
@pytest.mark.parametrize("kind", STORES)
async def test_an_old_job_the_owner_could_not_cancel_is_cancelled_by_the_caller_before_put_returns(
        kind: str, unconfirmed: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    c = await Cluster.start(kind, tmp_path)
    made = client_calls(c)
    jobs = c.jobs()
    first = await jobs.put("tick", target=TARGET, schedule="@every 1s")

    async def cannot(self: View, shard_base: str, job_id: str) -> Any:
        if unconfirmed == "failed":
            raise Unavailable("the store did not answer")
        return unconfirmed, "elsewhere"  # another silo's shard, or a move to follow: not confirmed here

    monkeypatch.setattr(View, "cancel", cannot)
    made.clear()
    second = await jobs.put("tick", target=TARGET, schedule="@every 1s", overwrite=True)
    assert made == ["named_put", "cancel"]  # the caller cancelled it through the shard's owner
    assert first.job.shard is not None
    assert first.job.id not in await live(c, first.job.shard)
    await c.fire(3)
    assert second.job.id in c.starts.log and first.job.id not in c.starts.log


async def test_cancels_confirmed_while_earlier_ones_leave_their_lists_leave_theirs_too(tmp_path: Path) -> None:
    c = await Cluster.start("memory", tmp_path)
    jobs = c.jobs()
    names = [f"n{i}" for i in range(20)]
    await jobs.put_many([{"name": n, "target": TARGET, "due_time": "1h"} for n in names])
    owned = c.hooks["a"].owned
    assert owned is not None
    tidy, flushing, go = owned._tidy, asyncio.Event(), asyncio.Event()

    async def slow(items: Any) -> None:  # the first flush waits while the second wave is answered
        flushing.set()
        await go.wait()
        await tidy(items)

    owned._tidy = slow  # type: ignore[method-assign]
    await asyncio.gather(*(jobs.put(n, target=TARGET, due_time="2h", overwrite=True) for n in names[:10]))
    await asyncio.wait_for(flushing.wait(), 5)
    await asyncio.gather(*(jobs.put(n, target=TARGET, due_time="2h", overwrite=True) for n in names[10:]))
    go.set()
    await asyncio.wait_for(owned.tidied(), 5)
    buckets = await jobs._buckets()
    assert buckets is not None
    left = {n: e.retire for n in names if (e := await buckets.get_entry(entry_key("default", "default", n))) and e.retire}
    assert left == {}  # every confirmed cancel off its list: none waits for a put that may never come


async def loaded_then_handed_over(kind: str, tmp_path: Path) -> tuple[Cluster, list[str], Any, dict[str, Any], list[str]]:
    """Silo a puts 24 names, then b joins and takes half its buckets: the cluster, the client's
    calls from here on, its named jobs, each name's first job, and the names whose bucket b owns."""
    c = await Cluster.start(kind, tmp_path, ("a",))
    made = client_calls(c)
    jobs = c.jobs()
    names = [f"n{i:02d}" for i in range(24)]
    first = {p.name: p.job for p in await jobs.put_many([{"name": n, "target": TARGET, "schedule": "@every 1s"}
                                                          for n in names])}
    return c, made, jobs, first, sorted(await handed_over_to_b(c, names))


async def handed_over_to_b(c: Cluster, names: list[str]) -> set[str]:
    """Silo b joins and takes half of a's buckets; the names of ``names`` whose bucket b now owns."""
    await c.add("b")
    c.clock.advance(SETTLE_ROUNDS * BUCKET_OPTIONS.adoption_interval.total_seconds())
    for parts in c.parts.values():
        parts.lease.renew(parts.clock.monotonic())
    await c.hooks["a"].maintain()  # a holds more than its share: it hands half over
    handing = c.hooks["a"]._handing
    assert handing is not None and await handing == BUCKETS // 2
    await asyncio.gather(*c.hooks["a"]._asking)
    at_b = c.hooks["b"].buckets
    assert at_b is not None and len(at_b.held) == BUCKETS // 2
    return {n for n in names if bucket_of(entry_key("default", "default", n), BUCKETS) in at_b.held}


@pytest.mark.parametrize("kind", STORES)
async def test_after_a_hand_over_the_new_owner_cancels_the_old_jobs_through_their_shards_silo_one_call_a_round(
        kind: str, tmp_path: Path) -> None:
    """A bucket handed over keeps its names' jobs in the shards its first owner scheduled them
    into: the new owner's overwrites cancel them there, in one call per round of puts, and the
    caller makes none of its own (before: one cancel call per overwritten name)."""
    c, made, jobs, first, moved = await loaded_then_handed_over(kind, tmp_path)
    assert moved
    made.clear()
    c.calls.clear()
    second = await jobs.put_many([{"name": n, "target": TARGET, "schedule": "@every 1s", "overwrite": True}
                                  for n in moved])
    assert set(made) == {"named_put"}  # b answered every put with its old job cancelled (a's answer: not the owner)
    forwarded = [(caller, silo, len(sent)) for caller, silo, method, sent in c.calls if method == "named_cancels"]
    assert forwarded == [("b", "a", len(moved))]  # one call to the shards' silo for the round
    for n, put in zip(moved, second, strict=True):
        old = first[n]
        assert old.shard is not None and old.id not in await live(c, old.shard)  # removed before put returned
        assert put.job.generation == 2
    c.starts.log.append("put returned")
    await c.fire(3)
    started = set(c.starts.after("put returned"))
    assert not started & {first[n].id for n in moved} and {p.job.id for p in second} <= started


async def test_after_a_hand_over_a_forwarded_cancel_the_shards_silo_failed_is_made_by_the_caller(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    c, made, jobs, first, moved = await loaded_then_handed_over("memory", tmp_path)
    owned = c.hooks["a"].owned
    assert owned is not None

    async def broken(sent: Any) -> list[Any]:
        raise Unavailable("the store did not answer")

    monkeypatch.setattr(owned, "cancels", broken)
    monkeypatch.setitem(owned._calls, "named_cancels", broken)
    made.clear()
    await jobs.put_many([{"name": n, "target": TARGET, "schedule": "@every 1s", "overwrite": True} for n in moved])
    assert made.count("cancel") == len(moved)  # each cancelled by the caller
    for n in moved:
        old = first[n]
        assert old.shard is not None and old.id not in await live(c, old.shard)


async def test_after_a_hand_over_a_shards_silo_that_never_answers_the_forwarded_cancels_holds_no_put(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A peer paused or cut off while it holds the replaced jobs: the round of puts is answered once
    ``FORWARD_WAIT_S`` passed, and each caller cancels its replaced job itself (here a's own cancel
    answers; only its forwarded ones hang)."""
    c, made, jobs, first, moved = await loaded_then_handed_over("memory", tmp_path)
    owned = c.hooks["a"].owned
    assert owned is not None

    async def never(sent: Any) -> list[Any]:
        await asyncio.Event().wait()
        return []

    monkeypatch.setitem(owned._calls, "named_cancels", never)
    monkeypatch.setattr("cluster.named.owned.FORWARD_WAIT_S", 0.2)
    made.clear()
    await asyncio.wait_for(jobs.put_many([{"name": n, "target": TARGET, "schedule": "@every 1s", "overwrite": True}
                                          for n in moved]), 5)
    assert made.count("cancel") == len(moved)
    for n in moved:
        old = first[n]
        assert old.shard is not None and old.id not in await live(c, old.shard)
