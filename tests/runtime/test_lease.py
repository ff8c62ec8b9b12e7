"""The firing lease: held for a fraction of the suspicion timeout from when a heartbeat began."""

from __future__ import annotations

import asyncio

from cluster.model.ahead import lease_over
from cluster.runtime.lease import LEASE_FRACTION, Lease
from cluster.runtime.membership import DEAD, REPORTED, Departures, Member
from tests.runtime.harness import ManualClock, until_idle


def test_a_lease_holds_from_when_the_heartbeat_began_not_when_it_returned() -> None:
    clock = ManualClock()
    lease = Lease(clock, suspicion_timeout=5.0, max_clock_skew=0.5)
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
    lease = Lease(clock, suspicion_timeout=5.0, max_clock_skew=0.5)
    lease.renew(clock.monotonic())
    assert lease.wall_end() == clock.now_us() / 1e6 + LEASE_FRACTION * 5.0
    assert lease.renew(clock.monotonic()) is False  # still valid: not lapsed


def test_a_handler_up_to_max_clock_skew_behind_refuses_work_from_the_moment_a_peer_may_take_the_shards() -> None:
    """One live owner per shard (simulator seed 10861): a peer that sees our row marked dead
    takes our shards a lease after it saw that (``Departures``); a handler checks the end we
    send on its own wall clock, which may run ``max_clock_skew`` behind the store's."""
    clock = ManualClock()  # the store's time, and ours
    lease = Lease(clock, suspicion_timeout=5.0, max_clock_skew=0.5)
    began = clock.monotonic()
    lease.renew(began)
    sent = lease.handler_end()
    departures = Departures(LEASE_FRACTION * 5.0)
    row = Member("s1", 1, DEAD, clock.now_us(), cause=REPORTED)
    departures.observe({"s1": row}, began)  # marked dead the moment the heartbeat began: the earliest
    taken_at = departures.over_at(row, 1)
    assert taken_at is not None
    store_then = clock.now_us() / 1e6 + (taken_at - began)  # the store's time when the peer may take them
    assert lease_over(None, "", taken_at, store_then - 0.5, sent)
    # The price of the margin: a handler on the store's time stops max_clock_skew before the lease ends.
    assert not lease_over(None, "", taken_at, store_then - 0.5 - 0.001, sent)


async def test_waiting_for_a_valid_lease_returns_on_the_next_renewal() -> None:
    clock = ManualClock()
    lease = Lease(clock, suspicion_timeout=5.0, max_clock_skew=0.5)
    waiter = asyncio.ensure_future(lease.wait_valid())
    await until_idle()
    assert not waiter.done()
    lease.renew(clock.monotonic())
    await asyncio.wait_for(waiter, 1.0)
