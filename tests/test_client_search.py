"""The client's search for a job whose shard is gone (drained and deleted after the job moved
on), without Ray: a silo stand-in answers as silos do."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from cluster.client import Client
from tests.runtime.harness import OPTIONS, job

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
