"""The simulated handler of a dispatch-ahead seed: the real ``JobHandler`` on the handler host's clocks.

In a share of seeds (``World.ahead``) the handler is ``handlers.base.JobHandler`` itself, so the
silos send jobs up to ``dispatch_ahead`` before they are due and the handler waits for each: its
batch code, its lease checks and its withdraws are the ones a cluster runs. Only its clocks are
the simulation's: the handler runs on a host of its own, whose monotonic clock counts from
another origin and drifts from the store's by up to ``DRIFT`` (either way), and whose wall clock
is off the store's by up to ``max_clock_skew``; or, in a share of those seeds, on the silos'
host, reading their one monotonic clock (the same ``monotonic_domain``), so that the handler
measures from the silo's send and fences on its lease's monotonic end.

Everything random here is drawn from the world's ``ahead_rng``, never from its main one: a seed
that does not dispatch ahead draws exactly what it drew before this existed, and replays as it did.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from cluster.model.ahead import Ahead, lease_over, monotonic_domain
from cluster.model.attempt import JobContext
from cluster.model.skew import DRIFT
from handlers.base import JobHandler
from tests.sim.loop import VirtualLoop, true_now_us

if TYPE_CHECKING:
    from tests.sim.world import World

#: The share of seeds whose handler waits (with the ``ahead`` fault kind on).
AHEAD_SHARE = 0.5
#: ``dispatch_ahead`` of such a seed, one drawn per seed: the default, and windows long enough
#: that withdraws race the start and leases end while jobs wait (it must stay below 2 s, half
#: the firing lease of the harness options).
WINDOWS_S = (0.05, 0.05, 0.3, 1.0, 1.9)
#: The share of such seeds whose handler runs on the silos' host (one monotonic clock).
P_COLOCATED = 0.3
#: Per withdraw call: held back up to ``MAX_WITHDRAW_DELAY_S`` on its way to the handler (past
#: the silo's timeout, sometimes: it lands after the silo gave up on it), or its answer lost.
P_WITHDRAW_DELAY = 0.2
MAX_WITHDRAW_DELAY_S = 8.0
P_WITHDRAW_LOST = 0.1
#: A domain no process has: the handler's host is not the silos'.
HANDLER_HOST = "sim-handler-host"


@dataclass(frozen=True)
class HandlerClocks:
    """The handler host's clocks: monotonic ``origin + true * (1 + rate)``, wall off by ``skew_us``."""

    domain: str
    origin: float
    rate: float
    skew_us: int

    @classmethod
    def draw(cls, rng: random.Random, *, skew: bool, max_skew: timedelta) -> HandlerClocks:
        bound = int(max_skew.total_seconds() * 1_000_000)
        skew_us = rng.randint(-bound, bound) if skew else 0
        if rng.random() < P_COLOCATED:
            # The silos' clock: every simulated silo reads the loop's time as its monotonic clock.
            return cls(monotonic_domain(), 0.0, 0.0, skew_us)
        rate = rng.choice((DRIFT, -DRIFT, rng.uniform(-DRIFT, DRIFT)))  # the edge of the bound, often
        return cls(HANDLER_HOST, rng.uniform(1.0, 100_000.0), rate, skew_us)

    def describe(self) -> str:
        where = "the silos' host" if self.domain != HANDLER_HOST else f"its own host (drift {self.rate * 1e6:+.0f} ppm)"
        return f"on {where}, wall clock {self.skew_us:+d} µs"


class SimHandler(JobHandler):
    """``JobHandler`` on the simulated handler host: each job it starts is checked by the world."""

    def __init__(self, world: World, loop: VirtualLoop, clocks: HandlerClocks) -> None:
        self._world = world
        self._loop = loop
        self.clocks = clocks

    async def execute_job(self, ctx: JobContext) -> None:
        if not self._world.started(ctx.run_id):
            raise RuntimeError("failed on purpose")

    def withdrawn(self) -> set[str]:
        """Run ids withdrawn here and remembered: a batch bringing one refuses it."""
        return set(self._timeshard_state()["withdrawn"])

    def lease_over(self, ahead: Ahead | None, lease_end: float) -> bool:
        """Whether the sender's lease is over now, by this handler's clocks."""
        return lease_over(ahead, self.clocks.domain, self._timeshard_monotonic(), self._timeshard_wall(), lease_end)

    def _timeshard_monotonic(self) -> float:
        return self.clocks.origin + self._loop.time() * (1 + self.clocks.rate)

    def _timeshard_wall(self) -> float:
        return (true_now_us(self._loop) + self.clocks.skew_us) / 1e6

    async def _timeshard_sleep(self, seconds: float) -> None:
        # At least a microsecond, as any real timer: a sleep shorter than the loop clock's float
        # resolution would not move it, and the handler would wait on it for good.
        await asyncio.sleep(max(seconds / (1 + self.clocks.rate), 1e-6))

    def _timeshard_domain(self) -> str:
        return self.clocks.domain

