"""The client's search for a job whose shard is gone (drained and deleted after the job moved
on), without Ray: a silo stand-in answers as silos do."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest

from cluster.client import Client
from cluster.model.chase import CHASE_S, MAX_HOP_DELAY_S
from cluster.model.errors import ClusterUnavailable
from tests.runtime.harness import OPTIONS, job
from tests.sim.loop import VirtualLoop

GONE = "shards/20300101T000000.000000Z-s0.1-000001"
HELD = "shards/20300101T000010.000000Z-s2.1-000002"


class Silos:
    """The job moved on from ``GONE`` (deleted since) to ``HELD``, whose owner s2#1 died and
    whose adopter is s1: s2 answers it is not the owner, s1 holds it."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str, str]] = []

    async def __call__(self, silo_id: str, method: str, args: tuple[Any, ...]) -> Any:
        self.asked.append((silo_id, method, args[0]))
        if method == "shards_from":
            return [(HELD, "s2#1")]
        shard = args[0]
        if shard == GONE:
            return ("not_owner", None)
        if silo_id == "s1":
            return ("cancelled", None)
        return ("not_owner", "s1#1")


async def test_a_search_follows_a_shard_whose_owner_changed_and_cancels_the_job_there() -> None:
    """Simulator seed 640 (named jobs): an overwrite's cancel of the generation it replaced
    searched the shards, found the job's shard owned by a silo being replaced, passed it over,
    and answered the job absent; the put returned, and the old generation fired again."""
    silos = Silos()
    client = Client("test", ["s0", "s1", "s2"], OPTIONS, call_silo=silos, start=0)
    assert await client.try_cancel_job(replace(job(schedule="@every 10s"), shard=GONE))
    assert ("s1", "cancel", HELD) in silos.asked


class Chain:
    """A recurring job's first handle: each shard of its chain answers "moved" on to the next
    (kept for the retry window), the last one holds it; all on one silo, s0."""

    def __init__(self, length: int) -> None:
        self.shards = [f"shards/20300101T{i // 30:02d}{i % 30 * 2:02d}00.000000Z-s0.1-{i:06d}" for i in range(length)]
        self.asked: list[str] = []

    async def __call__(self, silo_id: str, method: str, args: tuple[Any, ...]) -> Any:
        shard = args[0]
        self.asked.append(shard)
        i = self.shards.index(shard)
        if i + 1 < len(self.shards):
            return ("moved", self.shards[i + 1])
        return ("cancelled", None) if method == "cancel" else ("found", b"job")


async def test_a_cancel_follows_a_chain_of_moves_longer_than_any_count_of_hops() -> None:
    """``timeshard delete`` of a named job of ``@every 1s`` that had run 42 s on 2 s windows: its
    first shard forwarded through twenty more, and a client that gave up after sixteen hops
    answered "could not reach the owner" on a healthy one-silo cluster."""
    chain = Chain(200)
    client = Client("test", ["s0"], OPTIONS, call_silo=chain, start=0)
    assert await client.try_cancel_job(replace(job(schedule="@every 1s"), shard=chain.shards[0]))
    assert chain.asked == chain.shards  # each once, none skipped


async def test_a_trigger_follows_a_chain_of_moves_longer_than_any_count_of_hops() -> None:
    chain = Chain(200)
    client = Client("test", ["s0"], OPTIONS, call_silo=chain, start=0)
    assert await client._find(replace(job(schedule="@every 1s"), shard=chain.shards[0])) == b"job"


class NamesItself:
    """A silo that answers, for good, that the shard's owner is itself: it neither serves nor
    claims it (a state no silo should stay in; the client must still end)."""

    def __init__(self) -> None:
        self.asked = 0

    async def __call__(self, silo_id: str, method: str, args: tuple[Any, ...]) -> Any:
        self.asked += 1
        return ("not_owner", "s0#1")


def test_a_cancel_told_the_same_owner_again_and_again_backs_off_and_gives_up_in_bounded_time() -> None:
    silo = NamesItself()
    loop = VirtualLoop()

    async def cancel() -> float:
        client = Client("test", ["s0"], OPTIONS, call_silo=silo, start=0)
        with pytest.raises(ClusterUnavailable, match="could not reach the owner"):
            await client.try_cancel_job(replace(job(), shard=HELD))
        return asyncio.get_running_loop().time()

    try:
        ended = loop.run_until_complete(cancel())
    finally:
        loop.close()
    assert CHASE_S <= ended <= CHASE_S + MAX_HOP_DELAY_S  # virtual seconds: as long as the chase, no longer
    assert silo.asked <= CHASE_S / MAX_HOP_DELAY_S + 5  # backing off to a second between asks, not spinning


class LongRun:
    """A recurring job's attempt runs 45 s when a cancel reaches it: the silo waits for it to end
    (``Cancelling._cancel_one_run``), and its outcome has moved the job on to the next window's
    shard, so the answer is "moved" there, where the next occurrence waits (all on s0)."""

    def __init__(self, first: str, then: str, run_s: float = 45.0) -> None:
        self.first, self.then, self.run_s = first, then, run_s
        self.asked: list[str] = []

    async def __call__(self, silo_id: str, method: str, args: tuple[Any, ...]) -> Any:
        self.asked.append(args[0])
        if args[0] == self.first:
            await asyncio.sleep(self.run_s)
            return ("moved", self.then)
        return ("cancelled", None)


def test_a_cancel_that_waited_for_a_long_run_follows_the_job_on() -> None:
    """The chase is bounded by the time the client spends looking, not by the time a silo takes
    to answer: a cancel of a recurring job whose attempt ran longer than ``CHASE_S`` was answered
    "moved" (the run's outcome carried the job on) and the client gave up on a healthy cluster
    ("could not reach the owner ... in 45.0 s (1 hops)") while the next occurrence lived on."""
    chain = Chain(2)
    silo = LongRun(chain.shards[0], chain.shards[1], run_s=CHASE_S + 15)
    loop = VirtualLoop()

    async def cancel() -> bool:
        client = Client("test", ["s0"], OPTIONS, call_silo=silo, start=0)
        return await client.try_cancel_job(replace(job(schedule="@every 1m"), shard=chain.shards[0]))

    try:
        assert loop.run_until_complete(cancel())
    finally:
        loop.close()
    assert silo.asked == chain.shards


class SearchedLongRun:
    """The job's first shard is gone; the search asks s2, the owner listed for ``HELD``, whose
    cancel waits 45 s for a run there and then finds the shard adopted by s1 meanwhile."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []

    async def __call__(self, silo_id: str, method: str, args: tuple[Any, ...]) -> Any:
        self.asked.append((silo_id, method))
        if method == "shards_from":
            return [(HELD, "s2#1")]
        if args[0] == GONE:
            return ("not_owner", None)
        if silo_id == "s2":
            await asyncio.sleep(CHASE_S + 15)
            return ("not_owner", "s1#1")
        return ("cancelled", None)


def test_a_search_whose_first_ask_waited_for_a_long_run_still_asks_the_new_owner() -> None:
    silos = SearchedLongRun()
    loop = VirtualLoop()

    async def cancel() -> bool:
        client = Client("test", ["s0", "s1", "s2"], OPTIONS, call_silo=silos, start=0)
        return await client.try_cancel_job(replace(job(schedule="@every 1m"), shard=GONE))

    try:
        assert loop.run_until_complete(cancel())
    finally:
        loop.close()
    assert ("s1", "cancel") in silos.asked
