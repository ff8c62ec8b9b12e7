"""What a pause says: who paused a job, since when, and why; and the rules its fields follow.

The pause itself is a record in the job's shard log (``cluster.runtime.shardlog``); this is the
shape a caller sees, and the checks run in the caller's process before anything is written.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cluster.model.errors import ValidationError
from cluster.model.wire import us_to_datetime

__all__ = ["MAX_NOTE_CHARS", "MAX_BY_CHARS", "PauseRecord", "check_note", "check_by"]

#: A note fits a registry entry's metadata (8 KiB on Azure, shared with the rest of the status)
#: even when every character is escaped.
MAX_NOTE_CHARS = 200
MAX_BY_CHARS = 128


@dataclass(frozen=True)
class PauseRecord:
    """A pause in force: the operator's ``note`` (or None), who paused (``by``) and ``since`` when."""

    note: str | None
    by: str
    since: datetime

    @classmethod
    def from_wire(cls, record: Any) -> PauseRecord:
        """From the shard log's ``[note, by, since_us]``."""
        note, by, since_us = record
        return cls(note, by, us_to_datetime(since_us))


def _check_text(value: object, field: str, limit: int) -> str:
    if not isinstance(value, str):
        raise ValidationError(field, "must be a str", value)
    if len(value) > limit:
        raise ValidationError(field, f"must be at most {limit} characters (got {len(value)})")
    if not value.isprintable():
        raise ValidationError(field, "must not contain control or other non-printable characters", value)
    return value


def check_note(note: object) -> str | None:
    """Return ``note`` if it is None or a printable str of at most 200 characters, else raise ``ValidationError``."""
    return None if note is None else _check_text(note, "note", MAX_NOTE_CHARS)


def check_by(by: object) -> str:
    """Return ``by`` if it is a non-empty printable str of at most 128 characters, else raise ``ValidationError``."""
    if by == "":
        raise ValidationError("by", "must be a non-empty str", by)
    return _check_text(by, "by", MAX_BY_CHARS)
