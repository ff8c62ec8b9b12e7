"""The firing lease: held for a fraction of the suspicion timeout from when a heartbeat began."""

from __future__ import annotations

import asyncio

from cluster.runtime.lease import LEASE_FRACTION, Lease
from tests.runtime.harness import ManualClock, until_idle


def test_a_lease_holds_from_when_the_heartbeat_began_not_when_it_returned() -> None:
    clock = ManualClock()
    lease = Lease(clock, suspicion_timeout=5.0)
    assert not lease.valid  # never renewed: a silo fires nothing before its first heartbeat
    began = clock.monotonic()
    clock.advance(3.0)  # a slow heartbeat write
    assert lease.renew(began) is True  # it had lapsed
    assert lease.valid
    clock.advance(LEASE_FRACTION * 5.0 - 3.0 - 0.01)
    assert lease.valid
    clock.advance(0.02)
    assert not lease.valid  # peers may declare us dead 5 s after `began`: stop before that


def test_the_wall_clock_end_tells_the_handler_when_to_refuse_work() -> None:
    clock = ManualClock()
    lease = Lease(clock, suspicion_timeout=5.0)
    lease.renew(clock.monotonic())
    assert lease.wall_end() == clock.now_us() / 1e6 + LEASE_FRACTION * 5.0
    assert lease.renew(clock.monotonic()) is False  # still valid: not lapsed


async def test_waiting_for_a_valid_lease_returns_on_the_next_renewal() -> None:
    clock = ManualClock()
    lease = Lease(clock, suspicion_timeout=5.0)
    waiter = asyncio.ensure_future(lease.wait_valid())
    await until_idle()
    assert not waiter.done()
    lease.renew(clock.monotonic())
    await asyncio.wait_for(waiter, 1.0)
