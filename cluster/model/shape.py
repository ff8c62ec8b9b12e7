"""Where a job's occurrences land: jitter, bounds (``not_before`` / ``not_after``) and exclusions.

A job's schedule gives *scheduled* times; this module decides which of them are fired and when:

- **Bounds.** No occurrence is fired before ``not_before`` or after ``not_after`` (both
  inclusive edges are allowed). The first occurrence moves up to ``not_before``'s first
  schedule time; once the next one would fall after ``not_after`` the job finishes.
- **Exclusions.** An occurrence whose time matches an exclusion is skipped (and counted): a cron
  expression matches the occurrence's wall time to the second, in the exclusion's own
  ``CRON_TZ`` zone or else the schedule's; a date matches every occurrence on that calendar day
  in the schedule's zone (``CRON_TZ`` of the schedule, else UTC), so ``exclude=["2026-12-25"]``
  on a schedule in ``Europe/Berlin`` skips the Berlin Christmas day, whatever UTC says.
- **Jitter.** An occurrence scheduled at ``t`` fires at ``t + offset``, the offset drawn
  uniformly from ``[0, jitter]`` by a hash of the job id and ``t`` (:func:`jitter_offset_us`):
  never early, the same on every silo and every replay. The series advances from ``t``, never
  from the jittered time, so jitter never drifts a schedule; retries are not jittered again (a
  failure policy counts from the jittered attempt).

Pure functions of their arguments, like :mod:`cluster.model.occurrences`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta, timezone, tzinfo
from typing import Any, NamedTuple

from cluster.model.errors import InvalidJob, InvalidSchedule, InvalidTime, ValidationError
from cluster.model.schedules import Schedule
from cluster.model.times import parse_duration, parse_time
from cluster.model.wire import datetime_to_us, memoized, timedelta_to_us, us_to_datetime

__all__ = [
    "DEFAULT_NEXT_FIRES",
    "MAX_EXCLUSIONS",
    "MAX_JITTER",
    "Exclusions",
    "Shaped",
    "allowed_from",
    "jitter_offset_us",
    "next_fire_times",
    "parse_exclusions",
]

#: How many fire times ``status.next_fires`` shows by default.
DEFAULT_NEXT_FIRES = 5
#: The widest jitter accepted (a wider one is a mistake, and its µs must fit the wire's int64).
MAX_JITTER = timedelta(days=366)
#: At most this many exclusions per job: a job record stays small (a year of holidays fits).
MAX_EXCLUSIONS = 1000
# Consecutive excluded occurrences looked at one by one before the rest of an excluded stretch
# is jumped over: a per-second cron schedule excluding a whole day must not hold the event loop.
_WALK_LIMIT = 1000
# Steps, and a span of time, after which exclusions are judged to exclude everything from here
# on: no sensible calendar excludes ten years in a row.
_STRETCH_LIMIT = 100_000
_HORIZON = timedelta(days=3653)
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_MICRO = timedelta(microseconds=1)
_SECOND = timedelta(seconds=1)
ACCEPTED_EXCLUSIONS = ("cron text (as for schedule, CRON_TZ= allowed), a date or 'YYYY-MM-DD' text, or a list of "
                       "those")


def jitter_offset_us(job_id: str, scheduled_us: int, jitter_us: int) -> int:
    """The offset (µs, in ``[0, jitter_us]``) at which the occurrence scheduled at ``scheduled_us`` fires.

    Uniform, and a pure function of the job id and the occurrence's time: every silo, replay
    and adopter computes the same one.
    """
    if jitter_us <= 0:
        return 0
    digest = hashlib.blake2b(f"{job_id}/{scheduled_us}".encode(), digest_size=8).digest()
    # 64 random bits modulo a window below 2^45 µs (a year): the bias is below 2^-19.
    return int.from_bytes(digest, "big") % (jitter_us + 1)


@dataclass(frozen=True)
class Exclusions:
    """Cron expressions and calendar dates whose occurrences are skipped; empty excludes nothing.

    ``wire`` is what the job record stores: cron texts as str, dates as their proleptic ordinal
    (an int packs to 5 bytes, its text to 11).
    """

    crons: tuple[Schedule, ...] = ()
    dates: frozenset[date] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.crons or self.dates)

    @property
    def wire(self) -> list[Any]:
        return [*(c.text for c in self.crons), *sorted(d.toordinal() for d in self.dates)]

    @classmethod
    def from_wire(cls, obj: list[Any], memo: dict[Any, Any] | None = None) -> Exclusions:
        """The exclusions ``wire`` encoded (trusted, as replay trusts the log, but of the right shape)."""
        cls.check_wire(obj)
        crons = tuple(memoized(memo, item, Schedule.parse, item) for item in obj if type(item) is str)
        return cls(crons, frozenset(date.fromordinal(item) for item in obj if type(item) is int))

    @staticmethod
    def check_wire(obj: Any) -> None:
        """Raise ``InvalidJob`` unless ``obj`` has the shape of ``wire``: a list of str and int."""
        if type(obj) is not list or any(type(item) not in (str, int) for item in obj):
            raise InvalidJob("job", "exclusions of a job record must be a list of str and int", obj)

    def ends(self, when: datetime, zone: tzinfo) -> datetime | None:
        """None if ``when`` is not excluded; else the end of the excluded stretch it is in: a
        later instant before which every time is excluded too (a jump that skips nothing allowed)."""
        end: datetime | None = None
        if self.dates:
            day = when.astimezone(zone).date()
            if day in self.dates:
                while day in self.dates:
                    day += timedelta(days=1)
                end = datetime.combine(day, time(0), tzinfo=zone).astimezone(timezone.utc)
        for cron in self.crons:
            stretch = _cron_stretch(cron, when, zone)
            if stretch is not None and (end is None or stretch > end):
                end = stretch
        if end is not None and end <= when:
            end = when + _MICRO  # a wall time repeated by a fall-back: excluded, step past it
        return end


NO_EXCLUSIONS = Exclusions()


def _cron_stretch(cron: Schedule, when: datetime, schedule_zone: tzinfo) -> datetime | None:
    """If ``cron`` matches ``when`` (to the second, on the wall clock of its zone), the first
    instant after which it may not: the next wall time, in whole seconds, that it does not match."""
    spec = cron._cron
    assert spec is not None  # exclusions are validated to be cron text
    zone = cron.tz if cron.zone is not None else schedule_zone
    wall = when.astimezone(zone).replace(tzinfo=None, microsecond=0)
    if not spec.matches(wall):
        return None
    t = wall
    for _ in range(400):  # each step leaves a full field's unit or a value behind: bounded by the field sizes
        if not spec.matches(t):
            break
        if len(spec.seconds) < 60:
            t += _SECOND
        elif len(spec.minutes) < 60:
            t = t.replace(second=0) + timedelta(minutes=1)
        elif len(spec.hours) < 24:
            t = t.replace(minute=0, second=0) + timedelta(hours=1)
        else:
            t = datetime.combine(t.date() + timedelta(days=1), time(0))
    return t.replace(tzinfo=zone).astimezone(timezone.utc)


def parse_exclusions(value: object, *, field: str = "exclude") -> Exclusions:
    """The exclusions ``value`` names: a cron text, a date, ``YYYY-MM-DD`` text, or a list of them.

    Raises a ``ValidationError`` naming ``field`` (``exclude[2]`` for the third item) and the rule.
    """
    if value is None:
        return NO_EXCLUSIONS
    if isinstance(value, Exclusions):
        return value
    items: Iterable[object]
    if isinstance(value, (str, date)):
        items = [value]
    elif isinstance(value, (list, tuple, set, frozenset)):
        items = value
    else:
        raise InvalidJob(field, "must be cron text, a date, or a list of those", value, accepted=ACCEPTED_EXCLUSIONS)
    crons: list[Schedule] = []
    dates: set[date] = set()
    for i, item in enumerate(items):
        where = field if isinstance(value, (str, date)) else f"{field}[{i}]"
        if isinstance(item, datetime):
            raise InvalidJob(where, "must be a date (a calendar day), not a datetime", item, accepted=ACCEPTED_EXCLUSIONS)
        if isinstance(item, date):
            dates.add(item)
        elif isinstance(item, str) and _DATE.fullmatch(item.strip()):
            try:
                dates.add(date.fromisoformat(item.strip()))
            except ValueError:
                raise InvalidJob(where, "is not a calendar date", item, accepted=ACCEPTED_EXCLUSIONS) from None
        elif isinstance(item, str):
            try:
                cron = Schedule.parse(item)
            except ValidationError as exc:
                raise InvalidSchedule(where, f"{exc.field}: {exc.rule}", item, accepted=ACCEPTED_EXCLUSIONS) from None
            if not cron.is_cron:
                raise InvalidSchedule(where, "must be cron text or a cron macro: '@every' has no times to match", item,
                                      accepted=ACCEPTED_EXCLUSIONS)
            if cron not in crons:
                crons.append(cron)
        else:
            raise InvalidJob(where, "must be cron text, a date or 'YYYY-MM-DD' text", item, accepted=ACCEPTED_EXCLUSIONS)
    if len(crons) + len(dates) > MAX_EXCLUSIONS:
        raise InvalidJob(field, f"must hold at most {MAX_EXCLUSIONS} exclusions", len(crons) + len(dates))
    return Exclusions(tuple(crons), frozenset(dates))


def parse_jitter(value: object) -> timedelta:
    """``value`` as a jitter window: a duration from 0 to ``MAX_JITTER``; raises ``InvalidTime``."""
    jitter = parse_duration(value, field="jitter")
    if jitter < timedelta(0) or jitter > MAX_JITTER:
        raise InvalidTime("jitter", "must be a duration from 0 to 366 days", value)
    return jitter


def parse_bound(value: object, now: datetime, field: str) -> datetime | None:
    """``not_before`` / ``not_after`` as an aware UTC instant (or None); raises ``InvalidTime``."""
    return None if value is None else parse_time(value, now, field=field)


class Shaped(NamedTuple):
    """What :func:`allowed_from` found: the occurrence to fire (None: none is left), how many
    occurrences exclusions skipped on the way, and whether ``not_after`` ended the series."""

    scheduled: datetime | None
    excluded: int = 0
    past_end: bool = False


@dataclass(frozen=True)
class Bounds:
    """A job's shape as the firing code needs it: everything but jitter (applied per occurrence)."""

    not_before: datetime | None = None
    not_after: datetime | None = None
    exclude: Exclusions = field(default=NO_EXCLUSIONS)


def allowed_from(schedule: Schedule | None, candidate: datetime, bounds: Bounds) -> Shaped:
    """The first occurrence at or after ``candidate`` (itself an occurrence of ``schedule``) that
    the bounds and exclusions allow, on ``schedule``'s grid.

    A one-shot job (no schedule) has only ``candidate``. An exclusion that matches every
    occurrence from here on ends the series (``scheduled`` None) rather than looping forever.
    """
    excluded = 0
    zone = timezone.utc if schedule is None else schedule.tz
    horizon = candidate + _HORIZON if candidate < datetime.max.replace(tzinfo=timezone.utc) - _HORIZON else None
    for _ in range(_STRETCH_LIMIT):
        if horizon is not None and candidate > horizon and (bounds.not_before is None or candidate > bounds.not_before):
            break
        if bounds.not_after is not None and candidate > bounds.not_after:
            return Shaped(None, excluded, True)
        if bounds.not_before is not None and candidate < bounds.not_before:
            if schedule is None:
                return Shaped(None, excluded, True)
            candidate = _at_or_after(schedule, candidate, bounds.not_before)
            continue
        end = bounds.exclude.ends(candidate, zone) if bounds.exclude else None
        if end is None:
            return Shaped(candidate, excluded)
        if schedule is None:
            return Shaped(None, excluded + 1)
        following = schedule.next_after(candidate)
        if schedule.period is not None and end > following:
            # Grid arithmetic: every @every occurrence before ``end`` is excluded, and counted.
            periods = -(-(end - candidate) // schedule.period)
            candidate += periods * schedule.period
            excluded += periods
            continue
        excluded += 1
        candidate = following
        # Every occurrence before ``end`` is excluded too: counted without asking the exclusions
        # again, up to a limit; the rest of a longer stretch is jumped over, uncounted.
        walked = 0
        while candidate < end and walked < _WALK_LIMIT:
            excluded += 1
            walked += 1
            candidate = schedule.next_after(candidate)
        if candidate < end:
            candidate = _at_or_after(schedule, candidate, end)
    return Shaped(None, excluded)


def _at_or_after(schedule: Schedule, candidate: datetime, bound: datetime) -> datetime:
    """The first occurrence at or after ``bound`` on the grid that runs through ``candidate``."""
    if schedule.period is not None:
        if bound <= candidate:
            return candidate
        return candidate + -(-(bound - candidate) // schedule.period) * schedule.period
    return schedule.next_after(max(candidate, bound) - _MICRO)


def next_fire_times(
    job_id: str,
    schedule: Schedule | None,
    anchor: datetime,
    now: datetime,
    *,
    bounds: Bounds,
    jitter: timedelta,
    ttl: datetime | None,
    left: int | None,
    count: int = DEFAULT_NEXT_FIRES,
    paused: bool = False,
) -> list[datetime]:
    """The next ``count`` times the job fires after ``now``, as aware UTC datetimes: none while
    ``paused``; bounds, exclusions, jitter and ``ttl`` honoured; at most ``left`` occurrences
    (None: unbounded).

    ``anchor`` is a scheduled time of the series (the job's first ``due``): an ``@every`` grid
    runs through it. An occurrence whose jittered time is still ahead counts even when its
    scheduled time has passed.
    """
    if paused or count <= 0 or (left is not None and left <= 0):
        return []
    limit = count if left is None else min(count, left)
    jitter_us = timedelta_to_us(jitter)
    if schedule is None:
        candidate = anchor
    elif schedule.period is not None:
        start = now - jitter
        candidate = anchor if anchor > start else anchor + ((start - anchor) // schedule.period + 1) * schedule.period
    else:
        start = max(now - jitter, anchor - _MICRO)
        candidate = schedule.next_after(start) if start >= anchor else anchor
    fires: list[datetime] = []
    while len(fires) < limit:
        shaped = allowed_from(schedule, candidate, bounds)
        scheduled = shaped.scheduled
        if scheduled is None or (ttl is not None and scheduled > ttl):
            break
        us = datetime_to_us(scheduled)
        fire = us_to_datetime(us + jitter_offset_us(job_id, us, jitter_us))
        if fire > now or schedule is None:
            fires.append(fire)
        if schedule is None:
            break
        candidate = schedule.next_after(scheduled)
    return fires
