"""How the simulator's end judges a shard its silo is handing over (seed 395599, every kind).

A hand-over holds back the due jobs it takes off the queue for the shard's next owner: until its
release lands they are neither queued nor running. A late schedule call's job that landed in such
a shard is waited for, as long as a drain; a hand-over that never ends still leaves it stuck.

Built by hand: one silo's state as the end reads it, no silo runs, so each test is exact and fast.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from cluster.runtime.shardlog import OWNER
from tests.sim.loop import VirtualLoop, true_now_us
from tests.sim.world import DRAIN_S, Faults, World

END_S = 78.6  # long past the chaos and its drain, as a world whose flows settled late ends
JOB = "f8-step"


def _handing_over(world: World) -> tuple[SimpleNamespace, SimpleNamespace]:
    """A silo handing over the shard a late schedule call just wrote ``JOB`` into, overdue: its
    fire loop took the job off the queue and held it back for the next owner (``Firing.dispatch``)."""
    due_us = true_now_us(world.loop) - 66_000_000
    shard = SimpleNamespace(base="shards/w-s1.5-000003", leaving=[], unreadable=set(),
                            writer=SimpleNamespace(stopped=None, in_doubt=False),
                            state=SimpleNamespace(live={}, paused=set()))
    entry: list[Any] = [due_us] + [None] * OWNER
    entry[OWNER] = shard
    shard.state.live[JOB] = entry
    shard.leaving.append((due_us, JOB, entry))
    roles = SimpleNamespace(
        runs=SimpleNamespace(inflight={}, displaced={}, staged={}, find=lambda job_id: None),
        adoption=SimpleNamespace(taking_back=False), shards=[shard], queue=[],
        scheduling=SimpleNamespace(_calls=0), quarantine=SimpleNamespace(parked=lambda shard, job_id: False))
    return SimpleNamespace(_r=roles, owner="s1#5"), shard


def _end(release_after_s: float | None) -> list[str]:
    """The end's verdict on that silo, its release landing ``release_after_s`` into the end (never: None)."""
    world = World(0, Faults.parse("none"), VirtualLoop())
    world.loop.advance(END_S)
    silo, shard = _handing_over(world)
    world._live_silos = lambda: [("s1", silo)]  # type: ignore[method-assign, list-item]

    async def release() -> None:
        await asyncio.sleep(release_after_s or 0)
        shard.leaving = None  # released (``Balance.release``): the next owner replays the job
        silo._r.shards.remove(shard)

    async def end() -> None:
        if release_after_s is not None:
            task = world.loop.create_task(release())
        await world.check_idle()
        if release_after_s is not None:
            await task

    world.loop.run_until_complete(end())
    return world.violations


def test_a_job_held_back_by_a_hand_over_at_the_end_is_waited_for() -> None:
    """Seed 395599: judged 0.1 s into the hand-over, the job was taken for stuck; released 0.02 s
    later, it was its next owner's to start."""
    assert _end(release_after_s=0.1) == []


def test_a_hand_over_that_never_ends_leaves_its_held_back_job_stuck() -> None:
    """The wait is a drain at most: a release that never lands keeps the job from every silo."""
    violations = _end(release_after_s=None)
    assert len(violations) == 1 and f"holds {JOB} live in shards/w-s1.5-000003" in violations[0], violations
    assert float(violations[0].split()[0].removeprefix("t=")) >= END_S + DRAIN_S
