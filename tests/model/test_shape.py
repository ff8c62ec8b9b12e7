"""Jitter, bounds, exclusions and next fire times as pure functions (issue 16 points 4, 5, 6)."""

from __future__ import annotations

from collections import Counter
from datetime import date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter

from cluster.model.errors import ValidationError
from cluster.model.jobs import ScheduledJob, Target, new_job_id
from cluster.model.schedules import Schedule
from cluster.model.shape import Bounds, allowed_from, jitter_offset_us, parse_exclusions
from cluster.model.wire import datetime_to_us, pack, unpack

NOW = datetime(2026, 3, 1, tzinfo=timezone.utc)
NEW_YORK = ZoneInfo("America/New_York")


def make(**kw: object) -> ScheduledJob:
    return ScheduledJob.create(Target.actor("h", namespace="test"), now=NOW, **kw)  # type: ignore[arg-type]


# -- jitter ------------------------------------------------------------------------------------

def test_jitter_offsets_stay_within_the_window_are_deterministic_and_spread_evenly() -> None:
    jitter_us = 500_000
    job_id = new_job_id()
    start = datetime_to_us(NOW)
    offsets = [jitter_offset_us(job_id, start + k * 1_000_000, jitter_us) for k in range(20_000)]
    assert all(0 <= o <= jitter_us for o in offsets)
    # The same job and occurrence give the same offset, on any silo, in any replay.
    assert offsets == [jitter_offset_us(job_id, start + k * 1_000_000, jitter_us) for k in range(20_000)]
    deciles = Counter(o * 10 // (jitter_us + 1) for o in offsets)
    assert sorted(deciles) == list(range(10))
    assert all(1_700 <= n <= 2_300 for n in deciles.values()), deciles  # uniform: 2,000 each, give or take
    # Another job draws other offsets for the same times.
    other = [jitter_offset_us(new_job_id(), start + k * 1_000_000, jitter_us) for k in range(100)]
    assert other != offsets[:100]


def test_no_jitter_means_no_offset() -> None:
    assert jitter_offset_us("x", 123, 0) == 0
    job = make(schedule="@every 1s")
    assert job.first_fire == job.due and job.fire_us(5) == 5


def test_next_fires_of_a_jittered_job_are_never_early_and_the_series_keeps_its_grid() -> None:
    job = make(schedule="@every 1s", due=NOW + timedelta(seconds=1), jitter="500ms")
    fires = job.next_fires(NOW, count=200)
    assert len(fires) == 200
    for k, fire in enumerate(fires, start=1):
        scheduled = NOW + timedelta(seconds=k)
        assert scheduled <= fire <= scheduled + timedelta(milliseconds=500)
    assert fires[0] == job.first_fire


def test_a_jittered_occurrence_still_ahead_counts_in_next_fires() -> None:
    job = make(schedule="@every 1m", due=NOW + timedelta(minutes=1), jitter="30s")
    first = job.first_fire
    just_after_scheduled = job.due + (first - job.due) / 2  # its scheduled time passed, its fire time has not
    assert job.next_fires(just_after_scheduled, count=1) == [first]


# -- exclusions --------------------------------------------------------------------------------

def _series(schedule: Schedule, start: datetime, end: datetime) -> list[datetime]:
    times, t = [], schedule.next_after(start)
    while t < end:
        times.append(t)
        t = schedule.next_after(t)
    return times


def _allowed_series(schedule: Schedule, start: datetime, end: datetime, bounds: Bounds) -> tuple[list[datetime], int]:
    times, excluded, t = [], 0, schedule.next_after(start)
    while True:
        shaped = allowed_from(schedule, t, bounds)
        excluded += shaped.excluded
        if shaped.scheduled is None or shaped.scheduled >= end:
            return times, excluded
        times.append(shaped.scheduled)
        t = schedule.next_after(shaped.scheduled)


@pytest.mark.parametrize(("schedule_text", "exclusion", "day"), [
    # Spring forward in New York, 2026-03-08: 02:00-03:00 does not exist.
    ("CRON_TZ=America/New_York 0 */15 * * * *", "* * 1-3 8 3 *", date(2026, 3, 8)),
    ("CRON_TZ=America/New_York 0 30 2 * * *", "0 0 3 8 3 *", date(2026, 3, 8)),  # 02:30 fires at 03:00 that day
    # Fall back, 2026-11-01: 01:00-02:00 happens twice; both passes match the wall-clock exclusion.
    ("CRON_TZ=America/New_York 0 */10 * * * *", "* * 1 1 11 *", date(2026, 11, 1)),
    ("CRON_TZ=America/New_York 0 0 9 * * *", "0 0 9 * * Sun", date(2026, 11, 1)),
])
def test_a_cron_exclusion_on_a_dst_day_skips_exactly_what_croniter_says_it_matches(
        schedule_text: str, exclusion: str, day: date) -> None:
    schedule = Schedule.parse(schedule_text)
    start = datetime(day.year, day.month, day.day, tzinfo=timezone.utc) - timedelta(days=1)
    end = start + timedelta(days=3)
    every = _series(schedule, start, end)
    # The oracle: croniter's reading of the exclusion, on each occurrence's New York wall time.
    expected = [t for t in every if not croniter.match(exclusion, t.astimezone(NEW_YORK).replace(tzinfo=None),
                                                       second_at_beginning=True)]
    assert len(expected) < len(every)  # the exclusion does match something on that day
    kept, excluded = _allowed_series(schedule, start, end, Bounds(exclude=parse_exclusions(exclusion)))
    assert kept == expected
    assert excluded == len(every) - len(expected)


def test_a_date_exclusion_skips_the_local_dst_day_in_the_schedules_zone() -> None:
    schedule = Schedule.parse("CRON_TZ=America/New_York 0 0 * * * *")  # hourly: 23 hours on 2026-03-08
    start, end = datetime(2026, 3, 7, tzinfo=timezone.utc), datetime(2026, 3, 10, tzinfo=timezone.utc)
    every = _series(schedule, start, end)
    on_day = [t for t in every if t.astimezone(NEW_YORK).date() == date(2026, 3, 8)]
    assert len(on_day) == 23
    kept, excluded = _allowed_series(schedule, start, end, Bounds(exclude=parse_exclusions(["2026-03-08"])))
    assert kept == [t for t in every if t not in on_day]
    assert excluded == 23
    # UTC would have cut the day four or five hours off: the zone is the schedule's.
    assert min(kept, key=lambda t: abs(t - on_day[-1]) if t > on_day[-1] else timedelta.max) \
        == datetime(2026, 3, 9, 4, tzinfo=timezone.utc)


def test_an_exclusion_cron_keeps_its_own_zone_and_a_date_is_a_date_object_too() -> None:
    schedule = Schedule.parse("0 0 12 * * *")  # noon UTC
    tokyo_sunday = parse_exclusions("CRON_TZ=Asia/Tokyo * * * * * Sun")  # noon UTC is 21:00 in Tokyo
    sunday_noon = datetime(2026, 3, 8, 12, tzinfo=timezone.utc)
    assert allowed_from(schedule, sunday_noon, Bounds(exclude=tokyo_sunday)).scheduled == sunday_noon + timedelta(days=1)
    assert allowed_from(schedule, sunday_noon, Bounds(exclude=parse_exclusions(date(2026, 3, 8)))).excluded == 1


def test_a_long_excluded_stretch_of_an_every_schedule_is_jumped_and_counted_exactly() -> None:
    schedule = Schedule.parse("@every 1s")
    start = datetime(2026, 3, 7, 23, 59, 59, tzinfo=timezone.utc)
    shaped = allowed_from(schedule, start + timedelta(seconds=1), Bounds(exclude=parse_exclusions(["2026-03-08"])))
    assert shaped.scheduled == datetime(2026, 3, 9, tzinfo=timezone.utc)
    assert shaped.excluded == 86_400


def test_an_exclusion_that_matches_everything_ends_the_series_and_is_refused_at_create() -> None:
    assert allowed_from(Schedule.parse("0 0 12 * * *"), NOW, Bounds(exclude=parse_exclusions("* * * * * *"))).scheduled \
        is None
    with pytest.raises(ValidationError) as caught:
        make(schedule="0 0 9 * * Sat", exclude="* * * * * Sat")
    assert caught.value.field == "exclude"


# -- bounds ------------------------------------------------------------------------------------

def test_bounds_are_inclusive_and_move_the_first_occurrence() -> None:
    job = make(schedule="0 0 * * * *", not_before=NOW + timedelta(hours=5), not_after=NOW + timedelta(hours=7))
    assert job.due == NOW + timedelta(hours=5)
    assert job.next_fires(NOW, count=10) == [NOW + timedelta(hours=h) for h in (5, 6, 7)]
    shaped = allowed_from(job.schedule, NOW + timedelta(hours=8), job.bounds)
    assert shaped.scheduled is None and shaped.past_end


def test_next_fires_honour_pause_repeats_and_ttl() -> None:
    job = make(schedule="@every 1h", due=NOW + timedelta(hours=1), repeats=4, ttl=NOW + timedelta(hours=30))
    assert job.next_fires(NOW, paused=True) == []
    assert len(job.next_fires(NOW, count=10)) == 4
    assert job.next_fires(NOW, pending=4) == [NOW + timedelta(hours=1)]  # only the fourth is left
    assert make(schedule="@every 1h", due=NOW + timedelta(hours=1), ttl=NOW + timedelta(hours=2, minutes=1)) \
        .next_fires(NOW, count=10) == [NOW + timedelta(hours=1), NOW + timedelta(hours=2)]
    one_shot = make(due=NOW + timedelta(hours=1), jitter="10m")
    assert one_shot.next_fires(NOW) == [one_shot.first_fire]


# -- validation ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("kw", "field"), [
    ({"jitter": "-1s"}, "jitter"),
    ({"jitter": "soon"}, "jitter"),
    ({"jitter": 5}, "jitter"),
    ({"jitter": timedelta(days=400)}, "jitter"),
    ({"not_before": "yesterday-ish"}, "not_before"),
    ({"not_before": datetime(2026, 3, 2)}, "not_before"),  # naive
    ({"not_after": "2026-13-01T00:00:00Z"}, "not_after"),
    ({"not_before": NOW + timedelta(days=2), "not_after": NOW + timedelta(days=1)}, "not_after"),
    ({"not_after": NOW - timedelta(days=1)}, "not_after"),  # no occurrence left
    ({"exclude": "@every 1h"}, "exclude"),
    ({"exclude": ["0 0 9 * * *", "61 * * * * *"]}, "exclude[1]"),
    ({"exclude": ["2026-02-30"]}, "exclude[0]"),
    ({"exclude": [datetime(2026, 3, 8, tzinfo=timezone.utc)]}, "exclude[0]"),
    ({"exclude": 42}, "exclude"),
    ({"exclude": [42]}, "exclude[0]"),
    ({"exclude": "CRON_TZ=Mars/Olympus * * * * * *"}, "exclude"),
    ({"exclude": [date(2026, 1, 1) + timedelta(days=i) for i in range(1001)]}, "exclude"),
])
def test_bad_values_raise_a_validation_error_naming_the_field(kw: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        make(schedule="@every 1h", **kw)
    assert caught.value.field == field
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize("option", ["not_before", "not_after", "exclude"])
def test_bounds_and_exclusions_need_a_schedule(option: str) -> None:
    value = "2026-03-08" if option == "exclude" else NOW + timedelta(hours=2)
    with pytest.raises(ValidationError) as caught:
        make(due=NOW + timedelta(hours=1), **{option: value})
    assert caught.value.field == option


def test_ttl_counts_against_the_jittered_first_fire() -> None:
    job = make(schedule="@every 1h", due=NOW + timedelta(hours=1), jitter="30m", ttl=NOW + timedelta(hours=5))
    assert job.ttl is not None and job.ttl > job.first_fire


# -- wire --------------------------------------------------------------------------------------

def test_a_job_without_options_packs_to_fourteen_elements_as_before() -> None:
    job = make(schedule="@every 1h")
    record = job.to_wire()
    assert len(record) == 14
    assert ScheduledJob.from_wire(unpack(pack(record))) == job


def test_options_travel_in_the_fifteenth_element_only_when_set_and_read_back_equal() -> None:
    job = make(schedule="CRON_TZ=Europe/Berlin 0 0 9 * * Mon-Fri", jitter="2m", not_before=NOW + timedelta(days=1),
               not_after=NOW + timedelta(days=300), exclude=["2026-12-24", date(2026, 12, 25), "0 0 9 * * Fri"])
    record = unpack(pack(job.to_wire()))
    assert len(record) == 15 and set(record[14]) == {"jitter_us", "not_before_us", "not_after_us", "exclude"}
    back = ScheduledJob.from_wire(record)
    assert back == job
    assert back.next_fires(NOW, count=20) == job.next_fires(NOW, count=20)
    head = ScheduledJob.head_from_wire(record, {})
    assert head.recurring and head.target == job.target
    only_jitter = make(schedule="@every 1h", jitter="1s").to_wire()
    assert only_jitter[14] == {"jitter_us": 1_000_000}


@pytest.mark.parametrize("options", ["x", {"jitter_us": "1s"}, {"not_before_us": 10**30}, {"exclude": [[1]]}])
def test_a_malformed_fifteenth_element_is_refused_by_from_wire_and_head_alike(options: object) -> None:
    record = [*make(schedule="@every 1h").to_wire(), options]
    with pytest.raises(Exception) as full:
        ScheduledJob.from_wire(record)
    with pytest.raises(Exception) as head:
        ScheduledJob.head_from_wire(record, {})
    assert type(full.value) is type(head.value)
