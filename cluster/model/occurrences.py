"""When a job fires: its occurrences in virtual time, and what to do with the ones a silo missed.

Every next fire time is computed from the previous *scheduled* time, never from the clock, so a
slow handler, a late silo or a failover never shifts a job's grid (``@every 10s`` due at 12:00:00
fires at 12:00:10, 12:00:20 ... however late each fire ran). These are pure functions of their
arguments: callers pass ``now``.

Rules shared by every function here:

- ``fired`` counts occurrences that *ended* (succeeded, or failed and given up), the previous
  one included; ``repeats`` (None: unbounded) caps it. Occurrences skipped by a misfire policy
  never ran, so they do not count.
- ``ttl`` is a hard deadline (the instant the job expires, inclusive): nothing is scheduled after
  it, and once ``now`` is past it nothing fires at all, late or not.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum
from typing import TypeVar

from cluster.model.errors import InvalidPolicy
from cluster.model.schedules import Schedule
from cluster.model.times import require_aware

__all__ = ["BUFFER_ALL_LIMIT", "FIRE_ALL_LIMIT", "CatchUp", "Misfire", "Overlap", "Overlapped", "cap_fire_all",
           "catch_up", "first_occurrence", "next_occurrence", "overlapped"]

# fire_all replays at most this many missed occurrences back to back: enough for any realistic
# outage of a human-scale schedule, while a sub-second @every down for a day cannot flood its
# handler with millions of calls. Occurrences past the limit are skipped.
FIRE_ALL_LIMIT = 1000
_CRON_MIN_GAP = timedelta(seconds=1)  # cron's finest field is the second
# buffer_all keeps at most this many occurrences waiting behind a running one; older ones beyond
# it are skipped (and counted). A handler that is always slower than its schedule falls behind
# without bound otherwise; 100 waiting occurrences is already 100 periods of backlog.
BUFFER_ALL_LIMIT = 100
# Occurrences counted one by one when a cron job overlaps (an @every job is counted in O(1)):
# a run longer than this many cron fires has its further skips counted up to here only.
_COUNT_LIMIT = 10_000


class Misfire(str, Enum):
    """What happens to occurrences that came due while no silo owned the job's shard."""

    FIRE_ONCE = "fire_once"  # one catch-up fire, then the next future occurrence (default)
    FIRE_ALL = "fire_all"  # every missed occurrence back to back (Dapr), up to FIRE_ALL_LIMIT
    SKIP = "skip"  # none of them: wait for the next future occurrence

    @classmethod
    def parse(cls, value: Misfire | str | None, *, field: str = "misfire") -> Misfire:
        """The policy ``value`` names (None: the default, FIRE_ONCE); raises InvalidPolicy."""
        return _parse_policy(cls, value, cls.FIRE_ONCE, field, "a misfire policy")


class Overlap(str, Enum):
    """What happens to occurrences of a recurring job that come due while an earlier one is in flight.

    A job's occurrences never run at the same time: its next occurrence is written only once the
    previous one ended (see ``cluster.runtime.outcomes``). The policy decides, when it ends, what
    becomes of those that came due meanwhile (see :func:`overlapped`).
    """

    ALLOW_ALL = "allow_all"  # today's rule: misfire_grace and the misfire policy decide (default)
    SKIP = "skip"  # none of them runs: the next occurrence after the end; each one counted
    BUFFER_ONE = "buffer_one"  # the latest of them runs at once; the older ones are skipped
    BUFFER_ALL = "buffer_all"  # they run back to back, oldest first, at most BUFFER_ALL_LIMIT waiting
    CANCEL_OTHER = "cancel_other"  # the running attempt is stopped when the next comes due, which starts

    @classmethod
    def parse(cls, value: Overlap | str | None, *, field: str = "overlap") -> Overlap:
        """The policy ``value`` names (None: the default, ALLOW_ALL); raises InvalidPolicy."""
        return _parse_policy(cls, value, cls.ALLOW_ALL, field, "an overlap policy")


_Policy = TypeVar("_Policy", Misfire, Overlap)


def _parse_policy(cls: type[_Policy], value: object, default: _Policy, field: str, what: str) -> _Policy:
    """``value`` as one of ``cls``'s policies, case-insensitively (None: ``default``)."""
    if value is None:
        return default
    if type(value) is cls:  # a member already: what cls(value) returns
        return value
    try:
        return cls(value.lower() if isinstance(value, str) else value)
    except ValueError:
        accepted = ", ".join(repr(m.value) for m in cls)
        raise InvalidPolicy(field, f"is not {what}", value, accepted=accepted) from None


@dataclass(frozen=True)
class Overlapped:
    """The outcome of :func:`overlapped`: the occurrence to queue next (None: the job has none
    left), how many came due before the end and are skipped, and whether ``next_due`` waited."""

    next_due: datetime | None
    skipped: int
    buffered: bool


def overlapped(
    policy: Overlap,
    schedule: Schedule,
    following: datetime,
    ended: datetime,
    ttl: datetime | None = None,
) -> Overlapped:
    """What a policy other than ``allow_all`` makes of the occurrences due by ``ended``.

    ``following`` is the occurrence after the one that just ended (from ``next_occurrence``:
    within ``repeats`` and ``ttl``); ``ended`` is when that one ended. The occurrences from
    ``following`` up to ``ended`` (and ``ttl``) came due while it was in flight:

    - ``skip``: none of them runs; the job goes on at the first occurrence after ``ended``;
    - ``buffer_one`` and ``cancel_other``: the latest of them runs at once, the others are skipped
      (the one that waits is always the newest: a later one replaces it);
    - ``buffer_all``: they run back to back, oldest first; beyond the latest ``BUFFER_ALL_LIMIT``
      the oldest are skipped.

    Pure: everything follows from the grid, so the waiting occurrences need no memory of their
    own and a replay decides the same. Skipped occurrences never ran and do not count towards
    ``repeats``.
    """
    if following > ended:
        return Overlapped(following, 0, False)
    last = ended if ttl is None or ttl > ended else ttl
    if policy is Overlap.SKIP:
        due = _first_after(schedule, following, ended)
        waiting = _count(schedule, following, last)
        return Overlapped(None if _expired(due, ttl) else due, waiting, False)
    keep = BUFFER_ALL_LIMIT if policy is Overlap.BUFFER_ALL else 1
    waiting = _count(schedule, following, last)
    if waiting <= keep:
        return Overlapped(following, 0, True)
    return Overlapped(_nth(schedule, following, waiting - keep), waiting - keep, True)


def _count(schedule: Schedule, first: datetime, last: datetime) -> int:
    """Occurrences from ``first`` (one of them) up to ``last``, inclusive; at least 1."""
    if schedule.period is not None:
        return (last - first) // schedule.period + 1
    return max(1, len(_missed(schedule, first, last, _COUNT_LIMIT)))


def _nth(schedule: Schedule, first: datetime, n: int) -> datetime:
    """The occurrence ``n`` places after ``first`` on its grid."""
    if schedule.period is not None:
        return first + n * schedule.period
    current = first
    for _ in range(n):
        current = schedule.next_after(current)
    return current


@dataclass(frozen=True)
class CatchUp:
    """The outcome of :func:`catch_up`: fire ``fire_now`` in order at once, then wait for
    ``next_due`` (None: the job is finished once those fires end)."""

    fire_now: tuple[datetime, ...]
    next_due: datetime | None


def first_occurrence(due: datetime | None, schedule: Schedule | None, now: datetime) -> datetime:
    """The first fire time: ``due`` if given, else the schedule's first time after ``now``,
    else ``now`` (a one-shot job with no due time fires at once)."""
    now = require_aware(now, field="now")
    if due is not None:
        return require_aware(due, field="due")
    if schedule is not None:
        return schedule.next_after(now)
    return now


def next_occurrence(
    schedule: Schedule | None,
    previous_scheduled: datetime,
    fired: int,
    repeats: int | None,
    ttl: datetime | None,
) -> datetime | None:
    """The occurrence after the one scheduled at ``previous_scheduled``, or None when the job
    has none left (no schedule, ``repeats`` reached, or the next time falls after ``ttl``)."""
    if schedule is None or _exhausted(fired, repeats):
        return None
    following = schedule.next_after(previous_scheduled)
    return None if _expired(following, ttl) else following


def catch_up(
    schedule: Schedule | None,
    scheduled_for: datetime,
    now: datetime,
    misfire: Misfire | str = Misfire.FIRE_ONCE,
    fired: int = 0,
    repeats: int | None = None,
    ttl: datetime | None = None,
) -> CatchUp:
    """What to fire now for a pending occurrence scheduled at ``scheduled_for``, found when a
    shard is loaded or adopted, and when the job fires next.

    Occurrences at or before ``now`` were missed. ``fire_once`` fires the oldest missed one
    (the handler sees how late it is) and resumes at the first occurrence after ``now``;
    ``fire_all`` fires every missed one in order (at most :data:`FIRE_ALL_LIMIT`); ``skip``
    fires none. A one-shot job (no schedule) always fires its missed occurrence whatever the
    policy: skipping it would lose the job. The grid is kept: an ``@every`` job resumes on
    ``scheduled_for + k * period``, not on ``now + period``.
    """
    misfire = Misfire.parse(misfire)
    now = require_aware(now, field="now")
    scheduled_for = require_aware(scheduled_for, field="scheduled_for")
    if _expired(now, ttl) or _expired(scheduled_for, ttl) or _exhausted(fired, repeats):
        return CatchUp((), None)
    if scheduled_for > now:
        return CatchUp((), scheduled_for)
    if schedule is None:
        return CatchUp((scheduled_for,), None)
    if misfire is Misfire.FIRE_ALL:
        missed = _missed(schedule, scheduled_for, now, _room(fired, repeats))
    elif misfire is Misfire.FIRE_ONCE:
        missed = (scheduled_for,)
    else:
        missed = ()
    after = fired + len(missed)
    if _exhausted(after, repeats):
        return CatchUp(missed, None)
    following = _first_after(schedule, scheduled_for, now)
    return CatchUp(missed, None if _expired(following, ttl) else following)


def cap_fire_all(schedule: Schedule, pending: datetime, now: datetime) -> datetime:
    """The first occurrence to replay when ``pending`` and those after it up to ``now`` were
    missed under ``fire_all``: ``pending`` itself, or a later one so that at most
    :data:`FIRE_ALL_LIMIT` remain — the oldest beyond the limit are skipped.

    Applied every time a late occurrence ends, so a long outage replays at most the limit however
    the catch-up began (a load, an adoption, or firing that fell behind).
    """
    if schedule.period is not None:
        missed = (now - pending) // schedule.period + 1
        return pending + max(0, missed - FIRE_ALL_LIMIT) * schedule.period
    if now - pending <= FIRE_ALL_LIMIT * _CRON_MIN_GAP:
        return pending  # cron fires at most once a second: no more than the limit fit here
    times = _missed(schedule, pending, now, FIRE_ALL_LIMIT + 1)
    if len(times) <= FIRE_ALL_LIMIT:
        return pending
    # More than the limit: replay those in the last stretch as long as the first limit's span.
    return schedule.next_after(now - (times[-1] - times[0]))


def _missed(schedule: Schedule, scheduled_for: datetime, now: datetime, room: int) -> tuple[datetime, ...]:
    """Occurrences from ``scheduled_for`` up to ``now``, oldest first, at most ``room``."""
    times: list[datetime] = []
    current = scheduled_for
    while current <= now and len(times) < room:
        times.append(current)
        current = schedule.next_after(current)
    return tuple(times)


def _first_after(schedule: Schedule, anchor: datetime, now: datetime) -> datetime:
    """The first occurrence strictly after ``now`` on the grid that runs through ``anchor``."""
    if schedule.period is not None:
        # O(1) even after a long outage; a cron schedule's grid is absolute, so next_after(now) is.
        periods = (now - anchor) // schedule.period + 1
        return anchor + periods * schedule.period
    return schedule.next_after(now)


def _room(fired: int, repeats: int | None) -> int:
    return FIRE_ALL_LIMIT if repeats is None else min(FIRE_ALL_LIMIT, repeats - fired)


def _exhausted(fired: int, repeats: int | None) -> bool:
    return repeats is not None and fired >= repeats


def _expired(when: datetime, ttl: datetime | None) -> bool:
    return ttl is not None and when > ttl
