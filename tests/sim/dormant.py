"""Overwrites and deletes in a dormant shard (issue 25, point 3), in a share of seeds.

A nightly batch: jobs due together in a window that starts beyond the lookahead, so the shard
holding them is dormant (nothing of it in memory) while a second client overwrites and deletes
them in bursts, as ``put(overwrite=True)`` and ``delete`` do at the silo: a schedule call of a new
job into the same window, then the cancel of the old one, many at once, so that cancels of one
shard are answered in batches from its kept fold. Everything goes through the world's own
``schedule`` and ``cancel``, so the usual checks judge it: every acknowledged job fires, and no
job starts after a cancel of it returned "cancelled", through kills, pauses and lost answers.

Draws come from a generator of their own: seeds that draw no nightly batch replay as before.
"""

from __future__ import annotations

import asyncio
import random
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.sim.world import Spec, World

DORMANT_SHARE = 0.3  # seeds with a nightly batch
WINDOW_S = 10  # the harness options' shard duration
LOOKAHEAD_S = 5  # the harness options' lookahead


def dormant_rng(seed: int) -> random.Random:
    return random.Random(f"dormant/{seed}")


def draws_nightly(world: World, rng: random.Random) -> bool:
    return rng.random() < DORMANT_SHARE


async def nightly(world: World, rng: random.Random, until_s: float) -> None:
    """Schedule a batch due in one window beyond the lookahead, then overwrite and delete it in bursts."""
    from tests.sim.world import Spec, true_now_us  # here: the world imports this module

    await asyncio.sleep(rng.uniform(0.0, 1.0))
    now_s = true_now_us(world.loop) / 1e6
    # The first whole window starting over a lookahead away, and a second on: dormant for a while.
    start_s = (int(now_s) // WINDOW_S + 2) * WINDOW_S
    start_s += WINDOW_S if start_s - now_s <= LOOKAHEAD_S + 3 else 0
    n = 0

    def spec() -> Spec:
        nonlocal n
        n += 1
        return Spec(f"d{n}", int((start_s + rng.uniform(0.5, WINDOW_S - 0.5)) * 1_000_000))

    batch = [spec() for _ in range(rng.randint(8, 20))]
    await world.schedule(batch)
    world.note(f"nightly batch of {len(batch)} due in the window from {start_s} s")
    live = [s.id for s in batch if s.id in world.acked]
    while world.loop.time() < until_s and live:
        await asyncio.sleep(rng.uniform(0.2, 1.2))
        for old in [live.pop(rng.randrange(len(live))) for _ in range(min(len(live), rng.randint(1, 6)))]:
            if rng.random() < 0.7:  # an overwrite: the new job first, then the old one cancelled
                new = spec()
                world.spawn(_overwrite(world, new, old))
            else:  # a delete
                world.spawn(world.cancel(old))


async def _overwrite(world: World, new: Spec, old: str) -> None:
    await world.schedule([new])
    await world.cancel(old)
