from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cluster.model.errors import InvalidTime
from cluster.model.times import format_duration, parse_duration, parse_period, parse_time, utc_now

UTC = timezone.utc
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2h30m", timedelta(hours=2, minutes=30)),
        ("1m30s", timedelta(minutes=1, seconds=30)),
        ("500ms", timedelta(milliseconds=500)),
        ("1.5h", timedelta(minutes=90)),
        ("300us", timedelta(microseconds=300)),
        ("300\u00b5s", timedelta(microseconds=300)),
        ("300\u03bcs", timedelta(microseconds=300)),
        ("1500ns", timedelta(microseconds=2)),  # nanoseconds round to the microsecond
        (".5s", timedelta(milliseconds=500)),
        ("+10s", timedelta(seconds=10)),
        ("0", timedelta(0)),
        ("1h1h", timedelta(hours=2)),  # Go sums repeated units
        ("PT2H30M", timedelta(hours=2, minutes=30)),
        ("P1DT2H", timedelta(days=1, hours=2)),
        ("P2W", timedelta(weeks=2)),
        ("PT0.5S", timedelta(milliseconds=500)),
        ("PT0,25S", timedelta(milliseconds=250)),
        ("pt3s", timedelta(seconds=3)),
        (" 2h ", timedelta(hours=2)),
        (timedelta(seconds=7), timedelta(seconds=7)),
    ],
)
def test_relative_forms_count_from_now(text: object, expected: timedelta) -> None:
    assert parse_time(text, NOW) == NOW + expected
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-10-02T15:00:00Z", datetime(2026, 10, 2, 15, tzinfo=UTC)),
        ("2026-10-02t15:00:00z", datetime(2026, 10, 2, 15, tzinfo=UTC)),
        ("2026-10-02 15:00:00Z", datetime(2026, 10, 2, 15, tzinfo=UTC)),
        ("2026-10-02T17:00:00+02:00", datetime(2026, 10, 2, 15, tzinfo=UTC)),
        ("2026-10-02T10:30:00-04:30", datetime(2026, 10, 2, 15, tzinfo=UTC)),
        ("2026-10-02T15:00:00.25Z", datetime(2026, 10, 2, 15, 0, 0, 250_000, tzinfo=UTC)),
        ("2026-10-02T15:00:00.123456789Z", datetime(2026, 10, 2, 15, 0, 0, 123_457, tzinfo=UTC)),
        ("2026-12-31T23:59:59.9999999Z", datetime(2027, 1, 1, tzinfo=UTC)),
    ],
)
def test_rfc3339_gives_the_utc_instant(text: str, expected: datetime) -> None:
    result = parse_time(text, NOW)
    assert result == expected
    assert result.tzinfo is UTC


def test_aware_datetime_is_converted_to_utc_and_ignores_now() -> None:
    berlin = datetime(2026, 7, 1, 14, 0, tzinfo=ZoneInfo("Europe/Berlin"))
    result = parse_time(berlin, NOW)
    assert result == datetime(2026, 7, 1, 12, 0, tzinfo=UTC)
    assert result.tzinfo is UTC


def test_now_defaults_to_the_current_utc_time() -> None:
    before = utc_now()
    result = parse_time("1h")
    after = utc_now()
    assert before + timedelta(hours=1) <= result <= after + timedelta(hours=1)
    assert result.tzinfo is UTC


@pytest.mark.parametrize(
    ("value", "rule_part"),
    [
        (datetime(2026, 10, 2, 15), "timezone-aware"),
        ("2026-10-02T15:00:00", "no UTC offset"),
        ("2026-10-02", "not a valid RFC 3339"),
        ("2026-13-02T15:00:00Z", "not a valid RFC 3339"),
        ("2026-10-02T15:00:00+02:75", "not a valid RFC 3339"),
        ("-5s", "must not be negative"),
        ("-PT5S", "must not be negative"),
        (timedelta(seconds=-1), "must not be negative"),
        ("P1Y", "years and months"),
        ("P1M", "years and months"),
        ("5", "cannot be read"),
        ("5 minutes", "cannot be read"),
        ("2h30", "cannot be read"),
        ("P", "cannot be read"),
        ("PT", "cannot be read"),
        ("P1DT", "cannot be read"),
        ("", "cannot be read"),
        (5, "cannot be read"),
        ("R4/PT3S", "cannot be read"),
        ("99999999999999999999h", "too large"),
    ],
)
def test_bad_times_name_the_field_quote_the_input_and_list_the_forms(value: object, rule_part: str) -> None:
    with pytest.raises(InvalidTime) as caught:
        parse_time(value, NOW, field="ttl")
    error = caught.value
    assert isinstance(error, ValueError)
    assert error.field == "ttl"
    assert rule_part in error.rule
    message = str(error)
    assert message.startswith("ttl: ")
    assert repr(value) in message
    if not isinstance(value, datetime):
        assert "RFC 3339" in message and "Go duration" in message and "ISO 8601" in message


def test_relative_time_past_year_9999_is_an_invalid_time() -> None:
    with pytest.raises(InvalidTime, match="9999"):
        parse_time("P3650000D", NOW)


def test_naive_now_is_rejected() -> None:
    with pytest.raises(InvalidTime) as caught:
        parse_time("1h", datetime(2026, 1, 1))
    assert caught.value.field == "now"


def test_parse_duration_rejects_timestamps() -> None:
    with pytest.raises(InvalidTime) as caught:
        parse_duration("2026-10-02T15:00:00Z", field="delay")
    assert caught.value.field == "delay"
    assert "RFC 3339" not in str(caught.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("R4/PT3S", (timedelta(seconds=3), 4)),
        ("r4/pt3s", (timedelta(seconds=3), 4)),
        ("R/PT3S", (timedelta(seconds=3), None)),
        ("R10/1m", (timedelta(minutes=1), 10)),
        ("PT3S", (timedelta(seconds=3), None)),
        ("3s", (timedelta(seconds=3), None)),
        (timedelta(seconds=3), (timedelta(seconds=3), None)),
    ],
)
def test_reminder_periods(text: object, expected: tuple[timedelta, int | None]) -> None:
    assert parse_period(text) == expected


@pytest.mark.parametrize(("text", "rule_part"), [("R0/PT3S", "at least 1"), ("R4/PT0S", "greater than zero"),
                                                 ("0s", "greater than zero"), ("R4/", "cannot be read"),
                                                 ("R4/2026-10-02T15:00:00Z", "cannot be read"),
                                                 ("R-1/PT3S", "cannot be read")])
def test_bad_reminder_periods(text: str, rule_part: str) -> None:
    with pytest.raises(InvalidTime) as caught:
        parse_period(text)
    assert caught.value.field == "period"
    assert rule_part in caught.value.rule
    assert "R4/PT3S" in str(caught.value)


@pytest.mark.parametrize(
    ("td", "text"),
    [
        (timedelta(0), "0s"),
        (timedelta(hours=2, minutes=30), "2h30m"),
        (timedelta(seconds=1.5), "1.5s"),
        (timedelta(milliseconds=500), "500ms"),
        (timedelta(microseconds=1234), "1.234ms"),
        (timedelta(microseconds=7), "7us"),
        (timedelta(days=2), "48h"),
        (timedelta(hours=1, seconds=5), "1h5s"),
        (timedelta(minutes=-90), "-1h30m"),
    ],
)
def test_format_duration_is_compact_go_text(td: timedelta, text: str) -> None:
    assert format_duration(td) == text


durations = st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=100_000))


@given(durations)
def test_format_then_parse_round_trips(td: timedelta) -> None:
    assert parse_duration(format_duration(td)) == td


@given(
    st.integers(0, 10_000), st.integers(0, 10_000), st.integers(0, 10_000), st.integers(0, 999_999)
)
def test_go_and_iso_spellings_agree(hours: int, minutes: int, seconds: int, micros: int) -> None:
    fraction = f"{seconds}.{micros:06d}"
    expected = timedelta(hours=hours, minutes=minutes, seconds=seconds, microseconds=micros)
    assert parse_duration(f"{hours}h{minutes}m{fraction}s") == expected
    assert parse_duration(f"PT{hours}H{minutes}M{fraction}S") == expected


@given(
    st.datetimes(
        timezones=st.timezones(), min_value=datetime(1900, 1, 2), max_value=datetime(9998, 12, 30), allow_imaginary=False
    )
)
def test_rfc3339_round_trips_any_aware_datetime(dt: datetime) -> None:
    # isoformat() prints offsets with seconds for a few historic zones; RFC 3339 has none.
    offset = dt.utcoffset()
    if offset is not None and offset.seconds % 60 == 0 and offset.microseconds == 0:
        # Compare in UTC: Python never calls a time in a repeated hour equal across zones.
        assert parse_time(dt.isoformat(), NOW) == dt.astimezone(UTC)
        assert parse_time(dt, NOW) == dt.astimezone(UTC)
