"""An asyncio event loop on virtual time: waiting costs nothing, and nothing runs in parallel.

The loop has no I/O at all. Where a real loop would block in ``select(timeout)``, this one moves
its clock forward by ``timeout`` (to the next timer) and goes on: ``asyncio.sleep(5)`` returns
at once, five virtual seconds later. Ready callbacks run in the order they were scheduled, so a
run depends only on what the program does (and on the seeded random choices it makes).
"""

from __future__ import annotations

import asyncio
import selectors
from typing import Any

from cluster.model.wire import datetime_to_us
from tests.runtime.harness import T0

EPOCH_US = datetime_to_us(T0)  # virtual time 0 on the wall clock


class Deadlock(RuntimeError):
    """Nothing is ready and no timer is set: every task waits on something that never comes."""


class _VirtualSelector(selectors.BaseSelector):
    """Answers every ``select`` with no events, after moving the loop's clock by its timeout."""

    def __init__(self, loop: VirtualLoop) -> None:
        self._loop = loop

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        raise RuntimeError("the simulation does no I/O")

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        raise RuntimeError("the simulation does no I/O")

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:
            raise Deadlock("no task is ready and no timer is set")
        self._loop.advance(timeout)
        return []

    def get_map(self) -> Any:
        return {}


class VirtualLoop(asyncio.BaseEventLoop):
    """An event loop whose ``time()`` is virtual and moves only when every task waits."""

    def __init__(self) -> None:
        super().__init__()
        self._now = 0.0
        self._selector = _VirtualSelector(self)

    def time(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += max(0.0, seconds)

    def _process_events(self, event_list: Any) -> None:
        pass

    def _write_to_self(self) -> None:
        pass  # no other thread ever wakes this loop


class SimClock:
    """A silo's clocks on the virtual loop: monotonic = loop time + its host's forward jumps,
    wall = epoch + loop time + skew."""

    def __init__(self, loop: VirtualLoop, skew_us: int = 0, jumped_s: float = 0.0) -> None:
        self._loop = loop
        self.skew_us = skew_us
        self.jumped_s = jumped_s  # how far this host's monotonic clock has jumped ahead (``tests.sim.clocks``)

    def now_us(self) -> int:
        return EPOCH_US + int(self._loop.time() * 1_000_000) + self.skew_us

    def monotonic(self) -> float:
        return self._loop.time() + self.jumped_s


def true_now_us(loop: VirtualLoop) -> int:
    """The true wall time on the virtual clock (no skew): what handlers and invariants read."""
    return EPOCH_US + int(loop.time() * 1_000_000)
