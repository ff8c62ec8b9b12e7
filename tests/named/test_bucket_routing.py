"""Routing calls to registry buckets' owners (issue 25 point 5; ``named_registry="buckets"``).

What a caller relies on: once a bucket's owner is gone and a peer has taken the bucket over, the
caller's calls reach the new owner, even when its last call to the old one was lost, and a read
lost with its owner is answered by the next one (as a read of per-name entries never failed
because a silo died). Found by the
simulator, seed 0 of ``--faults default,+buckets``: a partitioned owner's process gave way to a
newer one, a peer took its buckets, and every later call still went to the old owner).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from cluster.model.errors import ClusterUnavailable
from cluster.model.routing import SiloLost
from cluster.named.bucket import bucket_base
from cluster.named.routed import PUT_CALLS_IN_FLIGHT, Routed
from storage import MemoryStore
from storage.generations import generation_name


class Owners:
    """Silos answering feature calls: ``gone`` ones are lost on the way, as Ray reports a dead
    actor; ``broken`` ones raise (a bug there, answered as an error)."""

    def __init__(self, gone: set[str], broken: set[str] | None = None) -> None:
        self.gone, self.broken = gone, broken or set()
        self.asked: list[str] = []
        self.first = asyncio.Event()  # set once a call has come in

    async def _at_silo(self, silo_id: str, method: str, *args: Any) -> Any:
        self.asked.append(silo_id)
        self.first.set()
        if silo_id in self.gone:
            raise SiloLost(f"silo {silo_id} is dead")
        if silo_id in self.broken:
            raise TypeError("a bug in the owner")
        if args[0] in ("named_get", "named_delete"):
            return [("ok", {"silo": silo_id}) for _ in args[1]]
        return {n: silo_id for n in args[1]}  # ask_all: each bucket's answer


async def test_a_call_lost_at_an_owner_sends_the_next_to_the_bucket_s_new_owner() -> None:
    store = MemoryStore()
    log = generation_name(bucket_base(0), 0)
    await store.create(log, {"owner": "a#1"})
    owners = Owners(gone={"a"})
    routed = Routed(store, owners, buckets=1)
    assert (await routed.ask("named_delete", "k", "k"))[0] == "lost"  # maybe acted on: the caller's to say
    await store.set_metadata(log, {"owner": "b#1"}, None)  # a peer took the bucket over
    assert await routed.ask("named_delete", "k", "k") == ("ok", {"silo": "b"})
    assert owners.asked == ["a", "b"]


async def test_a_read_lost_with_its_owner_is_answered_by_the_bucket_s_next_owner() -> None:
    """``get`` through a failover: the owner died under the read, a peer takes the bucket, and
    the read is answered, not failed (met by e2e ``test_operator_trigger`` once buckets were the
    default: a silo killed as the test polled ``get``)."""
    store = MemoryStore()
    log = generation_name(bucket_base(0), 0)
    await store.create(log, {"owner": "a#1"})
    owners = Owners(gone={"a"})
    routed = Routed(store, owners, buckets=1)
    reading = asyncio.ensure_future(routed.ask("named_get", "k", "k"))
    await asyncio.wait_for(owners.first.wait(), 10)
    await store.set_metadata(log, {"owner": "b#1"}, None)  # a peer took the bucket over
    assert await asyncio.wait_for(reading, 10) == ("ok", {"silo": "b"})
    assert owners.asked[0] == "a" and owners.asked[-1] == "b"


async def test_a_read_of_every_bucket_lost_with_an_owner_is_answered_by_the_next_owner() -> None:
    store = MemoryStore()
    log = generation_name(bucket_base(0), 0)
    await store.create(log, {"owner": "a#1"})
    owners = Owners(gone={"a"})
    routed = Routed(store, owners, buckets=1)
    counting = asyncio.ensure_future(routed.ask_all("named_count", ""))
    await asyncio.wait_for(owners.first.wait(), 10)
    await store.set_metadata(log, {"owner": "b#1"}, None)
    assert await asyncio.wait_for(counting, 10) == {0: "b"}


async def test_a_read_whose_owner_failed_it_is_not_sent_again() -> None:
    """Only a read lost with its silo goes to the next owner: one the owner answered with an
    error (a bug there) fails at once, never retried into "unavailable"."""
    store = MemoryStore()
    await store.create(generation_name(bucket_base(0), 0), {"owner": "a#1"})
    owners = Owners(gone=set(), broken={"a"})
    routed = Routed(store, owners, buckets=1)
    assert (await routed.ask("named_get", "k", "k"))[0] == "lost"
    with pytest.raises(ClusterUnavailable, match="did not answer"):
        await routed.ask_all("named_count", "")
    assert owners.asked == ["a", "a"]



class HeldCalls:
    """An owner whose calls wait until ``done`` is set: the calls under way, and each one's items."""

    def __init__(self) -> None:
        self.done = asyncio.Event()
        self.flying = 0
        self.most = 0
        self.calls: list[list[Any]] = []

    async def _at_silo(self, silo_id: str, method: str, *args: Any) -> Any:
        self.flying += 1
        self.most = max(self.most, self.flying)
        self.calls.append(list(args[1]))
        try:
            await self.done.wait()
        finally:
            self.flying -= 1
        return [("ok", item) for item in args[1]]


async def test_puts_of_later_ticks_wait_for_a_call_to_end_and_go_together() -> None:
    """Callers answered by different calls come back at different ticks: sent as they came, 64
    callers' puts ended up in calls of 3 to 6 at two owners, each its own Ray call and its own
    appends there. At most two calls are under way per owner; what comes meanwhile goes in one."""
    store = MemoryStore()
    await store.create(generation_name(bucket_base(0), 0), {"owner": "a#1"})
    owner = HeldCalls()
    routed = Routed(store, owner, buckets=1)
    routed.in_flight["named_put"] = 2
    asks = []
    for tick in range(6):
        asks.append(asyncio.ensure_future(routed.ask("named_put", "k", f"put-{tick}")))
        for _ in range(5):  # the next caller comes in a later tick
            await asyncio.sleep(0)
    assert owner.flying == 2 and owner.calls == [["put-0"], ["put-1"]]
    owner.done.set()
    answers = await asyncio.wait_for(asyncio.gather(*asks), 10)
    assert answers == [("ok", f"put-{tick}") for tick in range(6)]  # none held for good
    assert owner.most == 2 and owner.calls[2:] == [["put-2", "put-3", "put-4", "put-5"]]


class FailsFirst(HeldCalls):
    """``HeldCalls`` whose first call, once let go, fails: its silo died under it."""

    async def _at_silo(self, silo_id: str, method: str, *args: Any) -> Any:
        first = not self.calls
        answers = await super()._at_silo(silo_id, method, *args)
        if first:
            raise SiloLost(f"silo {silo_id} is dead")
        return answers


async def test_puts_held_behind_the_one_call_in_flight_are_sent_when_it_fails() -> None:
    """At the production limit (one call per owner), puts held behind a call whose silo died
    under it are sent once it ends, together, and answered: none waits for good."""
    store = MemoryStore()
    await store.create(generation_name(bucket_base(0), 0), {"owner": "a#1"})
    owner = FailsFirst()
    routed = Routed(store, owner, buckets=1)
    routed.in_flight["named_put"] = PUT_CALLS_IN_FLIGHT
    first = asyncio.ensure_future(routed.ask("named_put", "k", "put-0"))
    await asyncio.sleep(0.01)
    later = [asyncio.ensure_future(routed.ask("named_put", "k", f"put-{i}")) for i in range(1, 4)]
    await asyncio.sleep(0.01)
    assert PUT_CALLS_IN_FLIGHT == 1 and owner.flying == 1 and owner.calls == [["put-0"]]
    owner.done.set()
    answers = await asyncio.wait_for(asyncio.gather(*later), 10)
    assert answers == [("ok", f"put-{i}") for i in range(1, 4)]
    assert (await asyncio.wait_for(first, 10))[0] == "lost"  # maybe made: the caller's to say
    assert owner.most == 1 and owner.calls[1] == ["put-1", "put-2", "put-3"]
