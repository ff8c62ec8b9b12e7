"""Routing calls to registry buckets' owners (issue 25 point 5; opt-in ``named_registry="experimental-buckets"``).

What a caller relies on: once a bucket's owner is gone and a peer has taken the bucket over, the
caller's calls reach the new owner, even when its last call to the old one was lost (found by the
simulator, seed 0 of ``--faults default,+buckets``: a partitioned owner's process gave way to a
newer one, a peer took its buckets, and every later call still went to the old owner).
"""

from __future__ import annotations

from typing import Any

from cluster.model.routing import SiloLost
from cluster.named.bucket import bucket_base
from cluster.named.routed import Routed
from storage import MemoryStore
from storage.generations import generation_name


class Owners:
    """Silos answering feature calls: ``gone`` ones are lost on the way, as Ray reports a dead actor."""

    def __init__(self, gone: set[str]) -> None:
        self.gone = gone
        self.asked: list[str] = []

    async def _at_silo(self, silo_id: str, method: str, *args: Any) -> Any:
        self.asked.append(silo_id)
        if silo_id in self.gone:
            raise SiloLost(f"silo {silo_id} is dead")
        if args[0] == "named_get":
            return [("ok", {"silo": silo_id}) for _ in args[1]]
        return {n: silo_id for n in args[1]}  # ask_all: each bucket's answer


async def test_a_call_lost_at_an_owner_sends_the_next_to_the_bucket_s_new_owner() -> None:
    store = MemoryStore()
    log = generation_name(bucket_base(0), 0)
    await store.create(log, {"owner": "a#1"})
    owners = Owners(gone={"a"})
    routed = Routed(store, owners, buckets=1)
    assert (await routed.ask("named_get", "k", "k"))[0] == "lost"  # maybe acted on: the caller's to say
    await store.set_metadata(log, {"owner": "b#1"}, None)  # a peer took the bucket over
    assert await routed.ask("named_get", "k", "k") == ("ok", {"silo": "b"})
    assert owners.asked == ["a", "b"]


async def test_an_owner_that_failed_a_read_of_every_bucket_is_read_again_next_time() -> None:
    store = MemoryStore()
    log = generation_name(bucket_base(0), 0)
    await store.create(log, {"owner": "a#1"})
    owners = Owners(gone={"a"})
    routed = Routed(store, owners, buckets=1)
    try:
        await routed.ask_all("named_count", "")
        raise AssertionError("a lost owner's buckets answered")
    except Exception as exc:
        assert "did not answer" in str(exc)
    await store.set_metadata(log, {"owner": "b#1"}, None)
    assert await routed.ask_all("named_count", "") == {0: "b"}
