"""A run its hooks refuse (a named job's superseded definition) is removed from its shard, durably."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from cluster.runtime.hooks import SiloHooks
from cluster.runtime.shardlog import ShardState
from storage import read_log
from tests.runtime.harness import GatedStore, add, job
from tests.runtime.test_dispatch_ahead import one_silo, send_ahead


class Refuses(SiloHooks):
    """A hook that refuses every attempt, as one of an overwritten named job's generation."""

    def __init__(self) -> None:
        self.asked = 0

    async def admit(self, event: Any) -> bool:
        self.asked += 1
        return False


async def test_a_refused_run_whose_removal_failed_is_removed_later_not_left_live_for_good() -> None:
    """Simulator seed 1574 (named jobs): an overwritten generation's run was refused, its removal's
    write failed, and the run was only let go: the job stayed live in its shard and queued
    nowhere, so its silo held it for good and nothing ever ran or removed it."""
    store = GatedStore()
    clock, starts, _, parts = await one_silo(store)
    parts.hooks.append(hook := Refuses())
    j = job(due=timedelta(seconds=1))
    (name,) = await add(parts, j)
    store.fail_next("append_block", 3, name)  # the refused run's removal fails, past its writer's own retries
    for _ in range(40):
        clock.advance(0.1)
        parts.lease.renew(clock.monotonic())
        await send_ahead(parts)
    assert starts.started == []
    assert hook.asked >= 2  # asked again after its removal failed
    live = ShardState().replay((await read_log(store.inner, name)).records()).live
    assert j.id not in live, "the refused job is still live in its shard"
