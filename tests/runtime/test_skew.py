"""Firing by the store's clock (issue 12, point 10): a silo whose clock is off fires on the store's time."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from cluster.runtime.roles import Roles
from cluster.runtime.silo import Silo
from storage import MemoryStore
from tests.runtime.harness import OPTIONS, T0_US, LocalTransport, ManualClock, Recorder, add, fire_due, job, make_parts

SECOND = 1_000_000


async def silo_off_the_store(by_seconds: float) -> tuple[ManualClock, ManualClock, LocalTransport, Roles]:
    """A store whose clock reads T0, and one silo whose clock reads T0 + ``by_seconds``."""
    store_clock, silo_clock = ManualClock(), ManualClock(T0_US + int(by_seconds * SECOND))
    transport = LocalTransport(handlers={"h": Recorder()})
    parts = await make_parts(MemoryStore(clock=store_clock.now_us), clock=silo_clock, transport=transport)
    return store_clock, silo_clock, transport, parts


async def advance(parts: Roles, seconds: float, *clocks: ManualClock) -> None:
    """Time passes on every clock, and the silo reads the store's clock as its skew loop does.

    Without a fresh reading the estimate widens by the drift two clocks may have (200 ppm), so
    firing would be that much later: 0.4 ms after 2 s.
    """
    for clock in clocks:
        clock.advance(seconds)
    await parts.skew.sample()


async def test_a_silo_whose_clock_runs_3s_ahead_of_the_store_fires_nothing_before_the_stores_due_time() -> None:
    store_clock, silo_clock, transport, parts = await silo_off_the_store(+3)
    j = job(due=timedelta(seconds=2))  # due at T0 + 2 s by the store's clock
    await add(parts, j)
    await fire_due(parts)
    assert transport.delivered() == []  # the silo's own clock says T0 + 3 s: past due, but the store's is not
    await advance(parts, 1.999, store_clock, silo_clock)
    await fire_due(parts)
    assert transport.delivered() == []
    await advance(parts, 0.001, store_clock, silo_clock)
    await fire_due(parts)
    assert transport.delivered() == [j.id]


async def test_a_silo_whose_clock_runs_3s_behind_the_store_fires_at_the_stores_due_time() -> None:
    store_clock, silo_clock, transport, parts = await silo_off_the_store(-3)
    j = job(due=timedelta(seconds=2))
    await add(parts, j)
    await advance(parts, 2, store_clock, silo_clock)
    await fire_due(parts)
    assert transport.delivered() == [j.id]  # not 3 s late


async def test_the_lease_end_handlers_check_is_in_the_stores_time() -> None:
    _, silo_clock, _, parts = await silo_off_the_store(+3)
    lease_end = parts.lease.wall_end()
    # Renewed at join (store time T0) for 0.8 of the 5 s suspicion timeout: ends at T0 + 4 s on
    # the store's clock, which a handler synchronised with the store compares against.
    assert lease_end == pytest.approx(T0_US / SECOND + 4, abs=1e-3)


async def test_skew_beyond_max_clock_skew_shows_in_status_and_metrics_and_logs_an_error(
        caplog: pytest.LogCaptureFixture) -> None:
    store_clock, silo_clock = ManualClock(), ManualClock(T0_US + 3 * SECOND)
    store = MemoryStore(clock=store_clock.now_us)
    options = OPTIONS.with_(max_clock_skew="1s")
    with caplog.at_level(logging.ERROR, logger="timeshard.silo"):
        silo = Silo("0", "memory://", options, "test", hooks=lambda _store, _view: [], transport=LocalTransport(),
                    clock=silo_clock, store=store)
        status = await silo.status()
        await silo.stop()
    clock = status["clock"]
    assert clock["exceeded"] is True
    assert clock["offset_low_s"] == pytest.approx(-3, abs=1e-3) and clock["offset_high_s"] == pytest.approx(-3, abs=1e-3)
    assert silo.metrics.clock_skew_exceeded.value == 1.0
    assert silo.metrics.clock_offset.value == pytest.approx(-3, abs=1e-3)
    errors = [r for r in caplog.records if r.levelno == logging.ERROR and "max_clock_skew" in r.getMessage()]
    assert len(errors) == 1 and errors[0].offset_low_s == pytest.approx(-3, abs=1e-3)  # type: ignore[attr-defined]


async def test_skew_within_the_bound_is_reported_without_an_error(caplog: pytest.LogCaptureFixture) -> None:
    store_clock, silo_clock = ManualClock(), ManualClock(T0_US + 200_000)
    silo = Silo("0", "memory://", OPTIONS, "test", hooks=lambda _store, _view: [], transport=LocalTransport(),
                clock=silo_clock, store=MemoryStore(clock=store_clock.now_us))
    with caplog.at_level(logging.ERROR, logger="timeshard.silo"):
        status = await silo.status()
        await silo.stop()
    assert status["clock"]["exceeded"] is False
    assert status["clock"]["offset_low_s"] == pytest.approx(-0.2, abs=1e-3)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_status_shows_the_lease_age_since_the_last_renewal_and_what_is_left() -> None:
    clock = ManualClock()
    silo = Silo("0", "memory://", OPTIONS, "test", hooks=lambda _store, _view: [], transport=LocalTransport(),
                clock=clock, store=MemoryStore(clock=clock.now_us))
    try:
        first = await silo.status()
        clock.advance(0.5)
        later = await silo.status()
    finally:
        await silo.stop()
    assert first["lease_age"] is not None and first["lease_left"] > 0
    assert later["lease_age"] == pytest.approx(first["lease_age"] + 0.5, abs=1e-3)
    assert later["lease_left"] == pytest.approx(first["lease_left"] - 0.5, abs=1e-3)
