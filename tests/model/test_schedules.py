from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from itertools import pairwise
from zoneinfo import ZoneInfo

import msgpack
import pytest
from croniter import croniter
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from cluster.model.errors import InvalidSchedule, InvalidTime
from cluster.model.schedules import Schedule

UTC = timezone.utc
NEW_YORK = "America/New_York"
BERLIN = "Europe/Berlin"


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def fires(text: str, start: datetime, count: int) -> list[datetime]:
    schedule = Schedule.parse(text)
    out = []
    for _ in range(count):
        start = schedule.next_after(start)
        out.append(start)
    return out


def fires_until(text: str, start: datetime, end: datetime) -> list[datetime]:
    schedule = Schedule.parse(text)
    out = []
    while (start := schedule.next_after(start)) <= end:
        out.append(start)
    return out


# --- parsing ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "start", "expected"),
    [
        ("0 30 * * * *", utc(2026, 1, 1, 10, 30), [utc(2026, 1, 1, 11, 30), utc(2026, 1, 1, 12, 30)]),
        ("*/20 * * * * *", utc(2026, 1, 1, 10, 0, 5), [utc(2026, 1, 1, 10, 0, 20), utc(2026, 1, 1, 10, 0, 40)]),
        ("15/20 * * * * *", utc(2026, 1, 1, 10, 0, 5), [utc(2026, 1, 1, 10, 0, 15), utc(2026, 1, 1, 10, 0, 35)]),
        ("0 0 9-17/4 * * *", utc(2026, 1, 1, 10), [utc(2026, 1, 1, 13), utc(2026, 1, 1, 17)]),
        ("0 0,30 8 * * *", utc(2026, 1, 1, 8, 10), [utc(2026, 1, 1, 8, 30), utc(2026, 1, 2, 8, 0)]),
        # 2026-01-01 is a Thursday.
        ("0 0 9 * * Mon-Fri", utc(2026, 1, 2, 10), [utc(2026, 1, 5, 9), utc(2026, 1, 6, 9)]),
        ("0 0 9 ? * SAT,sun", utc(2026, 1, 1), [utc(2026, 1, 3, 9), utc(2026, 1, 4, 9)]),
        ("0 0 0 * * 7", utc(2026, 1, 1), [utc(2026, 1, 4), utc(2026, 1, 11)]),
        ("0 0 0 1 Feb-Mar ?", utc(2026, 1, 1), [utc(2026, 2, 1), utc(2026, 3, 1)]),
        ("0 0 0 29 2 *", utc(2026, 1, 1), [utc(2028, 2, 29), utc(2032, 2, 29)]),
        ("0 0 0 31 * *", utc(2026, 1, 31), [utc(2026, 3, 31), utc(2026, 5, 31)]),
        # Both day fields restricted: either one matching fires (cron's rule).
        ("0 0 0 1,15 * Sun", utc(2026, 1, 1), [utc(2026, 1, 4), utc(2026, 1, 11), utc(2026, 1, 15), utc(2026, 1, 18)]),
        ("0 0 0 1-31 * Mon", utc(2026, 1, 1), [utc(2026, 1, 2), utc(2026, 1, 3)]),
        ("@hourly", utc(2026, 1, 1, 0, 0, 1), [utc(2026, 1, 1, 1), utc(2026, 1, 1, 2)]),
        ("@daily", utc(2026, 1, 1), [utc(2026, 1, 2), utc(2026, 1, 3)]),
        ("@midnight", utc(2026, 1, 1), [utc(2026, 1, 2), utc(2026, 1, 3)]),
        ("@weekly", utc(2026, 1, 1), [utc(2026, 1, 4), utc(2026, 1, 11)]),
        ("@monthly", utc(2026, 1, 1), [utc(2026, 2, 1), utc(2026, 3, 1)]),
        ("@yearly", utc(2026, 1, 1), [utc(2027, 1, 1), utc(2028, 1, 1)]),
        ("@annually", utc(2026, 6, 1), [utc(2027, 1, 1), utc(2028, 1, 1)]),
        ("@every 1h30m", utc(2026, 1, 1, 0, 0, 0, 7), [utc(2026, 1, 1, 1, 30, 0, 7), utc(2026, 1, 1, 3, 0, 0, 7)]),
        ("@every 250ms", utc(2026, 1, 1), [utc(2026, 1, 1, 0, 0, 0, 250_000), utc(2026, 1, 1, 0, 0, 0, 500_000)]),
        ("@every PT3S", utc(2026, 1, 1), [utc(2026, 1, 1, 0, 0, 3), utc(2026, 1, 1, 0, 0, 6)]),
        ("CRON_TZ=Asia/Tokyo 0 0 9 * * *", utc(2026, 1, 1), [utc(2026, 1, 2, 0), utc(2026, 1, 3, 0)]),
        ("TZ=Asia/Kolkata @daily", utc(2026, 1, 1), [utc(2026, 1, 1, 18, 30), utc(2026, 1, 2, 18, 30)]),
        ("  0   0  12 *  * *  ", utc(2026, 1, 1), [utc(2026, 1, 1, 12), utc(2026, 1, 2, 12)]),
    ],
)
def test_fire_times(text: str, start: datetime, expected: list[datetime]) -> None:
    assert fires(text, start, len(expected)) == expected


def test_next_after_is_strictly_after_a_matching_instant() -> None:
    schedule = Schedule.parse("0 0 12 * * *")
    assert schedule.next_after(utc(2026, 1, 1, 12)) == utc(2026, 1, 2, 12)
    assert schedule.next_after(utc(2026, 1, 1, 11, 59, 59, 999_999)) == utc(2026, 1, 1, 12)
    assert schedule.next_after(utc(2026, 1, 1, 12, 0, 0, 1)) == utc(2026, 1, 2, 12)


def test_next_after_takes_any_aware_datetime_and_returns_utc() -> None:
    result = Schedule.parse("0 0 12 * * *").next_after(datetime(2026, 1, 1, 12, 59, tzinfo=ZoneInfo(BERLIN)))
    assert result == utc(2026, 1, 1, 12)
    assert result.tzinfo is UTC


@pytest.mark.parametrize("text", ["0 0 12 * * *", "@every 1s"])
def test_naive_datetime_is_rejected(text: str) -> None:
    with pytest.raises(InvalidTime, match="aware"):
        Schedule.parse(text).next_after(datetime(2026, 1, 1))


@pytest.mark.parametrize(
    "text",
    ["0 30 * * * *", "CRON_TZ=Europe/Berlin 0 0 9 * * Mon-Fri", "@every 1h30m", "@daily", "0   0 0 ? * 1"],
)
def test_the_text_alone_rebuilds_an_equal_schedule(text: str) -> None:
    schedule = Schedule.parse(text)
    stored = msgpack.unpackb(msgpack.packb(schedule.text))
    assert Schedule.parse(stored) == schedule
    assert hash(Schedule.parse(stored)) == hash(schedule)


def test_kinds_and_period() -> None:
    every = Schedule.parse("@every 90s")
    assert every.period == timedelta(seconds=90) and not every.is_cron
    cron = Schedule.parse("CRON_TZ=Europe/Berlin @hourly")
    assert cron.period is None and cron.is_cron and cron.zone == BERLIN
    assert Schedule.parse("@hourly").zone is None


def test_every_constructor() -> None:
    schedule = Schedule.every(timedelta(minutes=90))
    assert schedule.text == "@every 1h30m"
    assert schedule == Schedule.parse("@every 1h30m")
    assert Schedule.every("500ms").period == timedelta(milliseconds=500)
    with pytest.raises(InvalidSchedule):
        Schedule.every(timedelta(0))


def test_every_is_virtual_time_anchored_to_the_previous_time() -> None:
    schedule = Schedule.parse("@every 10s")
    anchor = utc(2026, 1, 1, 12, 0, 0, 123)
    assert schedule.next_after(anchor) == anchor + timedelta(seconds=10)


@pytest.mark.parametrize(
    ("text", "field", "rule_part"),
    [
        ("0 0 * * *", "schedule", "expected 6 fields (sec min hour dom mon dow), got 5"),
        ("0 0 0 * * * *", "schedule", "got 7"),
        ("", "schedule", "got 0"),
        ("@fortnightly", "schedule", "unknown macro"),
        ("@every", "schedule", "needs a duration"),
        ("@every 0s", "schedule", "greater than zero"),
        ("@every -5s", "schedule", "negative"),
        ("@every soon", "schedule", "valid duration"),
        ("60 * * * * *", "second", "60 is outside 0-59"),
        ("0 -1 * * * *", "minute", "empty value"),
        ("0 0 24 * * *", "hour", "24 is outside 0-23"),
        ("0 0 ? * * *", "hour", "'?' is only allowed"),
        ("0 0 0 0 * *", "day_of_month", "0 is outside 1-31"),
        ("0 0 0 30 2 *", "day_of_month", "never matches"),
        ("0 0 0 31 4,6,9,11 ?", "day_of_month", "never matches"),
        ("0 0 0 L * *", "day_of_month", "not a number"),
        ("0 0 0 * 13 *", "month", "13 is outside 1-12"),
        ("0 0 0 * Jab *", "month", "'Jab' is not a number or a name"),
        ("0 0 0 * * 8", "day_of_week", "8 is outside 0-7"),
        ("0 0 0 * * Mon#2", "day_of_week", "not a number"),
        ("0 0 0 * * Fri-Mon", "day_of_week", "after its end"),
        ("*/0 * * * * *", "second", "step '0'"),
        ("1,,2 * * * * *", "second", "empty value"),
        ("0 5/x * * * *", "minute", "step 'x'"),
        ("CRON_TZ=Mars/Olympus 0 0 0 * * *", "CRON_TZ", "unknown IANA time zone 'Mars/Olympus'"),
        ("CRON_TZ=America 0 0 0 * * *", "CRON_TZ", "unknown IANA time zone"),
        ("CRON_TZ=../../etc/passwd 0 0 0 * * *", "CRON_TZ", "unknown IANA time zone"),
    ],
)
def test_invalid_text_names_the_field(text: str, field: str, rule_part: str) -> None:
    with pytest.raises(InvalidSchedule) as caught:
        Schedule.parse(text)
    error = caught.value
    assert isinstance(error, ValueError)
    assert error.field == field
    assert rule_part in error.rule
    assert repr(text) in str(error)
    assert "@every" in str(error)  # the accepted forms


def test_non_text_is_rejected() -> None:
    with pytest.raises(InvalidSchedule):
        Schedule.parse(5)  # type: ignore[arg-type]


# --- daylight saving time --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("zone", "day", "expected_utc"),
    [
        # New York jumps 02:00 EST -> 03:00 EDT: the skipped 02:30 fires at 03:00 EDT.
        (NEW_YORK, (2026, 3, 8), [utc(2026, 3, 7, 7, 30), utc(2026, 3, 8, 7, 0), utc(2026, 3, 9, 6, 30)]),
        # Berlin jumps 02:00 CET -> 03:00 CEST.
        (BERLIN, (2026, 3, 29), [utc(2026, 3, 28, 1, 30), utc(2026, 3, 29, 1, 0), utc(2026, 3, 30, 0, 30)]),
    ],
)
def test_a_wall_time_in_the_spring_gap_fires_right_after_the_gap(
    zone: str, day: tuple[int, int, int], expected_utc: list[datetime]
) -> None:
    start = datetime(*day, tzinfo=UTC) - timedelta(days=1)
    assert fires(f"CRON_TZ={zone} 0 30 2 * * *", start, 3) == expected_utc


@pytest.mark.parametrize(
    ("text", "start", "expected_utc"),
    [
        # New York repeats 01:00-01:59 (EDT, then EST) on 2026-11-01: 01:30 fires once, in EDT.
        (f"CRON_TZ={NEW_YORK} 0 30 1 * * *", utc(2026, 10, 31), [utc(2026, 10, 31, 5, 30), utc(2026, 11, 1, 5, 30),
                                                                  utc(2026, 11, 2, 6, 30)]),
        # Berlin repeats 02:00-02:59 (CEST, then CET) on 2026-10-25.
        (f"CRON_TZ={BERLIN} 0 30 2 * * *", utc(2026, 10, 24), [utc(2026, 10, 24, 0, 30), utc(2026, 10, 25, 0, 30),
                                                                utc(2026, 10, 26, 1, 30)]),
        # A yearly job on the repeated hour, searched from months away, still fires the first pass.
        (f"CRON_TZ={BERLIN} 0 30 2 25 10 *", utc(2026, 1, 1), [utc(2026, 10, 25, 0, 30), utc(2027, 10, 25, 0, 30)]),
    ],
)
def test_a_repeated_wall_time_fires_once(text: str, start: datetime, expected_utc: list[datetime]) -> None:
    assert fires(text, start, len(expected_utc)) == expected_utc


def test_asked_during_the_second_pass_a_pinned_job_waits_for_the_next_day() -> None:
    # 06:10Z is 01:10 EST, the second pass: 01:30 already fired at 05:30Z (EDT).
    assert Schedule.parse(f"CRON_TZ={NEW_YORK} 0 30 1 * * *").next_after(utc(2026, 11, 1, 6, 10)) == utc(
        2026, 11, 2, 6, 30
    )


@pytest.mark.parametrize(
    ("zone", "transition"),
    [
        (NEW_YORK, utc(2026, 3, 8, 7)),
        (NEW_YORK, utc(2026, 11, 1, 6)),
        (BERLIN, utc(2026, 3, 29, 1)),
        (BERLIN, utc(2026, 10, 25, 1)),
    ],
)
@pytest.mark.parametrize("minute", [0, 30])
def test_hourly_jobs_fire_every_real_hour_across_transitions(zone: str, transition: datetime, minute: int) -> None:
    second = timedelta(seconds=1)
    start = transition - timedelta(hours=5)
    times = fires_until(f"CRON_TZ={zone} 0 {minute} * * * *", start - second, transition + timedelta(hours=5) - second)
    assert times[0] == start + timedelta(minutes=minute)
    assert all(b - a == timedelta(hours=1) for a, b in pairwise(times))
    assert len(times) == 10


def test_every_minute_through_the_gap_resumes_after_it() -> None:
    times = fires_until(f"CRON_TZ={NEW_YORK} 0 * * * * *", utc(2026, 3, 8, 6, 58), utc(2026, 3, 8, 7, 2))
    assert times == [utc(2026, 3, 8, 6, 59), utc(2026, 3, 8, 7, 0), utc(2026, 3, 8, 7, 1), utc(2026, 3, 8, 7, 2)]


def test_pinned_hours_that_collide_after_a_gap_fire_once() -> None:
    # 02:00 does not exist and 03:00 is the first instant after the gap: one fire, not two.
    times = fires_until(f"CRON_TZ={NEW_YORK} 0 0 2,3 * * *", utc(2026, 3, 8), utc(2026, 3, 8, 12))
    assert times == [utc(2026, 3, 8, 7)]


def test_half_hour_dst_zone() -> None:
    # Lord Howe moves 30 minutes: 02:00 -> 02:30 on 2026-10-04, and 02:00 -> 01:30 on 2026-04-05.
    spring = fires("CRON_TZ=Australia/Lord_Howe 0 15 2 * * *", utc(2026, 10, 2), 3)
    assert [t.astimezone(ZoneInfo("Australia/Lord_Howe")).strftime("%d %H:%M") for t in spring] == [
        "03 02:15", "04 02:30", "05 02:15"
    ]


# --- properties ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cron:
    """A generated cron expression and, independently of the code under test, what it allows."""

    text: str
    fields: tuple[frozenset[int], ...]  # sec, min, hour, dom, month, dow (0 = Sunday)
    dom_star: bool
    dow_star: bool

    def matches(self, wall: datetime) -> bool:
        sec, minute, hour, dom, month, dow = self.fields
        in_month, in_week = wall.day in dom, wall.isoweekday() % 7 in dow
        day = in_month and in_week if (self.dom_star or self.dow_star) else in_month or in_week
        return wall.second in sec and wall.minute in minute and wall.hour in hour and wall.month in month and day

    @property
    def every_hour(self) -> bool:
        return len(self.fields[2]) == 24


MONTH_NAMES = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
DAY_NAMES = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]


@st.composite
def field_text(draw: st.DrawFn, low: int, high: int, star_ok: bool = True, names: list[str] | None = None) -> tuple[str, frozenset[int], bool]:
    def spell(v: int) -> str:
        if names is not None and draw(st.booleans()):
            return names[(v - low) % len(names)]
        return str(v)

    kinds = ["value", "range", "step", "start_step", "list"] + (["star"] if star_ok else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "star":
        return "*", frozenset(range(low, high + 1)), True
    if kind == "step":
        step = draw(st.integers(2, max(2, (high - low) // 2)))
        return f"*/{step}", frozenset(range(low, high + 1, step)), False
    if kind == "start_step":  # 'a/n' runs from a to the field's end (6, Saturday, for day of week)
        a = draw(st.integers(low, high))
        step = draw(st.integers(1, 5))
        return f"{spell(a)}/{step}", frozenset(range(a, high + 1, step)), False
    if kind == "range":
        # a-a is left out: croniter (the oracle) misreads it ('0-0' hours gives 01:00).
        a = draw(st.integers(low, high - 1))
        b = draw(st.integers(a + 1, high))
        step = draw(st.integers(1, 5))
        suffix = f"/{step}" if step > 1 else ""
        return f"{spell(a)}-{spell(b)}{suffix}", frozenset(range(a, b + 1, step)), False
    values = draw(st.lists(st.integers(low, high), min_size=1, max_size=1 if kind == "value" else 4, unique=True))
    return ",".join(spell(v) for v in values), frozenset(values), False


@st.composite
def crons(draw: st.DrawFn, dense_seconds: bool = True) -> Cron:
    sec = draw(field_text(0, 59, star_ok=dense_seconds)) if dense_seconds else draw(
        st.integers(0, 59).map(lambda v: (str(v), frozenset([v]), False))
    )
    minute = draw(field_text(0, 59))
    hour = draw(field_text(0, 23))
    dom = draw(field_text(1, 31))
    month = draw(field_text(1, 12, names=MONTH_NAMES))
    dow = draw(field_text(0, 6, names=DAY_NAMES))
    # Not a day field that covers every value without being '*' ('1/1', '0-6'): croniter (the
    # oracle) reads it as '*' when the other day field is written with a '*', which robfig
    # (Dapr's parser) and timeshard do not: '0 0 0 1/1 * */2' fires every day in both.
    assume(all(star or len(values) < high - low + 1
               for (_, values, star), (low, high) in ((dom, (1, 31)), (dow, (0, 6)))))
    parts = [sec, minute, hour, dom, month, dow]
    text = " ".join(p[0] for p in parts)
    return Cron(text, tuple(p[1] for p in parts), dom[2], dow[2])


def parse_or_reject(cron: Cron, prefix: str = "") -> Schedule:
    try:
        return Schedule.parse(prefix + cron.text)
    except InvalidSchedule as exc:
        # Only an impossible day (like Feb 30) may be refused; check that it really is.
        assert exc.field == "day_of_month" and "never" in exc.rule
        days, months = cron.fields[3], cron.fields[4]
        assert cron.dow_star and not any(d <= calendar.monthrange(2024, m)[1] for m in months for d in days)
        assume(False)
        raise


instants = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2090, 1, 1)).map(
    lambda d: d.replace(tzinfo=UTC)
)


@pytest.mark.parametrize("dow, days", [
    ("6/1", {"Sat"}),  # 7 is Sunday only where it is written: a step stops at Saturday
    ("Mon/2", {"Mon", "Wed", "Fri"}),
    ("Sat/3", {"Sat"}),
    ("4/2,Sun", {"Thu", "Sat", "Sun"}),
    ("5-7", {"Fri", "Sat", "Sun"}),  # written: 7 is Sunday
    ("*/3", {"Sun", "Wed", "Sat"}),
])
def test_day_of_week_steps_agree_with_croniter(dow: str, days: set[str]) -> None:
    text = f"0 0 0 * * {dow}"
    schedule = Schedule.parse(text)
    oracle = croniter(text, datetime(2026, 11, 1), second_at_beginning=True)
    t = datetime(2026, 11, 1, tzinfo=UTC)
    seen = set()
    for _ in range(21):
        t = schedule.next_after(t)
        assert t == oracle.get_next(datetime).replace(tzinfo=UTC)
        seen.add(t.strftime("%a"))
    assert seen == days


@settings(max_examples=300, deadline=None)
@given(crons(), instants)
def test_utc_cron_agrees_with_croniter(cron: Cron, start: datetime) -> None:
    schedule = parse_or_reject(cron)
    result = schedule.next_after(start)
    expected = croniter(cron.text, start.replace(tzinfo=None), second_at_beginning=True).get_next(datetime)
    assert result == expected.replace(tzinfo=UTC)
    assert result > start
    assert cron.matches(result.replace(tzinfo=None))


def _transitions(zone: str, year: int) -> list[datetime]:
    tz = ZoneInfo(zone)
    out = []
    t = datetime(year, 1, 1, tzinfo=UTC)
    while t.year == year:
        step = t + timedelta(minutes=30)
        if t.astimezone(tz).utcoffset() != step.astimezone(tz).utcoffset():
            out.append(step)
        t = step
    return out


ZONES = [NEW_YORK, BERLIN, "Australia/Lord_Howe"]
TRANSITIONS = [(zone, t) for zone in ZONES for year in (2026, 2027) for t in _transitions(zone, year)]
near_transitions = st.tuples(
    st.sampled_from(TRANSITIONS), st.integers(-30 * 3600, 30 * 3600), st.integers(0, 999_999)
).map(lambda x: (x[0][0], x[0][1] + timedelta(seconds=x[1], microseconds=x[2])))
anywhere = st.tuples(st.sampled_from(ZONES), instants)


def _resolutions(tz: ZoneInfo, wall: datetime, every_hour: bool) -> list[datetime]:
    """Oracle, by definition: the instants a matching wall time fires at, found by trying both
    folds, with the module's rule for gaps (first existing minute after) and repeats."""
    found = sorted(
        {
            instant
            for fold in (0, 1)
            if (instant := wall.replace(tzinfo=tz, fold=fold).astimezone(UTC)).astimezone(tz).replace(tzinfo=None)
            == wall
        }
    )
    if found:
        return found if every_hour else found[:1]
    if every_hour:
        return []
    after = wall.replace(second=0) + timedelta(minutes=1)
    while (after.replace(tzinfo=tz).astimezone(UTC).astimezone(tz).replace(tzinfo=None)) != after:
        after += timedelta(minutes=1)
    return [after.replace(tzinfo=tz).astimezone(UTC)]


@settings(max_examples=250, deadline=None)
@given(crons(dense_seconds=False), st.one_of(near_transitions, anywhere), st.floats(0, 1))
def test_zoned_cron_matches_the_wall_clock_and_skips_nothing(cron: Cron, where: tuple[str, datetime], fraction: float) -> None:
    zone, start = where
    tz = ZoneInfo(zone)
    schedule = parse_or_reject(cron, f"CRON_TZ={zone} ")
    result = schedule.next_after(start)
    assert result > start and result.tzinfo is UTC

    # Every fire time between (start, result] by the oracle: only result itself.
    naive = parse_or_reject(cron)  # the same fields in UTC, used only to list matching walls
    wall = start.astimezone(tz).replace(tzinfo=None) - timedelta(hours=4)
    last_wall = result.astimezone(tz).replace(tzinfo=None) + timedelta(hours=4)
    oracle = []
    while (wall := naive.next_after(wall.replace(tzinfo=UTC)).replace(tzinfo=None)) <= last_wall:
        assert cron.matches(wall)
        oracle.extend(t for t in _resolutions(tz, wall, cron.every_hour) if t > start)
    assert min(oracle) == result

    # Asked again from anywhere in [start, result), the answer is the same: nothing skipped.
    middle = start + (result - start) * fraction
    if middle < result:
        assert schedule.next_after(middle) == result


@settings(max_examples=100, deadline=None)
@given(st.timedeltas(min_value=timedelta(microseconds=1), max_value=timedelta(days=400)), instants)
def test_every_adds_exactly_its_period(period: timedelta, start: datetime) -> None:
    schedule = Schedule.every(period)
    assert schedule.period == period
    assert Schedule.parse(schedule.text) == schedule
    assert schedule.next_after(start) == start + period


def test_constructing_from_text_parses_it() -> None:
    assert Schedule("CRON_TZ=Europe/Berlin @daily") == Schedule.parse("CRON_TZ=Europe/Berlin @daily")
    with pytest.raises(InvalidSchedule):
        Schedule("every day")
