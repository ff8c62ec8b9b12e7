"""Clocks that jump: a silo host's wall clock stepped (NTP), or its VM suspended and resumed
(the ``clock_jumps`` kind).

In a share of seeds, every few seconds of the chaos, one silo host's clocks jump:

- **wall step**: its wall clock steps by up to ``MAX_STEP_S`` either way, as NTP steps a clock
  found far off; its monotonic clock does not move (Linux keeps ``CLOCK_MONOTONIC`` apart). The
  README promises that "a step of this host's wall clock changes nothing": due times and leases
  are measured on the monotonic clock against the store's (``cluster.runtime.skew``).
- **suspend**: its VM is suspended for up to ``MAX_SUSPEND_S``: the process runs no call and Ray
  loses its node (``Ping.GONE``, as a partition), then it resumes with both clocks that much
  later, as a paused guest's clocks read the host's time on resume (kvmclock). To the silo its
  monotonic clock jumped ahead between two calls, past its lease and a peer's suspicion.

Not modelled here, and outside the README's clock model: a monotonic clock that jumps ahead of
true time while its process runs (``STEP_SHARE``: a clock source fault). A silo then fires early
by up to the jump until its next reading of the store's clock (about a heartbeat) finds the
readings disagree; replay with ``STEP_SHARE = 1.0`` to see it. Nor the opposite, a monotonic clock
that stands still while its process is frozen (README, Failover: "Not covered").

Everything random here is drawn from ``random.Random(f"jumps/{seed}")``: a seed that draws no
jumps runs as it did before they existed.
"""

from __future__ import annotations

import asyncio
import random
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.sim.world import Process, World

#: The share of seeds whose silo hosts' clocks jump (with the ``clock_jumps`` kind on).
JUMP_SHARE = 0.5
#: How far a wall clock steps at most (s), either way: far past ``max_clock_skew``.
MAX_STEP_S = 10.0
#: How long a VM stays suspended at most (s): past a firing lease (1.6 s here) and a suspicion timeout.
MAX_SUSPEND_S = 8.0
#: The share of jumps that move a running host's monotonic clock ahead of true time; 0: see above.
STEP_SHARE = 0.0


def jump_rng(seed: int) -> random.Random:
    return random.Random(f"jumps/{seed}")


def draws_jumps(world: World) -> bool:
    """Whether this seed's clocks jump."""
    return world.faults.clock_jumps and world.jump_rng.random() < JUMP_SHARE


async def jump_clocks(world: World, until: float) -> None:
    """Until ``until`` (loop time), every few seconds one silo host's clocks jump."""
    rng = world.jump_rng
    while True:
        await asyncio.sleep(rng.uniform(0.5, 4.0))
        if world.loop.time() >= until:
            return
        proc = rng.choice(list(world.procs.values()))
        if STEP_SHARE and rng.random() < STEP_SHARE:
            jump = rng.uniform(0.001, MAX_STEP_S)
            proc.clock.jumped_s += jump
            world.stats["monotonic steps"] += 1
            world.note(f"monotonic clock of {proc.silo_id}'s host steps {jump:.3f} s ahead of true time")
        elif rng.random() < 0.5:
            step = rng.choice((-1, 1)) * rng.uniform(0.001, MAX_STEP_S)
            proc.clock.skew_us += int(step * 1_000_000)
            world.stats["wall clock steps"] += 1
            world.note(f"wall clock of {proc.silo_id}'s host steps {step:+.3f} s "
                       f"(now {proc.clock.skew_us / 1e6:+.3f} s off)")
        elif proc.state == "up" and not proc.partitioned:
            world.spawn(_suspend(world, proc, rng.uniform(0.2, MAX_SUSPEND_S)))


async def _suspend(world: World, proc: Process, seconds: float) -> None:
    """``proc``'s VM suspended for ``seconds``: frozen, its node lost to Ray; then resumed."""
    epoch = proc.epoch
    proc.state = "paused"
    proc.resumed.clear()
    proc.partitioned = True
    world.stats["suspends"] += 1
    world.note(f"suspend {proc.silo_id}'s VM for {seconds:.3f} s")
    await asyncio.sleep(seconds)
    proc.partitioned = False
    world.resume(proc, epoch)
    world.note(f"{proc.silo_id}'s VM resumed")
