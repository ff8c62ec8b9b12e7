"""A put lost with its bucket's owner is sent again to the bucket's next owner (issue 25 point 5), without Ray.

The client's call to the owner is lost (``SiloLost``: the owner died or was cut off mid-call),
so the put may have been made. The client sends it again, marked, to the next owner, which
answers it by the job id the first send carried. What a caller relies on, judged by what it was
told: a put that returns fires, from one copy, under the id it returned; a put made and
replaced since is in doubt, never refused with ``AlreadyExists`` and never made a second time
under its first send's id. Each on the memory store and the file store.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from cluster.model.errors import PutInDoubt
from cluster.model.jobs import ScheduledJob
from cluster.model.routing import SiloLost
from cluster.model.wire import unpack
from cluster.named.api import NamedJob
from cluster.named.bucket import PUT
from cluster.named.bucketclient import BucketNames
from cluster.named.buckets import Buckets
from cluster.named.owned import OwnerCalls
from cluster.named.registry import entry_key
from cluster.runtime.shardlog import SHARD_PREFIX, landed_ids
from storage import LogWriter, Store, list_logs, read_log
from tests.named.bucket_cluster import TARGET, Cluster

STORES = ["memory", "file"]


def owned(c: Cluster, silo: str) -> Buckets:
    buckets = c.hooks[silo].buckets
    assert buckets is not None
    return buckets


def writer_of(c: Cluster, silo: str, name: str) -> LogWriter:
    buckets = owned(c, silo)
    writer = buckets.held[buckets.bucket_for(entry_key("default", "default", name))].writer
    assert writer is not None
    return writer


def stall_appends(writer: LogWriter, kind: str) -> asyncio.Event:
    """Appends of records of ``kind`` to ``writer`` never end (the owner dies before they do);
    the event is set once one has begun."""
    real = writer.append_many
    stalled = asyncio.Event()

    async def append_many(records: Sequence[Any]) -> None:
        if any(r[0] == kind for r in records):
            stalled.set()
            await asyncio.Event().wait()
        await real(records)

    writer.append_many = append_many  # type: ignore[method-assign]
    return stalled


def scheduled(buckets: Buckets) -> asyncio.Event:
    """Set once the owner's job adds of a round are durable (its ``PUT`` records come next)."""
    real = buckets._schedule
    added = asyncio.Event()

    async def schedule(items: Sequence[tuple[str, int, bytes]]) -> list[str]:
        shards = await real(items)
        added.set()
        return shards

    buckets._schedule = schedule
    return added


async def copies(store: Store, job_id: str) -> list[str]:
    """The shards whose logs hold job ``job_id``."""
    return [head.base for head in await list_logs(store, SHARD_PREFIX)
            if landed_ids((await read_log(store, head.base)).records(), {job_id})]


class LostPuts:
    """The first put call to ``silo`` acts as far as it gets; its caller hears only ``SiloLost``
    once ``gone`` is set (the silo died). Taking confirmed cancels off an entry's list is held
    while ``hold_tidy`` (a later put's list stays as it wrote it): a caller's call to do so, and
    an owner's own after the cancels it made (``OwnerCalls._retire_here``)."""

    def __init__(self, c: Cluster, silo: str) -> None:
        self.gone, self.reached = asyncio.Event(), asyncio.Event()
        self.acting: asyncio.Future[Any] | None = None
        self.sent: Any = None
        self.hold_tidy = False
        self._silo, self._call = silo, c.call
        c.call = self.call  # type: ignore[method-assign]
        for hooks in c.hooks.values():
            assert hooks.owned is not None
            hooks.owned._tidy = self._held(hooks.owned._tidy)  # type: ignore[method-assign]

    def _held(self, tidy: Callable[[Any], Awaitable[None]]) -> Callable[[Any], Awaitable[None]]:
        async def held(items: Any) -> None:
            if self.hold_tidy:
                await asyncio.Event().wait()
            await tidy(items)
        return held

    async def call(self, silo_id: str, method: str, args: tuple[Any, ...], caller: str = "client") -> Any:
        if method == "feature_call" and args[0] == "named_retired" and self.hold_tidy:
            await asyncio.Event().wait()
        if silo_id == self._silo and method == "feature_call" and args[0] == "named_put" and self.acting is None:
            (self.sent,) = args[1]
            self.acting = asyncio.ensure_future(self._call(silo_id, method, args, caller))
            self.reached.set()
            await self.gone.wait()
            raise SiloLost(f"silo {silo_id} died during the call")
        return await self._call(silo_id, method, args, caller)

    def try_id(self) -> str:
        """The job id the client chose for its put's first send (the packed job's)."""
        return ScheduledJob.from_wire(unpack(self.sent[4])).id

    async def made(self) -> Any:
        """The first send's answer at the owner (its caller never hears it)."""
        assert self.acting is not None
        (answer,) = await asyncio.wait_for(self.acting, 10)
        return answer


async def lost_put(c: Cluster, *, overwrite: bool = False) -> tuple[LostPuts, asyncio.Future[NamedJob]]:
    """b joins (known to the client), then a put of "n" whose call to a is lost once a dies."""
    await c.add("b")
    lost = LostPuts(c, "a")
    putting = asyncio.ensure_future(c.jobs().put("n", target=TARGET, due_time="1s", overwrite=overwrite))
    await asyncio.wait_for(lost.reached.wait(), 10)
    return lost, putting


def owned_calls(c: Cluster, silo: str) -> OwnerCalls:
    calls = c.hooks[silo].owned
    assert calls is not None
    return calls


async def a_dies(c: Cluster, lost: LostPuts) -> None:
    """a dies; b takes its buckets (reading their logs); the put's call is lost."""
    await c.kill("a")
    await c.maintain()
    assert owned(c, "b").held  # the next owner answers for a's buckets
    lost.gone.set()


@pytest.mark.parametrize("overwrite", [False, True])
@pytest.mark.parametrize("kind", STORES)
async def test_a_put_made_whose_answer_was_lost_with_its_owner_returns_that_put_from_the_next_owner(
        kind: str, overwrite: bool, tmp_path: Path) -> None:
    c = await Cluster.start(kind, tmp_path)
    lost, putting = await lost_put(c, overwrite=overwrite)
    assert (await lost.made())[0] == "made"  # made: job and PUT durable, answered
    await a_dies(c, lost)
    put = await asyncio.wait_for(putting, 60)
    assert put.job.id == lost.try_id() and put.generation == 1  # that put, not AlreadyExists nor another
    assert await copies(c.store, put.job.id) == [put.job.shard]
    await c.fire(3)
    assert c.starts.log == [put.job.id]


@pytest.mark.parametrize("kind", STORES)
async def test_a_put_lost_with_its_owner_before_it_was_made_is_made_by_the_next_owner(kind: str,
                                                                                      tmp_path: Path) -> None:
    c = await Cluster.start(kind, tmp_path)
    stalled = stall_appends(writer_of(c, "a", "n"), PUT)
    added = scheduled(owned(c, "a"))
    lost, putting = await lost_put(c)
    await asyncio.wait_for(asyncio.gather(stalled.wait(), added.wait()), 10)  # its job durable, its PUT never
    await a_dies(c, lost)
    put = await asyncio.wait_for(putting, 60)
    got = await c.jobs().get("n")
    assert got is not None and got.job.id == put.job.id and put.generation == 1
    # Made under an id of its own: the first send's job, durable in a's shard, is pointed at by no one.
    assert put.job.id != lost.try_id() and len(await copies(c.store, lost.try_id())) == 1
    assert await copies(c.store, put.job.id) == [put.job.shard]
    await c.fire(3)
    assert c.starts.log == [put.job.id]


@pytest.mark.parametrize("tidied", [True, False])
@pytest.mark.parametrize("overwrite", [False, True])
@pytest.mark.parametrize("kind", STORES)
async def test_a_put_made_then_replaced_before_its_resend_is_in_doubt_or_made_anew_never_refused(
        kind: str, overwrite: bool, tidied: bool, tmp_path: Path) -> None:
    c = await Cluster.start(kind, tmp_path)
    lost, putting = await lost_put(c, overwrite=overwrite)
    assert (await lost.made())[0] == "made"
    lost.hold_tidy = not tidied  # the later put's entry keeps the first send's job on its retire list
    other = c.jobs()
    later = await other.put("n", target=TARGET, due_time="1s", overwrite=True)  # another client's
    if tidied:
        writer = await other._writer()
        assert isinstance(writer, BucketNames)
        await writer.close()  # its confirmed cancels are off the list
        await owned_calls(c, "a").tidied()  # and those its owner confirmed itself
    await a_dies(c, lost)
    first = lost.try_id()
    if not overwrite or not tidied:
        with pytest.raises(PutInDoubt) as doubt:  # never AlreadyExists: its first send may be the one replaced
            await asyncio.wait_for(putting, 60)
        assert doubt.value.landed == (not tidied)  # listed as retired: known made
        survivor = later.job.id
    else:
        put = await asyncio.wait_for(putting, 60)  # no trace left: made again, under a fresh id
        assert put.generation == 3 and put.job.id not in (first, later.job.id)
        survivor = put.job.id
    assert await copies(c.store, first) == []  # cancelled by the later put; never a generation again
    got = await c.jobs().get("n")
    assert got is not None and got.job.id == survivor
    await c.fire(3)
    assert c.starts.log == [survivor]
