"""Time as the silo runtime sees it: a wall clock for due times and a monotonic one for leases.

Every role takes a ``Clock`` through its constructor instead of calling ``time`` itself, so a
test can run silos on a clock of its own: one that jumps, runs ahead of its peers, or follows
an event loop whose time is virtual (``asyncio`` sleeps and timeouts read ``loop.time()``).
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import Protocol


def wall_clock_us() -> int:
    """The current UTC wall-clock time in microseconds since the epoch."""
    return time.time_ns() // 1000


class Clock(Protocol):
    """A wall clock (µs since the epoch, UTC) and a monotonic clock (seconds) read together."""

    def now_us(self) -> int:
        """Wall-clock time: what due times are compared with."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never jumps: what leases and timeouts are measured on."""
        ...


class SystemClock:
    """The host's clocks: ``time.time_ns`` and ``time.monotonic`` (asyncio's own time base)."""

    def now_us(self) -> int:
        return wall_clock_us()

    def monotonic(self) -> float:
        return time.monotonic()

    def __repr__(self) -> str:
        return "SystemClock()"


SYSTEM_CLOCK = SystemClock()
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def now_datetime(clock: Clock) -> datetime:
    """``clock``'s wall time as an aware UTC datetime."""
    return _EPOCH + timedelta(microseconds=clock.now_us())
