"""The dashboard's one reading of the silos: a ``Sampler`` runs with the app and, every
``SAMPLE_INTERVAL`` seconds, reads every silo's ``status()`` once; requests arriving within an
interval are answered from that same reading, so the dashboard's cost on the silos does not grow
with open tabs or pages. It keeps the last ``KEEP`` seconds of derived points (``Series``).
Counters in a status are cumulative per silo incarnation; ``Series`` turns two readings into rates
and lateness quantiles the way Prometheus' ``rate`` and ``histogram_quantile`` do (a new
incarnation's counters count from zero: never a negative rate), and keeps what happened to a silo
between readings (``Event``) for as long.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from aiohttp import web

log = logging.getLogger("timeshard.ui")

SAMPLE_INTERVAL = 2.0  # seconds between readings of the silos' statuses
KEEP = 600.0  # seconds of points the charts show

Statuses = list[dict[str, Any]]
Buckets = tuple[tuple[float, int], ...]  # (upper bound, observations at or below it), +inf last


@dataclass(frozen=True)
class Point:
    """What the silos did between two readings: ``t`` is the later one (seconds since the epoch)."""

    t: float
    fires_per_s: float | None  # None when no silo answered with counters
    lateness_p50_ms: float | None  # None when nothing fired in the interval
    lateness_p99_ms: float | None


@dataclass(frozen=True)
class Seen:
    """One silo's cumulative counters at one reading."""

    owner: str
    at: float  # monotonic seconds
    fired: int
    buckets: Buckets | None  # None from a silo that does not report lateness buckets
    lapses: int = 0  # ``lease_lapses``: times its firing lease ran out before a heartbeat renewed it


@dataclass(frozen=True)
class Event:
    """Something that happened to a silo between two readings, shown as an alert while it is kept:
    a new incarnation (restarted, or declared dead by its peers and rejoined), or lease lapses."""

    at: float  # monotonic s of the reading that saw it
    wall: float
    kind: str
    silo: str
    message: str


def buckets_of(counters: Mapping[str, Any]) -> Buckets | None:
    """``lateness_buckets`` of a status's counters, sorted by bound, in seconds."""
    raw = counters.get("lateness_buckets")
    if not isinstance(raw, Mapping) or not raw:
        return None
    return tuple(sorted((float(le), int(n)) for le, n in raw.items()))


def since(now: Seen, before: Seen | None) -> tuple[int, Buckets | None]:
    """Fires and lateness buckets counted between two readings of one silo.

    A new incarnation (or a counter that went down) counts from zero, as Prometheus reads a reset.
    """
    reset = before is None or before.owner != now.owner or now.fired < before.fired
    if reset or before is None:
        return now.fired, now.buckets
    if now.buckets is None:
        return now.fired - before.fired, None
    old = dict(before.buckets or ())
    delta = tuple((le, n - old.get(le, 0)) for le, n in now.buckets)
    if any(n < 0 for _, n in delta):
        return now.fired - before.fired, now.buckets
    return now.fired - before.fired, delta


def quantile(q: float, cumulative: Buckets) -> float | None:
    """The ``q`` quantile of observations in cumulative buckets, interpolated linearly within the
    bucket it falls in (Prometheus' ``histogram_quantile``); None when there are none.

    The first bucket starts at 0; a quantile in the +Inf bucket reads as the highest finite bound.
    """
    if not cumulative or cumulative[-1][1] <= 0:
        return None
    rank = q * cumulative[-1][1]
    lower, below = 0.0, 0
    for le, count in cumulative:
        if count >= rank:
            if math.isinf(le):
                return lower
            return lower + (le - lower) * (rank - below) / (count - below)
        lower, below = le, count
    return lower


def add_buckets(a: Buckets | None, b: Buckets) -> Buckets:
    if a is None:
        return b
    total = dict(a)
    for le, n in b:
        total[le] = total.get(le, 0) + n
    return tuple(sorted(total.items()))


class Series:
    """Points derived from successive readings of the silos, the last ``keep`` seconds of them."""

    def __init__(self, keep: float = KEEP, interval: float = SAMPLE_INTERVAL) -> None:
        self.keep = keep
        self.interval = interval
        self._points: deque[tuple[float, Point]] = deque(maxlen=math.ceil(keep / interval) + 1)
        self._seen: dict[str, Seen] = {}
        self._last_at: float | None = None
        self._events: deque[Event] = deque(maxlen=100)

    def add(self, at: float, wall: float, statuses: Sequence[Mapping[str, Any]]) -> Point | None:
        """Take a reading made at ``at`` (monotonic s) and ``wall`` (epoch s); the point it makes.

        The first reading only sets where counting starts. Each silo's fires count over the time
        since it last answered (a silo that missed a reading is not credited twice); one that
        answers for the first time after that started within the last interval.
        """
        previous_at, self._last_at = self._last_at, at
        rate: float | None = None
        lateness: Buckets | None = None
        for status in statuses:
            counters = status.get("counters")
            if status.get("error") or not isinstance(counters, Mapping):
                continue
            silo_id = str(status.get("silo_id"))
            now = Seen(str(status.get("owner") or ""), at, int(counters.get("fired") or 0), buckets_of(counters),
                       int(counters.get("lease_lapses") or 0))
            before = self._seen.get(silo_id)
            self._seen[silo_id] = now
            self._note(before, now, silo_id, wall)
            if previous_at is None:
                continue
            fired, buckets = since(now, before)
            span = at - (before.at if before is not None else previous_at)
            if span > 0:
                rate = (rate or 0.0) + fired / span
            if buckets is not None:
                lateness = add_buckets(lateness, buckets)
        self._seen = {k: v for k, v in self._seen.items() if at - v.at <= self.keep}
        while self._events and at - self._events[0].at > self.keep:
            self._events.popleft()
        if previous_at is None:
            return None
        p50 = None if lateness is None else quantile(0.5, lateness)
        p99 = None if lateness is None else quantile(0.99, lateness)
        point = Point(wall, rate, None if p50 is None else p50 * 1000, None if p99 is None else p99 * 1000)
        self._points.append((at, point))
        while self._points and at - self._points[0][0] > self.keep:
            self._points.popleft()
        return point

    def _note(self, before: Seen | None, now: Seen, silo_id: str, wall: float) -> None:
        """Record what changed for one silo since its last reading: a transient miss is gone by the
        next reading, so it is kept as an event for ``keep`` seconds rather than lost."""
        if before is None:
            return
        if before.owner != now.owner:
            incarnation = now.owner.rpartition("#")[2]
            self._events.append(Event(now.at, wall, "restarted", silo_id,
                                      f"now incarnation {incarnation}: restarted, or declared dead by its peers "
                                      f"and rejoined (its shards may have moved)"))
        elif now.lapses > before.lapses:
            self._events.append(Event(now.at, wall, "heartbeat", silo_id,
                                      f"firing lease lapsed {now.lapses - before.lapses} time(s): a heartbeat came late"))

    def events(self) -> list[Event]:
        """What happened to silos within the kept window, oldest first."""
        return list(self._events)

    def points(self) -> list[Point]:
        return [p for _, p in self._points]

    def to_json(self) -> dict[str, Any]:
        """The kept points for the page, rounded to what a chart can show (a lighter answer)."""
        def rounded(v: float | None) -> float | None:
            return None if v is None else round(v, 3)
        return {"interval_s": self.interval, "keep_s": self.keep,
                "points": [{k: rounded(v) for k, v in asdict(p).items()} for p in self.points()]}


@dataclass(frozen=True)
class Reading:
    at: float  # monotonic s
    wall: float
    statuses: Statuses
    keeping: Mapping[str, Any] | None = None  # the keeper's status, read with the statuses


class Sampler:
    """Reads the silos' statuses every ``interval`` seconds while the app runs, into a ``Series``;
    ``latest()`` hands requests the last reading while it is fresh, else reads once for them all."""

    def __init__(self, read: Callable[[], Awaitable[Statuses]], *, interval: float = SAMPLE_INTERVAL,
                 keep: float = KEEP, monotonic: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time,
                 read_keeping: Callable[[], Awaitable[Mapping[str, Any] | None]] | None = None) -> None:
        self._read = read
        self._read_keeping = read_keeping
        self.interval = interval
        self.series = Series(keep, interval)
        self._monotonic = monotonic
        self._wall = wall
        self._last: Reading | None = None
        self._lock = asyncio.Lock()
        self.task: asyncio.Task[None] | None = None  # the sampling loop, while the app runs

    async def latest(self) -> Reading:
        """The last reading if younger than an interval, else a new one (one for all who wait)."""
        async with self._lock:
            last = self._last
            if last is not None and self._monotonic() - last.at < self.interval:
                return last
            statuses = await self._read()
            keeping = await self._read_keeping() if self._read_keeping is not None else None
            reading = Reading(self._monotonic(), self._wall(), statuses, keeping)
            self.series.add(reading.at, reading.wall, statuses)
            self._last = reading
            return reading

    async def statuses(self) -> Statuses:
        return (await self.latest()).statuses

    async def run(self) -> None:
        """Read every interval (a request's reading counts as one) until cancelled."""
        while True:
            try:
                reading = await self.latest()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # status() answers per silo; anything else: try again next interval
                log.warning("reading the silos' statuses failed", extra={"error": repr(exc)})
                reading = None
            wait = self.interval if reading is None else reading.at + self.interval - self._monotonic()
            await asyncio.sleep(max(wait, 0.05))

    async def running(self, app: web.Application) -> AsyncIterator[None]:
        """An aiohttp ``cleanup_ctx``: sample while the app runs; cancelled and awaited on cleanup."""
        self.task = task = asyncio.create_task(self.run(), name="ui-sampler")
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


SAMPLER = web.AppKey("sampler", Sampler)
