"""Checks of a new job's fields (``ScheduledJob.create``): each bad value a typed error naming the field."""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Mapping
from typing import Any

from cluster.model.errors import InvalidJob
from cluster.model.limits import JobLimits
from cluster.model.schedules import Schedule
from cluster.model.times import parse_period
from cluster.model.wire import pack, unpack

__all__ = ["check_label", "check_unicode", "metadata_of", "normalized_data", "schedule_of", "with_max_bytes"]

_REMINDER_PERIOD = re.compile(r"\s*R\d*/", re.IGNORECASE)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")  # what a label must not hold (a test a character cost ~2 us a name)


def with_max_bytes(limits: JobLimits, max_bytes: int) -> JobLimits:
    """``limits`` with ``max_bytes``: made once per pair, not once per job (~2 us each)."""
    try:
        return _with_max_bytes(limits, max_bytes)
    except TypeError:  # unhashable (prefixes given as a list): made each time, as before
        return dataclasses.replace(limits, max_bytes=max_bytes)


@functools.lru_cache(maxsize=16)
def _with_max_bytes(limits: JobLimits, max_bytes: int) -> JobLimits:
    return dataclasses.replace(limits, max_bytes=max_bytes)


def check_label(value: object, field_name: str) -> None:
    if not isinstance(value, str) or not value:
        raise InvalidJob(field_name, "must be a non-empty str", value)
    if _CONTROL.search(value):
        raise InvalidJob(field_name, "must not contain control characters", value)
    check_unicode(value, field_name)


def check_unicode(value: str, field_name: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidJob(field_name, "must be valid Unicode text (no lone surrogates)", value) from None


def schedule_of(value: Schedule | str | None) -> tuple[Schedule | None, int | None]:
    """Return the schedule and, for an actor-reminder period (``R4/PT3S``), its repeat count."""
    if value is None or isinstance(value, Schedule):
        return value, None
    if not isinstance(value, str):
        raise InvalidJob("schedule", "must be a Schedule, schedule text or None", value)
    if _REMINDER_PERIOD.match(value):
        interval, repeats = parse_period(value, field="schedule")
        return Schedule.every(interval), repeats
    return Schedule.parse(value), None


def metadata_of(value: Mapping[str, str] | None) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidJob("metadata", "must be a mapping of str to str", value)
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise InvalidJob("metadata", "keys and values must be str", {key: item})
        check_unicode(key, "metadata")
        check_unicode(item, "metadata")
    return dict(value)


def normalized_data(value: Any) -> Any:
    """Return ``value`` as a replay will see it (tuples become lists); its size is a limit."""
    if value is None:  # the common case: packed and read back, still None
        return None
    rule = "must be msgpack-encodable (None, bool, int within 64 bits, float, str, bytes, list, dict)"
    try:
        packed = pack(value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidJob("data", f"{rule}: {exc}", type(value).__name__) from None
    try:
        return unpack(packed)
    except (TypeError, ValueError) as exc:
        # A tuple key packs as an array, which cannot key a dict when read back.
        raise InvalidJob("data", f"{rule}, with str, int, float, bool, bytes or None as dict keys: {exc}",
                         type(value).__name__) from None
