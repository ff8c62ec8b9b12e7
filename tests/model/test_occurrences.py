from __future__ import annotations

from datetime import datetime, timedelta, timezone
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.model.errors import InvalidPolicy, InvalidTime
from cluster.model.occurrences import FIRE_ALL_LIMIT, CatchUp, Misfire, catch_up, first_occurrence, next_occurrence
from cluster.model.schedules import Schedule
from cluster.model.times import parse_period, parse_time

UTC = timezone.utc
NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
EVERY_10S = Schedule.parse("@every 10s")
HOURLY = Schedule.parse("@hourly")
s = timedelta(seconds=1)


def sequence(due: datetime, schedule: Schedule | None, repeats: int | None, ttl: datetime | None) -> list[datetime]:
    """Every fire time of a job whose fires all succeed, as a silo would walk them."""
    times, current = [], due
    while current is not None and len(times) < 2000:
        times.append(current)
        current = next_occurrence(schedule, current, len(times), repeats, ttl)
    return times


# --- first and next occurrence ---------------------------------------------------------------


def test_first_occurrence_prefers_due_then_schedule_then_now() -> None:
    due = NOW + timedelta(hours=2)
    assert first_occurrence(due, HOURLY, NOW) == due
    assert first_occurrence(None, HOURLY, NOW + 5 * s) == NOW + timedelta(hours=1)
    assert first_occurrence(None, EVERY_10S, NOW) == NOW + 10 * s
    assert first_occurrence(None, None, NOW) == NOW


def test_first_occurrence_rejects_naive_times() -> None:
    with pytest.raises(InvalidTime):
        first_occurrence(datetime(2026, 1, 1), None, NOW)
    with pytest.raises(InvalidTime):
        first_occurrence(None, None, datetime(2026, 1, 1))


def test_actor_reminder_r4_pt3s_fires_four_times_three_seconds_apart() -> None:
    period, repeats = parse_period("R4/PT3S")
    due = parse_time("10s", NOW)
    assert sequence(due, Schedule.every(period), repeats, None) == [NOW + k * s for k in (10, 13, 16, 19)]


def test_dapr_example_every_10s_repeats_4_ttl_10s_stops_at_the_ttl() -> None:
    # {"schedule": "@every 10s", "dueTime": "10s", "repeats": 4, "ttl": "10s"}: ttl wins.
    due, ttl = parse_time("10s", NOW), parse_time("10s", NOW, field="ttl")
    assert sequence(due, EVERY_10S, 4, ttl) == [NOW + 10 * s]


def test_ttl_is_inclusive() -> None:
    assert sequence(NOW, EVERY_10S, None, NOW + 30 * s) == [NOW, NOW + 10 * s, NOW + 20 * s, NOW + 30 * s]
    assert sequence(NOW, EVERY_10S, None, NOW + 29 * s) == [NOW, NOW + 10 * s, NOW + 20 * s]


def test_next_time_comes_from_the_scheduled_time_not_from_when_it_ran() -> None:
    # However late the previous fire ran, the grid does not move.
    assert next_occurrence(EVERY_10S, NOW, 1, None, None) == NOW + 10 * s
    assert next_occurrence(HOURLY, NOW, 1, None, None) == NOW + timedelta(hours=1)


def test_no_schedule_or_repeats_reached_means_no_next() -> None:
    assert next_occurrence(None, NOW, 1, None, None) is None
    assert next_occurrence(EVERY_10S, NOW, 3, 3, None) is None
    assert next_occurrence(EVERY_10S, NOW, 2, 3, None) == NOW + 10 * s


@settings(max_examples=100, deadline=None)
@given(
    st.sampled_from(["@every 7s", "@every 1h", "*/15 * * * * *", "CRON_TZ=Europe/Berlin 0 0 */3 * * *"]),
    st.integers(1, 20),
    st.integers(0, 3600),
)
def test_repeats_counts_exactly_and_times_rise(text: str, repeats: int, ttl_seconds: int) -> None:
    schedule = Schedule.parse(text)
    unbounded = sequence(NOW, schedule, repeats, None)
    assert len(unbounded) == repeats
    assert all(a < b for a, b in pairwise(unbounded))
    ttl = NOW + ttl_seconds * s
    assert sequence(NOW, schedule, repeats, ttl) == [t for t in unbounded if t <= ttl]


# --- misfires --------------------------------------------------------------------------------


def test_misfire_parse() -> None:
    assert Misfire.parse(None) is Misfire.FIRE_ONCE
    assert Misfire.parse("fire_all") is Misfire.FIRE_ALL
    assert Misfire.parse("SKIP") is Misfire.SKIP
    assert Misfire.parse(Misfire.SKIP) is Misfire.SKIP
    with pytest.raises(InvalidPolicy) as caught:
        Misfire.parse("sometimes")
    assert caught.value.field == "misfire"
    assert "'fire_once'" in str(caught.value) and "'sometimes'" in str(caught.value)


def test_a_future_occurrence_is_not_a_misfire() -> None:
    for misfire in Misfire:
        assert catch_up(EVERY_10S, NOW + s, NOW, misfire) == CatchUp((), NOW + s)


def test_fire_once_fires_the_oldest_missed_then_resumes_on_the_grid() -> None:
    # Due at 11:59:25; the shard was orphaned until 12:00:00: 25, 35, 45, 55 were missed.
    result = catch_up(EVERY_10S, NOW - 35 * s, NOW, Misfire.FIRE_ONCE)
    assert result == CatchUp((NOW - 35 * s,), NOW + 5 * s)


def test_fire_all_fires_every_missed_occurrence_in_order() -> None:
    result = catch_up(EVERY_10S, NOW - 35 * s, NOW, "fire_all")
    assert result == CatchUp(tuple(NOW - k * s for k in (35, 25, 15, 5)), NOW + 5 * s)


def test_skip_fires_nothing_and_resumes_on_the_grid() -> None:
    assert catch_up(EVERY_10S, NOW - 35 * s, NOW, "skip") == CatchUp((), NOW + 5 * s)


def test_an_occurrence_exactly_at_now_is_missed() -> None:
    assert catch_up(EVERY_10S, NOW, NOW, "fire_all") == CatchUp((NOW,), NOW + 10 * s)


def test_cron_catch_up_resumes_at_the_next_wall_time() -> None:
    result = catch_up(HOURLY, NOW - timedelta(hours=3), NOW + 30 * 60 * s, "fire_all")
    hours = [NOW - timedelta(hours=k) for k in (3, 2, 1, 0)]
    assert result == CatchUp(tuple(hours), NOW + timedelta(hours=1))


def test_catch_up_respects_repeats() -> None:
    # Two of four repeats already ended: fire_all may only fire two more, and then it is over.
    assert catch_up(EVERY_10S, NOW - 35 * s, NOW, "fire_all", fired=2, repeats=4) == CatchUp(
        (NOW - 35 * s, NOW - 25 * s), None
    )
    assert catch_up(EVERY_10S, NOW - 35 * s, NOW, "fire_once", fired=3, repeats=4) == CatchUp((NOW - 35 * s,), None)
    assert catch_up(EVERY_10S, NOW - 35 * s, NOW, "fire_once", fired=2, repeats=4) == CatchUp(
        (NOW - 35 * s,), NOW + 5 * s
    )
    # Skipped occurrences never ran, so they leave the repeats untouched.
    assert catch_up(EVERY_10S, NOW - 35 * s, NOW, "skip", fired=3, repeats=4) == CatchUp((), NOW + 5 * s)
    assert catch_up(EVERY_10S, NOW - 35 * s, NOW, "skip", fired=4, repeats=4) == CatchUp((), None)


def test_catch_up_stops_at_the_ttl() -> None:
    ttl = NOW + 2 * s
    assert catch_up(EVERY_10S, NOW - 35 * s, NOW, "fire_all", ttl=ttl) == CatchUp(
        tuple(NOW - k * s for k in (35, 25, 15, 5)), None
    )
    # Past its ttl the job is gone: nothing fires, however late.
    assert catch_up(EVERY_10S, NOW - 35 * s, NOW, "fire_all", ttl=NOW - 10 * s) == CatchUp((), None)


@pytest.mark.parametrize("misfire", list(Misfire))
def test_a_missed_one_shot_job_fires_once_whatever_the_policy(misfire: Misfire) -> None:
    assert catch_up(None, NOW - timedelta(hours=1), NOW, misfire) == CatchUp((NOW - timedelta(hours=1),), None)


@pytest.mark.parametrize("misfire", list(Misfire))
def test_a_one_shot_job_past_its_ttl_never_fires(misfire: Misfire) -> None:
    due = NOW - timedelta(minutes=10)
    assert catch_up(None, due, NOW, misfire, ttl=due + timedelta(minutes=5)) == CatchUp((), None)
    assert catch_up(None, NOW + s, NOW, misfire, ttl=NOW) == CatchUp((), None)


def test_fire_all_is_capped_and_resumes_on_the_grid() -> None:
    sub_second = Schedule.parse("@every 1ms")
    start = NOW - timedelta(days=1)
    result = catch_up(sub_second, start, NOW + timedelta(microseconds=500), "fire_all")
    assert len(result.fire_now) == FIRE_ALL_LIMIT
    assert result.fire_now[0] == start and result.fire_now[-1] == start + (FIRE_ALL_LIMIT - 1) * timedelta(milliseconds=1)
    assert result.next_due == NOW + timedelta(milliseconds=1)


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(["@every 7s", "@every 90s", "*/20 * * * * *", "0 */5 * * * *"]),
    st.integers(0, 1800),
    st.sampled_from(list(Misfire)),
    st.integers(0, 5),
    st.one_of(st.none(), st.integers(1, 40)),
    st.one_of(st.none(), st.integers(-600, 1800)),
)
def test_catch_up_stays_on_the_job_sequence(
    text: str, late_seconds: int, misfire: Misfire, fired: int, repeats: int | None, ttl_offset: int | None
) -> None:
    schedule = Schedule.parse(text)
    scheduled_for = NOW - late_seconds * s
    ttl = None if ttl_offset is None else NOW + ttl_offset * s
    result = catch_up(schedule, scheduled_for, NOW, misfire, fired, repeats, ttl)

    # Every time handed out is an occurrence of the job's own grid through scheduled_for.
    grid = sequence(scheduled_for, schedule, None, NOW + timedelta(hours=2))
    assert set(result.fire_now) <= set(grid)
    assert list(result.fire_now) == sorted(result.fire_now)
    assert all(t <= NOW for t in result.fire_now)
    assert result.next_due is None or (result.next_due > NOW and result.next_due in grid)
    assert result.next_due is None or ttl is None or result.next_due <= ttl
    # Limits: never past repeats, nothing at all once the ttl has passed.
    if repeats is not None:
        assert len(result.fire_now) <= max(0, repeats - fired)
    if ttl is not None and ttl < NOW:
        assert result == CatchUp((), None)
    # The policy decides how many of the missed occurrences run.
    missed = [t for t in grid if t <= NOW]
    room = len(missed) if repeats is None else max(0, min(len(missed), repeats - fired))
    if ttl is None or ttl >= NOW:
        expected = {Misfire.FIRE_ALL: room, Misfire.FIRE_ONCE: min(1, room), Misfire.SKIP: 0}[misfire]
        assert len(result.fire_now) == expected


def test_fire_all_replays_at_most_the_limit_wherever_the_catch_up_began():
    from cluster.model.occurrences import FIRE_ALL_LIMIT, cap_fire_all

    start = datetime(2030, 1, 1, tzinfo=timezone.utc)
    every = Schedule.parse("@every 1s")
    now = start + timedelta(seconds=4000)
    first = cap_fire_all(every, start, now)
    assert first == now - timedelta(seconds=FIRE_ALL_LIMIT - 1)  # exactly the limit left, on the grid
    assert cap_fire_all(every, first, now) == first  # within the limit: nothing more is skipped
    cron = Schedule.parse("* * * * * *")  # every second, the densest cron
    kept = cap_fire_all(cron, start, now)
    assert FIRE_ALL_LIMIT - 1 <= (now - kept).total_seconds() + 1 <= FIRE_ALL_LIMIT
    hourly = Schedule.parse("0 0 * * * *")  # 4000 s behind is two occurrences: all replayed
    assert cap_fire_all(hourly, start, now) == start
