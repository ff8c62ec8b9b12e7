"""Recurring schedules: seconds-first cron, ``@every`` and the named macros, in any IANA zone.

Cron text is ``sec min hour dom mon dow`` (the Dapr / robfig-cron v3 dialect): ``*``, ``?`` (day of
month and day of week only), values, ``a-b`` ranges, ``/n`` steps (``a/n`` means ``a-max/n``),
comma lists, month names ``Jan``..``Dec`` and weekday names ``Sun``..``Sat`` (``7`` is Sunday too where written; ``*`` and ``a/n`` stop at Saturday).
As in cron, when both day of month and day of week are restricted a day matching *either* fires;
a field written as ``*`` or ``?`` leaves the other one in charge.

An optional ``CRON_TZ=<zone> `` (or ``TZ=<zone> ``) prefix makes the fields wall-clock times in
that IANA zone; otherwise they are UTC (``@every`` counts real time, so a zone changes nothing for
it). Daylight-saving transitions follow the rule cron daemons use (Vixie cron's), so that nothing
is silently lost and nothing doubles up:

- A schedule pinned to particular hours fires once per matching wall time. A wall time that a
  spring-forward gap skips fires at the first instant after the gap (``02:30`` on a day New York
  jumps from 02:00 to 03:00 fires at 03:00 EDT); a wall time that the autumn fall-back repeats
  fires only the first time it occurs.
- A schedule whose hour field covers all 24 hours (``*``) follows the real clock: it keeps firing
  in the repeated hour and simply has no wall times inside a gap, so an hourly job fires once per
  real hour across both transitions.

Wall times are searched field by field in naive local time (exact, no DST involved) and then
resolved to instants with :mod:`zoneinfo`; croniter is not used at run time because its aware
arithmetic has known DST bugs and its per-call cost (~80 us) is ~6x this search's (the unit tests use it as
an independent oracle for the naive search).
"""

from __future__ import annotations

import bisect
import calendar
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cluster.model.errors import InvalidSchedule, InvalidTime
from cluster.model.times import format_duration, parse_duration, require_aware

__all__ = ["CRON_FIELDS", "MACROS", "Schedule"]

CRON_FIELDS = ("second", "minute", "hour", "day_of_month", "month", "day_of_week")
ACCEPTED = (
    "6-field cron 'sec min hour dom mon dow' (e.g. '0 30 * * * *', '0 0 9 * * Mon-Fri'), "
    "'@every <duration>' (e.g. '@every 1h30m'), @yearly @annually @monthly @weekly @daily @midnight "
    "@hourly, optionally prefixed by 'CRON_TZ=<IANA zone> '"
)
MACROS = {
    "@yearly": "0 0 0 1 1 *",
    "@annually": "0 0 0 1 1 *",
    "@monthly": "0 0 0 1 * *",
    "@weekly": "0 0 0 * * 0",
    "@daily": "0 0 0 * * *",
    "@midnight": "0 0 0 * * *",
    "@hourly": "0 0 * * * *",
}
_MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_abbr) if name}
_WEEKDAYS = {"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}
# (name, lowest, highest written, highest implied, names). Day of week admits 7 as a second
# Sunday, folded to 0 below, but only where it is written: '*' and 'a/n' stop at 6 (Saturday), as
# in robfig/cron and croniter — '6/1' is Saturday alone, 'Mon/2' Mon, Wed, Fri.
_SPECS = (
    ("second", 0, 59, 59, None),
    ("minute", 0, 59, 59, None),
    ("hour", 0, 23, 23, None),
    ("day_of_month", 1, 31, 31, None),
    ("month", 1, 12, 12, _MONTHS),
    ("day_of_week", 0, 7, 6, _WEEKDAYS),
)
MAX_SCHEDULE_CHARS = 1000  # the longest sensible cron text lists every value of every field
_PREFIX = re.compile(r"(CRON_TZ|TZ)=(\S*)\s+(.*)", re.DOTALL)
_ONE_SECOND = timedelta(seconds=1)
_ONE_DAY = timedelta(days=1)
# Zone transitions are looked for by probing the UTC offset at this step; tzdb never has two
# transitions that cancel out within a day.
_PROBE = timedelta(days=1)
# Feb 29 recurs within 8 years (2096 -> 2104); anything validated fires well within this.
_SEARCH_YEARS = 9


@dataclass(frozen=True)
class _Cron:
    """Parsed cron fields: sorted allowed values per field, and how the two day fields combine."""

    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: tuple[int, ...]
    months: tuple[int, ...]
    weekdays: tuple[int, ...]  # 0 = Sunday
    day_or: bool  # both day fields restricted: a day matching either fires

    @property
    def every_hour(self) -> bool:
        return len(self.hours) == 24

    def day_matches(self, day: datetime) -> bool:
        in_month = day.day in self.days
        in_week = (day.isoweekday() % 7) in self.weekdays
        return (in_month or in_week) if self.day_or else (in_month and in_week)

    def matches(self, wall: datetime) -> bool:
        """True when the naive wall time ``wall`` (whole seconds) satisfies every field."""
        return (
            wall.second in self.seconds
            and wall.minute in self.minutes
            and wall.hour in self.hours
            and wall.month in self.months
            and self.day_matches(wall)
        )

    def next_wall(self, after: datetime) -> datetime:
        """The first naive wall time strictly after ``after`` that matches (second resolution)."""
        t = after.replace(microsecond=0) + _ONE_SECOND
        limit = t.year + _SEARCH_YEARS
        while t.year <= limit:
            month = _at_or_after(self.months, t.month)
            if month != t.month:
                t = datetime(t.year, month, 1) if month is not None else datetime(t.year + 1, self.months[0], 1)
                continue
            if not self.day_matches(t):
                t = datetime(t.year, t.month, t.day) + _ONE_DAY
                continue
            hour = _at_or_after(self.hours, t.hour)
            if hour != t.hour:
                t = t.replace(hour=hour, minute=0, second=0) if hour is not None else _next_day(t)
                continue
            minute = _at_or_after(self.minutes, t.minute)
            if minute != t.minute:
                t = t.replace(minute=minute, second=0) if minute is not None else _next_hour(t)
                continue
            second = _at_or_after(self.seconds, t.second)
            if second is None:
                t = t.replace(second=0) + timedelta(minutes=1)
                continue
            return t.replace(second=second)
        raise AssertionError(f"validated cron {self} found no time within {_SEARCH_YEARS} years")


def _at_or_after(values: tuple[int, ...], current: int) -> int | None:
    i = bisect.bisect_left(values, current)
    return values[i] if i < len(values) else None


def _next_day(t: datetime) -> datetime:
    return datetime(t.year, t.month, t.day) + _ONE_DAY


def _next_hour(t: datetime) -> datetime:
    return t.replace(minute=0, second=0) + timedelta(hours=1)


@dataclass(frozen=True)
class Schedule:
    """A recurring schedule; ``next_after(dt)`` gives the next fire time strictly after ``dt``.

    ``text`` is all the job log stores: ``Schedule.parse(s.text) == s`` always holds.
    """

    text: str
    period: timedelta | None = None
    zone: str | None = None
    _cron: _Cron | None = field(default=None, repr=False)
    _tz: tzinfo = field(default=timezone.utc, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Schedule("0 * * * * *") is Schedule.parse("0 * * * * *"): a bare text is parsed, not trusted.
        if self.period is None and self._cron is None:
            parsed = Schedule.parse(self.text)
            for name in ("text", "period", "zone", "_cron", "_tz"):
                object.__setattr__(self, name, getattr(parsed, name))

    @property
    def tz(self) -> tzinfo:
        """The zone of the schedule's wall times: its ``CRON_TZ``, else UTC."""
        return self._tz

    @property
    def is_cron(self) -> bool:
        """True for cron text and macros, False for ``@every``."""
        return self._cron is not None

    @classmethod
    def every(cls, period: timedelta | str) -> Schedule:
        """An ``@every`` schedule: fire times ``period`` apart, anchored to the previous fire time."""
        if not isinstance(period, timedelta):
            return cls.parse(f"@every {period}")
        return cls.parse(f"@every {format_duration(period)}")

    @classmethod
    def parse(cls, text: str) -> Schedule:
        """The schedule ``text`` describes; raises InvalidSchedule naming the wrong field."""
        if isinstance(text, Schedule):
            return text
        if not isinstance(text, str):
            raise InvalidSchedule("schedule", "must be schedule text", text, accepted=ACCEPTED)
        if len(text) > MAX_SCHEDULE_CHARS:
            raise InvalidSchedule("schedule", f"is longer than {MAX_SCHEDULE_CHARS} characters", text, accepted=ACCEPTED)
        normalized = " ".join(text.split())
        body, zone_name = normalized, None
        tz: tzinfo = timezone.utc
        prefix = _PREFIX.fullmatch(normalized)
        if prefix is not None:
            zone_name, body = prefix.group(2), prefix.group(3)
            tz = _zone(zone_name, text)
        if body.lower().startswith("@every"):
            return cls(normalized, _every_period(body[len("@every"):], text), zone_name, None, tz)
        if body.startswith("@"):
            expanded = MACROS.get(body.lower())
            if expanded is None:
                raise InvalidSchedule("schedule", f"unknown macro {body!r}", text, accepted=ACCEPTED)
            body = expanded
        return cls(normalized, None, zone_name, _parse_cron(body, text), tz)

    def next_after(self, dt: datetime) -> datetime:
        """The first fire time strictly after ``dt``, an aware UTC datetime (``dt`` must be aware)."""
        dt = require_aware(dt, field="dt")
        if self.period is not None:
            return dt + self.period
        assert self._cron is not None
        if self._tz is timezone.utc:
            return self._cron.next_wall(dt.replace(tzinfo=None)).replace(tzinfo=timezone.utc)
        return _next_in_zone(self._cron, self._tz, dt)


def _zone(name: str, text: str) -> tzinfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidSchedule("CRON_TZ", f"unknown IANA time zone {name!r}", text, accepted=ACCEPTED) from None


def _every_period(rest: str, text: str) -> timedelta:
    if not rest.startswith(" ") or not rest.strip():
        raise InvalidSchedule("schedule", "'@every' needs a duration, like '@every 1h30m'", text, accepted=ACCEPTED)
    try:
        period = parse_duration(rest.strip(), field="@every")
    except InvalidTime as exc:
        raise InvalidSchedule("schedule", f"'@every' needs a valid duration: {exc.rule}", text, accepted=ACCEPTED) from None
    if period <= timedelta(0):
        raise InvalidSchedule("schedule", "'@every' period must be greater than zero", text, accepted=ACCEPTED)
    return period


def _parse_cron(body: str, text: str) -> _Cron:
    parts = body.split()
    if len(parts) != len(_SPECS):
        raise InvalidSchedule(
            "schedule", f"expected 6 fields (sec min hour dom mon dow), got {len(parts)}", text, accepted=ACCEPTED
        )
    values: list[tuple[int, ...]] = []
    stars: list[bool] = []
    for part, (name, low, high, implied, names) in zip(parts, _SPECS, strict=True):
        allowed, star = _parse_field(part, name, low, high, implied, names, text)
        values.append(allowed)
        stars.append(star)
    seconds, minutes, hours, days, months, weekdays = values
    weekdays = tuple(sorted({d % 7 for d in weekdays}))
    dom_star, dow_star = stars[3], stars[5]
    if dow_star and not _some_day_exists(days, months):
        raise InvalidSchedule(
            "day_of_month", "never matches a day that exists in the given months", text, accepted=ACCEPTED
        )
    return _Cron(seconds, minutes, hours, days, months, weekdays, day_or=not (dom_star or dow_star))


def _some_day_exists(days: tuple[int, ...], months: tuple[int, ...]) -> bool:
    longest = max(calendar.monthrange(2024, m)[1] for m in months)  # 2024: Feb 29 counts
    return days[0] <= longest


def _parse_field(
    part: str, name: str, low: int, high: int, implied: int, names: dict[str, int] | None, text: str
) -> tuple[tuple[int, ...], bool]:
    """Allowed values of one field, and whether it was written as a plain ``*`` / ``?``.

    ``high`` is the largest value that may be written, ``implied`` where ``*`` and ``a/n`` end.
    """

    def fail(rule: str) -> InvalidSchedule:
        shown = part if len(part) <= 40 else f"{part[:30]}..."
        return InvalidSchedule(name, f"{rule} in {shown!r}", text, accepted=ACCEPTED)

    def value(token: str) -> int:
        if names is not None and token.lower() in names:
            return names[token.lower()]
        if not token:
            raise fail("empty value")
        if not token.isdigit():
            raise fail(f"{token!r} is not a number" + (" or a name" if names else ""))
        if len(token) > 4:  # no field goes past 9999; int() of a huge text is slow or refused
            raise fail(f"{token[:8]}... is outside {low}-{high}")
        number = int(token)
        if not low <= number <= high:
            raise fail(f"{number} is outside {low}-{high}")
        return number

    allowed: set[int] = set()
    star = False
    for item in part.split(","):
        span, slash, step_text = item.partition("/")
        step = 1
        if slash:
            if not step_text.isdigit() or len(step_text) > 4 or int(step_text) == 0:
                raise fail(f"step {step_text[:10]!r} must be a positive number")
            step = int(step_text)
        if span in ("*", "?"):
            if span == "?" and name not in ("day_of_month", "day_of_week"):
                raise fail("'?' is only allowed in day_of_month and day_of_week")
            start, end = low, implied
            # A stepped star ('*/2') restricts the field, so it joins the either-day rule (robfig).
            star = star or (step == 1 and part == item)
        elif "-" in span:
            first, _, last = span.partition("-")
            start, end = value(first), value(last)
            if start > end:
                raise fail(f"range start {first!r} is after its end {last!r}")
        elif span:
            start = value(span)
            end = max(start, implied) if slash else start
        else:
            raise fail("empty value")
        allowed.update(range(start, end + 1, step))
    return tuple(sorted(allowed)), star


# --- time zones ------------------------------------------------------------------------------
# Instants are aware UTC datetimes; walls are naive local datetimes; offset(t) is the zone's UTC
# offset in force at instant t, so wall(t) = t + offset(t).


def _offset(tz: tzinfo, instant: datetime) -> timedelta:
    offset = instant.astimezone(tz).utcoffset()
    assert offset is not None
    return offset


def _wall(instant: datetime, offset: timedelta) -> datetime:
    return (instant + offset).replace(tzinfo=None)


def _instant(wall: datetime, offset: timedelta) -> datetime:
    return (wall - offset).replace(tzinfo=timezone.utc)


def _first_change(tz: tzinfo, before: datetime, after: datetime) -> datetime:
    """The first instant in ``(before, after]`` whose offset differs from ``before``'s (which
    ``after``'s does), to the microsecond."""
    base = _offset(tz, before)
    low, high = before, after
    while high - low > timedelta(microseconds=1):
        middle = low + (high - low) / 2
        if _offset(tz, middle) == base:
            low = middle
        else:
            high = middle
    return high


def _next_transition(tz: tzinfo, start: datetime, limit: datetime) -> datetime | None:
    """The first instant in ``(start, limit]`` where the UTC offset changes, or None."""
    base = _offset(tz, start)
    low = start
    while low < limit:
        high = min(low + _PROBE, limit)
        if _offset(tz, high) != base:
            return _first_change(tz, low, high)
        low = high
    return None


def _fresh_walls_from(cron: _Cron, tz: tzinfo, dt: datetime, offset: timedelta) -> datetime | None:
    """For an hour-pinned schedule inside the second pass of a repeated hour: the first wall
    time not yet seen (earlier walls already fired in the first pass); otherwise None."""
    if cron.every_hour:
        return None
    back = dt - _PROBE
    earlier = _offset(tz, back)
    if earlier <= offset:
        return None
    change = _first_change(tz, back, dt)
    fresh = _wall(change, earlier)
    return fresh if fresh > _wall(dt, offset) else None


def _next_in_zone(cron: _Cron, tz: tzinfo, dt: datetime) -> datetime:
    """Walk offset segments from ``dt``: in each, the next matching wall maps to one instant;
    crossing a transition applies the gap / repeated-hour rule of the module docstring."""
    offset = _offset(tz, dt)
    fresh = _fresh_walls_from(cron, tz, dt, offset)
    # Search strictly after this wall; a bound one microsecond early makes it inclusive.
    after = _wall(dt, offset) if fresh is None else fresh - timedelta(microseconds=1)
    start = dt
    while True:
        wall = cron.next_wall(after)
        candidate = _instant(wall, offset)
        change = _next_transition(tz, start, candidate)
        if change is None:
            return candidate
        new_offset = _offset(tz, change)
        if new_offset > offset:  # a gap: walls [change+offset, change+new_offset) never occur
            gap_end = _wall(change, new_offset)
            if not cron.every_hour and wall < gap_end:
                return change
            resume = gap_end
        else:  # a repeat: walls [change+new_offset, change+offset) come round again
            resume = _wall(change, new_offset if cron.every_hour else offset)
        after = resume - timedelta(microseconds=1)
        start, offset = change, new_offset
