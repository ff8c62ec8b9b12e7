"""A retried schedule call is judged by what its own search read, not by what another call on its
silo read meanwhile (seed 275005, every kind: s1#3 ran j26 to its end, its client never heard;
the client's retry reached s1 while another retried call was searching there. That call read the
shard's log 14 ms after the retry was sent, the earlier try's records still in it; a rotation
then compacted them away, the retry's own search read the new generation, found nothing and
added j26 again: the one more run docs/failover.md allows. The simulator took the other call's
read for the retry's, as the first read of that log by the retry's silo, and called it a
duplicate.)"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import defaultdict
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest

from cluster.runtime.shardlog import landed_ids
from storage import Store, read_log
from tests.runtime.harness import OPTIONS, LocalTransport, ManualClock, Recorder, add, fire_due, item, job, make_parts
from tests.sim.client import SimRay, earlier_try
from tests.sim.loop import true_now_us
from tests.sim.world import UP, Delivery, SimStore, World, in_quiet_world


class _Search:
    """A silo's schedule call up to its search, and no more: it reads the shard's log once the
    test gives its job its turn, and answers that shard."""

    def __init__(self, store: Store, shard: str) -> None:
        self._store = store
        self._shard = shard
        self.turns: dict[str, asyncio.Event] = defaultdict(asyncio.Event)

    async def schedule(self, items: Sequence[tuple[Any, ...]], suspects: Sequence[str] = ()) -> list[str]:
        await self.turns[items[0][0]].wait()
        await read_log(self._store, self._shard)
        return [self._shard for _ in items]


async def _retried(world: World, *, retry_reads_first: bool) -> bool:
    """Silo s0 runs a job to its end; a retry of the call that added it and another retried call
    reach s0 together, and a rotation compacts the job away between their two reads of its shard.
    Whether the simulator takes the retry's copy for one added again (a run more, allowed)."""
    clock, transport = ManualClock(), LocalTransport()
    transport.handlers["h"] = Recorder()
    parts = await make_parts(world.store, "s0", clock=clock, transport=transport,
                             options=dataclasses.replace(OPTIONS, max_blocks=3))
    ran = job(due=timedelta(seconds=1))
    sent_us = true_now_us(world.loop)
    (shard,) = await parts.scheduling.schedule([item(ran)])
    await asyncio.sleep(0.01)  # the true time the simulator judges by moves with the loop's alone
    clock.advance(2)  # past its due time by the store's clock, whatever the skew sample's bounds
    parts.lease.renew(clock.monotonic())
    await fire_due(parts)
    done_us = true_now_us(world.loop)
    world.deliveries.append(Delivery(ran.id, 1, 1, sent_us, done_us, "s0#1", shard, succeeded=True))
    world.outcome_landed[(ran.id, 1)] = done_us
    await asyncio.sleep(0.01)
    assert landed_ids((await read_log(world.store, shard)).records(), {ran.id}) == {ran.id}

    proc = world.procs["s0"]
    proc.state, proc.epoch = UP, 1
    proc.silo = search = _Search(SimStore(world, proc, 1), shard)  # type: ignore[assignment]
    ray = SimRay(world)
    other = job(due=timedelta(seconds=3))
    retry = asyncio.ensure_future(ray("s0", "schedule", ([item(ran)], ["s0"])))
    await asyncio.sleep(0.01)
    another = asyncio.ensure_future(ray("s0", "schedule", ([item(other)], ["s0"])))
    await asyncio.sleep(0.01)
    first, second = ((ran, retry), (other, another)) if retry_reads_first else ((other, another), (ran, retry))
    search.turns[first[0].id].set()
    await first[1]
    for _ in range(10):  # a few writes: the log rotates every 3 blocks
        if not landed_ids((await read_log(world.store, shard)).records(), {ran.id}):
            break  # a rotation compacted the ended job away
        await add(parts, job(due=timedelta(seconds=5)))
    else:
        raise AssertionError("no rotation compacted the ended job away")
    search.turns[second[0].id].set()
    await second[1]
    await earlier_try(world, ray, ran.id, shard)
    return ran.id in world.added_again


def _judge(*, retry_reads_first: bool) -> bool:
    return in_quiet_world(lambda world: _retried(world, retry_reads_first=retry_reads_first))


@pytest.mark.parametrize("retry_reads_first", [False, True], ids=["compacted-before-the-retry-read", "held-when-the-retry-read"])
def test_a_retry_is_judged_by_its_own_search_not_another_calls_on_its_silo(retry_reads_first: bool) -> None:
    # Compacted away before the retry's own read: added again, as docs/failover.md allows, though
    # another call's read before the rotation held it (before: judged by that read, a duplicate).
    # Held when the retry read: it had to answer with that shard, whatever another call read after.
    assert _judge(retry_reads_first=retry_reads_first) is not retry_reads_first
