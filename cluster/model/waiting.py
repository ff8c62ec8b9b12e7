"""A wait with a deadline that never swallows its caller's cancellation."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def wait_bounded(aw: Awaitable[T], timeout: float | None) -> T:
    """``await aw`` for at most ``timeout`` seconds (None: no limit); past it, ``TimeoutError`` (``aw`` cancelled).

    ``asyncio.wait_for`` before Python 3.12 returns the inner result when its caller is cancelled
    just as the inner await finishes, and the cancel is lost (CPython gh-86296): a silo stopping
    cancels its tasks at once, and a task that lost its cancel went on to wait for a lease no
    heartbeat would renew (simulator seed 236575, every kind: its end never came). On 3.11
    ``asyncio.timeout`` keeps it; 3.10 has only ``wait_for``.
    """
    if sys.version_info >= (3, 11):
        async with asyncio.timeout(timeout):
            return await aw
    return await asyncio.wait_for(aw, timeout)  # pragma: no cover - Python 3.10
