"""Clock skew: the silo measures the store's clock and runs on it (issue 12, point 10).

Due times mean the store's time: every silo and every host then agrees on when a job is due,
whatever its own clock says. Every ``heartbeat_interval`` (plus a phase that makes each reading
informative, see ``cluster.model.skew``) the silo reads the store's clock and narrows the
interval that holds ``store - local``. The roles read time from ``StoreClock``: this host's
monotonic clock plus the *low* end of that interval — the earliest the store's time can be. So a
job is due only once the store's time is surely past its due time: a silo whose clock runs ahead
waits, one that runs behind fires late by at most the interval's width (about a round trip).

A skew beyond ``max_clock_skew`` is an error in the log, in ``status()`` and in the
``clock_skew_exceeded`` metric. The silo keeps firing, corrected: its own firing is right at any
skew, and stopping would turn a clock fault into an outage. What the bound protects is the
handler's lease check, which compares the lease end (store time) with the handler host's clock.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from cluster.model.clock import Clock
from cluster.model.options import ClusterOptions
from cluster.model.skew import DRIFT, Offset, OffsetEstimator, Sample
from cluster.model.wire import timedelta_to_us
from cluster.runtime.metrics import SiloMetrics
from storage import StorageError, Store

log = logging.getLogger("timeshard.silo")

#: An offset interval wider than this (µs) is narrowed by quicker readings.
WIDE_US = 20_000
#: How long before the instant a reading is aimed at the store is called, to connect meanwhile (s).
PREPARE = 0.05
#: Readings per round on a store that aims them, in steps of a quarter interval around the middle.
SWEEP = (-1, 0, 1)
#: A request that left this much before the instant asked was not aimed by the store (µs).
AIM_TOLERANCE_US = 5_000
#: While the skew stays beyond the bound, the error is logged again this often (seconds).
REPEAT_ERROR = 60.0


def _us(seconds: float) -> int:
    return round(seconds * 1_000_000)


class StoreClock:
    """The store's time as read on this host: monotonic time plus the offset's low bound.

    Until the first reading, and for a store that shares this host's clock (``server_time``
    answers None), it is the local clock itself.
    """

    def __init__(self, local: Clock) -> None:
        self._local = local
        self._low_us: int | None = None  # the offset's low bound at local monotonic _at_us
        self._at_us = 0

    def set_offset(self, offset: Offset | None, at_us: int) -> None:
        """Run on ``offset`` (measured at local monotonic ``at_us``), or on the local clock if None."""
        self._low_us, self._at_us = (None, 0) if offset is None else (offset.low_us, at_us)

    def now_us(self) -> int:
        if self._low_us is None:
            return self._local.now_us()
        mono = _us(self._local.monotonic())
        # Every reading widens by DRIFT per second of age, so the intersection's low end does too.
        return mono + self._low_us - int((mono - self._at_us) * DRIFT)

    def monotonic(self) -> float:
        return self._local.monotonic()


class Skew:
    """Reads the store's clock, keeps the offset estimate, and reports a skew beyond the bound."""

    def __init__(self, store: Store, options: ClusterOptions, local: Clock, metrics: SiloMetrics, silo_id: str) -> None:
        self._store = store
        self._options = options
        self._local = local
        self._metrics = metrics
        self._silo_id = silo_id
        self._estimator = OffsetEstimator()
        self._shared = False  # the store has no clock of its own: ours is taken as its
        self._round_trip_us = 0  # the last reading's flight: request left to answer arrived
        self._lead_us = 0  # from calling the store to its request leaving, in the last reading
        self._errored_at: float | None = None  # monotonic time of the last error logged
        self._timed_by = ""  # how the last reading's flight was timed (ServerTime.timed_by)
        # Whether the store sends a request at the instant asked (Store.server_time_near); one
        # that says so but does not is found out by its first reading.
        self._aims = bool(getattr(store, "aims_clock_reads", False))
        self.clock = StoreClock(local)

    async def sample(self, send_at_us: int | None = None) -> None:
        """Read the store's clock once and update the estimate, the clock and the report; the
        request sent at local monotonic ``send_at_us`` if given and the store can wait for it."""
        called = _us(self._local.monotonic())
        reading = await (self._store.server_time() if send_at_us is None
                         else self._store.server_time_near(send_at_us / 1e6))
        returned = _us(self._local.monotonic())
        if reading is None:
            self._shared = True
            self._round_trip_us, self._lead_us = returned - called, 0
            self.clock.set_offset(None, returned)
            return
        sent, received = reading.in_flight(called, returned)
        if send_at_us is not None:
            # A store that ignores the aim sent it PREPARE early; a busy loop may send it late.
            self._aims = sent >= send_at_us - AIM_TOLERANCE_US
        self._round_trip_us, self._lead_us = received - sent, sent - called
        self._timed_by = reading.timed_by
        if not self._estimator.add(Sample(sent, received, reading.at_us, reading.resolution_us, reading.lag_us)):
            log.warning("the store's clock disagrees with earlier readings (a clock was stepped); measuring again",
                        extra={"silo": self._silo_id})
        self.clock.set_offset(self._estimator.offset(returned), returned)
        self._check_bound()

    async def run(self) -> None:
        """Read the store's clock every ``heartbeat_interval``, at the phase that tells most; forever."""
        interval = self._options.heartbeat_interval.total_seconds()
        while True:
            now = _us(self._local.monotonic())
            offset = self._estimator.offset(now)
            # While the interval is still wide (a second, from Azure's first reading) jobs fire up
            # to that much late: read again sooner until it is down to a few round trips.
            wide = offset is not None and offset.width_us > max(4 * self._round_trip_us, WIDE_US)
            pause = interval / 10 if wide else interval
            if self._aims:
                await self._sweep(now, pause, offset)
                continue
            # The request leaves a lead after the call: aimed by the last one.
            await asyncio.sleep(pause + self._estimator.next_phase(
                now + _us(pause), self._round_trip_us, self._lead_us) / 1e6)
            await self._sample_logged(None)

    async def _sweep(self, now: int, pause: float, offset: Offset | None) -> None:
        """Readings sent at ``SWEEP`` steps around the instant that halves the interval, each a
        quarter of it (at least a round trip) apart: the one that lands just after the store's
        tick sets the low end, the one just before it the high end. Called PREPARE early; the
        store connects, then sends each at its instant."""
        aim = now + _us(pause) + self._estimator.next_phase(now + _us(pause), self._round_trip_us)
        step = max(self._round_trip_us, 0 if offset is None else offset.width_us // 4)
        send_ats = [aim + k * step for k in SWEEP]
        await asyncio.sleep(max(0.0, (min(send_ats) - now) / 1e6 - PREPARE))
        await asyncio.gather(*(self._sample_logged(at) for at in send_ats))

    async def _sample_logged(self, send_at_us: int | None) -> None:
        try:
            await self.sample(send_at_us)
        except asyncio.CancelledError:
            raise
        except StorageError as exc:
            log.warning("could not read the store's clock", extra={"silo": self._silo_id, "error": repr(exc)})

    def skew(self) -> tuple[int, int] | None:
        """``store - this host's wall clock`` in µs, as an interval; None if unmeasured or shared."""
        if self._shared:
            return (0, 0)
        mono = _us(self._local.monotonic())
        offset = self._estimator.offset(mono)
        if offset is None:
            return None
        wall_minus_mono = self._local.now_us() - mono
        return offset.low_us - wall_minus_mono, offset.high_us - wall_minus_mono

    def exceeded(self) -> bool:
        """Whether this host's clock is surely more than ``max_clock_skew`` from the store's."""
        skew = self.skew()
        bound = timedelta_to_us(self._options.max_clock_skew)
        return skew is not None and (skew[0] > bound or skew[1] < -bound)

    def report(self) -> dict[str, Any]:
        """For ``status()``: the offset interval (store minus this host, seconds), its width, the
        lateness it causes, the last reading's round trip, and the bound.

        Jobs fire once the interval's low end says they are due, so the clock makes a job late by
        the true offset's distance above that end: up to the width (``lateness_up_to_s``; nothing
        on a store that shares this host's clock). The round trip is the floor the width narrows to;
        ``timed_by`` says how its ends were taken (``ServerTime.timed_by``) and ``aimed`` whether the
        store sends each reading at the instant the silo aims it at (``Store.server_time_near``).
        """
        skew = self.skew()
        width = None if skew is None else (skew[1] - skew[0]) / 1e6
        return {
            "store_clock": "shared" if self._shared else ("unmeasured" if skew is None else "measured"),
            "offset_low_s": None if skew is None else skew[0] / 1e6,
            "offset_high_s": None if skew is None else skew[1] / 1e6,
            "width_s": width,
            "lateness_up_to_s": width,
            "round_trip_s": None if skew is None or self._shared else self._round_trip_us / 1e6,
            "timed_by": None if skew is None or self._shared else (self._timed_by or None),
            "aimed": None if skew is None or self._shared else self._aims,
            "max_clock_skew_s": self._options.max_clock_skew.total_seconds(),
            "exceeded": self.exceeded(),
            "restarts": self._estimator.restarts,
        }

    def _check_bound(self) -> None:
        skew = self.skew()
        if skew is None:
            return
        exceeded = self.exceeded()
        self._metrics.clock_offset.set((skew[0] + skew[1]) / 2e6)
        self._metrics.clock_uncertainty.set((skew[1] - skew[0]) / 1e6)
        self._metrics.clock_skew_exceeded.set(1.0 if exceeded else 0.0)
        now = self._local.monotonic()
        if not exceeded:
            if self._errored_at is not None:
                log.info("clock skew back within max_clock_skew", extra={"silo": self._silo_id})
            self._errored_at = None
            return
        if self._errored_at is None or now - self._errored_at >= REPEAT_ERROR:
            self._errored_at = now
            log.error(
                "this host's clock is off the store's by more than max_clock_skew; firing follows the "
                "store's clock, but handlers on hosts this far off may accept work past a lease",
                extra={"silo": self._silo_id, "offset_low_s": skew[0] / 1e6, "offset_high_s": skew[1] / 1e6,
                       "max_clock_skew_s": self._options.max_clock_skew.total_seconds()},
            )
