"""The store clock read by the request's flight, not the whole call (issue 29, point 3).

A store that sees its request leave and its answer arrive (Azure, inside the SDK's pipeline)
says how much of the call lay outside that flight. The silo's interval then narrows by the SDK's
own work and the event loop's delays, and must still hold the store's clock: a job never fires
before its due time by the store's clock, however slow the answer or far ahead this host's clock.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from cluster.model.skew import DRIFT
from cluster.runtime import skew as skew_module
from cluster.runtime.metrics import SiloMetrics
from cluster.runtime.skew import Skew
from storage import ServerTime
from tests.runtime.harness import OPTIONS, T0_US, ManualClock

SECOND = 1_000_000


def test_a_reading_narrows_the_call_to_its_flight_and_never_beyond_the_call() -> None:
    reading = ServerTime(7 * SECOND, SECOND, lead_us=30, tail_us=20)
    assert reading.in_flight(100, 200) == (130, 180)
    # A caller whose clock did not move during the call (a test's) keeps its own instants.
    assert reading.in_flight(100, 100) == (100, 100)
    assert reading.in_flight(100, 140) == (130, 130)
    assert ServerTime(0, SECOND).in_flight(100, 200) == (100, 200)  # a store that cannot tell


@dataclass
class Flight:
    """One call: SDK work before the request leaves, the way to the store, back, and after."""

    lead: float
    out: float
    back: float
    tail: float


class FlightStore:
    """Azure-like: whole-second ``Date``, read mid-flight on the store's clock, which is this host's
    monotonic clock's truth minus ``ahead`` (the host runs ahead). Each call moves ``local`` as
    the SDK, the network and the event loop would, by the next ``Flight``."""

    def __init__(self, local: ManualClock, ahead_us: int, flights: list[Flight]) -> None:
        self.local, self.ahead_us, self.flights = local, ahead_us, flights

    def store_now_us(self) -> int:
        return self.local.now_us() - self.ahead_us

    async def server_time(self) -> ServerTime:
        flight = self.flights.pop(0)
        called = self.local.monotonic()
        self.local.advance(flight.lead)
        left = self.local.monotonic()
        self.local.advance(flight.out)
        at = self.store_now_us() // SECOND * SECOND
        self.local.advance(flight.back)
        arrived = self.local.monotonic()
        self.local.advance(flight.tail)
        return ServerTime(at, SECOND, lead_us=int((left - called) * 1e6),
                          tail_us=int((self.local.monotonic() - arrived) * 1e6))


def skew_on(store: FlightStore) -> Skew:
    return Skew(store, OPTIONS, store.local, SiloMetrics("0"), "0")  # type: ignore[arg-type]


async def test_a_reading_right_after_the_stores_tick_makes_jobs_late_by_the_answers_way_back_only() -> None:
    # The store reads its clock the instant its second 12 begins; the answer takes 2 ms back, and
    # the SDK and the event loop then take 40 ms more: those 40 ms are no longer lateness.
    ahead_us = 250_000
    local = ManualClock(12 * SECOND - 1_000 + ahead_us)
    store = FlightStore(local, ahead_us, [Flight(lead=0.030, out=0.001, back=0.002, tail=0.040)])
    local.advance(-0.030)  # called 30 ms before the request left, 1 ms before the tick
    skew = skew_on(store)
    await skew.sample()
    report = skew.report()
    # Less the drift two clocks may have had (200 ppm) over the 40 ms since the answer arrived;
    # µs are rounded on the way (the flight's ends outwards), hence 5 µs.
    assert report["offset_low_s"] == pytest.approx(-0.25 - 0.002 - 0.040 * DRIFT, abs=5e-6)
    assert report["round_trip_s"] == pytest.approx(0.003, abs=5e-6)
    assert report["lateness_up_to_s"] == report["width_s"] == pytest.approx(
        report["offset_high_s"] - report["offset_low_s"])


@pytest.mark.parametrize("ahead_s", [2.5, -1.75, 0.0])
async def test_slow_answers_and_a_clock_ahead_never_fire_a_job_before_the_stores_due_time(ahead_s: float) -> None:
    """Many readings at random phases; some answers are slow (up to 0.4 s back, long SDK work):
    after each one, this host's store clock is never ahead of the store's, and the interval holds
    the true offset."""
    rng = random.Random(f"skew-flight/{ahead_s}")
    ahead_us = int(ahead_s * SECOND)
    flights = [Flight(lead=rng.uniform(0, 0.05), out=rng.uniform(0, 0.01),
                      back=rng.choice([rng.uniform(0, 0.003), rng.uniform(0, 0.4)]), tail=rng.uniform(0, 0.2))
               for _ in range(300)]
    local = ManualClock(T0_US + ahead_us)
    store = FlightStore(local, ahead_us, flights)
    skew = skew_on(store)
    widths = []
    while store.flights:
        local.advance(rng.uniform(0, 1.2))
        await skew.sample()
        local.advance(rng.uniform(0, 0.05))  # firing reads the clock a while after the reading
        assert skew.clock.now_us() <= store.store_now_us()
        report = skew.report()
        truth = -ahead_s
        assert report["offset_low_s"] <= truth + 1e-6 and truth - 1e-6 <= report["offset_high_s"]
        widths.append(report["width_s"])
    assert min(widths) < 0.1  # narrowed well below the Date's second (else the checks above say little)


class AimingFlightStore(FlightStore):
    """Connects, then holds the request until the instant asked (Azure's wire clock)."""

    aims_clock_reads = True

    def __init__(self, local: ManualClock, ahead_us: int, flights: list[Flight]) -> None:
        super().__init__(local, ahead_us, flights)
        self.asked: list[float] = []  # the instants asked, in order

    async def server_time_near(self, send_at: float) -> ServerTime:
        self.asked.append(send_at)
        flight = self.flights[0]  # the wait for the instant is part of the call before the request leaves
        wait = max(0.0, send_at - self.local.monotonic() - flight.lead)
        self.flights[0] = Flight(flight.lead + wait, flight.out, flight.back, flight.tail)
        return await self.server_time()


class DeafFlightStore(FlightStore):
    """Says it aims its readings, but sends at once whatever instant is asked."""

    aims_clock_reads = True

    async def server_time_near(self, send_at: float) -> ServerTime:
        return await self.server_time()


@pytest.mark.parametrize(("store_kind", "aims"), [(AimingFlightStore, True), (DeafFlightStore, False)])
async def test_the_silo_aims_its_readings_only_at_a_store_that_sends_them_when_asked(
        store_kind: type[FlightStore], aims: bool) -> None:
    """A silo that kept asking a store that ignores the instant would send every reading
    ``PREPARE`` early, off the phase it aimed at, and its interval (the lateness it causes) would
    narrow slowly if at all: it aims only while the store's requests leave when asked."""
    rng = random.Random(f"skew-aim/{store_kind.__name__}")
    flights = [Flight(lead=rng.uniform(0, 0.01), out=0.001, back=0.001, tail=0.002) for _ in range(40)]
    local = ManualClock(T0_US)
    store = store_kind(local, 0, flights)
    skew = skew_on(store)
    await skew.sample()
    while store.flights:
        local.advance(rng.uniform(0, 0.5))
        await skew.sample(int(local.monotonic() * 1e6) + 50_000)  # called PREPARE early
        assert skew.report()["aimed"] is aims
        assert skew.clock.now_us() <= store.store_now_us()


async def test_a_round_sweeps_the_stores_tick_with_readings_a_quarter_interval_apart(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """One reading a round lands anywhere in the half of the interval it tests, so the low end
    sits up to half the interval below the truth until a later round does better; readings a
    quarter apart around the middle put one within a quarter of the store's tick every round
    (measured on Azurite: the clock's p90 error 2.4-3.3 ms against 2.2-6.0 ms with one)."""
    flights = [Flight(lead=0.0005, out=0.0005, back=0.0005, tail=0.001) for _ in range(40)]
    local = ManualClock(T0_US + 300_000)
    store = AimingFlightStore(local, 0, flights)
    skew = skew_on(store)

    async def sleep(seconds: float) -> None:  # the round's wait, on the test's clock
        local.advance(seconds)

    monkeypatch.setattr(skew_module, "asyncio", SimpleNamespace(sleep=sleep, gather=asyncio.gather))
    await skew.sample()
    while len(store.flights) >= 3:
        before = skew.report()
        now = int(local.monotonic() * 1e6)
        store.asked.clear()
        await skew._sweep(now, 0.2, skew._estimator.offset(now))
        step = max(int(before["round_trip_s"] * 1e6), int(before["width_s"] * 1e6) // 4)
        gaps = [round((b - a) * 1e6) for a, b in zip(store.asked, store.asked[1:], strict=False)]
        assert len(store.asked) == 3 and all(abs(gap - step) <= 2 for gap in gaps)
        assert skew.clock.now_us() <= store.store_now_us()
        local.advance(0.3)
    assert skew.report()["width_s"] < 0.01
