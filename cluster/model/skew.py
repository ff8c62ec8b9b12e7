"""How far the store's clock is from ours, as an interval that surely holds the true offset.

One reading of the store's clock (``storage.ServerTime``: the clock read somewhere in
``[at, at + resolution)``) taken by a call this host sent at local time ``s`` and saw answered at
``r`` bounds the offset ``store - local`` to ``[at - r, at + resolution - s]``: the store read its
clock after the call was sent and before it was answered. Azure's ``Date`` header has one-second
resolution, so one reading says little; readings taken at different phases of the store's second
narrow the intersection of their intervals to about one round trip. ``next_phase`` picks the
phase that halves the interval, so a handful of readings suffice.

Local times here are on the monotonic clock: the local wall clock may be stepped, and the
offset then still holds. Readings age out of a sliding window (the store's clock may be stepped
too), and each is widened by ``DRIFT`` per second of age, since two clocks never tick at quite
the same rate.

The low end is what jobs fire by, and it holds whenever the store's ``Date`` never names a second
that has not begun. The high end needs more: that the ``Date`` is current, which a server that
renders it from a cached string renewed by a timer (Azurite: Node's) breaks for a few ms after
each tick. A reading that says its ``Date`` may lag (``Sample.lag_us``) and whose high end falls
below the low by less than that is such a reading and is left out; any other disagreement is a
stepped clock, and the window starts over from the new reading. Only readings that may lag get the
tolerance: with it, a store clock stepped back by less than the lag goes unseen until the older
readings age out, and jobs may fire up to that step early against the new store time.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

#: Readings kept; the estimate is their intersection.
WINDOW = 16
#: How fast two clocks may drift apart (200 ppm: far beyond NTP-disciplined hosts), µs per µs.
DRIFT = 200e-6


@dataclass(frozen=True)
class Sample:
    """One reading: sent at ``sent_us``, answered at ``received_us`` (local monotonic µs)."""

    sent_us: int
    received_us: int
    store_us: int
    resolution_us: int
    lag_us: int = 0  # how far its Date may lag the store's clock (a cached header: ServerTime.lag_us)

    def bounds(self, now_us: int) -> tuple[int, int]:
        """The offset ``store - local`` this reading allows, widened for drift since it was taken."""
        slack = int((now_us - self.received_us) * DRIFT)
        return (self.store_us - self.received_us - slack,
                self.store_us + self.resolution_us - self.sent_us + slack)


@dataclass(frozen=True)
class Offset:
    """``store - local`` lies in ``[low_us, high_us]``, by ``samples`` readings."""

    low_us: int
    high_us: int
    samples: int

    @property
    def width_us(self) -> int:
        return self.high_us - self.low_us

    @property
    def mid_us(self) -> int:
        return (self.low_us + self.high_us) // 2


class OffsetEstimator:
    """The intersection of the last ``WINDOW`` readings; restarts when they stop agreeing."""

    def __init__(self, window: int = WINDOW) -> None:
        self._samples: deque[Sample] = deque(maxlen=window)
        self.restarts = 0  # times the readings disagreed (a clock was stepped)

    def add(self, sample: Sample) -> bool:
        """Take a reading; False if it disagreed with the window, which then starts over from it."""
        self._samples.append(sample)
        if self.offset(sample.received_us) is not None:
            return True
        self._samples.clear()
        self._samples.append(sample)
        self.restarts += 1
        return False

    def offset(self, now_us: int) -> Offset | None:
        """The offset interval at local monotonic ``now_us``; None before the first reading."""
        if not self._samples:
            return None
        bounds = [(*sample.bounds(now_us), sample.lag_us) for sample in self._samples]
        low = max(lo for lo, _, _ in bounds)
        # A high below the low by less than its reading's lag is a Date that lagged the store's
        # clock (the reading's store second had in truth already ended): left out, as the low is
        # what holds. A reading that cannot lag and disagrees is a stepped clock.
        highs = [hi for _, hi, lag in bounds if hi >= low - lag]
        if len(highs) < len(bounds):
            return None  # a clock was stepped
        high = min((hi for hi in highs if hi >= low), default=low)
        return Offset(low, high, len(self._samples))

    def next_phase(self, now_us: int, round_trip_us: int, lead_us: int = 0) -> int:
        """How long (µs, < one resolution) to wait so the next reading halves the interval.

        ``round_trip_us`` is the request's flight, ``lead_us`` the time from calling the store to
        its request leaving: the store reads its clock about ``lead_us + round_trip_us / 2`` in.

        The reading is aimed so that the store reads its clock right at a tick of its coarse
        clock, by the middle of the current estimate: whether the tick had passed tells on which
        side of the middle the offset lies. Once narrow, aiming so keeps it narrow.
        """
        estimate = self.offset(now_us)
        if estimate is None:
            return 0
        resolution = self._samples[-1].resolution_us
        if resolution <= 1:
            return 0
        read_at = now_us + lead_us + round_trip_us // 2 + estimate.mid_us  # store time of the read if called now
        return (-read_at) % resolution
