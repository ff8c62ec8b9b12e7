"""Due times, durations and reminder periods in the forms Dapr and Orleans users already write.

Accepted forms (the same list every error message quotes):

- an aware ``datetime`` (converted to UTC; a naive one is rejected: its zone would be a guess);
- a ``timedelta``, relative to ``now``;
- RFC 3339 text, ``2026-10-02T15:00:00Z`` or ``2026-10-02T17:00:00.5+02:00``; text without an
  offset is rejected for the same reason as a naive datetime;
- a Go duration, ``2h30m``, ``1m30s``, ``500ms``, ``1.5h``, ``300us`` (also ``µs``), ``10ns``;
- an ISO 8601 duration, ``PT2H30M``, ``P1DT2H``, ``P2W``, fractions allowed (``PT0.5S``).

Durations are exact to the microsecond (``timedelta``'s resolution): numbers are parsed as
fractions, never floats, and nanoseconds round to the nearest microsecond. ISO 8601 years and
months (``P1Y``, ``P1M``) are rejected rather than guessed: their length depends on the calendar
date they start from; use days (``P30D``) or a cron schedule. Negative durations are rejected:
a delay, a period or a relative due time that points backwards is always a mistake.

Nothing here reads the clock except :func:`utc_now` and :func:`parse_time` when it is given no
``now``: pass ``now`` explicitly wherever the answer must be reproducible.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from fractions import Fraction

from cluster.model.errors import InvalidTime

__all__ = [
    "ACCEPTED_DURATIONS",
    "ACCEPTED_TIMES",
    "format_duration",
    "parse_duration",
    "parse_period",
    "parse_time",
    "require_aware",
    "utc_now",
]

ACCEPTED_DURATIONS = (
    "timedelta, Go duration ('2h30m', '1m30s', '500ms', '1.5h', '300us'), "
    "ISO 8601 duration ('PT2H30M', 'P1DT2H', 'P2W')"
)
ACCEPTED_TIMES = (
    "aware datetime, RFC 3339 ('2026-10-02T15:00:00Z', '2026-10-02T17:00:00+02:00'), " + ACCEPTED_DURATIONS
)
ACCEPTED_PERIODS = "'R4/PT3S' (4 repeats), 'R/PT3S' (unbounded), or a duration: " + ACCEPTED_DURATIONS

_NS_PER_UNIT = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,  # micro sign, what Go prints
    "\u03bcs": 1_000,  # Greek mu, what people type
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3600 * 1_000_000_000,
}
_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
_GO_PART = re.compile(rf"({_NUMBER})(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")
_GO_DURATION = re.compile(rf"([+-]?)((?:{_NUMBER}(?:ns|us|\u00b5s|\u03bcs|ms|s|m|h))+)")
_ISO_NUMBER = r"\d+(?:[.,]\d+)?"
_ISO_DURATION = re.compile(
    rf"([+-]?)P(?:(?P<Y>{_ISO_NUMBER})Y)?(?:(?P<M>{_ISO_NUMBER})M)?(?:(?P<W>{_ISO_NUMBER})W)?"
    rf"(?:(?P<D>{_ISO_NUMBER})D)?"
    rf"(?:T(?:(?P<TH>{_ISO_NUMBER})H)?(?:(?P<TM>{_ISO_NUMBER})M)?(?:(?P<TS>{_ISO_NUMBER})S)?)?",
    re.IGNORECASE,
)
_ISO_SECONDS = {"W": 7 * 86400, "D": 86400, "TH": 3600, "TM": 60, "TS": 1}
_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?P<offset>[Zz]|[+-]\d{2}:\d{2})?"
)
_PERIOD = re.compile(r"R(\d*)/(.+)", re.IGNORECASE)


def utc_now() -> datetime:
    """The current time as an aware UTC datetime (the one clock read in this module)."""
    return datetime.now(timezone.utc)


def require_aware(value: object, *, field: str, error: type[InvalidTime] = InvalidTime) -> datetime:
    """``value`` as an aware UTC datetime; a naive datetime or a non-datetime raises ``error``."""
    if not isinstance(value, datetime):
        raise error(field, "must be an aware datetime", value)
    if value.tzinfo is None or value.utcoffset() is None:
        raise error(field, "must be timezone-aware (a naive datetime has no defined instant)", value)
    return value.astimezone(timezone.utc)


def parse_time(value: object, now: datetime | None = None, *, field: str = "due") -> datetime:
    """The aware UTC instant that ``value`` names; relative forms count from ``now``.

    ``now`` defaults to the current UTC time and is read only when ``value`` is relative.
    Raises :class:`~cluster.model.errors.InvalidTime` naming ``field``, quoting the input and listing
    the accepted forms.
    """
    if isinstance(value, datetime):
        return require_aware(value, field=field)
    if isinstance(value, str):
        text = value.strip()
        _check_digits(text, value, field, ACCEPTED_TIMES)
        match = _RFC3339.fullmatch(text)
        if match is not None:
            return _rfc3339(value, match, field)
        if _looks_like_timestamp(text):
            raise InvalidTime(field, "is not a valid RFC 3339 timestamp", value, accepted=ACCEPTED_TIMES)
    delta = _duration_or_none(value, field, ACCEPTED_TIMES)
    if delta is None:
        raise InvalidTime(field, "cannot be read as a time", value, accepted=ACCEPTED_TIMES)
    base = utc_now() if now is None else require_aware(now, field="now")
    try:
        return base + delta
    except OverflowError:
        raise InvalidTime(field, "is beyond the year 9999", value, accepted=ACCEPTED_TIMES) from None


def parse_duration(value: object, *, field: str = "duration") -> timedelta:
    """The non-negative ``timedelta`` that ``value`` names (a timedelta, Go or ISO 8601 text)."""
    delta = _duration_or_none(value, field, ACCEPTED_DURATIONS)
    if delta is None:
        raise InvalidTime(field, "cannot be read as a duration", value, accepted=ACCEPTED_DURATIONS)
    return delta


def parse_period(text: object, *, field: str = "period") -> tuple[timedelta, int | None]:
    """An actor-reminder period as ``(interval, repeats)``: ``'R4/PT3S'`` gives ``(3 s, 4)``.

    ``'R/PT3S'`` and a plain duration (``'3s'``, ``'PT3S'``) repeat without bound (``None``). The
    interval must be positive: it becomes an ``@every`` schedule.
    """
    repeats: int | None = None
    body: object = text
    if isinstance(text, str):
        _check_digits(text, text, field, ACCEPTED_PERIODS)
        match = _PERIOD.fullmatch(text.strip())
        if match is not None:
            count, body = match.group(1), match.group(2)
            if count:
                repeats = int(count)
                if repeats < 1:
                    raise InvalidTime(field, "repeat count must be at least 1", text, accepted=ACCEPTED_PERIODS)
    delta = _duration_or_none(body, field, ACCEPTED_PERIODS)
    if delta is None:
        raise InvalidTime(field, "cannot be read as a period", text, accepted=ACCEPTED_PERIODS)
    if delta <= timedelta(0):
        raise InvalidTime(field, "interval must be greater than zero", text, accepted=ACCEPTED_PERIODS)
    return delta, repeats


def format_duration(td: timedelta) -> str:
    """Compact Go-style text for ``td`` (``2h30m``, ``1.5s``, ``500ms``) that parse_duration reads back."""
    total_us = (td.days * 86400 + td.seconds) * 1_000_000 + td.microseconds
    if total_us == 0:
        return "0s"
    sign = "-" if total_us < 0 else ""
    total_us = abs(total_us)
    if total_us < 1_000_000:
        # Below a second Go switches to the largest unit that keeps an integer part.
        unit, size = ("ms", 1_000) if total_us >= 1_000 else ("us", 1)
        return f"{sign}{_decimal(total_us, size)}{unit}"
    hours, rest = divmod(total_us, 3600 * 1_000_000)
    minutes, rest = divmod(rest, 60 * 1_000_000)
    parts = [sign]
    if hours:
        parts.append(f"{hours}h")
    if minutes:
        parts.append(f"{minutes}m")
    if rest:
        parts.append(f"{_decimal(rest, 1_000_000)}s")
    return "".join(parts)


def _decimal(amount: int, unit: int) -> str:
    """``amount / unit`` as the shortest exact decimal (unit is a power of ten)."""
    whole, frac = divmod(amount, unit)
    if not frac:
        return str(whole)
    digits = str(frac).rjust(len(str(unit)) - 1, "0").rstrip("0")
    return f"{whole}.{digits}"


def _duration_or_none(value: object, field: str, accepted: str) -> timedelta | None:
    """A parsed non-negative duration, ``None`` if ``value`` is not a duration form at all."""
    if isinstance(value, timedelta):
        delta = value
        sign = "-" if value < timedelta(0) else ""
    elif isinstance(value, str):
        parsed = _parse_duration_text(value.strip(), value, field, accepted)
        if parsed is None:
            return None
        sign, delta = parsed
    else:
        return None
    if sign == "-" and delta != timedelta(0):
        raise InvalidTime(field, "must not be negative", value, accepted=accepted)
    return abs(delta)


def _parse_duration_text(text: str, original: str, field: str, accepted: str) -> tuple[str, timedelta] | None:
    if text in ("0", "+0", "-0"):  # Go's one unit-less duration
        return "", timedelta(0)
    _check_digits(text, original, field, accepted)
    match = _GO_DURATION.fullmatch(text)
    if match is not None:
        nanos = sum((Fraction(number) * _NS_PER_UNIT[unit] for number, unit in _GO_PART.findall(match.group(2))), Fraction(0))
        return match.group(1), _from_seconds(nanos / 1_000_000_000, original, field, accepted)
    match = _ISO_DURATION.fullmatch(text)
    if match is None or not any(match.groupdict().values()) or text.upper().endswith("T"):
        return None
    if match.group("Y") or match.group("M"):
        raise InvalidTime(
            field,
            "ISO 8601 years and months have no fixed length; use days (P30D) or a cron schedule",
            original,
            accepted=accepted,
        )
    seconds = sum((
        Fraction(number.replace(",", ".")) * _ISO_SECONDS[unit]
        for unit, number in match.groupdict().items()
        if number is not None
    ), Fraction(0))
    return match.group(1), _from_seconds(seconds, original, field, accepted)


# No meaningful time needs more digits; Python refuses to convert beyond 4,300 digits anyway, and
# long digit strings cost quadratic time to convert.
MAX_DIGITS = 30
_DIGIT_RUN = re.compile(rf"\d{{{MAX_DIGITS + 1},}}")


def _check_digits(text: str, original: object, field: str, accepted: str) -> None:
    if _DIGIT_RUN.search(text) is not None:
        raise InvalidTime(field, f"has a number longer than {MAX_DIGITS} digits", original, accepted=accepted)


def _from_seconds(seconds: Fraction, original: str, field: str, accepted: str) -> timedelta:
    try:
        return timedelta(microseconds=round(seconds * 1_000_000))
    except OverflowError:
        raise InvalidTime(field, "is too large", original, accepted=accepted) from None


def _looks_like_timestamp(text: str) -> bool:
    """True for text shaped like a date, so the error says 'timestamp' rather than 'unknown form'."""
    return re.match(r"\d{4}-\d{2}-\d{2}", text) is not None


def _rfc3339(original: str, match: re.Match[str], field: str) -> datetime:
    offset_text = match.group("offset")
    if offset_text is None:
        raise InvalidTime(
            field, "timestamp has no UTC offset; add 'Z' or '+HH:MM'", original, accepted=ACCEPTED_TIMES
        )
    year, month, day, hour, minute, second = (int(match.group(i)) for i in range(1, 7))
    fraction = match.group(7) or "0"
    try:
        if offset_text in ("Z", "z"):
            tz = timezone.utc
        else:
            sign = -1 if offset_text[0] == "-" else 1
            off_h, off_m = int(offset_text[1:3]), int(offset_text[4:6])
            if off_m >= 60:
                raise ValueError("offset minutes out of range")
            tz = timezone(sign * timedelta(hours=off_h, minutes=off_m))
        base = datetime(year, month, day, hour, minute, second, tzinfo=tz)
        micros = round(Fraction(int(fraction), 10 ** len(fraction)) * 1_000_000)
        return (base + timedelta(microseconds=micros)).astimezone(timezone.utc)
    except (ValueError, OverflowError) as exc:
        raise InvalidTime(field, f"is not a valid RFC 3339 timestamp ({exc})", original, accepted=ACCEPTED_TIMES) from None
